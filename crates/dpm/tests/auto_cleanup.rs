//! `-disable-auto-cleanup` with Hydra's meaning, and never a hang: a rank
//! that dies of a signal or exits without `MPI_Finalize` does not end the
//! others at once; they learn it (`PMI_dead_processes`), and once one of them
//! waits in a PMI fence the dead rank can never join (`MPI_Finalize`'s), the
//! run ends with the first failure's status (README: 128+N for signal N).
//! Side by side with `.venv/bin/mpiexec.hydra` (MPICH 5.0.2) where Hydra
//! ends: the survivors print the same. Where Hydra hangs (a rank that exits
//! before `MPI_Finalize`), its survivors' output up to the hang is the same.
//! Also: a rank that exits non-zero after `MPI_Finalize` does not cut the
//! others short (with or without the option), `--timeout` does not hide the
//! failure, and `MPI_Abort`'s clean-up blames nobody.
//!
//! Every case is run at n = 2 and 4, on one node and on 2 virtual nodes,
//! under the harness's watchdog.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{hydra, program, Dpm, Output};

/// How the victim (rank 1) of `tests/programs/die` ends.
const SIGNALS: [(&str, i32); 4] = [("SEGV", 11), ("ABRT", 6), ("KILL", 9), ("TERM", 15)];

/// The lines of ranks other than the victim (rank 1), sorted.
fn survivors(out: &Output) -> Vec<String> {
    let mut lines: Vec<String> = out.lines().into_iter().filter(|l| l.starts_with("rank ") && !l.starts_with("rank 1 ")).collect();
    lines.sort();
    lines
}

/// What the survivors print: each says it is finalizing, and, when `done`,
/// that it finalized.
fn expected(n: u32, done: bool) -> Vec<String> {
    let mut lines = Vec::new();
    for r in (0..n).filter(|&r| r != 1) {
        lines.push(format!("rank {r} finalizing"));
        if done {
            lines.push(format!("rank {r} finalized"));
        }
    }
    lines.sort();
    lines
}

fn dpm(args: &[&str]) -> Output {
    Dpm::run(args).watchdog(Duration::from_secs(60)).output()
}

fn under_hydra(args: &[&str]) -> Output {
    common::hydra_output(|| Dpm::mpiexec(&hydra(), args))
}

/// Hydra, bounded: with a dead rank it ends the run (its proxy kills the
/// node's ranks) or hangs with the survivors in `MPI_Finalize` (about half
/// the runs of a signal death at n = 2, every exit before `MPI_Finalize`).
/// Killed with its process group after `HYDRA_BOUND`; the survivors' lines
/// it printed are the reference either way.
fn hydra_bounded(args: &[&str]) -> Vec<String> {
    let marker = common::unique("dpmtest-hydra");
    let out = Command::new("timeout")
        .args(["-s", "KILL", HYDRA_BOUND])
        .arg(hydra())
        .args(["-genv", "DPM_TEST_MARKER", &marker])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run mpiexec.hydra under timeout");
    common::kill_marked(&marker);
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines: Vec<String> = text.lines().filter(|l| l.starts_with("rank ") && !l.starts_with("rank 1 ")).map(str::to_string).collect();
    lines.sort();
    lines
}

const HYDRA_BOUND: &str = "4";

#[test]
fn a_rank_killed_by_a_signal_ends_the_run_once_the_others_wait_for_it() {
    let die = program("die");
    for (name, sig) in SIGNALS {
        for n in [2u32, 4] {
            let ns = n.to_string();
            let hydra = hydra_bounded(&["-disable-auto-cleanup", "-n", &ns, &die, name]);
            assert_eq!(hydra, expected(n, false), "Hydra, {name}, n={n}");
            for nodes in ["1", "2"] {
                let out = dpm(&["--virtual-nodes", nodes, "-disable-auto-cleanup", "-n", &ns, &die, name]);
                let what = format!("{name}, n={n}, {nodes} node(s)\n{}", out.describe());
                out.assert_code(128 + sig);
                assert_eq!(survivors(&out), hydra, "{what}");
                assert!(out.stdout_str().contains(&format!("rank 1 raising SIG{name}")), "{what}");
                out.assert_stderr_contains("rank 1 (pid ");
                out.assert_stderr_contains(&format!("was killed by signal {sig}"));
                out.assert_stderr_contains("can never join");
            }
        }
    }
}

