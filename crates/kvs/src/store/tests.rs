//! `NodeStore` tests: single stores, and whole exchanges between several
//! stores settled without a socket.

use super::*;

const J: JobId = JobId(0);

fn ids(nodes: &[usize]) -> Vec<NodeId> {
    nodes.iter().copied().map(NodeId).collect()
}

fn kv(k: &str, v: &str) -> (String, String) {
    (k.to_string(), v.to_string())
}

/// Stores for nodes 0..n, ranks dealt two per node.
fn cluster(design: KvsDesign, n: usize) -> Vec<NodeStore<u32>> {
    let node_of: Vec<NodeId> = (0..2 * n).map(|r| NodeId(r / 2)).collect();
    (0..n).map(|me| NodeStore::new(J, design, NodeId(me), node_of.clone(), &[])).collect()
}

/// Answers to local waiters: (node, waiter, value).
type Answers = Vec<(usize, u32, Option<String>)>;

/// Deliver every node-addressed message until quiet; returns the answers
/// to local waiters and the messages sent `Up`.
fn settle(nodes: &mut [NodeStore<u32>]) -> (Answers, Vec<KvsMsg>) {
    let mut answers = Vec::new();
    let mut up = Vec::new();
    loop {
        let mut moved = false;
        for i in 0..nodes.len() {
            for a in nodes[i].take_actions() {
                moved = true;
                match a {
                    Action::Answer(w, v) => answers.push((i, w, v)),
                    Action::Send(KvsDest::Node(to), msg) => nodes[to.0].on_msg(msg),
                    Action::Send(KvsDest::Up, msg) => up.push(msg),
                }
            }
        }
        if !moved {
            return (answers, up);
        }
    }
}

fn fence_all(nodes: &mut [NodeStore<u32>], delta: &[(String, String)]) {
    for n in nodes.iter_mut() {
        assert!(n.fence_ready());
        n.fence_done(delta.to_vec());
    }
}

#[test]
fn allgather_keys_are_visible_after_the_fence_only() {
    let mut nodes = cluster(KvsDesign::Allgather, 2);
    nodes[0].put("a".into(), "1".into(), None).unwrap();
    assert_eq!(nodes[0].get(7, "a", None, false), Lookup::NotFound);
    assert_eq!(nodes[1].get(7, "a", None, false), Lookup::NotFound);
    let delta = nodes[0].take_fence_puts();
    assert_eq!(delta, vec![kv("a", "1")]);
    fence_all(&mut nodes, &delta);
    assert_eq!(nodes[1].get(7, "a", None, false), Lookup::Found("1".into()));
    assert_eq!(settle(&mut nodes), (vec![], vec![]), "allgather never talks to other daemons");
}

#[test]
fn dkvs_puts_are_acknowledged_before_the_fence_and_gets_ask_the_owner() {
    let mut nodes = cluster(KvsDesign::Dkvs, 4);
    // Find a key owned by node 3 and put it from node 0.
    let key = (0..).map(|i| format!("k{i}")).find(|k| owner(k, &ids(&[0, 1, 2, 3])) == Some(NodeId(3))).unwrap();
    nodes[0].put(key.clone(), "v".into(), None).unwrap();
    assert!(!nodes[0].fence_ready(), "the owner has not acknowledged yet");
    assert!(nodes[0].take_fence_puts().is_empty(), "dkvs fences carry no puts");
    settle(&mut nodes);
    assert!(nodes[0].fence_ready());
    fence_all(&mut nodes, &[]);
    assert_eq!(nodes[1].get(1, &key, None, false), Lookup::Pending);
    assert_eq!(settle(&mut nodes).0, vec![(1, 1, Some("v".into()))]);
    // Now cached on node 1 for this epoch: no second request.
    assert_eq!(nodes[1].get(2, &key, None, false), Lookup::Found("v".into()));
    assert_eq!(nodes[1].stats().remote_gets, 1);
    // The owner answers a missing key at once.
    assert_eq!(nodes[1].get(3, "missing", None, false), Lookup::Pending);
    assert_eq!(settle(&mut nodes).0, vec![(1, 3, None)]);
}

