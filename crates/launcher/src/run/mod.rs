//! One run as a plain state machine: the run reactor.
//!
//! A [`Run`] owns a `dpm run`'s jobs (its first job and every job it
//! spawned): rank states, fence tallies ([`dpm_kvs::FenceTally`]), the KVS root,
//! spawn requests, stdin routing, the failure policy, the first failure and
//! the exit status. Each handler takes one event — a daemon message
//! ([`Run::on_message`]), a signal, stdin data, a timer, the daemons going
//! away — as plain data, and acts only through [`RunEffects`]: messages to
//! nodes, console lines, timers, the end of the run. No I/O, no async, no
//! shared cells: a spawn's programs, directories and host files are looked
//! up in [`RunEffects::files`] (this machine's for a live run, a table in
//! tests), the random part of the kvsnames comes in with [`TreeShared::new`];
//! the async driver is [`crate::controller::Controller`]; tests drive a run
//! with [`Recorder`] and a virtual clock, and need nothing from the host.
//!
//! What all runs of one tree share ([`TreeShared`]: the name service, job
//! ids, the node table with its load, the jobs listed by `dpm status`) is
//! reached through [`RunEffects::shared`].
//!
//! Submodules: `effects` (the trait, [`Timer`], [`Recorder`]), `verdict`
//! (failure policy, first failure, exit status), `jobs` (a job's ranks:
//! starts, exits, aborts, lost nodes, fences, the end of a job), `spawn`,
//! `warm` (the run's warm-spawn policy and claims), `pool` (the tree's
//! unclaimed pooled jobs), `connect` (PMIx connect/disconnect
//! collectives), `tree_connect` (those naming jobs of other runs of the
//! tree), `invariants` (checked in tests).

mod connect;
mod effects;
mod invariants;
mod jobs;
mod kvsname;
mod pool;
mod shared;
mod spawn;
#[cfg(test)]
mod tests;
mod tree_connect;
mod verdict;
mod warm;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use dpm_kvs::{JobId, NodeId, Rank};
use dpm_proto::link::InProcessFd;
use dpm_proto::{LaunchJob, PmiMode, RequestId, ToDaemon, ToLauncher, OUTPUT_ACK_STEP};

use crate::kvs_root::KvsRoot;
use crate::node_table::{PlaceError, Reservation};
use crate::spawn::SpawnContext;
use jobs::{Job, RankEnd};
use spawn::SpawnAsk;

pub use effects::{Effect, Recorder, RunEffects, Timer};
pub use kvsname::{kvsname, open_mpi_family};
pub use pool::{Pool, PoolEffects, PoolOutbox};
pub use shared::TreeShared;
pub use tree_connect::{Contribution, TreeConnectEffects, TreeConnects};
pub use verdict::{parse_failure_policy, FailurePolicy, UnknownPolicy, Verdict};
pub use warm::{DEFAULT_WARM_SPAWN, MAX_HELD_OUTPUT, MAX_WARM_SPAWN, WARM_INFO_KEY};

/// Job-independent settings the run needs to create jobs.
pub struct Settings {
    pub label: bool,
    pub kill_grace: Duration,
    pub universe_size: i64,
    pub pmi_mode: PmiMode,
    /// Refuse spawns beyond the universe size instead of oversubscribing.
    pub no_oversubscribe: bool,
    pub report_placement: bool,
    pub spawn: SpawnContext,
    /// Slots of each node: the node table of a plain run's own tree is made
    /// of them ([`crate::controller::Shared::for_run`]); a booted run uses
    /// the boot's table.
    pub node_slots: Vec<u32>,
    /// The daemon tree's fan-out: losing a node loses its subtree.
    pub fanout: usize,
    /// The pid of the `dpm run` this run is for (shown by `dpm status`).
    pub owner: u32,
    /// Warm spawn: pooled jobs per spawn shape (0: off unless a spawn asks).
    pub warm_spawn: usize,
    /// Say each warm-spawn claim, miss and refill (`-v`, `--report-placement`).
    pub warm_verbose: bool,
    /// Every job's binding (`-bind-to`…), applied by the daemons.
    pub binding: dpm_binding::BindPolicy,
}

/// A planned job that cannot be run as it is: refused before anything starts.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("{0} has no processes")]
    Empty(JobId),
    #[error("{job} has {size} ranks but {got} {what}")]
    Mismatch { job: JobId, size: u32, what: &'static str, got: usize },
    #[error("{job}: a process has rank {rank} (size {size}) or a rank twice")]
    BadRank { job: JobId, rank: u32, size: u32 },
    #[error("{job}: rank {rank} runs app {app}, but the job has {apps} apps")]
    BadApp { job: JobId, rank: u32, app: usize, apps: usize },
    #[error("{0}: {1}")]
    Placement(JobId, PlaceError),
}

