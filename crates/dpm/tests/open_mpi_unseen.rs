//! Never silent singletons, where `--pmi auto` cannot see the program: a
//! command named by a variable (`sh -c '$PROG'`, `env sh -c '$PY x.py'`)
//! is served PMI-1/2 (`--pmi auto` or `simple`) and watched by the node
//! daemons that run its ranks (crates/daemon/src/pmix_watch.rs). An
//! Open MPI rank (C or mpi4py on `.venv-ompi`) makes the run fail with a
//! message naming `--pmi pmix`, before any rank prints `rank 0 of 1`; with
//! `--pmi pmix` the same command is one job. An MPICH program or a program
//! without MPI behind the same command runs as before. Open MPI ranks
//! without the wheel: SKIPPED (failing under `CI=true`).

mod common;

use common::{repo_root, Dpm, Output, TempDir};

/// The Open MPI hello (`tests/programs/ompi/hello.c`), if built.
fn ompi_hello() -> Option<String> {
    common::ompi_program("hello")
}

/// `.venv-ompi/bin/python`, when its mpi4py loads Open MPI (asked without
/// `MPI_Init`, which would run a singleton).
fn ompi_python() -> Option<String> {
    let python = repo_root().join(".venv-ompi/bin/python");
    let probe = "import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; assert 'Open MPI' in MPI.Get_library_version()";
    if std::process::Command::new(&python).args(["-c", probe]).output().is_ok_and(|o| o.status.success()) {
        return Some(python.display().to_string());
    }
    common::fixture_unavailable("mpi4py on Open MPI", &format!("{} cannot import an Open MPI mpi4py", python.display()));
    None
}

/// The wheel's Open MPI prefix (the venv).
fn ompi_prefix() -> String {
    repo_root().join(".venv-ompi").display().to_string()
}

/// `dpm run ARGS` with `var=value` in the launcher's environment (which the
/// ranks inherit), Open MPI's btl/ofi excluded (its close sleeps 1 s).
fn run_with(var: &str, value: &str, args: &[&str]) -> Output {
    Dpm::run(args).env(var, value).env("OMPI_MCA_btl", "^ofi").output()
}

/// The loud refusal: exit 1, the reason and the fix on stderr, and no rank
/// ran as a singleton.
fn assert_refused(out: &Output) {
    out.assert_code(1);
    out.assert_stderr_contains("runs Open MPI, which needs PMIx");
    out.assert_stderr_contains("--pmi pmix").assert_stderr_contains("OPAL_PREFIX");
    out.assert_stdout_lacks(" of 1\n");
}

fn assert_one_job(out: &Output, n: u32) {
    out.assert_success().assert_stdout_lacks(" of 1\n");
    for rank in 0..n {
        out.assert_stdout_contains(&format!("rank {rank} of {n}\n"));
    }
}

#[test]
fn an_open_mpi_program_named_by_a_variable_is_refused_and_runs_with_pmi_pmix() {
    let Some(hello) = ompi_hello() else { return };
    for command in [&["sh", "-c", "$PROG"][..], &["env", "sh", "-c", "exec $PROG"][..]] {
        let mut args = vec!["-n", "2"];
        args.extend(command);
        assert_refused(&run_with("PROG", &hello, &args));
        let mut simple = vec!["--pmi", "simple"];
        simple.extend(&args);
        assert_refused(&run_with("PROG", &hello, &simple));
        // `sh` tells the daemon nothing of the program's Open MPI: say where it is.
        let prefix = ompi_prefix();
        let mut pmix = vec!["--pmi", "pmix", "-genv", "OPAL_PREFIX", &prefix];
        pmix.extend(&args);
        assert_one_job(&run_with("PROG", &hello, &pmix), 2);
    }
}

