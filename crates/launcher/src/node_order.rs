//! Hydra's edits of the node list before the first job is placed, and its
//! explicit placement: `-skip-launch-node` (this machine's entries leave
//! the list), `-order-nodes` (the list sorted by slots) and `-rankmap`
//! (rank i on node `map[i]`, in the grammar of `PMI_process_mapping`).
//! And the nodes a run starts daemons on: those its first job's ranks use
//! ([`split_used`]), whatever the length of the list; the others' start
//! when first needed ([`crate::controller::lazy`]).
//! Pure: the caller says which entries are this machine.

use crate::machine::Node;

/// `-order-nodes`: sort by slots, fewest or most first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortOrder {
    Ascending,
    Descending,
}

impl std::str::FromStr for SortOrder {
    type Err = ();

    /// Hydra's spellings: `ASCENDING`/`ascending`/`UP`/`up`, and the same for down.
    fn from_str(s: &str) -> Result<Self, ()> {
        match s {
            "ASCENDING" | "ascending" | "UP" | "up" => Ok(SortOrder::Ascending),
            "DESCENDING" | "descending" | "DOWN" | "down" => Ok(SortOrder::Descending),
            _ => Err(()),
        }
    }
}

/// Why the node list or a rank map cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OrderError {
    #[error("-skip-launch-node: no node is left once this machine's are skipped")]
    NoNodeLeft,
    #[error("-rankmap {map}: {why}")]
    BadMap { map: String, why: String },
}

/// The most ranks a rank map may spell out (blocks and repeats multiply).
pub const MAX_MAP_LEN: usize = 1 << 20;

/// The node list as `-skip-launch-node` and `-order-nodes` leave it (in that
/// order, as Hydra applies them).
pub fn reshape(nodes: Vec<Node>, skip: bool, sort: Option<SortOrder>, is_local: impl Fn(&str) -> bool) -> Result<Vec<Node>, OrderError> {
    let mut nodes = if skip { skip_launch_node(nodes, is_local)? } else { nodes };
    if let Some(sort) = sort {
        order(&mut nodes, sort);
    }
    Ok(nodes)
}

/// `-skip-launch-node`: the nodes that are not this machine (`is_local`), in order.
pub fn skip_launch_node(nodes: Vec<Node>, is_local: impl Fn(&str) -> bool) -> Result<Vec<Node>, OrderError> {
    let left: Vec<Node> = nodes.into_iter().filter(|n| !is_local(&n.host)).collect();
    if left.is_empty() {
        return Err(OrderError::NoNodeLeft);
    }
    Ok(left)
}

/// `-order-nodes`: sorted by slots; nodes with as many keep their order
/// (Hydra's `qsort` leaves ties in no defined order).
pub fn order(nodes: &mut [Node], order: SortOrder) {
    match order {
        SortOrder::Ascending => nodes.sort_by_key(|n| n.slots),
        SortOrder::Descending => nodes.sort_by_key(|n| std::cmp::Reverse(n.slots)),
    }
}

/// Whether a run starts daemons only on the nodes its first job uses (and
/// the others' when first needed): a tree (fork, ssh, srun, a batch
/// agent), not `--virtual-nodes`, which promise their daemons.
pub fn starts_used_only(bootstrap: &crate::nodes::Bootstrap, virtual_nodes: bool) -> bool {
    matches!(bootstrap, crate::nodes::Bootstrap::Tree(_)) && !virtual_nodes
}

/// The nodes that `node_of` (each rank's index into `nodes`) uses, in list
/// order, the rest, in list order, and `node_of` renumbered into the used
/// ones: a run starts a daemon only where its first job has ranks, so a
/// list of 1,000 hosts and `-n 2` costs one or two daemons.
pub fn split_used(nodes: Vec<Node>, node_of: &[usize]) -> (Vec<Node>, Vec<Node>, Vec<usize>) {
    let mut index = vec![None; nodes.len()];
    for &n in node_of {
        if let Some(slot) = index.get_mut(n) {
            *slot = Some(0);
        }
    }
    let mut kept = Vec::new();
    let mut rest = Vec::new();
    for (i, node) in nodes.into_iter().enumerate() {
        match index[i].as_mut() {
            Some(slot) => {
                *slot = kept.len();
                kept.push(node);
            }
            None => rest.push(node),
        }
    }
    let renumbered = node_of.iter().map(|&n| index.get(n).copied().flatten().unwrap_or(0)).collect();
    (kept, rest, renumbered)
}