#[test]
fn a_rank_exiting_before_finalize_ends_the_run_where_hydra_hangs() {
    let die = program("die");
    // Hydra never ends this run: its survivors wait in MPI_Finalize for ever.
    let hydra = hydra_bounded(&["-disable-auto-cleanup", "-n", "4", &die, "exit3"]);
    assert_eq!(hydra, expected(4, false));
    for (how, code) in [("exit3", 3), ("exit0", 1)] {
        for n in [2u32, 4] {
            let ns = n.to_string();
            for nodes in ["1", "2"] {
                let out = dpm(&["--virtual-nodes", nodes, "-disable-auto-cleanup", "-n", &ns, &die, how]);
                let what = format!("{how}, n={n}, {nodes} node(s)\n{}", out.describe());
                out.assert_code(code);
                assert_eq!(survivors(&out), expected(n, false), "{what}");
                assert!(out.stdout_str().contains("rank 1 exiting"), "{what}");
                out.assert_stderr_contains("can never join");
            }
        }
    }
}

/// With or without `-disable-auto-cleanup`: a rank past `MPI_Finalize` that
/// exits 3 leaves the others to finish (Hydra's behaviour); the run exits 3.
#[test]
fn a_rank_exiting_non_zero_after_finalize_lets_the_others_finish() {
    let die = program("die");
    for flag in [None, Some("-disable-auto-cleanup")] {
        for n in [2u32, 4] {
            let ns = n.to_string();
            let mut args: Vec<&str> = flag.into_iter().collect();
            args.extend(["-n", &ns, &die, "after3"]);
            let hydra = under_hydra(&args);
            hydra.assert_code(3);
            assert_eq!(survivors(&hydra), expected(n, true), "Hydra\n{}", hydra.describe());
            for nodes in ["1", "2"] {
                let mut dargs = vec!["--virtual-nodes", nodes];
                dargs.extend(&args);
                let out = dpm(&dargs);
                let what = format!("{flag:?}, n={n}, {nodes} node(s)\n{}", out.describe());
                out.assert_code(3);
                assert_eq!(survivors(&out), survivors(&hydra), "{what}");
                out.assert_stderr_contains("rank 1 (pid ");
                assert!(!out.stderr_str().contains("terminated"), "nobody was cut short: {what}");
            }
        }
    }
}

/// The others sleep 30 s without a fence: the timeout ends the run, and
/// the signal death before it decides the status, not the timeout's 124.
#[test]
fn a_timeout_after_a_signal_death_keeps_the_signal_s_status() {
    let out = dpm(&["--timeout", "5", "-disable-auto-cleanup", "-n", "3", &program("segv")]);
    out.assert_code(139);
    out.assert_stderr_contains("was killed by signal 11");
    assert!(out.elapsed < Duration::from_secs(25), "ended by the timeout, not the ranks' 30 s\n{}", out.describe());
}

/// dpm's own SIGKILLs of the abort's clean-up are no failure of anyone's.
#[test]
fn mpi_abort_under_disable_auto_cleanup_blames_no_rank_for_the_clean_up() {
    for nodes in ["1", "2"] {
        let out = dpm(&["--virtual-nodes", nodes, "-disable-auto-cleanup", "-n", "3", &program("abort"), "1", "7"]);
        out.assert_code(7);
        out.assert_stderr_contains("called MPI_Abort with exit code 7");
        assert!(!out.stderr_str().contains("killed by signal"), "{}", out.describe());
    }
}
