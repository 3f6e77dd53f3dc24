//! The launcher's event loop: the root of the daemon tree.
//!
//! A [`Controller`] owns one *run* (a `dpm run`: its job and every job it
//! spawned) and its decisions: fence completion ([`FenceTally`]), which ranks
//! have ended and how, when a job has failed and must be killed, and the exit
//! status. What all runs of a daemon tree share — the name service, job ids,
//! the load of each node, which run a job belongs to — is in [`Shared`]: one
//! run per tree for a plain `dpm run`, many for a booted tree (`dpm boot`).
//! [`dispatch`] hands each daemon message to the run owning its job. Daemons
//! are reached through [`DaemonLink`]s; on one machine there is one, in this
//! process.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

use dpm_kvs::{FenceTally, JobId, KeyValues, NameService, Rank};
use dpm_proto::{ExitStatus, LaunchJob, NameRequest, PmiMode, PmiProgress, RequestId, SpawnCommand, ToDaemon, ToLauncher};

use crate::kvs_root::KvsRoot;
use crate::output::{Console, Output};
use crate::spawn::{plan_spawn, SpawnContext};

/// The launcher's handle on one node daemon.
#[derive(Clone)]
pub struct DaemonLink {
    pub tx: mpsc::UnboundedSender<ToDaemon>,
    pub host: String,
}

/// How a rank ended, from the launcher's point of view.
#[derive(Clone, Debug, PartialEq, Eq)]
enum RankEnd {
    Ok,
    /// The reason it failed, and the exit status dpm reports for it.
    Failed { why: String, code: i32 },
    /// Killed by dpm while ending the job.
    Terminated,
}

#[derive(Clone, Debug)]
struct RankState {
    pid: Option<u32>,
    end: Option<RankEnd>,
}

struct Job {
    kvsname: String,
    fence: FenceTally,
    ranks: Vec<RankState>,
    /// Daemons hosting ranks of this job.
    daemons: Vec<usize>,
    /// The node (daemon index) of each rank.
    node_of: Vec<usize>,
    /// Set once the job is being torn down (failure, abort, signal, timeout).
    killing: bool,
    /// An abort was requested: the aborting rank's own exit is not a second failure.
    aborted: bool,
    /// For a spawned job: the parent's pending spawn request, answered once
    /// every child has started (or one could not be).
    spawn_request: Option<(usize, RequestId)>,
}

impl Job {
    fn done(&self) -> bool {
        self.ranks.iter().all(|r| r.end.is_some())
    }

    /// Record how rank `r` ended (the first word counts); its slot is free again.
    fn end_rank(&mut self, r: usize, end: RankEnd, load: &mut [i64]) {
        if self.ranks[r].end.is_none() {
            load[self.node_of[r]] -= 1;
            self.ranks[r].end = Some(end);
        }
    }
}

/// The first failure of the run, which decides the exit status.
struct Failure {
    code: i32,
    summary: String,
    /// The rank it was about, not counted among the ranks terminated because of it.
    rank: Option<(JobId, Rank)>,
    /// It was an `MPI_Abort`.
    abort: bool,
    /// When the failing process ended (µs since the epoch), for an exit.
    at: Option<u64>,
}

/// What a run receives from outside: the signals and stdin of `dpm run`.
pub enum Input {
    Signal(i32),
    /// Empty: end of input.
    Stdin(Vec<u8>),
}

/// State shared by every run of one daemon tree.
pub struct Shared {
    pub names: NameService,
    next_job: u32,
    /// Random per tree: part of every kvsname (see [`kvsname`]).
    run_tag: u32,
    /// The run each live job belongs to.
    routes: HashMap<JobId, mpsc::UnboundedSender<(usize, ToLauncher)>>,
    /// Processes placed on each node and not yet ended, over all runs.
    pub load: Vec<i64>,
    /// Live jobs: (owner's pid, kvsname, size), for `dpm status`.
    pub jobs: BTreeMap<JobId, (u32, String, u32)>,
}

pub type SharedRef = Rc<RefCell<Shared>>;

impl Shared {
    pub fn new(nodes: usize) -> SharedRef {
        Rc::new(RefCell::new(Shared {
            names: NameService::default(),
            next_job: 0,
            run_tag: random_tag(),
            routes: HashMap::new(),
            load: vec![0; nodes],
            jobs: BTreeMap::new(),
        }))
    }
}

