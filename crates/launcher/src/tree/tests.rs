//! The tree level under a recorder: several runs of one tree, the one
//! routing rule, losses ending only the runs they touch, the pool's timer;
//! the tree's invariants after every event.

use dpm_kvs::{JobId, NodeId, Rank};
use dpm_proto::link::Up;
use dpm_proto::{AppSpec, ExitStatus, LaunchJob, PmiMode, PmiProgress, RankExit, ToDaemon, ToLauncher};

use super::*;
use crate::node_table::NodeState;
use crate::run::tests::settings_for;

#[path = "loss_tests.rs"]
mod loss_tests;
use crate::run::Settings;

const SLOTS: [u32; 4] = [2, 2, 2, 2];

/// A tree of 4 nodes of 2 slots (fan-out 2), and its recorder.
fn tree() -> (Tree, TreeRecorder) {
    let table = NodeTable::new(SLOTS.iter().enumerate().map(|(i, &s)| (format!("h{i}"), s)), 2);
    (Tree::new(table, 0x5eed), TreeRecorder::default())
}

fn settings(owner: u32) -> Settings {
    Settings { owner, ..settings_for(&SLOTS) }
}

/// A run of `owner` begins, its first job of `n` ranks placed as a boot
/// places a submission; its ranks start. The job.
fn submit(tree: &mut Tree, rec: &mut TreeRecorder, owner: u32, n: usize) -> JobId {
    tree.add_run(Run::new(settings(owner))).expect("a new owner");
    let mut made = None;
    let first = |job: JobId, kvsname: String, nodes: &NodeTable| {
        made = Some(job);
        let node_of = nodes.plan_booted(n, None, false);
        let app = AppSpec { exe: "/bin/true".into(), argv: vec!["true".into()], env: Vec::new(), wdir: "/".into(), node_env: false };
        let mut planned = crate::plan::PlannedJob::new();
        planned.push_app(app, n as u32);
        LaunchJob { stdin_rank: Some(Rank(0)), ..planned.into_launch(job, kvsname, 8, node_of, PmiMode::Fd, Default::default()) }
    };
    tree.submit(rec, owner, n, first).unwrap();
    tree.on_run(rec, owner, RunInput::Settle);
    tree.check_invariants();
    let job = made.unwrap();
    for (rank, node) in nodes_of(rec, job) {
        up(tree, rec, node, ToLauncher::Started { job, rank, pid: 1000 * (job.0 + 1) + rank.0 });
    }
    job
}

/// Each rank of `job` and its node, from the launches sent.
fn nodes_of(rec: &TreeRecorder, job: JobId) -> Vec<(Rank, NodeId)> {
    let mut out: Vec<(Rank, NodeId)> = rec
        .sent()
        .into_iter()
        .filter_map(|(n, m)| if let ToDaemon::Launch(l) = m { (l.job == job).then_some((n, l)) } else { None })
        .flat_map(|(n, l)| l.procs.iter().map(move |p| (p.rank, n)))
        .collect();
    out.sort();
    out
}

/// The node of each rank of `job`, in rank order.
fn nodes(rec: &TreeRecorder, job: JobId) -> Vec<usize> {
    nodes_of(rec, job).into_iter().map(|(_, n)| n.0).collect()
}

/// A message from `node` up the tree; the invariants hold after it.
fn up(tree: &mut Tree, rec: &mut TreeRecorder, node: NodeId, msg: ToLauncher) {
    tree.on_up(rec, Up::From { node, msg });
    tree.check_invariants();
}

fn finalize_all(tree: &mut Tree, rec: &mut TreeRecorder, job: JobId) {
    for (rank, node) in nodes_of(rec, job) {
        let exit = RankExit { job, rank, pid: 1000 * (job.0 + 1) + rank.0, status: ExitStatus::Code(0), pmi: PmiProgress::Finalized, at: 10 };
        up(tree, rec, node, ToLauncher::Exited(exit));
    }
}

