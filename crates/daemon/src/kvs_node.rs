//! The KVS work a daemon does for its subtree, on the link to its parent
//! (`serve_link`): what passes through it rather than what its own ranks ask.
//!
//! - **Ring**: one [`RingGather`] per job and ring number collects the
//!   stretch of this node's ranks and one stretch per child subtree; when all
//!   are in, one `RingIn` goes up. The parts are kept until the `RingOut`
//!   for this subtree comes down, which is split among them (this daemon's
//!   own part goes to its engine, each child's to that child).
//! - **Routing** of daemon-to-daemon KVS messages: one for this node goes to
//!   the engine, one for a node below goes down, anything else goes up (the
//!   launcher passes it down to its node).
//! - **Tree cache** (`Tree` and `Direct` jobs): the puts riding up with a
//!   fence, and the answers passing down to the nodes below, are kept with
//!   the last epoch they are current in; a get walking up the tree is
//!   answered here if the copy is current for the asker's epoch, and passed
//!   up otherwise.
//! - **Waiting gets walking up** (any design) are also noted here on their
//!   way to the launcher, and answered by the first put of their key that
//!   rides a fence past this daemon: fences merge per subtree, so a put from
//!   a node beside the waiting one may get no further up than here until the
//!   waiting process itself joins the fence — which it cannot while it waits.
//!
//! The ranks' own gets, puts and waiting gets are the engine's business
//! ([`dpm_pmi::Engine`]).

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};

use dpm_kvs::remote::{GetReply, GetRequest, KvsDest, KvsMsg};
use dpm_kvs::ring::{combine, split, RingGather, RingSegment, RingSlot};
use dpm_kvs::store::Cached;
use dpm_kvs::{JobId, KvsDesign};
use dpm_proto::{ToDaemon, ToLauncher};

use tokio::sync::mpsc::{UnboundedSender, WeakUnboundedSender};

use crate::Router;

/// `serve_link`'s inbound side: a message addressed to `to` passing down.
/// Returns it for the usual delivery, or `None` if it was handled here (a
/// ring answer for this subtree, split and sent on).
pub(crate) fn handle_down(kvs: &RefCell<TreeKvs>, router: &RefCell<Router>, own: &UnboundedSender<ToDaemon>, to: usize, msg: ToDaemon) -> Option<ToDaemon> {
    let mut kvs = kvs.borrow_mut();
    kvs.observe_down(&msg);
    match msg {
        ToDaemon::RingOut { job, seq, slot } if to == kvs.me => {
            let out = kvs.ring_out(job, seq, slot);
            drop(kvs);
            let router = router.borrow();
            for d in out {
                if let Dispatch::Down(node, msg) = d {
                    deliver(&router, own, node, msg);
                }
            }
            None
        }
        msg => Some(msg),
    }
}

/// `serve_link`'s outbound side: a message from `origin` on its way up.
/// Returns the messages for the parent, and the message itself if it still
/// needs the usual handling (fence merging, or up as it is).
pub(crate) fn handle_up(
    kvs: &RefCell<TreeKvs>,
    router: &RefCell<Router>,
    own: &WeakUnboundedSender<ToDaemon>,
    origin: usize,
    msg: ToLauncher,
) -> (Vec<ToLauncher>, Option<ToLauncher>) {
    let router = router.borrow();
    let (out, rest) = kvs.borrow_mut().up(&router, origin, msg);
    let mut ups = Vec::new();
    for d in out {
        match d {
            Dispatch::Up(msg) => ups.push(msg),
            Dispatch::Down(node, msg) => match own.upgrade() {
                Some(own) => deliver(&router, &own, node, msg),
                None => tracing::debug!(node, "the daemon is stopping: a KVS message was dropped"),
            },
        }
    }
    (ups, rest)
}

/// Hand `msg` to this daemon's engine, or down the tree towards `node`.
fn deliver(router: &Router, own: &UnboundedSender<ToDaemon>, node: usize, msg: ToDaemon) {
    if node == router.me {
        let _ = own.send(msg);
    } else {
        router.forward(node, ToDaemon::Routed { node, msg: Box::new(msg) });
    }
}

/// Where a message handled here goes next.
#[derive(Debug)]
pub(crate) enum Dispatch {
    /// To the parent (already wrapped as coming from a node).
    Up(ToLauncher),
    /// To a node of this subtree: this daemon's engine, or down the tree.
    Down(usize, ToDaemon),
}