/// Hand each message from the daemons to the run owning its job. A lost node
/// concerns every run (and `on_lost`, the boot server); when the daemons'
/// stream ends, every run hears so.
pub async fn dispatch(
    mut up: mpsc::UnboundedReceiver<(usize, ToLauncher)>,
    shared: SharedRef,
    on_lost: Option<mpsc::UnboundedSender<(usize, String)>>,
) {
    while let Some((node, msg)) = up.recv().await {
        let job = match &msg {
            ToLauncher::Started { job, .. }
            | ToLauncher::LaunchFailed { job, .. }
            | ToLauncher::Output { job, .. }
            | ToLauncher::Exited { job, .. }
            | ToLauncher::FenceIn { job, .. }
            | ToLauncher::RingIn { job, .. }
            | ToLauncher::Abort { job, .. }
            | ToLauncher::Name { job, .. }
            | ToLauncher::Spawn { job, .. } => Some(*job),
            ToLauncher::Kvs { msg, .. } => Some(msg.job()),
            ToLauncher::Ready { .. } | ToLauncher::Heartbeat => continue,
            _ => None,
        };
        if let (ToLauncher::Lost { error }, Some(tx)) = (&msg, &on_lost) {
            let _ = tx.send((node, error.clone()));
        }
        let shared = shared.borrow();
        match job {
            Some(job) => {
                if let Some(tx) = shared.routes.get(&job) {
                    let _ = tx.send((node, msg));
                }
            }
            // Lost, trace lines: every run.
            None => {
                let mut seen: Vec<&mpsc::UnboundedSender<_>> = Vec::new();
                for tx in shared.routes.values() {
                    if !seen.iter().any(|s| s.same_channel(tx)) {
                        seen.push(tx);
                        let _ = tx.send((node, msg.clone()));
                    }
                }
            }
        }
    }
    // Dropping the routes closes every run's stream.
    shared.borrow_mut().routes.clear();
}

/// Job-independent settings the controller needs to create jobs.
pub struct Settings {
    pub label: bool,
    pub kill_grace: Duration,
    pub universe_size: i64,
    pub pmi_mode: PmiMode,
    /// Refuse spawns beyond the universe size instead of oversubscribing.
    pub no_oversubscribe: bool,
    pub report_placement: bool,
    pub spawn: SpawnContext,
    /// Slots of each node (daemon), for placing spawned processes.
    pub node_slots: Vec<u32>,
    /// The daemon tree's fan-out: losing a node loses its subtree.
    pub fanout: usize,
    /// The pid of the `dpm run` this run is for (shown by `dpm status`).
    pub owner: u32,
}

pub struct Controller {
    settings: Settings,
    daemons: Vec<DaemonLink>,
    /// Messages from the daemons about this run's jobs, tagged with the daemon's index.
    up: mpsc::UnboundedReceiver<(usize, ToLauncher)>,
    /// Registered in [`Shared`] as the route of each job this run starts.
    up_tx: mpsc::UnboundedSender<(usize, ToLauncher)>,
    shared: SharedRef,
    jobs: BTreeMap<JobId, Job>,
    console: Console,
    output: Output,
    failure: Option<Failure>,
    /// A signal dpm itself received and forwarded.
    interrupted: Option<i32>,
    timed_out: bool,
    stdin_job: Option<JobId>,
    /// When dpm began killing because of a failure (µs since the epoch).
    teardown_at: Option<u64>,
    /// Ranks dpm killed because of the failure, per job, for the summary.
    terminated: Vec<(JobId, usize)>,
    /// Each job's KVS design at the root: ring, tree store, routing.
    kvs: KvsRoot,
}

impl Controller {
    pub fn new(settings: Settings, daemons: Vec<DaemonLink>, shared: SharedRef, console: Console) -> Self {
        let (up_tx, up) = mpsc::unbounded_channel();
        Controller {
            kvs: KvsRoot::new(settings.fanout),
            output: Output::new(settings.label, console.clone()),
            console,
            settings,
            daemons,
            up,
            up_tx,
            shared,
            jobs: BTreeMap::new(),
            failure: None,
            interrupted: None,
            timed_out: false,
            stdin_job: None,
            teardown_at: None,
            terminated: Vec::new(),
        }
    }

    /// A new job id and its kvsname (unique per daemon tree, short enough for MPICH).
    pub fn new_job_id(&mut self) -> (JobId, String) {
        let mut shared = self.shared.borrow_mut();
        let job = JobId(shared.next_job);
        shared.next_job += 1;
        (job, kvsname(shared.run_tag, job))
    }

