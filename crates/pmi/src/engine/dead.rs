//! Ranks that died while the others run on (`-disable-auto-cleanup`): a rank
//! that was killed by a signal or exited without `PMI_Finalize` is listed in
//! the job's `PMI_dead_processes` (as Hydra keeps it: the ranks in the order
//! they were reported, comma-separated; not found while none), and a fence it
//! can never join is doomed: the survivors in it would wait for ever. The
//! engine reports each local rank that waits in one ([`Effect::FenceDoomed`]:
//! those waiting when the news comes, then each that enters); once every
//! live rank of the job waits, the launcher ends the run with the first
//! failure's status.

use dpm_kvs::{JobId, Rank};

use super::{ConnId, Effect, Engine};

/// The key MPICH reads for the failed ranks (Hydra's name).
pub const DEAD_KEY: &str = "PMI_dead_processes";

/// A job's dead ranks as this node knows them.
#[derive(Debug, Default)]
pub(super) struct Dead {
    ranks: Vec<u32>,
}

impl Dead {
    /// The value of [`DEAD_KEY`].
    pub(super) fn value(&self) -> String {
        let ranks: Vec<String> = self.ranks.iter().map(u32::to_string).collect();
        ranks.join(",")
    }
}

impl Engine {
    /// Ranks of `job` died without finalizing (the launcher says so): they
    /// join `PMI_dead_processes`, and a fence of the job that a local rank
    /// waits in is doomed.
    pub fn ranks_dead(&mut self, job_id: JobId, ranks: &[Rank]) {
        let Some(job) = self.jobs.get_mut(&job_id) else { return };
        for r in ranks {
            if r.0 < job.setup.size && !job.dead.ranks.contains(&r.0) {
                job.dead.ranks.push(r.0);
            }
        }
        self.check_doomed(job_id, None);
    }

    /// Local ranks wait in a fence of `job` while a rank of the job is dead:
    /// report them (all of them, or only the connection that just entered).
    pub(super) fn check_doomed(&mut self, job_id: JobId, entered: Option<ConnId>) {
        let Some(job) = self.jobs.get(&job_id) else { return };
        if job.dead.ranks.is_empty() || job.in_fence.is_empty() {
            return;
        }
        let conns = match entered {
            Some(c) => vec![c],
            None => job.in_fence.clone(),
        };
        let waiting: Vec<Rank> = conns.iter().filter_map(|c| self.conns.get(c).and_then(|c| c.rank)).collect();
        self.effects.push(Effect::FenceDoomed { job: job_id, waiting });
    }
}
