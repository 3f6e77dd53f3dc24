//! Jobs that fail: the exit status must be the first failure's (see the
//! "Exit status" rules of `dpm run --help`), the bystander ranks must be
//! killed (they sleep 30 s and then print "was not killed": its absence, not
//! a run's duration, proves it), stderr must say what happened, and nothing
//! may be left running.

mod common;

use common::{hostname, program, Dpm, Output, TempFile};

/// A rank that sleeps 30 s and then says it was not killed.
const BYSTANDER: &str = "sleep 30; echo rank $PMI_RANK was not killed";

/// The pid dpm reported for `rank N (pid P on host)`.
fn reported_pid(out: &Output, rank: u32) -> u32 {
    let err = out.stderr_str();
    let tag = format!("rank {rank} (pid ");
    let at = err.find(&tag).unwrap_or_else(|| panic!("stderr does not name {tag:?}\n{}", out.describe()));
    let rest = &err[at + tag.len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let after = &rest[digits.len()..];
    let host = hostname();
    assert!(after.starts_with(&format!(" on {host})")), "expected ' on {host})' after the pid in stderr\n{}", out.describe());
    digits.parse().unwrap_or_else(|_| panic!("no pid after {tag:?}\n{}", out.describe()))
}

#[test]
fn mpi_abort_ends_the_job_with_its_code() {
    let out = Dpm::run(["-n", "4", &program("abort"), "1", "7"]).output();
    out.assert_code(7);
    out.assert_stdout_contains("rank 1 aborting with code 7");
    out.assert_stdout_lacks("was not killed");
    out.assert_stderr_contains("rank 1 ");
    out.assert_stderr_contains("MPI_Abort");
    assert!(reported_pid(&out, 1) > 0);
}

#[test]
fn mpi_abort_code_of_rank_zero() {
    let out = Dpm::run(["-n", "2", &program("abort"), "0", "42"]).output();
    out.assert_code(42);
    out.assert_stdout_lacks("was not killed");
    out.assert_stderr_contains("rank 0 ");
    out.assert_stderr_contains("MPI_Abort");
}

#[test]
fn segfault_is_reported_as_signal_death() {
    let out = Dpm::run(["-n", "3", &program("segv"), "1"]).output();
    out.assert_code(128 + 11);
    out.assert_stdout_contains("rank 1 raising SIGSEGV");
    out.assert_stdout_lacks("was not killed");
    let err = out.stderr_str();
    assert!(err.contains("signal 11") || err.contains("SIGSEGV"), "stderr names neither signal 11 nor SIGSEGV\n{}", out.describe());
    assert!(reported_pid(&out, 1) > 0);
}

#[test]
fn exit_without_finalize_fails_the_job() {
    let out = Dpm::run(["-n", "3", &program("nofinalize"), "1"]).output();
    out.assert_code(1);
    out.assert_stdout_contains("rank 1 exiting without MPI_Finalize");
    out.assert_stdout_lacks("was not killed");
    out.assert_stderr_contains("rank 1 ");
    out.assert_stderr_contains("without calling MPI_Finalize");
}

#[test]
fn missing_program_is_127() {
    let out = Dpm::run(["-n", "2", "/nonexistent/dpm-test-no-such-program"]).output();
    out.assert_code(127);
    out.assert_stderr_contains("command not found");
    out.assert_stderr_contains("dpm-test-no-such-program");
}

#[test]
fn missing_program_on_path_is_127() {
    let out = Dpm::run(["-n", "1", "dpm-test-no-such-command-xyz"]).output();
    out.assert_code(127);
    out.assert_stderr_contains("command not found");
}

#[test]
fn missing_program_in_a_later_segment_is_127_and_kills_the_rest() {
    let out = Dpm::run(["-n", "2", "/bin/sh", "-c", BYSTANDER, ":", "-n", "1", "/nonexistent/dpm-test-no-such-program"]).output();
    out.assert_code(127);
    out.assert_stderr_contains("command not found");
    out.assert_stdout_lacks("was not killed");
}

#[test]
fn non_executable_file_is_126() {
    let file = TempFile::new("dpm-test-noexec", b"#!/bin/sh\necho should-not-run\n", 0o644);
    let out = Dpm::run(["-n", "2", &file.path_str()]).output();
    out.assert_code(126);
    out.assert_stdout_lacks("should-not-run");
}

#[test]
fn exec_failure_at_launch_is_127_and_kills_the_started_ranks() {
    // Executable, so any up-front check passes, but execve fails (ENOENT:
    // the interpreter is missing) while the other segment is already running.
    let file = TempFile::new("dpm-test-badinterp", b"#!/nonexistent/dpm-test-interpreter\n", 0o755);
    let out = Dpm::run(["-n", "2", "/bin/sh", "-c", BYSTANDER, ":", "-n", "1", &file.path_str()]).output();
    out.assert_code(127);
    out.assert_stderr_contains("rank 2 ");
    out.assert_stdout_lacks("was not killed");
}

#[test]
fn exit_code_of_a_non_mpi_program() {
    Dpm::run(["-n", "1", "/bin/sh", "-c", "exit 3"]).output().assert_code(3);
}

#[test]
fn first_failing_rank_decides_and_others_are_killed() {
    let out = Dpm::run(["-n", "3", "/bin/sh", "-c", "if [ \"$PMI_RANK\" = 2 ]; then exit 5; fi; sleep 30; echo was not killed"]).output();
    out.assert_code(5);
    out.assert_stdout_lacks("was not killed");
    out.assert_stderr_contains("rank 2 ");
    out.assert_stderr_contains("exited with code 5");
}

#[test]
fn rank_killed_by_a_signal_is_128_plus_n() {
    let out = Dpm::run(["-n", "2", "/bin/sh", "-c", "if [ \"$PMI_RANK\" = 1 ]; then kill -9 $$; fi; sleep 30; echo was not killed"]).output();
    out.assert_code(128 + 9);
    out.assert_stdout_lacks("was not killed");
    out.assert_stderr_contains("SIGKILL");
}

#[test]
fn non_mpi_program_exiting_zero_is_success() {
    let out = Dpm::run(["-n", "4", "/bin/true"]).output();
    out.assert_success();
    assert!(out.stderr.is_empty(), "a successful job should print nothing on stderr\n{}", out.describe());
}

#[test]
fn timeout_kills_the_job_with_124() {
    let out = Dpm::run(["--timeout", "1", "-n", "2", "/bin/sh", "-c", BYSTANDER]).output();
    out.assert_code(124);
    out.assert_stdout_lacks("was not killed");
    // What dpm says names the timer that ended the run and its length (that
    // it fires no sooner is the run reactor's unit test, on its own clock).
    out.assert_stderr_contains("dpm: job timed out after 1 s; killing it");
}

#[test]
fn timeout_from_mpiexec_timeout_variable() {
    let out = Dpm::run(["-n", "1", "sleep", "30"]).env("MPIEXEC_TIMEOUT", "1").output();
    out.assert_code(124);
    out.assert_stderr_contains("timed out");
}

#[test]
fn timeout_not_reached_keeps_the_job_status() {
    Dpm::run(["--timeout", "30", "-n", "2", "/bin/true"]).output().assert_success();
}

#[test]
fn timeout_also_kills_ranks_that_ignore_sigterm() {
    let out = Dpm::run(["--timeout", "1", "--kill-grace", "0.5", "-n", "2", "/bin/sh", "-c", "trap '' TERM INT; sleep 30; echo survived"]).output();
    out.assert_code(124);
    out.assert_stdout_lacks("survived");
}

/// MPICH's node shared-memory segment of a killed job (`/dev/shm/mpich_shm_<id>_<node>`,
/// `<id>` the FNV-1a hash of the kvsname) is removed when the job ends.
#[test]
fn a_killed_jobs_mpich_shared_memory_is_removed() {
    let out = Dpm::run(["--pmi-trace", "--virtual-nodes", "2", "-n", "4", &program("abort"), "1", "7"]).output();
    out.assert_code(7);
    let err = out.stderr_str();
    let kvsname = err
        .lines()
        .find_map(|l| l.split_once("cmd=my_kvsname ").and_then(|(_, r)| r.split_whitespace().find_map(|kv| kv.strip_prefix("kvsname="))))
        .unwrap_or_else(|| panic!("no kvsname in the trace\n{}", out.describe()))
        .to_string();
    let id = kvsname.bytes().fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193));
    let left: Vec<String> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("mpich_shm_{id:x}_")) || n.starts_with(&format!("mpich_vci_{id:x}_")))
        .collect();
    assert!(left.is_empty(), "segments of {kvsname} left in /dev/shm: {left:?}");
}