    /// Start a job whose rank `r` runs on node `node_of[r]`: each node's
    /// daemon gets the processes placed on it.
    pub fn launch(&mut self, launch: LaunchJob) {
        self.register(&launch);
        let node_of = &launch.node_of;
        let daemons = self.jobs[&launch.job].daemons.clone();
        for d in daemons {
            let mut part = launch.clone();
            part.procs.retain(|p| node_of[p.rank.0 as usize] == d);
            part.stdin_rank = launch.stdin_rank.filter(|r| node_of[r.0 as usize] == d);
            self.send(d, ToDaemon::Launch(part));
        }
    }

    /// Take on a process dpm did not start (singleton mode) as rank 0 of a job.
    pub fn adopt(&mut self, launch: LaunchJob, pid: u32, pmi_fd: i32) {
        self.register(&launch);
        self.send(0, ToDaemon::Adopt { launch, rank: Rank(0), pid, pmi_fd });
    }

    fn register(&mut self, launch: &LaunchJob) {
        let node_of = &launch.node_of;
        let size = launch.size;
        if launch.stdin_rank.is_some() {
            self.stdin_job = Some(launch.job);
        }
        let mut daemons = node_of.clone();
        daemons.sort_unstable();
        daemons.dedup();
        self.kvs.add_job(launch.job, launch.kvs, &daemons);
        {
            let mut shared = self.shared.borrow_mut();
            shared.routes.insert(launch.job, self.up_tx.clone());
            for &d in node_of {
                shared.load[d] += 1;
            }
            shared.jobs.insert(launch.job, (self.settings.owner, launch.kvsname.clone(), size));
        }
        self.jobs.insert(
            launch.job,
            Job {
                kvsname: launch.kvsname.clone(),
                fence: FenceTally::new(size),
                ranks: vec![RankState { pid: None, end: None }; size as usize],
                daemons: daemons.clone(),
                node_of: node_of.clone(),
                killing: false,
                aborted: false,
                spawn_request: None,
            },
        );
        if self.settings.report_placement {
            for &d in &daemons {
                let ranks: Vec<u32> = (0..size).filter(|&r| node_of[r as usize] == d).collect();
                let host = &self.daemons[d].host;
                self.console.say(&format!("dpm: {} ({}, {} ranks): ranks {} on {host}", launch.job, launch.kvsname, size, rank_ranges(&ranks)));
            }
        }
    }

    fn send(&self, daemon: usize, msg: ToDaemon) {
        let _ = self.daemons[daemon].tx.send(msg);
    }

    fn send_all(&self, out: crate::kvs_root::Outbox) {
        for (daemon, msg) in out {
            if daemon < self.daemons.len() {
                self.send(daemon, msg);
            }
        }
    }

    /// The host a rank runs on.
    fn host(&self, job: JobId, rank: Rank) -> &str {
        self.jobs.get(&job).and_then(|j| j.node_of.get(rank.0 as usize)).map_or("?", |&d| self.daemons[d].host.as_str())
    }

    /// Run until every job has ended; returns dpm's exit status.
    pub async fn run(mut self, timeout: Option<Duration>, mut inputs: mpsc::UnboundedReceiver<Input>) -> i32 {
        let far = tokio::time::Instant::now() + Duration::from_secs(86400 * 365);
        let timeout_at = timeout.map_or(far, |t| tokio::time::Instant::now() + t);
        let mut kill_at = far;
        while !self.jobs.is_empty() {
            tokio::select! {
                msg = self.up.recv() => match msg {
                    Some((node, msg)) => self.on_message(node, msg),
                    None => {
                        self.fail_run(1, "dpm: the node daemon went away".into());
                        break;
                    }
                },
                Some(input) = inputs.recv() => match input {
                    Input::Signal(sig) => kill_at = self.on_signal(sig, kill_at),
                    Input::Stdin(data) => self.forward_stdin(data),
                },
                _ = tokio::time::sleep_until(timeout_at), if !self.timed_out && timeout.is_some() => {
                    self.timed_out = true;
                    let secs = timeout.unwrap().as_secs_f64();
                    self.console.say(&format!("dpm: job timed out after {secs} s; killing it"));
                    self.kill_all(libc::SIGTERM);
                    kill_at = tokio::time::Instant::now() + self.settings.kill_grace;
                }
                _ = tokio::time::sleep_until(kill_at), if kill_at < far => {
                    self.kill_all(libc::SIGKILL);
                    kill_at = far;
                }
            }
        }
        self.finish()
    }

