//! Warm spawn across a boot's runs: pooled jobs kept by the tree after the
//! run that made them is over, for a later run's spawn of the same shape.
//!
//! [`Kept`] is part of [`super::TreeShared`], so every run of a tree reaches
//! it. A run whose pooled job's parent ends (or that ends with only pooled
//! jobs left) hands each unclaimed one over ([`Run::hand_over`]) instead of
//! killing it — the job's state, its KVS root state and its held output move
//! here, and its messages come here instead of to the run (the driver's
//! route; `controller::dispatch`). A run's spawn claims from its own pool
//! first, then from here ([`Run::claim_kept`]): the job moves to the
//! claiming run with what it said meanwhile, replayed there in order.
//!
//! Bounded: at most `limit` jobs per shape (a job beyond is killed instead of
//! kept), each killed after `idle` without a claim, at most
//! [`MAX_QUEUED`] messages and [`super::MAX_HELD_OUTPUT`] bytes of output
//! held per job (beyond: killed); a kept job that ends, aborts or cannot
//! start is killed and forgotten. A kept job holds its slots, and gives them
//! up to any run's placement that needs them ([`Kept::drop_oldest`]). Its
//! kills and forgets are an [`Outbox`]: the caller sends them (a run through
//! its effects, the boot server's keeper task down its links).

use std::collections::BTreeMap;
use std::time::Duration;

use dpm_kvs::{JobId, NodeId, Rank};
use dpm_proto::{Stream, ToDaemon, ToLauncher};

use super::warm::{Entry, Shape};
use super::{Job, RankEnd, Run, RunEffects, MAX_HELD_OUTPUT};
use crate::kvs_root::RootJob;

/// Messages for daemons: a dropped job's kill, an ended job's forget.
pub type Outbox = Vec<(NodeId, ToDaemon)>;

/// What a kept job may say before its claim besides output (starts, fences,
/// KVS traffic of its `MPI_Init`: a few per node).
pub const MAX_QUEUED: usize = 4096;

/// One job kept for a later run.
struct KeptJob {
    shape: Shape,
    job: Job,
    root: Option<RootJob>,
    held: Vec<(NodeId, Rank, Stream, Vec<u8>)>,
    held_bytes: usize,
    /// When it was kept (µs since the epoch).
    since: u64,
    /// Handed over by the run of this owner, still going: its messages still
    /// reach that run (which passes them here), so only that run may claim it.
    unsettled_by: Option<u32>,
    /// What its nodes said since, in order, and the bytes of output among it.
    queued: Vec<(NodeId, ToLauncher)>,
    queued_bytes: usize,
}

/// The tree's kept pooled jobs (see the module documentation).
#[derive(Default)]
pub struct Kept {
    limit: usize,
    idle: Duration,
    /// Oldest first.
    jobs: Vec<(JobId, KeptJob)>,
    /// Killed, until every rank's end is heard: then forgotten.
    dying: BTreeMap<JobId, Job>,
}

impl Kept {
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

    /// Messages about `job` are this one's.
    pub fn holds(&self, job: JobId) -> bool {
        self.jobs.iter().any(|(j, _)| *j == job) || self.dying.contains_key(&job)
    }

    fn room_for(&self, shape: &Shape) -> bool {
        self.jobs.iter().filter(|(_, k)| k.shape == *shape).count() < self.limit
    }

    /// Take the oldest kept job of `shape` the run of `owner` may claim.
    fn take(&mut self, shape: &Shape, owner: u32) -> Option<(JobId, KeptJob)> {
        let i = self.jobs.iter().position(|(_, k)| k.shape == *shape && k.unsettled_by.is_none_or(|o| o == owner))?;
        Some(self.jobs.remove(i))
    }

    /// The run that handed `job` over is over: its messages come here now.
    fn settle(&mut self, job: JobId) {
        if let Some((_, k)) = self.jobs.iter_mut().find(|(j, _)| *j == job) {
            k.unsettled_by = None;
        }
    }

    /// Kill kept job `job`: its slots are free at once; it is forgotten once
    /// its ranks' ends are heard.
    fn drop_job(&mut self, job: JobId, out: &mut Outbox) {
        let Some(i) = self.jobs.iter().position(|(j, _)| *j == job) else { return };
        let (_, mut k) = self.jobs.remove(i);
        for r in 0..k.job.ranks.len() {
            k.job.slots.release(r);
        }
        for &d in &k.job.daemons {
            out.push((d, ToDaemon::Signal { job, signal: libc::SIGKILL }));
        }
        k.job.killing = true;
        self.dying.insert(job, k.job);
    }

    /// Kill the oldest kept job (a placement needs its slots); false if none.
    pub fn drop_oldest(&mut self, out: &mut Outbox) -> bool {
        let Some(&(job, _)) = self.jobs.first() else { return false };
        tracing::debug!(%job, "warm spawn: a kept job's slots are needed");
        self.drop_job(job, out);
        true
    }

    /// Kill every kept job (`dpm down`).
    pub fn drop_all(&mut self) -> Outbox {
        let mut out = Vec::new();
        while self.drop_oldest(&mut out) {}
        out
    }

    /// Kill the jobs kept for `idle` without a claim (`now`: µs since the epoch).
    pub fn on_tick(&mut self, now: u64) -> Outbox {
        let idle = u64::try_from(self.idle.as_micros()).unwrap_or(u64::MAX);
        let old: Vec<JobId> = self.jobs.iter().filter(|(_, k)| now.saturating_sub(k.since) >= idle).map(|(j, _)| *j).collect();
        let mut out = Vec::new();
        for job in old {
            tracing::info!(%job, "warm spawn: a kept job was not claimed within {:?}; killed", self.idle);
            self.drop_job(job, &mut out);
        }
        out
    }

