//! The start handshake's judge: when a child daemon that has not said its
//! hello yet is taken for failed (plain state; [`crate::links`] reads the
//! clock and probes the child's process).
//!
//! Silence alone cried wolf: 256 virtual nodes started under a load of
//! 230+ on 2 cores failed with "no answer within 30 s" while the forked
//! daemons were runnable, only starved of CPU. The rule of
//! [`crate::liveness`] applies from the first byte: a daemon forked on this
//! host whose scheduler account moves (it ran, or waited for a CPU, or is
//! runnable) is starved, not hung, and is waited for — up to [`STARVED_CAP`]
//! handshake timeouts, so that nothing waits for ever. One that is gone
//! fails at once; stopped, or asleep without any activity for a whole
//! timeout (a deadlock, a dead file server), after the timeout. A daemon on
//! another host (ssh, srun, an agent: the local process is only the agent)
//! is judged by the timeout alone, as before.

use std::time::Duration;

use crate::liveness::{Activity, Loss, Peer};

/// A starved local daemon is waited for at most this many handshake timeouts.
pub const STARVED_CAP: u32 = 20;

/// How often a local daemon is probed once its handshake is overdue.
const PROBES_PER_TIMEOUT: u32 = 10;

/// One child's start handshake. Times are offsets from its start.
#[derive(Clone, Debug)]
pub struct StartWatch {
    timeout: Duration,
    /// The child's scheduler account when last probed, and when it last
    /// showed activity.
    seen: Option<(Activity, Duration)>,
}

/// Why a start handshake failed, beyond the wire's own errors.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StartLoss {
    /// The child's own loss ([`Loss`]: gone, stopped, hung, or silent — remote).
    Lost(Loss),
    /// Starved all along, past [`STARVED_CAP`] timeouts.
    Starved(Duration),
}

impl std::fmt::Display for StartLoss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartLoss::Lost(Loss::Silent(d)) => write!(f, "no answer within {} s", d.as_secs()),
            StartLoss::Lost(loss) => write!(f, "no answer: {loss}"),
            StartLoss::Starved(d) => write!(f, "no answer within {} s (its daemon ran, starved of CPU, all along)", d.as_secs()),
        }
    }
}

impl StartWatch {
    /// The handshake of a child started now, failed after `timeout` of silence.
    pub fn new(timeout: Duration) -> Self {
        StartWatch { timeout, seen: None }
    }

    /// When to look first.
    pub fn first_look(&self) -> Duration {
        self.timeout
    }

    /// At `elapsed` since the start, no hello yet, the child as probed:
    /// wait this much more, or fail.
    pub fn judge(&mut self, elapsed: Duration, peer: Peer) -> Result<Duration, StartLoss> {
        let left = |limit: Duration| limit.saturating_sub(elapsed).max(Duration::from_millis(1));
        match peer {
            Peer::Gone => Err(StartLoss::Lost(Loss::Gone)),
            Peer::Stopped if elapsed >= self.timeout => Err(StartLoss::Lost(Loss::Stopped(elapsed))),
            Peer::Remote if elapsed >= self.timeout => Err(StartLoss::Lost(Loss::Silent(elapsed))),
            Peer::Stopped | Peer::Remote => Ok(left(self.timeout)),
            Peer::Alive(now_seen) => {
                let active = match self.seen {
                    Some((before, at)) if before.ran_ns == now_seen.ran_ns && before.waited_ns == now_seen.waited_ns && !now_seen.busy => at,
                    _ => elapsed,
                };
                self.seen = Some((now_seen, active));
                let idle = elapsed.saturating_sub(active);
                if elapsed >= self.timeout && idle >= self.timeout {
                    return Err(StartLoss::Lost(Loss::Hung(elapsed, idle)));
                }
                let cap = self.timeout * STARVED_CAP;
                if elapsed >= cap {
                    return Err(StartLoss::Starved(elapsed));
                }
                if elapsed < self.timeout {
                    return Ok(left(self.timeout));
                }
                Ok((self.timeout / PROBES_PER_TIMEOUT).min(left(cap)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(30);

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn alive(ran_ns: u64, busy: bool) -> Peer {
        Peer::Alive(Activity { ran_ns, waited_ns: 0, busy })
    }

    #[test]
    fn a_remote_daemon_has_the_timeout_and_no_more() {
        let mut w = StartWatch::new(T);
        assert_eq!(w.first_look(), T);
        assert_eq!(w.judge(s(10), Peer::Remote), Ok(s(20)));
        assert_eq!(w.judge(s(30), Peer::Remote), Err(StartLoss::Lost(Loss::Silent(s(30)))));
        assert_eq!(w.judge(s(31), Peer::Remote).unwrap_err().to_string(), "no answer within 31 s");
    }

    #[test]
    fn a_starved_local_daemon_is_waited_for_and_a_hung_one_is_not() {
        // Starved: one CPU tick now and then (the node 0: 1 tick in 25 s).
        let mut w = StartWatch::new(T);
        let mut at = T;
        while at < s(25 * 30) {
            let ran = at.as_secs() / 25 * 10_000_000;
            match w.judge(at, alive(ran, false)) {
                Ok(wait) => at += wait,
                Err(e) => {
                    assert!(at >= T * STARVED_CAP, "a starved daemon failed at {at:?}: {e}");
                    assert!(matches!(e, StartLoss::Starved(_)), "{e}");
                    break;
                }
            }
        }
        assert!(at >= T * STARVED_CAP && at < T * STARVED_CAP + T, "bounded: {at:?}");
        // Runnable without a tick yet counts as starved too.
        let mut w = StartWatch::new(T);
        assert!(w.judge(s(30), alive(0, true)).is_ok());
        assert!(w.judge(s(61), alive(0, true)).is_ok());
        // Hung: asleep, its account still, for a whole timeout after it was first seen.
        let mut w = StartWatch::new(T);
        assert!(w.judge(s(30), alive(5, false)).is_ok());
        assert!(w.judge(s(45), alive(5, false)).is_ok());
        assert_eq!(w.judge(s(60), alive(5, false)), Err(StartLoss::Lost(Loss::Hung(s(60), s(30)))));
        // Gone at once; stopped after the timeout.
        assert_eq!(StartWatch::new(T).judge(s(1), Peer::Gone), Err(StartLoss::Lost(Loss::Gone)));
        assert!(StartWatch::new(T).judge(s(29), Peer::Stopped).is_ok());
        assert_eq!(StartWatch::new(T).judge(s(30), Peer::Stopped), Err(StartLoss::Lost(Loss::Stopped(s(30)))));
    }
}
