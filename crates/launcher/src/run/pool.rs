//! The tree's pool of kept pooled jobs: warm-spawn jobs no run owns any
//! more, kept for a later spawn of the same shape by any run of the tree.
//!
//! [`Pool`] is part of [`super::TreeShared`], beside the runs, and the one
//! owner of every job it holds: it serves them itself — starts, fences, the
//! KVS root of their `MPI_Init` (rings, gets walking up), output (held for
//! the claim, bounded), ends — and evicts them. A run whose pooled job's
//! parent ends (or that ends with pooled jobs left) hands each unclaimed one
//! over ([`Run::hand_over`]): the job, its KVS root state and its held output
//! move here. A spawn claims from its own run's pool first, then from here
//! ([`Run::claim_kept`]): the job moves to the claiming run in that one event,
//! with its state as served so far, and its route is re-pointed there.
//!
//! The drivers only drive it: the controller's `dispatch` hands it the
//! messages of the jobs it holds, at once and in order, and sends what it
//! sends ([`PoolEffects`]); its idle deadline comes back through
//! [`PoolEffects::wake_at`] and is answered with [`Pool::on_timer`].
//!
//! A job handed over by a run still going keeps that run's route until the
//! run is over (what is already on its way there comes in order: the run
//! passes it here, [`Run::pass_to_kept`]), and only that run may claim it
//! until then.
//!
//! Bounded: at most `limit` jobs per shape (a job beyond is killed instead of
//! kept), each killed after `idle` without a claim, at most
//! [`super::MAX_HELD_OUTPUT`] bytes of output held per job (beyond: killed);
//! a kept job that ends, aborts or cannot start is killed and forgotten. A
//! kept job holds its slots, and gives them up to any run's placement that
//! needs them ([`Pool::drop_oldest`]).

use std::collections::BTreeMap;
use std::time::Duration;

use dpm_kvs::{JobId, NodeId, Rank};
use dpm_proto::{Stream, ToDaemon, ToLauncher};

use super::warm::{Entry, Shape};
use super::{Job, RankEnd, Run, RunEffects, MAX_HELD_OUTPUT};
use crate::kvs_root::KvsRoot;

/// What the pool does to the world.
pub trait PoolEffects {
    /// A message for the daemon of `node`.
    fn send(&mut self, node: NodeId, msg: ToDaemon);
    /// Call [`Pool::on_timer`] at `at` (µs since the epoch); again: moved.
    fn wake_at(&mut self, at: u64);
}

/// A [`PoolEffects`] that collects what the pool does (a run applies it
/// through its own effects; tests read it).
#[derive(Debug, Default)]
pub struct PoolOutbox {
    pub sent: Vec<(NodeId, ToDaemon)>,
    pub wake: Option<u64>,
}

impl PoolEffects for PoolOutbox {
    fn send(&mut self, node: NodeId, msg: ToDaemon) {
        self.sent.push((node, msg));
    }
    fn wake_at(&mut self, at: u64) {
        self.wake = Some(at);
    }
}

/// One job kept for a later run.
struct KeptJob {
    shape: Shape,
    job: Job,
    held: Vec<(NodeId, Rank, Stream, Vec<u8>)>,
    held_bytes: usize,
    /// When it was kept (µs since the epoch).
    since: u64,
    /// Handed over by the run of this owner, still going: its messages still
    /// reach that run (which passes them here), so only that run may claim it.
    unsettled_by: Option<u32>,
}

/// A kept job taken by a run's claim: everything it needs to go on there.
pub(super) struct Taken {
    pub(super) job: JobId,
    pub(super) shape: Shape,
    pub(super) state: Job,
    pub(super) root: Option<crate::kvs_root::RootJob>,
    pub(super) held: Vec<(NodeId, Rank, Stream, Vec<u8>)>,
    pub(super) held_bytes: usize,
}

/// The tree's kept pooled jobs (see the module documentation).
pub struct Pool {
    limit: usize,
    idle: Duration,
    /// Oldest first.
    jobs: Vec<(JobId, KeptJob)>,
    /// Killed, until every rank's end is heard: then forgotten.
    dying: BTreeMap<JobId, Job>,
    /// The KVS root of the jobs kept (not of the dying: they are gone).
    kvs: KvsRoot,
}

impl Pool {
    /// An empty pool keeping nothing, for a tree of `fanout`.
    pub fn new(fanout: usize) -> Self {
        Pool { limit: 0, idle: Duration::ZERO, jobs: Vec::new(), dying: BTreeMap::new(), kvs: KvsRoot::new(fanout) }
    }

