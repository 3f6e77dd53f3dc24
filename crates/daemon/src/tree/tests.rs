//! Tree nodes driven without sockets: one node's KVS and ring work, and a
//! three-level subtree wired by a queue.

use std::collections::{BTreeMap, VecDeque};

use dpm_kvs::remote::{GetRequest, KvsDest, KvsMsg};
use dpm_kvs::ring::{RingSegment, RingSlot};
use dpm_kvs::{JobId, KvsDesign, NodeId, Rank};
use dpm_proto::{AppSpec, LaunchJob, PmiMode, ProcSpec, ToDaemon, ToLauncher};

use super::{TreeAction, TreeNode};

const J: JobId = JobId(0);

fn launch(job: JobId, design: KvsDesign) -> ToDaemon {
    ToDaemon::Launch(LaunchJob {
        job,
        kvsname: "kvs".into(),
        size: 6,
        appnums: vec![0; 6],
        universe_size: 6,
        process_mapping: String::new(),
        spawner: None,
        preput: vec![],
        pmi_mode: PmiMode::Fd,
        stdin_rank: None,
        apps: vec![AppSpec { exe: "a".into(), argv: vec![], env: vec![], wdir: "/".into(), node_env: false }],
        procs: vec![ProcSpec { rank: Rank(0), app: 0 }],
        kvs: design,
        node_of: [0, 0, 2, 2, 3, 3].map(NodeId).to_vec(),
        awaiting_claim: false,
        binding: Default::default(),
        pmix_watch: false,
        hold: false,
    })
}

/// Node 0 of a fan-out-2 tree over 4 nodes (children 2 and 3), with the
/// job on nodes 0, 2 and 3.
fn node0(design: KvsDesign) -> TreeNode {
    let mut t = TreeNode::new(NodeId(0));
    t.set_shape(2, 7);
    t.child_linked(NodeId(2));
    t.child_linked(NodeId(3));
    for n in [0, 2, 3].map(NodeId) {
        t.from_parent(n, launch(J, design));
    }
    t
}

fn seg(c: u32, f: &str, l: &str) -> RingSegment {
    RingSegment { count: c, first: f.into(), last: l.into() }
}

