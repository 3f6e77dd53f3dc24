//! A watched job's PMIx watch on this node ([`crate::pmix_watch`]): opened
//! at its launch when it has ranks here, its connections judged by the
//! job's [`Watcher`] (kept with the job), the launcher told at the first of
//! the owner's, closed when the job is forgotten.

use dpm_kvs::JobId;
use dpm_proto::{LaunchJob, PmiMode, ToLauncher};

use crate::node::NodeEffects;
use crate::pmix_watch::{self, Verdict, Watcher, LOGGED_REFUSALS};

/// Open the job's watch if its launch asks for one (a PMI-1/2 job with
/// ranks here): the [`Watcher`] for its entry and the variables its
/// ranks get. No loopback port to be had: the job runs unwatched, said
/// once (as a job whose program the probe saw).
pub(super) fn open(fx: &mut (impl NodeEffects + ?Sized), spec: &LaunchJob) -> Option<(Watcher, Vec<(String, String)>)> {
    if !spec.pmix_watch || spec.pmi_mode == PmiMode::Pmix || spec.procs.is_empty() {
        return None;
    }
    match fx.open_pmix_watch(spec.job) {
        Ok(port) => Some((Watcher::default(), pmix_watch::vars(port))),
        Err(e) => {
            tracing::warn!(job = %spec.job, "no PMIx watch for a program dpm cannot classify: {e}");
            None
        }
    }
}

/// A connection on `job`'s watch, judged by its `watcher`: whether to hold
/// it open. The first of the owner's is reported up.
pub(super) fn on_connection(fx: &mut (impl NodeEffects + ?Sized), job: JobId, watcher: &mut Watcher, refused: Option<String>) -> bool {
    let verdict = watcher.on_connection(refused.is_none());
    match verdict {
        Verdict::Trip => {
            tracing::debug!(%job, "an Open MPI rank connected to the PMIx watch");
            fx.send_up(ToLauncher::WatchTripped { job });
        }
        Verdict::Close { log: true } => {
            tracing::warn!(%job, "the PMIx watch closed a connection: {}", refused.unwrap_or_default());
        }
        Verdict::Hold | Verdict::Close { log: false } => {}
    }
    verdict.holds()
}

/// The job is forgotten: its watch, if it had one, closes (with the
/// connections it holds); refusals beyond the logged ones are counted.
pub(super) fn close(fx: &mut (impl NodeEffects + ?Sized), job: JobId, watch: Option<Watcher>) {
    let Some(watcher) = watch else { return };
    fx.close_pmix_watch(job);
    if watcher.refused() > LOGGED_REFUSALS {
        tracing::warn!(%job, "the PMIx watch closed {} connections of other users in all", watcher.refused());
    }
}
