//! One run as a plain state machine: the run reactor.
//!
//! A [`Run`] owns a `dpm run`'s jobs (its first job and every job it
//! spawned) and reacts to one event at a time — a daemon message
//! ([`Run::on_message`]), a signal, stdin data, a timer, the daemons going
//! away — given as plain data; it acts only through [`RunEffects`]:
//! messages to nodes, console lines, timers, the end of the run. No I/O, no
//! async, no shared cells: a spawn's programs, directories and host files
//! are looked up in [`RunEffects::files`] (this machine's for a live run, a
//! table in tests), the random part of the kvsnames comes in with
//! [`TreeShared::new`]; the async driver is [`crate::controller::Controller`];
//! tests drive a run with [`Recorder`] and a virtual clock, and need nothing
//! from the host.
//!
//! # Parts
//!
//! `Run` is only a router: each part owns its state behind a small
//! interface, and `impl Run` passes each exactly what it needs: this file
//! launches jobs, routes daemon messages and makes spawns; `ending` handles
//! lost nodes, signals, timers and the end of the run.
//! - `jobs::Jobs`: the job table — each job's ranks (`job::Job`), the
//!   output credit owed to nodes, the stdin job; rank starts, exits,
//!   aborts, lost nodes and fences, judged into the [`Verdict`] passed in.
//! - [`Verdict`] (`verdict`): the failure policy's outcome, the first
//!   failure, the exit status.
//! - [`KvsRoot`]: each job's KVS design at the root (ring, tree, routing).
//! - `warm::WarmPool`: the run's warm-spawn policy (shapes, priming,
//!   claims in flight, counts), given a `warm::WarmCx` of the settings,
//!   the job table and the KVS root; the unclaimed pooled jobs are the
//!   tree's [`Pool`]'s (`pool`).
//! - `connect::Collectives`: PMIx connect/disconnect/fence/group
//!   collectives in flight, given the job table (`tree_connect`: those
//!   naming jobs of other runs of the tree).
//! - plain functions: `spawn` (plan, place, the job a spawn makes),
//!   `names` (the name service), `launch` ([`Settings`], a job's checks),
//!   `invariants` (over the parts, checked after every event in tests).
//! - What the runs of one tree share ([`TreeShared`]: names, job ids, the
//!   node table, `dpm status`'s list, the pool): [`RunEffects::shared`].

mod connect;
mod effects;
mod ending;
mod invariants;
mod job;
mod jobs;
mod kvsname;
mod launch;
mod names;
mod pool;
mod report;
mod shape;
mod shared;
mod spawn;
#[cfg(test)]
pub(crate) mod tests;
mod tree_connect;
mod verdict;
mod warm;

use std::time::Duration;

use dpm_kvs::{JobId, NodeId, Rank};
use dpm_proto::link::InProcessFd;
use dpm_proto::{LaunchJob, RankExit, RequestId, ToDaemon, ToLauncher};

use crate::kvs_root::KvsRoot;
use crate::node_table::Reservation;
use job::Job;
use jobs::Jobs;
use spawn::SpawnAsk;
use warm::{Ended, Miss, Output, WarmCx, WarmPool};

pub use effects::{Effect, Recorder, RunEffects, Timer};
pub use kvsname::{kvsname, open_mpi_family};
pub use launch::{LaunchError, Settings};
pub use pool::{Pool, PoolEffects, PoolOutbox};
pub use shape::{MAX_HELD_OUTPUT, WARM_INFO_KEY};
pub use shared::{Destination, RunView, TreeShared};
pub use tree_connect::{Contribution, TreeConnectEffects, TreeConnects};
pub use verdict::{parse_failure_policy, signal_name, FailurePolicy, UnknownPolicy, Verdict};
pub use warm::{warm_starting_default, DEFAULT_WARM_SPAWN, MAX_WARM_SPAWN};

/// See the module documentation.
pub struct Run {
    settings: Settings,
    policy: FailurePolicy,
    verdict: Verdict,
    timeout: Option<Duration>,
    /// Set once the run is over: dpm's exit status.
    exit: Option<i32>,
    jobs: Jobs,
    kvs: KvsRoot,
    warm: WarmPool,
    connects: connect::Collectives,
    /// At the timeout, the ranks' reports awaited before the kill.
    reports: Option<report::Reports>,
    /// The ranks' states asked for a tool (`dpm status --json`).
    listing: Option<report::Listing>,
}

