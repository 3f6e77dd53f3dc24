//! After a re-attach ([`dpm_proto::link::Down::Resync`]): what went up
//! through the lost daemon may be lost with it. The node says again how
//! each of its ranks ended (the launcher takes an exit it already knows as
//! a no-op) and forgets the output bytes not yet acknowledged, so that the
//! jobs' output windows reopen (the bytes lost are lost; acknowledgements
//! of bytes that did arrive may still come, and find the count at zero).

use dpm_proto::ToLauncher;

use super::NodeReactor;
use crate::node::NodeEffects;

impl NodeReactor {
    /// The path up changed: re-send the exits of every job served here,
    /// reopen every output window.
    pub fn resync(&mut self, fx: &mut (impl NodeEffects + ?Sized)) {
        let mut jobs: Vec<_> = self.jobs.iter().filter(|(_, j)| !j.exits.is_empty()).collect();
        jobs.sort_by_key(|(job, _)| **job);
        for (job, j) in jobs {
            tracing::debug!(%job, exits = j.exits.len(), "re-attached: the ranks' exits said again");
            for &exit in &j.exits {
                fx.send_up(ToLauncher::Exited(exit));
            }
        }
        self.output.resync(fx);
    }
}
