//! The launcher crate's errors, as its commands (`dpm run`, `dpm boot`,
//! `dpm status`, `dpm down`, `dpm daemon`) return them: each says what went
//! wrong in one line and maps to the exit status it ends the process with.
//! The binary renders them once ([`Error::render`]); nothing below the
//! command entries prints a user-facing message.

use std::path::PathBuf;

use dpm_daemon::LinkError;
use dpm_kvs::NodeId;
use dpm_proto::auth::{SecretError, SECRET_ENV, SECRET_FILE_ENV};
use dpm_proto::frame::FrameError;

use crate::plan::PlanError;

/// A bad command line or environment value: exit status 2.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

impl UsageError {
    pub fn new(msg: impl Into<String>) -> Self {
        UsageError(msg.into())
    }
}

/// Why the nodes or the way to start daemons on them cannot be worked out:
/// a usage error (exit 2), whatever its source (flag, file or environment).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Usage(#[from] UsageError),
    #[error("host file {file}: {source}")]
    HostFile { file: String, source: std::io::Error },
    #[error("SLURM_JOB_NODELIST is set but scontrol cannot be run: {0}")]
    Scontrol(std::io::Error),
    #[error("scontrol show hostnames {nodelist}: {stderr}")]
    ScontrolFailed { nodelist: String, stderr: String },
    /// A batch allocation's files or variables (`crate::batch`).
    #[error(transparent)]
    Batch(#[from] crate::batch::BatchError),
}

/// The runtime directory or a boot's files.
#[derive(Debug, thiserror::Error)]
pub enum DirError {
    #[error("cannot create the private directory {}: {source}", dir.display())]
    Create { dir: PathBuf, source: std::io::Error },
    #[error("{}: {source}", dir.display())]
    Stat { dir: PathBuf, source: std::io::Error },
    #[error("{} is not a directory (a symlink?); refusing to use it", .0.display())]
    NotADirectory(PathBuf),
    #[error("{} belongs to uid {owner}, not to you (uid {me}); refusing to use it", dir.display())]
    NotOwned { dir: PathBuf, owner: u32, me: u32 },
    #[error("{} is open to other users (mode {mode:o}); make it 0700", dir.display())]
    Open { dir: PathBuf, mode: u32 },
    #[error("DPM_BOOT={0}: a boot name cannot contain '/'")]
    BootName(String),
}

/// Why `dpm daemon` could not serve its node.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("cannot read the secret on stdin: {0}")]
    SecretFrame(#[from] FrameError),
    #[error(transparent)]
    Secret(#[from] SecretError),
    #[error("no secret: dpm daemon is started by dpm run (the secret comes in {SECRET_ENV} or on stdin)")]
    NoSecret,
    #[error("no secret: set {SECRET_FILE_ENV} to the file dpm run printed (copied here with mode 0600), or {SECRET_ENV} to its contents")]
    NoSecretFile,
    #[error("cannot connect to the launcher at {addr}: {source}")]
    Connect { addr: String, source: std::io::Error },
    #[error("cannot connect to the launcher at {addr}: no answer within {secs} s")]
    NoAnswer { addr: String, secs: u64 },
    /// The launcher hangs up without a word on a connection it refuses
    /// before the proofs (its log says why).
    #[error("the launcher at {addr} closed the connection during the handshake: is {node} already connected, or not a node of the run? (its log says)")]
    Refused { addr: String, node: NodeId },
    #[error(transparent)]
    Link(#[from] LinkError),
}

/// What a launcher command can fail with, before or instead of a job's own
/// exit status.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The command line or an environment variable: exit 2.
    #[error(transparent)]
    Usage(#[from] UsageError),
    /// The nodes or bootstrap: exit 2.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A program that cannot be started: 127, 126 or 1, like a shell.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The private runtime directory: exit 1.
    #[error(transparent)]
    Dir(#[from] DirError),
    /// Anything else that stops the command (daemons that do not come up,
    /// a boot server that went away, …): exit 1.
    #[error("{0}")]
    Failed(String),
    /// `dpm daemon` could not serve its node: exit 1.
    #[error("{node}: {source}")]
    Daemon { node: NodeId, source: DaemonError },
    /// A signal while dpm itself waited (the manual bootstrap): 128 + N.
    #[error("{what} while waiting for the daemons")]
    Interrupted { what: &'static str, signal: i32 },
}

impl Error {
    pub fn failed(msg: impl Into<String>) -> Self {
        Error::Failed(msg.into())
    }

    /// The exit status this error ends the process with.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) | Error::Config(_) => 2,
            Error::Plan(e) => e.exit_code(),
            Error::Dir(_) | Error::Failed(_) | Error::Daemon { .. } => 1,
            Error::Interrupted { signal, .. } => 128 + signal,
        }
    }

    /// The message for stderr in dpm's one style, `dpm: error: message`,
    /// with a pointer to the command's `--help` for usage errors (`who`: the
    /// command, `dpm run` or `mpiexec`).
    pub fn render(&self, who: &str) -> String {
        match self {
            Error::Usage(_) => format!("dpm: error: {self}\nTry '{} --help'.", help_command(who)),
            _ => format!("dpm: error: {self}"),
        }
    }
}

/// `mpiexec` is `dpm run`; the others name their own help.
fn help_command(who: &str) -> &str {
    match who {
        "mpiexec" | "mpirun" | "mpiexec.dpm" => "dpm run",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_and_rendering() {
        let usage = Error::from(UsageError::new("no program given"));
        assert_eq!(usage.exit_code(), 2);
        assert_eq!(usage.render("dpm run"), "dpm: error: no program given\nTry 'dpm run --help'.");
        assert_eq!(usage.render("mpiexec"), "dpm: error: no program given\nTry 'dpm run --help'.");
        assert_eq!(Error::from(PlanError::NotFound("x".into())).exit_code(), 127);
        assert_eq!(Error::Interrupted { what: "interrupted (SIGINT)", signal: 2 }.exit_code(), 130);
        assert_eq!(Error::failed("lost").render("dpm status"), "dpm: error: lost");
    }
}
