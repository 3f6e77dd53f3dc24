//! Binding a launch's ranks: the node's [`Binder`] (made when a job first
//! asks) gives each local rank its CPUs, NUMA nodes and GPUs; they are held
//! until the rank exits or its job is forgotten. `--report-bindings` and the
//! binder's warnings go to the daemon's stderr ([`NodeEffects::binding_note`]).
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
use dpm_proto::LaunchJob;

use super::NodeReactor;
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

impl NodeReactor {
    /// Bind the launch's local ranks (in `spec.procs` order), or say why not.
    pub(super) fn bind_launch(&mut self, fx: &mut (impl NodeEffects + ?Sized), spec: &LaunchJob) -> Result<Vec<Bound>, String> {
        let policy = &spec.binding;
        if !policy.is_active() || spec.procs.is_empty() {
            return Ok(spec.procs.iter().map(|_| Bound { env: Vec::new(), affinity: None, place: ProcPlace::Unbound }).collect());
        }
        let binder = match self.binding.binder.get_or_insert_with(|| fx.binder()) {
            Ok(b) => b,
            Err(e) => return Err(format!("cannot bind ranks on {}: {e}", self.host)),
        };
        let bound = binder.bind(policy, spec.procs.len(), spec.spawner.is_some()).map_err(|e| format!("cannot bind ranks on {}: {e}", self.host))?;
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
            fx.binding_note(&format!("dpm: warning: {}: job {}: {w}", self.host, spec.kvsname));
        }
        let mut out = Vec::with_capacity(bound.ranks.len());
        for ((p, b), place) in spec.procs.iter().zip(bound.ranks).zip(places) {
            if policy.report {
                let who = if spec.spawner.is_some() { format!("{}.{}", spec.job.0, p.rank.0) } else { p.rank.0.to_string() };
                fx.binding_note(&format!("[{}:{pid}] Rank {who} {}", self.host, b.report));
            }
            let affinity = (b.cpus.is_some() || b.mems.is_some())
                .then(|| Affinity { cpus: b.cpus.as_ref().map(|c| c.to_mask()), mems: b.mems.as_ref().map(|m| m.to_mask()) });
            out.push(Bound { env: b.env.clone(), affinity, place });
            if park {
                binder.release(&b);
                self.binding.parked.entry(spec.job).or_insert_with(|| ((**policy).clone(), Vec::new())).1.push((p.rank, b));
            } else if let Some(old) = self.binding.held.insert((spec.job, p.rank), b) {
                // A rank launched twice (never by the launcher): the first goes back.
                binder.release(&old);
            }
        }
        Ok(out)
    }

    /// A pooled job was claimed here: bind its ranks against the ranks
    /// live now and hold that (see the module documentation).
    pub(super) fn rebind_claimed(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: JobId) {
        let Some((policy, parked)) = self.binding.parked.remove(&job) else { return };
        let Some(Ok(binder)) = self.binding.binder.as_mut() else { return };
        let bound = match binder.bind(&policy, parked.len(), true) {
            Ok(b) => b,
            Err(e) => {
                // The start's units become the job's.
                tracing::warn!(%job, "cannot bind a claimed job again: {e}");
                for (rank, b) in parked {
                    binder.hold(&b);
                    self.binding.held.insert((job, rank), b);
                }
                return;
            }
        };
        for w in &bound.warnings {
            fx.binding_note(&format!("dpm: warning: {}: job {}: {w}", self.host, job.0));
        }
        let pid = std::process::id();
        for ((rank, old), new) in parked.into_iter().zip(bound.ranks) {
            if new.cpus != old.cpus {
                if let (Some(cpus), Some(p)) = (&new.cpus, self.procs.get(&(job, rank))) {
                    fx.rebind(p.pid, &cpus.to_mask());
                }
            }
            if policy.report {
                fx.binding_note(&format!("[{}:{pid}] Rank {}.{} {} (claimed)", self.host, job.0, rank.0, new.report));
            }
            self.binding.held.insert((job, rank), new);
        }
    }

    /// A rank is gone (exited, or never started): its objects are free again.
    pub(super) fn release_binding(&mut self, job: JobId, rank: Rank) {
        if let (Some(b), Some(Ok(binder))) = (self.binding.held.remove(&(job, rank)), self.binding.binder.as_mut()) {
            binder.release(&b);
        }
    }

    /// Every rank of a forgotten job.
    pub(super) fn release_job_bindings(&mut self, job: JobId) {
        self.binding.parked.remove(&job);
        let ranks: Vec<Rank> = self.binding.held.keys().filter(|(j, _)| *j == job).map(|(_, r)| *r).collect();
        for rank in ranks {
            self.release_binding(job, rank);
        }
    }
}
