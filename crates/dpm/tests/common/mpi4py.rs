//! mpi4py's own test suite (test_spawn.py, test_dynproc.py) under `dpm
//! run`: the test/ directory of the mpi4py sdist matching a venv's mpi4py,
//! downloaded once with the MPICH venv's pip into target/mpi4py-tests/, and
//! one run of a test file with every rank's unittest summary. Used with
//! MPICH's mpi4py (.venv, spawn.rs) and Open MPI's (.venv-ompi, open_mpi.rs).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use super::{repo_root, unique, Dpm, Output};

fn mpi4py_version(python: &str) -> String {
    let out = Command::new(python).args(["-c", "import mpi4py; print(mpi4py.__version__)"]).output().expect("run the venv's python");
    assert!(out.status.success(), "cannot import mpi4py: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Run a command to completion within `limit`, killing it after that.
fn run_with_limit(cmd: &mut Command, limit: Duration) -> Result<(), String> {
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|e| format!("{cmd:?}: {e}"))?;
    let deadline = Instant::now() + limit;
    loop {
        if let Some(_status) = child.try_wait().map_err(|e| e.to_string())? {
            let out = child.wait_with_output().map_err(|e| e.to_string())?;
            if out.status.success() {
                return Ok(());
            }
            return Err(format!("{cmd:?} failed ({:?}):\n{}{}", out.status, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{cmd:?} did not finish within {limit:?}"));
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// The test/ directory of the mpi4py sdist matching the installed mpi4py,
/// downloaded (once) into target/mpi4py-tests/ with the venv's pip.
pub fn mpi4py_tests(python: &str) -> PathBuf {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(|| fetch_mpi4py_tests(python)).clone().unwrap_or_else(|e| {
        panic!(
            "cannot get mpi4py's test suite: {e}\n(this test downloads the mpi4py sdist from PyPI once; \
             without network access, put mpi4py-<version>.tar.gz into target/mpi4py-tests/ by hand)"
        )
    })
}

fn fetch_mpi4py_tests(python: &str) -> Result<PathBuf, String> {
    let version = mpi4py_version(python);
    let cache = repo_root().join("target/mpi4py-tests");
    let name = format!("mpi4py-{version}");
    let tests = cache.join(&name).join("test");
    let needed = ["test_spawn.py", "test_dynproc.py", "spawn_child.py", "mpiunittest.py", "mpitestutil.py"];
    let complete = |dir: &Path| needed.iter().all(|f| dir.join(f).is_file());
    if complete(&tests) {
        return Ok(tests);
    }
    fs::create_dir_all(&cache).map_err(|e| format!("create {}: {e}", cache.display()))?;
    let tarball = cache.join(format!("{name}.tar.gz"));
    if !tarball.is_file() {
        // Download into a private directory, then rename: concurrent test
        // processes never see a half-written file.
        let tmp = cache.join(unique("download"));
        // `--no-binary mpi4py`, not `:all:`: the latter would also build
        // the sdist's build dependencies (Cython...) from source, for minutes.
        let pip = repo_root().join(".venv/bin/pip");
        let spec = format!("mpi4py=={version}");
        let result =
            run_with_limit(Command::new(&pip).args(["download", "--no-deps", "--no-binary", "mpi4py", &spec, "-d"]).arg(&tmp), Duration::from_secs(300));
        let downloaded = tmp.join(format!("{name}.tar.gz"));
        if result.is_ok() && downloaded.is_file() {
            fs::rename(&downloaded, &tarball).map_err(|e| format!("rename {}: {e}", downloaded.display()))?;
        }
        let _ = fs::remove_dir_all(&tmp);
        result?;
        if !tarball.is_file() {
            return Err(format!("pip did not produce {}", tarball.display()));
        }
    }
    let tmp = cache.join(unique("extract"));
    fs::create_dir_all(&tmp).map_err(|e| e.to_string())?;
    let result = run_with_limit(Command::new("tar").arg("xzf").arg(&tarball).arg("-C").arg(&tmp).arg(format!("{name}/test")), Duration::from_secs(60));
    if result.is_ok() && !complete(&tests) {
        let _ = fs::remove_dir_all(cache.join(&name));
        let _ = fs::rename(tmp.join(&name), cache.join(&name));
    }
    let _ = fs::remove_dir_all(&tmp);
    result?;
    if complete(&tests) {
        Ok(tests)
    } else {
        Err(format!("{} lacks some of {needed:?}", tests.display()))
    }
}

/// `dpm run [extra] -n N python <test>` in mpi4py's test directory; checks
/// that every rank's unittest run says OK. Returns each rank's summary line
/// ("OK", "OK (skipped=4)") and the output.
pub fn suite(python: &str, test: &str, n: u32, extra: &[&str], watchdog: Duration) -> (Vec<String>, Output) {
    let dir = mpi4py_tests(python);
    let script = dir.join(test).to_string_lossy().into_owned();
    let n_str = n.to_string();
    // `-l`: whole lines per rank, so one rank's closing "." cannot run into
    // another rank's "OK" (unlabelled output is forwarded as it comes).
    let mut args: Vec<&str> = extra.to_vec();
    args.extend(["-l", "-n", &n_str, python, &script]);
    let out = Dpm::run(args).watchdog(watchdog).output();
    let summaries: Vec<String> = out
        .err_lines()
        .into_iter()
        .filter_map(|l| l.split_once("] ").map(|(_, text)| text.to_string()))
        .filter(|l| l.starts_with("OK") || l.starts_with("FAILED"))
        .collect();
    assert!(
        out.code() == 0 && summaries.len() == n as usize && summaries.iter().all(|s| s.starts_with("OK")),
        "mpi4py's {test} at -n {n} did not pass on every rank: {summaries:?}\n{}",
        out.describe()
    );
    (summaries, out)
}