#[test]
fn identical_gets_from_one_node_are_coalesced() {
    let mut nodes = cluster(KvsDesign::Dkvs, 2);
    let key = (0..).map(|i| format!("k{i}")).find(|k| owner(k, &ids(&[0, 1])) == Some(NodeId(0))).unwrap();
    nodes[0].put(key.clone(), "v".into(), None).unwrap();
    fence_all(&mut nodes, &[]);
    for w in 0..3 {
        assert_eq!(nodes[1].get(w, &key, None, false), Lookup::Pending);
    }
    assert_eq!(nodes[1].stats().remote_gets, 1);
    assert_eq!(nodes[1].stats().coalesced, 2);
    let mut answers = settle(&mut nodes).0;
    answers.sort();
    assert_eq!(answers, (0..3).map(|w| (1, w, Some("v".to_string()))).collect::<Vec<_>>());
    assert_eq!(nodes[0].stats().served, 1);
}

#[test]
fn a_waiting_get_is_answered_by_the_put_without_a_fence() {
    for design in KvsDesign::ALL {
        let mut nodes = cluster(design, 2);
        // Rank 3 (node 1) waits for a key rank 0 (node 0) has not put yet.
        assert_eq!(nodes[1].get(3, "late", Some(0), true), Lookup::Pending, "{design}");
        settle(&mut nodes);
        assert_eq!(nodes[0].holder.queued(), 1, "{design}: queued at the source");
        nodes[0].put("late".into(), "here".into(), Some(Hint::Sparse)).unwrap();
        let (answers, _) = settle(&mut nodes);
        assert_eq!(answers, vec![(1, 3, Some("here".into()))], "{design}");
    }
}

#[test]
fn a_waiting_get_at_the_owner_is_answered_by_the_owner_put() {
    let mut nodes = cluster(KvsDesign::Dkvs, 3);
    let key = (0..).map(|i| format!("k{i}")).find(|k| owner(k, &ids(&[0, 1, 2])) == Some(NodeId(2))).unwrap();
    assert_eq!(nodes[1].get(9, &key, None, true), Lookup::Pending);
    settle(&mut nodes);
    nodes[0].put(key.clone(), "v".into(), None).unwrap();
    assert_eq!(settle(&mut nodes).0, vec![(1, 9, Some("v".into()))]);
    // A plain get of a key nobody put is not found, and does not wait.
    let nothing = (0..).map(|i| format!("none{i}")).find(|k| owner(k, &ids(&[0, 1, 2])) == Some(NodeId(2))).unwrap();
    assert_eq!(nodes[1].get(10, &nothing, None, false), Lookup::Pending);
    assert_eq!(settle(&mut nodes).0, vec![(1, 10, None)]);
}

