//! Multi-node protocols on the in-process cluster: fences under every KVS
//! design on flat and 3-level trees, the ring, spawn across nodes, the name
//! service between jobs, and node loss — the real node, tree and run
//! reactors between each other, in virtual time.

use std::collections::BTreeSet;
use std::time::Duration;

use dpm_cluster::{get, put, Cluster, Layout, Step};
use dpm_kvs::{JobId, KvsDesign};
use dpm_proto::ExitStatus;

const LIMIT: Duration = Duration::from_secs(60);

fn layout(nodes: usize, fanout: usize, kvs: KvsDesign) -> Layout {
    Layout { fanout, kvs, ..Layout::nodes(nodes) }
}

/// Every rank puts its card, fences, and reads its neighbours' cards; one
/// rank is late to the fence.
fn exchange() -> Vec<Step> {
    vec![Step::Init, put("card-{rank}", "addr-{rank}"), Step::Barrier, get("card-{next}"), get("card-{prev}"), Step::Barrier, Step::Finalize, Step::Exit(0)]
}

fn assert_exchanged(c: &Cluster, job: JobId) {
    let ranks = c.ranks(job);
    let size = ranks.len() as u32;
    for p in &ranks {
        let r = p.rank.0;
        for other in [(r + 1) % size, (r + size - 1) % size] {
            let got = p.proc.values.get(&format!("card-{other}"));
            assert_eq!(got, Some(&Ok(format!("addr-{other}"))), "rank {r} reading card-{other} ({:?} design)", c.said);
        }
        assert!(p.proc.errors.is_empty(), "rank {r}: {:?}", p.proc.errors);
    }
}

#[test]
fn a_fence_across_nodes_completes_after_the_last_arrival() {
    let mut c = Cluster::new(layout(4, 32, KvsDesign::Allgather));
    let mut late = exchange();
    late.insert(2, Step::Work(Duration::from_millis(50)));
    c.script("ex", exchange()).script("late", late);
    let job = c.launch_mixed(&[("ex", 5), ("late", 1), ("ex", 2)]);
    assert_eq!(c.run_until(LIMIT), Some(0), "{:?}", c.said);
    assert_exchanged(&c, job);
    // The 4th reply of MPICH's start sequence ends Init; the put's reply is
    // the 5th, the first fence's the 6th.
    let late_put = c.ranks(job)[5].reply_times[4];
    for p in c.ranks(job) {
        assert!(p.reply_times[5] > late_put, "rank {} left the fence at {:?}, before the last rank entered at {late_put:?}", p.rank.0, p.reply_times[5]);
    }
}

#[test]
fn every_kvs_design_exchanges_across_a_three_level_tree() {
    for design in [KvsDesign::Allgather, KvsDesign::Tree, KvsDesign::Dkvs, KvsDesign::Direct, KvsDesign::Auto] {
        // 7 nodes, fan-out 2: the launcher, 2 daemons under it, 4 below them.
        let mut c = Cluster::new(layout(7, 2, design));
        c.script("ex", exchange());
        let job = c.launch("ex", 14, None);
        assert_eq!(c.run_until(LIMIT), Some(0), "{design:?}: {:?}", c.said);
        assert_exchanged(&c, job);
        assert_eq!(c.load(), 0, "{design:?}");
    }
}

#[test]
fn the_ring_orders_ranks_node_by_node_and_hands_each_its_neighbours() {
    let mut c = Cluster::new(layout(4, 2, KvsDesign::Allgather));
    c.script("ring", vec![Step::Init2, Step::Ring("v{rank}".into()), Step::Exit(0)]);
    let job = c.launch("ring", 8, None);
    c.run_until(LIMIT);
    let ranks = c.ranks(job);
    let ring_rank = |p: &dpm_cluster::Process| -> usize { p.proc.values["ring-rank"].clone().unwrap().parse().unwrap() };
    let order: BTreeSet<usize> = ranks.iter().map(|p| ring_rank(p)).collect();
    assert_eq!(order, (0..8).collect(), "ring ranks are a permutation");
    let mut by_ring: Vec<&&dpm_cluster::Process> = ranks.iter().collect();
    by_ring.sort_by_key(|p| ring_rank(p));
    for (i, p) in by_ring.iter().enumerate() {
        let left = by_ring[(i + 7) % 8];
        let right = by_ring[(i + 1) % 8];
        assert_eq!(p.proc.values["ring-left"], Ok(format!("v{}", left.rank.0)));
        assert_eq!(p.proc.values["ring-right"], Ok(format!("v{}", right.rank.0)));
        assert_eq!(p.proc.values["ring-size"], Ok("8".into()));
    }
    // A node's ranks sit together in the ring.
    for w in by_ring.windows(2).filter(|w| w[0].node == w[1].node) {
        assert_eq!(ring_rank(w[0]) + 1, ring_rank(w[1]));
    }
    let nodes_in_ring: Vec<usize> = by_ring.iter().map(|p| p.node).collect();
    let mut runs = nodes_in_ring.clone();
    runs.dedup();
    assert_eq!(runs.len(), 4, "each node's ranks form one stretch: {nodes_in_ring:?}");
}

/// Each child's fork and exec takes 10 ms of its node's CPU, so "before the
/// children started" and "after" differ by far more than a reply's latency
/// (µs): an answer cannot land on the expected side of every start by
/// accident, and each test below fails if the run answers the other way.
fn slow_starts(nodes: usize) -> Layout {
    let mut l = layout(nodes, 32, KvsDesign::Allgather);
    l.costs.fork_exec = Duration::from_millis(10);
    l
}

