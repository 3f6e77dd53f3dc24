//! The control protocol of a booted daemon tree (`dpm boot`): what `dpm run`,
//! `dpm status` and `dpm down` say to the boot server over its private Unix
//! socket, and what it says back. Same frames as the daemon links
//! ([`crate::frame`]); the first message of a connection is a [`ToServer`]
//! request carrying [`CONTROL_VERSION`].

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{AppSpec, PmiMode, ProcSpec};

/// Bumped whenever a control message changes shape (2: `Submit::pmi_default`,
/// `RunConfig::pmi` optional; 3: the job's settings as one [`JobSettings`];
/// 4: [`JobSettings::pmix_watch`]; 5: [`BootStatus::allocation`]; 6:
/// [`JobSettings::prepend`] and [`JobSettings::print_all_exitcodes`]; 7:
/// [`NodeStatus::lost`]; 8: MPIR, [`ToClient::Procs`], [`ToServer::Continue`],
/// [`JobSettings::hold`], [`JobSettings::on_timeout`]; 9: [`ToServer::Add`],
/// [`ToServer::Drain`], [`ToClient::Changed`], [`NodeStatus::state`],
/// [`BootStatus::slots_known`]; 10: a tool daemon in [`ToServer::Continue`];
/// 11: [`RankStatus::pmi`], [`RunStatus::states_signal`], [`RunStatus::states_listed`];
/// 12: [`ToServer::Add`]'s `timeout_secs` and `manual`, [`ToClient::Note`]).
pub const CONTROL_VERSION: u32 = 12;

/// A job submitted by `dpm run`, planned on the client (programs resolved in
/// its directory, its environment); placed and launched by the server.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Submit {
    pub apps: Vec<AppSpec>,
    pub procs: Vec<ProcSpec>,
    pub appnums: Vec<i64>,
    /// The run's settings as the client resolved them (its options, then
    /// its environment); the server checks them again.
    pub job: JobSettings,
    /// What spawned jobs inherit: the first segment's environment and the
    /// client's working directory and host.
    pub spawn_env: Vec<(String, String)>,
    pub cwd: String,
    pub host: String,
    /// The client's pid, shown by `dpm status`.
    pub client_pid: u32,
    /// The client was given neither `--pmi` nor `DPM_PMI` (its `pmi_mode`
    /// is auto's choice): the boot's `--pmi` default, if it has one, is
    /// applied to `apps` again on the server.
    pub pmi_default: bool,
}

/// The part of a run's configuration that belongs to its jobs, not to its
/// nodes or this process: the same for a run on its own and one through a
/// boot (`dpm_launcher::config::RunConfig::job`, sent whole in [`Submit`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobSettings {
    /// `-l`: output lines prefixed with their rank.
    pub label: bool,
    pub pmi_mode: PmiMode,
    /// `--timeout`, else `MPIEXEC_TIMEOUT` (0: none).
    pub timeout: Option<Duration>,
    /// `--kill-grace`.
    pub kill_grace: Duration,
    /// `--usize`, as given.
    pub universe_size: Option<i64>,
    pub no_oversubscribe: bool,
    /// `--on-spawned-failure`, `DPM_ON_SPAWNED_FAILURE`, `-disable-auto-cleanup`.
    pub failure_policy: FailurePolicy,
    pub report_placement: bool,
    /// `--kvs`, else `DPM_KVS`, else auto.
    pub kvs: dpm_kvs::KvsDesign,
    /// `-ppn N` and `--map-by node`, applied to the nodes the run gets.
    pub ppn: Option<u32>,
    pub map_by_node: bool,
    /// `--warm-spawn[=N]`, else `DPM_WARM_SPAWN`; `None`: not said (off, or
    /// a boot's default).
    pub warm_spawn: Option<usize>,
    /// Say warm-spawn claims, misses and refills (`-v`, `--report-placement`).
    pub warm_verbose: bool,
    /// `-bind-to`, `-map-by`, `--gpus-per-rank`… for every job of the run.
    pub binding: dpm_binding::BindPolicy,
    /// The first job is served PMI-1/2 though its program could not be
    /// classified: its nodes watch it for Open MPI ranks
    /// ([`crate::LaunchJob::pmix_watch`]).
    #[serde(default)]
    pub pmix_watch: bool,
    /// `-prepend-pattern`: each output line's prefix (wins over `label`).
    #[serde(default)]
    pub prepend: Option<String>,
    /// `-print-all-exitcodes`: the first job's wait statuses at the end.
    #[serde(default)]
    pub print_all_exitcodes: bool,
    /// MPIR launch mode: a debugger set `MPIR_being_debugged` in the
    /// client; the first job's ranks are held at their first instruction
    /// until the client says [`ToServer::Continue`].
    #[serde(default)]
    pub hold: bool,
    /// What the run reports of its ranks at `--timeout` before it kills
    /// them (`--report-state-on-timeout`, `--get-stack-traces`).
    #[serde(default)]
    pub on_timeout: TimeoutReport,
}

/// What a run reports of its live ranks when `--timeout` strikes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum TimeoutReport {
    #[default]
    Nothing,
    /// Each rank's host, pid and PMI state.
    State,
    /// That, and each rank's stack (gdb or eu-stack on its node).
    Stacks,
}

/// One started rank, for MPIR's process table and `dpm status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcInfo {
    pub rank: u32,
    /// Its node's host name (the node table's: as the host list or the
    /// batch system names it).
    pub host: String,
    /// The program it runs (resolved path).
    pub exe: String,
    pub pid: u32,
}