/// See the module documentation.
pub struct Run {
    settings: Settings,
    policy: FailurePolicy,
    jobs: BTreeMap<JobId, Job>,
    verdict: Verdict,
    timeout: Option<Duration>,
    stdin_job: Option<JobId>,
    /// Each job's KVS design at the root: ring, tree store, routing.
    kvs: KvsRoot,
    /// Set once the run is over: dpm's exit status.
    exit: Option<i32>,
    warm: warm::WarmPool,
    /// Output written and not yet acknowledged, per node and job (below
    /// [`OUTPUT_ACK_STEP`]).
    written: HashMap<(NodeId, JobId), u64>,
    /// PMIx connect/disconnect collectives in flight (`connect`).
    connects: connect::Collectives,
}

impl Run {
    pub fn new(settings: Settings) -> Self {
        Run {
            kvs: KvsRoot::new(settings.fanout),
            settings,
            policy: FailurePolicy::default(),
            jobs: BTreeMap::new(),
            verdict: Verdict::default(),
            timeout: None,
            stdin_job: None,
            exit: None,
            warm: warm::WarmPool::default(),
            written: HashMap::new(),
            connects: connect::Collectives::default(),
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
        let slots = check(launch).and_then(|()| fx.shared().nodes.reserve(&launch.node_of).map_err(|e| LaunchError::Placement(launch.job, e)));
        slots.inspect_err(|e| self.verdict.record(2, format!("invalid job: {e}"), None))
    }

    /// A checked, placed job: register it and send each node its part.
    fn start_job(&mut self, fx: &mut dyn RunEffects, launch: LaunchJob, slots: Reservation, spawn_request: Option<(NodeId, RequestId)>) {
        let node_of = slots.node_of().to_vec();
        self.register(fx, &launch, slots, spawn_request);
        let daemons = self.jobs[&launch.job].daemons.clone();
        send_parts(launch, &node_of, &daemons, &mut |d, m| fx.send(d, m));
    }

    fn register(&mut self, fx: &mut dyn RunEffects, launch: &LaunchJob, slots: Reservation, spawn_request: Option<(NodeId, RequestId)>) {
        if launch.stdin_rank.is_some() {
            self.stdin_job = Some(launch.job);
        }
        let job = Job::new(launch, slots, spawn_request);
        self.kvs.add_job(launch.job, launch.kvs, &job.daemons);
        fx.route(launch.job, true);
        fx.shared().jobs.insert(launch.job, (self.settings.owner, launch.kvsname.clone(), launch.size));
        self.jobs.insert(launch.job, job);
        self.report_placement(fx, launch.job);
        let map = self.job_map(launch.job);
        fx.shared().connects.register(map);
    }

    /// `node`'s index among `job`'s nodes, numbered from 0 in rank order (as
    /// in the job's `PMI_process_mapping`; Hydra's proxy id, `%p`).
    pub fn job_node_index(&self, job: JobId, node: NodeId) -> Option<usize> {
        let node_of = self.jobs.get(&job)?.slots.node_of();
        let at = node_of.iter().position(|&n| n == node)?;
        crate::plan::job_node_numbers(node_of).get(at).map(|&i| i as usize)
    }

    /// `--report-placement`: where the ranks of `job` run.
    fn report_placement(&self, fx: &mut dyn RunEffects, job: JobId) {
        let Some(j) = self.jobs.get(&job).filter(|_| self.settings.report_placement) else { return };
        let size = j.ranks.len() as u32;
        for &d in &j.daemons {
            let ranks: Vec<u32> = (0..size).filter(|&r| j.slots.node(r as usize) == Some(d)).collect();
            let host = fx.shared().nodes.host(d).to_string();
            fx.say(&format!("dpm: {job} ({}, {size} ranks): ranks {} on {host}", j.kvsname, rank_ranges(&ranks)));
        }
    }

    /// `bytes` of `job`'s output from `node` were written to their
    /// destination (the driver reports it for each [`RunEffects::output`]):
    /// credit goes back to the node in steps of [`OUTPUT_ACK_STEP`], which
    /// keeps its output window open (flow control, see `dpm_proto::OUTPUT_WINDOW`).
    pub fn on_output_written(&mut self, fx: &mut dyn RunEffects, node: NodeId, job: JobId, bytes: u64) {
        if !self.jobs.contains_key(&job) {
            return; // over: its nodes forgot it
        }
        let step = self.written.entry((node, job)).or_default();
        *step += bytes;
        if *step >= OUTPUT_ACK_STEP {
            let bytes = std::mem::take(step);
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
            ToLauncher::Started { job, rank, pid } => self.started(fx, job, rank, pid),
            ToLauncher::LaunchFailed { job, rank, error, errno } => self.launch_failed(fx, job, rank, error, errno),
            ToLauncher::Output { job, rank, stream, data } => {
                if let Some(data) = self.warm_output(fx, node, job, rank, stream, data) {
                    fx.output(node, job, rank, stream, &data);
                }
            }
            ToLauncher::Exited { job, rank, pid, status, pmi, at } => self.exited(fx, job, rank, pid, status, pmi, at),
            ToLauncher::FenceIn { job, epoch, count, puts } => self.fence_in(fx, job, epoch, count, puts),
            ToLauncher::RingIn { job, seq, segment } => {
                let out = self.kvs.ring_in(job, node, seq, segment);
                send_all(fx, out);
            }
            ToLauncher::Kvs { to, msg } => {
                let out = self.kvs.route(to, msg);
                send_all(fx, out);
            }
            ToLauncher::Abort { job, rank, code, message } => self.abort(fx, job, rank, code, message),
            ToLauncher::Name { request, job, op } => self.name_op(fx, node, request, job, op),
            ToLauncher::Spawn { request, job, rank, preput, commands } => self.spawn(fx, SpawnAsk { node, request, parent: job, rank, preput, commands }),
            ToLauncher::Claimed { job, alive } => self.warm_claimed(fx, node, job, alive),
            ToLauncher::ParentAsked { job, rank } => self.warm_parent_asked(fx, job, rank),
            ToLauncher::Connect { request, nspaces, kind, data, ranks, group, .. } => self.connect(fx, node, request, &nspaces, &ranks, kind, group, data),
            ToLauncher::Trace { line } | ToLauncher::Note { line, .. } => fx.say(&line),
            ToLauncher::WatchTripped { job } => self.watch_tripped(fx, node, job),
        }
    }

    /// The PMIx watch of `node` saw a rank of `job` connect: an Open MPI
    /// rank served PMI-1/2, a singleton if left alone. The run ends (as
    /// [`Run::on_end`]) saying to use `--pmi pmix`, naming the program of
    /// the job's first rank on that node; once, whichever node says so
    /// first. A job launched without the watch is not ended.
    fn watch_tripped(&mut self, fx: &mut dyn RunEffects, node: NodeId, job: JobId) {
        let Some(j) = self.jobs.get_mut(&job) else { return };
        let Some(programs) = j.watched.take() else { return };
        let first = (0..j.ranks.len()).find(|&r| j.slots.node(r) == Some(node)).unwrap_or(0);
        let app = j.appnums.get(first).and_then(|&a| usize::try_from(a).ok()).unwrap_or(0);
        let exe = programs.get(app).or(programs.first()).map_or("?", String::as_str);
        self.end_with(fx, crate::pmi_choice::watch_tripped_message(exe));
    }

    /// The link to `node` broke (its daemon killed, its host lost, silent too
    /// long): that node and the subtree below it are gone.
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
        self.kill_all(fx, libc::SIGTERM);
        fx.arm(Timer::KillGrace, self.settings.kill_grace);
    }

