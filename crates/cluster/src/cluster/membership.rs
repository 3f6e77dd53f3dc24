//! A boot that grows and shrinks on the [`Cluster`]: nodes joining the
//! running tree ([`Cluster::add_node`], as `dpm boot --add` joins them:
//! straight below the launcher, outside the first nodes' heap) and drained
//! ([`Cluster::drain`], `dpm boot --drain [--force]`); a drained node's
//! daemon leaves in the tree event that empties it
//! ([`dpm_launcher::tree::TreeEffect::NodeLeft`]), recorded in
//! [`Cluster::left`]. The tree's invariants (one slot ledger among them)
//! are checked after every event, as always.

use dpm_daemon::node::recorder::RecordingEffects;
use dpm_daemon::node::NodeReactor;
use dpm_daemon::tree::TreeNode;
use dpm_daemon::DaemonConfig;
use dpm_kvs::NodeId;
use dpm_proto::tree;

use super::{Cluster, Node};
use crate::resources::{DaemonThread, NodeResources};

impl Cluster {
    /// A node of `slots` slots joins the running tree now (its daemon is
    /// linked at once). Its index.
    pub fn add_node(&mut self, slots: u32) -> usize {
        let i = self.nodes.len();
        let host = format!("n{i}");
        let ids = self.with_tree(|tree, _| tree.join(&[(host.clone(), slots)])).expect("a new host joins");
        assert_eq!(ids, [NodeId(i)], "the table and the cluster number nodes alike");
        let mut node_tree = TreeNode::new(NodeId(i));
        node_tree.set_shape(self.layout.fanout, self.layout.nodes);
        let reactor = NodeReactor::new(&DaemonConfig { host, trace: false });
        self.nodes.push(Node { reactor, fx: RecordingEffects::new(), tree: node_tree, alive: true });
        // Its own cores and daemon thread, before the launcher's (the last entries).
        self.res.insert(i, NodeResources::new(self.layout.costs.cores));
        self.threads.insert(i, DaemonThread::default());
        self.with_tree(|tree, _| tree.joined(&ids));
        i
    }

    /// `dpm boot --drain` of `nodes` (`force`: their ranks are killed now):
    /// the tree's answer.
    pub fn drain(&mut self, nodes: &[usize], force: bool) -> Result<Vec<String>, String> {
        let hosts: Vec<String> = nodes.iter().map(|&n| format!("n{n}")).collect();
        self.with_tree(|tree, fx| tree.drain(fx, &hosts, force))
    }

    /// A drained node's daemon left: nothing reaches it any more.
    pub(super) fn node_left(&mut self, node: NodeId) {
        if let Some(n) = self.nodes.get_mut(node.0) {
            n.alive = false;
        }
        self.left.push(node.0);
    }

    /// Where node `node`'s messages up go (`None`: the launcher): a joined
    /// node's, and a re-attached one's, go to the launcher.
    pub(super) fn parent_of(&self, node: usize) -> Option<usize> {
        if node >= self.layout.nodes || self.reform.tops.contains(&NodeId(node)) {
            return None;
        }
        tree::parent(NodeId(node), self.layout.fanout).map(|p| p.0)
    }

    /// The links between `node` and the launcher.
    pub(super) fn hops_up(&self, node: usize) -> u32 {
        let (mut hops, mut at) = (1, node);
        while let Some(p) = self.parent_of(at) {
            hops += 1;
            at = p;
        }
        hops
    }

    /// The top-level node whose subtree holds `node`.
    pub(super) fn top_of(&self, node: usize) -> Option<usize> {
        // A joined node, and one re-attached after its parent's loss, is a top of its own.
        tree::top_in(NodeId(node), self.layout.fanout, self.layout.nodes, &self.reform.tops).map(|n| n.0)
    }

    /// `node` and the nodes below it.
    pub(super) fn subtree_of(&self, node: usize) -> Vec<usize> {
        if node >= self.layout.nodes {
            return vec![node];
        }
        tree::subtree(NodeId(node), self.layout.nodes, self.layout.fanout).into_iter().map(|n| n.0).collect()
    }
}
