//! Warm spawn's side of the engine: a job started ahead of the spawn that
//! will claim it parks a get of a key that is not there (in `on_request` and
//! `flush_store`, while `NodeJob::claim` is set) until the claim brings the
//! spawn's preputs ([`PARENT_PORT_KEY`] among them).

use dpm_kvs::store::Lookup;
use dpm_kvs::JobId;

use super::{Effect, Engine};
use crate::reply::Reply;

/// The key a spawned MPICH child gets at the very end of its `MPI_Init`.
pub const PARENT_PORT_KEY: &str = "PARENT_ROOT_PORT_NAME";

impl Engine {
    /// `job` was started ahead of its spawn (warm spawn): until
    /// [`Engine::claim`], a get of a key that is not there waits instead of
    /// failing — the spawn's preputs (`PARENT_ROOT_PORT_NAME`) come with the claim.
    pub fn await_claim(&mut self, job: JobId) {
        if let Some(j) = self.jobs.get_mut(&job) {
            j.claim.get_or_insert_with(Vec::new);
        }
    }

    /// A get of `job_id` was parked for its claim: once every local rank
    /// waits so, the node hears that the job is ready to be claimed
    /// ([`Effect::AwaitingClaim`]; the launcher starts the next pooled job
    /// only then, so pooled jobs do not start side by side on the CPU).
    pub(super) fn parked(&mut self, job_id: JobId) {
        let Some(job) = self.jobs.get(&job_id) else { return };
        if job.claim.as_ref().is_some_and(|p| p.len() == job.setup.local_ranks.len()) {
            self.effects.push(Effect::AwaitingClaim { job: job_id });
        }
    }

    /// The spawn that claimed `job` brought its preputs: they become visible,
    /// and every get parked for the claim is looked up again (a key still
    /// missing now fails as it would have at once). True if every local
    /// rank of `job` was waiting in a parked get (ready: its `MPI_Init` at
    /// its end), false if one was still starting.
    pub fn claim(&mut self, job_id: JobId, preput: &[(String, String)]) -> bool {
        let Some(job) = self.jobs.get_mut(&job_id) else { return false };
        let parked = job.claim.take().unwrap_or_default();
        let ready = parked.len() >= job.setup.local_ranks.len();
        job.late = job.setup.local_ranks.len().saturating_sub(parked.len());
        job.store.preput(preput);
        self.flush_store(job_id);
        for conn in parked {
            let Some(key) = self.conns.get(&conn).and_then(|c| c.waiting.as_ref()).and_then(|d| d.key.clone()) else { continue };
            let Some(job) = self.jobs.get_mut(&job_id) else { return ready };
            match job.store.get(conn, &key, None, false) {
                Lookup::Found(v) if !v.is_empty() => self.finish_deferred(conn, &Reply::Value(v)),
                Lookup::Found(_) | Lookup::NotFound => self.finish_deferred(conn, &Reply::Error(format!("key '{key}' not found"))),
                Lookup::Pending => {}
            }
        }
        self.flush_store(job_id);
        ready
    }
}