    /// dpm itself got `sig`: forward it to every process; a second signal
    /// kills at once, else SIGKILL follows after the grace.
    pub fn on_signal(&mut self, fx: &mut dyn RunEffects, sig: i32) {
        let name = signal_name(sig);
        if self.verdict.interrupted.is_some() {
            fx.say(&format!("dpm: got {name} again; killing every process now"));
            self.kill_all(fx, libc::SIGKILL);
        } else {
            self.verdict.interrupted = Some(sig);
            fx.say(&format!("dpm: got {name}; forwarding it to every process"));
            self.kill_all(fx, sig);
            fx.arm(Timer::KillGrace, self.settings.kill_grace);
        }
        self.settle(fx);
    }

    /// `dpm run` is stopping (Ctrl-Z: `stop`) or has been continued (`fg`):
    /// every process of the run gets SIGSTOP or SIGCONT; the jobs go on.
    pub fn on_stop(&mut self, fx: &mut dyn RunEffects, stop: bool) {
        let signal = if stop { libc::SIGSTOP } else { libc::SIGCONT };
        for (&job, j) in &self.jobs {
            for &d in &j.daemons {
                fx.send(d, ToDaemon::Signal { job, signal });
            }
        }
        // And the pooled jobs made for it (the tree's pool holds them).
        let owner = self.settings.owner;
        pool::with_pool(fx, |pool, pfx| pool.signal_made_for(pfx, owner, signal));
    }

