//! A boot's tree serving several runs at once on the in-process cluster:
//! the tree level (`dpm_launcher::tree::Tree`) places each submission into
//! the slots the others left free, routes every message to its own run,
//! lets a later run claim a pooled job an earlier run left, gives a kept
//! job's slots up to a submission that needs them, and ends only the runs
//! with ranks on a lost node — the real runs, pool and node reactors in
//! virtual time, the tree's invariants (routes = live jobs, pool ∩ runs =
//! ∅, one slot ledger) checked after every event.

use std::time::Duration;

use dpm_cluster::{Cluster, Layout, Step};
use dpm_kvs::JobId;

mod common;

use common::{nodes, work, LIMIT};

#[test]
fn concurrent_runs_of_a_boot_are_placed_apart_and_a_lost_node_ends_only_the_runs_there() {
    // 4 nodes of 2 slots; three runs of 2 ranks each, one per pair of slots.
    let mut c = Cluster::new(Layout::nodes(4));
    c.script("short", work(100)).script("long", work(2_000));
    let a = c.submit("long", 2);
    let b = c.begin_run(0);
    let jb = c.submit("long", 2);
    let d = c.begin_run(0);
    let jd = c.submit("short", 2);
    assert_eq!((nodes(&c, a), nodes(&c, jb), nodes(&c, jd)), (vec![], vec![], vec![]), "nothing started yet");
    c.run_until(Duration::from_millis(50));
    assert_eq!((nodes(&c, a), nodes(&c, jb), nodes(&c, jd)), (vec![0, 0], vec![1, 1], vec![2, 2]), "each into the slots left free");
    assert_eq!(c.load(), 6, "one ledger over the three runs");
    // The short run ends on its own; its slots come back.
    c.run_until(Duration::from_millis(1_000));
    assert_eq!(c.exit_of(d), Some(0), "{:?}", c.said_to);
    assert_eq!(c.load(), 4);
    // Node 1 (run b's) is lost: run b ends naming it; run a goes on.
    c.lose_node_at(Duration::from_millis(1_200), 1);
    c.run_until(Duration::from_millis(1_500));
    let b_code = c.exit_of(b);
    assert!(matches!(b_code, Some(code) if code != 0), "{b_code:?}: {:?}", c.said_to);
    assert!(c.said_to.iter().any(|(o, l)| *o == b && l.contains("n1")), "run b names the node: {:?}", c.said_to);
    assert!(c.said_to.iter().all(|(o, _)| *o != 1), "run a hears nothing of it: {:?}", c.said_to);
    assert_eq!(c.exit_of(1), None, "run a goes on");
    // The next run never places on the lost node, and works.
    let e = c.begin_run(0);
    let je = c.submit("short", 4);
    assert_eq!(c.run_until(LIMIT), Some(0), "{:?}", c.said_to);
    assert!(nodes(&c, je).iter().all(|&n| n != 1), "{:?}", nodes(&c, je));
    assert_eq!((c.exit_of(1), c.exit_of(e)), (Some(0), Some(0)), "{:?}", c.said_to);
    assert!(c.output.iter().filter(|((j, _), _)| *j == a).all(|(_, out)| out == b"done\n"), "run a's output is whole");
    assert_eq!((c.live(), c.load()), (0, 0));
}

#[test]
fn a_later_run_claims_the_job_an_earlier_run_left_in_the_pool_and_a_submission_evicts_a_kept_one() {
    let mut c = Cluster::new(Layout::nodes(2));
    c.keep_pooled(1, Duration::from_secs(600));
    let child = vec![Step::Init, Step::Finalize, Step::Exit(0)];
    let parent = |wait: u64| {
        vec![
            Step::Init,
            Step::Work(Duration::from_millis(wait)),
            Step::Spawn { n: 1, script: "child".into() },
            Step::Accept,
            Step::Work(Duration::from_millis(200)),
            Step::Finalize,
            Step::Exit(0),
        ]
    };
    c.script("child", child).script("early", parent(0)).script("late", parent(1_500)).script("short", work(10));
    c.set_warm_spawn(1);
    c.submit("early", 1);
    // A second run, beside the first, spawns the same shape once the first is over.
    let late = c.begin_run(1);
    c.submit("late", 1);
    c.run_until(Duration::from_millis(1_000));
    assert_eq!(c.exit_of(1), Some(0), "{:?}", c.said_to);
    let kept: Vec<JobId> = (0..8).map(JobId).filter(|&j| c.pool_holds(j)).collect();
    assert_eq!(kept.len(), 1, "the first run's unclaimed pooled job is kept for later runs: {:?}", c.said_to);
    c.run_until(Duration::from_millis(3_000));
    assert_eq!(c.exit_of(late), Some(0), "{:?}", c.said_to);
    assert!(
        c.said_to.iter().any(|(o, l)| *o == late && l.contains(&format!("claimed {} ", kept[0])) && l.contains("kept from an earlier run")),
        "{:?}",
        c.said_to
    );
    // The late run's own pooled job is kept now; a submission needing every
    // slot makes it give its slot up.
    let kept: Vec<JobId> = (0..16).map(JobId).filter(|&j| c.pool_holds(j)).collect();
    assert_eq!(kept.len(), 1, "{:?}", c.said_to);
    let f = c.begin_run(0);
    let jf = c.submit("short", 4);
    assert_eq!(c.run_until(LIMIT), Some(0), "{:?}", c.said_to);
    assert_eq!(c.exit_of(f), Some(0));
    assert_eq!(nodes(&c, jf), vec![0, 0, 1, 1], "in the slots the kept job gave up");
    assert!(!c.pool_holds(kept[0]), "evicted and forgotten");
    assert_eq!((c.live(), c.load()), (0, 0));
}

