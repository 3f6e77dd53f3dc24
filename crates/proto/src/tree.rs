//! The shape of the daemon tree: a k-ary heap with the launcher at the top.
//!
//! Node `i` sits at heap position `i + 1` under the launcher (position 0), so
//! with fan-out `k` the launcher's children are nodes `0..k` and node `i`'s
//! children are nodes `(i + 1) * k ..= (i + 1) * k + k - 1`. Every daemon gets
//! the whole node list and computes its part; nothing else describes the tree.

use serde::{Deserialize, Serialize};

/// How a daemon starts its children.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Bootstrap {
    /// `dpm daemon` as a child process on this machine (virtual nodes).
    Fork,
    /// `ssh HOST dpm daemon`, with this ssh command and options.
    Ssh(Vec<String>),
    /// One `srun` step per daemon, inside the job's Slurm allocation: the step's
    /// single task has srun's stdin and stdout, which carry the link.
    Slurm,
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
}

/// The direct children of `parent` (`None`: the launcher) among `n` nodes.
pub fn children(parent: Option<usize>, n: usize, fanout: usize) -> Vec<usize> {
    let fanout = fanout.max(1);
    let position = parent.map_or(0, |p| p + 1);
    let first = position * fanout; // node index of the first child
    (first..(first + fanout).min(n)).collect()
}

/// The parent of node `i` (`None`: the launcher).
pub fn parent(i: usize, fanout: usize) -> Option<usize> {
    let fanout = fanout.max(1);
    let position = (i + 1 - 1) / fanout; // heap position of the parent
    position.checked_sub(1)
}

/// Node `i` and everything below it.
pub fn subtree(i: usize, n: usize, fanout: usize) -> Vec<usize> {
    let mut out = vec![i];
    let mut next = 0;
    while next < out.len() {
        let node = out[next];
        out.extend(children(Some(node), n, fanout));
        next += 1;
    }
    out
}

/// The child of `from` (`None`: the launcher) whose subtree holds `node`.
pub fn next_hop(from: Option<usize>, node: usize, fanout: usize) -> Option<usize> {
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

    #[test]
    fn binary_tree_of_seven() {
        assert_eq!(children(None, 7, 2), vec![0, 1]);
        assert_eq!(children(Some(0), 7, 2), vec![2, 3]);
        assert_eq!(children(Some(1), 7, 2), vec![4, 5]);
        assert_eq!(children(Some(2), 7, 2), vec![6]);
        assert_eq!(children(Some(3), 7, 2), Vec::<usize>::new());
        assert_eq!(parent(0, 2), None);
        assert_eq!(parent(3, 2), Some(0));
        assert_eq!(parent(6, 2), Some(2));
        assert_eq!(subtree(0, 7, 2), vec![0, 2, 3, 6]);
        assert_eq!(next_hop(None, 6, 2), Some(0));
        assert_eq!(next_hop(Some(0), 6, 2), Some(2));
        assert_eq!(next_hop(Some(2), 6, 2), Some(6));
        assert_eq!(next_hop(Some(1), 6, 2), None);
    }

    #[test]
    fn flat_is_a_fanout_as_wide_as_the_nodes() {
        assert_eq!(children(None, 4, 32), vec![0, 1, 2, 3]);
        assert!((0..4).all(|i| parent(i, 32).is_none() && children(Some(i), 4, 32).is_empty()));
    }

    #[test]
    fn every_node_has_one_parent_and_appears_once() {
        for fanout in 1..5 {
            let n = 23;
            let all = {
                let mut v: Vec<usize> = children(None, n, fanout).into_iter().flat_map(|c| subtree(c, n, fanout)).collect();
                v.sort_unstable();
                v
            };
            assert_eq!(all, (0..n).collect::<Vec<_>>(), "fanout {fanout}");
            for i in 0..n {
                let p = parent(i, fanout);
                assert!(children(p, n, fanout).contains(&i), "fanout {fanout} node {i}");
            }
        }
    }
}
