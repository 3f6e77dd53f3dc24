//! Signals sent to dpm itself: SIGINT/SIGTERM are forwarded and dpm exits
//! 128+N; a second signal kills at once; SIGKILL of dpm still takes the
//! ranks down (PR_SET_PDEATHSIG). In every case nothing may be left running.

mod common;

use std::time::{Duration, Instant};

use common::{leftovers_after, Dpm};

/// Start `args` (which must keep `procs` marked processes alive), wait until
/// they all run, send `sig` to dpm and return the output and the time from
/// the signal to dpm's exit.
fn interrupt(args: &[&str], procs: usize, sig: &str) -> (common::Output, Duration) {
    let mut running = Dpm::run(args).spawn();
    running.wait_for_procs(procs);
    let sent = Instant::now();
    running.signal(sig);
    let out = running.wait();
    (out, sent.elapsed())
}

#[test]
fn sigint_is_forwarded_and_exit_is_130() {
    let (out, took) = interrupt(&["-n", "3", "sleep", "30"], 3, "INT");
    out.assert_code(130);
    // sleep dies of the forwarded SIGINT at once; waiting for the 3 s
    // kill grace would mean the signal was not forwarded.
    assert!(took < Duration::from_millis(2500), "dpm took {took:?} to exit after SIGINT\n{}", out.describe());
    out.assert_stderr_contains("SIGINT");
}

#[test]
fn sigterm_is_forwarded_and_exit_is_143() {
    let (out, took) = interrupt(&["-n", "3", "sleep", "30"], 3, "TERM");
    out.assert_code(143);
    assert!(took < Duration::from_millis(2500), "dpm took {took:?} to exit after SIGTERM\n{}", out.describe());
    out.assert_stderr_contains("SIGTERM");
}

#[test]
fn ranks_ignoring_sigint_are_killed_after_the_grace() {
    // sh ignores SIGINT and so does its child sleep; --kill-grace 0.5 must
    // end both (the whole process group, not only the rank itself).
    let args = ["--kill-grace", "0.5", "-n", "2", "/bin/sh", "-c", "trap '' INT TERM; sleep 30; echo survived"];
    let (out, took) = interrupt(&args, 4, "INT");
    out.assert_code(130);
    out.assert_stdout_lacks("survived");
    assert!(took >= Duration::from_millis(400), "SIGKILL came before the grace: {took:?}");
    assert!(took < Duration::from_millis(2500), "dpm took {took:?} with --kill-grace 0.5\n{}", out.describe());
}

#[test]
fn second_sigint_kills_at_once() {
    // Default grace is 3 s; a second SIGINT must not wait for it.
    let args = ["-n", "2", "/bin/sh", "-c", "trap '' INT TERM; sleep 30; echo survived"];
    let mut running = Dpm::run(args).spawn();
    running.wait_for_procs(4);
    let sent = Instant::now();
    running.signal("INT");
    std::thread::sleep(Duration::from_millis(300));
    running.signal("INT");
    let out = running.wait();
    let took = sent.elapsed();
    out.assert_code(130);
    out.assert_stdout_lacks("survived");
    assert!(took < Duration::from_millis(2000), "dpm took {took:?} after a second SIGINT\n{}", out.describe());
}

#[test]
fn sigkill_of_dpm_takes_the_ranks_down() {
    let mut running = Dpm::run(["-n", "3", "sleep", "30"]).spawn();
    running.wait_for_procs(3);
    let marker = running.marker().to_string();
    running.signal("KILL");
    let out = running.wait_unchecked();
    assert_eq!(out.status.code(), None, "dpm should have died of SIGKILL: {:?}", out.status);
    let left = leftovers_after(&marker, Duration::from_secs(2));
    assert!(left.is_empty(), "ranks survived dpm's SIGKILL for 2 s: {left:?}");
}
