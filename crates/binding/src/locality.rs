//! A bound rank's locality as PMIx and Open MPI spell it, so that a PMIx
//! host can register `PMIX_LOCALITY_STRING` with each rank's `PMIX_CPUSET`.
//!
//! The string is the one OpenPMIx's server library generates for PRRTE
//! (`PMIx_server_generate_locality_string`): for every level of interest
//! below the machine, from the top of the tree down — package `SK`, caches
//! `L3`, `L2`, `L1` (data), core `CR`, hardware thread `HT` — the logical
//! indices of that level's objects whose CPUs intersect the rank's, as an
//! hwloc list, then the NUMA nodes (`NM`, memory children in hwloc 2) last;
//! levels joined by `:`. A rank bound to core 1 of a one-package machine:
//! `SK0:L30:L21:L11:CR1:HT1:NM0`. Open MPI compares two ranks' strings
//! level by level (`opal_hwloc_compute_relative_locality`) to decide which
//! of its shared-memory and `MPI_Comm_split_type` levels they share; a rank
//! with no string shares only the node. Made here from dpm's own topology
//! instead of through the library: the library would need a topology of its
//! own loaded, and this is pure logic the tests can check.

use crate::cpuset::CpuSet;
use crate::topology::{Kind, Topology};

/// The levels a locality string names, with their tags.
const LEVELS: [(Kind, &str); 6] = [(Kind::Package, "SK"), (Kind::L3, "L3"), (Kind::L2, "L2"), (Kind::L1, "L1"), (Kind::Core, "CR"), (Kind::Pu, "HT")];

/// The locality string of a rank bound to `cpus` (see the module
/// documentation); `None` when `cpus` is empty.
pub fn locality_string(topo: &Topology, cpus: &CpuSet) -> Option<String> {
    if cpus.is_empty() {
        return None;
    }
    let depth = |kind: Kind| -> Option<usize> {
        let (mut i, _) = topo.of_kind(kind).next()?;
        let mut d = 0;
        while let Some(p) = topo.objects()[i].parent {
            d += 1;
            i = p;
        }
        Some(d)
    };
    let mut levels: Vec<(usize, &str, Kind)> = LEVELS.iter().filter_map(|&(k, tag)| depth(k).map(|d| (d, tag, k))).collect();
    levels.sort_by_key(|&(d, _, _)| d);
    levels.push((usize::MAX, "NM", Kind::Numa));
    let parts: Vec<String> = levels
        .into_iter()
        .filter_map(|(_, tag, kind)| {
            let hit: CpuSet = topo.of_kind(kind).filter(|(_, o)| o.cpuset.intersects(cpus)).map(|(_, o)| o.logical).collect();
            (!hit.is_empty()).then(|| format!("{tag}{}", hit.to_list()))
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join(":"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topo(name: &str) -> Topology {
        let path = format!("{}/tests/topologies/{name}", env!("CARGO_MANIFEST_DIR"));
        Topology::from_xml(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    #[test]
    fn a_core_of_a_two_socket_machine() {
        // 2 packages of 2 NUMA nodes, each under an L3 over 8 cores of 2
        // threads, no L1 (`SyntheticDescription` in the file); PUs numbered
        // core-major (core c: PUs 2c and 2c+1); the NUMA nodes are memory
        // children of the L3s, named last.
        let t = topo("2s2n8c2t.xml");
        let cores = |cs: &[u32]| -> CpuSet { cs.iter().flat_map(|c| [2 * c, 2 * c + 1]).collect() };
        assert_eq!(locality_string(&t, &cores(&[0])).unwrap(), "SK0:L30:L20:CR0:HT0-1:NM0");
        assert_eq!(locality_string(&t, &cores(&[9])).unwrap(), "SK0:L31:L29:CR9:HT18-19:NM1");
        assert_eq!(locality_string(&t, &CpuSet::single(3)).unwrap(), "SK0:L30:L21:CR1:HT3:NM0");
        // Across packages: every level a list.
        assert_eq!(locality_string(&t, &cores(&[15, 16])).unwrap(), "SK0-1:L31-2:L215-16:CR15-16:HT30-33:NM1-2");
        assert_eq!(locality_string(&t, &CpuSet::new()), None);
    }
}
