//! A table that grows and shrinks with its tree: nodes that join a running
//! tree (`dpm boot --add`, a lazy node's daemon), drain, leave.

use dpm_kvs::NodeId;

use super::{NodeEntry, NodeState, NodeTable};

/// How many nodes may join a running tree over its life.
pub const JOIN_ROOM: usize = 1024;

/// Why a node cannot join the tree.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JoinError {
    #[error("the tree cannot take more nodes ({JOIN_ROOM} have joined it over its life)")]
    NoRoom,
    #[error("{0} is in the tree already")]
    Present(String),
    #[error("{0}: a node needs at least one slot")]
    NoSlots(String),
}

impl NodeTable {
    /// A node joins the running tree (`dpm boot --add`): [`NodeState::Joining`]
    /// until [`NodeTable::joined`], then up; linked straight to the
    /// launcher. Refused for a host the tree has up, draining or joining (a
    /// lost or released host may come back, as a new node).
    pub fn join(&mut self, host: &str, slots: u32) -> Result<NodeId, JoinError> {
        if slots == 0 {
            return Err(JoinError::NoSlots(host.to_string()));
        }
        if self.nodes.iter().any(|n| n.host == host && matches!(n.state, NodeState::Up | NodeState::Draining | NodeState::Joining)) {
            return Err(JoinError::Present(host.to_string()));
        }
        if self.nodes.len() >= self.room {
            return Err(JoinError::NoRoom);
        }
        self.nodes.push(NodeEntry { host: host.to_string(), slots, state: NodeState::Joining, lost: None });
        self.load.push(0);
        Ok(NodeId(self.nodes.len() - 1))
    }

    /// A joining node's daemon is linked: it takes processes from now.
    pub fn joined(&mut self, node: NodeId) {
        if self.state(node) == Some(NodeState::Joining) {
            self.set_state(node, NodeState::Up);
        }
    }

    /// A node that cannot join after all (its daemon never came up): out
    /// of the table again if it was the last to join, else released.
    pub fn unjoin(&mut self, node: NodeId) {
        if self.state(node) != Some(NodeState::Joining) {
            return;
        }
        if node.0 + 1 == self.nodes.len() && self.load(node) == 0 {
            self.nodes.pop();
            self.load.pop();
        } else {
            self.set_state(node, NodeState::Released);
        }
    }

    /// Stop placing on `node`: what runs there finishes. False for a node
    /// that is not up.
    pub fn drain(&mut self, node: NodeId) -> bool {
        match self.nodes.get_mut(node.0) {
            Some(n) if n.state == NodeState::Up => {
                n.state = NodeState::Draining;
                true
            }
            _ => false,
        }
    }

    /// A draining node whose daemon may leave now: nothing placed there is
    /// left, and no node hangs below it in the tree (an interior node of
    /// the first heap stays, taking nothing, while its children are up).
    pub fn may_leave(&self, node: NodeId) -> bool {
        self.state(node) == Some(NodeState::Draining)
            && self.load(node) == 0
            && self.children(node).iter().all(|&c| matches!(self.state(c), Some(NodeState::Lost | NodeState::Released)))
    }

    /// The node's daemon left: it holds no slots of the tree any more.
    pub fn release_node(&mut self, node: NodeId) {
        self.set_state(node, NodeState::Released);
    }

    /// The nodes of `host` that are up or draining.
    pub fn of_host(&self, host: &str) -> Vec<NodeId> {
        self.ids().filter(|&n| self.host(n) == host && matches!(self.state(n), Some(NodeState::Up | NodeState::Draining))).collect()
    }
}
