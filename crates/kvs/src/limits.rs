//! The key-value state's bounds: how much a job's ranks may store through
//! PMI. Keys and values are already bounded in size by the PMI decoder
//! (`dpm_pmi::limits`: 64-byte keys, 1,024-byte values); these bound their
//! number, so no rank can grow a daemon or the launcher without limit. A put
//! beyond a bound is refused with an error reply; nothing stored is dropped.

/// Distinct keys one job's ranks may put on one node. MPICH puts 2–3 keys per
/// rank (business card, shm handle, node id) and mpi4py none of its own, so
/// a node with 1,024 ranks stays two orders of magnitude below; the worst
/// case (every key 64 bytes, every value 1,024) is ~300 MiB of values per job
/// per node. A later put of an existing key replaces it and costs nothing.
pub const MAX_NODE_KEYS: usize = 262_144;

/// Distinct PMI-2 node attributes of one job on one node (`info-putnodeattr`:
/// MPICH puts one per node for its shared-memory segment).
pub const MAX_NODE_ATTRS: usize = 65_536;

/// Service names published at once in one run (or one boot). MPI programs
/// publish a handful; each name and port is bounded by the PMI decoder.
pub const MAX_NAMES: usize = 65_536;

/// Lookups parked until their name is published (PMIx's `PMIX_WAIT`:
/// Open MPI's connect/accept rendezvous) at once in one run (or one boot).
/// Each is one client call waiting for its answer; Open MPI parks one or two
/// per spawn or connect, so 4,096 is far above any program's need and bounds
/// what ranks that look up names nobody publishes can hold in the launcher.
pub const MAX_PARKED_LOOKUPS: usize = 4_096;
