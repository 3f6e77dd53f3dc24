//! A daemon's place in the tree: [`TreeNode`], the pure state machine of
//! what a daemon does on the link to its parent besides I/O.
//!
//! Inputs are a message from the parent ([`TreeNode::from_parent`]) and a
//! message on its way up from this node's own reactor or from a node below
//! ([`TreeNode::from_below`]); outputs are [`TreeAction`]s: to the parent,
//! to a direct child, to the own node. It does:
//! - **routing down** by next hop: a `Down::To` message for a node below goes
//!   to the child whose subtree holds it, one for this node to its reactor;
//! - **routing up**: everything from below goes up as `Up::From{origin}`;
//! - **partial fences**: a job's fence arrivals from this node and from each
//!   child subtree running it (learnt from the launches passing through) are
//!   merged into one `FenceIn` (see [`kvs`] for completions coming down);
//! - the subtree's **KVS and ring work** ([`kvs`]).
//!
//! [`crate::link`] drives it: handshake, heartbeats, frames, starting the
//! children ([`TreeNode::child_linked`]).

use std::collections::{BTreeSet, HashMap, HashSet};

use dpm_kvs::{JobId, KeyValues, NodeId};
use dpm_proto::{ToDaemon, ToLauncher};

mod kvs;
mod reform;
#[cfg(test)]
mod tests;

use kvs::{Dispatch, TreeKvs};

/// What a [`TreeNode`] asks to be sent.
#[derive(Debug)]
pub enum TreeAction {
    /// To the parent, as coming from node `origin` (`Up::From`).
    Parent { origin: NodeId, msg: ToLauncher },
    /// To the direct child `hop`, for node `node` below it (`Down::To`).
    Child { hop: NodeId, node: NodeId, msg: ToDaemon },
    /// To this node's own reactor.
    Own(ToDaemon),
}

/// A fence's arrivals from this subtree, not yet complete.
#[derive(Default)]
struct PartialFence {
    count: u32,
    puts: KeyValues,
    /// The contributors (this node, or a child) heard from.
    seen: HashSet<NodeId>,
}

/// Routing state of a daemon with children in the tree.
pub(crate) struct Router {
    me: NodeId,
    fanout: usize,
    /// The nodes the tree started with (the `TreeSpec`'s); those after
    /// them joined the running tree straight below the launcher, never
    /// below a daemon. `usize::MAX` until known.
    first: usize,
    /// The direct children linked.
    children: BTreeSet<NodeId>,
    /// For each job, the nodes of this subtree that run its ranks (learnt from
    /// the launches passing through), so fence arrivals can be merged here.
    job_nodes: HashMap<JobId, HashSet<NodeId>>,
}

impl Router {
    fn observe(&mut self, to: NodeId, msg: &ToDaemon) {
        match msg {
            ToDaemon::Launch(l) if !l.procs.is_empty() => {
                self.job_nodes.entry(l.job).or_default().insert(to);
            }
            ToDaemon::Forget { job } if to == self.me => {
                self.job_nodes.remove(job);
            }
            _ => {}
        }
    }

    /// Who speaks for `node` here: this daemon itself, or the child whose subtree holds it.
    fn hop(&self, node: NodeId) -> NodeId {
        if node == self.me {
            return node;
        }
        dpm_proto::tree::next_hop(Some(self.me), node, self.fanout).unwrap_or(node)
    }

    /// Whether `node` lies below this daemon (in a linked child's subtree).
    fn below(&self, node: NodeId) -> bool {
        node != self.me && node.0 < self.first && dpm_proto::tree::next_hop(Some(self.me), node, self.fanout).is_some_and(|h| self.children.contains(&h))
    }

    /// Who contributes this subtree's part of a collective of `job`: this
    /// node if it runs ranks of the job, and each child whose subtree does.
    fn contributors(&self, job: JobId) -> BTreeSet<NodeId> {
        self.job_nodes.get(&job).map(|nodes| nodes.iter().map(|&n| self.hop(n)).collect()).unwrap_or_default()
    }

    /// `msg` towards `to`, through the linked child on the way.
    fn forward(&self, to: NodeId, msg: ToDaemon, out: &mut Vec<TreeAction>) {
        match dpm_proto::tree::next_hop(Some(self.me), to, self.fanout).filter(|h| self.children.contains(h)) {
            Some(hop) => out.push(TreeAction::Child { hop, node: to, msg }),
            None => tracing::debug!(%to, "a message for a node no longer linked below this one was dropped"),
        }
    }

    /// `msg` to this node's reactor, or down the tree towards `node`.
    fn deliver(&self, node: NodeId, msg: ToDaemon, out: &mut Vec<TreeAction>) {
        if node == self.me {
            out.push(TreeAction::Own(msg));
        } else {
            self.forward(node, msg, out);
        }
    }
}

/// See the module documentation.
pub struct TreeNode {
    router: Router,
    fences: HashMap<(JobId, u64), PartialFence>,
    kvs: TreeKvs,
    /// Fence arrivals sent up whose completion has not come down (`reform`).
    sent_up: BTreeSet<(JobId, u64)>,
}

