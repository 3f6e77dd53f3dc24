//! The tree re-forming around a lost interior node: the nodes below it are
//! detached (their ranks run on, they take nothing new) until each daemon
//! re-attaches straight below the launcher, or are lost with it if they do
//! not. From then on [`NodeTable::parent`], [`NodeTable::children`],
//! [`NodeTable::subtree`] and [`NodeTable::top`] follow the new shape: a
//! re-attached node is a top of its own subtree, whatever the heap says.

use std::collections::{BTreeMap, BTreeSet};

use dpm_kvs::NodeId;

use super::{NodeState, NodeTable};

/// The table's part of re-forming.
#[derive(Debug, Default)]
pub(super) struct Reform {
    /// Whether the nodes below a lost node wait to re-attach (a boot with a
    /// re-attach listener) rather than being lost with it.
    enabled: bool,
    /// Heap nodes re-attached straight below the launcher.
    tops: BTreeSet<NodeId>,
    /// Detached nodes and the state each had before (up or draining).
    detached: BTreeMap<NodeId, NodeState>,
}

impl Reform {
    pub(super) fn is_top(&self, node: NodeId) -> bool {
        self.tops.contains(&node)
    }
}

/// Why a daemon could not re-attach.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReattachError {
    #[error("{0} is not a node of this tree")]
    NoSuchNode(NodeId),
    #[error("{0} is not detached (its parent daemon was not lost, or it was lost itself)")]
    NotDetached(NodeId),
}

impl NodeTable {
    /// From now on the nodes below a lost node are detached rather than lost
    /// ([`NodeTable::detach`]), for their daemons to re-attach.
    pub fn enable_reform(&mut self) {
        self.reform.enabled = true;
    }

    pub fn reforms(&self) -> bool {
        self.reform.enabled
    }

    /// Heap nodes re-attached straight below the launcher.
    pub fn tops(&self) -> &BTreeSet<NodeId> {
        &self.reform.tops
    }

    /// The launcher's child whose subtree holds `node` now.
    pub fn top(&self, node: NodeId) -> NodeId {
        dpm_proto::tree::top_in(node, self.fanout, self.first, &self.reform.tops).unwrap_or(node)
    }

    /// `node` is gone (`why`). Without re-forming, or for a node detached
    /// itself, it and its subtree are lost ([`NodeTable::lose`]); else it
    /// alone is lost and the nodes below it that were up or draining are
    /// detached. The nodes newly lost, and those detached.
    pub fn detach(&mut self, node: NodeId, why: &str) -> (Vec<NodeId>, Vec<NodeId>) {
        if !self.reform.enabled || self.state(node) == Some(NodeState::Detached) {
            self.reform.detached.remove(&node);
            let lost = self.lose(node, why);
            for n in &lost {
                self.reform.detached.remove(n);
            }
            return (lost, Vec::new());
        }
        if !self.contains(node) || matches!(self.state(node), Some(NodeState::Released | NodeState::Lost)) {
            return (Vec::new(), Vec::new());
        }
        let below: Vec<NodeId> = self.subtree(node).into_iter().skip(1).collect();
        let mut detached = Vec::new();
        for n in below {
            if let Some(state @ (NodeState::Up | NodeState::Draining)) = self.state(n) {
                self.reform.detached.insert(n, state);
                self.set_state(n, NodeState::Detached);
                detached.push(n);
            }
        }
        let e = &mut self.nodes[node.0];
        e.state = NodeState::Lost;
        e.lost = Some(why.to_string());
        (vec![node], detached)
    }

    /// The daemon of detached `node` re-attached straight below the
    /// launcher: it tops its own subtree from now on, and the detached
    /// nodes of that subtree take processes again (as before). Those nodes.
    pub fn reattach(&mut self, node: NodeId) -> Result<Vec<NodeId>, ReattachError> {
        match self.state(node) {
            None => return Err(ReattachError::NoSuchNode(node)),
            Some(NodeState::Detached) => {}
            Some(_) => return Err(ReattachError::NotDetached(node)),
        }
        self.reform.tops.insert(node);
        let back: Vec<NodeId> = self.subtree(node).into_iter().filter(|&n| self.state(n) == Some(NodeState::Detached)).collect();
        for &n in &back {
            let before = self.reform.detached.remove(&n).unwrap_or(NodeState::Up);
            self.set_state(n, before);
        }
        Ok(back)
    }