    /// Keep at most `limit` jobs per shape (0: none), each for `idle`.
    pub fn set_policy(&mut self, limit: usize, idle: Duration) {
        (self.limit, self.idle) = (limit, idle);
    }

    /// Nothing kept or dying.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty() && self.dying.is_empty()
    }

    /// The jobs kept (not dying), for `dpm status`: (job, kvsname, size).
    pub fn listed(&self) -> Vec<(JobId, String, u32)> {
        self.jobs.iter().map(|(id, k)| (*id, k.job.kvsname.clone(), k.job.ranks.len() as u32)).collect()
    }

    /// The kvsnames of the jobs kept and dying (live names: see `TreeShared::new_job_id`).
    pub fn kvsnames(&self) -> impl Iterator<Item = &str> {
        self.jobs.iter().map(|(_, k)| k.job.kvsname.as_str()).chain(self.dying.values().map(|j| j.kvsname.as_str()))
    }

    /// Messages about `job` are this one's.
    pub fn holds(&self, job: JobId) -> bool {
        self.jobs.iter().any(|(j, _)| *j == job) || self.dying.contains_key(&job)
    }

    fn room_for(&self, shape: &Shape) -> bool {
        self.jobs.iter().filter(|(_, k)| k.shape == *shape).count() < self.limit
    }

    fn idle_micros(&self) -> u64 {
        u64::try_from(self.idle.as_micros()).unwrap_or(u64::MAX)
    }

    /// Keep `job` (its state, KVS root state and held output) from `now`,
    /// handed over by the run of `owner`, still going.
    #[allow(clippy::too_many_arguments)]
    fn keep(
        &mut self,
        fx: &mut dyn PoolEffects,
        now: u64,
        owner: u32,
        shape: Shape,
        job: JobId,
        state: Job,
        root: Option<crate::kvs_root::RootJob>,
        held: Vec<(NodeId, Rank, Stream, Vec<u8>)>,
        held_bytes: usize,
    ) {
        if let Some(root) = root {
            self.kvs.put_job(job, root);
        }
        self.jobs.push((job, KeptJob { shape, job: state, held, held_bytes, since: now, unsettled_by: Some(owner) }));
        // The oldest is due first; a later one re-arms when it comes.
        let first = self.jobs.first().map_or(now, |(_, k)| k.since);
        fx.wake_at(first.saturating_add(self.idle_micros()));
    }

    /// Take the oldest kept job of `shape` the run of `owner` may claim.
    fn take(&mut self, shape: &Shape, owner: u32) -> Option<Taken> {
        let i = self.jobs.iter().position(|(_, k)| k.shape == *shape && k.unsettled_by.is_none_or(|o| o == owner))?;
        let (job, k) = self.jobs.remove(i);
        let root = self.kvs.take_job(job);
        Some(Taken { job, shape: k.shape, state: k.job, root, held: k.held, held_bytes: k.held_bytes })
    }

    /// The run that handed `job` over is over: its messages come here now.
    fn settle(&mut self, job: JobId) {
        if let Some((_, k)) = self.jobs.iter_mut().find(|(j, _)| *j == job) {
            k.unsettled_by = None;
        }
    }

    /// Kill kept job `job`: its slots are free at once; it is forgotten once
    /// its ranks' ends are heard.
    fn drop_job(&mut self, fx: &mut dyn PoolEffects, job: JobId) {
        let Some(i) = self.jobs.iter().position(|(j, _)| *j == job) else { return };
        let (_, mut k) = self.jobs.remove(i);
        self.kvs.remove_job(job);
        for r in 0..k.job.ranks.len() {
            k.job.slots.release(r);
        }
        for &d in &k.job.daemons {
            fx.send(d, ToDaemon::Signal { job, signal: libc::SIGKILL });
        }
        k.job.killing = true;
        self.dying.insert(job, k.job);
    }

    /// Kill the oldest kept job (a placement needs its slots); false if none.
    pub fn drop_oldest(&mut self, fx: &mut dyn PoolEffects) -> bool {
        let Some(&(job, _)) = self.jobs.first() else { return false };
        tracing::debug!(%job, "warm spawn: a kept job's slots are needed");
        self.drop_job(fx, job);
        true
    }

    /// Kill every kept job (the end of the tree: `dpm down`).
    pub fn drop_all(&mut self, fx: &mut dyn PoolEffects) {
        while self.drop_oldest(fx) {}
    }

    /// The deadline asked for with [`PoolEffects::wake_at`] has come (`now`:
    /// µs since the epoch): kill the jobs kept for `idle` without a claim.
    pub fn on_timer(&mut self, fx: &mut dyn PoolEffects, now: u64) {
        let idle = self.idle_micros();
        let old: Vec<JobId> = self.jobs.iter().filter(|(_, k)| now.saturating_sub(k.since) >= idle).map(|(j, _)| *j).collect();
        for job in old {
            tracing::info!(%job, "warm spawn: a kept job was not claimed within {:?}; killed", self.idle);
            self.drop_job(fx, job);
        }
        if let Some((_, k)) = self.jobs.first() {
            fx.wake_at(k.since.saturating_add(idle));
        }
    }

    /// A message from `node` about a kept or dying job, served here.
    pub fn on_message(&mut self, fx: &mut dyn PoolEffects, node: NodeId, msg: ToLauncher) {
        let Some(job) = msg.job() else { return };
        if let Some(j) = self.dying.get_mut(&job) {
            match msg {
                ToLauncher::Exited { rank, .. } => j.end_rank(rank.0 as usize, RankEnd::Terminated),
                ToLauncher::LaunchFailed { .. } => {
                    for r in 0..j.ranks.len() {
                        if j.ranks[r].pid.is_none() {
                            j.end_rank(r, RankEnd::Terminated);
                        }
                    }
                }
                ToLauncher::Started { rank, pid, .. } => {
                    if let Some(r) = j.ranks.get_mut(rank.0 as usize) {
                        r.pid = Some(pid);
                    }
                }
                other => answer_unserved(fx, node, other),
            }
            if j.done() {
                for &d in &j.daemons {
                    fx.send(d, ToDaemon::Forget { job });
                }
                self.dying.remove(&job);
            }
            return;
        }
        let Some((_, k)) = self.jobs.iter_mut().find(|(j, _)| *j == job) else { return };
        // Its end is heard again as a dying job's.
        let end = matches!(msg, ToLauncher::Exited { .. } | ToLauncher::LaunchFailed { .. }).then(|| msg.clone());
        let why = match msg {
            ToLauncher::Started { rank, pid, .. } => {
                if let Some(r) = k.job.ranks.get_mut(rank.0 as usize) {
                    r.pid = Some(pid);
                }
                return;
            }
            ToLauncher::FenceIn { epoch, count, puts, .. } => {
                return super::jobs::serve_fence(&mut self.kvs, &mut k.job, job, epoch, count, puts, &mut |n, m| fx.send(n, m))
            }
            ToLauncher::RingIn { seq, segment, .. } => return send_all(fx, self.kvs.ring_in(job, node, seq, segment)),
            ToLauncher::Kvs { to, msg } => return send_all(fx, self.kvs.route(to, msg)),
            ToLauncher::Output { rank, stream, data, .. } => {
                if k.held_bytes + data.len() <= MAX_HELD_OUTPUT {
                    k.held_bytes += data.len();
                    k.held.push((node, rank, stream, data));
                    return;
                }
                "said too much"
            }
            ToLauncher::Exited { .. } | ToLauncher::LaunchFailed { .. } | ToLauncher::Abort { .. } => "ended",
            other => return answer_unserved(fx, node, other),
        };
        tracing::info!(%job, "warm spawn: a kept job {why} before a claim; killed");
        self.drop_job(fx, job);
        if let Some(end) = end {
            self.on_message(fx, node, end);
        }
    }

    /// Panics if the pool's state does not hold together (tests, after every
    /// event): each job kept once and never also dying, no job both kept and
    /// owned by a run (`run_jobs`), the KVS root holding only kept jobs, held
    /// output within its bound and counted right, a dying job's slots given
    /// back, a kept job's slots held by its live ranks.
    pub fn check_invariants(&self, run_jobs: &[JobId]) {
        let mut seen = std::collections::BTreeSet::new();
        for (job, k) in &self.jobs {
            assert!(seen.insert(*job), "{job} kept twice");
            assert!(!self.dying.contains_key(job), "{job} both kept and dying");
            assert!(!run_jobs.contains(job), "{job} both kept and a run's");
            assert!(k.held_bytes <= MAX_HELD_OUTPUT, "{job} holds {} bytes", k.held_bytes);
            assert_eq!(k.held_bytes, k.held.iter().map(|h| h.3.len()).sum::<usize>(), "{job}: held bytes miscounted");
            let live = k.job.ranks.iter().filter(|r| r.end.is_none()).count();
            assert_eq!(k.job.slots.held(), live, "{job}: slots held ≠ live ranks");
        }
        for (job, j) in &self.dying {
            assert!(!run_jobs.contains(job), "{job} both dying here and a run's");
            assert_eq!(j.slots.held(), 0, "{job} dying with slots held");
        }
        for job in self.kvs.jobs() {
            assert!(seen.contains(&job), "the pool's KVS root holds {job}, not kept");
        }
    }
}

