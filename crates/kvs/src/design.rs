//! Which KVS design a job uses (`dpm run --kvs`), and the key → owner hash.
//!
//! The design decides where a put is kept and where a get that misses on its
//! node looks next (paper 004, §3; `docs/pmi-extensions.md`). It is chosen per
//! run and travels with every launch, so every daemon of a job agrees.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::NodeId;

/// Where puts live and how non-local gets find them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum KvsDesign {
    /// Every put rides the fence up and the merged delta goes down to every
    /// node: gets after a fence never leave the node.
    Allgather,
    /// Puts ride the fence up and are cached at each ancestor (the launcher
    /// keeps them all); a get walks up until an ancestor has the key.
    Tree,
    /// Each key has an owner daemon (a hash over the job's daemons); puts go
    /// there before the fence, gets ask it.
    Dkvs,
    /// Puts stay on their node; a get asks the node hosting its `srcid`
    /// (falling back to `Tree` without one, so puts also ride the fence up).
    Direct,
    /// Dense and unhinted keys ride the fence (allgather); sparse keys stay on
    /// their node and at their owner, fetched on demand (`Direct` with a
    /// `srcid`, else `Dkvs`).
    #[default]
    Auto,
}

impl KvsDesign {
    pub const ALL: [KvsDesign; 5] = [KvsDesign::Allgather, KvsDesign::Tree, KvsDesign::Dkvs, KvsDesign::Direct, KvsDesign::Auto];

    pub fn name(self) -> &'static str {
        match self {
            KvsDesign::Allgather => "allgather",
            KvsDesign::Tree => "tree",
            KvsDesign::Dkvs => "dkvs",
            KvsDesign::Direct => "direct",
            KvsDesign::Auto => "auto",
        }
    }

    /// Whether the puts a fence gathers are also sent down to every node
    /// (otherwise the launcher keeps them for gets that walk up the tree).
    pub fn fence_broadcasts(self) -> bool {
        matches!(self, KvsDesign::Allgather | KvsDesign::Auto)
    }

    /// Whether puts riding up with a fence are cached at each ancestor and
    /// kept by the launcher (the tree walk of `Tree`, and `Direct`'s fallback).
    pub fn fence_caches(self) -> bool {
        matches!(self, KvsDesign::Tree | KvsDesign::Direct)
    }
}

impl fmt::Display for KvsDesign {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a put's key will be read (PMI extension `hint=`, paper 004 §4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Hint {
    /// Read by few processes: keep it where it was put, fetch on demand.
    Sparse,
    /// Read by (nearly) every process: send it everywhere with the fence.
    Dense,
}

/// A `--kvs`/`DPM_KVS` value that names no design.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownDesign(pub String);

impl fmt::Display for UnknownDesign {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown KVS design '{}' (use allgather, tree, dkvs, direct or auto)", self.0)
    }
}

impl std::error::Error for UnknownDesign {}

impl FromStr for KvsDesign {
    type Err = UnknownDesign;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        KvsDesign::ALL.into_iter().find(|d| d.name().eq_ignore_ascii_case(s.trim())).ok_or_else(|| UnknownDesign(s.to_string()))
    }
}

/// The daemon that owns `key` among `nodes` (the job's daemons, sorted).
/// FNV-1a: stable across processes and hosts, unlike std's random hasher.
pub fn owner(key: &str, nodes: &[NodeId]) -> Option<NodeId> {
    if nodes.is_empty() {
        return None;
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    Some(nodes[(h % nodes.len() as u64) as usize])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_bad_names_are_refused() {
        for d in KvsDesign::ALL {
            assert_eq!(d.name().parse::<KvsDesign>(), Ok(d));
        }
        assert_eq!("DKVS".parse::<KvsDesign>(), Ok(KvsDesign::Dkvs));
        assert_eq!("ring".parse::<KvsDesign>(), Err(UnknownDesign("ring".into())));
        assert_eq!(KvsDesign::default(), KvsDesign::Auto);
    }

    #[test]
    fn owners_are_stable_and_spread() {
        let nodes = [NodeId(0), NodeId(1), NodeId(2), NodeId(3)];
        assert_eq!(owner("k", &nodes), owner("k", &nodes));
        assert_eq!(owner("k", &[]), None);
        assert_eq!(owner("anything", &[NodeId(7)]), Some(NodeId(7)));
        let mut hit = std::collections::HashSet::new();
        for i in 0..64 {
            hit.insert(owner(&format!("key-{i}"), &nodes).unwrap());
        }
        assert_eq!(hit.len(), 4, "64 keys over 4 nodes should reach every node");
    }
}
