//! When a silent link is a lost node: the failure detector each side of a
//! daemon link runs, as plain state (times in, verdicts out; the link task
//! reads the clock and, for a peer process on this host, its state).
//!
//! A fixed silence timeout cried wolf on a busy host: 256 virtual nodes (256
//! daemon processes on 2 cores) beside a load of ~40 failed 4 of 4 runs
//! with "no word from its daemon for 1.5 s" (issue 26) — the daemons were
//! alive, waiting for a CPU. Two facts tell a busy peer from a lost one:
//!
//! - **The peer's process, when it runs on this host** (a forked daemon, or
//!   a forked daemon's parent): gone is lost at once (its link closes too);
//!   stopped (`T`, SIGSTOP: hung) is lost after the configured timeout, as
//!   before (stopped under a tracer, `t`, is a debugger looking: alive); alive and not stopped (running, waiting for a CPU, or
//!   sleeping) is a busy host, given up to [`LOCAL_GRACE`] timeouts of
//!   silence before it is taken for hung (a daemon that deadlocked).
//! - **The jitter seen on the link** (φ-accrual style, Hayashibara et al.):
//!   the gaps between frames are kept ([`WINDOW`] of them); silence is
//!   suspicious only past `mean + PHI_SIGMAS × sd` of them — the point
//!   where a normal model of those gaps puts the chance of a gap this long
//!   below 10⁻⁸ — and never before the configured timeout. A remote peer
//!   (ssh, srun, manual) has only this: its silence stretches to at most
//!   [`MAX_STRETCH`] timeouts on a link whose frames came late before.
//!
//! On a quiet host nothing changes: heartbeats every 250 ms give a mean of
//! ~250 ms and a small deviation, so the deadline is the timeout itself.

use std::collections::VecDeque;
use std::time::Duration;

/// Gaps between frames kept for the jitter estimate.
pub const WINDOW: usize = 64;

/// Standard deviations past the mean gap at which silence is suspicious
/// (φ = 8: a normal tail of ~10⁻⁸ at 5.6 σ).
pub const PHI_SIGMAS: f64 = 5.6;

/// A peer known only by its link waits at most this many timeouts.
pub const MAX_STRETCH: u32 = 4;

/// A peer process on this host that is alive and not stopped waits at most
/// this many timeouts (then it is taken for hung: alive but silent). Large:
/// such a peer is starved, not lost (a stop, an exit or a closed link is
/// still seen at once or at the timeout). Measured: 256 virtual nodes
/// running 512 busy-polling MPICH ranks beside `stress-ng --cpu 40` (a
/// load of ~200 on 2 cores) left a live daemon silent for 16 s.
pub const LOCAL_GRACE: u32 = 40;

/// The least deviation assumed (a perfectly regular link still has some).
const MIN_SD: Duration = Duration::from_millis(50);

/// What the link task knows of the peer's process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// Not on this host (or not known): only the link speaks for it.
    Remote,
    /// On this host, alive and not stopped.
    Alive,
    /// On this host, stopped (SIGSTOP, a tracer): it cannot answer.
    Stopped,
    /// On this host, gone (or a zombie).
    Gone,
}

/// Why a peer is taken for lost.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Loss {
    /// Silent past its deadline.
    Silent(Duration),
    /// Its process is stopped and was silent for the timeout.
    Stopped(Duration),
    /// Its process is gone.
    Gone,
}

impl std::fmt::Display for Loss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Loss::Silent(d) => write!(f, "no word for {:.1} s", d.as_secs_f64()),
            Loss::Stopped(d) => write!(f, "its process is stopped (SIGSTOP?) and sent no word for {:.1} s", d.as_secs_f64()),
            Loss::Gone => write!(f, "its process is gone"),
        }
    }
}

/// The detector's answer at a given time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Verdict {
    /// Not lost: look again after this long (if no frame comes first).
    Wait(Duration),
    Lost(Loss),
}

/// One link's detector. Times are offsets from any fixed origin.
#[derive(Clone, Debug)]
pub struct Detector {
    timeout: Duration,
    last: Duration,
    gaps: VecDeque<f64>,
}

impl Detector {
    /// A detector for a link with the configured `timeout`, heard at `now`.
    pub fn new(timeout: Duration, now: Duration) -> Self {
        Detector { timeout, last: now, gaps: VecDeque::with_capacity(WINDOW) }
    }

    /// A frame came at `now`.
    pub fn heard(&mut self, now: Duration) {
        let gap = now.saturating_sub(self.last);
        self.last = now;
        if self.gaps.len() == WINDOW {
            self.gaps.pop_front();
        }
        self.gaps.push_back(gap.as_secs_f64());
    }

    /// When the last frame came.
    pub fn last_heard(&self) -> Duration {
        self.last
    }

    /// Start afresh at `now` (the peer was told to stop judging, or resumed):
    /// the silence so far does not count; the jitter seen still does.
    pub fn restart(&mut self, now: Duration) {
        self.last = now;
    }

    /// How long a silence is suspicious after: the timeout, stretched by
    /// the jitter seen (at most [`MAX_STRETCH`] timeouts).
    pub fn deadline(&self) -> Duration {
        let n = self.gaps.len();
        if n < 2 {
            return self.timeout;
        }
        let mean = self.gaps.iter().sum::<f64>() / n as f64;
        let var = self.gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        let sd = var.sqrt().max(MIN_SD.as_secs_f64());
        let phi = Duration::from_secs_f64((mean + PHI_SIGMAS * sd).min(86_400.0));
        phi.clamp(self.timeout, self.timeout * MAX_STRETCH)
    }

