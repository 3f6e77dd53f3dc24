//! When a silent link is a lost node: the failure detector each side of a
//! daemon link runs, as plain state (times in, verdicts out; the link task
//! reads the clock and, for a peer process on this host, its state).
//!
//! A wrongly killed job is worse than a slow verdict: a fixed silence
//! timeout cried wolf on a busy host (256 virtual nodes on 2 cores beside a
//! load of ~40 failed 4 of 4 runs with "no word from its daemon for 1.5 s",
//! issue 26; later, at a load of 80–270, "no word for 60 s" while node 0's
//! daemon was runnable, starved: 1 CPU tick in 25 s). Three facts tell a
//! busy peer from a lost one:
//!
//! - **The peer's process, when it runs on this host** (a forked daemon, or
//!   a forked daemon's parent): gone is lost at once (its link closes too);
//!   stopped (`T`, SIGSTOP) is lost after the configured timeout (stopped
//!   under a tracer, `t`, is a debugger looking: alive). Alive, it is
//!   *starved* or *hung*, told apart by the scheduler's own account
//!   ([`Activity`]: `/proc/<pid>/task/*/schedstat` and each thread's state):
//!   a peer that ran, waited for a CPU, or is runnable (`R`) is starved or
//!   working, and silence never makes it lost; one whose threads all sleep
//!   (`S`, `D`: a deadlock, a dead NFS server, the cgroup freezer) without
//!   running or queueing for a CPU for [`BLOCKED_GRACE`] timeouts is hung —
//!   its 250 ms heartbeat timer would have woken it.
//! - **What a remote peer reports**: every heartbeat carries how late the
//!   sender's own heartbeat timer fired ([`Detector::reported`]) — a host
//!   starved of CPU says so. Its silence may then stretch to
//!   [`REPORT_FACTOR`] times the worst lateness it reported (beyond the
//!   timeout), up to [`REMOTE_CAP`] timeouts.
//! - **The jitter seen on the link** (φ-accrual style, Hayashibara et al.):
//!   the gaps between frames are kept ([`WINDOW`] of them); silence is
//!   suspicious only past `mean + PHI_SIGMAS × sd` of them — the point
//!   where a normal model of those gaps puts the chance of a gap this long
//!   below 10⁻⁸ — and never before the configured timeout, up to
//!   [`MAX_STRETCH`] timeouts.
//!
//! On a quiet host nothing changes: heartbeats every 250 ms give a mean of
//! ~250 ms and a small deviation, so a remote peer's deadline is the
//! timeout itself. docs/benchmarks.md has the measurements behind the
//! defaults (`bench/liveness/run`).

use std::collections::VecDeque;
use std::time::Duration;

/// Gaps between frames kept for the jitter estimate (and heartbeat
/// lateness reports kept).
pub const WINDOW: usize = 64;

/// Standard deviations past the mean gap at which silence is suspicious
/// (φ = 8: a normal tail of ~10⁻⁸ at 5.6 σ).
pub const PHI_SIGMAS: f64 = 5.6;

/// Jitter seen on a link stretches its deadline to at most this many timeouts.
pub const MAX_STRETCH: u32 = 4;

/// A remote peer that reported late heartbeats may be silent this many
/// times its worst reported lateness past the timeout…
pub const REPORT_FACTOR: u32 = 3;

/// …up to this many timeouts.
pub const REMOTE_CAP: u32 = 40;

/// A peer process on this host whose threads all sleep, neither running
/// nor waiting for a CPU, for this many timeouts while its link is silent
/// is hung. Anything else alive (running, runnable, or with scheduler time
/// that moved) is starved or working and never lost by silence: only a
/// stop, an exit or a closed link ends it.
pub const BLOCKED_GRACE: u32 = 20;

/// A boot waits this many heartbeat timeouts for the daemons below a lost
/// node to re-attach ([`reattach_wait`]).
pub const REATTACH_TIMEOUTS: u32 = 20;

/// How long a boot waits for the daemons below a lost interior node to
/// re-attach before it takes their nodes for lost: [`REATTACH_TIMEOUTS`]
/// heartbeat timeouts (`DPM_HEARTBEAT_TIMEOUT`; 30 s at the default 1.5 s).
/// A daemon notices its parent's loss by the same timeout (at once when the
/// link closes), so the two scale together; every process of a tree has
/// the same timeout (`--heartbeat-timeout`).
pub fn reattach_wait() -> Duration {
    dpm_proto::frame::heartbeat_timeout() * REATTACH_TIMEOUTS
}