#[test]
fn each_runs_messages_go_to_it_and_its_slots_come_back_when_it_ends() {
    let (mut tree, mut rec) = tree();
    let a = submit(&mut tree, &mut rec, 10, 3);
    let b = submit(&mut tree, &mut rec, 20, 3);
    assert_eq!(tree.shared().destination(Some(a)), Destination::Run(10));
    assert_eq!(tree.shared().destination(Some(b)), Destination::Run(20));
    assert_eq!(tree.shared().nodes.live(), 6, "one ledger over both runs");
    // The second run went into the slots the first left free.
    assert_eq!((nodes(&rec, a), nodes(&rec, b)), (vec![0, 0, 1], vec![1, 2, 2]));
    let data = b"hello\n".to_vec();
    up(&mut tree, &mut rec, NodeId(2), ToLauncher::Output { job: b, rank: Rank(2), stream: dpm_proto::Stream::Stdout, data });
    let outputs: Vec<u32> = rec.effects.iter().filter_map(|e| if let TreeEffect::Output(o, ..) = e { Some(*o) } else { None }).collect();
    assert_eq!(outputs, vec![20], "output of the second run's job is the second run's");
    finalize_all(&mut tree, &mut rec, a);
    assert_eq!((rec.exit_code(10), rec.exit_code(20)), (Some(0), None), "the first run ended alone");
    assert_eq!(tree.shared().nodes.loads(), vec![0, 1, 2, 0], "its slots are free, the other's held");
    assert!(tree.end_run(10).is_some());
    tree.check_invariants();
    // A later run places into the freed slots.
    let c = submit(&mut tree, &mut rec, 30, 2);
    assert_eq!(nodes(&rec, c), vec![0, 0]);
    finalize_all(&mut tree, &mut rec, b);
    finalize_all(&mut tree, &mut rec, c);
    assert_eq!((rec.exit_code(20), rec.exit_code(30)), (Some(0), Some(0)));
    assert_eq!(tree.shared().nodes.live(), 0);
    // A message about a forgotten job goes nowhere (no run is told).
    let before = rec.effects.len();
    up(&mut tree, &mut rec, NodeId(0), ToLauncher::Started { job: a, rank: Rank(0), pid: 1 });
    assert_eq!(rec.effects.len(), before);
}

#[test]
fn a_lost_node_ends_only_the_runs_with_ranks_there_and_takes_nothing_new() {
    let (mut tree, mut rec) = tree();
    let a = submit(&mut tree, &mut rec, 10, 2);
    let b = submit(&mut tree, &mut rec, 20, 2);
    assert_eq!((nodes(&rec, a), nodes(&rec, b)), (vec![0, 0], vec![1, 1]));
    // Node 1 is a top-level node without children (fan-out 2 puts 2 and 3 under 0).
    tree.on_up(&mut rec, Up::Lost { node: NodeId(1), error: "link closed".into() });
    tree.check_invariants();
    assert!(rec.effects.iter().any(|e| matches!(e, TreeEffect::NodesLost(NodeId(1), _, lost) if lost == &[NodeId(1)])), "the driver is told");
    assert_eq!(tree.shared().nodes.lost_reason(NodeId(1)), Some("link closed"));
    // The run with ranks there ends (they went with the node); the other goes on.
    let killed: Vec<JobId> = rec.sent().iter().filter_map(|(_, m)| if let ToDaemon::Signal { job, .. } = m { Some(*job) } else { None }).collect();
    assert!(!killed.contains(&a), "{killed:?}");
    assert_eq!(rec.exit_code(20), Some(1), "{:#?}", rec.effects.iter().rev().take(8).collect::<Vec<_>>());
    assert!(rec.said(20).iter().any(|l| l.contains("node 1 (h1) was lost")), "{:?}", rec.said(20));
    assert!(rec.said(10).is_empty(), "{:?}", rec.said(10));
    assert_eq!(rec.exit_code(10), None);
    // The next run never places on the lost node.
    let c = submit(&mut tree, &mut rec, 30, 4);
    assert!(nodes_of(&rec, c).iter().all(|(_, n)| n.0 != 1), "{:?}", nodes_of(&rec, c));
    finalize_all(&mut tree, &mut rec, a);
    finalize_all(&mut tree, &mut rec, c);
    assert_eq!((rec.exit_code(10), rec.exit_code(30)), (Some(0), Some(0)));
}

#[test]
fn a_parent_lost_blames_the_parent_and_a_trace_line_reaches_every_run() {
    let (mut tree, mut rec) = tree();
    submit(&mut tree, &mut rec, 10, 2);
    submit(&mut tree, &mut rec, 20, 2);
    // Node 3's parent is node 0 (fan-out 2): node 0 and its subtree go.
    tree.on_up(&mut rec, Up::ParentLost { node: NodeId(3), error: "sent nothing for 60 s".into() });
    tree.check_invariants();
    for n in [0, 2, 3] {
        assert!(tree.shared().nodes.lost_reason(NodeId(n)).is_some(), "node {n}");
    }
    assert!(tree.shared().nodes.lost_reason(NodeId(1)).is_none());
    assert_eq!((rec.exit_code(10), rec.exit_code(20)), (Some(1), None), "only the run on node 0 ends");
}

