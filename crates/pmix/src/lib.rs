//! dpm-pmix: dpm's PMIx host. OpenPMIx's server library (`libpmix.so.2`)
//! is loaded at run time ([`library`]), started once per process
//! ([`PmixServer`]), fed jobs as plain Rust data ([`JobSpec`]), and its
//! upcalls reach the host as owned [`Upcall`] values (on its own channel,
//! or on one the server makes), each with a
//! completion handle that answers the library exactly once.
//! Design, threads and what remains for dpm's integration: `docs/pmix.md`.
pub mod elf;
pub mod error;
pub mod ffi;
pub mod got;
mod group;
pub mod info;
pub mod job;
pub mod library;
pub mod server;
pub mod upcall;

pub use error::PmixError;
pub use info::{Proc, Value};
pub use job::{JobSpec, NodeRanks, ProcPlace};
pub use library::{Api, LibrarySearch};
pub use server::{PmixServer, UpcallSink};
pub use upcall::{App, GroupOp, InfoDone, LookupDone, ModexDone, OpDone, SpawnDone, Upcall};

/// `PMIX_RANK_WILDCARD`: "every rank" in a `Proc`.
pub const RANK_WILDCARD: u32 = ffi::PMIX_RANK_WILDCARD;
/// Status codes a host answers with.
pub use ffi::{PMIX_ERROR, PMIX_ERR_NOT_FOUND, PMIX_ERR_NOT_SUPPORTED, PMIX_SUCCESS};