    fn on_signal(&mut self, sig: i32, kill_at: tokio::time::Instant) -> tokio::time::Instant {
        let name = signal_name(sig);
        if self.interrupted.is_some() {
            // A second signal: no more patience.
            self.console.say(&format!("dpm: got {name} again; killing every process now"));
            self.kill_all(libc::SIGKILL);
            return kill_at;
        }
        self.interrupted = Some(sig);
        self.console.say(&format!("dpm: got {name}; forwarding it to every process"));
        self.kill_all(sig);
        tokio::time::Instant::now() + self.settings.kill_grace
    }

    fn kill_all(&mut self, sig: i32) {
        let jobs: Vec<JobId> = self.jobs.keys().copied().collect();
        for job in jobs {
            self.kill_job(job, sig);
        }
    }

    fn kill_job(&mut self, job: JobId, sig: i32) {
        let Some(j) = self.jobs.get_mut(&job) else { return };
        j.killing = true;
        for &d in &j.daemons {
            let _ = self.daemons[d].tx.send(ToDaemon::Signal { job, signal: sig });
        }
    }

    fn forward_stdin(&mut self, data: Vec<u8>) {
        let Some(job) = self.stdin_job else { return };
        if let Some(&d) = self.jobs.get(&job).and_then(|j| j.node_of.first()) {
            self.send(d, ToDaemon::Stdin { job, data });
        }
    }

    fn on_message(&mut self, node: usize, msg: ToLauncher) {
        match msg {
            ToLauncher::Ready { .. } => {}
            ToLauncher::Started { job, rank, pid } => {
                if let Some(r) = self.rank_mut(job, rank) {
                    r.pid = Some(pid);
                }
                self.started(job);
            }
            ToLauncher::LaunchFailed { job, rank, error, errno } => self.launch_failed(job, rank, error, errno),
            ToLauncher::Output { job, rank, stream, data } => self.output.write(job, rank, stream, &data),
            ToLauncher::Exited { job, rank, pid, status, pmi, at } => self.exited(job, rank, pid, status, pmi, at),
            ToLauncher::FenceIn { job, epoch, count, puts } => self.fence_in(job, epoch, count, puts),
            ToLauncher::RingIn { job, seq, segment } => {
                let out = self.kvs.ring_in(job, node, seq, segment);
                self.send_all(out);
            }
            ToLauncher::Kvs { to, msg } => {
                let out = self.kvs.route(to, msg);
                self.send_all(out);
            }
            ToLauncher::Abort { job, rank, code, message } => self.abort(job, rank, code, message),
            ToLauncher::Name { request, job, op } => {
                let result = self.name_op(job, op);
                self.send(node, ToDaemon::NameDone { request, result });
            }
            ToLauncher::Spawn { request, job, rank, preput, commands } => self.spawn(node, request, job, rank, preput, commands),
            ToLauncher::Trace { line } => self.console.say(&line),
            ToLauncher::Lost { error } => self.node_lost(node, error),
            ToLauncher::FromNode { node, msg } => self.on_message(node, *msg),
            ToLauncher::Heartbeat => {}
        }
    }

    fn rank_mut(&mut self, job: JobId, rank: Rank) -> Option<&mut RankState> {
        self.jobs.get_mut(&job).and_then(|j| j.ranks.get_mut(rank.0 as usize))
    }

    fn launch_failed(&mut self, job: JobId, rank: Rank, error: String, errno: i32) {
        if let Some((daemon, request)) = self.jobs.get_mut(&job).and_then(|j| j.spawn_request.take()) {
            // A spawn that cannot start all its processes fails as a whole:
            // MPI_Comm_spawn returns an error in the parent, the run goes on.
            let host = self.host(job, rank).to_string();
            let who = describe_rank(job, rank, None, &host);
            self.send(daemon, ToDaemon::SpawnDone { request, result: Err(format!("{who} could not be started: {error}")) });
            self.end_unstarted(job);
            self.kill_job(job, libc::SIGKILL);
            self.check_done(job);
            return;
        }
        let code = match errno {
            libc::ENOENT => 127,
            libc::EACCES | libc::ENOEXEC | libc::EISDIR | libc::EPERM => 126,
            _ => 1,
        };
        let host = self.host(job, rank).to_string();
        let who = describe_rank(job, rank, None, &host);
        self.record_failure(code, format!("{who} could not be started: {error}"), Some((job, rank)));
        self.end_unstarted(job);
        self.kill_job(job, libc::SIGKILL);
        self.check_done(job);
    }

