//! Machine-wide fixtures (scripts under `tests/fixtures/`, the Open MPI
//! programs, Hydra): building them, their info, taking turns on them, and a
//! loud failure under CI when one cannot be built.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{repo_root, Dpm, Output};

/// A fixture script's exit status for "cannot be built on this machine".
pub const FIXTURE_SKIP_STATUS: i32 = 77;

/// An Open MPI test program (`tests/programs/ompi/NAME.c`, built by
/// `./scripts/setup.sh --tests` into `tests/programs/bin/ompi/`), if built; else
/// the fixture is unavailable (a failure under CI).
pub fn ompi_program(name: &str) -> Option<String> {
    let path = repo_root().join("tests/programs/bin/ompi").join(name);
    if path.is_file() {
        return Some(path.display().to_string());
    }
    fixture_unavailable("Open MPI programs", &format!("{} missing (./scripts/setup.sh --tests builds them)", path.display()));
    None
}

/// How many runs [`hydra_output`] gives Hydra.
pub const HYDRA_RUNS: usize = 5;

/// Hydra's `mpiexec` of the project's venv, the reference for every
/// option dpm takes from it.
pub fn hydra() -> std::path::PathBuf {
    let path = repo_root().join(".venv/bin/mpiexec.hydra");
    assert!(path.is_file(), "{} is missing: run ./scripts/setup.sh --tests", path.display());
    path
}

/// `mpiexec.hydra ARGS` under the harness (marker, watchdog, leftovers),
/// run again if it died of SIGPIPE ([`hydra_output`]).
pub fn under_hydra(args: &[&str]) -> Output {
    hydra_output(|| Dpm::mpiexec(&hydra(), args))
}

/// Hydra's `mpiexec.hydra` (`make` builds it, e.g. [`Dpm::mpiexec`]), run
/// again, at most [`HYDRA_RUNS`] runs in all, when it dies of SIGPIPE: with
/// `stress-ng --cpu 4` beside it, `mpiexec.hydra -l -configfile` of two
/// `/bin/echo` segments died so in 19 of 300 runs with stdin `/dev/null`
/// (66 of 300 with a pipe), Hydra not ignoring the signal. That race is
/// Hydra's own, not what a test comparing dpm with Hydra is about.
pub fn hydra_output(make: impl Fn() -> Dpm) -> Output {
    hydra_rerun(|| make().output())
}

/// `run` (a run of Hydra's mpiexec however the test starts it), run again
/// as [`hydra_output`] does when it died of SIGPIPE.
pub fn hydra_rerun<O: Ran>(run: impl Fn() -> O) -> O {
    const SIGPIPE: i32 = 13;
    for _ in 1..HYDRA_RUNS {
        let out = run();
        if out.exit_status().signal() != Some(SIGPIPE) {
            return out;
        }
        eprintln!("Hydra's mpiexec died of SIGPIPE (its own race under load): running it again\n{}", out.account());
    }
    run()
}

/// What [`hydra_rerun`] reads of a finished run: the harness's [`Output`]
/// or the standard library's.
pub trait Ran {
    fn exit_status(&self) -> std::process::ExitStatus;
    fn account(&self) -> String;
}

impl Ran for Output {
    fn exit_status(&self) -> std::process::ExitStatus {
        self.status
    }
    fn account(&self) -> String {
        self.describe()
    }
}

impl Ran for std::process::Output {
    fn exit_status(&self) -> std::process::ExitStatus {
        self.status
    }
    fn account(&self) -> String {
        format!("{self:?}")
    }
}

/// A machine-wide fixture could not be built: [`cannot_run`].
pub fn fixture_unavailable(name: &str, reason: &str) {
    cannot_run(name, reason);
}

// Not every test file uses both.
#[allow(unused_imports)]
pub use dpm_test_support::{cannot_run, root_to_act_as_another_user};

