//! [`NodeBinding`]: binding a launch's ranks, a part of the node reactor
//! that owns its state (the node's [`Binder`] and what each rank holds) and
//! is told the rest (the host name, a claimed rank's pid). The binder, made
//! when a job first asks, gives each local rank its CPUs, NUMA nodes and
//! GPUs; they are held until the rank exits or its job is forgotten.
//! `--report-bindings` and the
//! binder's warnings go up as the job's notes (`ToLauncher::Note`): its
//! run's stderr, which for a run of a boot is its `dpm run`'s, never the
//! boot's log.
//!
//! A warm spawn's pooled job is bound when it starts, like any spawned job,
//! but holds nothing while it waits (parked in its `MPI_Init`, it uses no
//! CPU): the pool never pushes a live rank onto shared objects. When it is
//! claimed, the binder picks the least held units for its ranks against the
//! ranks live then, holds them, and the ranks that move are moved
//! ([`NodeEffects::rebind`], every thread). Only CPUs move: a pooled rank's
//! memory policy and GPU variables were set at its start and stay, so a
//! pooled job with `-membind` or `--gpus-per-rank` holds its start's
//! binding from the start, as a cold one does.

use std::collections::HashMap;

use dpm_binding::locality::locality_string;
use dpm_binding::{BindPolicy, Binder, RankBinding};
use dpm_kvs::{JobId, Rank};
use dpm_pmix::ProcPlace;
use dpm_proto::{LaunchJob, ToLauncher};

use crate::node::NodeEffects;
use crate::spawn::Affinity;

/// The node's binder and what its live ranks hold.
#[derive(Default)]
pub(super) struct NodeBinding {
    /// `None` until a job needs it; an error is kept (and said per job).
    binder: Option<Result<Binder, String>>,
    held: HashMap<(JobId, Rank), RankBinding>,
    /// Pooled jobs not yet claimed: their policy and their ranks' start
    /// bindings, which hold nothing (bound again at the claim).
    parked: HashMap<JobId, (BindPolicy, Vec<(Rank, RankBinding)>)>,
}

/// What one rank's start gets: variables and masks, and where it runs in
/// PMIx's words (registered for a PMIx job).
pub(super) struct Bound {
    pub env: Vec<(String, String)>,
    pub affinity: Option<Affinity>,
    pub place: ProcPlace,
}

impl NodeBinding {
    /// Bind the launch's local ranks (in `spec.procs` order), or say why not.
    /// `host`: the node's name, in reports and errors.
    pub(super) fn bind_launch(&mut self, fx: &mut (impl NodeEffects + ?Sized), host: &str, spec: &LaunchJob) -> Result<Vec<Bound>, String> {
        let policy = &spec.binding;
        if !policy.is_active() || spec.procs.is_empty() {
            return Ok(spec.procs.iter().map(|_| Bound { env: Vec::new(), affinity: None, place: ProcPlace::Unbound }).collect());
        }
        let binder = match self.binder.get_or_insert_with(|| fx.binder()) {
            Ok(b) => b,
            Err(e) => return Err(format!("cannot bind ranks on {host}: {e}")),
        };
        let bound = binder.bind(policy, spec.procs.len(), spec.spawner.is_some()).map_err(|e| format!("cannot bind ranks on {host}: {e}"))?;
        let park = spec.awaiting_claim && policy.membind.is_none() && policy.gpus_per_rank == 0;
        let places: Vec<ProcPlace> = bound
            .ranks
            .iter()
            .map(|b| match &b.cpus {
                Some(cpus) => ProcPlace::Bound { cpuset: cpus.to_list(), locality: locality_string(binder.topology(), cpus) },
                None => ProcPlace::Unbound,
            })
            .collect();
        let pid = std::process::id();
        // A parked job shares nothing yet: its claim warns if it must.
        for w in bound.warnings.iter().filter(|_| !park) {
            fx.send_up(ToLauncher::Note { job: spec.job, line: format!("dpm: warning: {host}: job {}: {w}", spec.kvsname) });
        }
        let mut out = Vec::with_capacity(bound.ranks.len());
        for ((p, b), place) in spec.procs.iter().zip(bound.ranks).zip(places) {
            if policy.report {
                let who = if spec.spawner.is_some() { format!("{}.{}", spec.job.0, p.rank.0) } else { p.rank.0.to_string() };
                fx.send_up(ToLauncher::Note { job: spec.job, line: format!("[{host}:{pid}] Rank {who} {}", b.report) });
            }
            let affinity = (b.cpus.is_some() || b.mems.is_some())
                .then(|| Affinity { cpus: b.cpus.as_ref().map(|c| c.to_mask()), mems: b.mems.as_ref().map(|m| m.to_mask()) });
            out.push(Bound { env: b.env.clone(), affinity, place });
            if park {
                binder.release(&b);
                self.parked.entry(spec.job).or_insert_with(|| ((**policy).clone(), Vec::new())).1.push((p.rank, b));
            } else if let Some(old) = self.held.insert((spec.job, p.rank), b) {
                // A rank launched twice (never by the launcher): the first goes back.
                binder.release(&old);
            }
        }
        Ok(out)
    }