    fn exited(&mut self, job: JobId, rank: Rank, pid: u32, status: ExitStatus, pmi: PmiProgress, at: u64) {
        self.output.flush_rank(job, rank);
        let host = self.host(job, rank).to_string();
        let interrupted = self.interrupted.is_some() || self.timed_out;
        // A process that ended before the teardown began was not ended by it,
        // even if its exit is read afterwards (the reads of several nodes and
        // connections race): judge it as a failure of its own.
        let before_teardown = self.teardown_at.is_none_or(|t| at < t);
        let Some(j) = self.jobs.get_mut(&job) else { return };
        let killing = j.killing && !before_teardown;
        let who = describe_rank(job, rank, Some(pid), &host);
        let end = match status {
            ExitStatus::Code(0) if pmi == PmiProgress::Active && !killing => RankEnd::Failed {
                why: format!("{who} exited with code 0 without calling MPI_Finalize (PMI finalize)"),
                code: 1,
            },
            ExitStatus::Code(0) => RankEnd::Ok,
            _ if killing || interrupted => RankEnd::Terminated,
            ExitStatus::Code(c) => RankEnd::Failed { why: format!("{who} exited with code {c}"), code: c },
            ExitStatus::Signal(s) => RankEnd::Failed {
                why: format!("{who} was killed by signal {s} ({})", signal_name(s)),
                code: 128 + s,
            },
        };
        if (rank.0 as usize) < j.ranks.len() {
            j.end_rank(rank.0 as usize, end.clone(), &mut self.shared.borrow_mut().load);
        }
        if let RankEnd::Failed { why, code } = end {
            self.record_exit_failure(code, why, (job, rank), at);
            // Jobs of one run are connected (spawn, connect/accept): a failure
            // in any of them would leave the others waiting, so all end.
            self.kill_all(libc::SIGKILL);
        }
        self.check_done(job);
    }

    fn abort(&mut self, job: JobId, rank: Rank, code: i32, message: String) {
        let host = self.host(job, rank).to_string();
        let pid = self.jobs.get(&job).and_then(|j| j.ranks.get(rank.0 as usize)).and_then(|r| r.pid);
        let who = describe_rank(job, rank, pid, &host);
        // PMI-2 always says -1; an exit status is 0..255.
        let status = code & 0xff;
        let detail = if message.is_empty() || message == "abort" { String::new() } else { format!(": {message}") };
        self.record_abort(status, format!("{who} called MPI_Abort with exit code {code}{detail}"), (job, rank));
        if let Some(j) = self.jobs.get_mut(&job) {
            j.aborted = true;
        }
        // MPI_Abort ends the run: the aborting job's communicators may span
        // spawned and connected jobs.
        self.kill_all(libc::SIGKILL);
    }

    /// Ranks that were never started will never report: end them here.
    fn end_unstarted(&mut self, job: JobId) {
        let Some(j) = self.jobs.get_mut(&job) else { return };
        let mut shared = self.shared.borrow_mut();
        for r in 0..j.ranks.len() {
            if j.ranks[r].pid.is_none() {
                j.end_rank(r, RankEnd::Terminated, &mut shared.load);
            }
        }
    }

    /// Processes not yet ended, over all runs of the tree.
    fn live_procs(&self) -> u32 {
        u32::try_from(self.shared.borrow().load.iter().sum::<i64>()).unwrap_or(0)
    }

    /// A spawn is answered once every child has a pid.
    fn started(&mut self, job: JobId) {
        let Some(j) = self.jobs.get_mut(&job) else { return };
        if j.spawn_request.is_none() || j.ranks.iter().any(|r| r.pid.is_none()) {
            return;
        }
        if let Some((daemon, request)) = j.spawn_request.take() {
            let result = Ok(j.kvsname.clone());
            self.send(daemon, ToDaemon::SpawnDone { request, result });
        }
    }

