//! [`NodeReactor`]: the node's state and one handler per input.

use std::collections::HashMap;

use dpm_kvs::{JobId, Rank};
use dpm_pmi::{ConnId, Effect, Engine, PmiState};
use dpm_pmix::{PMIX_ERROR, PMIX_SUCCESS};
use dpm_proto::{ExitStatus, NameRequest, PmiMode, PmiProgress, RankExit, SpawnCommand, Stream, ToDaemon, ToLauncher};

use super::node_binding::NodeBinding;
use super::output::OutputFlow;
use super::pmix_front::{ForNode, PmixCtx, PmixFront};
use super::requests::{Asker, Requests};
use super::{NodeEffects, PmixAnswer, PmixEvent, StartError, Timer, DRAIN_GRACE};
use crate::topology::TopologySource;
use crate::DaemonConfig;

mod invariants;
mod launch;
mod report;
mod resync;
mod tool;
mod topology;
mod watch;
pub use topology::TOPOLOGY_WAIT;

/// One process of a job on this node, until its exit is reported.
struct Proc {
    pid: i32,
    /// Its open PMI connection, if any.
    conn: Option<ConnId>,
    /// How far it got with PMI when its connection closed.
    pmi: PmiState,
    /// Its PMI connection has closed and all its traffic is handled.
    pmi_closed: bool,
    stdout_open: bool,
    stderr_open: bool,
    /// Reaped: its status and when (µs since the epoch).
    exit: Option<(ExitStatus, u64)>,
    /// [`DRAIN_GRACE`] has passed since it was reaped.
    grace_over: bool,
    /// Graces that ended with its output still on the way (unread in a
    /// pipe: the node is behind, on a loaded machine), at most [`DRAIN_WAITS`].
    drain_waits: u32,
}

/// A reaped process's exit waits at most this many more [`DRAIN_GRACE`]s
/// while its output is still on the way: reported before, a held partial
/// line would go up without its rest (a torn line).
const DRAIN_WAITS: u32 = 20;

impl Proc {
    fn new(pid: i32, conn: Option<ConnId>, output: bool) -> Self {
        Proc { pid, conn, pmi: PmiState::Silent, pmi_closed: false, stdout_open: output, stderr_open: output, exit: None, grace_over: false, drain_waits: 0 }
    }

    /// An exit is reported once its PMI traffic and output are through (so a
    /// finalize sent just before `exit()` is never missed), or after the grace.
    fn exit_due(&self) -> Option<(ExitStatus, u64)> {
        let drained = self.pmi_closed && !self.stdout_open && !self.stderr_open;
        self.exit.filter(|_| drained || self.grace_over)
    }
}

/// The protocol front end that serves a job's processes, chosen once, from
/// its launch's [`PmiMode`]: the PMI-1/2 engine, or the PMIx server's
/// upcall layer (Open MPI 5). What the launcher says about a job goes to
/// the job's front end and to no other.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Frontend {
    #[default]
    Pmi,
    Pmix,
}

impl Frontend {
    fn of(mode: PmiMode) -> Self {
        match mode {
            PmiMode::Pmix => Frontend::Pmix,
            _ => Frontend::Pmi,
        }
    }
}

#[derive(Default)]
struct JobProcs {
    /// The front end serving its processes.
    front: Frontend,
    /// Names the job's MPICH shared-memory segments (see [`crate::mpich_shm`]).
    kvsname: String,
    pgids: Vec<i32>,
    /// Group leaders left as zombies until the job's final kill, so that
    /// `kill(-pgid)` can never reach a group that reused the id.
    leaders: Vec<i32>,
    /// A process of the job reads the launcher's stdin, still open.
    stdin: bool,
    /// The job's PMI port (`PMI_PORT` mode).
    port: Option<String>,
    /// Its launch, while starts are out.
    launching: Option<Launching>,
    /// A rank of it has ended here (a warm spawn's claim then fails: `claim`).
    rank_ended: bool,
    /// A warm spawn's pooled job not claimed yet: its ranks run in the
    /// background ([`crate::pool_priority`]) until the claim.
    pooled: bool,
    /// A rank of it ended by a signal here: it may have been killed between
    /// UCX's create and unlink of a segment, so the job's end looks for
    /// UCX's orphans ([`NodeEffects::remove_shm`]).
    killed: bool,
    /// Its PMIx watch's policy, while the watch listens (`watch`).
    watch: Option<crate::pmix_watch::Watcher>,
    /// A debugger's tool daemon was started for it here (`tool`).
    tool: bool,
    /// Its ranks' exits reported up, said again after a re-attach (`resync`).
    exits: Vec<RankExit>,
}