    /// Whether the peer is lost at `now`, given what is known of its process.
    pub fn judge(&self, now: Duration, peer: Peer) -> Verdict {
        let silence = now.saturating_sub(self.last);
        let wait_until = |limit: Duration| Verdict::Wait(limit.saturating_sub(silence).max(Duration::from_millis(1)));
        match peer {
            Peer::Gone => Verdict::Lost(Loss::Gone),
            Peer::Stopped if silence >= self.timeout => Verdict::Lost(Loss::Stopped(silence)),
            Peer::Stopped => wait_until(self.timeout),
            Peer::Remote if silence >= self.deadline() => Verdict::Lost(Loss::Silent(silence)),
            Peer::Remote => wait_until(self.deadline()),
            // A live local process: look again every timeout (it may stop
            // or go meanwhile), up to the grace.
            Peer::Alive if silence >= self.timeout * LOCAL_GRACE => Verdict::Lost(Loss::Silent(silence)),
            Peer::Alive => wait_until((silence + self.timeout).min(self.timeout * LOCAL_GRACE)),
        }
    }
}

/// The state of process `pid` on this host, from `/proc/<pid>/stat`.
pub fn probe(pid: u32) -> Peer {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return Peer::Gone };
    match crate::proc_stat::parse(&stat) {
        None => Peer::Gone,
        Some(s) if s.ended() => Peer::Gone,
        // A debugger holds it (MPIR: a tool attached to `dpm run` reads its
        // process table): a busy peer, not a hung one.
        Some(s) if s.traced() => Peer::Alive,
        Some(s) if s.stopped() => Peer::Stopped,
        Some(_) => Peer::Alive,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_millis(1500);
    const BEAT: Duration = Duration::from_millis(250);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A detector that heard `gaps` (ms) one after the other; returns it and the time of the last frame.
    fn after(gaps: &[u64]) -> (Detector, Duration) {
        let mut d = Detector::new(T, Duration::ZERO);
        let mut now = Duration::ZERO;
        for &g in gaps {
            now += ms(g);
            d.heard(now);
        }
        (d, now)
    }

    #[test]
    fn a_regular_link_is_judged_at_the_timeout() {
        let (d, now) = after(&[250; 40]);
        assert_eq!(d.deadline(), T);
        assert!(matches!(d.judge(now + ms(1400), Peer::Remote), Verdict::Wait(w) if w == ms(100)));
        assert_eq!(d.judge(now + T, Peer::Remote), Verdict::Lost(Loss::Silent(T)));
    }

    #[test]
    fn jitter_seen_on_the_link_stretches_the_deadline_up_to_its_bound() {
        // Frames late by up to a second on a loaded host.
        let gaps: Vec<u64> = (0..40).map(|i| if i % 4 == 0 { 1200 } else { 250 }).collect();
        let (d, now) = after(&gaps);
        let deadline = d.deadline();
        assert!(deadline > T && deadline <= T * MAX_STRETCH, "{deadline:?}");
        assert!(matches!(d.judge(now + T, Peer::Remote), Verdict::Wait(_)), "a late frame like those before is no loss");
        assert!(matches!(d.judge(now + deadline, Peer::Remote), Verdict::Lost(Loss::Silent(_))));
        // However wild the link, a remote peer waits at most MAX_STRETCH timeouts.
        let (wild, now) = after(&[100, 9000, 100, 9000, 100, 9000]);
        assert_eq!(wild.deadline(), T * MAX_STRETCH);
        assert!(matches!(wild.judge(now + T * MAX_STRETCH, Peer::Remote), Verdict::Lost(_)));
    }

    #[test]
    fn a_live_process_on_this_host_is_busy_not_lost_until_the_grace() {
        let (d, now) = after(&[250; 40]);
        for silence in [T, 2 * T, 5 * T, T * LOCAL_GRACE - ms(1)] {
            assert!(matches!(d.judge(now + silence, Peer::Alive), Verdict::Wait(w) if w <= T), "{silence:?}");
        }
        assert!(matches!(d.judge(now + T * LOCAL_GRACE, Peer::Alive), Verdict::Lost(Loss::Silent(_))), "alive but silent that long: hung");
    }

    #[test]
    fn a_stopped_process_is_lost_at_the_timeout_and_a_gone_one_at_once() {
        // Even after jitter that would stretch a remote peer's deadline.
        let gaps: Vec<u64> = (0..40).map(|i| if i % 4 == 0 { 1200 } else { 250 }).collect();
        let (d, now) = after(&gaps);
        assert!(matches!(d.judge(now + ms(1000), Peer::Stopped), Verdict::Wait(w) if w == ms(500)));
        assert_eq!(d.judge(now + T, Peer::Stopped), Verdict::Lost(Loss::Stopped(T)));
        assert_eq!(d.judge(now + ms(10), Peer::Gone), Verdict::Lost(Loss::Gone));
    }

    #[test]
    fn a_restart_forgets_the_silence_so_far() {
        let (mut d, now) = after(&[BEAT.as_millis() as u64; 10]);
        d.restart(now + 10 * T);
        assert!(matches!(d.judge(now + 10 * T + ms(100), Peer::Remote), Verdict::Wait(_)));
    }

    #[test]
    fn the_window_keeps_only_recent_gaps() {
        let mut gaps = vec![9000; 10];
        gaps.extend([250; WINDOW]);
        let (d, _) = after(&gaps);
        assert_eq!(d.deadline(), T, "old jitter is forgotten");
    }

    #[test]
    fn this_process_is_alive_and_a_reaped_child_is_gone() {
        assert_eq!(probe(std::process::id()), Peer::Alive);
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert_eq!(probe(pid), Peer::Gone);
    }
}