    /// The detached nodes (waiting for their daemon to re-attach).
    pub fn detached(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.reform.detached.keys().copied()
    }

    /// Panics unless the re-formed shape holds together: every node has one
    /// top, appears in exactly one top's subtree, and the detached nodes are
    /// those in that state.
    pub fn check_shape(&self) {
        let tops: Vec<NodeId> = self.ids().filter(|&n| self.parent(n).is_none()).collect();
        let mut seen = vec![0u32; self.len()];
        for &t in &tops {
            for n in self.subtree(t) {
                seen[n.0] += 1;
                assert_eq!(self.top(n), t, "{n}: its top is {t}");
            }
        }
        assert!(seen.iter().all(|&c| c == 1), "every node below exactly one top: {seen:?}");
        let detached: BTreeSet<NodeId> = self.ids().filter(|&n| self.state(n) == Some(NodeState::Detached)).collect();
        assert_eq!(detached, self.reform.detached.keys().copied().collect(), "detached nodes");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(n: usize, fanout: usize) -> NodeTable {
        let mut t = NodeTable::new((0..n).map(|i| (format!("h{i}"), 2)), fanout);
        t.enable_reform();
        t
    }

    #[test]
    fn a_lost_interior_node_detaches_its_subtree_and_each_child_reattaches_as_a_top() {
        // fan-out 2, 7 nodes: 0 → {2, 3}, 2 → {6}.
        let mut t = table(7, 2);
        t.reserve(&[NodeId(6), NodeId(3)]).unwrap();
        let (lost, detached) = t.detach(NodeId(0), "its daemon exited");
        assert_eq!((lost, detached), (vec![NodeId(0)], vec![NodeId(2), NodeId(3), NodeId(6)]));
        t.check_shape();
        assert_eq!(t.state(NodeId(6)), Some(NodeState::Detached));
        assert_eq!(t.load(NodeId(6)), 1, "a detached node's ranks still hold their slots");
        assert!(!t.fits_free(11), "detached nodes take nothing: 3 up nodes of 2 slots");
        assert_eq!(t.reattach(NodeId(2)), Ok(vec![NodeId(2), NodeId(6)]));
        t.check_shape();
        assert_eq!((t.parent(NodeId(2)), t.top(NodeId(6)), t.subtree(NodeId(2))), (None, NodeId(2), vec![NodeId(2), NodeId(6)]));
        assert_eq!(t.subtree(NodeId(0)), vec![NodeId(0), NodeId(3)], "the lost node keeps only what did not re-attach");
        assert_eq!(t.reattach(NodeId(2)), Err(ReattachError::NotDetached(NodeId(2))));
        assert_eq!(t.reattach(NodeId(1)), Err(ReattachError::NotDetached(NodeId(1))));
        // Node 3 never comes back: lost, with nothing else.
        assert_eq!(t.detach(NodeId(3), "did not re-attach"), (vec![NodeId(3)], vec![]));
        t.check_shape();
        assert_eq!(t.state(NodeId(3)), Some(NodeState::Lost));
        // A re-attached node lost later takes its new subtree with it… and
        // re-forms again below it.
        assert_eq!(t.detach(NodeId(2), "its daemon exited"), (vec![NodeId(2)], vec![NodeId(6)]));
        assert_eq!(t.reattach(NodeId(6)), Ok(vec![NodeId(6)]));
        t.check_shape();
        assert_eq!(t.top(NodeId(6)), NodeId(6));
    }

    #[test]
    fn without_reforming_the_subtree_is_lost_and_a_draining_node_comes_back_draining() {
        let mut t = NodeTable::new((0..4).map(|i| (format!("h{i}"), 1)), 2);
        assert_eq!(t.detach(NodeId(0), "gone"), (vec![NodeId(0), NodeId(2), NodeId(3)], vec![]));
        let mut t = table(4, 2);
        t.drain(NodeId(3));
        assert_eq!(t.detach(NodeId(0), "gone").1, vec![NodeId(2), NodeId(3)]);
        t.reattach(NodeId(3)).unwrap();
        assert_eq!(t.state(NodeId(3)), Some(NodeState::Draining));
        t.check_shape();
    }
}