impl Run {
    pub fn new(settings: Settings) -> Self {
        Run {
            kvs: KvsRoot::new(settings.fanout).with_first(settings.heap_nodes),
            settings,
            policy: FailurePolicy::default(),
            verdict: Verdict::default(),
            timeout: None,
            exit: None,
            jobs: Jobs::default(),
            warm: WarmPool::default(),
            connects: connect::Collectives::default(),
            reports: None,
            listing: None,
        }
    }

    pub fn set_failure_policy(&mut self, policy: FailurePolicy) {
        self.policy = policy;
    }

    /// The run is killed (SIGTERM, then the grace) after `timeout`.
    pub fn set_timeout(&mut self, fx: &mut dyn RunEffects, timeout: Duration) {
        self.timeout = Some(timeout);
        fx.arm(Timer::Timeout, timeout);
    }

    /// The pid of the `dpm run` this run is for.
    pub fn owner(&self) -> u32 {
        self.settings.owner
    }

    /// dpm's exit status, once the run is over.
    pub fn exit_code(&self) -> Option<i32> {
        self.exit
    }

    /// Start a job whose rank `r` runs on node `node_of[r]`: each node's
    /// daemon gets the processes placed on it. A job that does not hold
    /// together (a control frame's, say) is refused: the run fails with
    /// exit status 2 and the reason, nothing is sent.
    pub fn launch(&mut self, fx: &mut dyn RunEffects, launch: LaunchJob) -> Result<(), LaunchError> {
        let slots = self.admit(fx, &launch)?;
        self.start_job(fx, launch, slots, None);
        Ok(())
    }

    /// Take on a process dpm did not start (singleton mode) as rank 0 of a job.
    pub fn adopt(&mut self, fx: &mut dyn RunEffects, launch: LaunchJob, pid: u32, pmi: InProcessFd) -> Result<(), LaunchError> {
        let slots = self.admit(fx, &launch)?;
        let node = slots.node(0).unwrap_or(NodeId(0));
        self.register(fx, &launch, slots, None);
        fx.send(node, ToDaemon::Adopt { launch, rank: Rank(0), pid, pmi });
        Ok(())
    }

    /// Check a job and reserve its placement; a job refused fails the run.
    fn admit(&mut self, fx: &mut dyn RunEffects, launch: &LaunchJob) -> Result<Reservation, LaunchError> {
        let slots = launch::check(launch).and_then(|()| fx.shared().nodes.reserve(&launch.node_of).map_err(|e| LaunchError::Placement(launch.job, e)));
        slots.inspect_err(|e| self.verdict.record(2, format!("invalid job: {e}"), None))
    }

    /// A checked, placed job: register it and send each node its part.
    fn start_job(&mut self, fx: &mut dyn RunEffects, launch: LaunchJob, slots: Reservation, spawn_request: Option<(NodeId, RequestId)>) {
        let node_of = slots.node_of().to_vec();
        let job = launch.job;
        self.register(fx, &launch, slots, spawn_request);
        let daemons = self.jobs.get(job).map(|j| j.daemons().to_vec()).unwrap_or_default();
        launch::send_parts(launch, &node_of, &daemons, &mut |d, m| fx.send(d, m));
    }

    fn register(&mut self, fx: &mut dyn RunEffects, launch: &LaunchJob, slots: Reservation, spawn_request: Option<(NodeId, RequestId)>) {
        let job = Job::new(launch, slots, spawn_request);
        self.kvs.add_job(launch.job, launch.kvs, job.daemons());
        fx.shared().route(launch.job, Some(self.settings.owner));
        fx.shared().jobs.insert(launch.job, (self.settings.owner, launch.kvsname.clone(), launch.size));
        self.jobs.insert(launch.job, job, launch.stdin_rank.is_some());
        if self.settings.report_placement {
            self.jobs.report_placement(fx, launch.job);
        }
        let map = self.jobs.job_map(launch.job, self.settings.universe_size);
        fx.shared().connects.register(map);
    }

