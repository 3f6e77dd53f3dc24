//! Sets of CPU (or NUMA node) numbers: hwloc's hex masks in, Linux's list
//! form (`0-3,8`, as `Cpus_allowed_list` shows it) and affinity masks out.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

/// The largest CPU or NUMA node number dpm handles (exclusive): Linux's
/// default `NR_CPUS` limit on large machines. Higher numbers in a topology
/// or a list are refused.
pub const MAX_CPUS: u32 = 8192;

/// A set of CPU (PU) or NUMA node numbers.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CpuSet(BTreeSet<u32>);

/// A malformed set.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a CPU list (like 0-3,8) below {MAX_CPUS}")]
pub struct BadSet(pub String);

impl CpuSet {
    pub fn new() -> Self {
        CpuSet::default()
    }

    pub fn single(cpu: u32) -> Self {
        CpuSet(BTreeSet::from([cpu]))
    }

    pub fn insert(&mut self, cpu: u32) {
        self.0.insert(cpu);
    }

    pub fn contains(&self, cpu: u32) -> bool {
        self.0.contains(&cpu)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().copied()
    }

    pub fn first(&self) -> Option<u32> {
        self.0.first().copied()
    }

    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.intersection(&other.0).copied().collect())
    }

    pub fn union_with(&mut self, other: &CpuSet) {
        self.0.extend(other.0.iter().copied());
    }

    pub fn intersects(&self, other: &CpuSet) -> bool {
        self.0.iter().any(|c| other.0.contains(c))
    }

    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.0.is_subset(&other.0)
    }

    /// hwloc's bitmap syntax: comma-separated 32-bit hex words, most
    /// significant first (`0x00000001,0x0`); a leading `0xf...f` word (an
    /// infinite set) adds nothing beyond the words written out.
    pub fn from_hwloc(text: &str) -> Result<CpuSet, BadSet> {
        let bad = || BadSet(text.to_string());
        let words: Vec<&str> = text.trim().split(',').collect();
        let mut set = CpuSet::new();
        for (i, word) in words.iter().rev().enumerate() {
            let hex = word.trim().strip_prefix("0x").ok_or_else(bad)?;
            if hex == "f...f" {
                continue;
            }
            let bits = u32::from_str_radix(hex, 16).map_err(|_| bad())?;
            for b in 0..32 {
                if bits & (1 << b) != 0 {
                    let cpu = (i as u32).checked_mul(32).and_then(|base| base.checked_add(b)).filter(|&c| c < MAX_CPUS).ok_or_else(bad)?;
                    set.insert(cpu);
                }
            }
        }
        Ok(set)
    }

    /// Linux's list form: `0-3,8` (empty for the empty set).
    pub fn to_list(&self) -> String {
        let mut out = Vec::new();
        let mut cpus = self.0.iter().copied().peekable();
        while let Some(first) = cpus.next() {
            let mut last = first;
            while cpus.peek() == Some(&(last + 1)) {
                last += 1;
                cpus.next();
            }
            out.push(if first == last { first.to_string() } else { format!("{first}-{last}") });
        }
        out.join(",")
    }

    /// The list form back (`0-3,8`; `+` also separates, as in Hydra's
    /// `user:0+1`).
    pub fn parse_list(text: &str) -> Result<CpuSet, BadSet> {
        let bad = || BadSet(text.to_string());
        let mut set = CpuSet::new();
        for part in text.split([',', '+']) {
            let part = part.trim();
            let (a, b) = part.split_once('-').unwrap_or((part, part));
            let (a, b): (u32, u32) = (a.trim().parse().map_err(|_| bad())?, b.trim().parse().map_err(|_| bad())?);
            if a > b || b >= MAX_CPUS {
                return Err(bad());
            }
            set.0.extend(a..=b);
        }
        Ok(set)
    }

    /// The set as a mask of 64-bit words (bit `n % 64` of word `n / 64`), the
    /// layout of `sched_setaffinity`'s and `set_mempolicy`'s masks.
    pub fn to_mask(&self) -> Vec<u64> {
        let words = self.0.last().map_or(1, |&c| c as usize / 64 + 1);
        let mut mask = vec![0u64; words];
        for &c in &self.0 {
            mask[c as usize / 64] |= 1 << (c % 64);
        }
        mask
    }

    /// A mask back into a set.
    pub fn from_mask(mask: &[u64]) -> CpuSet {
        let mut set = CpuSet::new();
        for (w, bits) in mask.iter().enumerate() {
            for b in 0..64 {
                if bits & (1 << b) != 0 && ((w * 64 + b) as u32) < MAX_CPUS {
                    set.insert((w * 64 + b) as u32);
                }
            }
        }
        set
    }
}

impl FromIterator<u32> for CpuSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        CpuSet(iter.into_iter().collect())
    }
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({})", self.to_list())
    }
}

impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_list())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hwloc_masks_read_word_by_word() {
        assert_eq!(CpuSet::from_hwloc("0x00000003").unwrap().to_list(), "0-1");
        assert_eq!(CpuSet::from_hwloc("0x00000001,0x0").unwrap().to_list(), "32");
        assert_eq!(CpuSet::from_hwloc("0xffffffff,0xffffffff").unwrap().to_list(), "0-63");
        assert_eq!(CpuSet::from_hwloc("0xf...f,0x00000005").unwrap().to_list(), "0,2");
        assert!(CpuSet::from_hwloc("0xzz").is_err());
        assert!(CpuSet::from_hwloc("3").is_err());
        // Beyond MAX_CPUS: refused, not wrapped.
        let huge = std::iter::once("0x1").chain(std::iter::repeat_n("0x0", 300)).collect::<Vec<_>>().join(",");
        assert!(CpuSet::from_hwloc(&huge).is_err());
    }

    #[test]
    fn lists_round_trip() {
        for list in ["0", "0-3,8", "1,3,5-7", ""] {
            if list.is_empty() {
                assert_eq!(CpuSet::new().to_list(), "");
                continue;
            }
            assert_eq!(CpuSet::parse_list(list).unwrap().to_list(), list);
        }
        assert_eq!(CpuSet::parse_list("0+1").unwrap().to_list(), "0-1");
        for bad in ["", "a", "3-1", "8192", "1,"] {
            assert!(CpuSet::parse_list(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn masks_round_trip() {
        let s = CpuSet::parse_list("0,63,64,130").unwrap();
        let m = s.to_mask();
        assert_eq!(m.len(), 3);
        assert_eq!(m[0], 1 | 1 << 63);
        assert_eq!(CpuSet::from_mask(&m), s);
    }
}
