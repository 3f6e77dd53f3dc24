//! The tree's pool: the one owner of every unclaimed warm-spawn job.
//!
//! [`Pool`] is part of [`super::TreeShared`], beside the runs. A run that
//! wants pooled jobs of a spawn shape plans and places them as a cold spawn
//! would, and hands each to [`Pool::launch`]: from then on the pool owns it
//! — it launches it, serves it (starts, fences, the KVS root of its
//! `MPI_Init`, output held for the claim, its end) and evicts it — until a
//! spawn of its shape claims it ([`Pool::take`]): the job moves to the
//! claiming run in that one event, with its state as served so far, and
//! its route is re-pointed there. The tree level (`crate::tree::Tree`)
//! hands the pool every message about a job no run routes (at once and in
//! order) and carries out what it does ([`PoolEffects`]); its idle deadline
//! comes back through [`PoolEffects::wake_at`] and is answered with
//! [`Pool::on_timer`].
//!
//! A pooled job is made for the spawns of one run (its *maker*): only that
//! run claims it while the job that first spawned its shape goes, and it
//! claims its own before any other. When that job ends, or the run does,
//! the job is *kept* for any later spawn of its shape by any run of the
//! tree ([`Pool::release`]: a boot's `--warm-spawn=N`, N per shape, for
//! `idle`), or killed (a plain run keeps none).
//!
//! Bounded: at most `limit` kept jobs per shape, each killed after `idle`
//! without a claim, at most [`super::MAX_HELD_OUTPUT`] bytes of output held
//! per job (beyond: killed); a pooled job that ends, aborts or cannot start
//! is killed and forgotten once its ranks' ends are heard. A pooled job
//! holds its slots, and gives them up to a placement that needs them
//! ([`Pool::drop_oldest`]: its maker's first, then kept ones).

use std::collections::BTreeMap;
use std::time::Duration;

use dpm_kvs::{JobId, NodeId, Rank};
use dpm_proto::{LaunchJob, RankExit, Stream, ToDaemon, ToLauncher};

use super::job::{Job, RankEnd};
use super::shape::{Shape, MAX_HELD_OUTPUT};
use crate::kvs_root::KvsRoot;
use crate::node_table::NodeTable;

/// What the pool does to the world.
pub trait PoolEffects {
    /// A message for the daemon of `node`.
    fn send(&mut self, node: NodeId, msg: ToDaemon);
    /// Call [`Pool::on_timer`] at `at` (µs since the epoch); again: moved.
    fn wake_at(&mut self, at: u64);
    /// One line of dpm's own for the console of the run of `owner` (if it
    /// still goes): a warm-spawn line of a pooled job it made.
    fn say(&mut self, owner: u32, line: &str);
    /// A pooled job made for the run of `owner` waits for its claim on
    /// every node: that run may start the next one ([`Pool::starting`]).
    fn ready(&mut self, owner: u32);
}

/// A [`PoolEffects`] that collects what the pool does (a run applies it
/// through its own effects; tests read it).
#[derive(Debug, Default)]
pub struct PoolOutbox {
    pub sent: Vec<(NodeId, ToDaemon)>,
    pub wake: Option<u64>,
    pub said: Vec<(u32, String)>,
    pub ready: Vec<u32>,
}

impl PoolEffects for PoolOutbox {
    fn send(&mut self, node: NodeId, msg: ToDaemon) {
        self.sent.push((node, msg));
    }
    fn wake_at(&mut self, at: u64) {
        self.wake = Some(at);
    }
    fn say(&mut self, owner: u32, line: &str) {
        self.said.push((owner, line.to_string()));
    }
    fn ready(&mut self, owner: u32) {
        self.ready.push(owner);
    }
}

/// The run a pooled job was made for, while it may claim it alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Maker {
    /// The pid of its `dpm run` (`Settings::owner`).
    pub(super) owner: u32,
    /// The job whose spawn's shape it was made for.
    pub(super) origin: JobId,
    /// Its warm-spawn lines are said (`-v`), else only traced.
    pub(super) verbose: bool,
}

/// One unclaimed pooled job.
struct Pooled {
    shape: Shape,
    job: Job,
    held: Vec<(NodeId, Rank, Stream, Vec<u8>)>,
    held_bytes: usize,
    /// `None`: kept for any run, since `since` (µs since the epoch).
    maker: Option<Maker>,
    since: u64,
    /// The job's nodes where every rank waits for the claim
    /// ([`ToLauncher::AwaitingClaim`]); all of them: it is ready.
    parked: Vec<NodeId>,
}