    /// `MPI_Comm_spawn[_multiple]` from `rank` of `parent`: plan, place, launch.
    /// The answer goes back once every child has started, or on the first error.
    fn spawn(&mut self, parent_daemon: usize, request: RequestId, parent: JobId, rank: Rank, preput: KeyValues, commands: Vec<SpawnCommand>) {
        let Some(parent_kvs) = self.jobs.get(&parent).map(|j| j.kvsname.clone()) else {
            return;
        };
        let reply = |c: &Self, result: Result<String, String>| c.send(parent_daemon, ToDaemon::SpawnDone { request, result });
        if self.interrupted.is_some() || self.timed_out || self.failure.is_some() {
            return reply(self, Err("the run is ending; no new processes".into()));
        }
        let plan = match plan_spawn(&self.settings.spawn, &commands) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(%parent, rank = rank.0, "spawn refused: {e}");
                return reply(self, Err(e.to_string()));
            }
        };
        let size = plan.job.procs.len() as u32;
        let oversubscribe = plan.oversubscribe.unwrap_or(!self.settings.no_oversubscribe);
        let slots = self.settings.universe_size;
        let live = self.live_procs();
        if !oversubscribe && slots >= 0 && i64::from(live + size) > slots {
            let msg = format!("spawning {size} processes would exceed the {slots} slots ({live} in use) and oversubscription is off");
            tracing::warn!(%parent, rank = rank.0, "spawn refused: {msg}");
            return reply(self, Err(msg));
        }
        let node_of = match self.place_spawn(&plan.job.procs, &plan.nodes, oversubscribe) {
            Ok(n) => n,
            Err(msg) => {
                tracing::warn!(%parent, rank = rank.0, "spawn refused: {msg}");
                return reply(self, Err(msg));
            }
        };
        let (job, kvsname) = self.new_job_id();
        tracing::debug!(%parent, %job, size, "spawn");
        let design = self.kvs.design(parent).unwrap_or_default();
        let launch = LaunchJob {
            spawner: Some(parent_kvs),
            preput,
            ..plan.job.into_launch(job, kvsname, self.settings.universe_size, node_of, self.settings.pmi_mode, design)
        };
        self.launch(launch);
        if let Some(j) = self.jobs.get_mut(&job) {
            j.spawn_request = Some((parent_daemon, request));
        }
    }

    /// Where spawned processes go, with a global view of load: each goes to
    /// the allowed node with the most free slots (the least loaded first when
    /// all are full, if oversubscription is allowed), counting the ones
    /// already placed — never everything on the first node.
    fn place_spawn(&self, procs: &[dpm_proto::ProcSpec], allowed: &[Option<Vec<usize>>], oversubscribe: bool) -> Result<Vec<usize>, String> {
        let n_nodes = self.daemons.len();
        let mut load = self.shared.borrow().load.clone();
        let slots = &self.settings.node_slots;
        let mut out = Vec::with_capacity(procs.len());
        for p in procs {
            let candidates: Vec<usize> = match allowed.get(p.app).and_then(|a| a.as_ref()) {
                Some(list) => list.clone(),
                None => (0..n_nodes).collect(),
            };
            let free = |n: usize| i64::from(slots.get(n).copied().unwrap_or(1)) - load[n];
            let best = candidates.iter().copied().max_by_key(|&n| (free(n), std::cmp::Reverse(n)));
            let Some(node) = best else { return Err("no node to place the spawned processes on".into()) };
            if free(node) <= 0 && !oversubscribe {
                return Err("every allowed node's slots are in use and oversubscription is off".into());
            }
            load[node] += 1;
            out.push(node);
        }
        Ok(out)
    }

    /// A daemon's link broke: its processes are gone — and those of every
    /// node below it in the tree — and the jobs using them cannot go on.
    fn node_lost(&mut self, node: usize, error: String) {
        let Some(host) = self.daemons.get(node).map(|d| d.host.clone()) else { return };
        let lost = dpm_proto::tree::subtree(node, self.daemons.len(), self.settings.fanout);
        let affected: Vec<JobId> =
            self.jobs.iter().filter(|(_, j)| j.daemons.iter().any(|d| lost.contains(d))).map(|(id, _)| *id).collect();
        if affected.is_empty() && self.jobs.is_empty() {
            return; // the run is over; daemons going away is expected
        }
        self.record_failure(1, format!("node {node} ({host}) was lost: {error}"), None);
        for job in &affected {
            if let Some(j) = self.jobs.get_mut(job) {
                let mut shared = self.shared.borrow_mut();
                for r in 0..j.ranks.len() {
                    if lost.contains(&j.node_of[r]) {
                        j.end_rank(r, RankEnd::Terminated, &mut shared.load);
                    }
                }
                j.daemons.retain(|d| !lost.contains(d));
            }
        }
        self.kill_all(libc::SIGKILL);
        for job in affected {
            self.check_done(job);
        }
    }

    fn fence_in(&mut self, job: JobId, epoch: u64, count: u32, puts: Vec<(String, String)>) {
        // Under tree and direct the puts stay here instead of going down.
        let (puts, out) = self.kvs.fence_puts(job, epoch, puts);
        self.send_all(out);
        let Some(j) = self.jobs.get_mut(&job) else { return };
        match j.fence.arrive(epoch, count, puts) {
            Ok(None) => {}
            Ok(Some(done)) => {
                tracing::debug!(%job, epoch = done.epoch, keys = done.delta.len(), "fence complete");
                // To the top of each subtree running the job; the daemons
                // pass it down (a job the KVS root does not know: to each node).
                let targets = self.kvs.fence_targets(job).unwrap_or_else(|| j.daemons.to_vec());
                if let Some((&last, rest)) = targets.split_last() {
                    for &d in rest {
                        let _ = self.daemons[d].tx.send(ToDaemon::FenceDone { job, epoch: done.epoch, delta: done.delta.clone() });
                    }
                    let _ = self.daemons[last].tx.send(ToDaemon::FenceDone { job, epoch: done.epoch, delta: done.delta });
                }
            }
            Err(e) => tracing::error!(%job, "fence protocol error: {e}"),
        }
    }

    fn name_op(&mut self, job: JobId, op: NameRequest) -> Result<Option<String>, String> {
        match op {
            NameRequest::Publish { service, port } => self.shared.borrow_mut().names.publish(service, port, job).map(|()| None),
            NameRequest::Unpublish { service } => self.shared.borrow_mut().names.unpublish(&service).map(|()| None),
            NameRequest::Lookup { service } => self.shared.borrow().names.lookup(&service).map(|p| Some(p.to_string())),
        }
        .map_err(|e| e.to_string())
    }

    fn record_failure(&mut self, code: i32, summary: String, rank: Option<(JobId, Rank)>) {
        tracing::debug!("{summary}");
        if self.failure.is_none() {
            self.failure = Some(Failure { code, summary, rank, abort: false, at: None });
        }
    }

    /// A failed exit: the earliest one is the run's failure (unless an abort).
    fn record_exit_failure(&mut self, code: i32, summary: String, rank: (JobId, Rank), at: u64) {
        tracing::debug!("{summary}");
        let replace = match &self.failure {
            None => true,
            Some(f) => !f.abort && f.at.is_some_and(|t| at < t),
        };
        if replace {
            self.failure = Some(Failure { code, summary, rank: Some(rank), abort: false, at: Some(at) });
        }
        if self.teardown_at.is_none() {
            self.teardown_at = Some(dpm_daemon::now_micros());
        }
    }

    /// An `MPI_Abort` is the cause of whatever fails around it: peers cut off
    /// mid-communication may exit before its message is read. So it replaces
    /// an earlier failure that was not itself an abort.
    fn record_abort(&mut self, code: i32, summary: String, rank: (JobId, Rank)) {
        tracing::debug!("{summary}");
        if self.failure.as_ref().is_none_or(|f| !f.abort) {
            self.failure = Some(Failure { code, summary, rank: Some(rank), abort: true, at: None });
        }
    }

    fn fail_run(&mut self, code: i32, summary: String) {
        self.record_failure(code, summary, None);
        self.jobs.clear();
    }

    fn check_done(&mut self, job: JobId) {
        let Some(j) = self.jobs.get(&job) else { return };
        if !j.done() {
            return;
        }
        let j = self.jobs.remove(&job).expect("present");
        self.kvs.remove_job(job);
        tracing::debug!(%job, "job ended");
        if let Some((daemon, request)) = j.spawn_request {
            self.send(daemon, ToDaemon::SpawnDone { request, result: Err(format!("{job} ended before all its processes started")) });
        }
        for &d in &j.daemons {
            let _ = self.daemons[d].tx.send(ToDaemon::Forget { job });
        }
        let withdrawn = {
            let mut shared = self.shared.borrow_mut();
            shared.routes.remove(&job);
            shared.jobs.remove(&job);
            shared.names.withdraw_job(job)
        };
        if withdrawn > 0 {
            tracing::debug!(%job, withdrawn, "names withdrawn with their job");
        }
        let failed = self.failure.as_ref().and_then(|f| f.rank);
        let terminated = (0..j.ranks.len())
            .filter(|&r| j.ranks[r].end == Some(RankEnd::Terminated) && failed != Some((job, Rank(r as u32))))
            .count();
        if terminated > 0 {
            self.terminated.push((job, terminated));
        }
    }

    /// The exit status, after the final word on stderr. Jobs the daemons
    /// never reported the end of (they went away) give back their load here.
    fn finish(self) -> i32 {
        {
            let mut shared = self.shared.borrow_mut();
            for (id, j) in &self.jobs {
                shared.routes.remove(id);
                shared.jobs.remove(id);
                for (r, st) in j.ranks.iter().enumerate() {
                    if st.end.is_none() {
                        shared.load[j.node_of[r]] -= 1;
                    }
                }
            }
        }
        if let Some(sig) = self.interrupted {
            self.console.say(&format!("dpm: job ended by {}", signal_name(sig)));
            return 128 + sig;
        }
        if self.timed_out {
            return 124;
        }
        match self.failure {
            Some(f) => {
                let total: usize = self.terminated.iter().map(|(_, n)| n).sum();
                let detail = if total == 0 {
                    String::new()
                } else {
                    let per_job: Vec<String> = self.terminated.iter().map(|(j, n)| format!("{n} of job {}", j.0)).collect();
                    let s = if total == 1 { "" } else { "s" };
                    format!("; {total} other rank{s} terminated ({})", per_job.join(", "))
                };
                self.console.say(&format!("dpm: job failed: {}{detail}", f.summary));
                f.code
            }
            None => 0,
        }
    }
}

