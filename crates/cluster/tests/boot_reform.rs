//! A boot's tree re-forms around a lost interior node on the in-process
//! cluster: 4 nodes, fan-out 2 (nodes 2 and 3 hang below node 0). Node 0's
//! daemon dies: the run with ranks there ends naming it; the run on nodes
//! 1, 2 and 3 goes on — its barrier after the loss completes through the
//! re-attached nodes — and the next run takes nodes 1, 2 and 3. The real
//! tree nodes, node reactors and tree level in virtual time, the tree's
//! invariants (the re-formed shape among them) checked after every event.

use std::time::Duration;

use dpm_cluster::{Cluster, Layout, Step};

mod common;

use common::{nodes, work, LIMIT};

#[test]
fn the_nodes_below_a_lost_interior_node_re_attach_and_their_runs_go_on() {
    let mut c = Cluster::new(Layout { fanout: 2, ..Layout::nodes(4) });
    c.reform();
    c.script("short", work(100)).script("long", work(2_000));
    let a = c.submit("long", 2);
    let b = c.begin_run(0);
    let jb = c.submit("long", 6);
    c.run_until(Duration::from_millis(50));
    assert_eq!((nodes(&c, a), nodes(&c, jb)), (vec![0, 0], vec![1, 1, 2, 2, 3, 3]));
    // Node 0 (interior: 2 and 3 below it) is lost while both runs compute.
    c.lose_node_at(Duration::from_millis(1_000), 0);
    c.run_until(Duration::from_millis(1_500));
    let a_code = c.exit_of(1);
    assert!(matches!(a_code, Some(code) if code != 0), "{a_code:?}: {:?}", c.said_to);
    assert!(c.said_to.iter().any(|(o, l)| *o == 1 && l.contains("n0")), "run a names the node: {:?}", c.said_to);
    assert_eq!(c.exit_of(b), None, "run b goes on");
    // Its barrier (after the loss) completes through the new tops.
    assert_eq!(c.run_until(Duration::from_secs(5)), Some(0), "run b ends well: {:?}", c.said_to);
    assert_eq!(c.exit_of(b), Some(0), "{:?}", c.said_to);
    assert!(c.output.iter().filter(|((j, _), _)| *j == jb).all(|(_, out)| out == b"done\n"), "{:?}", c.output);
    assert_eq!(c.output.iter().filter(|((j, _), _)| *j == jb).count(), 6);
    // The next run takes the nodes left, the re-attached ones among them.
    let e = c.begin_run(0);
    let je = c.submit("short", 6);
    c.run_until(LIMIT);
    assert_eq!(c.exit_of(e), Some(0), "{:?}", c.said_to);
    assert_eq!(nodes(&c, je), vec![1, 1, 2, 2, 3, 3]);
    assert_eq!((c.live(), c.load()), (0, 0));
}

/// A rank's exit on its way up through node 0 when node 0's daemon dies is
/// lost with it; the re-attached node says it again (`Down::Resync`), so
/// the run ends, with its ranks' status — it does not wait for ever.
#[test]
fn an_exit_lost_with_the_daemon_above_is_said_again_on_re_attaching() {
    let mut c = Cluster::new(Layout { fanout: 2, ..Layout::nodes(4) });
    c.reform();
    c.script("long", work(60_000));
    c.script("quick", vec![Step::Init, Step::Work(Duration::from_millis(200)), Step::Finalize, Step::Exit(0)]);
    let _a = c.submit("long", 2);
    let b = c.begin_run(0);
    let jb = c.submit("quick", 6);
    c.run_until(Duration::from_millis(50));
    assert_eq!(nodes(&c, jb), vec![1, 1, 2, 2, 3, 3]);
    // Step to the moment an exit from node 2 or 3 is on its way up to node 0.
    let mut at = Duration::from_millis(50);
    while c.exits_in_flight_to(0) == 0 {
        at += Duration::from_micros(5);
        assert!(at < Duration::from_secs(5), "no exit ever passed through node 0");
        c.run_until(at);
    }
    let lost = c.exits_in_flight_to(0);
    c.lose_node_at(at, 0);
    assert_eq!(c.run_until(Duration::from_secs(10)), Some(0), "run b ends well ({lost} exits lost with node 0): {:?}", c.said_to);
    assert_eq!(c.exit_of(b), Some(0), "{:?}", c.said_to);
}