#[test]
fn an_mpi4py_script_whose_python_is_named_by_a_variable_is_refused() {
    let Some(python) = ompi_python() else { return };
    let dir = TempDir::new("ompi-unseen-py");
    let script = dir.path.join("hello.py");
    std::fs::write(&script, "from mpi4py import MPI\nc = MPI.COMM_WORLD\nprint(f'rank {c.rank} of {c.size}', flush=True)\n").unwrap();
    let command = format!("exec \"$PY\" {}", script.display());
    assert_refused(&run_with("PY", &python, &["-n", "2", "sh", "-c", &command]));
    let prefix = ompi_prefix();
    assert_one_job(&run_with("PY", &python, &["--pmi", "pmix", "-genv", "OPAL_PREFIX", &prefix, "-n", "2", "sh", "-c", &command]), 2);
}

/// The watch costs MPICH nothing but two variables: an MPICH program, and
/// one without MPI, behind the same unseen command run as before.
#[test]
fn an_mpich_program_or_none_named_by_a_variable_runs_as_before() {
    let hello = common::hello();
    let out = run_with("PROG", &hello, &["-n", "2", "sh", "-c", "$PROG"]);
    out.assert_success();
    for rank in 0..2 {
        out.assert_stdout_contains(&format!("hello from rank {rank} of 2 "));
    }
    let out = run_with("PROG", "echo", &["-n", "2", "sh", "-c", "$PROG plain"]);
    out.assert_success();
    assert_eq!(out.lines().iter().filter(|l| *l == "plain").count(), 2, "{}", out.describe());
}

/// Over virtual nodes every node's daemon watches its own ranks: an
/// MPMD run whose Open MPI ranks are all on node 1 (MPICH's on node 0
/// wait in their fence) is refused naming the program on node 1; the
/// unseen Open MPI program on both nodes too, and with `--pmi pmix` it is
/// one job; MPICH behind the same command runs as before.
#[test]
fn over_virtual_nodes_each_node_watches_its_own_ranks() {
    let Some(ompi) = ompi_hello() else { return };
    let mpich = common::hello();
    let nodes = ["--virtual-nodes", "2", "-ppn", "2"];
    let mixed = [&nodes[..], &["-n", "2", &mpich, ":", "-n", "2", "sh", "-c", "$PROG"]].concat();
    let out = run_with("PROG", &ompi, &mixed);
    assert_refused(&out);
    out.assert_stderr_contains("a rank of 'sh' runs Open MPI");
    let unseen = [&nodes[..], &["-n", "4", "sh", "-c", "$PROG"]].concat();
    assert_refused(&run_with("PROG", &ompi, &unseen));
    let prefix = ompi_prefix();
    let pmix = [&["--pmi", "pmix", "-genv", "OPAL_PREFIX", &prefix][..], &unseen].concat();
    assert_one_job(&run_with("PROG", &ompi, &pmix), 4);
    let out = run_with("PROG", &mpich, &unseen);
    out.assert_success();
    for rank in 0..4 {
        out.assert_stdout_contains(&format!("hello from rank {rank} of 4 "));
    }
}

/// Through a boot the boot's node daemons watch: the boot's run ends with
/// the same message and the client exits 1; MPICH runs as before.
#[test]
fn through_a_boot_an_unseen_open_mpi_program_is_refused_too() {
    let Some(hello) = ompi_hello() else { return };
    let tmp = TempDir::new("dpm-boot-unseen");
    // The boot makes its runtime directory (0700) itself.
    let runtime = tmp.path.join("run").display().to_string();
    let dpm =
        |args: &[&str]| std::process::Command::new(common::dpm_bin()).args(args).env("DPM_RUNTIME_DIR", &runtime).env_remove("DPM_BOOT").output().unwrap();
    let boot = dpm(&["boot"]);
    assert!(boot.status.success(), "dpm boot: {boot:?}");
    /// `dpm down` however the test ends.
    struct Down<'a>(&'a dyn Fn(&[&str]) -> std::process::Output);
    impl Drop for Down<'_> {
        fn drop(&mut self) {
            let _ = (self.0)(&["down"]);
        }
    }
    let _down = Down(&dpm);
    let through = |var: &str, value: &str, args: &[&str]| {
        Dpm::run(args).env("DPM_NO_BOOT", "").env("DPM_RUNTIME_DIR", &runtime).env(var, value).env("OMPI_MCA_btl", "^ofi").output()
    };
    let out = through("PROG", &hello, &["-n", "2", "sh", "-c", "$PROG"]);
    assert_refused(&out);
    let out = through("PROG", &common::hello(), &["-n", "2", "sh", "-c", "$PROG"]);
    out.assert_success().assert_stdout_contains("hello from rank 1 of 2 ");
}

