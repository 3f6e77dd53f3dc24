//! # dpm-cluster: the middle test tier
//!
//! A whole dpm cluster in one process: the real node reactors
//! ([`dpm_daemon::node::NodeReactor`]) with their real tree nodes
//! ([`dpm_daemon::tree::TreeNode`]) under the real run reactor
//! ([`dpm_launcher::run::Run`]), wired as dpm's links wire them, under a
//! virtual clock, with scripted processes that speak PMI-1 by bytes in
//! place of MPI programs. No fork, no sockets, no MPI: a multi-node fence,
//! a spawn or the failure policy runs in microseconds, deterministically.
//!
//! The black-box tests (`crates/dpm/tests`) remain the proof against real
//! MPICH; this tier proves the protocols and policies between the pieces.
//!
//! ## Layout
//! - [`process`]: scripts ([`Step`]) and the PMI-1 client that runs them;
//! - [`cluster`]: [`Cluster`] — events, routing, the clock, [`Costs`].
//!
//! The reactors' effects are recorded by their own recorders
//! (`dpm_daemon::node::recorder`, `dpm_launcher::run::Recorder`) and carried
//! out by the cluster after each call, so no reactor is ever re-entered.

pub mod calibration;
pub mod cluster;
pub mod layout;
pub mod model;
pub mod process;
pub mod resources;
pub mod sim;

pub use cluster::{Cluster, Process};
pub use layout::{Costs, Layout};
pub use process::{get, get_all, put, Script, Step};
