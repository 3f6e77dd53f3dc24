//! `PMIX_TIMEOUT` on the requests that wait on other nodes or jobs: fences,
//! connects and disconnects, group constructs, lookups (with `PMIX_WAIT`) and spawns. The
//! client's directive (whole seconds) becomes a node timer
//! ([`crate::node::Timer::PmixTimeout`]) when the upcall arrives — nothing
//! sleeps, and the upcall returned at once; when the timer fires and the
//! request still waits, it is answered `PMIX_ERR_TIMEOUT` and forgotten
//! here, so the late answer from the launcher finds nothing to complete.
//!
//! What stays behind elsewhere: a fence's `FenceIn` is already up the tree,
//! so the job's next fence is refused until that fence's `FenceDone`
//! arrives (a second `FenceIn` of the same epoch would be counted twice);
//! a waiting lookup stays parked in the name service until the name is
//! published or the job ends (bounded there by `MAX_PARKED_LOOKUPS`); a
//! spawn's child job, if it starts after all, runs on as a job of the run
//! (dpm has no way to take a spawn back; logged when its answer comes).

use dpm_pmix::ffi::PMIX_ERR_TIMEOUT;

use super::{PmixAnswer, PmixEvent, PmixFront, PmixRequest};
use crate::node::NodeEffects;

impl PmixEvent {
    /// The request and its `PMIX_TIMEOUT`, for the requests that honour one.
    pub(super) fn timeout(&self) -> Option<(PmixRequest, u32)> {
        match self {
            PmixEvent::Fence { timeout, req, .. }
            | PmixEvent::Lookup { timeout, req, .. }
            | PmixEvent::Connect { timeout, req, .. }
            | PmixEvent::Group { timeout, req, .. }
            | PmixEvent::Spawn { timeout, req, .. } => timeout.map(|secs| (*req, secs)),
            _ => None,
        }
    }
}

impl PmixFront {
    /// `req`'s `PMIX_TIMEOUT` expired: answer it `PMIX_ERR_TIMEOUT` if it
    /// still waits (see the module documentation).
    pub(in crate::node) fn on_timeout(&mut self, fx: &mut (impl NodeEffects + ?Sized), req: PmixRequest) {
        let p = self;
        let answer = if let Some(j) = p.jobs.values_mut().find(|j| j.fence == Some(req)) {
            j.fence = None;
            j.abandoned = true;
            PmixAnswer::Data(PMIX_ERR_TIMEOUT, Vec::new())
        } else if let Some(id) = p.names.iter().find(|(_, (r, _))| *r == req).map(|(id, _)| *id) {
            match p.names.remove(&id) {
                Some((_, Some(_))) => PmixAnswer::Found(PMIX_ERR_TIMEOUT, Vec::new()),
                _ => PmixAnswer::Status(PMIX_ERR_TIMEOUT),
            }
        } else if let Some(id) = p.spawns.iter().find(|(_, r)| **r == req).map(|(id, _)| *id) {
            p.spawns.remove(&id);
            p.late_spawns.insert(id);
            PmixAnswer::Spawned(PMIX_ERR_TIMEOUT, String::new())
        } else if let Some(id) = p.connects.iter().find(|(_, c)| c.req == req).map(|(id, _)| *id) {
            match p.connects.remove(&id) {
                Some(c) => super::connect::failed(c.kind, PMIX_ERR_TIMEOUT),
                None => return,
            }
        } else {
            return; // answered in time
        };
        tracing::info!(?req, "PMIx request timed out (PMIX_TIMEOUT)");
        fx.pmix_answer(req, answer);
    }
}
