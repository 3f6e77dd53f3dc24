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
//! interface, and `impl Run` (this file) passes each exactly what it needs.
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
use dpm_proto::control::TimeoutReport;
use dpm_proto::link::InProcessFd;
use dpm_proto::{LaunchJob, RankExit, RequestId, ToDaemon, ToLauncher};

use crate::kvs_root::KvsRoot;
use crate::node_table::{NodeState, Reservation};
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

    /// The link to `node` broke (its daemon killed, its host lost, silent too
    /// long): that node and the subtree below it are gone.
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

    pub fn on_node_lost(&mut self, fx: &mut dyn RunEffects, node: NodeId, error: String) {
        self.node_lost(fx, node, error);
        self.settle(fx);
    }

    /// The daemon of `node` took its parent for lost (silent, or stopped)
    /// and ends its ranks. Its parent is the one at fault: the daemon above
    /// it — or, for a top-level daemon, this launcher itself (stopped with
    /// SIGSTOP, or starved of CPU): then no node is blamed.
    pub fn on_parent_lost(&mut self, fx: &mut dyn RunEffects, node: NodeId, error: String) {
        let nodes = &fx.shared().nodes;
        if !nodes.contains(node) {
            return;
        }
        match nodes.parent(node) {
            Some(parent) => {
                let host = nodes.host(node).to_string();
                self.node_lost(fx, parent, format!("node {} ({host}) below it {error}", node.0));
            }
            None => {
                let summary = format!(
                    "dpm itself went silent for longer than its daemons wait (stopped with SIGSTOP, or starved of CPU): node {} {error}; its ranks were ended",
                    node.0
                );
                self.node_lost_because(fx, node, summary);
            }
        }
        self.settle(fx);
    }

    /// The tree re-formed around a lost node: the KVS root's parts follow
    /// the new shape (`tops`: the nodes re-attached below the launcher).
    pub fn reformed(&mut self, tops: &std::collections::BTreeSet<NodeId>) {
        self.kvs.reformed(tops);
    }

    /// A fence of `job` was in flight through the daemon above `node` when
    /// it was lost (`node` re-attached and says so): the job cannot
    /// complete it, and the run ends as for a lost node, naming it.
    fn fence_cut(&mut self, fx: &mut dyn RunEffects, node: NodeId, job: JobId, epoch: u64) {
        if !self.jobs.contains(job) || self.verdict.ending() {
            return;
        }
        let nodes = &fx.shared().nodes;
        let via = dpm_proto::tree::parent(node, nodes.fanout()).unwrap_or(node);
        let of_job = if job.0 == 0 { String::new() } else { format!(" of job {}", job.0) };
        let summary = format!(
            "node {} ({}) was lost while a PMI fence{of_job} (epoch {epoch}) from node {} ({}) passed through it: the fence cannot complete",
            via.0,
            nodes.host(via),
            node.0,
            nodes.host(node)
        );
        self.verdict.record_node_lost(summary);
        self.jobs.kill_all(fx, libc::SIGKILL);
    }

    /// A daemon's link broke: its processes are gone — and those of every
    /// node below it in the tree — and the jobs using them cannot go on.
    fn node_lost(&mut self, fx: &mut dyn RunEffects, node: NodeId, error: String) {
        let nodes = &fx.shared().nodes;
        // A drained node's daemon that left (`dpm boot --drain`) ran nothing.
        if !nodes.contains(node) || nodes.state(node) == Some(NodeState::Released) {
            return;
        }
        let host = nodes.host(node).to_string();
        self.node_lost_because(fx, node, format!("node {} ({host}) was lost: {error}", node.0));
    }

    /// `node` and its subtree are gone; `summary` says why (the run's
    /// failure, if it is the first).
    fn node_lost_because(&mut self, fx: &mut dyn RunEffects, node: NodeId, summary: String) {
        let nodes = &mut fx.shared().nodes;
        if !nodes.contains(node) {
            return;
        }
        // Nodes below it waiting to re-attach (`NodeTable::detach`) run on.
        let lost: Vec<NodeId> = nodes.subtree(node).into_iter().filter(|&n| nodes.state(n) != Some(NodeState::Detached)).collect();
        for &n in &lost {
            nodes.set_state(n, NodeState::Lost);
        }
        effects::with_pool(fx, |pool, nodes, pfx| pool.on_nodes_lost(pfx, nodes, &lost));
        let affected = self.jobs.lose_nodes(&mut fx.shared().nodes, &lost);
        if affected.is_empty() {
            // None of its ranks ran there: the run goes on (another run of
            // a boot, or one whose nodes there were idle); the node takes
            // nothing new. After the run, daemons going away is expected.
            return;
        }
        self.verdict.record_node_lost(summary);
        self.jobs.kill_all(fx, libc::SIGKILL);
        for job in affected {
            self.check_done(fx, job);
        }
    }

    /// A job whose every rank has ended is over: its daemons forget it, its
    /// names are withdrawn, its collectives fail, its slots were given back
    /// (each as its rank ended: `NodeTable::release`), and warm spawn hears of it.
    fn check_done(&mut self, fx: &mut dyn RunEffects, job: JobId) {
        let Some(mut j) = self.jobs.remove_done(job) else { return };
        self.kvs.remove_job(job);
        tracing::debug!(%job, "job ended");
        if let Some((node, request)) = j.take_spawn_request() {
            fx.send(node, ToDaemon::SpawnDone { request, result: Err(format!("{job} ended before all its processes started")), errcodes: Vec::new() });
        }
        for &d in j.daemons() {
            fx.send(d, ToDaemon::Forget { job });
        }
        fx.shared().route(job, None);
        fx.shared().jobs.remove(&job);
        fx.shared().ranks.remove(&job);
        names::job_ended(fx, job, j.kvsname());
        // The claims its spawns were making go, then the pool made for them.
        for orphan in self.warm.claims_of(job) {
            self.warm_drop(fx, orphan, None);
        }
        let (warm, cx) = self.warm_parts();
        warm.parent_ended(&cx, fx, job);
        let out = fx.shared().connects_job_ended(job);
        send_all(fx, out);
        send_all(fx, self.connects.job_ended(job));
        if j.spawned() && !j.pool() {
            let (warm, cx) = self.warm_parts();
            warm.job_ended(&cx, fx);
        }
        if j.alone_since().is_some() || j.pool() {
            return; // its failure was its own (or a pooled job's); its ranks are nobody's business
        }
        let terminated = j.terminated(job, self.verdict.failed_rank());
        if terminated > 0 {
            self.verdict.terminated.push((job, terminated));
        }
    }

    /// The tree this run uses is going away (`why`: a node of the boot was
    /// lost): the run ends as after a lost node — `why` is its failure if
    /// it has none yet, every process gets SIGTERM, SIGKILL after the grace —
    /// without claiming that dpm got a signal (issue 26: a booted run whose
    /// node was lost first said "got SIGTERM; forwarding it").
    pub fn on_end(&mut self, fx: &mut dyn RunEffects, why: String) {
        self.end_with(fx, why);
        self.settle(fx);
    }

    fn end_with(&mut self, fx: &mut dyn RunEffects, why: String) {
        self.verdict.record_node_lost(why);
        self.jobs.kill_all(fx, libc::SIGTERM);
        fx.arm(Timer::KillGrace, self.settings.kill_grace);
    }

    /// dpm itself got `sig`: forward it to every process; a second signal
    /// kills at once, else SIGKILL follows after the grace.
    pub fn on_signal(&mut self, fx: &mut dyn RunEffects, sig: i32) {
        if sig == libc::SIGQUIT {
            return self.report_now(fx);
        }
        if sig == crate::run_table::states_signal() {
            return self.list_states(fx);
        }
        let name = signal_name(sig);
        if self.verdict.interrupted.is_some() {
            fx.say(&format!("dpm: got {name} again; killing every process now"));
            self.jobs.kill_all(fx, libc::SIGKILL);
        } else {
            self.verdict.interrupted = Some(sig);
            fx.say(&format!("dpm: got {name}; forwarding it to every process"));
            self.jobs.kill_all(fx, sig);
            fx.arm(Timer::KillGrace, self.settings.kill_grace);
        }
        self.settle(fx);
    }

    /// `dpm run` is stopping (Ctrl-Z: `stop`) or has been continued (`fg`):
    /// every process of the run gets SIGSTOP or SIGCONT; the jobs go on.
    pub fn on_stop(&mut self, fx: &mut dyn RunEffects, stop: bool) {
        let signal = if stop { libc::SIGSTOP } else { libc::SIGCONT };
        self.jobs.signal_all(fx, signal);
        // And the pooled jobs made for it (the tree's pool holds them).
        let owner = self.settings.owner;
        effects::with_pool(fx, |pool, _, pfx| pool.signal_made_for(pfx, owner, signal));
    }

    /// dpm's stdin: to the rank that reads it (empty: end of input).
    pub fn on_stdin(&mut self, fx: &mut dyn RunEffects, data: Vec<u8>) {
        if let Some((job, node)) = self.jobs.stdin_target() {
            fx.send(node, ToDaemon::Stdin { job, data });
        }
    }

    /// A deadline armed with [`RunEffects::arm`] has come.
    pub fn on_timer(&mut self, fx: &mut dyn RunEffects, timer: Timer) {
        match timer {
            Timer::Timeout if !self.verdict.timed_out => {
                let Some(timeout) = self.timeout else { return };
                self.verdict.timed_out = true;
                // A SIGQUIT's reports still awaited: the timeout's are asked anew.
                self.reports = None;
                let stacks = match self.settings.on_timeout {
                    TimeoutReport::Nothing => None,
                    TimeoutReport::State => Some(false),
                    TimeoutReport::Stacks => Some(true),
                };
                self.reports = stacks.and_then(|stacks| report::Reports::ask(&self.jobs, fx, stacks));
                if self.reports.is_some() {
                    fx.say(&format!("dpm: job timed out after {} s; its ranks, before they are killed:", timeout.as_secs_f64()));
                    fx.arm(Timer::Reports, report::REPORT_WAIT);
                } else {
                    fx.say(&format!("dpm: job timed out after {} s; killing it", timeout.as_secs_f64()));
                    self.kill_at_timeout(fx);
                }
            }
            Timer::Reports => {
                if let Some(reports) = self.reports.take() {
                    reports.give_up(fx, &self.jobs);
                    self.reports_done(fx);
                }
            }
            Timer::Listing => self.listed_if_done(fx, true),
            Timer::Timeout => {}
            Timer::KillGrace => self.jobs.kill_all(fx, libc::SIGKILL),
            Timer::WarmRefill => {
                let (warm, cx) = self.warm_parts();
                warm.on_refill_timer(&cx, fx);
            }
            Timer::WarmLearn => {
                let (warm, cx) = self.warm_parts();
                warm.on_learn_timer(&cx, fx);
            }
            Timer::WarmNext => {
                let (warm, cx) = self.warm_parts();
                warm.on_next_timer(&cx, fx);
            }
        }
        self.settle(fx);
    }

    /// SIGQUIT (Ctrl-\) to `dpm run`: every live rank's state and stack,
    /// as at a `--timeout` with `--get-stack-traces`; the run goes on.
    fn report_now(&mut self, fx: &mut dyn RunEffects) {
        if self.reports.is_some() || self.verdict.ending() {
            return;
        }
        self.reports = report::Reports::ask(&self.jobs, fx, true);
        if self.reports.is_some() {
            fx.say("dpm: got SIGQUIT; the run's ranks (the run goes on):");
            fx.arm(Timer::Reports, report::REPORT_WAIT);
        }
    }

    /// A tool asks for the ranks' PMI states in the run's table
    /// (`report::Listing`); one listing at a time.
    fn list_states(&mut self, fx: &mut dyn RunEffects) {
        if self.listing.is_none() {
            self.listing = Some(report::Listing::ask(&self.jobs, fx));
            fx.arm(Timer::Listing, report::LIST_WAIT);
            self.listed_if_done(fx, false);
        }
    }

    /// The listing is over once every state is in, or (`waited`) at its bound.
    fn listed_if_done(&mut self, fx: &mut dyn RunEffects, waited: bool) {
        if waited || self.listing.as_ref().is_some_and(report::Listing::done) {
            if let Some(listing) = self.listing.take() {
                listing.finish(fx, &self.jobs, self.settings.owner);
            }
        }
    }

    /// The reports are all in or their wait is over: at the timeout, the kill.
    fn reports_done(&mut self, fx: &mut dyn RunEffects) {
        if self.verdict.timed_out {
            self.kill_at_timeout(fx);
        }
    }

    /// `--timeout`: SIGTERM to every job, SIGKILL after the grace.
    fn kill_at_timeout(&mut self, fx: &mut dyn RunEffects) {
        self.jobs.kill_all(fx, libc::SIGTERM);
        fx.arm(Timer::KillGrace, self.settings.kill_grace);
    }

    /// The daemons' stream ended: nothing more will be heard of any job.
    pub fn on_daemons_gone(&mut self, fx: &mut dyn RunEffects) {
        self.verdict.record(1, "dpm: the node daemon went away".into(), None);
        self.finish(fx);
    }

    /// Finish the run if no job is left (after its first launch, or an
    /// event): the driver calls this once its jobs are launched.
    pub fn settle(&mut self, fx: &mut dyn RunEffects) {
        if self.jobs.is_empty() && self.exit.is_none() {
            self.finish(fx);
        }
        #[cfg(test)]
        self.check_invariants(fx.shared());
    }

    /// Panics if the run's parts do not hold together, nor with the tree's
    /// (`shared`): see `invariants::check`.
    pub fn check_invariants(&self, shared: &TreeShared) {
        let parts = invariants::Parts {
            jobs: &self.jobs,
            warm: &self.warm,
            connects: &self.connects,
            kvs: &self.kvs,
            owner: self.settings.owner,
            over: self.exit.is_some(),
        };
        invariants::check(&parts, shared);
    }

    /// This run as the tree's invariants see it ([`TreeShared::check_invariants`]).
    pub fn view(&self) -> RunView {
        let held = self.jobs.iter().flat_map(|(_, j)| j.slots().held_nodes().collect::<Vec<_>>()).collect();
        RunView { owner: self.settings.owner, jobs: self.jobs.ids(), held }
    }

    /// The exit status, after the final word on stderr. Jobs the daemons
    /// never reported the end of (they went away) give back their slots here.
    fn finish(&mut self, fx: &mut dyn RunEffects) {
        warm::release(&self.settings, fx, self.verdict.ending());
        for id in self.jobs.take_all(&mut fx.shared().nodes) {
            fx.shared().route(id, None);
            fx.shared().jobs.remove(&id);
            fx.shared().ranks.remove(&id);
            let out = fx.shared().connects_job_ended(id);
            send_all(fx, out);
        }
        self.warm.summary(&self.settings, fx);
        let (code, line) = self.verdict.conclude();
        if let Some(line) = line {
            fx.say(&line);
        }
        self.exit = Some(code);
        fx.finished(code);
    }
}

fn send_all(fx: &mut dyn RunEffects, out: Vec<(NodeId, ToDaemon)>) {
    for (node, msg) in out {
        fx.send(node, msg);
    }
}
