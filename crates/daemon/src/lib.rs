//! # dpm-daemon: the node daemon
//!
//! One daemon runs per node. It takes [`ToDaemon`](dpm_proto::ToDaemon)
//! messages from the launcher and answers with
//! [`ToLauncher`](dpm_proto::ToLauncher) messages. It owns everything local:
//! starting ranks, serving their PMI connections through the sans-IO
//! [`dpm_pmi::Engine`], forwarding their output up and the launcher's stdin
//! down, reaping them and reporting each exit once its output and PMI traffic
//! are through (so a finalize sent just before `exit()` is never missed).
//!
//! ## Layout
//! Pure state machines, each acting only through plain data or a small
//! effects trait, and thin async drivers around them:
//! - [`node`]: the node reactor ([`node::NodeReactor`], effects
//!   [`node::NodeEffects`]; a recorder for tests) and its driver
//!   ([`node::driver`], [`run`]);
//! - [`tree`]: what a daemon does for its subtree on the link to its parent
//!   ([`tree::TreeNode`]: routing down, fence merging, the subtree's KVS and
//!   ring work); [`link`] drives it ([`serve_link`]: handshake, heartbeats,
//!   frames; starting the children);
//! - [`spawn`]: starting a rank (`clone(CLONE_VM|CLONE_VFORK)` with
//!   `PR_SET_PDEATHSIG`, its process group; per-CPU spawner threads);
//!   `tasks`: per-process tasks (pidfd reaping, output, stdin, PMI ports);
//! - [`links`]: starting, greeting and bridging child daemons (shared with
//!   the launcher); [`stdio`]: the link over stdin/stdout; [`mpich_shm`],
//!   [`ucx_shm`]: MPICH's and UCX's leftover shared memory; [`cleaner`]: the
//!   process that removes it (and kills what is left of the ranks' groups)
//!   when the process running the node dies without doing so; [`peer`]: who is on the other end of a
//!   PMI port connection (its uid, from the kernel), so no other user gets in;
//!   [`pmix_guard`]: the same check on the connections the PMIx server
//!   library accepts, made in dpm's own `accept` bound to the library's GOT
//!   slot, checked at load and proven by a canary connection;
//!   [`pmix_watch`]: the policy of a watched job's loopback listener, which
//!   turns an Open MPI rank served PMI-1/2 into a refusal, never a singleton;
//!   [`topology`]: the node's hwloc topology file for `PMI_hwloc_xmlfile`
//!   (kept across processes on one machine boot: `topology_cache`).
//!
//! Every log line carries the node: the drivers run inside a `node` span
//! (`node`, `host`), and the tasks and threads they start inherit it.

pub mod binding;
pub mod cleaner;
pub mod iface;
pub mod link;
pub mod links;
pub mod liveness;
pub mod mpich_shm;
pub mod node;
pub mod peer;
pub mod pmix_guard;
pub mod pmix_watch;
pub mod pool_priority;
mod proc_stat;
mod readbuf;
pub mod refusals;
pub mod spawn;
pub mod spawner;
pub mod stack;
pub mod start_watch;
pub mod stdio;
mod tasks;
pub mod tool;
pub mod topology;
mod topology_cache;
pub mod tree;
pub mod ucx_shm;

pub use link::{serve_link, LinkError, Uplink};
pub use node::driver::run;
pub use node::UpSender;
pub use tasks::now_micros;

use dpm_kvs::NodeId;
use tracing::Instrument;

/// How the daemon introduces itself.
#[derive(Clone, Debug)]
pub struct DaemonConfig {
    /// The node's name, reported in `PMI_HOSTNAME` and failure messages.
    pub host: String,
    /// Emit `--pmi-trace` lines.
    pub trace: bool,
}

/// The span every log line of a node's daemon is in. At the error level so
/// that it is on whenever any of its lines is (an info span is off under the
/// default filter, and its errors would lose the node).
fn node_span(node: NodeId, host: &str) -> tracing::Span {
    tracing::error_span!("node", node = node.0, host)
}

/// `tokio::spawn` in the caller's span (in a daemon: the node's).
fn spawn_here<F>(future: F) -> tokio::task::JoinHandle<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio::spawn(future.in_current_span())
}

/// `tokio::task::spawn_local` in the caller's span (in a daemon: the node's).
fn spawn_local_here<F>(future: F) -> tokio::task::JoinHandle<F::Output>
where
    F: std::future::Future + 'static,
    F::Output: 'static,
{
    tokio::task::spawn_local(future.in_current_span())
}
