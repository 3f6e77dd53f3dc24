//! Shared helpers for dpm's black-box tests.
//!
//! Every test runs the real `dpm` binary (`CARGO_BIN_EXE_dpm`) as a child
//! process under a watchdog, so a hang fails the test instead of blocking
//! the suite. Each run gets a unique marker, passed to its ranks with
//! `-genv DPM_TEST_MARKER <marker>`; after dpm exits, /proc is scanned for
//! processes whose environment carries the marker, which is how the tests
//! check that no rank (or child of a rank) was left behind.
//!
//! Tests run in parallel threads: nothing here uses fixed paths, ports or
//! global state besides a counter for unique names.

#![allow(dead_code)]

pub mod boot;
pub mod debugger;
mod fixtures;
pub mod mpi4py;
pub mod pmi2_checks;
mod procs;

// Not every test file uses every part.
#[allow(unused_imports)]
pub use fixtures::*;
#[allow(unused_imports)]
pub use procs::*;

use std::fs;
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The environment variable that tags every process of one test run.
pub const MARKER_VAR: &str = "DPM_TEST_MARKER";
/// How long any single dpm run may take before the test fails.
pub const WATCHDOG: Duration = Duration::from_secs(60);
/// How long processes of a finished run may take to disappear (a killed
/// grandchild is reaped by init asynchronously). A hang guard, generous for
/// a loaded machine: the wait ends as soon as none is left.
pub const LEFTOVER_GRACE: Duration = Duration::from_secs(30);

/// Path of the dpm binary under test.
pub fn dpm_bin() -> &'static str {
    env!("CARGO_BIN_EXE_dpm")
}

/// The repository root (two levels above this crate).
pub fn repo_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// Absolute path of a C test program from tests/programs/bin; fails the
/// test (never skips it) when the program has not been built.
pub fn program(name: &str) -> String {
    require(repo_root().join("tests/programs/bin").join(name))
}

/// Absolute path of bench/pmi/bin/pmi_bench, built here (once per test
/// process) with `make -C bench/pmi`, as its `run` script does.
pub fn pmi_bench() -> String {
    static BUILD: std::sync::Once = std::sync::Once::new();
    BUILD.call_once(|| {
        let status = Command::new("make").args(["-s", "-C"]).arg(repo_root().join("bench/pmi")).status().expect("run make");
        assert!(status.success(), "make -C bench/pmi failed");
    });
    require(repo_root().join("bench/pmi/bin/pmi_bench"))
}

/// `pmi_bench` ran PATTERN on `n` ranks: rank 0's one JSON line.
pub fn assert_bench_line(out: &Output, pattern: &str, pmi: u32, n: u32) {
    out.assert_success();
    let lines: Vec<String> = out.lines().into_iter().filter(|l| l.starts_with("{\"bench\":\"pmi\"")).collect();
    assert_eq!(lines.len(), 1, "expected one result line\n{}", out.describe());
    let head = format!("{{\"bench\":\"pmi\",\"pattern\":\"{pattern}\",\"pmi\":{pmi},");
    assert!(lines[0].starts_with(&head) && lines[0].contains(&format!("\"procs\":{n},")), "{}", out.describe());
}

/// Absolute path of examples/hello.
pub fn hello() -> String {
    require(repo_root().join("examples/hello"))
}

/// The MPICH venv's python (with mpi4py), made by ./scripts/setup.sh.
pub fn venv_python() -> String {
    let python = repo_root().join(".venv/bin/python");
    assert!(python.is_file(), "{} is missing: run ./scripts/setup.sh (it creates the venv with mpi4py)", python.display());
    python.to_string_lossy().into_owned()
}

fn require(path: PathBuf) -> String {
    if !path.is_file() {
        panic!(
            "test program {} is missing: run ./scripts/setup.sh --tests from the repository root \
             (it builds tests/programs/bin/* and examples/hello with the .venv's mpicc)",
            path.display()
        );
    }
    path.to_string_lossy().into_owned()
}

/// A name unique to this test process and call: `<prefix>-<pid>-<n>-<nanos>`.
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    format!("{prefix}-{}-{n}-{nanos}", std::process::id())
}

/// This machine's host name, as the ranks see it.
pub fn hostname() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname").expect("read /proc/sys/kernel/hostname").trim().to_string()
}