#[test]
fn local_waiters_are_woken_by_a_local_put_or_the_fence() {
    let answers = |node: &mut NodeStore<u32>| -> Vec<Action<u32>> { node.take_actions().into_iter().filter(|a| matches!(a, Action::Answer(..))).collect() };
    let mut node: NodeStore<u32> = NodeStore::new(J, KvsDesign::Allgather, NodeId(0), ids(&[0, 0, 1]), &[]);
    assert_eq!(node.get(1, "x", None, true), Lookup::Pending);
    assert!(matches!(&node.take_actions()[..], [Action::Send(KvsDest::Up, KvsMsg::Get(r))] if r.wait), "walks up, waiting");
    node.put("x".into(), "local".into(), None).unwrap();
    assert_eq!(answers(&mut node), vec![Action::Answer(1, Some("local".into()))]);
    assert_eq!(node.get(2, "y", None, true), Lookup::Pending);
    node.fence_done(vec![kv("y", "fenced")]);
    assert_eq!(answers(&mut node), vec![Action::Answer(2, Some("fenced".into()))]);
    // A connection that went away is forgotten.
    assert_eq!(node.get(3, "z", None, true), Lookup::Pending);
    node.cancel(|w| *w == 3);
    node.fence_done(vec![kv("z", "1")]);
    assert!(answers(&mut node).is_empty());
    // The holder of a key answers from what it has, even an own put of
    // an old epoch (the source's value is the one asked for).
    let mut src: NodeStore<u32> = NodeStore::new(J, KvsDesign::Direct, NodeId(0), ids(&[0, 1]), &[]);
    src.put("old".into(), "v".into(), None).unwrap();
    src.fence_done(vec![]);
    src.fence_done(vec![]);
    assert_eq!(src.get(4, "old", Some(0), false), Lookup::Found("v".into()));
    assert_eq!(src.get(5, "never", Some(0), true), Lookup::Pending, "parked at its own holder");
    assert!(src.take_actions().is_empty(), "nothing leaves the node");
    src.put("never".into(), "now".into(), None).unwrap();
    assert_eq!(answers(&mut src), vec![Action::Answer(5, Some("now".into()))]);
}

#[test]
fn a_copy_from_an_earlier_fence_is_fetched_again_and_the_later_put_wins() {
    let mut nodes = cluster(KvsDesign::Auto, 2);
    // Owned by the source node, so node 1 holds no owner copy of it.
    let k = (0..).map(|i| format!("k{i}")).find(|k| owner(k, &ids(&[0, 1])) == Some(NodeId(0))).unwrap();
    let k = k.as_str();
    nodes[0].put(k.into(), "old".into(), Some(Hint::Sparse)).unwrap();
    settle(&mut nodes);
    fence_all(&mut nodes, &[]);
    assert_eq!(nodes[1].get(1, k, Some(0), false), Lookup::Pending);
    assert_eq!(settle(&mut nodes).0, vec![(1, 1, Some("old".into()))]);
    assert_eq!(nodes[1].get(2, k, Some(0), false), Lookup::Found("old".into()), "cached within the epoch");
    nodes[0].put(k.into(), "new".into(), Some(Hint::Sparse)).unwrap();
    settle(&mut nodes);
    fence_all(&mut nodes, &[]);
    assert_eq!(nodes[1].get(3, k, Some(0), false), Lookup::Pending, "stale after the fence: asked again");
    assert_eq!(settle(&mut nodes).0, vec![(1, 3, Some("new".into()))]);
    assert_eq!(nodes[1].stats().remote_gets, 2);
}

#[test]
fn own_puts_are_served_locally_until_a_later_fence_could_have_overwritten_them() {
    let mut nodes = cluster(KvsDesign::Dkvs, 2);
    let key = (0..).map(|i| format!("k{i}")).find(|k| owner(k, &ids(&[0, 1])) == Some(NodeId(1))).unwrap();
    nodes[0].put(key.clone(), "mine".into(), None).unwrap();
    settle(&mut nodes);
    fence_all(&mut nodes, &[]);
    assert_eq!(nodes[0].get(1, &key, None, false), Lookup::Found("mine".into()));
    fence_all(&mut nodes, &[]);
    assert_eq!(nodes[0].get(2, &key, None, false), Lookup::Pending, "two fences later: ask the owner");
    assert_eq!(settle(&mut nodes).0, vec![(0, 2, Some("mine".into()))]);
}

