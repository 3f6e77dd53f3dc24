//! A warm spawn's pooled rank may run in the background until its claim:
//! it starts the MPI library (tens of ms of CPU) ahead of a spawn that may
//! never come. `DPM_WARM_NICE=N` (1–19) puts it there; the default, 0,
//! leaves it at the job's priority.
//!
//! Every rank leads a session of its own, and under the kernel's autogroup
//! scheduler (`/proc/sys/kernel/sched_autogroup_enabled`, on by default)
//! the CPU is shared between sessions first: a task's own nice value only
//! weighs it against its session's other tasks. So the pooled rank's
//! *session* is put at nice N (`/proc/<pid>/autogroup`: at 19 a weight of
//! 15 against a running session's 1024) and back at 0 at its claim (and
//! before it is killed: a process in the background would wait for a CPU
//! to run its own exit). Raising an autogroup's nice value and setting it
//! back to 0 needs no privilege, and the children and threads the rank
//! starts are in its session. A rank that is not a session leader
//! (`DPM_RANK_SESSION=group`) shares dpm's own session and is left alone,
//! as is every rank where autogroup is off.
//!
//! Why not by default (issue 37, bench/spawn/run's `series` case with
//! `--warm-variant DPM_WARM_NICE=…`, alternating, on the shared 2-core
//! machine at a load average of ~20 from other work): at 19 the pool got
//! almost no CPU between the pools of the series, and the later pools'
//! first results were as slow as cold ones (487 ms against 531 cold and
//! 161 at nice 0; the whole series 0.98× cold against 0.72× at nice 0).
//! What keeps the pool off the job's own CPU is *when* it starts (a first
//! miss starts nothing; a refill waits for the job's end or 50 ms after a
//! claim: `dpm_launcher`'s warm spawn), not its priority.

use std::sync::OnceLock;

/// The nice value of a pooled rank's session by default (none).
pub const POOLED_NICE: u8 = 0;

/// The nice value pooled ranks' sessions get (`DPM_WARM_NICE`, read once).
pub fn pooled_nice() -> u8 {
    static NICE: OnceLock<u8> = OnceLock::new();
    *NICE.get_or_init(|| parse_nice(std::env::var("DPM_WARM_NICE").ok().as_deref()))
}

/// `DPM_WARM_NICE`'s value: 0–19; anything else (or nothing) is the default.
pub fn parse_nice(value: Option<&str>) -> u8 {
    match value.map(|v| v.trim().parse::<u8>()) {
        Some(Ok(n)) if n <= 19 => n,
        Some(_) => {
            tracing::warn!("DPM_WARM_NICE must be 0 to 19; using {POOLED_NICE}");
            POOLED_NICE
        }
        None => POOLED_NICE,
    }
}

/// Put the session led by `pid` at `nice` (a pooled rank: [`pooled_nice`];
/// claimed: 0). Nothing if `pid` does not lead its session (it would be
/// dpm's) or has ended; a refusal is logged at debug level.
pub fn set_session_nice(pid: i32, nice: u8) {
    let p = nix::unistd::Pid::from_raw(pid);
    if pid <= 0 || nix::unistd::getsid(Some(p)) != Ok(p) {
        return;
    }
    if let Err(e) = std::fs::write(format!("/proc/{pid}/autogroup"), nice.to_string()) {
        tracing::debug!(pid, nice, "cannot set the session's nice value: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_takes_0_to_19_and_falls_back_to_the_default() {
        assert_eq!(parse_nice(None), POOLED_NICE);
        assert_eq!(parse_nice(Some("19")), 19);
        assert_eq!(parse_nice(Some(" 10 ")), 10);
        assert_eq!(parse_nice(Some("20")), POOLED_NICE);
        assert_eq!(parse_nice(Some("-1")), POOLED_NICE);
        assert_eq!(parse_nice(Some("x")), POOLED_NICE);
    }

    fn autogroup_nice(pid: u32) -> String {
        let line = std::fs::read_to_string(format!("/proc/{pid}/autogroup")).expect("autogroup");
        line.split_whitespace().last().unwrap_or_default().to_string()
    }

    /// `setsid sleep 30` (util-linux's setsid execs in place: the pid leads its session).
    struct Sleeper(std::process::Child);
    impl Drop for Sleeper {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn wait_for_sid(pid: u32, leader: bool) {
        let p = nix::unistd::Pid::from_raw(pid as i32);
        for _ in 0..500 {
            if (nix::unistd::getsid(Some(p)) == Ok(p)) == leader && std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|e| e.ends_with("sleep")) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("{pid} did not become a sleeping (leader: {leader}) process");
    }

    #[test]
    fn a_session_leader_goes_to_the_background_and_back() {
        assert!(std::path::Path::new("/proc/self/autogroup").exists(), "this kernel has no autogroup scheduler");
        let child = Sleeper(std::process::Command::new("setsid").args(["sleep", "30"]).spawn().expect("setsid sleep"));
        let pid = child.0.id();
        wait_for_sid(pid, true);
        set_session_nice(pid as i32, 19);
        assert_eq!(autogroup_nice(pid), "19");
        set_session_nice(pid as i32, 0);
        assert_eq!(autogroup_nice(pid), "0");
    }

    #[test]
    fn a_process_that_leads_no_session_is_left_alone() {
        let child = Sleeper(std::process::Command::new("sleep").arg("30").spawn().expect("sleep"));
        let pid = child.0.id();
        wait_for_sid(pid, false);
        let before = std::fs::read_to_string("/proc/self/autogroup").expect("autogroup");
        set_session_nice(pid as i32, 19);
        assert_eq!(std::fs::read_to_string("/proc/self/autogroup").expect("autogroup"), before, "the test's own session was changed");
        assert_eq!(autogroup_nice(pid), before.split_whitespace().last().unwrap_or_default());
    }
}