    /// dpm's stdin: to the rank that reads it (empty: end of input).
    pub fn on_stdin(&mut self, fx: &mut dyn RunEffects, data: Vec<u8>) {
        let Some(job) = self.stdin_job else { return };
        if let Some(node) = self.jobs.get(&job).and_then(|j| j.node(Rank(0))) {
            fx.send(node, ToDaemon::Stdin { job, data });
        }
    }

    /// A deadline armed with [`RunEffects::arm`] has come.
    pub fn on_timer(&mut self, fx: &mut dyn RunEffects, timer: Timer) {
        match timer {
            Timer::Timeout if !self.verdict.timed_out => {
                let Some(timeout) = self.timeout else { return };
                self.verdict.timed_out = true;
                fx.say(&format!("dpm: job timed out after {} s; killing it", timeout.as_secs_f64()));
                self.kill_all(fx, libc::SIGTERM);
                fx.arm(Timer::KillGrace, self.settings.kill_grace);
            }
            Timer::Timeout => {}
            Timer::KillGrace => self.kill_all(fx, libc::SIGKILL),
            Timer::WarmRefill => self.warm_topup(fx),
        }
        self.settle(fx);
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

    fn kill_all(&mut self, fx: &mut dyn RunEffects, sig: i32) {
        let jobs: Vec<JobId> = self.jobs.keys().copied().collect();
        for job in jobs {
            self.kill_job(fx, job, sig);
        }
    }

    fn kill_job(&mut self, fx: &mut dyn RunEffects, job: JobId, sig: i32) {
        let Some(j) = self.jobs.get_mut(&job) else { return };
        j.killing = true;
        for &d in &j.daemons {
            fx.send(d, ToDaemon::Signal { job, signal: sig });
        }
    }

    /// The host a rank runs on.
    fn host(&self, fx: &mut dyn RunEffects, job: JobId, rank: Rank) -> String {
        let node = self.jobs.get(&job).and_then(|j| j.node(rank));
        node.map_or_else(|| "?".to_string(), |n| fx.shared().nodes.host(n).to_string())
    }

    /// The exit status, after the final word on stderr. Jobs the daemons
    /// never reported the end of (they went away) give back their slots here.
    fn finish(&mut self, fx: &mut dyn RunEffects) {
        self.warm_release(fx);
        for (id, _) in std::mem::take(&mut self.jobs) {
            fx.route(id, false);
            fx.shared().jobs.remove(&id);
            let out = fx.shared().connects_job_ended(id);
            for (node, msg) in out {
                fx.send(node, msg);
            }
        }
        self.warm_summary(fx);
        let (code, line) = self.verdict.conclude();
        if let Some(line) = line {
            fx.say(&line);
        }
        self.exit = Some(code);
        fx.finished(code);
    }
}

/// The checks a job must pass before anything of it is sent.
fn check(launch: &LaunchJob) -> Result<(), LaunchError> {
    let (job, size) = (launch.job, launch.size);
    if size == 0 {
        return Err(LaunchError::Empty(job));
    }
    let mismatch = |what, got| LaunchError::Mismatch { job, size, what, got };
    if launch.node_of.len() != size as usize {
        return Err(mismatch("places", launch.node_of.len()));
    }
    if launch.appnums.len() != size as usize {
        return Err(mismatch("appnums", launch.appnums.len()));
    }
    let mut seen = vec![false; size as usize];
    for p in &launch.procs {
        let r = p.rank.0;
        match seen.get_mut(r as usize) {
            Some(s) if !*s => *s = true,
            _ => return Err(LaunchError::BadRank { job, rank: r, size }),
        }
        if p.app >= launch.apps.len() {
            return Err(LaunchError::BadApp { job, rank: r, app: p.app, apps: launch.apps.len() });
        }
    }
    if let Some(r) = launch.stdin_rank.filter(|r| r.0 >= size) {
        return Err(LaunchError::BadRank { job, rank: r.0, size });
    }
    Ok(())
}

/// Send each node in `daemons` its part of `launch` (rank `r` runs on `node_of[r]`).
fn send_parts(launch: LaunchJob, node_of: &[NodeId], daemons: &[NodeId], send: &mut dyn FnMut(NodeId, ToDaemon)) {
    for &d in daemons {
        let mut part = launch.clone();
        part.procs.retain(|p| node_of.get(p.rank.0 as usize) == Some(&d));
        part.stdin_rank = launch.stdin_rank.filter(|r| node_of.get(r.0 as usize) == Some(&d));
        send(d, ToDaemon::Launch(part));
    }
}

fn send_all(fx: &mut dyn RunEffects, out: crate::kvs_root::Outbox) {
    for (node, msg) in out {
        fx.send(node, msg);
    }
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
