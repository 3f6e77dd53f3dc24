//! The tree re-forming around a lost interior node, under the recorder:
//! the nodes below it detach, re-attach as tops, their runs go on and
//! their fences complete at the new tops; one that never comes back is
//! lost; a fence cut by the loss ends its run. Invariants after every event.

use super::*;

/// The tree of [`tree`], re-forming (as a boot with a re-attach listener).
fn reforming() -> (Tree, TreeRecorder) {
    let (mut tree, rec) = tree();
    tree.shared_mut().nodes.enable_reform();
    (tree, rec)
}

fn lose(tree: &mut Tree, rec: &mut TreeRecorder, node: usize, error: &str) {
    tree.on_up(rec, Up::Lost { node: NodeId(node), error: error.into() });
    tree.check_invariants();
}

/// The ranks of `job` on `node` end (killed).
fn exit_on(tree: &mut Tree, rec: &mut TreeRecorder, job: JobId, node: usize) {
    for (rank, n) in nodes_of(rec, job).into_iter().filter(|(_, n)| n.0 == node) {
        let exit = RankExit { job, rank, pid: 1000 * (job.0 + 1) + rank.0, status: ExitStatus::Signal(libc::SIGKILL), pmi: PmiProgress::Active, at: 10 };
        up(tree, rec, n, ToLauncher::Exited(exit));
    }
}

fn fence_done_to(rec: &TreeRecorder, job: JobId) -> Vec<usize> {
    let mut to: Vec<usize> = rec.sent().iter().filter(|(_, m)| matches!(m, ToDaemon::FenceDone { job: j, .. } if *j == job)).map(|(n, _)| n.0).collect();
    to.sort_unstable();
    to
}

#[test]
fn the_nodes_below_a_lost_interior_node_re_attach_and_their_runs_go_on() {
    let (mut tree, mut rec) = reforming();
    // Fan-out 2: nodes 2 and 3 hang below node 0.
    let a = submit(&mut tree, &mut rec, 10, 2);
    let b = submit(&mut tree, &mut rec, 20, 6);
    assert_eq!((nodes(&rec, a), nodes(&rec, b)), (vec![0, 0], vec![1, 1, 2, 2, 3, 3]));
    lose(&mut tree, &mut rec, 0, "its daemon exited");
    // The run on node 0 ends; the one below it goes on, its nodes detached.
    assert_eq!((rec.exit_code(10), rec.exit_code(20)), (Some(1), None));
    assert!(rec.said(10).iter().any(|l| l.contains("node 0 (h0) was lost")), "{:?}", rec.said(10));
    let table = &tree.shared().nodes;
    assert_eq!([2, 3].map(|n| table.state(NodeId(n))), [Some(NodeState::Detached); 2]);
    assert!(rec.effects.iter().any(|e| matches!(e, TreeEffect::NodesLost(NodeId(0), _, lost) if lost == &[NodeId(0)])), "only node 0 is lost");
    assert!(!tree.shared().nodes.fits_free(1), "detached nodes take nothing new (node 1 is full)");
    // Both re-attach: tops of their own subtrees, taking ranks again.
    assert_eq!(tree.reattach(NodeId(2)), Ok(vec![NodeId(2)]));
    tree.check_invariants();
    assert_eq!(tree.reattach(NodeId(3)), Ok(vec![NodeId(3)]));
    tree.check_invariants();
    assert_eq!(tree.reattach(NodeId(3)), Err(crate::node_table::ReattachError::NotDetached(NodeId(3))));
    // B's fence completes at the new tops (not at the lost node 0).
    for node in [1, 2, 3] {
        up(&mut tree, &mut rec, NodeId(node), ToLauncher::FenceIn { job: b, epoch: 0, count: 2, puts: Vec::new() });
    }
    assert_eq!(fence_done_to(&rec, b), vec![1, 2, 3]);
    finalize_all(&mut tree, &mut rec, b);
    assert_eq!(rec.exit_code(20), Some(0));
    // A later run goes to the nodes up, never to node 0.
    let c = submit(&mut tree, &mut rec, 30, 6);
    assert_eq!(nodes(&rec, c), vec![1, 1, 2, 2, 3, 3]);
    finalize_all(&mut tree, &mut rec, c);
    assert_eq!(rec.exit_code(30), Some(0));
}

#[test]
fn a_node_that_never_re_attaches_is_lost_and_a_fence_cut_by_the_loss_ends_its_run() {
    let (mut tree, mut rec) = reforming();
    let a = submit(&mut tree, &mut rec, 10, 2);
    let b = submit(&mut tree, &mut rec, 20, 2);
    let c = submit(&mut tree, &mut rec, 30, 4);
    assert_eq!((nodes(&rec, a), nodes(&rec, b), nodes(&rec, c)), (vec![0, 0], vec![1, 1], vec![2, 2, 3, 3]));
    lose(&mut tree, &mut rec, 0, "its daemon exited");
    assert_eq!(rec.exit_code(30), None, "C's nodes are detached, not lost");
    // Node 3 does not come back within the wait: lost, and C with it.
    lose(&mut tree, &mut rec, 3, "its parent, node 0, was lost and its daemon did not re-attach within 30 s");
    assert_eq!(tree.shared().nodes.state(NodeId(3)), Some(NodeState::Lost));
    // Its ranks on node 2 are killed, and end.
    exit_on(&mut tree, &mut rec, c, 2);
    assert_eq!(rec.exit_code(30), Some(1));
    assert!(rec.said(30).iter().any(|l| l.contains("node 3 (h3) was lost: its parent, node 0")), "{:?}", rec.said(30));
    // Node 2 re-attaches; a run there whose fence went through node 0 ends.
    assert!(tree.reattach(NodeId(2)).is_ok());
    tree.check_invariants();
    let d = submit(&mut tree, &mut rec, 40, 2);
    assert_eq!(nodes(&rec, d), vec![2, 2]);
    up(&mut tree, &mut rec, NodeId(2), ToLauncher::FenceCut { job: d, epoch: 0 });
    assert!(rec.sent().iter().any(|(n, m)| n.0 == 2 && matches!(m, ToDaemon::Signal { job, .. } if *job == d)), "its ranks are killed");
    exit_on(&mut tree, &mut rec, d, 2);
    assert_eq!(rec.exit_code(40), Some(1));
    assert!(rec.said(40).iter().any(|l| l.contains("node 0 (h0) was lost while a PMI fence")), "{:?}", rec.said(40));
    assert_eq!(rec.exit_code(20), None, "B, on node 1, was never touched");
    finalize_all(&mut tree, &mut rec, b);
    assert_eq!(rec.exit_code(20), Some(0));
}
