//! A long host list costs nothing for the hosts a run does not use: daemons
//! start only where the first job's ranks are, and a spawn placed on a
//! listed host without a daemon starts it then (or, if it cannot start,
//! ends the run as a lost node does, never a hang). The hosts are loopback
//! addresses reached through [`common::LOCAL_SSH`], which logs each start.

mod common;

use common::{placement, repo_root, unique, Dpm, Output};

/// `127.1.x.y:1` for `n` hosts.
fn hosts(n: usize) -> String {
    (0..n).map(|i| format!("127.1.{}.{}:1", i / 250, i % 250 + 1)).collect::<Vec<_>>().join(",")
}

/// `dpm run -launcher ssh` through the stand-in ssh over [`hosts`]`(n)`,
/// `--report-placement` and `args`: its output and the hosts a daemon was
/// started on, sorted (daemons start in parallel: their agents log in
/// either order).
fn run_over(n: usize, args: &[&str]) -> (Output, Vec<String>) {
    let ssh = common::local_ssh();
    let log = std::env::temp_dir().join(unique("dpm-ssh-log"));
    let (ssh_path, list) = (ssh.path_str(), hosts(n));
    let mut all = vec!["-launcher", "ssh", "--ssh-command", &ssh_path, "-hosts", &list, "--report-placement"];
    all.extend_from_slice(args);
    let out = Dpm::run(all).env("DPM_T_SSH_LOG", &log.display().to_string()).output();
    let mut daemons: Vec<String> = std::fs::read_to_string(&log).unwrap_or_default().lines().map(String::from).collect();
    daemons.sort();
    let _ = std::fs::remove_file(&log);
    (out, daemons)
}

#[test]
fn a_thousand_hosts_and_two_ranks_start_two_daemons() {
    let (out, daemons) = run_over(1000, &["-n", "2", "/bin/echo", "ran"]);
    out.assert_success();
    assert_eq!(out.lines(), ["ran", "ran"], "{}", out.describe());
    assert_eq!(daemons, ["127.1.0.1", "127.1.0.2"], "daemons started\n{}", out.describe());
    let placed: Vec<(u32, String, String)> = placement(&out.stderr_str());
    assert_eq!(placed, vec![(0, "0".into(), "127.1.0.1".into()), (0, "1".into(), "127.1.0.2".into())], "{}", out.describe());
}

/// A list of any length starts daemons only where the first job's ranks
/// are; a spawn placed on a listed host without a daemon starts it then
/// (the MPICH spawn program: children on the most free host, the first of
/// the three idle ones), through the run's own launcher.
#[test]
fn a_spawn_onto_a_listed_host_starts_its_daemon_then() {
    let spawner = common::program("spawn_args");
    let (out, daemons) = run_over(4, &["-n", "1", &spawner, "1"]);
    out.assert_success().assert_stdout_contains("spawn ok children=1");
    assert_eq!(daemons, ["127.1.0.1", "127.1.0.2"], "daemons started\n{}", out.describe());
    assert_eq!(common::spawned_hosts(&out.stderr_str()), ["127.1.0.2"], "{}", out.describe());
}

/// mpi4py: a spawn whose `host` names a listed host far down a list of
/// 1,000 starts that host's daemon and runs there; `MPI_UNIVERSE_SIZE` is
/// the whole list's slots, as Hydra's.
#[test]
fn a_spawn_naming_a_listed_host_without_a_daemon_runs_there() {
    let python = repo_root().join(".venv/bin/python");
    assert!(python.is_file(), "{} is missing: run ./scripts/setup.sh", python.display());
    let script = "import sys\nfrom mpi4py import MPI\n\
         parent = MPI.Comm.Get_parent()\n\
         if parent != MPI.COMM_NULL:\n    parent.Disconnect(); sys.exit(0)\n\
         print('universe', MPI.COMM_WORLD.Get_attr(MPI.UNIVERSE_SIZE))\n\
         info = MPI.Info.Create(); info.Set('host', '127.1.0.200')\n\
         child = MPI.COMM_SELF.Spawn(sys.executable, ['-c', sys.argv[1]], 1, info)\n\
         child.Disconnect(); print('spawned')\n";
    let (out, daemons) = run_over(1000, &["-n", "1", python.to_str().unwrap(), "-c", script, script]);
    out.assert_success().assert_stdout_contains("spawned").assert_stdout_contains("universe 1000");
    assert_eq!(daemons, ["127.1.0.1", "127.1.0.200"], "daemons started\n{}", out.describe());
    assert_eq!(common::spawned_hosts(&out.stderr_str()), ["127.1.0.200"], "{}", out.describe());
}

/// A daemon that cannot start when a spawn first needs it: the run ends as
/// for a lost node, naming it and why, and nothing hangs or is left.
#[test]
fn a_daemon_that_cannot_start_for_a_spawn_ends_the_run_clearly() {
    let refusing = LOCAL_SSH_REFUSING_127_1_0_2;
    let ssh = common::TempFile::new("dpm-refusing-ssh", refusing.as_bytes(), 0o755);
    let out = Dpm::run(["-launcher", "ssh", "--ssh-command", &ssh.path_str(), "-hosts", &hosts(4), "-n", "1", &common::program("spawn_args"), "1"]).output();
    assert_eq!(out.code(), 1, "{}", out.describe());
    out.assert_stderr_contains("node 1 (127.1.0.2) was lost: its daemon could not start");
}

/// [`common::LOCAL_SSH`], except that host 127.1.0.2 refuses the connection.
const LOCAL_SSH_REFUSING_127_1_0_2: &str = "#!/bin/sh\n\
while [ $# -gt 0 ]; do case \"$1\" in -o) shift 2;; -*) shift;; *) break;; esac; done\n\
if [ \"$1\" = 127.1.0.2 ]; then echo \"ssh: connect to host $1 port 22: Connection refused\" >&2; exit 255; fi\n\
shift\n\
exec env -i PATH=\"$PATH\" HOME=\"$HOME\" DPM_T_NODE=login /bin/sh -c \"$*\"\n";

/// Without `-n` a host list runs one rank per slot it gives, one for an
/// entry without a count — Hydra's own count, checked on the same lists.
#[test]
fn a_host_list_without_n_runs_hydras_count() {
    for (list, want) in [("localhost:2,127.0.0.1:3", 5), ("localhost,127.0.0.1", 2), ("localhost:3,127.0.0.1", 4)] {
        let hydra = common::under_hydra(&["-hosts", list, "/bin/echo", "ran"]);
        assert_eq!(hydra.stdout_str().lines().filter(|l| *l == "ran").count(), want, "Hydra's own count for {list}\n{}", hydra.describe());
        let out = Dpm::run(["-hosts", list, "/bin/echo", "ran"]).output();
        out.assert_success();
        assert_eq!(out.lines().iter().filter(|l| *l == "ran").count(), want, "-hosts {list}\n{}", out.describe());
    }
}
