//! The node reactor: everything a node daemon decides, as a plain state
//! machine, and the effects it asks of the outside world.
//!
//! [`NodeReactor`] owns the node's state — jobs, their processes, process
//! groups and group leaders, PMI connections and the [`dpm_pmi::Engine`]
//! serving them, requests in flight (name service, spawn), stdin routing, the
//! rule for when an exit may be reported. Each input is one method call with
//! plain data (a [`ToDaemon`](dpm_proto::ToDaemon) from the parent, bytes read
//! on PMI connection X, connection X closed, a process's output, its exit, a
//! timer); it acts only through [`NodeEffects`]. It holds no sockets, no
//! clocks and makes no syscalls, so a test (or an in-process cluster) drives
//! it with a recorder ([`recorder::RecordingEffects`]).
//!
//! Parts with state of their own sit beside it, each a field of the reactor
//! whose maps only its own module reaches, told what it needs of the node
//! per call: `pmix_front` (the PMIx front end: its jobs, namespaces,
//! fences and requests in flight), `node_binding` (the binder and what each
//! rank holds), `output` (whole lines and the output window) and
//! `requests` (the questions up to the launcher, by who asked). After every
//! input the reactor's invariants hold across them
//! ([`NodeReactor::check_invariants`]; checked by the unit tests).
//!
//! [`driver`] is the async side for a real node: it owns the sockets, pidfds,
//! pipes, timers and spawner threads, implements [`NodeEffects`] and feeds
//! the reactor.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use dpm_kvs::{JobId, Rank};
use dpm_pmi::ConnId;
use dpm_proto::{Stream, ToLauncher};

pub use crate::spawn::{PmiEnv, PreparedApp};

#[cfg(test)]
mod binding_tests;
#[cfg(test)]
mod debug_tests;
pub mod driver;
mod node_binding;
mod output;
#[cfg(test)]
mod output_tests;
mod pmix_front;
mod pmix_host;
#[cfg(test)]
mod pmix_tests;
mod reactor;
pub mod recorder;
mod requests;
#[cfg(test)]
mod resync_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod topology_tests;
mod upward;
#[cfg(test)]
mod watch_tests;

pub use output::{BUSY_HOLD, HOLD_MAX, MAX_WAITS, QUIET};
pub use pmix_front::{job_spec, GroupAnswer, GroupDirectives, PmixAnswer, PmixApp, PmixEvent, PmixRequest};
pub use reactor::{NodeReactor, TOPOLOGY_WAIT};
pub use upward::UpSender;

/// How long an exited process's PMI connection and pipes may stay open (held
/// by a grandchild) before its exit is reported anyway.
pub const DRAIN_GRACE: Duration = Duration::from_millis(250);

/// One process the reactor asks to be started.
#[derive(Clone)]
pub struct ProcStart {
    pub job: JobId,
    pub rank: Rank,
    /// Program, arguments, environment and directory, checked and shared by
    /// the app's ranks ([`PreparedApp::spec`] gives the original spec).
    pub app: Arc<PreparedApp>,
    /// The variables dpm adds (`PMI_RANK`, `PMI_PORT`…), and whether to pass
    /// a PMI socketpair (`PMI_FD`).
    pub env: PmiEnv,
    /// The process group to join; 0: found a new session and group led by
    /// the process (`setsid`; what the reactor asks for every rank).
    pub pgid: i32,
    /// Give it a pipe for the launcher's stdin (else `/dev/null`).
    pub with_stdin: bool,
    /// In `PMI_FD` mode: serve the parent's end of the socketpair as this
    /// connection.
    pub pmi_conn: Option<ConnId>,
    /// Which thread clones it ([`StartBy::for_launch`]).
    pub by: StartBy,
}

/// Which thread starts a launch's processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartBy {
    /// The spawner threads ([`crate::spawner`]): several children exec at
    /// once, each cloned from a nearly empty fd table. A job's start.
    SpawnerThreads,
    /// The node's own thread, at once, as Hydra's proxy forks its children:
    /// a spawned job of few processes here. Its children start while their
    /// parents busy-poll on every core; handed to a spawner thread, a start
    /// waited for that sleeping thread to get a CPU, and MPICH's taskmaster
    /// loop took 8 % longer (docs/benchmarks.md, "Spawn loop"). The price: the
    /// clone copies the node's whole fd table (four per running rank), which
    /// the child's exec then closes, and the node's loop waits for the exec.
    NodeThread,
}

