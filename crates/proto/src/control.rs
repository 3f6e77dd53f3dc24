//! The control protocol of a booted daemon tree (`dpm boot`): what `dpm run`,
//! `dpm status` and `dpm down` say to the boot server over its private Unix
//! socket, and what it says back. Same frames as the daemon links
//! ([`crate::frame`]); the first message of a connection is a [`ToServer`]
//! request carrying [`CONTROL_VERSION`].

use serde::{Deserialize, Serialize};

use crate::{AppSpec, PmiMode, ProcSpec};

/// Bumped whenever a control message changes shape (2: `Submit::pmi_default`,
/// `RunConfig::pmi` optional).
pub const CONTROL_VERSION: u32 = 2;

/// A job submitted by `dpm run`, planned on the client (programs resolved in
/// its directory, its environment); placed and launched by the server.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Submit {
    pub apps: Vec<AppSpec>,
    pub procs: Vec<ProcSpec>,
    pub appnums: Vec<i64>,
    /// `-ppn N` and `--map-by node`, applied to the boot's nodes.
    pub ppn: Option<u32>,
    pub map_by_node: bool,
    pub label: bool,
    pub kill_grace_secs: f64,
    pub universe_size: Option<i64>,
    pub pmi_mode: PmiMode,
    pub no_oversubscribe: bool,
    pub report_placement: bool,
    pub timeout_secs: Option<u64>,
    /// What spawned jobs inherit: the first segment's environment and the
    /// client's working directory and host.
    pub spawn_env: Vec<(String, String)>,
    pub cwd: String,
    pub host: String,
    /// The client's pid, shown by `dpm status`.
    pub client_pid: u32,
    /// The run's KVS design (`--kvs`, `DPM_KVS`, resolved by the client).
    #[serde(default)]
    pub kvs: dpm_kvs::KvsDesign,
    /// `--warm-spawn[=N]` or `DPM_WARM_SPAWN`, if the client said (else the
    /// boot's own default).
    #[serde(default)]
    pub warm_spawn: Option<usize>,
    /// Say warm-spawn claims, misses and refills (`-v`, `--report-placement`).
    #[serde(default)]
    pub warm_verbose: bool,
    /// `--on-spawned-failure continue`: a failed spawned job ends alone.
    #[serde(default)]
    pub survive_spawned_failures: bool,
    /// `-disable-auto-cleanup`: a failed rank ends no other.
    #[serde(default)]
    pub keep_others_on_failure: bool,
    /// The client was given neither `--pmi` nor `DPM_PMI` (its `pmi_mode`
    /// is auto's choice): the boot's `--pmi` default, if it has one, is
    /// applied to `apps` again on the server.
    #[serde(default)]
    pub pmi_default: bool,
    /// `-bind-to`, `-map-by`, `--gpus-per-rank`… for every job of the run.
    #[serde(default)]
    pub binding: dpm_binding::BindPolicy,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum ToServer {
    /// Run a job; the connection then carries its inputs and output.
    Run { version: u32, submit: Box<Submit> },
    /// A signal `dpm run` received, to forward to its job.
    Signal(i32),
    /// `dpm run`'s stdin for rank 0; empty means end of input.
    Stdin(Vec<u8>),
    /// `dpm status`.
    Status { version: u32 },
    /// `dpm down`: end every job and the daemons.
    Down { version: u32 },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum ToClient {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    /// The run is over: `dpm run`'s exit status.
    Exit(i32),
    /// The request was not accepted (version mismatch, boot going down…).
    Refused(String),
    Status(BootStatus),
    /// `dpm down` is complete.
    Down,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BootStatus {
    pub server_pid: u32,
    pub uptime_secs: f64,
    pub fanout: usize,
    pub nodes: Vec<NodeStatus>,
    pub runs: Vec<RunStatus>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeStatus {
    pub host: String,
    pub slots: u32,
    /// Processes of running jobs placed there.
    pub load: i64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunStatus {
    pub client_pid: u32,
    /// (job id, kvsname, size) of each running job of the run.
    pub jobs: Vec<(u32, String, u32)>,
}