#[test]
fn a_boot_grows_and_shrinks_under_its_runs_and_a_released_host_frees_its_slots() {
    use dpm_launcher::node_table::NodeState;
    // 2 nodes of 2 slots; run a holds node 0.
    let mut c = Cluster::new(Layout::nodes(2));
    c.script("short", work(100)).script("long", work(2_000));
    let a = c.submit("long", 2);
    c.run_until(Duration::from_millis(50));
    assert_eq!(nodes(&c, a), vec![0, 0]);
    // A node joins: the next run fills node 1 and the new node 2.
    let added = c.add_node(2);
    assert_eq!(added, 2);
    assert_eq!(c.tree().shared().nodes.usable_slots(), 6);
    let b = c.begin_run(0);
    let jb = c.submit("long", 4);
    c.run_until(Duration::from_millis(100));
    assert_eq!(nodes(&c, jb), vec![1, 1, 2, 2], "the added node takes ranks");
    assert_eq!(c.load(), 6);
    // Drained while its ranks run: it takes nothing new, stays until they end.
    let said = c.drain(&[2], false).unwrap();
    assert!(said.iter().any(|l| l.contains("node 2 (n2) draining: it takes no new ranks")), "{said:?}");
    let d = c.begin_run(0);
    let jd = c.submit("short", 2);
    c.run_until(Duration::from_millis(150));
    assert!(nodes(&c, jd).iter().all(|&n| n != 2), "a draining node took ranks: {:?}", nodes(&c, jd));
    assert!(c.left.is_empty());
    // Run b ends: node 2 leaves in that event; its slots are no longer the boot's.
    c.run_until(Duration::from_millis(3_000));
    assert_eq!((c.exit_of(b), c.exit_of(d)), (Some(0), Some(0)), "{:?}", c.said_to);
    let t = &c.tree().shared().nodes;
    assert_eq!(c.left, vec![2], "{:?} {:?} {:?}", t.state(dpm_kvs::NodeId(2)), t.loads(), t.parent(dpm_kvs::NodeId(2)));
    assert_eq!(c.tree().shared().nodes.state(dpm_kvs::NodeId(2)), Some(NodeState::Released));
    assert_eq!((c.tree().shared().nodes.usable_slots(), c.tree().shared().nodes.load(dpm_kvs::NodeId(2))), (4, 0));
    // --force on node 1 while a run is there: that run ends as for a killed
    // rank, the node leaves once its ranks are gone; the other run goes on.
    let e = c.begin_run(0);
    let je = c.submit("long", 3);
    c.run_until(Duration::from_millis(3_100));
    assert_eq!(nodes(&c, je), vec![0, 0, 1]);
    let f = c.begin_run(0);
    let jf = c.submit("short", 1);
    c.run_until(Duration::from_millis(3_150));
    assert_eq!(nodes(&c, jf), vec![1]);
    let said = c.drain(&[0], true).unwrap();
    assert!(said.iter().any(|l| l.contains("killed now (--force)")), "{said:?}");
    c.run_until(Duration::from_millis(3_600));
    let code = c.exit_of(e);
    assert!(matches!(code, Some(code) if code != 0), "{code:?}: {:?}", c.said_to);
    assert!(c.said_to.iter().any(|(o, l)| *o == e && l.contains("drained with --force")), "{:?}", c.said_to);
    assert_eq!(c.exit_of(f), Some(0), "the run on node 1 alone ended well: {:?}", c.said_to);
    assert_eq!(c.left, vec![2, 0]);
    assert_eq!(c.tree().shared().nodes.usable_slots(), 2);
    // The one node left serves the next run; the last node is not drained.
    assert!(c.drain(&[1], false).is_err());
    let g = c.begin_run(0);
    let jg = c.submit("short", 2);
    assert_eq!(c.run_until(LIMIT), Some(0), "{:?}", c.said_to);
    assert_eq!((nodes(&c, jg), c.exit_of(g)), (vec![1, 1], Some(0)));
    assert_eq!((c.live(), c.load()), (0, 0));
}