impl JobProcs {
    /// Pass stdin from the launcher to the process that reads it (an empty
    /// chunk closes it); nothing once closed or if none reads it.
    fn feed_stdin(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: JobId, data: Vec<u8>) {
        if !self.stdin {
            return;
        }
        if data.is_empty() {
            self.stdin = false;
            fx.stdin_close(job);
        } else {
            fx.stdin_write(job, data);
        }
    }
}

/// A launch whose starts are not all back ([`NodeEffects::start`] is
/// asynchronous).
struct Launching {
    /// Starts asked for whose result has not come.
    pending: usize,
    /// Each local rank's place in the launch and program, for the report.
    ranks: HashMap<Rank, (usize, String)>,
    /// The first failure in launch order so far: (place, rank, error).
    failure: Option<(usize, Rank, StartError)>,
    /// Stdin from the launcher while the rank that reads it is starting
    /// (an empty chunk closes it), passed on once it has started; dropped
    /// with the launch if it never does.
    stdin: Option<Vec<Vec<u8>>>,
    /// Signals sent to the job meanwhile, for each process that starts after.
    signals: Vec<i32>,
}

/// The node daemon's state machine. See the module documentation of
/// [`crate::node`].
pub struct NodeReactor {
    host: String,
    engine: Engine,
    /// The PMIx front end's jobs (Open MPI 5); the engine serves the rest.
    pmix: PmixFront,
    /// Open PMI connections and their jobs.
    conns: HashMap<ConnId, JobId>,
    /// Since when (µs since the epoch) each connection that waits in a PMI
    /// call has waited (`report`).
    wait_since: HashMap<ConnId, u64>,
    procs: HashMap<(JobId, Rank), Proc>,
    jobs: HashMap<JobId, JobProcs>,
    /// Requests up to the launcher, by who asked.
    requests: Requests,
    /// Whole lines and the output window.
    output: OutputFlow,
    /// Group leaders started after their job ended, killed and waiting to be
    /// seen exit before they are released.
    strays: HashMap<(JobId, Rank), i32>,
    /// CPU, memory and GPU binding (`-bind-to`…): the node's binder and holds.
    binding: NodeBinding,
    next_conn: u64,
}

impl NodeReactor {
    pub fn new(config: &DaemonConfig) -> Self {
        NodeReactor {
            host: config.host.clone(),
            engine: Engine::new(config.trace),
            pmix: PmixFront::default(),
            conns: HashMap::new(),
            wait_since: HashMap::new(),
            procs: HashMap::new(),
            jobs: HashMap::new(),
            requests: Requests::default(),
            output: OutputFlow::default(),
            strays: HashMap::new(),
            binding: NodeBinding::default(),
            next_conn: 0,
        }
    }

    /// A message from the parent. `Shutdown` is the driver's business (it
    /// stops feeding the reactor and calls [`NodeReactor::shutdown`]);
    /// heartbeats and the tree are the link's.
    pub fn on_message(&mut self, fx: &mut (impl NodeEffects + ?Sized), msg: ToDaemon) {
        self.message(fx, msg);
        self.apply_engine(fx);
        self.checked();
    }