/// A job's kvsname: `kvs_<dpm pid>_<random>_<job>`. MPICH names its node
/// shared-memory segment after a hash of it (`/dev/shm/mpich_shm_<hash>_<node>`),
/// and a killed run leaves that file behind: with the pid alone a later run
/// that reuses the pid collides with it and fails in MPI_Init ("Out of memory").
pub fn kvsname(run_tag: u32, job: JobId) -> String {
    format!("kvs_{}_{:08x}_{}", std::process::id(), run_tag, job.0)
}

/// 32 random bits from the kernel (time and pid mixed in if that fails).
pub fn random_tag() -> u32 {
    let mut bytes = [0u8; 4];
    // SAFETY: getrandom fills the buffer we pass.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if n == 4 {
        return u32::from_ne_bytes(bytes);
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    now ^ std::process::id().rotate_left(16)
}

fn describe_rank(job: JobId, rank: Rank, pid: Option<u32>, host: &str) -> String {
    let job_part = if job.0 == 0 { String::new() } else { format!(" of job {}", job.0) };
    match pid {
        Some(pid) => format!("rank {}{job_part} (pid {pid} on {host})", rank.0),
        None => format!("rank {}{job_part} (on {host})", rank.0),
    }
}

/// `0,1,2,5,7,8` → `0-2,5,7-8`.
fn rank_ranges(ranks: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        parts.push(if i == j { ranks[i].to_string() } else { format!("{}-{}", ranks[i], ranks[j]) });
        i = j + 1;
    }
    parts.join(",")
}

