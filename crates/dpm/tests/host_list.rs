//! A long host list costs nothing for the hosts a run does not use: with
//! more hosts than one level of the daemon tree (32), daemons start only
//! where the first job's ranks are, and a spawn naming a host without a
//! daemon fails with a clear error, never a hang. The hosts are loopback
//! addresses reached through [`common::LOCAL_SSH`], which logs each start.

mod common;

use common::{placement, repo_root, unique, Dpm};

/// `127.1.x.y:1` for `n` hosts.
fn hosts(n: usize) -> String {
    (0..n).map(|i| format!("127.1.{}.{}:1", i / 250, i % 250 + 1)).collect::<Vec<_>>().join(",")
}

/// The hosts the stand-in ssh was asked for, one per daemon started.
fn started(log: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(log).unwrap_or_default().lines().map(String::from).collect()
}

#[test]
fn a_thousand_hosts_and_two_ranks_start_two_daemons() {
    let ssh = common::local_ssh();
    let log = std::env::temp_dir().join(unique("dpm-ssh-log"));
    let out = Dpm::run(["-launcher", "ssh", "--ssh-command", &ssh.path_str(), "-hosts", &hosts(1000), "--report-placement", "-n", "2", "/bin/echo", "ran"])
        .env("DPM_T_SSH_LOG", &log.display().to_string())
        .output();
    let daemons = started(&log);
    let _ = std::fs::remove_file(&log);
    out.assert_success();
    assert_eq!(out.lines(), ["ran", "ran"], "{}", out.describe());
    assert_eq!(daemons, ["127.1.0.1", "127.1.0.2"], "daemons started\n{}", out.describe());
    let placed: Vec<(u32, String, String)> = placement(&out.stderr_str());
    assert_eq!(placed, vec![(0, "0".into(), "127.1.0.1".into()), (0, "1".into(), "127.1.0.2".into())], "{}", out.describe());
}

#[test]
fn a_short_list_still_starts_every_host_for_spawns() {
    let ssh = common::local_ssh();
    let log = std::env::temp_dir().join(unique("dpm-ssh-log"));
    let out = Dpm::run(["-launcher", "ssh", "--ssh-command", &ssh.path_str(), "-hosts", &hosts(4), "-n", "1", "/bin/true"])
        .env("DPM_T_SSH_LOG", &log.display().to_string())
        .output();
    let mut daemons = started(&log);
    let _ = std::fs::remove_file(&log);
    out.assert_success();
    daemons.sort();
    assert_eq!(daemons, ["127.1.0.1", "127.1.0.2", "127.1.0.3", "127.1.0.4"], "{}", out.describe());
}

/// A spawn whose `host` names a listed host that has no daemon is refused:
/// `MPI_Comm_spawn` returns an error that says so.
#[test]
fn a_spawn_onto_a_host_without_a_daemon_fails_clearly() {
    let python = repo_root().join(".venv/bin/python");
    assert!(python.is_file(), "{} is missing: run ./scripts/setup.sh", python.display());
    let script = "from mpi4py import MPI\n\
         info = MPI.Info.Create(); info.Set('host', '127.1.0.200')\n\
         try:\n    MPI.COMM_SELF.Spawn('/bin/true', [], 1, info); print('spawned')\n\
         except MPI.Exception as e:\n    print('spawn refused')\n";
    let ssh = common::local_ssh();
    let out =
        Dpm::run(["-launcher", "ssh", "--ssh-command", &ssh.path_str(), "-hosts", &hosts(1000), "-n", "1", python.to_str().unwrap(), "-c", script]).output();
    out.assert_stdout_contains("spawn refused").assert_stdout_lacks("spawned");
    out.assert_stderr_contains("host '127.1.0.200' is not a node of this run");
}
