//! A tree that grows and shrinks: nodes joining, draining, leaving.

use super::*;

fn idx(node_of: &[NodeId]) -> Vec<usize> {
    node_of.iter().map(|n| n.0).collect()
}

#[test]
fn a_joined_node_hangs_below_the_launcher_and_takes_ranks_once_linked() {
    let mut t = NodeTable::new((0..3).map(|i| (format!("h{i}"), 1)), 2);
    let j = t.join("new", 2).unwrap();
    assert_eq!(j, NodeId(3));
    assert_eq!(t.state(j), Some(NodeState::Joining));
    assert_eq!(idx(&t.plan_booted(2, None, false)), vec![0, 1], "a joining node takes nothing");
    t.joined(j);
    let _busy = t.reserve(&[0, 1, 2].map(NodeId)).unwrap();
    assert_eq!(idx(&t.plan_booted(2, None, false)), vec![3, 3]);
    assert_eq!(t.usable_slots(), 5);
    // Outside the heap: node 1's heap children (3, 4) are not its own.
    assert_eq!((t.parent(j), t.children(NodeId(1)), t.subtree(j)), (None, vec![], vec![j]));
    assert_eq!(t.lose(NodeId(0), "gone"), vec![NodeId(0), NodeId(2)], "a joined node is not below a first one");
    assert_eq!(t.join("new", 1), Err(JoinError::Present("new".into())));
    assert_eq!(t.join("zero", 0), Err(JoinError::NoSlots("zero".into())));
    // A join that failed leaves no trace.
    let k = t.join("never", 1).unwrap();
    t.unjoin(k);
    assert_eq!(t.len(), 4);
    t.unjoin(j); // linked: unjoin is not for it
    assert_eq!(t.state(j), Some(NodeState::Up));
}

#[test]
fn the_tree_has_room_for_a_bounded_number_of_joins() {
    let mut t = NodeTable::new([("h0".to_string(), 1)], 2);
    for i in 0..JOIN_ROOM {
        t.join(&format!("j{i}"), 1).unwrap();
    }
    assert_eq!(t.join("one-more", 1), Err(JoinError::NoRoom));
    assert_eq!(t.loads().len(), 1 + JOIN_ROOM);
}

#[test]
fn a_drained_node_takes_nothing_and_leaves_once_empty_and_childless() {
    let mut t = NodeTable::new((0..3).map(|i| (format!("h{i}"), 2)), 1);
    // Fan-out 1: h0 → h1 → h2.
    let mut busy = t.reserve(&[NodeId(2)]).unwrap();
    assert!(t.drain(NodeId(2)) && !t.drain(NodeId(2)), "once");
    assert!(t.drain(NodeId(0)));
    assert_eq!(idx(&t.plan_booted(3, None, false)), vec![1, 1, 1]);
    assert!(t.place_spawn(&[0], &[Some(vec![2])], true, -1).is_err(), "no spawn on a draining node");
    assert!(!t.may_leave(NodeId(2)), "its rank runs");
    assert!(!t.may_leave(NodeId(0)), "node 1 below it is up");
    t.release_all(&mut busy);
    assert!(t.may_leave(NodeId(2)));
    t.release_node(NodeId(2));
    assert_eq!(t.lose(NodeId(2), "its daemon exited"), vec![], "a released node's link closing is no loss");
    assert_eq!(t.state(NodeId(2)), Some(NodeState::Released));
    assert_eq!(t.of_host("h2"), vec![]);
    assert_eq!(t.usable_slots(), 2);
    // A released host may join again, as a new node.
    assert_eq!(t.join("h2", 2), Ok(NodeId(3)));
}