    fn message(&mut self, fx: &mut (impl NodeEffects + ?Sized), msg: ToDaemon) {
        match msg {
            ToDaemon::Launch(job) => self.launch(fx, job),
            ToDaemon::FenceDone { job, epoch, delta } => match self.front(job) {
                Frontend::Pmi => self.engine.fence_done(job, epoch, delta),
                Frontend::Pmix => self.pmix.on_fence_done(fx, job, epoch, &delta),
            },
            // Rings are PMI-2's (no PMIx call makes one).
            ToDaemon::RingOut { job, seq, slot } => self.engine.ring_out(job, seq, &slot),
            ToDaemon::Kvs(msg) => match self.front(msg.job()) {
                Frontend::Pmi => self.engine.kvs_msg(msg),
                Frontend::Pmix => self.pmix.on_kvs(fx, msg),
            },
            ToDaemon::NameDone { request, result } => match self.requests.answered(request) {
                Some(Asker::Pmi(conn)) => self.engine.name_done(conn, result),
                Some(Asker::Pmix) => self.pmix.name_done(fx, request, result),
                None => {}
            },
            ToDaemon::SpawnDone { request, result, errcodes } => match self.requests.answered(request) {
                Some(Asker::Pmi(conn)) => self.engine.spawn_done(conn, result.map(|jobid| dpm_pmi::Spawned { jobid, errcodes })),
                Some(Asker::Pmix) => self.pmix.spawn_done(fx, request, result),
                None => {}
            },
            // Connects are PMIx's (a PMI-1/2 client has no such request).
            ToDaemon::ConnectDone { request, result, context_id } => match self.requests.answered(request) {
                Some(Asker::Pmix) => self.pmix.connect_done(fx, request, result, context_id),
                Some(Asker::Pmi(_)) | None => {}
            },
            ToDaemon::Signal { job, signal } => self.signal_job(fx, job, signal),
            ToDaemon::Report { job, stacks } => self.report(fx, job, stacks),
            ToDaemon::StartTool { job, tool, host } => self.start_tool(fx, job, tool, host),
            ToDaemon::Stdin { job, data } => {
                let Some(j) = self.jobs.get_mut(&job) else { return };
                if let Some(held) = j.launching.as_mut().and_then(|l| l.stdin.as_mut()) {
                    // Its reader is still starting: kept until it has.
                    return held.push(data);
                }
                j.feed_stdin(fx, job, data);
            }
            ToDaemon::Claim { job, preput } => self.claim(fx, job, &preput),
            ToDaemon::OutputAck { job, bytes } => self.output.on_ack(fx, job, bytes),
            ToDaemon::Forget { job } => self.forget(fx, job),
            ToDaemon::RanksDead { job, ranks } => {
                self.engine.ranks_dead(job, &ranks);
                self.apply_engine(fx);
            }
            ToDaemon::Adopt { launch, rank, pid, pmi } => self.adopt_foreign(fx, launch, rank, pid, pmi.get()),
        }
    }

    /// Bytes read on PMI connection `conn`. The replies are written through
    /// [`NodeEffects::pmi_write`] before this returns: one read, one write.
    pub fn on_pmi_bytes(&mut self, fx: &mut (impl NodeEffects + ?Sized), conn: ConnId, bytes: &[u8]) {
        let waited = self.engine.is_waiting(conn);
        self.engine.on_bytes(conn, bytes);
        // A call that waits from these bytes on is stamped now (answers come
        // with other inputs: a stamp is read only while the engine says it waits).
        match (waited, self.engine.is_waiting(conn)) {
            (false, true) => drop(self.wait_since.insert(conn, fx.now_micros())),
            (_, false) => drop(self.wait_since.remove(&conn)),
            (true, true) => {}
        }
        self.apply_engine(fx);
        self.checked();
    }

    /// PMI connection `conn` closed: its process's PMI state is final.
    pub fn on_pmi_closed(&mut self, fx: &mut (impl NodeEffects + ?Sized), conn: ConnId) {
        let Some(job) = self.conns.remove(&conn) else { return };
        self.wait_since.remove(&conn);
        let rank = self.engine.rank(conn);
        let state = self.engine.detach(conn);
        self.apply_engine(fx);
        let Some(rank) = rank else { return };
        if let Some(p) = self.procs.get_mut(&(job, rank)) {
            p.conn = None;
            p.pmi = state;
            p.pmi_closed = true;
            self.report_exit_if_due(fx, job, rank);
        }
        self.checked();
    }

    /// A connection on a job's PMI port: the id to serve it as, or `None`
    /// if the job is gone (close it).
    pub fn on_port_connection(&mut self, job: JobId) -> Option<ConnId> {
        if !self.jobs.contains_key(&job) {
            return None;
        }
        let conn = self.new_conn();
        self.attach(conn, job, None);
        self.checked();
        Some(conn)
    }

    /// A process wrote to its stdout or stderr: passed on in whole lines
    /// where possible, within the job's output window (`node::output`).
    pub fn on_output(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: JobId, rank: Rank, stream: Stream, data: Vec<u8>) {
        let live = self.procs.contains_key(&(job, rank));
        self.output.on_output(fx, job, rank, stream, data, live);
        self.checked();
    }

