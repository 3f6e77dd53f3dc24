//! A warm spawn's claim at a node ([`dpm_proto::ToDaemon::Claim`]): deliver the spawn's
//! preputs to the pooled job's ranks here, unless one of them has already
//! ended, and say which it was ([`ToLauncher::Claimed`]).
//!
//! The launcher answers the spawning parent only once every node of the job
//! said `alive`. A rank that ended before the claim reached its node — its
//! exit reported, read but not yet reported (output still draining), or not
//! even read yet (only the kernel knows: [`NodeEffects::has_exited`]) — makes
//! the claim fail: the launcher drops the job and spawns again, so a child
//! that crashed while it waited in the pool is never handed to a parent.

use dpm_kvs::JobId;
use dpm_proto::ToLauncher;

use super::NodeReactor;
use crate::node::NodeEffects;

impl NodeReactor {
    pub(super) fn claim(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: JobId, preput: &[(String, String)]) {
        // A rank whose exit was reported has left `procs`: `rank_ended` says so.
        let reported = self.jobs.get(&job).is_some_and(|j| j.rank_ended);
        let alive = !reported && !self.procs.iter().any(|((j, _), p)| *j == job && (p.exit.is_some() || fx.has_exited(p.pid)));
        if alive {
            // Moved before its ranks hear of the claim (and long before
            // their parent is answered, which waits for `Claimed`).
            self.rebind_claimed(fx, job);
            self.engine.claim(job, preput);
        } else {
            tracing::debug!(%job, "claim of a pooled job with an ended rank: not delivered");
        }
        fx.send_up(ToLauncher::Claimed { job, alive });
    }
}
