//! `/proc/<pid>/stat`, the fields dpm reads: a process's (or thread's)
//! state (has it ended?), its process group and the CPU time it used.

/// The state and process group of one `/proc/<pid>/stat` line.
pub(crate) struct Stat<'a> {
    state: &'a str,
    pub pgrp: Option<i32>,
    /// User and system time, in clock ticks (`utime` + `stime`).
    pub cpu_ticks: Option<u64>,
}

impl Stat<'_> {
    /// A zombie, or dead.
    pub fn ended(&self) -> bool {
        matches!(self.state, "Z" | "X" | "x")
    }

    /// Running or waiting for a CPU (`R`): not waiting for anything else.
    pub fn runnable(&self) -> bool {
        self.state == "R"
    }

    /// Stopped by a signal (`T`) or under a tracer (`t`).
    pub fn stopped(&self) -> bool {
        matches!(self.state, "T" | "t")
    }

    /// Stopped under a tracer (`t`): a debugger holds it.
    pub fn traced(&self) -> bool {
        self.state == "t"
    }
}

/// `pid (comm) state ppid pgrp …`: `comm` may hold anything, spaces and `)`
/// included, so the fields start after the last `)`. `None` if there is none.
pub(crate) fn parse(stat: &str) -> Option<Stat<'_>> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    let pgrp = fields.nth(1).and_then(|p| p.parse::<i32>().ok());
    // After pgrp: session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime.
    let mut times = fields.skip(8).map(|f| f.parse::<u64>().ok());
    let cpu_ticks = match (times.next().flatten(), times.next().flatten()) {
        (Some(user), Some(system)) => Some(user + system),
        _ => None,
    };
    Some(Stat { state, pgrp, cpu_ticks })
}

/// `pid` is a zombie or gone (`/proc/<pid>/stat`'s state).
pub(crate) fn has_exited(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return true };
    parse(&stat).is_none_or(|s| s.ended())
}

#[cfg(test)]
mod tests {
    use super::{has_exited, parse};

    #[test]
    fn the_fields_come_after_the_last_parenthesis() {
        let s = parse("42 (a) b) (c) Z 1 77 77 0").unwrap();
        assert!(s.ended());
        assert_eq!(s.pgrp, Some(77));
        let s = parse("43 (sleep) S 1 43 43 0").unwrap();
        assert!(!s.ended());
        assert_eq!(s.pgrp, Some(43));
        assert!(parse("garbage").is_none());
        assert_eq!(s.cpu_ticks, None, "a line cut short has no times");
        let s = parse("44 (x y) R 1 44 44 0 -1 4194304 10 0 0 0 7 5 0 0 20 0 1 0").unwrap();
        assert_eq!(s.cpu_ticks, Some(12));
        assert!(s.runnable());
    }

    #[test]
    fn a_running_process_has_not_exited_a_zombie_and_a_reaped_one_have() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        assert!(!has_exited(pid));
        child.kill().unwrap();
        // Killed but not reaped: a zombie.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !has_exited(pid) {
            assert!(std::time::Instant::now() < deadline, "never became a zombie");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        child.wait().unwrap();
        assert!(has_exited(pid));
        assert!(!has_exited(std::process::id() as i32));
    }
}