    /// A pooled job was claimed here: bind its ranks against the ranks
    /// live now and hold that (see the module documentation); `pid_of`:
    /// the pid of a rank of the job, to move it.
    pub(super) fn rebind_claimed(&mut self, fx: &mut (impl NodeEffects + ?Sized), host: &str, job: JobId, pid_of: impl Fn(Rank) -> Option<i32>) {
        let Some((policy, parked)) = self.parked.remove(&job) else { return };
        let Some(Ok(binder)) = self.binder.as_mut() else { return };
        let bound = match binder.bind(&policy, parked.len(), true) {
            Ok(b) => b,
            Err(e) => {
                // The start's units become the job's.
                tracing::warn!(%job, "cannot bind a claimed job again: {e}");
                for (rank, b) in parked {
                    binder.hold(&b);
                    self.held.insert((job, rank), b);
                }
                return;
            }
        };
        for w in &bound.warnings {
            fx.send_up(ToLauncher::Note { job, line: format!("dpm: warning: {host}: job {}: {w}", job.0) });
        }
        let pid = std::process::id();
        for ((rank, old), new) in parked.into_iter().zip(bound.ranks) {
            if new.cpus != old.cpus {
                if let (Some(cpus), Some(pid)) = (&new.cpus, pid_of(rank)) {
                    fx.rebind(pid, &cpus.to_mask());
                }
            }
            if policy.report {
                fx.send_up(ToLauncher::Note { job, line: format!("[{host}:{pid}] Rank {}.{} {} (claimed)", job.0, rank.0, new.report) });
            }
            self.held.insert((job, rank), new);
        }
    }

    /// A rank is gone (exited, or never started): its objects are free again.
    pub(super) fn release(&mut self, job: JobId, rank: Rank) {
        if let (Some(b), Some(Ok(binder))) = (self.held.remove(&(job, rank)), self.binder.as_mut()) {
            binder.release(&b);
        }
    }

    /// Every rank of a forgotten job.
    pub(super) fn release_job(&mut self, job: JobId) {
        self.parked.remove(&job);
        let ranks: Vec<Rank> = self.held.keys().filter(|(j, _)| *j == job).map(|(_, r)| *r).collect();
        for rank in ranks {
            self.release(job, rank);
        }
    }

    /// Its part of the node's invariants: whatever is held or parked is a
    /// job's of the node (`is_job`), and no rank whose exit is recorded
    /// holds anything (`exited`).
    pub(super) fn check(&self, is_job: impl Fn(JobId) -> bool, exited: impl Fn(JobId, Rank) -> bool) -> Result<(), String> {
        for &(job, rank) in self.held.keys() {
            if !is_job(job) || exited(job, rank) {
                return Err(format!("rank {} of {job} holds a binding, its job gone or itself exited", rank.0));
            }
        }
        match self.parked.keys().find(|job| !is_job(**job)) {
            Some(job) => Err(format!("{job} parked in the binder is no job of the node")),
            None => Ok(()),
        }
    }
}
