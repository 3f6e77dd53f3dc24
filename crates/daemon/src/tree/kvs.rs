//! The KVS work a daemon does for its subtree, as part of its [`TreeNode`]
//! (on the link to its parent): what passes through it rather than what its
//! own ranks ask.
//!
//! - **Ring**: one [`RingGather`] per job and ring number collects the
//!   stretch of this node's ranks and one stretch per child subtree; when all
//!   are in, one `RingIn` goes up. The parts are kept until the `RingOut`
//!   for this subtree comes down, which is split among them (this daemon's
//!   own part goes to its engine, each child's to that child).
//! - **Fence completions** come down once per subtree: a daemon passes one
//!   on to each child whose subtree runs the job (and keeps it if its own
//!   node does), so a broadcast delta crosses each link once.
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

use std::collections::HashMap;

use dpm_kvs::remote::{GetReply, GetRequest, KvsDest, KvsMsg};
use dpm_kvs::ring::{combine, split, RingGather, RingSegment, RingSlot};
use dpm_kvs::store::Cached;
use dpm_kvs::{JobId, KvsDesign, NodeId};
use dpm_proto::{ToDaemon, ToLauncher};

use super::Router;
#[cfg(doc)]
use super::TreeNode;

/// Where a message handled here goes next.
#[derive(Debug)]
pub(crate) enum Dispatch {
    /// To the parent, as coming from the node given.
    Up(NodeId, ToLauncher),
    /// To a node of this subtree: this daemon's engine, or down the tree.
    Down(NodeId, ToDaemon),
}

#[derive(Default)]
struct TreeJob {
    design: KvsDesign,
    cache: HashMap<String, Cached>,
    /// Rings being gathered, by number.
    rings: HashMap<u64, RingGather>,
    /// Rings sent up: the parts (contributor, stretch) to split the answer among.
    sent: HashMap<u64, Vec<(NodeId, RingSegment)>>,
    /// Waiting gets that walked up through here, by key.
    waiting: HashMap<String, Vec<GetRequest>>,
}

/// See the module documentation.
pub(crate) struct TreeKvs {
    me: NodeId,
    jobs: HashMap<JobId, TreeJob>,
}

impl TreeKvs {
    pub(crate) fn new(me: NodeId) -> Self {
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
    pub(crate) fn up(&mut self, router: &Router, origin: NodeId, msg: ToLauncher) -> (Vec<Dispatch>, Option<ToLauncher>) {
        match msg {
            ToLauncher::RingIn { job, seq, segment } => (self.ring_in(router, origin, job, seq, segment), None),
            ToLauncher::Kvs { to: KvsDest::Node(node), msg } if node == self.me || router.below(node) => (vec![Dispatch::Down(node, ToDaemon::Kvs(msg))], None),
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
                (vec![Dispatch::Up(origin, msg)], None)
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

    fn ring_in(&mut self, router: &Router, origin: NodeId, job: JobId, seq: u64, segment: RingSegment) -> Vec<Dispatch> {
        let expected = router.contributors(job);
        let from = router.hop(origin);
        if expected.is_empty() {
            // A job this link knows nothing of: pass it on untouched.
            let msg = ToLauncher::RingIn { job, seq, segment };
            return vec![Dispatch::Up(origin, msg)];
        }
        let j = self.jobs.entry(job).or_default();
        let gather = j.rings.entry(seq).or_default();
        if !gather.add(from, segment) {
            tracing::warn!(%job, seq, from = from.0, "a second ring entry from the same part ignored");
        }
        if !gather.complete(&expected) {
            return Vec::new();
        }
        let parts = j.rings.remove(&seq).expect("present").parts();
        let stretches: Vec<RingSegment> = parts.iter().map(|(_, s)| s.clone()).collect();
        let segment = combine(&stretches).expect("at least one part");
        j.sent.insert(seq, parts);
        let msg = ToLauncher::RingIn { job, seq, segment };
        vec![Dispatch::Up(self.me, msg)]
    }
}
