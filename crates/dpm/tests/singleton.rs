//! Singleton spawn: an MPICH program started without a launcher that calls
//! MPI_Comm_spawn makes MPICH run `mpiexec -pmi_args …` from PATH; with
//! `.venv/bin` first in PATH that is dpm (scripts/setup.sh links it), which
//! adopts the program and launches its children.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{program, repo_root};

/// PATH with the venv's bin (where `mpiexec` is dpm) first.
fn venv_path() -> String {
    let bin = repo_root().join(".venv/bin");
    let mpiexec = bin.join("mpiexec");
    let target = std::fs::read_link(&mpiexec).unwrap_or_else(|e| panic!("{}: {e}; run ./scripts/setup.sh", mpiexec.display()));
    assert_eq!(
        std::fs::canonicalize(&target).unwrap(),
        std::fs::canonicalize(common::dpm_bin()).unwrap(),
        ".venv/bin/mpiexec must be dpm; run ./scripts/setup.sh"
    );
    format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default())
}

/// Processes still running whose command line mentions `needle`.
fn leftovers(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()).is_none() {
            continue;
        }
        if let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) {
                found.push(cmd);
            }
        }
    }
    found
}

/// Run `cmd` directly (no launcher) with a watchdog; returns (code, stdout, stderr).
fn run_direct(mut cmd: Command, limit: Duration) -> (i32, String, String) {
    let start = Instant::now();
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start the program");
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            let code = status.code().unwrap_or(-1);
            return (code, String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into());
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "singleton program did not finish in {limit:?}\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// dpm outlives the singleton by at most its exit-drain grace: wait for it
/// to go (up to 30 s, a hang guard for a loaded machine).
fn assert_no_leftover_dpm(port_hint: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = leftovers(port_hint);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "processes left behind: {left:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn c_program_started_without_a_launcher_spawns_through_dpm() {
    let tag = format!("singleton-c-{}", std::process::id());
    let mut cmd = Command::new(program("spawn_args"));
    cmd.arg("3").env("PATH", venv_path()).env("DPM_SINGLETON_TAG", &tag).current_dir(std::env::temp_dir());
    for var in ["PMI_FD", "PMI_RANK", "PMI_SIZE", "PMI_PORT", "PMI_ID", "PMIX_NAMESPACE"] {
        cmd.env_remove(var);
    }
    let (code, out, err) = run_direct(cmd, Duration::from_secs(60));
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("spawn ok children=3"), "stdout:\n{out}\nstderr:\n{err}");
    assert_no_leftover_dpm("-pmi_args");
}

#[test]
fn python_script_started_without_a_launcher_spawns_through_dpm() {
    let python: PathBuf = repo_root().join(".venv/bin/python");
    let script = r#"
import sys
from mpi4py import MPI
if len(sys.argv) > 1 and sys.argv[1] == "child":
    parent = MPI.Comm.Get_parent()
    parent.send(MPI.COMM_WORLD.Get_rank() * 10, dest=0)
    # Alive until the parent's spawn is through: a child gone before the
    # singleton reached it with UCX fails the spawn (MPICH's race, under
    # Hydra as under dpm).
    parent.Barrier()
    parent.Disconnect()
else:
    assert MPI.COMM_WORLD.Get_size() == 1
    inter = MPI.COMM_SELF.Spawn(sys.executable, args=[__file__, "child"], maxprocs=2)
    got = sorted(inter.recv(source=r) for r in range(2))
    inter.Barrier()
    inter.Disconnect()
    assert got == [0, 10], got
    print("python singleton spawn ok", got, "universe", MPI.COMM_WORLD.Get_attr(MPI.UNIVERSE_SIZE))
"#;
    /// Removed however the test ends (a timeout panics in run_direct).
    struct Dir(std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let guard = Dir(std::env::temp_dir().join(format!("dpm-singleton-py-{}", std::process::id())));
    let dir = guard.0.clone();
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("spawner.py");
    std::fs::write(&file, script).unwrap();
    let mut cmd = Command::new(&python);
    cmd.arg(&file).env("PATH", venv_path()).current_dir(&dir);
    for var in ["PMI_FD", "PMI_RANK", "PMI_SIZE", "PMI_PORT", "PMI_ID", "PMIX_NAMESPACE"] {
        cmd.env_remove(var);
    }
    let (code, out, err) = run_direct(cmd, Duration::from_secs(60));
    drop(guard);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("python singleton spawn ok [0, 10]"), "stdout:\n{out}\nstderr:\n{err}");
    // The singleton's MPI_UNIVERSE_SIZE comes from dpm: the logical CPUs.
    let cpus = std::thread::available_parallelism().unwrap().get();
    assert!(out.contains(&format!("universe {cpus}")), "stdout:\n{out}");
    assert_no_leftover_dpm("-pmi_args");
}
