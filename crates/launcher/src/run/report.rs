//! A hung job explains itself (`--timeout N` with `--get-stack-traces` or
//! `--report-state-on-timeout`, PRRTE's options): when the timeout strikes,
//! before anything is killed, every live rank's node reports it — the PMI
//! call it waits in and, with stacks, every thread's backtrace
//! (`dpm_daemon::stack`) — and the run prints each, prefixed by rank and
//! host. Bounded: what has not come within [`REPORT_WAIT`] is named as
//! missing and the run goes on to kill the job.

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

/// The reports still awaited.
pub(super) struct Reports {
    pending: BTreeSet<(JobId, Rank)>,
}

impl Reports {
    /// Ask every live rank's node for its report; `None` if no rank lives.
    pub(super) fn ask(jobs: &Jobs, fx: &mut dyn RunEffects, stacks: bool) -> Option<Reports> {
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