    /// `node`'s index among `job`'s nodes, numbered from 0 in rank order (as
    /// in the job's `PMI_process_mapping`; Hydra's proxy id, `%p`).
    pub fn job_node_index(&self, job: JobId, node: NodeId) -> Option<usize> {
        self.jobs.node_index(job, node)
    }

    /// `bytes` of `job`'s output from `node` were written to their
    /// destination (the driver reports it for each [`RunEffects::output`]):
    /// credit goes back to the node in steps of
    /// [`dpm_proto::OUTPUT_ACK_STEP`], which keeps its output window open
    /// (flow control, see `dpm_proto::OUTPUT_WINDOW`).
    pub fn on_output_written(&mut self, fx: &mut dyn RunEffects, node: NodeId, job: JobId, bytes: u64) {
        if let Some(bytes) = self.jobs.output_written(node, job, bytes) {
            fx.send(node, ToDaemon::OutputAck { job, bytes });
        }
    }

    /// A message from the daemon of `node`.
    pub fn on_message(&mut self, fx: &mut dyn RunEffects, node: NodeId, msg: ToLauncher) {
        self.message(fx, node, msg);
        self.settle(fx);
    }

    fn message(&mut self, fx: &mut dyn RunEffects, node: NodeId, msg: ToLauncher) {
        match msg {
            ToLauncher::Started { job, rank, pid } => self.jobs.started(fx, job, rank, pid),
            ToLauncher::LaunchFailed { job, rank, error, errno } => self.launch_failed(fx, job, rank, error, errno),
            ToLauncher::Output { job, rank, stream, data } => match self.warm.output(&self.jobs, node, job, rank, stream, data) {
                Output::Pass(data) => fx.output(node, job, rank, stream, &data),
                Output::Held => {}
                Output::TooMuch => self.warm_drop(fx, job, Some(&format!("it wrote more than {MAX_HELD_OUTPUT} bytes before a claim"))),
            },
            ToLauncher::Exited(exit) => self.exited(fx, exit),
            ToLauncher::FenceIn { job, epoch, count, puts } => self.jobs.fence_in(fx, &mut self.kvs, job, epoch, count, puts),
            ToLauncher::RingIn { job, seq, segment } => {
                let out = self.kvs.ring_in(job, node, seq, segment);
                send_all(fx, out);
            }
            ToLauncher::Kvs { to, msg } => {
                let out = self.kvs.route(to, msg);
                send_all(fx, out);
            }
            ToLauncher::Abort { job, rank, code, message } => {
                if !self.warm_ended(fx, job, rank, &format!("called MPI_Abort ({code})"), false) {
                    self.jobs.abort(fx, &mut self.verdict, self.policy, job, rank, code, message);
                }
            }
            ToLauncher::Name { request, job, op } => names::serve(fx, node, request, job, op),
            ToLauncher::Spawn { request, job, rank, preput, commands } => self.spawn(fx, SpawnAsk { node, request, parent: job, rank, preput, commands }),
            ToLauncher::Claimed { job, alive, ready } => {
                let (warm, mut cx) = self.warm_parts();
                if let Some(why) = warm.claimed(&mut cx, fx, node, job, alive, ready) {
                    self.warm_drop(fx, job, Some(&why));
                }
            }
            ToLauncher::Connect { request, nspaces, kind, data, ranks, group, .. } => {
                let universe = self.settings.universe_size;
                self.connects.contribute(fx, &self.jobs, universe, node, request, &nspaces, &ranks, kind, group, data);
            }
            ToLauncher::Trace { line } | ToLauncher::Note { line, .. } => fx.say(&line),
            ToLauncher::ToolOutput { stream, data, .. } => fx.tool_output(stream, &data),
            report @ ToLauncher::RankReport { .. } => {
                if self.listing.as_mut().is_some_and(|l| l.take(fx, &report)) {
                    return self.listed_if_done(fx, false);
                }
                let done = self.reports.as_mut().is_some_and(|r| r.on_report(fx, node, report));
                if done {
                    self.reports = None;
                    self.reports_done(fx);
                }
            }
            // The PMIx watch of `node` saw a rank of `job` connect: an Open
            // MPI rank served PMI-1/2, a singleton if left alone. The run
            // ends (as `on_end`) saying to use `--pmi pmix`, naming the
            // program of the job's first rank on that node; once, whichever
            // node says so first. A job launched without the watch is not ended.
            ToLauncher::FenceDoomed { job, waiting } => self.jobs.fence_doomed(fx, &mut self.verdict, job, &waiting),
            // A job claimed while starting has started on `node` (or its
            // ranks there parked just before the claim reached them).
            ToLauncher::AwaitingClaim { job } => self.warm.awaiting(fx, job, node),
            ToLauncher::FenceCut { job, epoch } => self.fence_cut(fx, node, job, epoch),
            ToLauncher::WatchTripped { job } => {
                if let Some(exe) = self.jobs.watch_tripped(node, job) {
                    self.end_with(fx, crate::pmi_choice::watch_tripped_message(&exe));
                }
            }
        }
    }