    /// A process's stdout or stderr reached end of file.
    pub fn on_output_closed(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: JobId, rank: Rank, stream: Stream) {
        let Some(p) = self.procs.get_mut(&(job, rank)) else { return };
        match stream {
            Stream::Stdout => p.stdout_open = false,
            Stream::Stderr => p.stderr_open = false,
        }
        if !p.stdout_open && !p.stderr_open {
            self.output.closed(job, rank);
        }
        self.output.flush(fx, job, rank, stream);
        self.report_exit_if_due(fx, job, rank);
        self.checked();
    }

    /// A process was reaped at `at` (µs since the epoch).
    pub fn on_exited(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: JobId, rank: Rank, status: ExitStatus, at: u64) {
        self.binding.release(job, rank);
        if let Some(pid) = self.strays.remove(&(job, rank)) {
            return fx.release_leader(pid);
        }
        let Some(p) = self.procs.get_mut(&(job, rank)) else { return };
        if p.exit.is_some() {
            return;
        }
        p.exit = Some((status, at));
        if matches!(status, ExitStatus::Signal(_)) {
            if let Some(j) = self.jobs.get_mut(&job) {
                j.killed = true;
            }
        }
        self.output.reaped(fx, job, rank);
        fx.set_timer(DRAIN_GRACE, Timer::DrainGrace { job, rank });
        self.report_exit_if_due(fx, job, rank);
        self.checked();
    }

    pub fn on_timer(&mut self, fx: &mut (impl NodeEffects + ?Sized), timer: Timer) {
        self.timer(fx, timer);
        self.checked();
    }

    fn timer(&mut self, fx: &mut (impl NodeEffects + ?Sized), timer: Timer) {
        match timer {
            Timer::DrainGrace { job, rank } => {
                let pending = [Stream::Stdout, Stream::Stderr].into_iter().any(|s| fx.output_pending(job, rank, s));
                let Some(p) = self.procs.get_mut(&(job, rank)) else { return };
                if pending && p.drain_waits < DRAIN_WAITS {
                    p.drain_waits += 1;
                    return fx.set_timer(DRAIN_GRACE, Timer::DrainGrace { job, rank });
                }
                p.grace_over = true;
                self.report_exit_if_due(fx, job, rank);
            }
            Timer::OutputQuiet { job, rank, stream } => {
                // Preempted mid-line (runnable) is not quiet: see `output`.
                let pid = self.procs.get(&(job, rank)).map(|p| p.pid).filter(|&pid| pid > 0);
                let busy = pid.is_some_and(|pid| fx.is_runnable(pid));
                let pending = fx.output_pending(job, rank, stream);
                self.output.on_quiet(fx, job, rank, stream, busy, pending)
            }
            Timer::TopologyWait => {
                topology::wait_over(&mut self.engine);
                self.apply_engine(fx);
            }
            Timer::PmixTimeout(req) => self.pmix.on_timeout(fx, req),
        }
    }

    /// An upcall of the node's PMIx server: the PMIx front end's, but for
    /// what it hands back (`ForNode`).
    pub fn on_pmix(&mut self, fx: &mut (impl NodeEffects + ?Sized), event: PmixEvent) {
        let cx = PmixCtx { host: &self.host, requests: &mut self.requests };
        match self.pmix.on_event(fx, cx, event) {
            Some(ForNode::Progress { job, rank, state, req }) => self.pmix_progress(fx, job, rank, state, req),
            Some(ForNode::Output { job, rank, output }) => {
                for (stream, text) in output {
                    self.on_output(fx, job, rank, stream, text);
                }
            }
            None => {}
        }
        self.checked();
    }

    /// A PMIx rank's progress as its exit is judged (connected, finalized).
    ///
    /// A rank may connect before its start is recorded here: a spawner
    /// thread's answer (pid, fds) reaches this loop after the child has
    /// exec'd, and a loaded machine lets the child get through `PMIx_Init`
    /// first. Its progress is then kept until [`Self::on_started`] records the
    /// process. Refusing it (as once) made the library close the client's
    /// connection during its handshake: the rank fell back to a world of one
    /// and, if spawned, had no parent (`MPI_ERR_COMM` on `parent.Barrier()`
    /// in mpi4py's `test_spawn` under `stress-ng`, docs/pmix.md).
    fn pmix_progress(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: JobId, rank: Rank, state: PmiState, req: super::PmixRequest) {
        let status = match self.procs.get_mut(&(job, rank)) {
            Some(p) => {
                p.pmi = state;
                PMIX_SUCCESS
            }
            None if self.pmix.note_early(job, rank.0, state) => PMIX_SUCCESS,
            None => PMIX_ERROR,
        };
        fx.pmix_answer(req, PmixAnswer::Status(status));
    }

