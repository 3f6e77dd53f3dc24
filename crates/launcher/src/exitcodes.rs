//! `-print-all-exitcodes`: every rank of the first job's wait status, node
//! by node, printed on stdout when the run ends, in Hydra's layout:
//! `[mpiexec@HOST] Exit codes: [node] 0,256` and one `[node] …` line per
//! further node. A status is the raw `wait` value (exit code × 256, or the
//! signal number); nodes in the order of their first rank, ranks ascending.
//! A rank whose end was never reported (its node was lost) is left out.

use std::collections::BTreeMap;

use dpm_kvs::{NodeId, Rank};
use dpm_proto::ExitStatus;

/// The first job's statuses, collected as its ranks end (at most one per rank).
#[derive(Debug, Default)]
pub struct ExitCodes {
    by_rank: BTreeMap<u32, (NodeId, i32)>,
}

/// The raw `wait` status Hydra prints for an end.
pub fn wait_status(status: &ExitStatus) -> i32 {
    match *status {
        ExitStatus::Code(c) => (c & 0xff) << 8,
        ExitStatus::Signal(s) => s & 0x7f,
    }
}

impl ExitCodes {
    /// Rank `rank` on `node` ended so.
    pub fn record(&mut self, node: NodeId, rank: Rank, status: &ExitStatus) {
        self.by_rank.insert(rank.0, (node, wait_status(status)));
    }

    /// The lines, for a launcher on `launcher_host`; `host` names a node.
    pub fn render(&self, launcher_host: &str, host: impl Fn(NodeId) -> String) -> String {
        // Nodes in the order of their first rank (the map iterates by rank).
        let mut nodes: Vec<(NodeId, Vec<i32>)> = Vec::new();
        for &(node, status) in self.by_rank.values() {
            match nodes.iter_mut().find(|(n, _)| *n == node) {
                Some((_, list)) => list.push(status),
                None => nodes.push((node, vec![status])),
            }
        }
        let lines: Vec<String> =
            nodes.iter().map(|(node, list)| format!("[{}] {}", host(*node), list.iter().map(i32::to_string).collect::<Vec<_>>().join(","))).collect();
        format!("[mpiexec@{launcher_host}] Exit codes: {}\n", lines.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hydra_s_layout_node_by_node() {
        let mut codes = ExitCodes::default();
        codes.record(NodeId(1), Rank(2), &ExitStatus::Code(0));
        codes.record(NodeId(0), Rank(1), &ExitStatus::Signal(9));
        codes.record(NodeId(1), Rank(0), &ExitStatus::Code(2));
        let text = codes.render("me", |n| format!("h{}", n.0));
        assert_eq!(text, "[mpiexec@me] Exit codes: [h1] 512,0\n[h0] 9\n");
        assert_eq!(ExitCodes::default().render("me", |_| String::new()), "[mpiexec@me] Exit codes: \n");
    }
}