/// Run a spawn of 4 `exchange` children by rank 0 of `parent_apps` (a
/// `parent` script and, for more ranks, `idle` ones) on 3 nodes; when the
/// parent got its answer, and when each child was started (forked and
/// exec'd) on its node.
fn spawn_times(parent_apps: &[(&str, u32)]) -> (Duration, Vec<Duration>) {
    let mut c = Cluster::new(slow_starts(3));
    c.script("child", exchange());
    c.script("parent", vec![Step::Init, Step::Spawn { n: 4, script: "child".into() }, Step::Finalize, Step::Exit(0)]);
    c.script("idle", vec![Step::Init, Step::Finalize, Step::Exit(0)]);
    let parent = c.launch_mixed(parent_apps);
    assert_eq!(c.run_until(LIMIT), Some(0), "{:?}", c.said);
    let children = JobId(parent.0 + 1);
    let kids = c.ranks(children);
    assert_eq!(kids.len(), 4);
    let nodes: BTreeSet<usize> = kids.iter().map(|k| k.node).collect();
    assert!(nodes.len() > 1, "children spread over nodes: {nodes:?}");
    assert_exchanged(&c, children);
    let parent_proc = &c.ranks(parent)[0];
    let port = format!("port-of-{}-0", parent_proc.proc.kvsname);
    for k in &kids {
        assert_eq!(k.proc.values["PARENT_ROOT_PORT_NAME"], Ok(port.clone()), "rank {} of the children", k.rank.0);
    }
    assert!(parent_proc.proc.errors.is_empty(), "{:?}", parent_proc.proc.errors);
    // Replies 0-3 are the start sequence; the 5th is the spawn's.
    (parent_proc.reply_times[4], kids.iter().map(|k| k.forked_at).collect())
}

#[test]
fn a_spawn_from_several_parent_ranks_is_answered_once_every_child_started() {
    let (answered, started) = spawn_times(&[("parent", 1), ("idle", 1)]);
    for (i, at) in started.iter().enumerate() {
        assert!(answered > *at, "the spawn was answered at {answered:?}, before child {i} started at {at:?}");
    }
}

/// As Hydra does: a parent of one process is answered as soon as its
/// spawn is placed, and polls again while the children start.
#[test]
fn a_spawn_from_a_one_rank_parent_is_answered_before_its_children_start() {
    let (answered, started) = spawn_times(&[("parent", 1)]);
    for (i, at) in started.iter().enumerate() {
        assert!(answered < *at, "the spawn was answered at {answered:?}, after child {i} started at {at:?}");
    }
}

#[test]
fn a_spawn_beyond_the_free_slots_is_refused_without_oversubscription() {
    let mut c = Cluster::new(Layout { no_oversubscribe: true, ..Layout::nodes(2) });
    c.script("child", vec![Step::Init, Step::Finalize, Step::Exit(0)]);
    c.script("parent", vec![Step::Init, Step::Spawn { n: 4, script: "child".into() }, Step::Finalize, Step::Exit(0)]);
    let parent = c.launch("parent", 1, None);
    assert_eq!(c.run_until(LIMIT), Some(0), "{:?}", c.said);
    let p = &c.ranks(parent)[0];
    assert_eq!(p.proc.errors.len(), 1, "the spawn got rc≠0: {:?}", p.proc.replies);
    assert_eq!(c.procs.len(), 1, "no child started");
}

#[test]
fn names_published_by_one_job_are_found_by_a_spawned_one() {
    let mut c = Cluster::new(layout(2, 32, KvsDesign::Allgather));
    c.script("child", vec![Step::Init, Step::Lookup("svc".into()), Step::Finalize, Step::Exit(0)]);
    c.script(
        "parent",
        vec![
            Step::Init,
            Step::Publish("svc".into(), "port-{rank}".into()),
            Step::Spawn { n: 2, script: "child".into() },
            // As a parent waits in MPI_Comm_accept: its names go with its job.
            Step::Work(Duration::from_millis(100)),
            Step::Finalize,
            Step::Exit(0),
        ],
    );
    let parent = c.launch("parent", 1, None);
    assert_eq!(c.run_until(LIMIT), Some(0), "{:?}", c.said);
    for k in c.ranks(JobId(parent.0 + 1)) {
        assert_eq!(k.proc.values["svc"], Ok("port-0".into()), "parent: {:?}", c.ranks(parent)[0].proc.replies);
    }
}

#[test]
fn losing_a_daemon_loses_its_subtree_and_ends_the_run() {
    // 7 nodes, fan-out 2: node 0 carries nodes 2 and 3 below it.
    let mut c = Cluster::new(layout(7, 2, KvsDesign::Allgather));
    c.script("slow", vec![Step::Init, Step::Hang]);
    c.launch("slow", 14, None);
    c.lose_node_at(Duration::from_millis(100), 0);
    let code = c.run_until(LIMIT);
    assert!(matches!(code, Some(c) if c != 0), "{code:?}");
    let summary = c.said.join("\n");
    assert!(summary.contains("n0"), "the lost node is named:\n{summary}");
    assert_eq!(c.live(), 0);
    // The surviving nodes' ranks were ended by dpm, not left behind.
    let survivors = c.procs.iter().filter(|p| ![0, 2, 3].contains(&p.node));
    assert!(survivors.clone().count() > 0 && survivors.clone().all(|p| matches!(p.end, Some(ExitStatus::Signal(_)))));
    assert!(c.finished_at.unwrap() < Duration::from_secs(1), "ended promptly: {:?}", c.finished_at);
}