impl Pooled {
    fn ready(&self) -> bool {
        self.job.daemons().iter().all(|d| self.parked.contains(d))
    }
}

/// A pooled job taken by a run's claim: everything it needs to go on there.
pub(super) struct Taken {
    pub(super) job: JobId,
    pub(super) state: Job,
    pub(super) root: Option<crate::kvs_root::RootJob>,
    pub(super) held: Vec<(NodeId, Rank, Stream, Vec<u8>)>,
    pub(super) held_bytes: usize,
    /// It was kept (its maker's origin or run had ended), not made for this spawn's run.
    pub(super) kept: bool,
}

/// The tree's unclaimed pooled jobs (see the module documentation).
pub struct Pool {
    limit: usize,
    idle: Duration,
    /// Oldest first.
    jobs: Vec<(JobId, Pooled)>,
    /// Killed, until every rank's end is heard: then forgotten.
    dying: BTreeMap<JobId, Job>,
    /// The KVS root of the pooled jobs (not of the dying: they are gone).
    kvs: KvsRoot,
}

impl Pool {
    /// An empty pool keeping nothing for later runs, for a tree of `fanout`.
    pub fn new(fanout: usize, first: usize) -> Self {
        Pool { limit: 0, idle: Duration::ZERO, jobs: Vec::new(), dying: BTreeMap::new(), kvs: KvsRoot::new(fanout).with_first(first) }
    }

    /// Keep at most `limit` jobs per shape for later runs (0: none), each for `idle`.
    pub fn set_policy(&mut self, limit: usize, idle: Duration) {
        (self.limit, self.idle) = (limit, idle);
    }

