//! The process around a command: its one-thread runtime and its open-file
//! limit. A leaf: every command entry (`dpm run`, `dpm boot`, `dpm daemon`,
//! the singleton) uses it.

use crate::error::Error;

/// Run `main` to completion on one thread: the daemon keeps its state in a
/// `LocalSet` (see dpm-daemon), and ranks are started from threads that live
/// as long as the process.
pub fn block_on_local(main: impl std::future::Future<Output = Result<i32, Error>>) -> Result<i32, Error> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| Error::failed(format!("cannot start the runtime: {e}")))?;
    let result = runtime.block_on(tokio::task::LocalSet::new().run_until(main));
    // Not waiting for blocking reads still pending (tokio's stdin of a
    // daemon whose link is still open): the process is done.
    runtime.shutdown_background();
    result
}

/// Raise the soft open-file limit (`RLIMIT_NOFILE`) to the hard limit, as
/// Hydra's users expect: each rank costs its node's daemon a socket and two
/// or three pipe ends, and the launcher a few more per daemon, so the usual
/// soft limit of 1024 ends a few hundred ranks per node. Called at the start
/// of every role: `dpm run` (which may host the daemon), the boot server
/// and `dpm daemon`. Returns the soft limit now in force.
pub fn raise_fd_limit() -> Option<u64> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft < hard {
        if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            tracing::warn!("cannot raise the open-file limit from {soft} to {hard}: {e}");
            return Some(soft);
        }
        tracing::debug!("open-file limit raised from {soft} to {hard}");
    }
    Some(hard)
}