/// How long a daemon whose parent was lost keeps trying to re-attach:
/// five sixths of [`reattach_wait`] (25 s by default), so that its last try
/// ends before the boot stops waiting for it.
pub fn reattach_trying() -> Duration {
    reattach_wait() * 5 / 6
}

/// The least deviation assumed (a perfectly regular link still has some).
const MIN_SD: Duration = Duration::from_millis(50);

/// What the scheduler says of a live process on this host: its threads'
/// time on a CPU and waiting for one (nanoseconds, summed), and whether
/// any thread is runnable now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Activity {
    pub ran_ns: u64,
    pub waited_ns: u64,
    pub busy: bool,
}

/// What the link task knows of the peer's process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// Not on this host (or not known): only the link speaks for it.
    Remote,
    /// On this host, alive and not stopped.
    Alive(Activity),
    /// On this host, stopped (SIGSTOP): it cannot answer.
    Stopped,
    /// On this host, gone (or a zombie).
    Gone,
}

/// Why a peer is taken for lost.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Loss {
    /// Silent past its deadline (a remote peer).
    Silent(Duration),
    /// On this host, alive, but silent this long while none of its threads
    /// ran or waited for a CPU for the second duration: hung.
    Hung(Duration, Duration),
    /// Its process is stopped and was silent for the timeout.
    Stopped(Duration),
    /// Its process is gone.
    Gone,
}

impl std::fmt::Display for Loss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Loss::Silent(d) => write!(f, "no word for {:.1} s", d.as_secs_f64()),
            Loss::Hung(d, idle) => {
                write!(f, "its process is hung: no word for {:.1} s, and it neither ran nor waited for a CPU for {:.1} s", d.as_secs_f64(), idle.as_secs_f64())
            }
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
    /// The lateness the peer's last heartbeats reported (zero: on time).
    late: VecDeque<Duration>,
    /// A local peer's scheduler account when last probed, and when it last
    /// showed activity.
    seen: Option<(Activity, Duration)>,
}

