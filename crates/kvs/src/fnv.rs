//! A fast hasher for the KVS's maps of short keys.
//!
//! A node daemon inserts every key a fence broadcasts into its store
//! (`allgather`, dense and unhinted keys under `auto`): at 1,024 processes on
//! 64 nodes that is 65,536 inserts per fence, where std's SipHash was a tenth
//! of a daemon's time (`bench/pmi`, `fence-put`). FNV-1a hashes PMI keys
//! (a few to 64 bytes) in a few nanoseconds. The keys come from the job's own
//! processes, which could as well exhaust the daemon's memory: the
//! denial-of-service resistance SipHash buys is not needed here.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// FNV-1a, 64 bits (the same function as [`crate::design::owner`]).
#[derive(Clone, Copy, Debug)]
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

pub type FnvMap<K, V> = HashMap<K, V, BuildHasherDefault<Fnv>>;
pub type FnvSet<T> = HashSet<T, BuildHasherDefault<Fnv>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_1a_matches_the_reference_values() {
        // From the FNV reference (draft-eastlake-fnv): "" and "a".
        let hash = |s: &[u8]| {
            let mut h = Fnv::default();
            h.write(s);
            h.finish()
        };
        assert_eq!(hash(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(hash(b"a"), 0xaf63_dc4c_8601_ec8c);
        let mut m: FnvMap<String, u32> = FnvMap::default();
        m.insert("k".into(), 1);
        assert_eq!(m.get("k"), Some(&1));
    }
}