impl TreeNode {
    /// Node `me`, with no children linked yet.
    pub fn new(me: NodeId) -> Self {
        let router = Router { me, fanout: 1, first: usize::MAX, children: BTreeSet::new(), job_nodes: HashMap::new() };
        TreeNode { router, fences: HashMap::new(), kvs: TreeKvs::new(me), sent_up: BTreeSet::new() }
    }

    pub fn me(&self) -> NodeId {
        self.router.me
    }

    /// The tree's fan-out and node count (from the `TreeSpec`), before the
    /// children link: nodes beyond the count joined later, not below here.
    pub fn set_shape(&mut self, fanout: usize, nodes: usize) {
        self.router.fanout = fanout;
        self.router.first = nodes;
    }

    /// The link to direct child `node` is up.
    pub fn child_linked(&mut self, node: NodeId) {
        self.router.children.insert(node);
    }

    /// The links to the children are closed (this daemon stops).
    pub fn children_gone(&mut self) {
        self.router.children.clear();
    }

    /// A message from the parent for node `to` (a `Down::To`; heartbeats,
    /// the tree description and shutdown are the link's business). Yields
    /// only [`TreeAction::Own`] and [`TreeAction::Child`]: nothing from above
    /// goes back up.
    pub fn from_parent(&mut self, to: NodeId, msg: ToDaemon) -> Vec<TreeAction> {
        let mut out = Vec::new();
        self.track_down(&msg);
        self.router.observe(to, &msg);
        if let ToDaemon::Forget { job } = msg {
            // A job killed mid-fence never completes it: drop its
            // arrivals (a boot's daemons live through many jobs).
            self.fences.retain(|(j, _), _| *j != job);
        }
        let Some(msg) = self.pass_down(to, msg, &mut out) else { return out };
        if to == self.router.me {
            out.push(TreeAction::Own(msg));
        } else {
            self.router.forward(to, msg, &mut out);
        }
        out
    }

    /// A message addressed to `to` passing down: returned for the usual
    /// delivery, or `None` if it was handled here (a ring answer for this
    /// subtree, split and sent on).
    fn pass_down(&mut self, to: NodeId, msg: ToDaemon, out: &mut Vec<TreeAction>) -> Option<ToDaemon> {
        self.kvs.observe_down(&msg);
        let me = self.router.me;
        match msg {
            ToDaemon::RingOut { job, seq, slot } if to == me => {
                for d in self.kvs.ring_out(job, seq, slot) {
                    if let Dispatch::Down(node, msg) = d {
                        self.router.deliver(node, msg, out);
                    }
                }
                None
            }
            ToDaemon::FenceDone { job, epoch, delta } if to == me => {
                // The launcher sends a completed fence to the top of each
                // subtree running the job: pass it on to each child whose
                // subtree does, then take it here if this node runs the job too.
                let contributors = self.router.contributors(job);
                for &child in contributors.iter().filter(|&&n| n != me) {
                    let msg = ToDaemon::FenceDone { job, epoch, delta: delta.clone() };
                    self.router.forward(child, msg, out);
                }
                // A job this link knows nothing of: the engine judges it.
                (contributors.contains(&me) || contributors.is_empty()).then_some(ToDaemon::FenceDone { job, epoch, delta })
            }
            msg => Some(msg),
        }
    }

    /// A message on its way up from `origin`: this node's own reactor
    /// (`origin == me`) or a node below (as the child's link delivers it).
    pub fn from_below(&mut self, origin: NodeId, msg: ToLauncher) -> Vec<TreeAction> {
        let out = self.up(origin, msg);
        self.track_up(&out);
        out
    }

    fn up(&mut self, origin: NodeId, msg: ToLauncher) -> Vec<TreeAction> {
        let mut out = Vec::new();
        let (dispatch, rest) = self.kvs.up(&self.router, origin, msg);
        for d in dispatch {
            match d {
                Dispatch::Up(origin, msg) => out.push(TreeAction::Parent { origin, msg }),
                Dispatch::Down(node, msg) => self.router.deliver(node, msg, &mut out),
            }
        }
        let Some(msg) = rest else { return out };
        let me = self.router.me;
        let up = match msg {
            ToLauncher::FenceIn { job, epoch, count, puts } => {
                // One arrival is due from each direct contributor: this
                // daemon, and each child whose subtree runs the job (that
                // child merged its own subtree's already).
                let expected = self.router.contributors(job);
                if expected.len() < 2 {
                    let msg = ToLauncher::FenceIn { job, epoch, count, puts };
                    out.push(TreeAction::Parent { origin, msg });
                    return out;
                }
                let f = self.fences.entry((job, epoch)).or_default();
                f.count += count;
                f.puts.extend(puts);
                f.seen.insert(self.router.hop(origin));
                if !expected.iter().all(|n| f.seen.contains(n)) {
                    return out;
                }
                let f = self.fences.remove(&(job, epoch)).expect("present");
                TreeAction::Parent { origin: me, msg: ToLauncher::FenceIn { job, epoch, count: f.count, puts: f.puts } }
            }
            msg => TreeAction::Parent { origin, msg },
        };
        out.push(up);
        out
    }
}