impl StartBy {
    /// The most processes of one spawned job on one node that the node's
    /// thread starts itself; larger spawns go to the spawner threads.
    pub const NODE_THREAD_MAX: usize = 4;

    /// Who starts a launch of `local` processes here, of a spawned job or of
    /// a job's start. A job's one process here is started by the node's
    /// thread too: nothing starts beside it, and no spawner thread need
    /// start for it (a one-rank `dpm run` then starts none, issue 37).
    pub fn for_launch(spawned: bool, local: usize) -> StartBy {
        if local <= 1 || (spawned && local <= Self::NODE_THREAD_MAX) {
            StartBy::NodeThread
        } else {
            StartBy::SpawnerThreads
        }
    }
}

/// A process that was started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcStarted {
    pub pid: i32,
    /// The group it was put in (the one asked for, or its own pid).
    pub pgid: i32,
    /// The PMI connection now served for it ([`ProcStart::pmi_conn`], unless
    /// that socket could not be served).
    pub pmi: Option<ConnId>,
    /// Whether it reads the launcher's stdin.
    pub stdin: bool,
}

/// Why a process could not be started: the errno (the launcher turns it into
/// an exit code) and a message that says what to do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct StartError {
    pub errno: i32,
    pub message: String,
}

impl From<io::Error> for StartError {
    fn from(e: io::Error) -> Self {
        StartError { errno: e.raw_os_error().unwrap_or(0), message: e.to_string() }
    }
}

/// A timer the reactor sets; it comes back through [`NodeReactor::on_timer`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Timer {
    /// [`DRAIN_GRACE`] after a process was reaped: report its exit even if
    /// its PMI connection or pipes are still open.
    DrainGrace { job: JobId, rank: Rank },
    /// [`QUIET`] after a partial line was held back: pass it on as it is.
    OutputQuiet { job: JobId, rank: Rank, stream: Stream },
    /// [`TOPOLOGY_WAIT`] after the topology export started.
    TopologyWait,
    /// A PMIx request's `PMIX_TIMEOUT` expired: answer it
    /// `PMIX_ERR_TIMEOUT` if it still waits.
    PmixTimeout(PmixRequest),
}

/// A tool daemon to start on this node ([`NodeEffects::start_tool`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolStart {
    pub job: JobId,
    /// This node's name (as the job's table has it).
    pub host: String,
    /// The job's kvsname (the cleaner's name for what it leaves).
    pub kvsname: String,
    pub tool: dpm_proto::ToolDaemon,
    /// What it is told about the node: `DPM_TOOL_HOST`, `DPM_TOOL_RANKS`, `DPM_TOOL_PIDS`.
    pub env: Vec<(String, String)>,
}

