//! [`UpSender`]: where a node's messages to the launcher go, with no task
//! between: a link's channel (framed up the tree as they are), or, for the
//! launcher's in-process node, the launcher's own channel of [`Up`]s, each
//! message tagged as node 0's as it is sent.

use tokio::sync::mpsc::UnboundedSender;

use dpm_kvs::NodeId;
use dpm_proto::link::Up;
use dpm_proto::ToLauncher;

/// See the module documentation.
#[derive(Clone, Debug)]
pub enum UpSender {
    /// A link's: its messages are framed to the parent.
    Link(UnboundedSender<ToLauncher>),
    /// The launcher's own channel: the node is node 0, in its process.
    Launcher(UnboundedSender<Up>),
}

impl UpSender {
    /// Send `msg` up; false once nobody listens.
    pub fn send(&self, msg: ToLauncher) -> bool {
        match self {
            UpSender::Link(tx) => tx.send(msg).is_ok(),
            UpSender::Launcher(tx) => tx.send(Up::From { node: NodeId(0), msg }).is_ok(),
        }
    }
}

impl From<UnboundedSender<ToLauncher>> for UpSender {
    fn from(tx: UnboundedSender<ToLauncher>) -> Self {
        UpSender::Link(tx)
    }
}

impl From<UnboundedSender<Up>> for UpSender {
    fn from(tx: UnboundedSender<Up>) -> Self {
        UpSender::Launcher(tx)
    }
}