/// A rank of a watched job, in Python (no MPI: the probe cannot classify
/// it, so it is watched): writes the watch's port (from the URI its
/// environment names) to `DIR/port`; if `DIR/connect` exists, connects
/// there as an Open MPI client would and waits; else waits for `DIR/go`.
const WATCHED_RANK: &str = r#"
import os, socket, sys, time
d = sys.argv[1]
port = os.environ['PMIX_SERVER_URI41'].rsplit(':', 1)[1]
open(d + '/port.tmp', 'w').write(port)
os.rename(d + '/port.tmp', d + '/port')
if os.path.exists(d + '/connect'):
    s = socket.create_connection(('127.0.0.1', int(port)))
    time.sleep(600)
while not os.path.exists(d + '/go'):
    time.sleep(0.05)
print('rank done', flush=True)
"#;

/// Connect to 127.0.0.1:PORT COUNT times; print how many the other end
/// closed (a connection held open times out instead).
const STRANGER: &str = r#"
import socket, sys
closed = 0
for _ in range(int(sys.argv[2])):
    s = socket.create_connection(('127.0.0.1', int(sys.argv[1])))
    s.settimeout(5)
    try:
        closed += s.recv(1) == b''
    except ConnectionResetError:
        closed += 1
    except socket.timeout:
        pass
    s.close()
print(closed)
"#;

/// Only the owner trips the watch: 20 connections of another user
/// (`nobody`) are each closed, 3 of them logged and the rest counted, and
/// the run goes on to exit 0; the owner's own connection (a rank that
/// connects where its URI says, as Open MPI's client does) ends the run
/// with the message. Needs no Open MPI.
#[test]
fn another_users_connections_are_closed_and_the_owners_trips_the_watch() {
    if !common::root_to_act_as_another_user("another_users_connections_are_closed_and_the_owners_trips_the_watch") {
        return;
    }
    let dir = TempDir::new("ompi-unseen-stranger");
    let d = dir.path.display().to_string();
    let args = ["-n", "1", "sh", "-c", "exec /usr/bin/python3 -c \"$RANK\" \"$D\""];
    let job = Dpm::run(args).env("RANK", WATCHED_RANK).env("D", &d).env("DPM_LOG", "warn").spawn();
    let port_file = dir.path.join("port");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let port = loop {
        if let Ok(port) = std::fs::read_to_string(&port_file) {
            break port;
        }
        assert!(std::time::Instant::now() < deadline, "the rank never wrote the watch's port");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let stranger = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", STRANGER, &port, "20"])
        .output()
        .expect("setpriv");
    assert_eq!(String::from_utf8_lossy(&stranger.stdout).trim(), "20", "another user's connections are closed: {stranger:?}");
    std::fs::write(dir.path.join("go"), "").unwrap();
    let out = job.wait();
    out.assert_success().assert_stdout_contains("rank done\n");
    let logged = out.stderr_str().matches("the PMIx watch closed a connection").count();
    assert!((1..=3).contains(&logged), "refusals logged {logged} times, at most 3 one by one\n{}", out.describe());
    out.assert_stderr_contains("closed 20 connections of other users in all");

    std::fs::remove_file(&port_file).unwrap();
    std::fs::write(dir.path.join("connect"), "").unwrap();
    let out = Dpm::run(args).env("RANK", WATCHED_RANK).env("D", &d).output();
    assert_refused(&out);
    out.assert_stderr_contains("a rank of 'sh' runs Open MPI");
}