/// What a failure in a job does to the run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum FailurePolicy {
    /// Any failure in any job ends every job of the run and decides the
    /// exit status (jobs of one run are connected: spawn, connect/accept —
    /// one left alone would wait forever). dpm's behaviour for `dpm run`.
    #[default]
    EndRun,
    /// A failure in a *spawned* job ends that job only; it is logged and
    /// reported to nobody else: the run, its first job and its status go on
    /// (an elastic application whose workers come and go). A failure in the
    /// first job, a lost node, a signal or the timeout still end the run.
    SurviveSpawnedJobs,
    /// Hydra's `-disable-auto-cleanup`: a failed rank (an exit or a signal),
    /// in any job, ends nothing at once: the others run on, a rank that died
    /// without finalizing is in their `PMI_dead_processes`, and once every
    /// live rank of its job waits in a PMI fence it can never join, the run
    /// ends (where Hydra would hang). The first failure decides the exit
    /// status. An `MPI_Abort`, a lost node, dpm's signal or the timeout
    /// end the run at once.
    KeepOthers,
}

impl FailurePolicy {
    /// Whether a failure in `job` (spawned or not) ends the run (an abort
    /// always does, except in a spawned job under `SurviveSpawnedJobs`).
    pub fn ends_run(self, spawned: bool) -> bool {
        match self {
            FailurePolicy::EndRun | FailurePolicy::KeepOthers => true,
            FailurePolicy::SurviveSpawnedJobs => !spawned,
        }
    }
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
    /// The client's debugger let it go on from `MPIR_Breakpoint` after
    /// [`ToClient::Procs`]: start the tool daemon it asked for there (if
    /// any) on each node of the job, then continue the job's ranks if held.
    Continue {
        job: u32,
        #[serde(default)]
        tool: Option<crate::ToolDaemon>,
    },
    /// `dpm boot --add`: start a daemon on each of these hosts and join it
    /// to the tree; `bootstrap`: how, when the command named a launcher (or
    /// its allocation's agent) — else the boot's own way.
    /// `timeout_secs`: how long the new daemons may take to connect
    /// (`--connect-timeout`; `None`: the server's default). `manual`:
    /// `-launcher manual`, the user starts them with the commands the
    /// server sends back ([`ToClient::Note`]).
    Add {
        version: u32,
        nodes: Vec<(String, u32)>,
        bootstrap: Option<crate::tree::Bootstrap>,
        #[serde(default)]
        timeout_secs: Option<u64>,
        #[serde(default)]
        manual: Option<ManualJoin>,
    },
    /// `dpm boot --drain`: these hosts take no new ranks; each one's daemon
    /// leaves once its ranks ended (`force`: they are killed now).
    Drain { version: u32, hosts: Vec<String>, force: bool },
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
    /// The answer to [`ToServer::Add`] or [`ToServer::Drain`]: what
    /// changed, a line per node (the request was carried out whole).
    Changed(Vec<String>),
    /// A line for the one who asked, while the request is under way
    /// (`dpm boot --add -launcher manual`: the commands to run).
    Note(String),
    /// Every rank of a job of the run has started (in rank order), for the
    /// client's MPIR table; `held`: they wait for [`ToServer::Continue`].
    Procs {
        job: u32,
        procs: Vec<ProcInfo>,
        held: bool,
    },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BootStatus {
    pub server_pid: u32,
    pub uptime_secs: f64,
    pub fanout: usize,
    pub nodes: Vec<NodeStatus>,
    pub runs: Vec<RunStatus>,
    /// The batch allocation the nodes came from and how the daemons
    /// started (`None`: no batch system).
    pub allocation: Option<String>,
    /// Every node's slots were given (a host list with counts, an
    /// allocation), not guessed from the CPUs: a run without `-n` gets one
    /// rank per slot, else one per node (Hydra's one slot per host).
    #[serde(default)]
    pub slots_known: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeStatus {
    pub host: String,
    pub slots: u32,
    /// Processes of running jobs placed there.
    pub load: i64,
    /// Why the node was lost (its runs there ended; it takes nothing new).
    pub lost: Option<String>,
    /// `up`, `draining` (no new ranks), `released` (drained, its daemon
    /// gone), `lost`; empty from a boot older than control protocol 9.
    #[serde(default)]
    pub state: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunStatus {
    pub client_pid: u32,
    /// (job id, kvsname, size) of each running job of the run.
    pub jobs: Vec<(u32, String, u32)>,
    /// Each job's ranks (job id, ranks in rank order), once all started.
    #[serde(default)]
    pub ranks: Vec<(u32, Vec<RankStatus>)>,
    /// The signal that asks this run to list its live ranks' PMI states
    /// ([`RankStatus::pmi`]) in its table (a plain run's table only).
    #[serde(default)]
    pub states_signal: Option<i32>,
    /// How many times the run has listed its ranks' PMI states (a reader
    /// that sent `states_signal` waits for this to grow).
    #[serde(default)]
    pub states_listed: u64,
}

/// A rank as the run sees it, for tools (`dpm status --json`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankStatus {
    pub rank: u32,
    pub host: String,
    pub pid: u32,
    /// `running`, `held` (for a debugger), `exited 0`, `failed: …`, `terminated`.
    pub state: String,
    /// A live rank's PMI state as its node last said when asked
    /// ([`RunStatus::states_signal`]): the call it waits in and since when
    /// (``waits in PMI `barrier_in` for 4.8 s``), as `--report-state-on-timeout` says it.
    #[serde(default)]
    pub pmi: Option<String>,
}

/// `dpm boot --add -launcher manual`: where the boot server listens for
/// the new daemons (`--bind`; `None`: every IPv4 address, a free port) and
/// the name they connect to when it listens on every address (`-localhost`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManualJoin {
    pub bind: Option<String>,
    pub connect_host: Option<String>,
}