/// `bash SCRIPT up`: its stdout (the fixture's info lines), or `Err(reason)`
/// when the machine cannot build it. Any other failure tears down what was
/// built and panics.
pub fn fixture_up(script: &Path) -> Result<String, String> {
    let started = Instant::now();
    let out = run_fixture(script, &["up"]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    match out.status.code() {
        Some(0) => {}
        Some(FIXTURE_SKIP_STATUS) => {
            let reason = stderr.lines().find_map(|l| l.split_once("SKIP: ").map(|x| x.1.to_string()));
            return Err(reason.unwrap_or(stderr));
        }
        _ => {
            let _ = run_fixture(script, &["down"]);
            panic!("{} up failed ({:?})\n{stdout}\n{stderr}", script.display(), out.status);
        }
    }
    eprint!("{stderr}");
    eprintln!("fixture up in {:.2} s", started.elapsed().as_secs_f64());
    Ok(stdout)
}

/// The value of a `NAME=value` line of a fixture's info.
pub fn fixture_info(info: &str, name: &str) -> String {
    let prefix = format!("{name}=");
    info.lines().find_map(|l| l.strip_prefix(prefix.as_str())).unwrap_or_else(|| panic!("no {name} in the fixture's info:\n{info}")).to_string()
}

/// Run a fixture script (`bash SCRIPT ARGS`) with no stdin; its output is returned.
pub fn run_fixture(script: &Path, args: &[&str]) -> std::process::Output {
    Command::new("bash").arg(script).args(args).stdin(Stdio::null()).output().unwrap_or_else(|e| panic!("cannot run bash {}: {e}", script.display()))
}

/// `flock` on a lock file in the temp directory, held by a child that lives
/// until its stdin closes: when this is dropped, or when this process dies.
/// Fixtures with fixed names, ports or paths take turns through it (two
/// `cargo test` runs on one machine, or a benchmark using the same fixture).
pub struct FixtureLock(Child);

impl Drop for FixtureLock {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.wait();
    }
}

/// Take `file` (waiting up to 300 s); `what` names the fixture in messages.
pub fn lock_fixture(file: &str, what: &str) -> FixtureLock {
    use std::io::{BufRead, BufReader};
    let path = std::env::temp_dir().join(file);
    let mut child = Command::new("flock")
        .args(["-w", "300"])
        .arg(&path)
        .args(["sh", "-c", "echo locked; exec cat >/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run flock(1) (util-linux): {e}"));
    let mut line = String::new();
    let mut out = BufReader::new(child.stdout.take().expect("piped"));
    let lock = FixtureLock(child);
    let waited = Instant::now();
    let _ = out.read_line(&mut line);
    assert_eq!(line.trim(), "locked", "could not lock {} within 300 s", path.display());
    if waited.elapsed() > Duration::from_secs(1) {
        eprintln!("waited {:.1} s for another test run's {what}", waited.elapsed().as_secs_f64());
    }
    lock
}

/// A stand-in ssh: it skips its options and the host name and runs the
/// command on this machine, in a login's environment (`PATH`, `HOME` and
/// `DPM_T_NODE=login`, nothing of its caller's else); with `DPM_T_SSH_LOG`
/// set, it appends the host to that file first. dpm (`--ssh-command`)
/// and Hydra (`-launcher-exec`) start their remote parts through it, so a
/// list of made-up host names is "other nodes" with nothing leaving the machine.
pub const LOCAL_SSH: &str = "#!/bin/sh\n\
while [ $# -gt 0 ]; do case \"$1\" in -o) shift 2;; -*) shift;; *) break;; esac; done\n\
[ -n \"$DPM_T_SSH_LOG\" ] && echo \"$1\" >> \"$DPM_T_SSH_LOG\"\n\
shift\n\
exec env -i PATH=\"$PATH\" HOME=\"$HOME\" DPM_T_NODE=login /bin/sh -c \"$*\"\n";

/// [`LOCAL_SSH`] as an executable file.
pub fn local_ssh() -> super::TempFile {
    super::TempFile::new("dpm-local-ssh", LOCAL_SSH.as_bytes(), 0o755)
}

/// `tests/programs/wait_then_fence.py`: a PMI-1 client on `PMI_FD`
/// (std-only Python): init, "rank N ready", wait for the file `argv[1]`, a
/// barrier (a fence of the whole job), "rank N passed", finalize.
pub fn wait_then_fence() -> std::path::PathBuf {
    repo_root().join("tests/programs/wait_then_fence.py")
}