    /// The warm-spawn policy and what it sees of the run.
    fn warm_parts(&mut self) -> (&mut WarmPool, WarmCx<'_>) {
        let ending = self.verdict.ending();
        (&mut self.warm, WarmCx { settings: &self.settings, jobs: &mut self.jobs, kvs: &mut self.kvs, ending })
    }

    fn launch_failed(&mut self, fx: &mut dyn RunEffects, job: JobId, rank: Rank, error: String, errno: i32) {
        if self.jobs.get(job).is_some_and(Job::pool) {
            self.jobs.end_unstarted(&mut fx.shared().nodes, job);
            let why = format!("could not be started ({})", dpm_pmi::sanitize::escape(&error));
            self.warm_ended(fx, job, rank, &why, true);
            return;
        }
        self.jobs.launch_failed(fx, &mut self.verdict, job, rank, error, errno);
        self.check_done(fx, job);
    }

    fn exited(&mut self, fx: &mut dyn RunEffects, exit: RankExit) {
        let RankExit { job, rank, status, .. } = exit;
        if self.jobs.get(job).is_some_and(|j| j.rank_end(rank.0 as usize).is_some()) {
            // Said again after a re-attach (`Down::Resync`), or the rank's
            // end was already settled (its node lost): nothing new.
            return tracing::debug!(%job, rank = rank.0, "an exit already known");
        }
        if self.warm_ended(fx, job, rank, &format!("ended ({status:?})"), true) {
            return;
        }
        fx.flush_output(job, rank);
        self.jobs.exited(fx, &mut self.verdict, self.policy, exit);
        self.check_done(fx, job);
    }

    /// A rank of a claimed job, its claim not confirmed, ended (`ended`) or
    /// aborted: the job is dropped and its spawn made again. `false` if
    /// `job` is not such a job.
    fn warm_ended(&mut self, fx: &mut dyn RunEffects, job: JobId, rank: Rank, why: &str, ended: bool) -> bool {
        match self.warm.ended(&mut self.jobs, &mut fx.shared().nodes, job, rank, why, ended) {
            Ended::NotClaimed => return false,
            Ended::Orphan => {
                self.jobs.kill_job(fx, job, libc::SIGKILL);
                self.check_done(fx, job);
            }
            Ended::Drop(said) => self.warm_drop(fx, job, said.as_deref()),
        }
        true
    }

    /// Take claimed `job` out of its claim and kill it; its slots are free
    /// at once. `why` is said (`None`: a quiet end). The spawn that was
    /// claiming it is made again (if its parent is still there).
    fn warm_drop(&mut self, fx: &mut dyn RunEffects, job: JobId, why: Option<&str>) {
        let Some(ask) = self.warm.unclaim(&self.settings, fx, job, why) else { return };
        self.jobs.release_slots(&mut fx.shared().nodes, job);
        self.jobs.kill_job(fx, job, libc::SIGKILL);
        self.check_done(fx, job);
        self.spawn(fx, ask);
    }