/// Everything the node reactor does to the outside world.
pub trait NodeEffects {
    /// Send a message up to the parent (launcher or parent daemon).
    fn send_up(&mut self, msg: ToLauncher);
    /// Write reply bytes on a PMI connection, in order (queue what the
    /// socket does not take at once).
    fn pmi_write(&mut self, conn: ConnId, bytes: &[u8]);
    /// The reactor is done with a connection (its job was forgotten): drop
    /// what is kept for writing to it.
    fn pmi_drop(&mut self, conn: ConnId);
    /// Close a connection once what was written to it has gone out (its
    /// input cannot be read in step any more: `dpm_pmi::Effect::Close`);
    /// its end comes back through [`NodeReactor::on_pmi_closed`].
    fn pmi_close(&mut self, conn: ConnId);
    /// Serve (a duplicate of) an open fd — an adopted singleton's, handed
    /// over by the launcher in its own process — as PMI connection `conn`;
    /// false if it cannot be served.
    fn pmi_serve_fd(&mut self, job: JobId, conn: ConnId, fd: &OwnedFd) -> bool;
    /// Open a loopback PMI port for a job (`PMI_PORT` mode); its connections
    /// come back through [`NodeReactor::on_port_connection`].
    fn open_pmi_port(&mut self, job: JobId) -> io::Result<String>;
    fn close_pmi_port(&mut self, job: JobId);
    /// Listen on this host's loopback for a job's PMIx watch
    /// ([`crate::pmix_watch`]): the port. Each connection comes back through
    /// [`NodeReactor::on_watch_connection`] with the kernel's word on its
    /// owner; the driver holds it open or closes it as that answers.
    fn open_pmix_watch(&mut self, job: JobId) -> io::Result<u16>;
    /// Stop listening for the job's watch and close what it holds.
    fn close_pmix_watch(&mut self, job: JobId);
    /// Start processes (in parallel where possible) and return at once: each
    /// one's result comes back later, in any order, through
    /// [`NodeReactor::on_started`] (never from inside this call). A started
    /// process's output, exit and PMI traffic come back through the
    /// reactor's other `on_*` methods.
    ///
    /// Asynchronous because a node's event loop must never wait for its
    /// clones: measured on 2 cores, `--virtual-nodes 2 -n 6000 /bin/true`
    /// kept a daemon inside one synchronous start for over 1.5 s (3000
    /// clones, `recvmsg` after `recvmsg` on the main thread), and 64
    /// CPU-bound ranks per node competing with their own spawner threads did
    /// the same; the heartbeats stopped and the node was declared lost.
    fn start(&mut self, procs: Vec<ProcStart>);
    /// Watch a process this node did not start (an adopted singleton).
    fn watch_pid(&mut self, job: JobId, rank: Rank, pid: u32) -> io::Result<()>;
    /// Pass bytes to the stdin of the job's process that reads it.
    fn stdin_write(&mut self, job: JobId, data: Vec<u8>);
    /// Close that stdin.
    fn stdin_close(&mut self, job: JobId);
    /// `kill(-pgid, signal)`.
    fn kill_group(&mut self, pgid: i32, signal: i32);
    /// `kill(pid, signal)`.
    fn kill_process(&mut self, pid: i32, signal: i32);
    /// Send `report` up with rank `rank`'s (process `pid`'s) stack in it,
    /// taken off the node's loop within [`crate::stack::TRACE_LIMIT`]
    /// (`crate::stack`): a hung job explains itself.
    fn report_stack(&mut self, pid: i32, report: ToLauncher);
    /// Start a debugger's tool daemon for `start.job` in a process group of
    /// its own, its output going up as [`ToLauncher::ToolOutput`] (bounded:
    /// [`crate::tool::OUTPUT_LIMIT`]); one that cannot be started is said in
    /// one line ([`ToLauncher::Note`]) and the job runs on.
    fn start_tool(&mut self, start: ToolStart);
    /// End the job's tool daemon (its group), if one runs.
    fn end_tool(&mut self, job: JobId);
    /// Now, in µs since the Unix epoch: when a rank began to wait in a PMI
    /// call (the engine has no clock; the reactor stamps it).
    fn now_micros(&mut self) -> u64 {
        crate::now_micros()
    }
    /// Reap a group leader kept as a zombie (its group was killed for good).
    fn release_leader(&mut self, pid: i32);
    /// Process `pid` has ended, whether or not its end was read yet (a
    /// zombie, or gone).
    fn has_exited(&mut self, pid: i32) -> bool;
    /// Process `pid` is running or waits for a CPU (`R`): a partial line it
    /// wrote is not finished because it was preempted, not because it waits.
    fn is_runnable(&mut self, pid: i32) -> bool;
    /// Bytes of the process's `stream` wait in its pipe or on their way to
    /// the reactor: a partial line held for it is not finished yet.
    fn output_pending(&mut self, job: JobId, rank: Rank, stream: Stream) -> bool;
    /// A job with ranks here: its shared memory is to be removed when it
    /// ends ([`NodeEffects::remove_shm`]), or by the cleaner if this process
    /// dies first (`crate::cleaner`).
    fn track_shm(&mut self, job: JobId, kvsname: &str);
    /// Remove an ended job's shared-memory segments: MPICH's (`mpich_shm`),
    /// and, if a rank of it was `killed` (by a signal, or at the job's end),
    /// those UCX left that no process holds (`ucx_shm`). Only a killed
    /// process leaves a UCX segment behind, and the look costs a scan of
    /// every process's open files and mappings (8–14 ms for ~90 processes,
    /// measured) whenever any segment is being created — in a
    /// spawn loop, the next child's, in its `MPI_Init`.
    fn remove_shm(&mut self, job: JobId, kvsname: &str, killed: bool);
    /// Stop (`true`) or resume reading a process's stdout and stderr: its
    /// job's output window is full, or has room again.
    fn pause_output(&mut self, job: JobId, rank: Rank, paused: bool);
    /// Call [`NodeReactor::on_timer`] with `timer` after `after`.
    fn set_timer(&mut self, after: Duration, timer: Timer);
    /// Export the node's hwloc topology (once per process) and call
    /// [`NodeReactor::on_topology`] with its path, or `None` if it failed,
    /// when it has ended (never from inside this call).
    fn export_topology(&mut self);
    /// This node's binder for `-bind-to` and `--gpus-per-rank`: its hwloc
    /// topology and the CPUs and NUMA nodes this process may use
    /// ([`crate::binding::node_binder`]); asked once, when a job first
    /// needs it.
    fn binder(&mut self) -> Result<dpm_binding::Binder, String> {
        crate::binding::node_binder()
    }
    /// Move running process `pid` (a claimed pooled rank) and every thread
    /// it has to the CPUs of `cpus` (a `sched_setaffinity` mask). A thread
    /// that ends meanwhile is passed over; a failure is logged.
    fn rebind(&mut self, pid: i32, cpus: &[u64]) {
        crate::binding::rebind(pid, cpus);
    }
    /// The nice value of a pooled rank's session until its claim (0: none;
    /// [`crate::pool_priority`]).
    fn pooled_nice(&mut self) -> u8 {
        crate::pool_priority::pooled_nice()
    }
    /// Put the session that rank `pid` leads at `nice`: a pooled rank's in
    /// the background until its claim, then back at 0
    /// ([`crate::pool_priority`]).
    fn session_nice(&mut self, pid: i32, nice: u8) {
        crate::pool_priority::set_session_nice(pid, nice);
    }
    /// PMIx (a job launched with `PmiMode::Pmix`): register the namespace
    /// `job` (this node's hostname and directories still to fill in) and its
    /// local clients with the node's PMIx server, started on first use for
    /// `app`'s Open MPI; each local rank's `setup_fork` variables, in
    /// `job.local_ranks()` order. A node without PMIx refuses.
    fn pmix_register(&mut self, job: dpm_pmix::JobSpec, app: &dpm_proto::AppSpec) -> Result<Vec<Vec<(String, String)>>, String> {
        let _ = (job, app);
        Err("this node serves no PMIx".into())
    }
    /// Register another job's namespace (no local clients: a PMIx connect
    /// with a job that has no rank here) with the running PMIx server.
    fn pmix_register_remote(&mut self, job: dpm_pmix::JobSpec) -> Result<(), String> {
        let _ = job;
        Err("this node serves no PMIx".into())
    }
    /// Complete a PMIx upcall (exactly once per [`PmixRequest`]).
    fn pmix_answer(&mut self, req: PmixRequest, answer: PmixAnswer) {
        let _ = (req, answer);
    }
    /// Ask the node's PMIx server for a local rank's data for another node
    /// (`PMIx_server_dmodex_request`); the answer comes back as
    /// [`PmixEvent::DmodexAnswer`] with `token`.
    fn pmix_dmodex(&mut self, nspace: &str, rank: u32, token: u64) -> Result<(), String> {
        let _ = (nspace, rank, token);
        Err("this node serves no PMIx".into())
    }
    /// A PMIx job is over here: deregister its clients and namespace, remove
    /// what its ranks left (Open MPI's shared-memory segments).
    fn pmix_forget(&mut self, nspace: &str, ranks: &[u32]) {
        let _ = (nspace, ranks);
    }
}
