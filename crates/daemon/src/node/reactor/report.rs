//! A hung job explains itself: each live rank of a job on this node, as
//! the node sees it (the PMI call it waits in), and, when asked, its
//! stack, taken off the node's loop (`crate::stack`).

use dpm_kvs::JobId;
use dpm_pmi::PmiState;
use dpm_proto::ToLauncher;

use super::NodeReactor;
use crate::node::NodeEffects;

impl NodeReactor {
    /// Report every live rank of `job` here (`ToLauncher::RankReport`).
    pub(super) fn report(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: JobId, stacks: bool) {
        for (&(j, rank), p) in self.procs.iter().filter(|((j, _), p)| *j == job && p.exit.is_none()) {
            let waiting = p.conn.and_then(|c| self.engine.waiting_in(c));
            let pmi = p.conn.map_or(p.pmi, |c| self.engine.pmi_state(c));
            let state = match (waiting, pmi) {
                (Some(call), _) => format!("waits in PMI `{call}`"),
                (None, PmiState::Silent) if p.conn.is_none() && self.front(job) == super::Frontend::Pmix => "served by PMIx (no call pending here)".to_string(),
                (None, PmiState::Silent) => "has not spoken PMI".to_string(),
                (None, PmiState::Active) => "running (PMI initialised, no PMI call pending)".to_string(),
                (None, PmiState::Finalized) => "PMI finalised, not exited".to_string(),
            };
            let report = ToLauncher::RankReport { job: j, rank, pid: p.pid as u32, state, stack: None };
            if stacks {
                fx.report_stack(p.pid, report);
            } else {
                fx.send_up(report);
            }
        }
    }
}
