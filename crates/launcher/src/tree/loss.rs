//! The tree re-forming around a lost node. Where the driver can take the
//! daemons below a lost interior node back (a boot's re-attach listener:
//! [`crate::node_table::NodeTable::enable_reform`]), they are detached
//! rather than lost: their ranks run on, they take nothing new, and each
//! daemon that re-attaches straight below the launcher ([`Tree::reattach`])
//! tops its own subtree from then on — the table's shape, every run's and
//! the pool's KVS root follow it, and the driver sends that subtree's
//! messages down the new link. A detached node whose daemon does not come
//! back within the driver's wait is lost as any node is.

use dpm_kvs::NodeId;

use super::{Tree, TreeEffects};
use crate::node_table::ReattachError;

impl Tree {
    /// `node` is gone (`why`): lost with its subtree, or alone with the
    /// nodes below it detached (told to the driver). The nodes newly lost.
    pub(super) fn lose_or_detach(&mut self, fx: &mut dyn TreeEffects, node: NodeId, why: &str) -> Vec<NodeId> {
        let (lost, detached) = self.parts.nodes.detach(node, why);
        if !detached.is_empty() {
            tracing::info!(%node, ?detached, "lost; the daemons below it may re-attach");
            fx.nodes_detached(node, &detached);
        }
        lost
    }

    /// The daemon of detached `node` re-attached straight below the
    /// launcher (the driver linked it): it and the detached nodes of its
    /// subtree take processes again, and the runs' and the pool's KVS
    /// parts follow the new shape. The nodes back, for the driver to route
    /// their messages down the new link.
    pub fn reattach(&mut self, node: NodeId) -> Result<Vec<NodeId>, ReattachError> {
        let back = self.parts.nodes.reattach(node)?;
        let tops = self.parts.nodes.tops().clone();
        for run in self.runs.values_mut() {
            run.reformed(&tops);
        }
        self.parts.pool.reformed(&tops);
        Ok(back)
    }
}