    /// `MPI_Comm_spawn`: claim a pooled job of its shape (answered once its
    /// nodes confirm, `WarmPool::claimed`), else plan, place and start a
    /// new job, and have warm spawn fill the pool its miss showed.
    fn spawn(&mut self, fx: &mut dyn RunEffects, ask: SpawnAsk) {
        let (parent_node, request, parent, rank) = (ask.node, ask.request, ask.parent, ask.rank);
        let Some(parent_kvs) = self.jobs.get(parent).map(|j| j.kvsname().to_string()) else { return };
        let answer =
            |fx: &mut dyn RunEffects, result: Result<String, String>, errcodes| fx.send(parent_node, ToDaemon::SpawnDone { request, result, errcodes });
        if self.verdict.ending() {
            return answer(fx, Err("the run is ending; no new processes".into()), Vec::new());
        }
        let (shape, choice) = shape::shape(&self.settings, &self.kvs, fx, parent, &ask.commands);
        let want = warm::wanted(&self.settings, choice);
        let ask = match want {
            0 => ask,
            _ => {
                let (warm, mut cx) = self.warm_parts();
                match warm.claim(&mut cx, fx, &shape, ask, want) {
                    Some(missed) => missed,
                    None => return,
                }
            }
        };
        let (planned, slots, errcodes) = match spawn::plan_and_place(&self.settings, fx, &ask.commands) {
            Ok(placed) => placed,
            Err(spawn::Refused { why, soft: true }) => {
                tracing::info!(%parent, rank = rank.0, "soft spawn: no room: {why}");
                return answer(fx, Err(why), Vec::new());
            }
            Err(spawn::Refused { why, soft: false }) => {
                tracing::warn!(%parent, rank = rank.0, "spawn refused: {}", dpm_pmi::sanitize::escape(&why));
                return answer(fx, Err(why), Vec::new());
            }
        };
        let launch = spawn::launch_of(&self.settings, &self.kvs, fx, planned, &slots, parent, parent_kvs, ask.preput);
        // The first miss of a shape starts only its own children (`Miss::Learn`);
        // a shape that repeats fills its pool at once.
        let parent_fence = self.jobs.get(parent).map(Job::fence_progress);
        let miss = (want > 0).then(|| self.warm.miss(&self.settings, fx, &shape, want, (parent, launch.spawner.as_deref().unwrap_or_default()), parent_fence));
        let (job, size) = (launch.job, launch.size);
        tracing::debug!(%parent, %job, size, "spawn");
        if spawn::answers_before_start(&self.jobs, self.policy, &self.settings, parent) {
            answer(fx, Ok(launch.kvsname.clone()), errcodes);
            self.start_job(fx, launch, slots, None);
        } else {
            self.start_job(fx, launch, slots, Some((parent_node, request)));
            // Answered once every child has started (`Jobs::started`).
            if let Some(j) = self.jobs.get_mut(job) {
                j.set_spawn_errcodes(errcodes);
            }
        }
        if miss == Some(Miss::Refill) {
            let (warm, cx) = self.warm_parts();
            warm.fill(&cx, fx, &shape, want, parent);
        }
    }

    /// A job launched held for a debugger may go on (MPIR launch mode: the
    /// debugger let the starter go on from `MPIR_Breakpoint`, or detached).
    pub fn continue_job(&mut self, fx: &mut dyn RunEffects, job: JobId) {
        self.jobs.continue_held(fx, job);
    }

    /// A debugger asked for its tool daemon (MPIR, at the breakpoint of
    /// `job`): started once on each node of the job that has none yet.
    pub fn start_tools(&mut self, fx: &mut dyn RunEffects, job: JobId, tool: &dpm_proto::ToolDaemon) {
        self.jobs.start_tools(fx, job, tool);
    }

    /// dpm's stdin: to the rank that reads it (empty: end of input).
    pub fn on_stdin(&mut self, fx: &mut dyn RunEffects, data: Vec<u8>) {
        if let Some((job, node)) = self.jobs.stdin_target() {
            fx.send(node, ToDaemon::Stdin { job, data });
        }
    }
}

fn send_all(fx: &mut dyn RunEffects, out: Vec<(NodeId, ToDaemon)>) {
    for (node, msg) in out {
        fx.send(node, msg);
    }
}