/// A request a kept job cannot have made yet (it waits in `MPI_Init` for its
/// claim) still gets its one answer: an error.
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

/// Carry out what the pool did in a run's event through the run's effects.
pub(super) fn with_pool<T>(fx: &mut dyn RunEffects, event: impl FnOnce(&mut Pool, &mut dyn PoolEffects) -> T) -> T {
    let mut out = PoolOutbox::default();
    let t = event(&mut fx.shared().pool, &mut out);
    for (node, msg) in out.sent {
        fx.send(node, msg);
    }
    if let Some(at) = out.wake {
        fx.wake_pool(at);
    }
    t
}

impl Run {
    /// Hand pooled job `job` (unclaimed) over to the tree's pool, if it
    /// keeps jobs of its shape; false if not (the caller kills it).
    pub(super) fn hand_over(&mut self, fx: &mut dyn RunEffects, job: JobId) -> bool {
        let Some(entry) = self.warm.entries.iter().find(|e| e.job == job && e.claim.is_none()) else { return false };
        let keepable = entry.shape.movable() && self.jobs.get(&job).is_some_and(|j| j.pool && !j.killing) && !self.verdict.ending();
        if !keepable || !fx.shared().pool.room_for(&entry.shape) {
            return false;
        }
        let (Some(Entry { shape, held, held_bytes, origin, .. }), Some(state)) = (self.warm.take(job), self.jobs.remove(&job)) else { return false };
        self.warm_say(fx, &format!("kept {job} for later runs: {}", shape.describe(origin)));
        let root = self.kvs.take_job(job);
        self.written.retain(|(_, j), _| *j != job);
        // Its route stays this run's until the run is over (`settle_kept`):
        // what is on its way here comes in order, and is passed on.
        self.handed.push(job);
        let (now, owner) = (fx.now_micros(), self.settings.owner);
        fx.shared().jobs.remove(&job); // `dpm status` lists it as the boot's (`Pool::listed`)
        with_pool(fx, |pool, pfx| pool.keep(pfx, now, owner, shape, job, state, root, held, held_bytes));
        true
    }