impl Detector {
    /// A detector for a link with the configured `timeout`, heard at `now`.
    pub fn new(timeout: Duration, now: Duration) -> Self {
        Detector { timeout, last: now, gaps: VecDeque::with_capacity(WINDOW), late: VecDeque::new(), seen: None }
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

    /// A heartbeat came, saying its timer fired `late` (zero for one on
    /// time): the worst of the last [`WINDOW`] heartbeats counts.
    pub fn reported(&mut self, late: Duration) {
        if self.late.len() == WINDOW {
            self.late.pop_front();
        }
        self.late.push_back(late);
    }

    /// When the last frame came.
    pub fn last_heard(&self) -> Duration {
        self.last
    }

    /// Start afresh at `now` (the peer was told to stop judging, or resumed):
    /// the silence so far does not count; the jitter seen still does.
    pub fn restart(&mut self, now: Duration) {
        self.last = now;
        self.seen = None;
    }

    /// How long a remote peer's silence is suspicious after: the timeout,
    /// stretched by the jitter seen (at most [`MAX_STRETCH`] timeouts) and
    /// by the lateness the peer reported (at most [`REMOTE_CAP`] timeouts).
    pub fn deadline(&self) -> Duration {
        let reported = self.late.iter().max().map_or(self.timeout, |&late| self.timeout + late * REPORT_FACTOR);
        reported.clamp(self.timeout, self.timeout * REMOTE_CAP).max(self.jitter_deadline())
    }

    fn jitter_deadline(&self) -> Duration {
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
    pub fn judge(&mut self, now: Duration, peer: Peer) -> Verdict {
        let silence = now.saturating_sub(self.last);
        let wait_until = |limit: Duration| Verdict::Wait(limit.saturating_sub(silence).max(Duration::from_millis(1)));
        match peer {
            Peer::Gone => Verdict::Lost(Loss::Gone),
            Peer::Stopped if silence >= self.timeout => Verdict::Lost(Loss::Stopped(silence)),
            Peer::Stopped => wait_until(self.timeout),
            Peer::Remote if silence >= self.deadline() => Verdict::Lost(Loss::Silent(silence)),
            Peer::Remote => wait_until(self.deadline()),
            Peer::Alive(now_seen) => {
                // The last activity: a change in its scheduler account, a
                // thread runnable now, or (at the first look) now.
                let active = match self.seen {
                    Some((before, at)) if before.ran_ns == now_seen.ran_ns && before.waited_ns == now_seen.waited_ns && !now_seen.busy => at,
                    _ => now,
                };
                self.seen = Some((now_seen, active));
                let idle = now.saturating_sub(active.max(self.last));
                let grace = self.timeout * BLOCKED_GRACE;
                if silence >= self.timeout && idle >= grace {
                    return Verdict::Lost(Loss::Hung(silence, idle));
                }
                // Look again every timeout: it may stop, go, or block meanwhile.
                let next = if silence < self.timeout { self.timeout.saturating_sub(silence) } else { self.timeout.min(grace - idle) };
                Verdict::Wait(next.max(Duration::from_millis(1)))
            }
        }
    }
}

/// The state of process `pid` on this host, from `/proc/<pid>/stat` and
/// its threads' `stat` and `schedstat`.
pub fn probe(pid: u32) -> Peer {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return Peer::Gone };
    match crate::proc_stat::parse(&stat) {
        None => Peer::Gone,
        Some(s) if s.ended() => Peer::Gone,
        // A debugger holds it (MPIR: a tool attached to `dpm run` reads its
        // process table): a busy peer, not a hung one.
        Some(s) if s.traced() => Peer::Alive(Activity { busy: true, ..Activity::default() }),
        Some(s) if s.stopped() => Peer::Stopped,
        Some(s) => Peer::Alive(activity(pid, s.runnable())),
    }
}

/// The scheduler's account of `pid`'s threads; `busy` to begin with if
/// its main thread is runnable. Without schedstat (a kernel built without
/// it) the threads' CPU ticks from `stat` stand in for the time they ran.
fn activity(pid: u32, busy: bool) -> Activity {
    let mut a = Activity { busy, ..Activity::default() };
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return a };
    for task in tasks.flatten() {
        let dir = task.path();
        if let Ok(stat) = std::fs::read_to_string(dir.join("stat")) {
            if let Some(s) = crate::proc_stat::parse(&stat) {
                a.busy |= s.runnable();
                if let Some(ticks) = s.cpu_ticks {
                    a.ran_ns = a.ran_ns.wrapping_add(ticks.wrapping_mul(10_000_000));
                }
            }
        }
        if let Ok(sched) = std::fs::read_to_string(dir.join("schedstat")) {
            let mut fields = sched.split_whitespace().map(|f| f.parse::<u64>().unwrap_or(0));
            let (ran, waited) = (fields.next().unwrap_or(0), fields.next().unwrap_or(0));
            a.ran_ns = a.ran_ns.wrapping_add(ran);
            a.waited_ns = a.waited_ns.wrapping_add(waited);
        }
    }
    a
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
        let (mut d, now) = after(&[250; 40]);
        assert_eq!(d.deadline(), T);
        assert!(matches!(d.judge(now + ms(1400), Peer::Remote), Verdict::Wait(w) if w == ms(100)));
        assert_eq!(d.judge(now + T, Peer::Remote), Verdict::Lost(Loss::Silent(T)));
    }

    #[test]
    fn jitter_seen_on_the_link_stretches_the_deadline_up_to_its_bound() {
        // Frames late by up to a second on a loaded host.
        let gaps: Vec<u64> = (0..40).map(|i| if i % 4 == 0 { 1200 } else { 250 }).collect();
        let (mut d, now) = after(&gaps);
        let deadline = d.deadline();
        assert!(deadline > T && deadline <= T * MAX_STRETCH, "{deadline:?}");
        assert!(matches!(d.judge(now + T, Peer::Remote), Verdict::Wait(_)), "a late frame like those before is no loss");
        assert!(matches!(d.judge(now + deadline, Peer::Remote), Verdict::Lost(Loss::Silent(_))));
        // However wild the link, jitter alone stretches to MAX_STRETCH timeouts.
        let (mut wild, now) = after(&[100, 9000, 100, 9000, 100, 9000]);
        assert_eq!(wild.deadline(), T * MAX_STRETCH);
        assert!(matches!(wild.judge(now + T * MAX_STRETCH, Peer::Remote), Verdict::Lost(_)));
    }

    #[test]
    fn a_remote_peer_that_reported_starvation_gets_more_time_up_to_the_cap() {
        let (mut d, now) = after(&[250; 40]);
        d.reported(ms(20));
        assert_eq!(d.deadline(), T + ms(60), "a little lateness changes little");
        d.reported(ms(2000));
        d.reported(ms(100));
        assert_eq!(d.deadline(), T + ms(6000), "the worst lateness reported counts");
        assert!(matches!(d.judge(now + ms(7000), Peer::Remote), Verdict::Wait(w) if w == ms(500)));
        assert!(matches!(d.judge(now + ms(7500), Peer::Remote), Verdict::Lost(Loss::Silent(_))));
        d.reported(Duration::from_secs(3600));
        assert_eq!(d.deadline(), T * REMOTE_CAP);
        // Reports older than the last WINDOW heartbeats are forgotten.
        for _ in 0..WINDOW {
            d.reported(Duration::ZERO);
        }
        assert_eq!(d.deadline(), T);
    }

    fn active(ran_ns: u64, waited_ns: u64) -> Peer {
        Peer::Alive(Activity { ran_ns, waited_ns, busy: false })
    }

    #[test]
    fn a_starved_process_on_this_host_is_never_lost_by_silence() {
        let (mut d, now) = after(&[250; 40]);
        // Runnable all along (waiting for a CPU that never comes), or
        // running a little now and then: starved, for as long as it lasts.
        let runnable = Peer::Alive(Activity { ran_ns: 5, waited_ns: 7, busy: true });
        let mut t = now + T;
        for i in 0..(BLOCKED_GRACE as u64 * 10) {
            assert!(matches!(d.judge(t, runnable), Verdict::Wait(w) if w <= T), "{t:?}");
            assert!(matches!(d.judge(t, active(100 + i, 7)), Verdict::Wait(w) if w <= T), "{t:?}");
            t += T;
        }
    }

    #[test]
    fn a_process_on_this_host_that_neither_runs_nor_waits_is_hung_after_the_grace() {
        let (mut d, now) = after(&[250; 40]);
        let grace = T * BLOCKED_GRACE;
        // The first look: activity is taken as now.
        let first = now + ms(1000);
        assert!(matches!(d.judge(first, active(9, 9)), Verdict::Wait(w) if w == ms(500)));
        assert!(matches!(d.judge(now + T, active(9, 9)), Verdict::Wait(w) if w == T));
        assert!(matches!(d.judge(first + grace - ms(1), active(9, 9)), Verdict::Wait(w) if w == ms(1)));
        assert_eq!(d.judge(first + grace, active(9, 9)), Verdict::Lost(Loss::Hung(ms(1000) + grace, grace)));
        // One tick of scheduler time, and the count starts again.
        let (mut d, now) = after(&[250; 40]);
        d.judge(now + T, active(9, 9));
        d.judge(now + T + grace - ms(1), active(10, 9));
        assert!(matches!(d.judge(now + T + grace, active(10, 9)), Verdict::Wait(_)));
        assert!(matches!(d.judge(now + T + 2 * grace - ms(1), active(10, 9)), Verdict::Lost(Loss::Hung(..))));
        // A frame starts the silence afresh, and a restart forgets the account.
        let (mut d, now) = after(&[250; 40]);
        d.judge(now + T, active(9, 9));
        d.heard(now + grace);
        assert!(matches!(d.judge(now + grace + T, active(9, 9)), Verdict::Wait(_)));
        d.restart(now + 2 * grace);
        assert!(matches!(d.judge(now + 2 * grace + T, active(9, 9)), Verdict::Wait(_)));
    }

    #[test]
    fn a_stopped_process_is_lost_at_the_timeout_and_a_gone_one_at_once() {
        // Even after jitter that would stretch a remote peer's deadline.
        let gaps: Vec<u64> = (0..40).map(|i| if i % 4 == 0 { 1200 } else { 250 }).collect();
        let (mut d, now) = after(&gaps);
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
        // This thread runs (the test): alive and busy, with time on a CPU.
        assert!(matches!(probe(std::process::id()), Peer::Alive(a) if a.busy && a.ran_ns > 0), "{:?}", probe(std::process::id()));
        // A sleeping child: alive, its account still.
        let mut sleeper = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let quiet = loop {
            match (probe(sleeper.id()), std::thread::sleep(ms(20)), probe(sleeper.id())) {
                (Peer::Alive(a), (), Peer::Alive(b)) if a == b && !a.busy => break a,
                _ => assert!(std::time::Instant::now() < deadline, "sleep(1) never settled"),
            }
        };
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        assert!(quiet.ran_ns > 0 || quiet.waited_ns > 0, "{quiet:?}");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert_eq!(probe(pid), Peer::Gone);
    }
}
