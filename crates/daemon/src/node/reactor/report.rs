//! A hung job explains itself: each live rank of a job on this node, as
//! the node sees it (the PMI call it waits in), and, when asked, its
//! stack, taken off the node's loop (`crate::stack`). Since when a rank
//! waits is stamped by the reactor as the call arrives (`wait_since`).

use dpm_kvs::JobId;
use dpm_pmi::PmiState;
use dpm_proto::ToLauncher;

use super::NodeReactor;
use crate::node::NodeEffects;

impl NodeReactor {
    /// Report every live rank of `job` here (`ToLauncher::RankReport`).
    pub(super) fn report(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: JobId, stacks: bool) {
        let now = fx.now_micros();
        for (&(j, rank), p) in self.procs.iter().filter(|((j, _), p)| *j == job && p.exit.is_none()) {
            let waiting = p.conn.and_then(|c| Some((self.engine.waiting_in(c)?, self.wait_since.get(&c).map(|&t| now.saturating_sub(t)))));
            let pmi = p.conn.map_or(p.pmi, |c| self.engine.pmi_state(c));
            let state = match (waiting, pmi) {
                (Some((call, Some(us))), _) => format!("waits in PMI `{call}` for {}", waited(us)),
                (Some((call, None)), _) => format!("waits in PMI `{call}`"),
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

/// How long a rank has waited, to a tenth of a second (`4.8 s`), in
/// minutes from 10 minutes on (`12 min`).
fn waited(us: u64) -> String {
    let tenths = us / 100_000;
    if tenths >= 6000 {
        format!("{} min", tenths / 600)
    } else {
        format!("{}.{} s", tenths / 10, tenths % 10)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_wait_is_said_in_tenths_of_a_second_or_minutes() {
        assert_eq!(super::waited(0), "0.0 s");
        assert_eq!(super::waited(4_870_000), "4.8 s");
        assert_eq!(super::waited(599_990_000), "599.9 s");
        assert_eq!(super::waited(725_000_000), "12 min");
    }
}
