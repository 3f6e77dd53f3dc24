//! The ring exchange (`PMIX_Ring`, paper 004 §4.1) as a prefix scan over the
//! daemon tree.
//!
//! Ring order keeps a node's ranks adjacent: a daemon's own ranks (by PMI
//! rank), then each child's subtree in node order — the tree's pre-order,
//! which for a k-ary heap is ascending node order at every level. Going up,
//! each daemon summarises its part of the ring as one [`RingSegment`] (how
//! many processes, the first and the last value) and sends one message; the
//! root closes the ring and sends each part its [`RingSlot`] (where it starts,
//! the value to its left and to its right); each daemon splits its slot among
//! its parts the same way. Nothing here depends on the number of processes
//! per node: one message up and one down per daemon.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::NodeId;

/// A contiguous stretch of the ring, as seen from above.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RingSegment {
    pub count: u32,
    /// The value of the stretch's first process.
    pub first: String,
    /// The value of its last process.
    pub last: String,
}

impl RingSegment {
    /// One process's contribution.
    pub fn one(value: impl Into<String>) -> Self {
        let value = value.into();
        RingSegment { count: 1, first: value.clone(), last: value }
    }
}

/// Where a stretch sits in the closed ring.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RingSlot {
    /// Ring rank of the stretch's first process.
    pub offset: u32,
    /// The value just before the stretch (wrapping around).
    pub left: String,
    /// The value just after it (wrapping around).
    pub right: String,
}

/// The parts, in ring order, as one stretch. `None` for no parts.
pub fn combine(parts: &[RingSegment]) -> Option<RingSegment> {
    let (first, last) = (parts.first()?, parts.last()?);
    Some(RingSegment { count: parts.iter().map(|p| p.count).sum(), first: first.first.clone(), last: last.last.clone() })
}

/// The slot of each part, given the slot of the stretch they form.
pub fn split(slot: &RingSlot, parts: &[RingSegment]) -> Vec<RingSlot> {
    let mut out = Vec::with_capacity(parts.len());
    let mut offset = slot.offset;
    for (i, part) in parts.iter().enumerate() {
        let left = if i == 0 { slot.left.clone() } else { parts[i - 1].last.clone() };
        let right = parts.get(i + 1).map_or_else(|| slot.right.clone(), |next| next.first.clone());
        out.push(RingSlot { offset, left, right });
        offset += part.count;
    }
    out
}

/// The whole ring's slot: it starts at 0 and wraps onto itself.
pub fn root_slot(whole: &RingSegment) -> RingSlot {
    RingSlot { offset: 0, left: whole.last.clone(), right: whole.first.clone() }
}

/// One ring's contributions at one daemon (or the root), from each expected
/// contributor — this daemon's own node and each child subtree, named by node
/// index, whose ascending order is the ring order.
#[derive(Clone, Debug, Default)]
pub struct RingGather {
    got: BTreeMap<NodeId, RingSegment>,
}

impl RingGather {
    /// Record a part; a contributor heard twice keeps its first part (and the
    /// second is reported, as a protocol error, by `false`).
    pub fn add(&mut self, from: NodeId, part: RingSegment) -> bool {
        if self.got.contains_key(&from) {
            return false;
        }
        self.got.insert(from, part);
        true
    }

    /// Whether every one of `expected` has contributed.
    pub fn complete<'a>(&self, expected: impl IntoIterator<Item = &'a NodeId>) -> bool {
        expected.into_iter().all(|e| self.got.contains_key(e))
    }

    /// The contributors and their parts, in ring order.
    pub fn parts(&self) -> Vec<(NodeId, RingSegment)> {
        self.got.iter().map(|(k, v)| (*k, v.clone())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(values: &[&str]) -> RingSegment {
        RingSegment { count: values.len() as u32, first: values[0].into(), last: values[values.len() - 1].into() }
    }

    /// Each process's (ring rank, left, right) for values laid out in ring order.
    fn expected(values: &[&str]) -> Vec<(u32, String, String)> {
        let n = values.len();
        (0..n).map(|i| (i as u32, values[(i + n - 1) % n].to_string(), values[(i + 1) % n].to_string())).collect()
    }

    #[test]
    fn a_two_level_scan_gives_every_process_its_neighbours() {
        // Root with two subtrees; the first has its own node (a, b) and a
        // child (c); the second is one node (d, e, f).
        let own = ["a", "b"];
        let child = ["c"];
        let second = ["d", "e", "f"];
        let first_sub = combine(&[seg(&own), seg(&child)]).unwrap();
        let whole = combine(&[first_sub.clone(), seg(&second)]).unwrap();
        assert_eq!(whole, RingSegment { count: 6, first: "a".into(), last: "f".into() });
        let top = split(&root_slot(&whole), &[first_sub.clone(), seg(&second)]);
        let inner = split(&top[0], &[seg(&own), seg(&child)]);
        // Down to single processes.
        let mut got = Vec::new();
        for (slot, values) in [(&inner[0], &own[..]), (&inner[1], &child[..]), (&top[1], &second[..])] {
            let ones: Vec<RingSegment> = values.iter().map(|v| RingSegment::one(*v)).collect();
            for s in split(slot, &ones) {
                got.push((s.offset, s.left, s.right));
            }
        }
        assert_eq!(got, expected(&["a", "b", "c", "d", "e", "f"]));
    }

    #[test]
    fn one_process_is_its_own_neighbour() {
        let whole = RingSegment::one("x");
        assert_eq!(split(&root_slot(&whole), std::slice::from_ref(&whole)), vec![RingSlot { offset: 0, left: "x".into(), right: "x".into() }]);
        assert_eq!(combine(&[]), None);
    }

    #[test]
    fn gathers_complete_in_ring_order_and_refuse_duplicates() {
        let mut g = RingGather::default();
        assert!(g.add(NodeId(5), seg(&["e"])));
        assert!(!g.complete(&[NodeId(2), NodeId(5)]));
        assert!(g.add(NodeId(2), seg(&["b"])));
        assert!(!g.add(NodeId(2), seg(&["zz"])));
        assert!(g.complete(&[NodeId(2), NodeId(5)]));
        assert_eq!(g.parts().iter().map(|(k, _)| *k).collect::<Vec<_>>(), vec![NodeId(2), NodeId(5)]);
        assert_eq!(g.parts()[0].1.first, "b");
    }
}
