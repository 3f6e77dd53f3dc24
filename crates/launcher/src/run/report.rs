//! A hung job explains itself (`--timeout N` with `--get-stack-traces` or
//! `--report-state-on-timeout`, PRRTE's options): when the timeout strikes,
//! before anything is killed, every live rank's node reports it — the PMI
//! call it waits in and, with stacks, every thread's backtrace
//! (`dpm_daemon::stack`) — and the run prints each, prefixed by rank and
//! host. Bounded: what has not come within [`REPORT_WAIT`] is named as
//! missing and the run goes on to kill the job.
//!
//! The same states on demand for tools ([`Listing`]): asked by
//! `dpm status --json` (`crate::run_table::states_signal`), written into
//! the run's table as each rank's `pmi` instead of printed; a node that
//! has not answered within [`LIST_WAIT`] is named there.

use std::collections::BTreeSet;
use std::time::Duration;

use dpm_kvs::{JobId, NodeId, Rank};
use dpm_proto::{ToDaemon, ToLauncher};

use super::jobs::{describe_rank, Jobs};
use super::RunEffects;

/// How long the run waits for its ranks' reports: a node's tracer is
/// bounded at 15 s per process (`dpm_daemon::stack::TRACE_LIMIT`, run in
/// parallel), plus the way up.
pub const REPORT_WAIT: Duration = Duration::from_secs(20);

/// How long a listing of the ranks' states for a tool waits for the nodes.
pub const LIST_WAIT: Duration = Duration::from_secs(2);

/// Ask every live rank's node for its report: the ranks awaited.
fn ask_nodes(jobs: &Jobs, fx: &mut dyn RunEffects, stacks: bool) -> BTreeSet<(JobId, Rank)> {
    let mut pending = BTreeSet::new();
    for (job, j) in jobs.iter() {
        let live = j.live();
        if live.is_empty() {
            continue;
        }
        pending.extend(live.iter().map(|&(rank, _)| (job, rank)));
        for &node in j.daemons() {
            fx.send(node, ToDaemon::Report { job, stacks });
        }
    }
    pending
}

/// The reports still awaited.
pub(super) struct Reports {
    pending: BTreeSet<(JobId, Rank)>,
}

impl Reports {
    /// Ask every live rank's node for its report; `None` if no rank lives.
    pub(super) fn ask(jobs: &Jobs, fx: &mut dyn RunEffects, stacks: bool) -> Option<Reports> {
        let pending = ask_nodes(jobs, fx, stacks);
        (!pending.is_empty()).then_some(Reports { pending })
    }

    /// One rank's report (a [`ToLauncher::RankReport`]) from `node`:
    /// printed. `true` once every one is in.
    pub(super) fn on_report(&mut self, fx: &mut dyn RunEffects, node: NodeId, report: ToLauncher) -> bool {
        let ToLauncher::RankReport { job, rank, pid, state, stack } = report else { return self.pending.is_empty() };
        if self.pending.remove(&(job, rank)) {
            let host = fx.shared().nodes.host(node).to_string();
            fx.say(&format!("dpm: {}: {state}", describe_rank(job, rank, Some(pid), &host)));
            let prefix = if job.0 == 0 { format!("rank {} on {host}", rank.0) } else { format!("rank {}.{} on {host}", job.0, rank.0) };
            for line in stack.iter().flat_map(|s| s.lines()) {
                fx.say(&format!("[{prefix}] {line}"));
            }
        }
        self.pending.is_empty()
    }

    /// The wait is over: name the ranks that did not report.
    pub(super) fn give_up(self, fx: &mut dyn RunEffects, jobs: &Jobs) {
        for (job, rank) in self.pending {
            let host = jobs.host(fx, job, rank);
            fx.say(&format!("dpm: {}: no report within {} s", describe_rank(job, rank, None, &host), REPORT_WAIT.as_secs()));
        }
    }
}

/// A listing of the live ranks' PMI states for the run's table: the
/// ranks whose state is still awaited.
pub(super) struct Listing {
    pending: BTreeSet<(JobId, Rank)>,
}

impl Listing {
    /// Forget the states listed before (a rank listed then may have ended)
    /// and ask every live rank's node for its state, without stacks.
    pub(super) fn ask(jobs: &Jobs, fx: &mut dyn RunEffects) -> Listing {
        for (job, _) in jobs.iter() {
            for r in fx.shared().ranks.get_mut(&job).into_iter().flatten() {
                r.pmi = None;
            }
        }
        Listing { pending: ask_nodes(jobs, fx, false) }
    }

    /// Take `report` if it is one this listing awaits (its state goes to
    /// the rank's `pmi`); whether it was.
    pub(super) fn take(&mut self, fx: &mut dyn RunEffects, report: &ToLauncher) -> bool {
        let ToLauncher::RankReport { job, rank, state, stack: None, .. } = report else { return false };
        if !self.pending.remove(&(*job, *rank)) {
            return false;
        }
        set_pmi(fx, *job, *rank, state.clone());
        true
    }

    pub(super) fn done(&self) -> bool {
        self.pending.is_empty()
    }

    /// The listing is over (all in, or its wait): the ranks whose node did
    /// not answer are named so, and the run's listing count grows (its
    /// table is rewritten, what the asking tool waits for).
    pub(super) fn finish(self, fx: &mut dyn RunEffects, jobs: &Jobs, owner: u32) {
        for (job, rank) in self.pending {
            let host = jobs.host(fx, job, rank);
            set_pmi(fx, job, rank, format!("no report from its node {host} within {} s", LIST_WAIT.as_secs()));
        }
        *fx.shared().states_listed.entry(owner).or_default() += 1;
    }
}

fn set_pmi(fx: &mut dyn RunEffects, job: JobId, rank: Rank, state: String) {
    if let Some(listed) = fx.shared().ranks.get_mut(&job).and_then(|l| l.get_mut(rank.0 as usize)) {
        listed.pmi = Some(state);
    }
}
