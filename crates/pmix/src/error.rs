//! The crate's typed errors: every failing PMIx call carries the library's
//! own status name (`PMIX_ERR_…`), rendered once by the caller.
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum PmixError {
    #[error("cannot load the PMIx library {path}: {reason}")]
    Load { path: PathBuf, reason: String },
    #[error("a PMIx server already runs in this process (one PMIx_server_init per process)")]
    AlreadyRunning,
    #[error("{call} failed: {name} ({status})")]
    Call { call: &'static str, status: i32, name: String },
    #[error("{call} did not complete within {secs} s")]
    Timeout { call: &'static str, secs: u64 },
    #[error("invalid {what}: {detail}")]
    Invalid { what: &'static str, detail: String },
    #[error("cannot prepare the server directory {path}: {source}")]
    TmpDir { path: PathBuf, source: std::io::Error },
}
