//! The benchmark suite (bench/run → bench/suite/run) in smoke mode under dpm.
//!
//! One run of `bench/run --smoke --check --launchers dpm`: it builds the
//! suite's C programs (startup, spawn, intercomm, onesided) with the .venv's
//! mpicc into a scratch directory, runs every case once under this test's dpm
//! with tiny sizes and counts, has every program validate its data
//! (`--check`), validates every JSON line against bench/suite/schema.json and
//! draws the plots. The test then checks the results directory from the
//! outside: the schema validator again, every record checked and from dpm,
//! each benchmark present, the PNGs, and that no process was left behind.
//! A second test runs the unit tests of bench/dpmbench, the toolkit every
//! runner under bench/ uses.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::{dpm_bin, kill_marked, leftovers_after, repo_root, unique, LEFTOVER_GRACE, MARKER_VAR};

/// Far above the ~20-30 s the smoke run takes on 2 busy cores.
const LIMIT: Duration = Duration::from_secs(180);

/// (family, test) pairs the smoke run must have produced.
const EXPECTED: &[(&str, &str)] = &[
    ("startup", "init"),
    ("startup", "launch_to_init"),
    ("startup", "wall"),
    ("spawn", "latency"),
    ("spawn", "ready"),
    ("spawn", "first_msg"),
    ("spawn", "multiple"),
    ("spawn", "rate"),
    ("intercomm", "pingpong"),
    ("intercomm", "create"),
    ("intercomm", "lookup"),
    ("intercomm", "accept"),
    ("intercomm", "merge"),
    ("onesided", "sync"),
    ("onesided", "rma"),
    ("onesided", "dtype"),
    ("onesided", "multi"),
    ("onesided", "overlap"),
    ("onesided", "win_create"),
];

const COMMS: &[&str] = &["world", "spawn", "merged", "connect", "join"];

const PLOTS: &[&str] = &[
    "startup.png",
    "spawn_latency.png",
    "spawn_phases.png",
    "intercomm_latency.png",
    "intercomm_bandwidth.png",
    "onesided_sync.png",
    "onesided_bandwidth.png",
    "onesided_extra.png",
];

fn tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Run a command to the end under the watchdog; its output goes to files.
fn run_logged(cmd: &mut Command, marker: &str, log: &Path) -> (bool, Duration) {
    let started = Instant::now();
    let out = fs::File::create(log.with_extension("out")).expect("create stdout log");
    let err = fs::File::create(log.with_extension("err")).expect("create stderr log");
    let mut child = cmd.env(MARKER_VAR, marker).stdin(Stdio::null()).stdout(out).stderr(err).spawn().unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    loop {
        if let Some(status) = child.try_wait().expect("wait for the benchmark runner") {
            return (status.success(), started.elapsed());
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            kill_marked(marker);
            panic!("{cmd:?} did not finish within {LIMIT:?}\n--- stderr ---\n{}", tail(&log.with_extension("err"), 40));
        }
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn bench_suite_smoke_under_dpm() {
    let root = repo_root();
    let out: PathBuf = std::env::temp_dir().join(unique("dpm-bench-smoke"));
    fs::create_dir_all(&out).expect("create the results directory");
    let marker = unique("dpmtest-bench");
    let log = out.join("runner");

    let mut cmd = Command::new("python3");
    cmd.arg(root.join("bench/run"))
        .args(["--smoke", "--check", "--launchers", "dpm", "--dpm", dpm_bin()])
        .arg("--out")
        .arg(&out)
        .arg("--build-dir")
        .arg(out.join("bin"))
        .current_dir(&root)
        // Settings of the developer's shell must not change the outcome.
        .env_remove("BENCH_DPM")
        .env_remove("BENCH_MPICC")
        .env_remove("BENCH_LAUNCHER")
        .env_remove("MPIEXEC_TIMEOUT")
        .env_remove("DPM_LOG");
    let (ok, elapsed) = run_logged(&mut cmd, &marker, &log);
    assert!(
        ok,
        "bench/run --smoke --check --launchers dpm failed after {:.1} s\n--- stdout (tail) ---\n{}\n--- stderr (tail) ---\n{}",
        elapsed.as_secs_f64(),
        tail(&log.with_extension("out"), 30),
        tail(&log.with_extension("err"), 40)
    );
    eprintln!("bench/run --smoke took {:.1} s", elapsed.as_secs_f64());

    // The schema check, independently of the runner's own.
    let files: Vec<PathBuf> = ["startup", "spawn", "intercomm", "onesided"].iter().map(|s| out.join(format!("{s}.jsonl"))).collect();
    for f in &files {
        assert!(f.is_file(), "{} is missing", f.display());
    }
    let status = Command::new("python3").arg(root.join("bench/suite/validate.py")).args(&files).status().expect("run bench/suite/validate.py");
    assert!(status.success(), "bench/suite/validate.py rejected records in {}", out.display());

    // Every record comes from dpm and was checked; every benchmark is there.
    let mut lines = Vec::new();
    for f in &files {
        lines.extend(fs::read_to_string(f).expect("read results").lines().map(String::from));
    }
    assert!(lines.len() > 100, "only {} records", lines.len());
    for line in &lines {
        assert!(line.contains("\"launcher\":\"dpm\""), "record not from dpm: {line}");
        assert!(line.contains("\"check\":true"), "record not from a --check run: {line}");
    }
    for (family, test) in EXPECTED {
        let (f, t) = (format!("\"family\":\"{family}\""), format!("\"test\":\"{test}\""));
        assert!(lines.iter().any(|l| l.contains(&f) && l.contains(&t)), "no {family}/{test} record in {}", out.display());
    }
    for comm in COMMS {
        let v = format!("\"variant\":{{\"comm\":\"{comm}\"}}");
        assert!(lines.iter().any(|l| l.contains("\"test\":\"pingpong\"") && l.contains(&v)), "no ping-pong over comm={comm}");
    }

    // config.json, summary.md and the plots.
    let config = fs::read_to_string(out.join("config.json")).expect("config.json");
    assert!(config.contains("\"failures\": []"), "config.json lists failures:\n{config}");
    let summary = fs::read_to_string(out.join("summary.md")).expect("summary.md");
    for heading in ["Spawn latency", "Inter- vs intra-communicator", "One-sided synchronisation cost"] {
        assert!(summary.contains(heading), "summary.md lacks {heading:?}");
    }
    for png in PLOTS {
        let data = fs::read(out.join(png)).unwrap_or_else(|e| panic!("{png} missing ({e}); is matplotlib in .venv? (scripts/setup.sh --tests installs it)"));
        assert!(data.starts_with(b"\x89PNG") && data.len() > 5000, "{png} is not a real PNG");
    }

    let left = leftovers_after(&marker, LEFTOVER_GRACE);
    assert!(left.is_empty(), "processes of the benchmark run were left behind: {left:?}");
    let _ = fs::remove_dir_all(&out);
}

/// The benchmark toolkit's own unit tests (bench/dpmbench: the process
/// runner's timeout and group kill, the alternation, the statistics, the
/// tables, the launchers' command lines), which every runner builds on.
#[test]
fn dpmbench_unit_tests() {
    let root = repo_root();
    let out = Command::new("python3")
        .args(["-m", "unittest", "discover", "-s"])
        .arg(root.join("bench/dpmbench"))
        .current_dir(&root)
        .stdin(Stdio::null())
        .output()
        .expect("run python3 -m unittest");
    assert!(out.status.success(), "bench/dpmbench unit tests failed:\n{}", String::from_utf8_lossy(&out.stderr));
}