    /// A message from `node` about a kept or dying job.
    pub fn on_message(&mut self, node: NodeId, msg: ToLauncher) -> Outbox {
        let mut out = Vec::new();
        let job = match &msg {
            ToLauncher::Exited { job, .. } | ToLauncher::LaunchFailed { job, .. } | ToLauncher::Abort { job, .. } => *job,
            ToLauncher::Output { job, .. } | ToLauncher::Started { job, .. } | ToLauncher::FenceIn { job, .. } | ToLauncher::RingIn { job, .. } => *job,
            ToLauncher::Kvs { msg, .. } => msg.job(),
            _ => return out,
        };
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
                _ => {}
            }
            if j.done() {
                for &d in &j.daemons {
                    out.push((d, ToDaemon::Forget { job }));
                }
                self.dying.remove(&job);
            }
            return out;
        }
        let Some((_, k)) = self.jobs.iter_mut().find(|(j, _)| *j == job) else { return out };
        let over = match &msg {
            ToLauncher::Exited { .. } | ToLauncher::LaunchFailed { .. } | ToLauncher::Abort { .. } => true,
            ToLauncher::Output { data, .. } => {
                k.queued_bytes += data.len();
                k.held_bytes + k.queued_bytes > MAX_HELD_OUTPUT
            }
            _ => k.queued.len() >= MAX_QUEUED,
        };
        if over {
            tracing::info!(%job, "warm spawn: a kept job ended, or said too much, before a claim; killed");
            // Its end is heard as a dying job's.
            let ended = matches!(msg, ToLauncher::Exited { .. } | ToLauncher::LaunchFailed { .. });
            self.drop_job(job, &mut out);
            if ended {
                out.extend(self.on_message(node, msg));
            }
            return out;
        }
        k.queued.push((node, msg));
        out
    }
}

impl Run {
    /// Hand pooled job `job` (unclaimed) over to the tree's keeping, if it
    /// keeps jobs of its shape; false if not (the caller kills it).
    pub(super) fn hand_over(&mut self, fx: &mut dyn RunEffects, job: JobId) -> bool {
        let Some(entry) = self.warm.entries.iter().find(|e| e.job == job && e.claim.is_none()) else { return false };
        let keepable = entry.shape.movable() && self.jobs.get(&job).is_some_and(|j| j.pool && !j.killing) && !self.verdict.ending();
        if !keepable || !fx.shared().kept.room_for(&entry.shape) {
            return false;
        }
        let (Some(Entry { shape, held, held_bytes, origin, .. }), Some(state)) = (self.warm.take(job), self.jobs.remove(&job)) else { return false };
        self.warm_say(fx, &format!("kept {job} for later runs: {}", shape.describe(origin)));
        let root = self.kvs.take_job(job);
        self.written.retain(|(_, j), _| *j != job);
        // Its route stays this run's until the run is over (`settle_kept`):
        // what is on its way here comes in order, and is passed on.
        self.handed.push(job);
        let (since, unsettled_by) = (fx.now_micros(), Some(self.settings.owner));
        let shared = fx.shared();
        shared.jobs.remove(&job); // `dpm status` lists it as the boot's (`Kept::listed`)
        shared.kept.jobs.push((job, KeptJob { shape, job: state, root, held, held_bytes, since, unsettled_by, queued: Vec::new(), queued_bytes: 0 }));
        true
    }

    /// The tree keeps a job of `shape`: it becomes this run's pooled job, for
    /// spawns by `parent`, with what it said while kept.
    pub(super) fn claim_kept(&mut self, fx: &mut dyn RunEffects, shape: &Shape, parent: JobId) {
        let Some((job, k)) = fx.shared().kept.take(shape, self.settings.owner) else { return };
        self.handed.retain(|&j| j != job);
        if let Some(root) = k.root {
            self.kvs.put_job(job, root);
        }
        fx.route(job, true);
        let listed = (self.settings.owner, k.job.kvsname.clone(), k.job.ranks.len() as u32);
        fx.shared().jobs.insert(job, listed);
        self.jobs.insert(job, k.job);
        self.warm.entries.push(Entry::adopted(k.shape, job, parent, k.held, k.held_bytes));
        for (node, msg) in k.queued {
            self.message(fx, node, msg);
        }
    }

    /// A message about a job this run handed over (its route is still
    /// this run's): to the keeping. False if `msg` is not about one.
    pub(super) fn pass_to_kept(&mut self, fx: &mut dyn RunEffects, node: NodeId, msg: &ToLauncher) -> bool {
        if !msg.job().is_some_and(|j| self.handed.contains(&j) && !self.jobs.contains_key(&j)) {
            return false;
        }
        let out = fx.shared().kept.on_message(node, msg.clone());
        for (node, msg) in out {
            fx.send(node, msg);
        }
        true
    }

    /// The run is over: the jobs it handed over are the tree's alone now
    /// (their messages go to the keeping: `controller::dispatch`).
    pub(super) fn settle_kept(&mut self, fx: &mut dyn RunEffects) {
        for job in std::mem::take(&mut self.handed) {
            fx.route(job, false);
            fx.shared().kept.settle(job);
        }
    }

    /// Kill the tree's oldest kept job for a placement; false if none.
    pub(super) fn drop_kept(&mut self, fx: &mut dyn RunEffects) -> bool {
        let mut out = Vec::new();
        let dropped = fx.shared().kept.drop_oldest(&mut out);
        for (node, msg) in out {
            fx.send(node, msg);
        }
        dropped
    }
}