#[test]
fn a_stale_pool_timer_does_nothing_and_a_second_run_of_one_owner_is_refused() {
    let (mut tree, mut rec) = tree();
    tree.on_pool_timer(&mut rec, 5);
    assert!(rec.effects.is_empty());
    assert!(tree.add_run(Run::new(settings(10))).is_ok());
    assert!(tree.add_run(Run::new(settings(10))).is_err(), "keyed by owner");
    let refused = tree.submit(&mut rec, 99, 1, |_, _, _| unreachable!("no job is made for no run"));
    assert!(matches!(refused, Err(LaunchError::NoRun { owner: 99, .. })), "{refused:?}");
}

/// The nodes that left, from the effects recorded.
fn left(rec: &TreeRecorder) -> Vec<NodeId> {
    rec.effects.iter().filter_map(|e| if let TreeEffect::NodeLeft(n, _) = e { Some(*n) } else { None }).collect()
}

#[test]
fn a_drained_node_leaves_in_the_event_that_empties_it() {
    let (mut tree, mut rec) = tree();
    let a = submit(&mut tree, &mut rec, 10, 2);
    let b = submit(&mut tree, &mut rec, 20, 2);
    assert_eq!((nodes(&rec, a), nodes(&rec, b)), (vec![0, 0], vec![1, 1]));
    // Node 1: top-level, no children. Its two ranks still run: it stays.
    let said = tree.drain(&mut rec, &["h1".to_string()], false).unwrap();
    tree.check_invariants();
    assert!(said[0].contains("draining: it takes no new ranks"), "{said:?}");
    assert!(left(&rec).is_empty());
    // A joined node, empty: it leaves at once, said in the answer and told the driver.
    let joined = tree.join(&[("h4".to_string(), 2)]).unwrap();
    tree.joined(&joined);
    let said = tree.drain(&mut rec, &["h4".to_string()], false).unwrap();
    assert!(said.iter().any(|l| l.contains("node 4 (h4) drained: its daemon left")), "{said:?}");
    assert_eq!(left(&rec), vec![NodeId(4)]);
    let mut exits = nodes_of(&rec, b).into_iter();
    let (rank, node) = exits.next().unwrap();
    let exit = |rank: Rank| RankExit { job: b, rank, pid: 1000 * (b.0 + 1) + rank.0, status: ExitStatus::Code(0), pmi: PmiProgress::Finalized, at: 10 };
    up(&mut tree, &mut rec, node, ToLauncher::Exited(exit(rank)));
    assert_eq!(left(&rec), vec![NodeId(4)], "one rank is still there");
    // The last rank's end is the event in which node 1 leaves: no poll.
    let (rank, node) = exits.next().unwrap();
    up(&mut tree, &mut rec, node, ToLauncher::Exited(exit(rank)));
    assert_eq!(left(&rec), vec![NodeId(4), NodeId(1)]);
    assert_eq!(tree.shared().nodes.state(NodeId(1)), Some(crate::node_table::NodeState::Released));
    assert!(!tree.any_draining());
    // Further events tell nothing more.
    finalize_all(&mut tree, &mut rec, a);
    assert_eq!(left(&rec).len(), 2);
}

#[test]
fn a_booted_runs_spawn_universe_follows_the_nodes_it_has_now() {
    let (mut tree, _) = tree();
    let fixed = settings(10);
    let follows = Settings { universe_follows: Some(3), ..settings(10) };
    let nodes = &mut tree.shared_mut().nodes;
    assert_eq!((fixed.spawn_universe(nodes), follows.spawn_universe(nodes)), (8, 8));
    let added = nodes.join("h4", 4).unwrap();
    assert_eq!(follows.spawn_universe(nodes), 8, "a joining node is no part of it yet");
    nodes.joined(added);
    assert_eq!((fixed.spawn_universe(nodes), follows.spawn_universe(nodes)), (8, 12));
    for n in 0..4 {
        nodes.drain(NodeId(n));
    }
    assert_eq!(follows.spawn_universe(nodes), 4);
    nodes.drain(added);
    assert_eq!(follows.spawn_universe(nodes), 3, "never below the run's world");
    let unset = Settings { universe_size: -1, universe_follows: Some(3), ..settings(10) };
    assert_eq!(unset.spawn_universe(nodes), -1, "unset stays unset");
}
