//! # dpm-pmi: the PMI-1 and PMI-2 wire protocols, sans I/O
//!
//! - [`wire`]: framing; bytes in, [`wire::Frame`]s out; the reply encoder.
//! - [`request`]: a frame turned into a typed [`Request`] (one enum for both versions).
//! - [`reply`]: typed [`Reply`] values, encoded in the request's framing.
//! - [`engine`]: the node-side protocol engine: connections, per-job fences
//!   and rings, the job's KVS under its design (`dpm_kvs::NodeStore`), node
//!   attributes; produces [`Effect`]s for the daemon to carry out.
//! - [`limits`]: the resource bounds (line, spawn block, argument and process
//!   counts, queued replies, logged warnings), each with its reason.
//! - [`sanitize`]: client text escaped for logs and traces; the per-connection
//!   warning budget.
//! - `fuzzing` (feature `fuzzing`): the bodies of the `fuzz/` targets, also
//!   run on the stable toolchain by `tests/fuzz_smoke.rs`.
//!
//! The PMI-2 extensions of paper 004 (`ring`, `hint=`, `wait=TRUE`, `srcid`)
//! are specified in `docs/pmi-extensions.md`.
//!
//! `docs/pmi-wire.md` is the reference for what MPICH 5 sends and expects;
//! the tests replay its transcripts.

mod conn;
pub mod engine;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod limits;
pub mod reply;
pub mod request;
pub mod sanitize;
pub mod wire;

pub use engine::{ConnId, Effect, Engine, JobSetup, NameOp, PmiState};
pub use reply::{Reply, Spawned};
pub use request::{Hint, Request, SpawnCommand, SpawnRequest};
pub use wire::decode::Decoder;
pub use wire::{Frame, Version};
