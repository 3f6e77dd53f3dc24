//! Persistent daemons: `dpm boot`, `dpm status`, `dpm down`, and `dpm run`
//! through a booted tree (paper 002's MPD model: start the daemons once, then
//! launch with no daemon start-up at all).
//!
//! - [`cli`]: `dpm boot` itself: its options, detaching the server.
//! - [`server`]: the boot server: the root of a daemon tree (the same tree
//!   and bootstraps as `dpm run`) that stays up, listening on a Unix socket
//!   in the user's private directory ([`private_dir`]) and checking each
//!   peer's uid (SO_PEERCRED); nothing listens on the network. It runs each
//!   submitted job with a [`Controller`](crate::controller::Controller) of
//!   its own, answers `dpm status` and stops on `dpm down`.
//! - [`reform`]: the re-attach listener: the daemons below a lost interior
//!   node connect back here and serve on as top-level daemons.
//! - [`grow`]: `dpm boot --add` (daemons joined to the running tree) and
//!   `dpm boot --drain` (hosts that take nothing new and leave when empty).
//! - `rendezvous`: `NAME.json`, rewritten (atomically) as the nodes change.
//! - [`client`]: `dpm run` through the boot (plans its job locally —
//!   programs, its environment, its directory — submits it with its
//!   [`RunConfig`](crate::config::RunConfig), and relays output, signals and
//!   stdin), `dpm status`, `dpm down`.
//!
//! Runs share the tree's name service, job ids and node load, so two
//! separate `dpm run`s can connect by published name and spawns see the load
//! of every run — but each run's failures, aborts and signals touch only its
//! own jobs. A node lost from the tree ends only the runs with ranks there;
//! the nodes below it re-attach to the server ([`reform`]) and their runs go on.
//!
//! [`private_dir`]: crate::private_dir

pub mod cli;
pub mod client;
pub mod grow;
pub mod reform;
mod rendezvous;
pub mod server;

use std::path::PathBuf;

use crate::cli::RunOptions;
use crate::error::DirError;
use crate::private_dir;

/// Where a boot's files are.
pub(crate) struct BootFiles {
    pub socket: PathBuf,
    pub rendezvous: PathBuf,
    pub log: PathBuf,
}

pub(crate) fn boot_files() -> Result<BootFiles, DirError> {
    let dir = private_dir::runtime_dir()?;
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let name = match env("DPM_BOOT") {
        Some(n) => n,
        None => crate::batch::BatchSystem::DETECTION_ORDER
            .into_iter()
            .find_map(|s| env(s.job_id_var()).map(|id| format!("{s}-{id}")))
            .unwrap_or_else(|| "default".into()),
    };
    if name.contains('/') {
        return Err(DirError::BootName(name));
    }
    Ok(BootFiles { socket: dir.join(format!("{name}.sock")), rendezvous: dir.join(format!("{name}.json")), log: dir.join(format!("{name}.log")) })
}

/// Whether `dpm run` with these options goes through a boot (if one is up):
/// not when it names nodes or a launcher of its own, or asks for PMI traces
/// (the boot's daemons were started without them), or for output files
/// (`-outfile-pattern`/`-errfile-pattern`: written by the `dpm run` itself,
/// in its own directory), or reshapes the node list (`-skip-launch-node`,
/// `-order-nodes`, `-rankmap`: the boot's nodes are fixed).
pub fn wants_boot(opts: &RunOptions) -> bool {
    opts.hosts.is_empty()
        && !opts.skip_launch_node
        && opts.order_nodes.is_none()
        && opts.rankmap.is_none()
        && opts.outfile_pattern.is_none()
        && opts.errfile_pattern.is_none()
        && opts.hostfile.is_none()
        && opts.virtual_nodes.is_none()
        && opts.launcher.is_none()
        && opts.rmk.is_none()
        && !opts.pmi_trace
        // The interface is the boot's own (`dpm boot -iface`).
        && opts.iface.is_none()
        && std::env::var_os("HYDRA_IFACE").is_none_or(|v| v.is_empty())
        && std::env::var_os("DPM_NO_BOOT").is_none_or(|v| v.is_empty() || v == "0")
}