    /// A connection on `job`'s watch; `refused`: why the kernel's word on
    /// its owner bars it, if it does. Whether to hold it open (else the
    /// driver closes it). The first of the owner's is reported up.
    pub fn on_watch_connection(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: JobId, refused: Option<String>) -> bool {
        let Some(watcher) = self.jobs.get_mut(&job).and_then(|j| j.watch.as_mut()) else { return false };
        watch::on_connection(fx, job, watcher, refused)
    }

    /// Serve `PMI_hwloc_xmlfile` from `topology` (`Off`: the key stays absent).
    pub fn serve_topology(&mut self, topology: TopologySource) {
        if topology != TopologySource::Off {
            self.engine.export_topology_on_demand();
        }
    }

    /// The topology export ended: its file's path, or `None` if it failed.
    pub fn on_topology(&mut self, fx: &mut (impl NodeEffects + ?Sized), path: Option<&str>) {
        topology::exported(&mut self.engine, path);
        self.apply_engine(fx);
        self.checked();
    }

    /// The node stops: every job goes as if forgotten.
    pub fn shutdown(&mut self, fx: &mut (impl NodeEffects + ?Sized)) {
        let jobs: Vec<JobId> = self.jobs.keys().copied().collect();
        for job in jobs {
            self.forget(fx, job);
        }
        self.apply_engine(fx);
        self.checked();
    }

    /// The front end that serves `job`: its launch's, or for a job without
    /// ranks here, PMIx's if a connect registered it (only PMIx jobs
    /// connect), else the engine's (which drops what it does not know).
    fn front(&self, job: JobId) -> Frontend {
        match self.jobs.get(&job) {
            Some(j) => j.front,
            None if self.pmix.has(job) => Frontend::Pmix,
            None => Frontend::Pmi,
        }
    }

    fn new_conn(&mut self) -> ConnId {
        let conn = ConnId(self.next_conn);
        self.next_conn += 1;
        conn
    }

    fn attach(&mut self, conn: ConnId, job: JobId, rank: Option<Rank>) {
        self.engine.attach(conn, job, rank);
        self.conns.insert(conn, job);
    }

    fn report_exit_if_due(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: JobId, rank: Rank) {
        let Some((status, at)) = self.procs.get(&(job, rank)).and_then(Proc::exit_due) else { return };
        let proc = self.procs.remove(&(job, rank)).expect("present");
        if let Some(j) = self.jobs.get_mut(&job) {
            j.rank_ended = true;
        }
        // A connection still open (a grandchild holds it, or the grace period
        // ran out): judge by what it has said so far.
        let live_conn = proc.conn.or_else(|| self.conns.iter().find(|(c, j)| **j == job && self.engine.rank(**c) == Some(rank)).map(|(c, _)| *c));
        let state = live_conn.map_or(proc.pmi, |c| self.engine.pmi_state(c));
        // Its output goes first, held partial lines included.
        for stream in [Stream::Stdout, Stream::Stderr] {
            self.output.flush(fx, job, rank, stream);
        }
        let pmi = match state {
            PmiState::Silent => PmiProgress::Silent,
            PmiState::Active => PmiProgress::Active,
            PmiState::Finalized => PmiProgress::Finalized,
        };
        let exit = RankExit { job, rank, pid: proc.pid as u32, status, pmi, at };
        if let Some(j) = self.jobs.get_mut(&job) {
            j.exits.push(exit);
        }
        fx.send_up(ToLauncher::Exited(exit));
    }