#[test]
fn tree_and_direct_without_srcid_walk_up_and_puts_ride_the_fence() {
    for design in [KvsDesign::Tree, KvsDesign::Direct] {
        let mut nodes = cluster(design, 2);
        nodes[0].put("k".into(), "v".into(), None).unwrap();
        assert_eq!(nodes[0].take_fence_puts(), vec![kv("k", "v")]);
        fence_all(&mut nodes, &[]);
        assert_eq!(nodes[1].get(1, "k", None, false), Lookup::Pending);
        let (answers, up) = settle(&mut nodes);
        assert!(answers.is_empty());
        let KvsMsg::Get(req) = &up[0] else { panic!("{up:?}") };
        assert_eq!((req.origin, req.epoch, req.wait), (NodeId(1), 1, false), "{design}");
        nodes[1].on_msg(KvsMsg::Reply(GetReply { job: J, key: "k".into(), id: req.id, value: Some("v".into()), valid_through: 1 }));
        assert_eq!(nodes[1].take_actions(), vec![Action::Answer(1, Some("v".into()))]);
    }
    // Direct with a srcid goes to the source node instead.
    let mut nodes = cluster(KvsDesign::Direct, 2);
    nodes[0].put("k".into(), "v".into(), None).unwrap();
    fence_all(&mut nodes, &[]);
    assert_eq!(nodes[1].get(1, "k", Some(1), false), Lookup::Pending);
    assert_eq!(settle(&mut nodes).0, vec![(1, 1, Some("v".into()))]);
}

#[test]
fn a_job_on_one_node_never_asks_anyone() {
    for design in [KvsDesign::Tree, KvsDesign::Dkvs, KvsDesign::Direct, KvsDesign::Auto] {
        let mut node: NodeStore<u32> = NodeStore::new(J, design, NodeId(0), ids(&[0, 0]), &[]);
        node.put("k".into(), "v".into(), Some(Hint::Sparse)).unwrap();
        for _ in 0..3 {
            node.fence_done(vec![]);
        }
        assert_eq!(node.get(1, "k", None, false), Lookup::Found("v".into()), "{design}");
        assert_eq!(node.get(2, "none", None, false), Lookup::NotFound, "{design}");
        assert!(node.take_actions().is_empty(), "{design}");
    }
}

#[test]
fn holders_keep_the_later_put() {
    let mut h = Holder::default();
    h.insert("k".into(), "e2".into(), 2, false);
    h.insert("k".into(), "e1".into(), 1, false);
    assert_eq!(h.get("k").unwrap().value, "e2");
    h.insert("k".into(), "e2b".into(), 2, true);
    assert_eq!(h.get("k").unwrap().value, "e2b");
}

#[test]
fn a_key_put_in_a_loop_rides_the_fence_once_with_its_last_value() {
    for design in [KvsDesign::Allgather, KvsDesign::Tree, KvsDesign::Direct] {
        let mut node: NodeStore<u32> = NodeStore::new(J, design, NodeId(0), ids(&[]), &[]);
        for i in 0..10_000 {
            node.put("loop".into(), format!("v{i}"), None).unwrap();
        }
        node.put("other".into(), "o".into(), None).unwrap();
        assert_eq!(node.take_fence_puts(), vec![kv("loop", "v9999"), kv("other", "o")], "{design:?}");
        node.put("loop".into(), "next epoch".into(), None).unwrap();
        assert_eq!(node.take_fence_puts(), vec![kv("loop", "next epoch")], "{design:?}");
    }
}

#[test]
fn new_keys_beyond_the_node_bound_are_refused_and_replacements_still_work() {
    use crate::limits::MAX_NODE_KEYS;
    let mut node: NodeStore<u32> = NodeStore::new(J, KvsDesign::Allgather, NodeId(0), ids(&[]), &[]);
    for i in 0..MAX_NODE_KEYS {
        node.put(format!("k{i}"), "v".into(), None).unwrap();
    }
    let err = node.put("one-more".into(), "v".into(), None).unwrap_err();
    assert_eq!(err.limit, MAX_NODE_KEYS);
    node.put("k7".into(), "replaced".into(), None).expect("replacing an own key is always allowed");
    let puts = node.take_fence_puts();
    assert_eq!(puts.len(), MAX_NODE_KEYS, "the refused key never rides the fence");
    assert_eq!(puts[7], kv("k7", "replaced"));
    node.fence_done(puts);
    assert_eq!(node.peek("one-more"), None);
    assert!(node.put("still-full".into(), "v".into(), None).is_err(), "the bound counts keys, not fences");
}