    /// The tree keeps a job of `shape`: it becomes this run's pooled job, for
    /// spawns by `parent`, in this one event — its state as the pool served
    /// it, its KVS root state, its held output; its route is this run's now.
    pub(super) fn claim_kept(&mut self, fx: &mut dyn RunEffects, shape: &Shape, parent: JobId) {
        let Some(Taken { job, shape, state, root, held, held_bytes }) = fx.shared().pool.take(shape, self.settings.owner) else { return };
        self.handed.retain(|&j| j != job);
        if let Some(root) = root {
            self.kvs.put_job(job, root);
        }
        fx.route(job, true);
        let listed = (self.settings.owner, state.kvsname.clone(), state.ranks.len() as u32);
        fx.shared().jobs.insert(job, listed);
        self.jobs.insert(job, state);
        self.warm.entries.push(Entry::adopted(shape, job, parent, held, held_bytes));
    }

    /// A message about a job this run handed over (its route is still
    /// this run's): to the pool. False if `msg` is not about one.
    pub(super) fn pass_to_kept(&mut self, fx: &mut dyn RunEffects, node: NodeId, msg: &ToLauncher) -> bool {
        if !msg.job().is_some_and(|j| self.handed.contains(&j) && !self.jobs.contains_key(&j)) {
            return false;
        }
        with_pool(fx, |pool, pfx| pool.on_message(pfx, node, msg.clone()));
        true
    }

    /// The run is over: the jobs it handed over are the pool's alone now
    /// (their messages go there: `controller::dispatch`).
    pub(super) fn settle_kept(&mut self, fx: &mut dyn RunEffects) {
        for job in std::mem::take(&mut self.handed) {
            fx.route(job, false);
            fx.shared().pool.settle(job);
        }
    }

    /// Kill the tree's oldest kept job for a placement; false if none.
    pub(super) fn drop_kept(&mut self, fx: &mut dyn RunEffects) -> bool {
        with_pool(fx, |pool, pfx| pool.drop_oldest(pfx))
    }
}
