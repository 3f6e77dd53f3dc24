//! The shape of the daemon tree: a k-ary heap with the launcher at the top.
//!
//! Node `i` sits at heap position `i + 1` under the launcher (position 0), so
//! with fan-out `k` the launcher's children are nodes `0..k` and node `i`'s
//! children are nodes `(i + 1) * k ..= (i + 1) * k + k - 1`. Every daemon gets
//! the whole node list and computes its part; nothing else describes the tree.

use dpm_kvs::NodeId;
use serde::{Deserialize, Serialize};

/// How a daemon starts its children.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Bootstrap {
    /// `dpm daemon` as a child process on this machine (virtual nodes).
    Fork,
    /// `ssh HOST dpm daemon`, with this ssh command and options.
    Ssh(Vec<String>),
    /// One `srun` step per daemon, inside the job's Slurm allocation: the step's
    /// single task has srun's stdin and stdout, which carry the link; these
    /// words (`HYDRA_LAUNCHER_EXTRA_ARGS`) after srun's own options.
    Slurm(Vec<String>),
    /// A batch system's launch agent (`blaunch`, `qrsh -inherit -V`,
    /// `pbs_tmrsh`, or ssh inside a PBS allocation without it): this command,
    /// then the host, then `dpm daemon …`, as for ssh; a host that is this
    /// machine gets its daemon by fork instead, as Hydra does, unless
    /// `autofork` is off (Hydra's `HYDRA_LAUNCHER_AUTOFORK=0`).
    Agent { command: Vec<String>, autofork: bool },
}

/// What a daemon needs to start its part of the tree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeSpec {
    /// The host of every node, by node index.
    pub hosts: Vec<String>,
    /// Children per daemon (and of the launcher).
    pub fanout: usize,
    pub bootstrap: Bootstrap,
    pub trace: bool,
    pub verbose: u8,
    /// Where a daemon whose parent daemon is lost re-attaches (`HOST:PORT`
    /// of the launcher's re-attach listener): given to the daemons below the
    /// top level, which then keep serving as top-level daemons rather than
    /// end with their parent (`None`: they end with it).
    #[serde(default)]
    pub rejoin: Option<String>,
    /// Seconds each daemon may take to start and answer its handshake
    /// (`--connect-timeout`, `DPM_CONNECT_TIMEOUT`), for every daemon of the
    /// tree, whoever starts it (`None`: the default, 30 s).
    #[serde(default)]
    pub start_timeout: Option<u64>,
}

/// The direct children of `parent` (`None`: the launcher) among `n` nodes.
pub fn children(parent: Option<NodeId>, n: usize, fanout: usize) -> Vec<NodeId> {
    let fanout = fanout.max(1);
    let position = parent.map_or(0, |p| p.0 + 1);
    let first = position * fanout; // node index of the first child
    (first..(first + fanout).min(n)).map(NodeId).collect()
}

/// The parent of node `i` (`None`: the launcher).
pub fn parent(i: NodeId, fanout: usize) -> Option<NodeId> {
    let fanout = fanout.max(1);
    let position = i.0 / fanout; // heap position of the parent (node i sits at i + 1)
    position.checked_sub(1).map(NodeId)
}

/// Node `i` and everything below it.
pub fn subtree(i: NodeId, n: usize, fanout: usize) -> Vec<NodeId> {
    let mut out = vec![i];
    let mut next = 0;
    while next < out.len() {
        let node = out[next];
        out.extend(children(Some(node), n, fanout));
        next += 1;
    }
    out
}

/// The launcher's child whose subtree holds `node`, in a tree whose first
/// `first` nodes form the heap and the rest joined later, each straight
/// below the launcher.
pub fn top_of(node: NodeId, fanout: usize, first: usize) -> Option<NodeId> {
    if node.0 >= first {
        return Some(node);
    }
    next_hop(None, node, fanout)
}

/// [`top_of`] in a tree that re-formed: `tops` are heap nodes re-attached
/// straight below the launcher after their parent daemon was lost; each
/// is the top of its own subtree from then on.
pub fn top_in(node: NodeId, fanout: usize, first: usize, tops: &std::collections::BTreeSet<NodeId>) -> Option<NodeId> {
    let mut hop = node;
    loop {
        if hop.0 >= first || tops.contains(&hop) {
            return Some(hop);
        }
        match parent(hop, fanout) {
            Some(up) => hop = up,
            None => return Some(hop),
        }
    }
}

/// The child of `from` (`None`: the launcher) whose subtree holds `node`.
pub fn next_hop(from: Option<NodeId>, node: NodeId, fanout: usize) -> Option<NodeId> {
    let mut hop = node;
    loop {
        let up = parent(hop, fanout);
        if up == from {
            return Some(hop);
        }
        hop = up?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[usize]) -> Vec<NodeId> {
        v.iter().copied().map(NodeId).collect()
    }

    #[test]
    fn binary_tree_of_seven() {
        let n = NodeId;
        assert_eq!(children(None, 7, 2), ids(&[0, 1]));
        assert_eq!(children(Some(n(0)), 7, 2), ids(&[2, 3]));
        assert_eq!(children(Some(n(1)), 7, 2), ids(&[4, 5]));
        assert_eq!(children(Some(n(2)), 7, 2), ids(&[6]));
        assert_eq!(children(Some(n(3)), 7, 2), ids(&[]));
        assert_eq!(parent(n(0), 2), None);
        assert_eq!(parent(n(3), 2), Some(n(0)));
        assert_eq!(parent(n(6), 2), Some(n(2)));
        assert_eq!(subtree(n(0), 7, 2), ids(&[0, 2, 3, 6]));
        assert_eq!(next_hop(None, n(6), 2), Some(n(0)));
        assert_eq!(next_hop(Some(n(0)), n(6), 2), Some(n(2)));
        assert_eq!(next_hop(Some(n(2)), n(6), 2), Some(n(6)));
        assert_eq!(next_hop(Some(n(1)), n(6), 2), None);
    }

    #[test]
    fn a_reattached_node_is_the_top_of_its_subtree() {
        let tops = [NodeId(2)].into_iter().collect();
        assert_eq!(top_in(NodeId(6), 2, 7, &tops), Some(NodeId(2)));
        assert_eq!(top_in(NodeId(2), 2, 7, &tops), Some(NodeId(2)));
        assert_eq!(top_in(NodeId(3), 2, 7, &tops), Some(NodeId(0)));
        assert_eq!(top_in(NodeId(9), 2, 7, &tops), Some(NodeId(9)), "joined later");
        assert_eq!(top_in(NodeId(5), 2, 7, &Default::default()), top_of(NodeId(5), 2, 7));
    }

    #[test]
    fn flat_is_a_fanout_as_wide_as_the_nodes() {
        assert_eq!(children(None, 4, 32), ids(&[0, 1, 2, 3]));
        assert!((0..4).map(NodeId).all(|i| parent(i, 32).is_none() && children(Some(i), 4, 32).is_empty()));
    }

    #[test]
    fn every_node_has_one_parent_and_appears_once() {
        for fanout in 1..5 {
            let n = 23;
            let all = {
                let mut v: Vec<NodeId> = children(None, n, fanout).into_iter().flat_map(|c| subtree(c, n, fanout)).collect();
                v.sort_unstable();
                v
            };
            assert_eq!(all, (0..n).map(NodeId).collect::<Vec<_>>(), "fanout {fanout}");
            for i in (0..n).map(NodeId) {
                let p = parent(i, fanout);
                assert!(children(p, n, fanout).contains(&i), "fanout {fanout} {i}");
            }
        }
    }
}
