//! The tree re-forming around a lost interior node, in virtual time: only
//! that node's daemon dies; the launcher hears of it up the tree, the
//! daemon above it (if any) drops it as a child, and each of its children
//! re-attaches straight below the launcher one hop after the launcher
//! heard — with the real `TreeNode::reattached` (fences cut by the loss,
//! sent up as `ToLauncher::FenceCut`) and the real `Tree::reattach`.

use std::collections::BTreeSet;

use dpm_kvs::NodeId;
use dpm_proto::{tree, ExitStatus, ToLauncher};

use super::{Cluster, Event};

/// The cluster's part of re-forming.
#[derive(Debug, Default)]
pub(super) struct Reform {
    pub(super) on: bool,
    /// Heap nodes re-attached straight below the launcher.
    pub(super) tops: BTreeSet<NodeId>,
}

impl Cluster {
    /// From now on a lost node's children re-attach (a boot with its
    /// re-attach listener) rather than being lost with it.
    pub fn reform(&mut self) {
        self.reform.on = true;
        self.with_tree(|tree, _| tree.shared_mut().nodes.enable_reform());
    }

    /// `node`'s daemon alone dies with its ranks; see the module documentation.
    pub(super) fn lose_reforming(&mut self, node: usize) {
        self.nodes[node].alive = false;
        for p in self.procs.iter_mut().filter(|p| p.node == node && p.end.is_none()) {
            p.end = Some(ExitStatus::Signal(libc::SIGKILL));
        }
        let hops = self.hops_up(node);
        if let Some(parent) = self.parent_of(node) {
            let actions = self.nodes[parent].tree.child_lost(NodeId(node));
            self.tree_actions(parent, actions);
        }
        let heard = self.layout.costs.link_hop * hops;
        self.schedule(heard, Event::Lost { node, error: "link closed".into() });
        for child in tree::children(Some(NodeId(node)), self.layout.nodes, self.layout.fanout) {
            if !self.reform.tops.contains(&child) && self.nodes[child.0].alive {
                // Its frames up wait for the new link (they go there from now).
                self.reform.tops.insert(child);
                self.schedule(heard + self.layout.costs.link_hop, Event::Reattach(child.0));
            }
        }
    }

    /// The daemon of `node` re-attached: it reports the fences cut, and the
    /// tree takes it back as a top.
    pub(super) fn reattach(&mut self, node: usize) {
        let cut = self.nodes[node].tree.reattached();
        let back = self.with_tree(|tree, _| tree.reattach(NodeId(node)));
        assert!(back.is_ok(), "node {node} re-attaches: {back:?}");
        for (job, epoch) in cut {
            self.schedule(self.layout.costs.link_hop, Event::Up { to: None, origin: NodeId(node), msg: ToLauncher::FenceCut { job, epoch } });
        }
        // `Down::Resync` to its subtree: each node's real reactor says its
        // ranks' exits again and reopens its output windows.
        for n in self.subtree_of(node) {
            if self.nodes[n].alive {
                self.with_node(n, |r, fx| r.resync(fx));
            }
        }
    }

    /// Rank exits on their way up to `node` now (sent, not yet arrived):
    /// lost with it if it dies before they arrive.
    pub fn exits_in_flight_to(&self, node: usize) -> usize {
        let to_node = |e: &Event| matches!(e, Event::Up { to: Some(n), msg: ToLauncher::Exited(_), .. } if *n == node);
        self.events
            .values()
            .filter(|e| match e {
                Event::Ready(inner) | Event::Delayed(inner) => to_node(inner),
                e => to_node(e),
            })
            .count()
    }
}