#[derive(Default)]
struct TreeJob {
    design: KvsDesign,
    cache: HashMap<String, Cached>,
    /// Rings being gathered, by number.
    rings: HashMap<u64, RingGather>,
    /// Rings sent up: the parts (contributor, stretch) to split the answer among.
    sent: HashMap<u64, Vec<(usize, RingSegment)>>,
    /// Waiting gets that walked up through here, by key.
    waiting: HashMap<String, Vec<GetRequest>>,
}

/// See the module documentation.
pub(crate) struct TreeKvs {
    me: usize,
    jobs: HashMap<JobId, TreeJob>,
}

impl Router {
    /// Whether `node` lies below this daemon (in a child's subtree).
    fn below(&self, node: usize) -> bool {
        node != self.me && dpm_proto::tree::next_hop(Some(self.me), node, self.fanout).is_some_and(|h| self.children.contains_key(&h))
    }

    /// Who contributes this subtree's part of a collective of `job`: this
    /// node if it runs ranks of the job, and each child whose subtree does.
    fn contributors(&self, job: JobId) -> BTreeSet<usize> {
        self.job_nodes.get(&job).map(|nodes| nodes.iter().map(|&n| self.hop(n)).collect()).unwrap_or_default()
    }
}

impl TreeKvs {
    pub(crate) fn new(me: usize) -> Self {
        TreeKvs { me, jobs: HashMap::new() }
    }

    /// A message on its way down through this daemon (or to it).
    pub(crate) fn observe_down(&mut self, msg: &ToDaemon) {
        match msg {
            ToDaemon::Launch(l) => self.jobs.entry(l.job).or_default().design = l.kvs,
            // The job is over everywhere once its first Forget is sent.
            ToDaemon::Forget { job } => {
                self.jobs.remove(job);
            }
            // The answer of a get that walked up fans back down: keep it.
            ToDaemon::Kvs(KvsMsg::Reply(GetReply { job, key, value: Some(value), valid_through, .. })) => {
                if let Some(j) = self.jobs.get_mut(job).filter(|j| j.design.fence_caches()) {
                    j.cache.insert(key.clone(), Cached { value: value.clone(), valid_through: *valid_through });
                }
            }
            _ => {}
        }
    }

    /// The answer to a ring, for this subtree: split it among its parts.
    pub(crate) fn ring_out(&mut self, job: JobId, seq: u64, slot: RingSlot) -> Vec<Dispatch> {
        let parts = self.jobs.get_mut(&job).and_then(|j| j.sent.remove(&seq));
        let Some(parts) = parts else {
            // Nothing gathered here (a job unknown to this link): the slot is
            // this node's own.
            return vec![Dispatch::Down(self.me, ToDaemon::RingOut { job, seq, slot })];
        };
        let stretches: Vec<RingSegment> = parts.iter().map(|(_, s)| s.clone()).collect();
        parts.into_iter().zip(split(&slot, &stretches)).map(|((node, _), slot)| Dispatch::Down(node, ToDaemon::RingOut { job, seq, slot })).collect()
    }

    /// A message on its way up from `origin` (this node or one below): what
    /// to send where, and the message back if it still needs the usual
    /// handling (fence merging, or up as it is).
    pub(crate) fn up(&mut self, router: &Router, origin: usize, msg: ToLauncher) -> (Vec<Dispatch>, Option<ToLauncher>) {
        match msg {
            ToLauncher::RingIn { job, seq, segment } => (self.ring_in(router, origin, job, seq, segment), None),
            ToLauncher::Kvs { to: KvsDest::Node(node), msg } if node == self.me || router.below(node) => {
                (vec![Dispatch::Down(node, ToDaemon::Kvs(msg))], None)
            }
            ToLauncher::Kvs { to: KvsDest::Up, msg: KvsMsg::Get(req) } => {
                let job = self.jobs.get_mut(&req.job);
                let fresh = job.as_ref().and_then(|j| j.cache.get(&req.key)).filter(|c| c.fresh(req.epoch)).cloned();
                if let Some(c) = fresh {
                    let reply = GetReply { job: req.job, key: req.key, id: req.id, value: Some(c.value), valid_through: c.valid_through };
                    return (vec![Dispatch::Down(req.origin, ToDaemon::Kvs(KvsMsg::Reply(reply)))], None);
                }
                if let Some(j) = job.filter(|_| req.wait) {
                    j.waiting.entry(req.key.clone()).or_default().push(req.clone());
                }
                let msg = ToLauncher::Kvs { to: KvsDest::Up, msg: KvsMsg::Get(req) };
                (vec![Dispatch::Up(ToLauncher::FromNode { node: origin, msg: Box::new(msg) })], None)
            }
            ToLauncher::FenceIn { job, epoch, count, puts } => {
                let mut out = Vec::new();
                if let Some(j) = self.jobs.get_mut(&job) {
                    for (k, v) in &puts {
                        // Puts riding up are current until a later fence completes.
                        if j.design.fence_caches() {
                            j.cache.insert(k.clone(), Cached { value: v.clone(), valid_through: epoch + 1 });
                        }
                        for req in j.waiting.remove(k).unwrap_or_default() {
                            let reply = GetReply { job, key: k.clone(), id: req.id, value: Some(v.clone()), valid_through: req.epoch };
                            out.push(Dispatch::Down(req.origin, ToDaemon::Kvs(KvsMsg::Reply(reply))));
                        }
                    }
                }
                (out, Some(ToLauncher::FenceIn { job, epoch, count, puts }))
            }
            msg => (Vec::new(), Some(msg)),
        }
    }