pub fn signal_name(sig: i32) -> String {
    nix::sys::signal::Signal::try_from(sig).map_or_else(|_| format!("signal {sig}"), |s| s.as_str().to_string())
}

/// This process's signals (INT, TERM, HUP) and, if `stdin`, its stdin, read
/// on a thread of its own (a blocking read must not stall the event loop).
pub fn local_inputs(stdin: bool) -> mpsc::UnboundedReceiver<Input> {
    let (tx, rx) = mpsc::unbounded_channel();
    for kind in [SignalKind::interrupt(), SignalKind::terminate(), SignalKind::hangup()] {
        let mut stream = signal(kind).expect("signal handler");
        let tx = tx.clone();
        tokio::task::spawn_local(async move {
            while stream.recv().await.is_some() {
                if tx.send(Input::Signal(kind.as_raw_value())).is_err() {
                    return;
                }
            }
        });
    }
    if stdin {
        std::thread::Builder::new()
            .name("dpm-stdin".into())
            .spawn(move || {
                use std::io::Read;
                let mut buf = vec![0u8; 64 * 1024];
                let mut stdin = std::io::stdin().lock();
                loop {
                    match stdin.read(&mut buf) {
                        Ok(0) | Err(_) => {
                            let _ = tx.send(Input::Stdin(Vec::new()));
                            return;
                        }
                        Ok(n) => {
                            if tx.send(Input::Stdin(buf[..n].to_vec())).is_err() {
                                return;
                            }
                        }
                    }
                }
            })
            .expect("stdin thread");
    }
    rx
}

#[cfg(test)]
mod tests {
    #[test]
    fn rank_ranges_are_compact() {
        assert_eq!(super::rank_ranges(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        assert_eq!(super::rank_ranges(&[3]), "3");
    }
}