/// How to run dpm once.
pub struct Dpm {
    exe: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    env_remove: Vec<String>,
    stdin: Option<Vec<u8>>,
    watchdog: Duration,
    marker: String,
}

impl Dpm {
    /// `dpm run -genv DPM_TEST_MARKER <marker> ARGS...`
    pub fn run<I, S>(args: I) -> Dpm
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let marker = unique("dpmtest");
        let mut all = vec!["run".to_string(), "-genv".into(), MARKER_VAR.into(), marker.clone()];
        all.extend(args.into_iter().map(|a| a.as_ref().to_string()));
        Dpm::with_args(all, marker)
    }

    /// `<exe> -genv DPM_TEST_MARKER <marker> ARGS...`: dpm invoked through a
    /// link named mpiexec (or mpirun), which behaves as `dpm run`.
    pub fn mpiexec<I, S>(exe: &Path, args: I) -> Dpm
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let marker = unique("dpmtest");
        let mut all = vec!["-genv".to_string(), MARKER_VAR.into(), marker.clone()];
        all.extend(args.into_iter().map(|a| a.as_ref().to_string()));
        let mut dpm = Dpm::with_args(all, marker);
        dpm.exe = exe.to_path_buf();
        dpm
    }

    /// `dpm ARGS...` exactly as given (no marker; for command-line tests).
    pub fn raw<I, S>(args: I) -> Dpm
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Dpm::with_args(args.into_iter().map(|a| a.as_ref().to_string()).collect(), unique("dpmtest-raw"))
    }

    fn with_args(args: Vec<String>, marker: String) -> Dpm {
        Dpm {
            exe: PathBuf::from(dpm_bin()),
            args,
            // A boot the developer left running must not take the tests' jobs
            // (boot tests clear this and point DPM_RUNTIME_DIR at their own).
            env: vec![("DPM_NO_BOOT".into(), "1".into())],
            // Settings of the developer's shell must not change the outcome.
            env_remove: vec!["MPIEXEC_TIMEOUT".into(), "DPM_LOG".into(), MARKER_VAR.into(), "DPM_BOOT".into()],
            stdin: None,
            watchdog: WATCHDOG,
            marker,
        }
    }

    /// Set a variable in dpm's own environment.
    pub fn env(mut self, key: &str, value: &str) -> Dpm {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Feed these bytes to dpm's stdin, then close it (default: /dev/null).
    pub fn stdin(mut self, data: &[u8]) -> Dpm {
        self.stdin = Some(data.to_vec());
        self
    }

    /// Run this dpm binary instead of the build's (an installed one).
    pub fn exe(mut self, exe: &Path) -> Dpm {
        self.exe = exe.to_path_buf();
        self
    }

    pub fn watchdog(mut self, limit: Duration) -> Dpm {
        self.watchdog = limit;
        self
    }

    pub fn marker(&self) -> &str {
        &self.marker
    }

    /// Start dpm and return at once.
    pub fn spawn(self) -> Running {
        let mut cmd = Command::new(&self.exe);
        cmd.args(&self.args).stdin(if self.stdin.is_some() { Stdio::piped() } else { Stdio::null() }).stdout(Stdio::piped()).stderr(Stdio::piped());
        for k in &self.env_remove {
            cmd.env_remove(k);
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let started = Instant::now();
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {}: {e}", self.exe.display()));
        let stdin_writer = match (self.stdin, child.stdin.take()) {
            (Some(data), Some(mut pipe)) => Some(thread::spawn(move || {
                // dpm may legitimately stop reading (EPIPE); that is not our failure.
                let _ = pipe.write_all(&data);
            })),
            _ => None,
        };
        let stdout_so_far = Arc::new(Mutex::new(Vec::new()));
        let stdout = collect(child.stdout.take().expect("stdout piped"), stdout_so_far.clone());
        let stderr = collect(child.stderr.take().expect("stderr piped"), Arc::default());
        Running { child, args: self.args, marker: self.marker, watchdog: self.watchdog, started, stdout, stdout_so_far, stderr, stdin_writer }
    }

    /// Run dpm to the end, then check that none of its processes remain.
    pub fn output(self) -> Output {
        self.spawn().wait()
    }
}

/// Read `pipe` to its end in a thread: the whole of it comes on the
/// receiver; what has come so far is in `so_far` meanwhile.
fn collect<R: Read + Send + 'static>(mut pipe: R, so_far: Arc<Mutex<Vec<u8>>>) -> Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut chunk = [0u8; 8192];
        loop {
            match pipe.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => so_far.lock().expect("output buffer").extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let _ = tx.send(std::mem::take(&mut *so_far.lock().expect("output buffer")));
    });
    rx
}

