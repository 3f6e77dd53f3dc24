//! Binding a launch's ranks: the node's [`Binder`] (made when a job first
//! asks) gives each local rank its CPUs, NUMA nodes and GPUs; they are held
//! until the rank exits or its job is forgotten. `--report-bindings` and the
//! binder's warnings go to the daemon's stderr ([`NodeEffects::binding_note`]).

use std::collections::HashMap;

use dpm_binding::locality::locality_string;
use dpm_binding::{Binder, RankBinding};
use dpm_pmix::ProcPlace;
use dpm_kvs::{JobId, Rank};
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
        let places: Vec<ProcPlace> = bound
            .ranks
            .iter()
            .map(|b| match &b.cpus {
                Some(cpus) => ProcPlace::Bound { cpuset: cpus.to_list(), locality: locality_string(binder.topology(), cpus) },
                None => ProcPlace::Unbound,
            })
            .collect();
        let pid = std::process::id();
        for w in &bound.warnings {
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
            if let Some(old) = self.binding.held.insert((spec.job, p.rank), b) {
                // A rank launched twice (never by the launcher): the first goes back.
                if let Some(Ok(binder)) = self.binding.binder.as_mut() {
                    binder.release(&old);
                }
            }
        }
        Ok(out)
    }

    /// A rank is gone (exited, or never started): its objects are free again.
    pub(super) fn release_binding(&mut self, job: JobId, rank: Rank) {
        if let (Some(b), Some(Ok(binder))) = (self.binding.held.remove(&(job, rank)), self.binding.binder.as_mut()) {
            binder.release(&b);
        }
    }

    /// Every rank of a forgotten job.
    pub(super) fn release_job_bindings(&mut self, job: JobId) {
        let ranks: Vec<Rank> = self.binding.held.keys().filter(|(j, _)| *j == job).map(|(_, r)| *r).collect();
        for rank in ranks {
            self.release_binding(job, rank);
        }
    }
}