    /// Nothing pooled or dying.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty() && self.dying.is_empty()
    }

    /// The pooled jobs (not dying), for `dpm status`: (job, kvsname, size,
    /// the run it was made for; `None`: kept for later runs).
    pub fn listed(&self) -> Vec<(JobId, String, u32, Option<u32>)> {
        self.jobs.iter().map(|(id, k)| (*id, k.job.kvsname().to_string(), k.job.size() as u32, k.maker.map(|m| m.owner))).collect()
    }

    /// The kvsnames of the jobs pooled and dying (live names: see `TreeShared::new_job_id`).
    pub fn kvsnames(&self) -> impl Iterator<Item = &str> {
        self.jobs.iter().map(|(_, k)| k.job.kvsname()).chain(self.dying.values().map(Job::kvsname))
    }

    /// It keeps jobs for later runs (a boot's `--warm-spawn`).
    pub(super) fn keeps(&self) -> bool {
        self.limit > 0
    }

    /// The most jobs it keeps per shape.
    pub(super) fn keep_limit(&self) -> usize {
        self.limit
    }

    /// A pooled job of `shape` is there, made for any run or kept.
    pub(super) fn has(&self, shape: &Shape) -> bool {
        self.jobs.iter().any(|(_, k)| k.shape == *shape)
    }

    /// Messages about `job` are this one's.
    pub fn holds(&self, job: JobId) -> bool {
        self.jobs.iter().any(|(j, _)| *j == job) || self.dying.contains_key(&job)
    }

    /// Pooled jobs of `shape` made for the run of `owner`.
    pub(super) fn count(&self, shape: &Shape, owner: u32) -> usize {
        self.jobs.iter().filter(|(_, k)| k.shape == *shape && k.maker.is_some_and(|m| m.owner == owner)).count()
    }

    /// Ranks of the pooled jobs made for the run of `owner` that are still
    /// starting (not yet waiting for their claim on every node).
    pub(super) fn starting(&self, owner: u32) -> usize {
        let starting = |k: &Pooled| k.maker.is_some_and(|m| m.owner == owner) && !k.ready();
        self.jobs.iter().filter(|(_, k)| starting(k)).map(|(_, k)| k.job.size()).sum()
    }

    fn room_for(&self, shape: &Shape) -> bool {
        self.jobs.iter().filter(|(_, k)| k.shape == *shape && k.maker.is_none()).count() < self.limit
    }

    fn idle_micros(&self) -> u64 {
        u64::try_from(self.idle.as_micros()).unwrap_or(u64::MAX)
    }

    fn say(fx: &mut dyn PoolEffects, maker: Option<Maker>, line: &str) {
        match maker {
            Some(m) if m.verbose => fx.say(m.owner, &format!("dpm: warm spawn: {line}")),
            _ => tracing::debug!("warm spawn: {line}"),
        }
    }

    /// Launch `launch` (planned and placed by its maker's run as a cold
    /// spawn of `shape` would be, awaiting its claim; `state` its ranks and
    /// slots) and own it from now on.
    pub(super) fn launch(&mut self, fx: &mut dyn PoolEffects, maker: Maker, shape: Shape, launch: LaunchJob, state: Job) {
        let job = launch.job;
        self.kvs.add_job(job, launch.kvs, state.daemons());
        super::launch::send_parts(launch, state.node_of(), state.daemons(), &mut |d, m| fx.send(d, m));
        self.jobs.push((job, Pooled { shape, job: state, held: Vec::new(), held_bytes: 0, maker: Some(maker), since: 0, parked: Vec::new() }));
    }

    /// Take the pooled job of `shape` the run of `owner` claims: the oldest
    /// made for it, else the oldest kept.
    pub(super) fn take(&mut self, shape: &Shape, owner: u32) -> Option<Taken> {
        let own = |k: &Pooled| k.shape == *shape && k.maker.is_some_and(|m| m.owner == owner);
        let kept = |k: &Pooled| k.shape == *shape && k.maker.is_none();
        let i = self.jobs.iter().position(|(_, k)| own(k)).or_else(|| self.jobs.iter().position(|(_, k)| kept(k)))?;
        let (job, k) = self.jobs.remove(i);
        let root = self.kvs.take_job(job);
        Some(Taken { job, state: k.job, root, held: k.held, held_bytes: k.held_bytes, kept: k.maker.is_none() })
    }

    /// The jobs made for the run of `owner` — only those for spawns of
    /// `origin` if given (it ended), else all (the run is over) — are kept
    /// for later runs if `keep` and there is room for their shape, else
    /// killed, quietly.
    pub(super) fn release(&mut self, fx: &mut dyn PoolEffects, nodes: &mut NodeTable, now: u64, owner: u32, origin: Option<JobId>, keep: bool) {
        let mine = |m: &Option<Maker>| m.is_some_and(|m| m.owner == owner && origin.is_none_or(|o| o == m.origin));
        let released: Vec<JobId> = self.jobs.iter().filter(|(_, k)| mine(&k.maker)).map(|(j, _)| *j).collect();
        for job in released {
            let Some(i) = self.jobs.iter().position(|(j, _)| *j == job) else { continue };
            let k = &self.jobs[i].1;
            if !(keep && k.shape.movable() && self.room_for(&k.shape)) {
                self.drop_job(fx, nodes, job);
                continue;
            }
            let k = &mut self.jobs[i].1;
            let maker = k.maker.take();
            k.since = now;
            let line = format!("kept {job} for later runs: {}", k.shape.describe(maker.map_or(job, |m| m.origin)));
            Self::say(fx, maker, &line);
            if let Some(first) = self.jobs.iter().filter(|(_, k)| k.maker.is_none()).map(|(_, k)| k.since).min() {
                fx.wake_at(first.saturating_add(self.idle_micros()));
            }
        }
    }

    /// Kill pooled job `job`: its slots are free at once; it is forgotten
    /// once its ranks' ends are heard.
    fn drop_job(&mut self, fx: &mut dyn PoolEffects, nodes: &mut NodeTable, job: JobId) {
        let Some(i) = self.jobs.iter().position(|(j, _)| *j == job) else { return };
        let (_, mut k) = self.jobs.remove(i);
        self.kvs.remove_job(job);
        k.job.release_slots(nodes);
        k.job.kill(job, libc::SIGKILL, &mut |d, m| fx.send(d, m));
        self.dying.insert(job, k.job);
    }

    /// Kill the oldest pooled job a placement of the run of `owner` may
    /// take (its own first, then kept ones; `None`: kept ones only); false
    /// if none.
    pub fn drop_oldest(&mut self, fx: &mut dyn PoolEffects, nodes: &mut NodeTable, owner: Option<u32>) -> bool {
        let own = self.jobs.iter().find(|(_, k)| k.maker.is_some_and(|m| Some(m.owner) == owner));
        let Some((job, maker)) = own.or_else(|| self.jobs.iter().find(|(_, k)| k.maker.is_none())).map(|(j, k)| (*j, k.maker)) else { return false };
        Self::say(fx, maker, &format!("dropped {job}: its slots are needed"));
        self.drop_job(fx, nodes, job);
        true
    }

    /// Kill every pooled job (the end of the tree: `dpm down`, a plain run's end).
    pub fn drop_all(&mut self, fx: &mut dyn PoolEffects, nodes: &mut NodeTable) {
        while let Some(&(job, _)) = self.jobs.first() {
            self.drop_job(fx, nodes, job);
        }
    }

    /// Send `signal` to the jobs made for the run of `owner` (Ctrl-Z, `fg`).
    pub(super) fn signal_made_for(&self, fx: &mut dyn PoolEffects, owner: u32, signal: i32) {
        for (job, k) in self.jobs.iter().filter(|(_, k)| k.maker.is_some_and(|m| m.owner == owner)) {
            k.job.signal(*job, signal, &mut |d, m| fx.send(d, m));
        }
    }

    /// Drop the unclaimed jobs with ranks on `on` (a drained node takes
    /// nothing new, and empties): ended as any dropped job is.
    pub fn drop_on(&mut self, fx: &mut dyn PoolEffects, nodes: &mut NodeTable, on: &[NodeId]) {
        let hit: Vec<JobId> = self.jobs.iter().filter(|(_, k)| k.job.daemons().iter().any(|d| on.contains(d))).map(|(j, _)| *j).collect();
        for job in hit {
            self.drop_job(fx, nodes, job);
        }
    }

    /// The tree re-formed around a lost node: the pooled jobs' KVS parts
    /// follow the new shape.
    pub fn reformed(&mut self, tops: &std::collections::BTreeSet<NodeId>) {
        self.kvs.reformed(tops);
    }

    /// Nodes `lost` are gone with their ranks: the pooled jobs they ran are
    /// killed, and a dying job whose ranks are all gone is forgotten.
    pub fn on_nodes_lost(&mut self, fx: &mut dyn PoolEffects, nodes: &mut NodeTable, lost: &[NodeId]) {
        let hit: Vec<JobId> = self.jobs.iter().filter(|(_, k)| k.job.daemons().iter().any(|d| lost.contains(d))).map(|(j, _)| *j).collect();
        for job in hit {
            self.drop_job(fx, nodes, job);
        }
        let dying: Vec<JobId> = self.dying.keys().copied().collect();
        for job in dying {
            let Some(j) = self.dying.get_mut(&job) else { continue };
            j.lose_nodes(nodes, lost);
            self.forget_if_done(fx, job);
        }
    }

    fn forget_if_done(&mut self, fx: &mut dyn PoolEffects, job: JobId) {
        let Some(j) = self.dying.get(&job).filter(|j| j.done()) else { return };
        for &d in j.daemons() {
            fx.send(d, ToDaemon::Forget { job });
        }
        self.dying.remove(&job);
    }

    /// The deadline asked for with [`PoolEffects::wake_at`] has come (`now`:
    /// µs since the epoch): kill the jobs kept for `idle` without a claim.
    pub fn on_timer(&mut self, fx: &mut dyn PoolEffects, nodes: &mut NodeTable, now: u64) {
        let idle = self.idle_micros();
        let kept = |k: &Pooled| k.maker.is_none();
        let old: Vec<JobId> = self.jobs.iter().filter(|(_, k)| kept(k) && now.saturating_sub(k.since) >= idle).map(|(j, _)| *j).collect();
        for job in old {
            tracing::info!(%job, "warm spawn: a kept job was not claimed within {:?}; killed", self.idle);
            self.drop_job(fx, nodes, job);
        }
        if let Some(first) = self.jobs.iter().filter(|(_, k)| kept(k)).map(|(_, k)| k.since).min() {
            fx.wake_at(first.saturating_add(idle));
        }
    }

    /// A message from `node` about a pooled or dying job, served here.
    pub fn on_message(&mut self, fx: &mut dyn PoolEffects, nodes: &mut NodeTable, node: NodeId, msg: ToLauncher) {
        let Some(job) = msg.job() else { return };
        if let Some(j) = self.dying.get_mut(&job) {
            match msg {
                ToLauncher::Exited(RankExit { rank, .. }) => j.end_rank(nodes, rank.0 as usize, RankEnd::Terminated),
                ToLauncher::LaunchFailed { .. } => j.end_unstarted(nodes),
                ToLauncher::Started { rank, pid, .. } => drop(j.started(rank, pid)),
                other => answer_unserved(fx, node, other),
            }
            return self.forget_if_done(fx, job);
        }
        let Some((_, k)) = self.jobs.iter_mut().find(|(j, _)| *j == job) else { return };
        // Its end is heard again as a dying job's.
        let end = matches!(msg, ToLauncher::Exited(_) | ToLauncher::LaunchFailed { .. }).then(|| msg.clone());
        let why = match msg {
            ToLauncher::Started { rank, pid, .. } => return drop(k.job.started(rank, pid)),
            ToLauncher::AwaitingClaim { .. } => {
                if !k.parked.contains(&node) && k.job.daemons().contains(&node) {
                    k.parked.push(node);
                    if let Some(m) = k.maker.filter(|_| k.ready()) {
                        fx.ready(m.owner);
                    }
                }
                return;
            }
            ToLauncher::FenceIn { epoch, count, puts, .. } => {
                return super::job::serve_fence(&mut self.kvs, &mut k.job, job, epoch, count, puts, &mut |n, m| fx.send(n, m))
            }
            ToLauncher::RingIn { seq, segment, .. } => return send_all(fx, self.kvs.ring_in(job, node, seq, segment)),
            ToLauncher::Kvs { to, msg } => return send_all(fx, self.kvs.route(to, msg)),
            // Its start's `--report-bindings` lines: its maker's stderr.
            ToLauncher::Note { line, .. } => return k.maker.map_or_else(|| tracing::info!(%job, "{line}"), |m| fx.say(m.owner, &line)),
            ToLauncher::Output { rank, stream, data, .. } => {
                if k.held_bytes + data.len() <= MAX_HELD_OUTPUT {
                    k.held_bytes += data.len();
                    k.held.push((node, rank, stream, data));
                    return;
                }
                format!("it wrote more than {MAX_HELD_OUTPUT} bytes before a claim")
            }
            ToLauncher::Exited(RankExit { rank, status, .. }) => format!("rank {} ended ({status:?}) before a claim", rank.0),
            ToLauncher::LaunchFailed { rank, error, .. } => {
                format!("rank {} could not be started ({}) before a claim", rank.0, dpm_pmi::sanitize::escape(&error))
            }
            ToLauncher::Abort { rank, code, .. } => format!("rank {} called MPI_Abort ({code}) before a claim", rank.0),
            other => return answer_unserved(fx, node, other),
        };
        tracing::info!(%job, "warm spawn: a pooled job was dropped: {why}");
        Self::say(fx, k.maker, &format!("dropped {job}: {why}"));
        self.drop_job(fx, nodes, job);
        if let Some(end) = end {
            self.on_message(fx, nodes, node, end);
        }
    }

    /// The node of each slot its jobs hold, pooled and dying (the tree's ledger).
    pub(super) fn held_nodes(&self) -> Vec<NodeId> {
        self.jobs.iter().map(|(_, k)| &k.job).chain(self.dying.values()).flat_map(|j| j.slots().held_nodes().collect::<Vec<_>>()).collect()
    }

    /// Panics if the pool's state does not hold together (tests, after every
    /// event): each job pooled once and never also dying, no job both pooled
    /// and owned by a run (`run_jobs`), the KVS root holding only pooled
    /// jobs, held output within its bound and counted right, a dying job's
    /// slots given back, a pooled job's slots held by its live ranks.
    pub fn check_invariants(&self, run_jobs: &[JobId]) {
        let mut seen = std::collections::BTreeSet::new();
        for (job, k) in &self.jobs {
            assert!(seen.insert(*job), "{job} pooled twice");
            assert!(!self.dying.contains_key(job), "{job} both pooled and dying");
            assert!(!run_jobs.contains(job), "{job} both pooled and a run's");
            assert!(k.held_bytes <= MAX_HELD_OUTPUT, "{job} holds {} bytes", k.held_bytes);
            assert_eq!(k.held_bytes, k.held.iter().map(|h| h.3.len()).sum::<usize>(), "{job}: held bytes miscounted");
            let (live, held) = k.job.live_and_held();
            assert_eq!(held, live, "{job}: slots held ≠ live ranks");
        }
        for (job, j) in &self.dying {
            assert!(!run_jobs.contains(job), "{job} both dying here and a run's");
            assert_eq!(j.live_and_held().1, 0, "{job} dying with slots held");
        }
        for job in self.kvs.jobs() {
            assert!(seen.contains(&job), "the pool's KVS root holds {job}, not pooled");
        }
    }
}

/// A request a pooled job cannot have made yet (it waits in `MPI_Init` for
/// its claim) still gets its one answer: an error.
fn answer_unserved(fx: &mut dyn PoolEffects, node: NodeId, msg: ToLauncher) {
    let why = || "a pooled job not yet claimed cannot ask this".to_string();
    match msg {
        ToLauncher::Name { request, .. } => fx.send(node, ToDaemon::NameDone { request, result: Err(why()) }),
        ToLauncher::Spawn { request, .. } => fx.send(node, ToDaemon::SpawnDone { request, result: Err(why()), errcodes: Vec::new() }),
        _ => {}
    }
}

fn send_all(fx: &mut dyn PoolEffects, out: crate::kvs_root::Outbox) {
    for (node, msg) in out {
        fx.send(node, msg);
    }
}
