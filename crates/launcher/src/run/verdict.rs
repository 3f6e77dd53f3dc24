//! How a run ends: the failure policy, the first failure, and the exit
//! status with its summary line (docs/guide.md, "Exit status").
//!
//! - The first failure decides; an earlier exit (by the nodes' clocks)
//!   replaces a later one read first; an `MPI_Abort` replaces any failure
//!   that is not itself an abort (peers cut off by it fail around it).
//! - dpm's own SIGINT/SIGTERM/SIGHUP: 128+N — except after a lost node,
//!   which always decides: a boot that loses a node ends its runs with
//!   SIGTERM, and its runs must fail naming the node. The timeout: 124,
//!   unless a failure came before it (which decides).
//! - Whether a failure ends the run at all is the run's [`FailurePolicy`].

use dpm_kvs::{JobId, Rank};

/// What a failure in a job does to the run: a job setting, sent whole to a
/// boot ([`dpm_proto::control::JobSettings`]).
pub use dpm_proto::control::FailurePolicy;

/// A `--on-spawned-failure` value that is neither `end` nor `continue`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a failure policy (end or continue)")]
pub struct UnknownPolicy(pub String);

/// `end` ([`FailurePolicy::EndRun`]) or `continue`
/// ([`FailurePolicy::SurviveSpawnedJobs`]): `dpm run --on-spawned-failure`.
pub fn parse_failure_policy(s: &str) -> Result<FailurePolicy, UnknownPolicy> {
    match s.trim().to_ascii_lowercase().as_str() {
        "end" => Ok(FailurePolicy::EndRun),
        "continue" => Ok(FailurePolicy::SurviveSpawnedJobs),
        _ => Err(UnknownPolicy(dpm_pmi::sanitize::quote(s))),
    }
}

/// The first failure of the run, which decides the exit status.
#[derive(Clone, Debug)]
pub struct Failure {
    pub code: i32,
    pub summary: String,
    /// The rank it was about, not counted among the ranks terminated because of it.
    pub rank: Option<(JobId, Rank)>,
    /// It was an `MPI_Abort`.
    pub abort: bool,
    /// A node was lost: decides even over dpm's own signal.
    pub node_lost: bool,
    /// When the failing process ended (µs since the epoch), for an exit.
    pub at: Option<u64>,
}

impl Failure {
    /// A rank's own exit with a non-zero code (not a signal, an abort, a
    /// missing `MPI_Finalize`, a start that failed or a lost node).
    pub fn own_code(&self) -> bool {
        self.at.is_some() && !self.abort && self.summary.ends_with(&format!(" exited with code {}", self.code))
    }
}

/// The run's judgement so far (see the module documentation).
#[derive(Default)]
pub struct Verdict {
    pub failure: Option<Failure>,
    /// A signal dpm itself received and forwarded.
    pub interrupted: Option<i32>,
    pub timed_out: bool,
    /// When dpm began killing because of a failure (µs since the epoch).
    pub teardown_at: Option<u64>,
    /// Ranks dpm killed because of the failure, per job, for the summary.
    pub terminated: Vec<(JobId, usize)>,
}

impl Verdict {
    /// The run is ending: no new processes.
    pub fn ending(&self) -> bool {
        self.interrupted.is_some() || self.timed_out || self.failure.is_some()
    }

    pub fn record(&mut self, code: i32, summary: String, rank: Option<(JobId, Rank)>) {
        tracing::debug!("{summary}");
        if self.failure.is_none() {
            self.failure = Some(Failure { code, summary, rank, abort: false, node_lost: false, at: None });
        }
    }

    /// A lost node, as the first failure, decides even over a later signal.
    pub fn record_node_lost(&mut self, summary: String) {
        tracing::debug!("{summary}");
        if self.failure.is_none() {
            self.failure = Some(Failure { code: 1, summary, rank: None, abort: false, node_lost: true, at: None });
        }
    }

    /// A failed exit at `at`: the earliest one is the run's failure (unless an abort).
    pub fn record_exit(&mut self, code: i32, summary: String, rank: (JobId, Rank), at: u64, now: u64) {
        tracing::debug!("{summary}");
        let replace = match &self.failure {
            None => true,
            Some(f) => !f.abort && f.at.is_some_and(|t| at < t),
        };
        if replace {
            self.failure = Some(Failure { code, summary, rank: Some(rank), abort: false, node_lost: false, at: Some(at) });
        }
        self.begin_teardown(now);
    }

    /// An `MPI_Abort` is the cause of whatever fails around it: peers cut off
    /// mid-communication may exit before its message is read. So it replaces
    /// an earlier failure that was not itself an abort.
    /// The ranks killed from `now` on are ended by it.
    pub fn record_abort(&mut self, code: i32, summary: String, rank: (JobId, Rank), now: u64) {
        tracing::debug!("{summary}");
        if self.failure.as_ref().is_none_or(|f| !f.abort) {
            self.failure = Some(Failure { code, summary, rank: Some(rank), abort: true, node_lost: false, at: None });
        }
        self.begin_teardown(now);
    }

    /// dpm begins killing because of the failure at `now` (µs since the
    /// epoch): ranks that end after it were ended by it, not failures of their own.
    pub fn begin_teardown(&mut self, now: u64) {
        if self.teardown_at.is_none() {
            self.teardown_at = Some(now);
        }
    }

    /// The failing rank, not counted among those terminated because of it.
    pub fn failed_rank(&self) -> Option<(JobId, Rank)> {
        self.failure.as_ref().and_then(|f| f.rank)
    }

    /// dpm's exit status and the final line to say, if any.
    pub fn conclude(&self) -> (i32, Option<String>) {
        let lost = self.failure.as_ref().filter(|f| f.node_lost);
        if let (Some(sig), None) = (self.interrupted, lost) {
            return (128 + sig, Some(format!("dpm: job ended by {}", signal_name(sig))));
        }
        // A failure before the timeout decides (under -disable-auto-cleanup
        // the others may run on into it).
        if self.timed_out && self.failure.is_none() {
            return (124, None);
        }
        match &self.failure {
            Some(f) => {
                let total: usize = self.terminated.iter().map(|(_, n)| n).sum();
                let detail = if total == 0 {
                    String::new()
                } else {
                    let per_job: Vec<String> = self.terminated.iter().map(|(j, n)| format!("{n} of job {}", j.0)).collect();
                    let s = if total == 1 { "" } else { "s" };
                    format!("; {total} other rank{s} terminated ({})", per_job.join(", "))
                };
                // A rank that exited with a code of its own said what it
                // meant by it (the render farm's 4: image complete, a
                // worker lost): dpm reports the code, not a judgement.
                let head = if f.own_code() { "dpm: " } else { "dpm: job failed: " };
                (f.code, Some(format!("{head}{}{detail}", f.summary)))
            }
            None => (0, None),
        }
    }
}

/// A signal's name (`SIGTERM`), or its number.
pub fn signal_name(sig: i32) -> String {
    nix::sys::signal::Signal::try_from(sig).map_or_else(|_| format!("signal {sig}"), |s| s.as_str().to_string())
}
