//! Signals sent to dpm itself: SIGINT/SIGTERM are forwarded and dpm exits
//! 128+N; a second signal kills at once; SIGKILL of dpm still takes the
//! ranks down (PR_SET_PDEATHSIG). In every case nothing may be left running.

mod common;

use std::time::{Duration, Instant};

use common::{leftovers_after, Dpm, TempDir};

/// Start `args` (which must keep `procs` marked processes alive), wait until
/// they all run, send `sig` to dpm and return its output.
fn interrupt(args: &[&str], procs: usize, sig: &str) -> common::Output {
    let mut running = Dpm::run(args).spawn();
    running.wait_for_procs(procs);
    running.signal(sig);
    running.wait()
}

// The ranks below sleep 600 s and the kill grace, where it is not the
// subject, is 600 s: both far beyond the test watchdog (60 s), so a run
// that ends at all was ended by the signal under test, not by a clock.

#[test]
fn sigint_is_forwarded_and_exit_is_130() {
    // sleep dies of the forwarded SIGINT at once; without forwarding only
    // the 600 s kill grace would end it.
    let out = interrupt(&["--kill-grace", "600", "-n", "3", "sleep", "600"], 3, "INT");
    out.assert_code(130);
    out.assert_stderr_contains("SIGINT");
}

#[test]
fn sigterm_is_forwarded_and_exit_is_143() {
    let out = interrupt(&["--kill-grace", "600", "-n", "3", "sleep", "600"], 3, "TERM");
    out.assert_code(143);
    out.assert_stderr_contains("SIGTERM");
}

#[test]
fn ranks_ignoring_sigint_are_killed_after_the_grace() {
    // Each rank notes the forwarded SIGINT in a file (a shell builtin, no
    // fork) and goes on waiting; its `sleep` ignores SIGINT and TERM. Only
    // the grace's SIGKILL can end them (the whole process group, not only
    // the rank itself): the run ends, nobody survived, and each rank had
    // noted the SIGINT before it died, so the SIGKILL did not come with it.
    let dir = TempDir::new("dpm-grace");
    let script =
        format!("trap 'echo int >> {}/got-int.$$' INT; trap '' TERM; sleep 600 & while kill -0 $! 2>/dev/null; do wait; done; echo survived", dir.path_str());
    let args = ["--kill-grace", "1", "-n", "2", "/bin/sh", "-c", &script];
    let running = Dpm::run(args).spawn();
    common::wait_for_ranks(running.marker(), "sleep 600", 2);
    running.signal("INT");
    let out = running.wait();
    out.assert_code(130);
    out.assert_stdout_lacks("survived");
    let noted = std::fs::read_dir(&dir.path).map_or(0, |d| d.count());
    assert_eq!(noted, 2, "ranks that noted the SIGINT before the SIGKILL\n{}", out.describe());
}

#[test]
fn second_sigint_kills_at_once() {
    // The grace is 600 s; a second SIGINT must not wait for it. Each rank
    // notes every SIGINT that reaches it in a file and waits on (its
    // `sleep`, started in the background, ignores SIGINT; only its end ends
    // the loop, and SIGKILL ends the shell with it): the second SIGINT is sent once
    // both ranks got the first, so dpm has taken the first, whatever the
    // load (two SIGINTs sent before dpm reads one would merge into one).
    let dir = TempDir::new("dpm-second-sigint");
    let script =
        format!("trap 'touch {}/got-int.$$' INT; trap '' TERM; sleep 600 & while kill -0 $! 2>/dev/null; do wait; done; echo survived", dir.path_str());
    let args = ["--kill-grace", "600", "-n", "2", "/bin/sh", "-c", &script];
    let running = Dpm::run(args).spawn();
    // Both `sleep`s run: each shell has its trap and its SIGINT-proof child
    // (a SIGINT between the fork and the child's ignoring it would end it).
    common::wait_for_ranks(running.marker(), "sleep 600", 2);
    running.signal("INT");
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read_dir(&dir.path).map_or(0, |d| d.count()) < 2 {
        assert!(Instant::now() < deadline, "the ranks never got the forwarded SIGINT");
        std::thread::sleep(Duration::from_millis(20));
    }
    running.signal("INT");
    let out = running.wait();
    out.assert_code(130);
    out.assert_stderr_contains("got SIGINT again; killing every process now");
    out.assert_stdout_lacks("survived");
}

#[test]
fn sigkill_of_dpm_takes_the_ranks_down() {
    let mut running = Dpm::run(["-n", "3", "sleep", "600"]).spawn();
    running.wait_for_procs(3);
    let marker = running.marker().to_string();
    running.signal("KILL");
    let out = running.wait_unchecked();
    assert_eq!(out.status.code(), None, "dpm should have died of SIGKILL: {:?}", out.status);
    // A hang guard: the wait ends as soon as the ranks are gone.
    let left = leftovers_after(&marker, Duration::from_secs(30));
    assert!(left.is_empty(), "ranks survived dpm's SIGKILL for 30 s: {left:?}");
}