    fn ring_in(&mut self, router: &Router, origin: usize, job: JobId, seq: u64, segment: RingSegment) -> Vec<Dispatch> {
        let expected = router.contributors(job);
        let from = router.hop(origin);
        if expected.is_empty() {
            // A job this link knows nothing of: pass it on untouched.
            let msg = ToLauncher::RingIn { job, seq, segment };
            return vec![Dispatch::Up(ToLauncher::FromNode { node: origin, msg: Box::new(msg) })];
        }
        let j = self.jobs.entry(job).or_default();
        let gather = j.rings.entry(seq).or_default();
        if !gather.add(from, segment) {
            tracing::warn!(%job, seq, from, "a second ring entry from the same part ignored");
        }
        if !gather.complete(&expected) {
            return Vec::new();
        }
        let parts = j.rings.remove(&seq).expect("present").parts();
        let stretches: Vec<RingSegment> = parts.iter().map(|(_, s)| s.clone()).collect();
        let segment = combine(&stretches).expect("at least one part");
        j.sent.insert(seq, parts);
        let msg = ToLauncher::RingIn { job, seq, segment };
        vec![Dispatch::Up(ToLauncher::FromNode { node: self.me, msg: Box::new(msg) })]
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use dpm_kvs::ring::RingSlot;
    use dpm_proto::{AppSpec, LaunchJob, PmiMode, ProcSpec};
    use tokio::sync::mpsc;

    use super::*;

    const J: JobId = JobId(0);

    /// Node 0 of a fan-out-2 tree over 4 nodes (children 2 and 3), with the
    /// job on nodes 0, 2 and 3.
    fn node0(design: KvsDesign) -> (Router, TreeKvs) {
        let children = [2, 3].into_iter().map(|c| (c, mpsc::unbounded_channel().0)).collect();
        let job_nodes = [(J, HashSet::from([0, 2, 3]))].into_iter().collect();
        let router = Router { me: 0, fanout: 2, children, job_nodes };
        let mut kvs = TreeKvs::new(0);
        let launch = LaunchJob {
            job: J,
            kvsname: "kvs".into(),
            size: 6,
            appnums: vec![0; 6],
            universe_size: 6,
            process_mapping: String::new(),
            spawner: None,
            preput: vec![],
            pmi_mode: PmiMode::Fd,
            stdin_rank: None,
            apps: vec![AppSpec { exe: "a".into(), argv: vec![], env: vec![], wdir: "/".into() }],
            procs: vec![ProcSpec { rank: dpm_kvs::Rank(0), app: 0 }],
            kvs: design,
            node_of: vec![0, 0, 2, 2, 3, 3],
        };
        kvs.observe_down(&ToDaemon::Launch(launch));
        (router, kvs)
    }

    fn seg(c: u32, f: &str, l: &str) -> RingSegment {
        RingSegment { count: c, first: f.into(), last: l.into() }
    }

    #[test]
    fn a_subtree_sends_one_ring_part_up_and_splits_the_answer() {
        let (router, mut kvs) = node0(KvsDesign::Auto);
        for (from, part) in [(3, seg(2, "e", "f")), (0, seg(2, "a", "b"))] {
            let (out, rest) = kvs.up(&router, from, ToLauncher::RingIn { job: J, seq: 0, segment: part });
            assert!(out.is_empty() && rest.is_none(), "waits for node 2");
        }
        let (out, _) = kvs.up(&router, 2, ToLauncher::RingIn { job: J, seq: 0, segment: seg(2, "c", "d") });
        let [Dispatch::Up(ToLauncher::FromNode { node: 0, msg })] = &out[..] else { panic!("{out:?}") };
        assert!(matches!(&**msg, ToLauncher::RingIn { segment, .. } if *segment == seg(6, "a", "f")));
        // The root places the subtree at 4 in a ring of 8, between "z" and "y".
        let slot = RingSlot { offset: 4, left: "z".into(), right: "y".into() };
        let got: Vec<(usize, u32, String, String)> = kvs
            .ring_out(J, 0, slot)
            .into_iter()
            .map(|d| match d {
                Dispatch::Down(n, ToDaemon::RingOut { slot, .. }) => (n, slot.offset, slot.left, slot.right),
                other => panic!("{other:?}"),
            })
            .collect();
        let expected = [(0, 4, "z", "c"), (2, 6, "b", "e"), (3, 8, "d", "y")];
        assert_eq!(got, expected.map(|(n, o, l, r)| (n, o, l.to_string(), r.to_string())));
    }

    #[test]
    fn messages_for_the_subtree_go_down_and_the_rest_go_up() {
        let (router, mut kvs) = node0(KvsDesign::Dkvs);
        let ack = |n| ToLauncher::Kvs { to: KvsDest::Node(n), msg: KvsMsg::PutAck { job: J, id: 1 } };
        assert!(matches!(&kvs.up(&router, 2, ack(3)).0[..], [Dispatch::Down(3, ToDaemon::Kvs(_))]));
        assert!(matches!(&kvs.up(&router, 2, ack(0)).0[..], [Dispatch::Down(0, ToDaemon::Kvs(_))]));
        let (out, rest) = kvs.up(&router, 2, ack(1));
        assert!(out.is_empty() && matches!(rest, Some(ToLauncher::Kvs { .. })), "node 1 is not below node 0");
    }

    fn walk_up(key: &str, epoch: u64, wait: bool) -> ToLauncher {
        let req = GetRequest { job: J, key: key.into(), origin: 3, id: 9, epoch, wait };
        ToLauncher::Kvs { to: KvsDest::Up, msg: KvsMsg::Get(req) }
    }

    #[test]
    fn puts_riding_up_answer_gets_walking_up_while_current() {
        let (router, mut kvs) = node0(KvsDesign::Tree);
        let fence = ToLauncher::FenceIn { job: J, epoch: 1, count: 2, puts: vec![("k".into(), "v".into())] };
        let (out, rest) = kvs.up(&router, 2, fence);
        assert!(out.is_empty() && matches!(rest, Some(ToLauncher::FenceIn { .. })), "the fence goes on as usual");
        let (out, _) = kvs.up(&router, 3, walk_up("k", 2, false));
        assert!(matches!(&out[..], [Dispatch::Down(3, ToDaemon::Kvs(KvsMsg::Reply(r)))] if r.value.as_deref() == Some("v") && r.valid_through == 2));
        // Two fences later the copy may be stale: ask further up.
        let (out, _) = kvs.up(&router, 3, walk_up("k", 3, false));
        assert!(matches!(&out[..], [Dispatch::Up(ToLauncher::FromNode { node: 3, .. })]), "{out:?}");
    }

    #[test]
    fn a_waiting_get_walking_up_is_answered_by_a_put_riding_past() {
        let (router, mut kvs) = node0(KvsDesign::Allgather);
        let (out, _) = kvs.up(&router, 3, walk_up("late", 0, true));
        assert!(matches!(&out[..], [Dispatch::Up(_)]), "passed on up");
        let fence = ToLauncher::FenceIn { job: J, epoch: 0, count: 2, puts: vec![("late".into(), "here".into())] };
        let (out, rest) = kvs.up(&router, 2, fence);
        assert!(rest.is_some());
        assert!(matches!(&out[..], [Dispatch::Down(3, ToDaemon::Kvs(KvsMsg::Reply(r)))] if r.id == 9 && r.value.as_deref() == Some("here")));
        // Forgotten with the job.
        kvs.up(&router, 3, walk_up("never", 0, true));
        kvs.observe_down(&ToDaemon::Forget { job: J });
        assert!(kvs.jobs.is_empty());
    }
}