/// A dpm that is running.
pub struct Running {
    child: Child,
    args: Vec<String>,
    marker: String,
    watchdog: Duration,
    started: Instant,
    stdout: Receiver<Vec<u8>>,
    /// What dpm has written to stdout so far (while it runs).
    stdout_so_far: Arc<Mutex<Vec<u8>>>,
    stderr: Receiver<Vec<u8>>,
    stdin_writer: Option<JoinHandle<()>>,
}

impl Running {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn marker(&self) -> &str {
        &self.marker
    }

    /// Send a signal (a name such as "INT", "TERM", "KILL") to dpm itself.
    pub fn signal(&self, sig: &str) {
        send_signal(self.pid(), sig);
    }

    /// Wait until at least `n` processes carry this run's marker (the ranks
    /// have started), failing the test after 60 s (a hang guard) or if dpm
    /// exits first.
    pub fn wait_for_procs(&mut self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let found = marked_procs(&self.marker).len();
            if found >= n {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                let out = self.finish_output(status);
                panic!("dpm exited before {n} processes started (saw {found})\n{}", out.describe());
            }
            if Instant::now() > deadline {
                self.kill_everything();
                panic!("only {found} of {n} processes with marker {} started within 60 s: dpm {:?}", self.marker, self.args);
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// What dpm has printed on stdout so far.
    pub fn stdout_so_far(&self) -> String {
        String::from_utf8_lossy(&self.stdout_so_far.lock().expect("output buffer")).into_owned()
    }

    /// Wait until dpm has printed at least `n` stdout lines starting with
    /// `prefix`, failing the test after 60 s, or when the run's watchdog
    /// ends if that is later (a hang guard), or if dpm exits first.
    pub fn wait_for_lines(&mut self, prefix: &str, n: usize) {
        let deadline = (Instant::now() + Duration::from_secs(60)).max(self.started + self.watchdog);
        loop {
            let found = String::from_utf8_lossy(&self.stdout_so_far.lock().expect("output buffer")).lines().filter(|l| l.starts_with(prefix)).count();
            if found >= n {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                let out = self.finish_output(status);
                panic!("dpm exited before printing {n} lines starting {prefix:?} (saw {found})\n{}", out.describe());
            }
            if Instant::now() > deadline {
                self.kill_everything();
                panic!("only {found} of {n} lines starting {prefix:?} in time: dpm {:?}", self.args);
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait for dpm to exit (under the watchdog) and collect its output,
    /// without checking for leftover processes.
    pub fn wait_unchecked(mut self) -> Output {
        let deadline = self.started + self.watchdog;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return self.finish_output(status),
                Ok(None) => {}
                Err(e) => panic!("waiting for dpm: {e}"),
            }
            if Instant::now() > deadline {
                self.kill_everything();
                let status = self.child.wait().expect("wait for killed dpm");
                let out = self.finish_output(status);
                panic!("dpm did not finish within {:?} (killed by the test watchdog)\n{}", self.watchdog, out.describe());
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Wait for dpm to exit, then fail the test if any process carrying this
    /// run's marker is still alive (after a short grace for reaping).
    pub fn wait(self) -> Output {
        let out = self.wait_unchecked();
        let left = leftovers_after(&out.marker, LEFTOVER_GRACE);
        if !left.is_empty() {
            panic!("processes of this run were left behind after dpm exited: {left:?}\n{}", out.describe());
        }
        out
    }

    fn finish_output(&mut self, status: ExitStatus) -> Output {
        let elapsed = self.started.elapsed();
        if let Some(h) = self.stdin_writer.take() {
            let _ = h.join();
        }
        let grab = |rx: &Receiver<Vec<u8>>, which: &str, marker: &str| match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(buf) => buf,
            Err(_) => {
                kill_marked(marker);
                panic!("dpm exited but its {which} stayed open for 30 s (a process leaked it)");
            }
        };
        let stdout = grab(&self.stdout, "stdout", &self.marker);
        let stderr = grab(&self.stderr, "stderr", &self.marker);
        Output { status, stdout, stderr, elapsed, marker: self.marker.clone(), args: self.args.clone() }
    }

    fn kill_everything(&mut self) {
        let _ = self.child.kill();
        kill_marked(&self.marker);
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // A test that panicked while dpm ran must not leave it (or its ranks) behind.
        if let Ok(None) = self.child.try_wait() {
            self.kill_everything();
            let _ = self.child.wait();
        }
    }
}

/// What one dpm run did.
pub struct Output {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub elapsed: Duration,
    pub marker: String,
    pub args: Vec<String>,
}

impl Output {
    /// dpm's exit code; fails the test if dpm itself died of a signal.
    pub fn code(&self) -> i32 {
        match self.status.code() {
            Some(c) => c,
            None => panic!("dpm was killed by signal {:?}\n{}", self.status.signal(), self.describe()),
        }
    }

    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    pub fn stderr_str(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }

    /// stdout split into lines (without the newlines).
    pub fn lines(&self) -> Vec<String> {
        self.stdout_str().lines().map(String::from).collect()
    }

    /// stderr split into lines.
    pub fn err_lines(&self) -> Vec<String> {
        self.stderr_str().lines().map(String::from).collect()
    }

    /// Everything about the run, for assertion messages.
    pub fn describe(&self) -> String {
        format!(
            "command: dpm {:?}\nstatus: {:?} after {:.3} s\n--- stdout ---\n{}\n--- stderr ---\n{}\n--------------",
            self.args.iter().map(|a| shorten(a, 120)).collect::<Vec<_>>(),
            self.status,
            self.elapsed.as_secs_f64(),
            self.stdout_str(),
            self.stderr_str()
        )
    }

    pub fn assert_code(&self, expected: i32) -> &Output {
        assert_eq!(self.code(), expected, "unexpected exit code\n{}", self.describe());
        self
    }

    pub fn assert_success(&self) -> &Output {
        self.assert_code(0)
    }

    pub fn assert_stderr_contains(&self, needle: &str) -> &Output {
        assert!(self.stderr_str().contains(needle), "stderr does not contain {needle:?}\n{}", self.describe());
        self
    }

    pub fn assert_stdout_contains(&self, needle: &str) -> &Output {
        assert!(self.stdout_str().contains(needle), "stdout does not contain {needle:?}\n{}", self.describe());
        self
    }

    /// No line of stdout may contain `needle` (e.g. "FAIL" from a test program).
    pub fn assert_stdout_lacks(&self, needle: &str) -> &Output {
        assert!(!self.stdout_str().contains(needle), "stdout contains {needle:?}\n{}", self.describe());
        self
    }
}

/// `s`, cut to `max` characters with a note of how much was left out.
fn shorten(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((at, _)) => format!("{}...[{} more bytes]", &s[..at], s.len() - at),
        None => s.to_string(),
    }
}

/// A file in the system temporary directory, removed when dropped.
pub struct TempFile {
    pub path: PathBuf,
}

impl TempFile {
    pub fn new(prefix: &str, contents: &[u8], mode: u32) -> TempFile {
        use std::os::unix::fs::PermissionsExt;
        let path = std::env::temp_dir().join(unique(prefix));
        fs::write(&path, contents).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).expect("chmod temp file");
        TempFile { path }
    }

    pub fn path_str(&self) -> String {
        self.path.to_string_lossy().into_owned()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// A directory in the system temporary directory, removed with its
/// contents when dropped.
pub struct TempDir {
    pub path: PathBuf,
}

impl TempDir {
    pub fn new(prefix: &str) -> TempDir {
        let path = std::env::temp_dir().join(unique(prefix));
        fs::create_dir(&path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
        TempDir { path }
    }

    pub fn path_str(&self) -> String {
        self.path.to_string_lossy().into_owned()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// `(job, rank list, host)` from `--report-placement` lines.
/// The hosts of every job `--report-placement` names but the first: the
/// spawned children of a run (whose job ids, through a boot, need not start at 0).
pub fn spawned_hosts(stderr: &str) -> Vec<String> {
    let placed = placement(stderr);
    let parent = placed.first().map(|p| p.0);
    placed.into_iter().filter(|p| Some(p.0) != parent).map(|p| p.2).collect()
}

/// A `sh -c` script for a whole booted session in the private runtime
/// directory `dir`: `dpm boot BOOT_ARGS`, `dpm status`, an MPI ring of
/// `ring_n` ranks, one rank spawning `children` (placement reported), `dpm down`.
pub fn boot_session_script(dir: &Path, boot_args: &str, ring_n: u32, children: u32) -> String {
    let dpm = dpm_bin();
    format!(
        "set -e; export DPM_RUNTIME_DIR='{}'; {dpm} boot {boot_args}; {dpm} status; {dpm} run -n {ring_n} '{}'; \
         {dpm} run --report-placement -n 1 '{}' {children}; {dpm} down",
        dir.display(),
        program("ring"),
        program("spawn_args"),
    )
}

pub fn placement(stderr: &str) -> Vec<(u32, String, String)> {
    stderr
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("dpm: job ")?;
            let (job, rest) = rest.split_once(' ')?;
            let (_, rest) = rest.split_once("): ranks ")?;
            let (ranks, host) = rest.split_once(" on ")?;
            Some((job.parse().ok()?, ranks.to_string(), host.to_string()))
        })
        .collect()
}

/// One scenario of a machine-wide fixture's test, run by [`run_scenarios`].
pub type Scenario<F> = fn(&F);

/// Run a fixture's scenarios in turn, each caught apart so that one failure
/// does not hide the next; `after` checks what a scenario left behind (its
/// failure text, or `None`). Prints each scenario's time and verdict as
/// `[tag] name: ok (1.23 s)`; returns the failures, each named.
pub fn run_scenarios<F>(tag: &str, fx: &F, scenarios: &[(&str, Scenario<F>)], after: impl Fn(&F, &str) -> Option<String>) -> Vec<String> {
    let mut failures = Vec::new();
    let total = std::time::Instant::now();
    for &(name, scenario) in scenarios {
        let started = std::time::Instant::now();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| scenario(fx)));
        let ran = started.elapsed();
        let before = failures.len();
        if let Err(e) = result {
            failures.push(format!("{name}: {}", panic_text(e)));
        }
        failures.extend(after(fx, name));
        let verdict = if failures.len() > before { "FAILED" } else { "ok" };
        eprintln!("[{tag}] {name}: {verdict} ({:.2} s)", ran.as_secs_f64());
    }
    eprintln!("[{tag}] all scenarios: {:.2} s", total.elapsed().as_secs_f64());
    failures
}

/// The message of a caught panic (scenario runners report and go on).
pub fn panic_text(e: Box<dyn std::any::Any + Send>) -> String {
    e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_else(|| "panic".into())
}

/// Parent: spawn 2 Python children with COMM_SELF.Spawn; they answer over the
/// intercommunicator (the child code is one line: PMI-1 cannot carry newlines).
pub const MPI4PY_SPAWN: &str = r#"
import sys
from mpi4py import MPI
CHILD = "from mpi4py import MPI; p = MPI.Comm.Get_parent(); v = p.recv(source=0, tag=1); p.send((MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size(), v * 10), dest=0, tag=2); p.Disconnect()"
inter = MPI.COMM_SELF.Spawn(sys.executable, args=["-c", CHILD], maxprocs=2)
for i in range(2):
    inter.send(i + 1, dest=i, tag=1)
answers = [inter.recv(source=i, tag=2) for i in range(2)]
inter.Disconnect()
print("mpi4py answers", answers, flush=True)
assert answers == [(0, 2, 10), (1, 2, 20)], answers
print("mpi4py spawn ok", flush=True)
"#;

/// Lines of stdout that start with "FAIL" (the programs' failure reports).
pub fn assert_no_fail_lines(out: &Output) {
    let fails: Vec<String> = out.lines().into_iter().filter(|l| l.contains("FAIL")).collect();
    assert!(fails.is_empty(), "the program reported failures: {fails:?}\n{}", out.describe());
}