    fn signal_job(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: JobId, signal: i32) {
        let Some(j) = self.jobs.get_mut(&job) else { return };
        tracing::debug!(%job, signal, "signalling the job's processes");
        if let Some(launching) = j.launching.as_mut() {
            // The processes still starting get it as they start.
            launching.signals.push(signal);
        }
        // A pooled rank ends as quickly as any: a process in the background
        // would wait for a CPU to run its own exit on a busy machine.
        let pooled = std::mem::take(&mut j.pooled) && fx.pooled_nice() > 0;
        for &pgid in &j.pgids {
            fx.kill_group(pgid, signal);
        }
        for ((_, _), p) in self.procs.iter().filter(|((j, _), _)| *j == job) {
            if pooled {
                fx.session_nice(p.pid, 0);
            }
            // A rank that left the group (setsid) still gets it.
            fx.kill_process(p.pid, signal);
        }
    }

    fn forget(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: JobId) {
        // A rank still running or starting is killed now, wherever it is.
        let killed_now = self.procs.iter().any(|((j, _), p)| *j == job && p.exit.is_none()) || self.jobs.get(&job).is_some_and(|j| j.launching.is_some());
        // Whatever is left of the job (grandchildren in its groups) goes now.
        self.signal_job(fx, job, libc::SIGKILL);
        if let Some(j) = self.jobs.remove(&job) {
            if j.port.is_some() {
                fx.close_pmi_port(job);
            }
            watch::close(fx, job, j.watch);
            if j.tool {
                fx.end_tool(job);
            }
            if j.stdin {
                fx.stdin_close(job);
            }
            // Now the group ids may go. A leader still running (a shutdown
            // mid-job) is reaped by init once this daemon is gone.
            for pid in j.leaders {
                fx.release_leader(pid);
            }
            fx.remove_shm(job, &j.kvsname, j.killed || killed_now);
        }
        self.pmix.forget(fx, job);
        self.binding.release_job(job);
        self.engine.remove_job(job);
        self.output.forget(job);
        let mut gone: Vec<ConnId> = self.conns.iter().filter(|(_, j)| **j == job).map(|(c, _)| *c).collect();
        gone.sort();
        for conn in gone {
            self.conns.remove(&conn);
            self.wait_since.remove(&conn);
            fx.pmi_drop(conn);
        }
    }

    fn apply_engine(&mut self, fx: &mut (impl NodeEffects + ?Sized)) {
        for effect in self.engine.take_effects() {
            match effect {
                Effect::Send(conn, bytes) => fx.pmi_write(conn, &bytes),
                Effect::Close(conn) => fx.pmi_close(conn),
                Effect::Trace { job, rank, dir, text } => {
                    let who = rank.map_or_else(|| "?".to_string(), |r| r.0.to_string());
                    let tag = if job.0 == 0 { String::new() } else { format!("{}:", job.0) };
                    fx.send_up(ToLauncher::Trace { line: format!("{dir}[{tag}{who}]: {text}") });
                }
                Effect::FenceIn { job, epoch, count, puts } => fx.send_up(ToLauncher::FenceIn { job, epoch, count, puts }),
                Effect::RingIn { job, seq, segment } => fx.send_up(ToLauncher::RingIn { job, seq, segment }),
                Effect::Kvs { to, msg } => fx.send_up(ToLauncher::Kvs { to, msg }),
                Effect::Abort { job, rank, code, message } => fx.send_up(ToLauncher::Abort { job, rank, code, message }),
                Effect::Name { conn, job, op } => {
                    let request = self.requests.open(Asker::Pmi(conn));
                    let op = match op {
                        dpm_pmi::NameOp::Publish { service, port } => NameRequest::Publish { service, port },
                        dpm_pmi::NameOp::Unpublish { service } => NameRequest::Unpublish { service },
                        dpm_pmi::NameOp::Lookup { service } => NameRequest::Lookup { service },
                    };
                    fx.send_up(ToLauncher::Name { request, job, op });
                }
                Effect::ExportTopology => topology::start_export(fx),
                Effect::FenceDoomed { job, waiting } => fx.send_up(ToLauncher::FenceDoomed { job, waiting }),
                Effect::AwaitingClaim { job } => fx.send_up(ToLauncher::AwaitingClaim { job }),
                Effect::Spawn { conn, job, rank, request: spawn } => {
                    let request = self.requests.open(Asker::Pmi(conn));
                    let commands = spawn.commands.into_iter().map(|c| SpawnCommand { exe: c.exe, args: c.args, maxprocs: c.maxprocs, info: c.info }).collect();
                    fx.send_up(ToLauncher::Spawn { request, job, rank, preput: spawn.preput, commands });
                }
            }
        }
    }
}