#[test]
fn a_subtree_sends_one_ring_part_up_and_splits_the_answer() {
    let mut t = node0(KvsDesign::Auto);
    for (from, part) in [(3, seg(2, "e", "f")), (0, seg(2, "a", "b"))] {
        let out = t.from_below(NodeId(from), ToLauncher::RingIn { job: J, seq: 0, segment: part });
        assert!(out.is_empty(), "waits for node 2: {out:?}");
    }
    let out = t.from_below(NodeId(2), ToLauncher::RingIn { job: J, seq: 0, segment: seg(2, "c", "d") });
    let [TreeAction::Parent { origin: NodeId(0), msg }] = &out[..] else { panic!("{out:?}") };
    assert!(matches!(msg, ToLauncher::RingIn { segment, .. } if *segment == seg(6, "a", "f")));
    // The root places the subtree at 4 in a ring of 8, between "z" and "y".
    let slot = RingSlot { offset: 4, left: "z".into(), right: "y".into() };
    let got: Vec<(NodeId, u32, String, String)> = t
        .from_parent(NodeId(0), ToDaemon::RingOut { job: J, seq: 0, slot })
        .into_iter()
        .map(|a| match a {
            TreeAction::Own(ToDaemon::RingOut { slot, .. }) => (NodeId(0), slot.offset, slot.left, slot.right),
            TreeAction::Child { hop, node, msg } if hop == node => match msg {
                ToDaemon::RingOut { slot, .. } => (node, slot.offset, slot.left, slot.right),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        })
        .collect();
    let expected = [(0, 4, "z", "c"), (2, 6, "b", "e"), (3, 8, "d", "y")];
    assert_eq!(got, expected.map(|(n, o, l, r)| (NodeId(n), o, l.to_string(), r.to_string())));
}

/// Where each `FenceDone` went: the own node (`me`) or a child.
fn fence_done_targets(me: usize, out: &[TreeAction]) -> Vec<usize> {
    out.iter()
        .map(|a| match a {
            TreeAction::Own(ToDaemon::FenceDone { delta, .. }) if delta.len() == 1 => me,
            TreeAction::Child { hop, node, msg } if hop == node && matches!(msg, ToDaemon::FenceDone { .. }) => hop.0,
            other => panic!("{other:?}"),
        })
        .collect()
}

#[test]
fn a_fence_completion_is_passed_to_each_child_subtree_running_the_job() {
    let mut t = node0(KvsDesign::Allgather);
    // Node 3 does not run the second job, nor does node 0.
    t.from_parent(NodeId(2), launch(JobId(1), KvsDesign::Allgather));
    let done = |job| ToDaemon::FenceDone { job, epoch: 4, delta: vec![("k".into(), "v".into())] };
    let mut to = fence_done_targets(0, &t.from_parent(NodeId(0), done(J)));
    to.sort();
    assert_eq!(to, [0, 2, 3], "one copy per child subtree, and node 0's own");
    assert_eq!(fence_done_targets(0, &t.from_parent(NodeId(0), done(JobId(1)))), [2]);
    // A completion addressed to a node below passes through untouched.
    assert_eq!(fence_done_targets(0, &t.from_parent(NodeId(2), done(J))), [2]);
}

#[test]
fn messages_for_the_subtree_go_down_and_the_rest_go_up() {
    let mut t = node0(KvsDesign::Dkvs);
    let ack = |n| ToLauncher::Kvs { to: KvsDest::Node(NodeId(n)), msg: KvsMsg::PutAck { job: J, id: 1 } };
    assert!(matches!(&t.from_below(NodeId(2), ack(3))[..], [TreeAction::Child { hop: NodeId(3), node: NodeId(3), .. }]));
    assert!(matches!(&t.from_below(NodeId(2), ack(0))[..], [TreeAction::Own(ToDaemon::Kvs(_))]));
    let out = t.from_below(NodeId(2), ack(1));
    assert!(matches!(&out[..], [TreeAction::Parent { origin: NodeId(2), .. }]), "node 1 is not below node 0: {out:?}");
    // Node 7 joined the running tree (the first 7 nodes are the heap): it
    // hangs below the launcher, though the heap would put it below node 2.
    let out = t.from_below(NodeId(2), ack(7));
    assert!(matches!(&out[..], [TreeAction::Parent { origin: NodeId(2), .. }]), "a joined node is not below node 0: {out:?}");
}

fn walk_up(key: &str, epoch: u64, wait: bool) -> ToLauncher {
    let req = GetRequest { job: J, key: key.into(), origin: NodeId(3), id: 9, epoch, wait };
    ToLauncher::Kvs { to: KvsDest::Up, msg: KvsMsg::Get(req) }
}

/// The value of the one KVS reply sent down to node 3.
fn reply_to_3(out: &[TreeAction]) -> Option<(u64, Option<String>, u64)> {
    out.iter().find_map(|a| match a {
        TreeAction::Child { hop: NodeId(3), node: NodeId(3), msg: ToDaemon::Kvs(KvsMsg::Reply(r)) } => Some((r.id, r.value.clone(), r.valid_through)),
        _ => None,
    })
}

#[test]
fn puts_riding_up_answer_gets_walking_up_while_current() {
    let mut t = node0(KvsDesign::Tree);
    let fence = ToLauncher::FenceIn { job: J, epoch: 1, count: 2, puts: vec![("k".into(), "v".into())] };
    assert!(t.from_below(NodeId(2), fence).is_empty(), "the fence waits for nodes 0 and 3");
    assert_eq!(reply_to_3(&t.from_below(NodeId(3), walk_up("k", 2, false))), Some((9, Some("v".into()), 2)));
    // Two fences later the copy may be stale: ask further up.
    let out = t.from_below(NodeId(3), walk_up("k", 3, false));
    assert!(matches!(&out[..], [TreeAction::Parent { origin: NodeId(3), .. }]), "{out:?}");
}

#[test]
fn a_waiting_get_walking_up_is_answered_by_a_put_riding_past() {
    let mut t = node0(KvsDesign::Allgather);
    assert!(matches!(&t.from_below(NodeId(3), walk_up("late", 0, true))[..], [TreeAction::Parent { .. }]), "passed on up");
    let fence = |key: &str, epoch| ToLauncher::FenceIn { job: J, epoch, count: 2, puts: vec![(key.into(), "here".into())] };
    assert_eq!(reply_to_3(&t.from_below(NodeId(2), fence("late", 0))), Some((9, Some("here".into()), 0)));
    // Forgotten with the job.
    t.from_below(NodeId(3), walk_up("never", 1, true));
    t.from_parent(NodeId(0), ToDaemon::Forget { job: J });
    assert_eq!(reply_to_3(&t.from_below(NodeId(2), fence("never", 1))), None);
}

/// The daemons of nodes 0, 2, 3, 6 and 7 of a fan-out-2 tree over 8 nodes
/// (0 → 2, 3; 2 → 6, 7), wired by a queue as their links would be.
struct Subtree {
    nodes: BTreeMap<NodeId, TreeNode>,
    /// What reached each node's own reactor.
    own: Vec<(NodeId, ToDaemon)>,
    /// What node 0 sent to the launcher, with its node of origin.
    launcher: Vec<(NodeId, ToLauncher)>,
}

enum Hop {
    /// At node `.0`, from its parent, for node `.1`.
    Down(NodeId, NodeId, ToDaemon),
    Up(NodeId, NodeId, ToLauncher),
}

impl Subtree {
    fn new() -> Self {
        let mut nodes = BTreeMap::new();
        for n in [0, 2, 3, 6, 7].map(NodeId) {
            let mut t = TreeNode::new(n);
            t.set_shape(2, 8);
            for c in dpm_proto::tree::children(Some(n), 8, 2).into_iter().filter(|c| [2, 3, 6, 7].contains(&c.0)) {
                t.child_linked(c);
            }
            nodes.insert(n, t);
        }
        Subtree { nodes, own: Vec::new(), launcher: Vec::new() }
    }

    fn parent_of(n: NodeId) -> Option<NodeId> {
        dpm_proto::tree::parent(n, 2)
    }

    /// Run `first` and everything it causes to completion.
    fn settle(&mut self, first: Hop) {
        let mut queue = VecDeque::from([first]);
        while let Some(hop) = queue.pop_front() {
            let (at, actions) = match hop {
                Hop::Down(n, to, msg) => (n, self.nodes.get_mut(&n).unwrap().from_parent(to, msg)),
                Hop::Up(n, origin, msg) => (n, self.nodes.get_mut(&n).unwrap().from_below(origin, msg)),
            };
            for a in actions {
                match a {
                    TreeAction::Own(msg) => self.own.push((at, msg)),
                    TreeAction::Child { hop, node, msg } => queue.push_back(Hop::Down(hop, node, msg)),
                    // The parent's link hands on `Up::From{origin}`.
                    TreeAction::Parent { origin, msg } => match Self::parent_of(at) {
                        Some(p) => queue.push_back(Hop::Up(p, origin, msg)),
                        None => self.launcher.push((origin, msg)),
                    },
                }
            }
        }
    }

    /// The launcher sends `msg` for `node` to the top of its subtree.
    fn send(&mut self, node: usize, msg: ToDaemon) {
        self.settle(Hop::Down(NodeId(0), NodeId(node), msg));
    }

    /// Node `n`'s own reactor sends `msg` up.
    fn report(&mut self, n: usize, msg: ToLauncher) {
        self.settle(Hop::Up(NodeId(n), NodeId(n), msg));
    }
}

#[test]
fn routed_messages_reach_exactly_their_node_through_three_levels() {
    let mut s = Subtree::new();
    for n in [7, 3, 0, 6] {
        s.send(n, ToDaemon::Signal { job: J, signal: n as i32 });
    }
    let got: Vec<(usize, i32)> = s.own.iter().map(|(n, m)| if let ToDaemon::Signal { signal, .. } = m { (n.0, *signal) } else { panic!("{m:?}") }).collect();
    assert_eq!(got, [(7, 7), (3, 3), (0, 0), (6, 6)]);
    // Node 4 is under node 1, not here: dropped, not misdelivered.
    s.send(4, ToDaemon::Signal { job: J, signal: 4 });
    assert_eq!(s.own.len(), 4);
    // Messages from below go up as from their node of origin.
    s.report(6, ToLauncher::Abort { job: J, rank: Rank(5), code: 1, message: "x".into() });
    assert!(matches!(&s.launcher[..], [(NodeId(6), ToLauncher::Abort { .. })]));
}

#[test]
fn a_fence_is_merged_per_subtree_and_its_completion_reaches_every_node_once() {
    let mut s = Subtree::new();
    let on = [0, 2, 3, 6, 7];
    for n in on {
        s.send(n, launch(J, KvsDesign::Allgather));
    }
    s.own.clear();
    for (i, n) in [6, 7, 3, 2, 0].into_iter().enumerate() {
        assert!(s.launcher.is_empty(), "nothing reaches the launcher before the last arrival");
        let puts = vec![(format!("k{n}"), format!("v{i}"))];
        s.report(n, ToLauncher::FenceIn { job: J, epoch: 0, count: 1, puts });
    }
    let [(NodeId(0), msg)] = &s.launcher[..] else { panic!("{:?}", s.launcher) };
    let ToLauncher::FenceIn { job: J, epoch: 0, count: 5, puts } = msg else { panic!("{msg:?}") };
    let mut keys: Vec<&str> = puts.iter().map(|(k, _)| k.as_str()).collect();
    keys.sort();
    assert_eq!(keys, ["k0", "k2", "k3", "k6", "k7"]);
    s.send(0, ToDaemon::FenceDone { job: J, epoch: 0, delta: puts.clone() });
    let mut done: Vec<usize> = s
        .own
        .iter()
        .map(|(n, m)| {
            if let ToDaemon::FenceDone { delta, .. } = m {
                assert_eq!(delta.len(), 5);
                n.0
            } else {
                panic!("{m:?}")
            }
        })
        .collect();
    done.sort();
    assert_eq!(done, on);
}

#[test]
fn a_job_on_one_node_of_a_child_subtree_passes_through_unmerged() {
    let mut s = Subtree::new();
    for n in [7, 3] {
        s.send(n, launch(J, KvsDesign::Allgather));
    }
    // Node 2 has one contributor (7): its arrival goes up as node 7's; node
    // 0 waits for node 3 as well.
    s.report(7, ToLauncher::FenceIn { job: J, epoch: 2, count: 1, puts: vec![] });
    assert!(s.launcher.is_empty());
    s.report(3, ToLauncher::FenceIn { job: J, epoch: 2, count: 1, puts: vec![] });
    assert!(matches!(&s.launcher[..], [(NodeId(0), ToLauncher::FenceIn { count: 2, .. })]));
}

#[test]
fn a_forgotten_jobs_partial_fence_is_dropped() {
    let mut t = node0(KvsDesign::Allgather);
    let arrive = |t: &mut TreeNode, from| t.from_below(NodeId(from), ToLauncher::FenceIn { job: J, epoch: 5, count: 1, puts: vec![] });
    assert!(arrive(&mut t, 2).is_empty());
    // The job ends (its first Forget passes through here towards node 2).
    t.from_parent(NodeId(2), ToDaemon::Forget { job: J });
    assert!(arrive(&mut t, 0).is_empty());
    assert!(arrive(&mut t, 3).is_empty(), "node 2's arrival before the Forget no longer counts");
    let out = arrive(&mut t, 2);
    assert!(matches!(&out[..], [TreeAction::Parent { origin: NodeId(0), msg: ToLauncher::FenceIn { count: 3, .. } }]), "{out:?}");
}

/// A fence in flight when the parent is lost: the arrivals sent up and not
/// completed are what a re-attaching daemon reports cut (once); a
/// completion or a forgotten job clears them.
#[test]
fn fences_sent_up_and_not_completed_are_reported_once_on_reattaching() {
    let mut t = node0(KvsDesign::Auto);
    for n in [0, 2, 3] {
        t.from_below(NodeId(n), ToLauncher::FenceIn { job: J, epoch: 0, count: 2, puts: vec![] });
    }
    let other = JobId(7);
    t.from_below(NodeId(0), ToLauncher::FenceIn { job: other, epoch: 3, count: 1, puts: vec![] });
    t.from_parent(NodeId(0), ToDaemon::FenceDone { job: J, epoch: 0, delta: vec![] });
    t.from_below(NodeId(0), ToLauncher::FenceIn { job: other, epoch: 4, count: 1, puts: vec![] });
    assert_eq!(t.reattached(), vec![(other, 3), (other, 4)], "J's fence completed");
    assert!(t.reattached().is_empty(), "once");
    t.from_below(NodeId(0), ToLauncher::FenceIn { job: other, epoch: 5, count: 1, puts: vec![] });
    t.from_parent(NodeId(0), ToDaemon::Forget { job: other });
    assert!(t.reattached().is_empty(), "a forgotten job's fences are no one's");
}

/// A child's link breaks while the fence waits for its subtree: the child
/// no longer contributes (its daemon re-attaches to the launcher), so the
/// partial fence goes up with what came; later fences wait only for the rest.
#[test]
fn a_lost_child_no_longer_holds_up_the_subtrees_fence() {
    let mut t = node0(KvsDesign::Auto);
    assert!(t.from_below(NodeId(0), ToLauncher::FenceIn { job: J, epoch: 0, count: 2, puts: vec![] }).is_empty());
    assert!(t.from_below(NodeId(3), ToLauncher::FenceIn { job: J, epoch: 0, count: 2, puts: vec![] }).is_empty(), "waits for node 2");
    assert!(t.is_child(NodeId(2)));
    let out = t.child_lost(NodeId(2));
    assert!(!t.is_child(NodeId(2)));
    assert!(
        matches!(out.as_slice(), [TreeAction::Parent { origin: NodeId(0), msg: ToLauncher::FenceIn { count: 4, .. } }]),
        "nodes 0 and 3 go up merged: {out:?}"
    );
    assert!(t.child_lost(NodeId(2)).is_empty(), "once");
    assert!(t.from_below(NodeId(0), ToLauncher::FenceIn { job: J, epoch: 1, count: 2, puts: vec![] }).is_empty());
    let out = t.from_below(NodeId(3), ToLauncher::FenceIn { job: J, epoch: 1, count: 2, puts: vec![] });
    assert!(matches!(out.as_slice(), [TreeAction::Parent { msg: ToLauncher::FenceIn { epoch: 1, count: 4, .. }, .. }]), "{out:?}");
}
