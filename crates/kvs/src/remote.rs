//! The KVS messages daemons exchange with each other (and with the launcher,
//! the root of the tree) under the on-demand designs.
//!
//! They are plain data: the node store ([`crate::store`]) produces and
//! consumes them, and `dpm-proto` carries them through the daemon tree
//! (addressed to a node, or up the tree for the `Tree` design's walk).

use serde::{Deserialize, Serialize};

use crate::{JobId, NodeId};

/// Where a KVS message goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum KvsDest {
    /// The daemon of this node (routed through the tree).
    Node(NodeId),
    /// Up the tree: the first ancestor with a fresh copy answers, the
    /// launcher (which keeps every put of the job) at the latest.
    Up,
}

/// A get that left its node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetRequest {
    pub job: JobId,
    pub key: String,
    /// The node that asked (where the answer goes).
    pub origin: NodeId,
    /// The asking node's number for this request.
    pub id: u64,
    /// Fences the asking node had completed when it asked: a copy put
    /// before fence `epoch - 1` may have been overwritten since.
    pub epoch: u64,
    /// Answer only when the key exists (queued at the holder until then).
    pub wait: bool,
}

/// The answer to a [`GetRequest`], sent to its origin.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetReply {
    pub job: JobId,
    pub key: String,
    pub id: u64,
    /// `None`: the key does not exist (never for a waiting get).
    pub value: Option<String>,
    /// The last fence epoch in which this value is known to be current: a
    /// cached copy serves gets up to this epoch, later ones ask again.
    pub valid_through: u64,
}

/// A put sent to the key's owner (`Dkvs`, and sparse keys under `Auto`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerPut {
    pub job: JobId,
    pub key: String,
    pub value: String,
    /// The putting node's fence epoch (a later put of the key wins).
    pub epoch: u64,
    pub origin: NodeId,
    /// Acknowledged by a [`KvsMsg::PutAck`] with this id.
    pub id: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum KvsMsg {
    Get(GetRequest),
    Reply(GetReply),
    Put(OwnerPut),
    /// The owner stored put `id`; the putting node may enter the fence.
    PutAck {
        job: JobId,
        id: u64,
    },
}

impl KvsMsg {
    pub fn job(&self) -> JobId {
        match self {
            KvsMsg::Get(r) => r.job,
            KvsMsg::Reply(r) => r.job,
            KvsMsg::Put(p) => p.job,
            KvsMsg::PutAck { job, .. } => *job,
        }
    }
}
