//! CPU binding, rank mapping, memory binding and GPU assignment, as pure
//! logic: a node's topology (hwloc XML) and the user's policy in, each
//! rank's CPU set, NUMA nodes and GPUs out. The node daemon applies the
//! result in each child before `exec` (`dpm_daemon::spawn`).
//!
//! - [`cpuset`]: CPU and NUMA node sets (hwloc masks, Linux lists, masks);
//! - [`topology`]: the objects of hwloc's XML that binding uses;
//! - [`locality`]: a bound rank's locality string for PMIx (`PMIX_LOCALITY_STRING`);
//! - [`policy`]: `-bind-to`, `-map-by`, `--cpus-per-rank`, `-membind`,
//!   `--gpus-per-rank` parsed into a [`policy::BindPolicy`];
//! - [`place`]: a node's [`place::Binder`], which hands out objects to a
//!   job's ranks (balanced against the live ranks for spawned jobs) and
//!   takes them back when they exit; [`gpu`] the GPUs among them.

pub mod cpuset;
pub mod gpu;
pub mod locality;
pub mod place;
pub mod policy;
pub mod topology;

pub use cpuset::CpuSet;
pub use place::{Binder, JobBindings, RankBinding};
pub use policy::BindPolicy;
pub use topology::Topology;