/// A parsed `-rankmap`: node ids (indexes into the node list) in rank order,
/// and where a shorter map starts over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankMap {
    ids: Vec<usize>,
    /// Hydra's legacy wrap: a map shorter than the job repeats from its
    /// first entry on node 0 (or from its first `[...]` group).
    restart: Option<usize>,
}

impl RankMap {
    /// `0,0,1,1`, `(vector,(0,2,2))`, `(0,2,2),3`, `[0,1]x2` (a list repeated).
    pub fn parse(text: &str) -> Result<RankMap, OrderError> {
        let bad = |why: &str| OrderError::BadMap { map: text.to_string(), why: why.to_string() };
        let mut body = text.trim();
        if let Some(rest) = body.strip_prefix('(').map(str::trim_start).and_then(|r| r.strip_prefix("vector")) {
            body = rest.trim_start().strip_prefix(',').and_then(|r| r.trim_end().strip_suffix(')')).ok_or_else(|| bad("expected '(vector,...)'"))?;
        }
        let mut p = Parser { s: body.as_bytes(), at: 0, ids: Vec::new(), restart: None };
        p.list().map_err(|why| bad(&why))?;
        p.space();
        if p.at != p.s.len() {
            return Err(bad(&format!("unexpected '{}'", &body[p.at..])));
        }
        if p.ids.is_empty() {
            return Err(bad("names no node"));
        }
        Ok(RankMap { ids: p.ids, restart: p.restart })
    }

    /// The node of each of `size` ranks, each checked against the `nodes` listed.
    pub fn place(&self, text: &str, size: usize, nodes: usize) -> Result<Vec<usize>, OrderError> {
        let bad = |why: String| OrderError::BadMap { map: text.to_string(), why };
        let mut out: Vec<usize> = self.ids.iter().copied().take(size).collect();
        if out.len() < size {
            let from = self.restart.ok_or_else(|| bad(format!("places {} ranks of {size}, and has no entry on node 0 to repeat from", self.ids.len())))?;
            let again = &self.ids[from..];
            while out.len() < size {
                out.extend(again.iter().copied().take(size - out.len()));
            }
        }
        if let Some(&id) = out.iter().find(|&&id| id >= nodes) {
            return Err(bad(format!("node {id} is not in the node list ({nodes} node{})", if nodes == 1 { "" } else { "s" })));
        }
        Ok(out)
    }
}

/// A hand-written recursive-descent parser over the map's body.
struct Parser<'a> {
    s: &'a [u8],
    at: usize,
    ids: Vec<usize>,
    restart: Option<usize>,
}

