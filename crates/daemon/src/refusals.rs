//! Refused connections, logged in summary: the first at once, then at most
//! one line per [`PERIOD`] counting the rest. Another local user can connect
//! to a job's `--pmi-port` listener or a boot's control socket as often as
//! they like; each refusal used to log a line of its own (2,000 connects,
//! 2,000 lines: issue 26). Plain state: times in, lines out; the listener's
//! task reads the clock and sets a timer for [`RefusalLog::due`].

use std::time::Duration;

/// At most one line per this long.
pub const PERIOD: Duration = Duration::from_secs(1);

/// What to log for refused connections of one listener.
#[derive(Debug, Default)]
pub struct RefusalLog {
    /// When the last line was logged.
    last: Option<Duration>,
    /// Refused since then, not logged yet, and the last reason.
    held: u64,
    why: String,
}

impl RefusalLog {
    /// A connection was refused at `now` because of `why`: the line to log
    /// now, if any (else it is counted for a later summary).
    pub fn refused(&mut self, now: Duration, why: String) -> Option<String> {
        match self.last {
            Some(last) if now.saturating_sub(last) < PERIOD => {
                self.held += 1;
                self.why = why;
                None
            }
            _ if self.held > 0 => {
                self.held += 1;
                self.why = why;
                self.flush(now)
            }
            _ => {
                self.last = Some(now);
                Some(why)
            }
        }
    }

    /// When a summary of the refusals held is due, if any are.
    pub fn due(&self) -> Option<Duration> {
        (self.held > 0).then(|| self.last.unwrap_or_default() + PERIOD)
    }

    /// The summary of the refusals held, if any (and if it is due at `now`).
    pub fn flush(&mut self, now: Duration) -> Option<String> {
        let due = self.due()?;
        if now < due {
            return None;
        }
        let line =
            format!("{} more refused in the last {:.1} s, the last: {}", self.held, now.saturating_sub(self.last.unwrap_or_default()).as_secs_f64(), self.why);
        self.last = Some(now);
        self.held = 0;
        Some(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_first_refusal_is_logged_at_once_and_a_flood_costs_a_line_a_second() {
        let mut log = RefusalLog::default();
        let mut lines = Vec::new();
        // 2,000 connects in 2.5 s, and the timer's flushes as they fall due.
        for i in 0..2000u64 {
            let now = ms(i * 5 / 4);
            if let Some(due) = log.due().filter(|&d| d <= now) {
                lines.extend(log.flush(due));
            }
            lines.extend(log.refused(now, format!("uid 65534 (#{i})")));
        }
        lines.extend(log.flush(log.due().unwrap()));
        assert_eq!(lines[0], "uid 65534 (#0)");
        assert!(lines.len() <= 4, "{lines:?}");
        let counted: u64 = lines[1..].iter().map(|l| l.split(' ').next().unwrap().parse::<u64>().unwrap()).sum();
        assert_eq!(counted + 1, 2000, "every refusal is counted once: {lines:?}");
        assert!(lines.last().unwrap().ends_with("the last: uid 65534 (#1999)"), "{lines:?}");
        assert_eq!(log.due(), None, "nothing held after the last summary");
    }

    #[test]
    fn refusals_a_period_apart_are_each_logged() {
        let mut log = RefusalLog::default();
        assert_eq!(log.refused(ms(0), "a".into()).as_deref(), Some("a"));
        assert_eq!(log.refused(ms(1000), "b".into()).as_deref(), Some("b"));
        assert_eq!(log.due(), None);
        assert_eq!(log.refused(ms(1500), "c".into()), None);
        assert_eq!(log.flush(ms(1999)), None, "not due yet");
        assert_eq!(log.flush(ms(2000)).as_deref(), Some("1 more refused in the last 1.0 s, the last: c"));
    }
}