impl Parser<'_> {
    fn space(&mut self) {
        while self.s.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        self.space();
        if self.s.get(self.at) == Some(&c) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn num(&mut self) -> Result<usize, String> {
        self.space();
        let start = self.at;
        while self.s.get(self.at).is_some_and(u8::is_ascii_digit) {
            self.at += 1;
        }
        std::str::from_utf8(&self.s[start..self.at]).ok().and_then(|t| t.parse().ok()).ok_or_else(|| "expected a number".to_string())
    }

    fn push(&mut self, id: usize) -> Result<(), String> {
        if self.ids.len() >= MAX_MAP_LEN {
            return Err(format!("spells out more than {MAX_MAP_LEN} ranks"));
        }
        self.ids.push(id);
        Ok(())
    }

    /// item (',' item)*
    fn list(&mut self) -> Result<(), String> {
        self.item()?;
        while self.eat(b',') {
            self.item()?;
        }
        Ok(())
    }

    /// num | '(' first ',' nodes ',' per-node ')' | '[' list ']x' count
    fn item(&mut self) -> Result<(), String> {
        let start = self.ids.len();
        if self.eat(b'(') {
            let first = self.num()?;
            if !self.eat(b',') {
                return Err("expected ','".into());
            }
            let nodes = self.num()?;
            if !self.eat(b',') {
                return Err("expected ','".into());
            }
            let per_node = self.num()?;
            if !self.eat(b')') {
                return Err("expected ')'".into());
            }
            if first == 0 && self.restart.is_none() {
                self.restart = Some(start);
            }
            for node in first..first.saturating_add(nodes) {
                for _ in 0..per_node {
                    self.push(node)?;
                }
            }
        } else if self.eat(b'[') {
            if self.restart.is_none() {
                self.restart = Some(start);
            }
            self.list()?;
            if !(self.eat(b']') && self.s.get(self.at) == Some(&b'x')) {
                return Err("expected ']x' and a count".into());
            }
            self.at += 1;
            let times = self.num()?;
            if times == 0 {
                return Err("a group repeated 0 times".into());
            }
            let group = self.ids[start..].to_vec();
            for _ in 1..times {
                for &id in &group {
                    self.push(id)?;
                }
            }
        } else {
            let id = self.num()?;
            if id == 0 && self.restart.is_none() {
                self.restart = Some(start);
            }
            self.push(id)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(slots: &[u32]) -> Vec<Node> {
        slots.iter().enumerate().map(|(i, &s)| Node { host: format!("h{i}"), slots: s }).collect()
    }

    fn map(text: &str, size: usize, n: usize) -> Result<Vec<usize>, OrderError> {
        RankMap::parse(text)?.place(text, size, n)
    }

    #[test]
    fn rank_maps_in_hydra_s_grammar() {
        assert_eq!(map("1,1,0,0", 4, 2).unwrap(), [1, 1, 0, 0]);
        assert_eq!(map("(vector,(0,2,2))", 4, 2).unwrap(), [0, 0, 1, 1]);
        assert_eq!(map("(vector, (1,1,3), 0)", 4, 2).unwrap(), [1, 1, 1, 0]);
        assert_eq!(map("[0,1]x2,1", 5, 2).unwrap(), [0, 1, 0, 1, 1]);
        // Shorter than the job: again from the first entry on node 0.
        assert_eq!(map("1,0,1", 6, 2).unwrap(), [1, 0, 1, 0, 1, 0]);
        assert_eq!(map("0,1", 3, 2).unwrap(), [0, 1, 0]);
        // Longer: the rest is not used.
        assert_eq!(map("0,1,1", 2, 2).unwrap(), [0, 1]);
    }

    #[test]
    fn bad_rank_maps_say_why() {
        let why = |t: &str, size, n| match map(t, size, n) {
            Err(OrderError::BadMap { why, .. }) => why,
            other => panic!("{t}: {other:?}"),
        };
        assert_eq!(why("0,2", 2, 2), "node 2 is not in the node list (2 nodes)");
        assert_eq!(why("1,1", 3, 2), "places 2 ranks of 3, and has no entry on node 0 to repeat from");
        assert_eq!(why("0,x", 2, 2), "expected a number");
        assert_eq!(why("(0,1)", 2, 2), "expected ','");
        assert_eq!(why("(vector,0", 2, 2), "expected '(vector,...)'");
        assert_eq!(why("[0]x0", 2, 2), "a group repeated 0 times");
        assert_eq!(why("(0,1000000,1000000)", 2, 2), format!("spells out more than {MAX_MAP_LEN} ranks"));
        assert!(RankMap::parse("").is_err());
    }

    #[test]
    fn only_the_nodes_with_ranks_are_kept() {
        let (kept, rest, node_of) = split_used(nodes(&[1, 1, 1, 1, 1]), &[3, 1, 3]);
        assert_eq!(kept.iter().map(|n| n.host.as_str()).collect::<Vec<_>>(), ["h1", "h3"]);
        assert_eq!(rest.iter().map(|n| n.host.as_str()).collect::<Vec<_>>(), ["h0", "h2", "h4"]);
        assert_eq!(node_of, [1, 0, 1]);
        let (kept, rest, node_of) = split_used(nodes(&[4; 1000]), &[0, 0]);
        assert_eq!((kept.len(), rest.len(), node_of), (1, 999, vec![0, 0]));
    }

    #[test]
    fn order_and_skip() {
        let mut list = nodes(&[2, 4, 1, 4]);
        order(&mut list, SortOrder::Descending);
        assert_eq!(list.iter().map(|n| n.host.as_str()).collect::<Vec<_>>(), ["h1", "h3", "h0", "h2"]);
        order(&mut list, SortOrder::Ascending);
        assert_eq!(list.iter().map(|n| n.host.as_str()).collect::<Vec<_>>(), ["h2", "h0", "h1", "h3"]);
        assert_eq!("down".parse(), Ok(SortOrder::Descending));
        assert!("sideways".parse::<SortOrder>().is_err());
        let left = skip_launch_node(nodes(&[1, 2, 3]), |h| h == "h1").unwrap();
        assert_eq!(left, vec![Node { host: "h0".into(), slots: 1 }, Node { host: "h2".into(), slots: 3 }]);
        assert_eq!(skip_launch_node(nodes(&[1]), |_| true), Err(OrderError::NoNodeLeft));
    }
}
