//! Many nodes on one machine: `--virtual-nodes N` starts N `dpm daemon`
//! processes (fork bootstrap), each a separate node in the tree and in
//! `PMI_process_mapping`, so MPICH wires up across nodes through dpm's fence.

mod common;

use std::time::{Duration, Instant};

use common::{hello, program, Dpm};

#[test]
fn ring_across_four_virtual_nodes() {
    let out = Dpm::run(["--virtual-nodes", "4", "--report-placement", "-n", "8", &program("ring")]).output();
    out.assert_success();
    out.assert_stdout_contains("ring ok size=8 sum=");
    let host = common::hostname();
    let placed = common::placement(&out.stderr_str());
    let expected: Vec<(u32, String, String)> = (0..4).map(|k| (0, format!("{}-{}", 2 * k, 2 * k + 1), format!("{host}-v{k}"))).collect();
    // Two slots per node on a 2-CPU machine; placement fills each node in turn.
    if std::thread::available_parallelism().unwrap().get() == 2 {
        assert_eq!(placed, expected, "{}", out.describe());
    } else {
        assert_eq!(placed.len(), placed.iter().map(|p| &p.2).collect::<std::collections::HashSet<_>>().len());
    }
}

#[test]
fn hello_on_eight_virtual_nodes_map_by_node() {
    let out = Dpm::run(["--virtual-nodes", "8", "--map-by", "node", "-n", "8", &hello()]).output();
    out.assert_success();
    for r in 0..8 {
        out.assert_stdout_contains(&format!("hello from rank {r} of 8 on host"));
    }
    out.assert_stdout_contains("sum of ranks = 28 (expected 28)");
}

#[test]
fn the_process_mapping_names_every_node() {
    let out = Dpm::run(["--virtual-nodes", "2", "-ppn", "1", "--pmi-trace", "-n", "2", &program("ring")]).output();
    out.assert_success();
    // Two nodes with one rank each, as MPICH's vector grammar says it.
    out.assert_stderr_contains("cmd=get_result rc=0 value=(vector,(0,2,1))");
    // And MPICH then exchanged its addresses through dpm's fence.
    out.assert_stderr_contains("key=-allgather-1-0 value=segments=");
}

#[test]
fn pmi2_fence_and_node_attributes_across_nodes() {
    Dpm::run(["--virtual-nodes", "3", "-n", "3", &program("pmi2_putfence")]).output().assert_success();
    let out = Dpm::run(["--virtual-nodes", "2", "-n", "4", &program("pmi2_nodeattr")]).output();
    out.assert_success();
    out.assert_stdout_lacks("FAIL");
}

#[test]
fn spawned_children_are_spread_over_the_least_loaded_nodes() {
    let out = Dpm::run(["--virtual-nodes", "3", "--report-placement", "-n", "1", &program("spawn_args"), "4"]).output();
    out.assert_success();
    out.assert_stdout_contains("spawn ok children=4");
    let host = common::hostname();
    let children: Vec<_> = common::placement(&out.stderr_str()).into_iter().filter(|p| p.0 == 1).collect();
    // Node 0 holds the parent, so the 4 children take the free slots of
    // nodes 1 and 2 first, then node 0's: one node never gets them all.
    let count = |k: usize| -> usize { children.iter().filter(|c| c.2 == format!("{host}-v{k}")).map(|c| c.1.split(',').count()).sum() };
    assert_eq!(count(0) + count(1) + count(2), 4, "{}", out.describe());
    assert!(count(1) >= 1 && count(2) >= 1, "children not spread: {children:?}\n{}", out.describe());
    assert!(count(0) <= 1, "the parent's node got {} children\n{}", count(0), out.describe());
}

#[test]
fn spawn_info_host_names_a_virtual_node() {
    let host = common::hostname();
    let script = format!(
        "from mpi4py import MPI; import sys\n\
         info = MPI.Info.Create(); info.Set('host', '{host}-v2')\n\
         c = MPI.COMM_SELF.Spawn(sys.executable, ['-c', 'from mpi4py import MPI; p = MPI.Comm.Get_parent(); p.Barrier(); p.Disconnect()'], 2, info)\n\
         c.Barrier(); c.Disconnect(); print('spawned on v2')\n"
    );
    let python = common::repo_root().join(".venv/bin/python");
    let out = Dpm::run(["--virtual-nodes", "3", "--report-placement", "-n", "1", python.to_str().unwrap(), "-c", &script]).output();
    out.assert_success();
    out.assert_stdout_contains("spawned on v2");
    let children: Vec<_> = common::placement(&out.stderr_str()).into_iter().filter(|p| p.0 == 1).collect();
    assert_eq!(children, vec![(1, "0-1".to_string(), format!("{host}-v2"))], "{}", out.describe());
}

#[test]
fn abort_on_one_node_ends_the_ranks_on_every_node() {
    let out = Dpm::run(["--virtual-nodes", "2", "-n", "4", &program("abort"), "3", "9"]).output();
    out.assert_code(9);
    out.assert_stdout_lacks("was not killed");
    let host = common::hostname();
    out.assert_stderr_contains("rank 3 (pid");
    out.assert_stderr_contains(&format!("on {host}-v1) called MPI_Abort with exit code 9"));
}

#[test]
fn stdin_reaches_rank_zero_on_its_node() {
    let out = Dpm::run(["--virtual-nodes", "2", "-ppn", "1", "-n", "2", &program("stdin_echo")]).stdin(b"first line\nsecond\n").output();
    out.assert_success();
    out.assert_stdout_contains("rank 0 read 18 bytes: first line");
    out.assert_stdout_contains("rank 1 stdin eof");
}

#[test]
fn a_killed_daemon_ends_the_run_and_names_its_node() {
    // The ranks would sleep past the watchdog: only dpm can end the run in time.
    let mut run = Dpm::run(["--virtual-nodes", "3", "-n", "6", "sleep", "600"]).spawn();
    run.wait_for_procs(6);
    let dpm = run.pid();
    // Kill the daemon of node 1: a child of dpm running `dpm daemon --node 1`.
    let victim = common::daemon_of(dpm, 1).expect("node 1's daemon");
    let status = std::process::Command::new("kill").args(["-KILL", &victim.to_string()]).status().unwrap();
    assert!(status.success());
    let out = run.wait();
    assert_eq!(out.code(), 1, "{}", out.describe());
    let host = common::hostname();
    // Seen by its link closing, not by a heartbeat timeout.
    out.assert_stderr_contains(&format!("node 1 ({host}-v1) was lost: its daemon exited"));
}

#[test]
fn bad_node_options_are_clear_errors() {
    let out = Dpm::run(["--virtual-nodes", "2", "-hosts", "a,b", "-n", "1", "/bin/true"]).output();
    out.assert_code(2);
    out.assert_stderr_contains("exclude each other");
    let out = Dpm::run(["-launcher", "fork", "-hosts", "no-such-host-dpm.invalid", "-n", "1", "/bin/true"]).output();
    out.assert_code(2);
    out.assert_stderr_contains("-launcher fork starts daemons on this machine only");
}

#[test]
fn an_unreachable_host_is_named_and_nothing_is_left_running() {
    // ssh to a name that cannot resolve fails at once; dpm names the host.
    let out = Dpm::run(["-hosts", "no-such-host-dpm.invalid", "-n", "1", "/bin/true"]).output();
    assert_eq!(out.code(), 1, "{}", out.describe());
    out.assert_stderr_contains("no-such-host-dpm.invalid");
}

/// `dpm daemon` processes still running under `dpm` (any depth).
fn daemons_below(dpm: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let mut frontier = vec![dpm];
    while let Some(parent) = frontier.pop() {
        for pid in std::fs::read_dir("/proc").unwrap().flatten().filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok()) {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat.rsplit(')').next().and_then(|s| s.split_whitespace().nth(1)).and_then(|p| p.parse::<u32>().ok());
            if ppid == Some(parent) {
                let cmd = String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default()).replace('\0', " ");
                if cmd.contains(" daemon --node ") {
                    found.push(pid);
                    frontier.push(pid);
                }
            }
        }
    }
    found
}

#[test]
fn a_binary_tree_of_seven_daemons_runs_mpich_across_three_levels() {
    // Fan-out 2: the launcher starts nodes 0 and 1; node 0 starts 2 and 3,
    // node 1 starts 4 and 5, node 2 starts 6. Fences are merged on the way up.
    let out = Dpm::run(["--virtual-nodes", "7", "--tree-fanout", "2", "--pmi-trace", "-n", "14", &program("ring")]).output();
    out.assert_success();
    out.assert_stdout_contains("ring ok size=14 sum=");
    out.assert_stderr_contains("cmd=get_result rc=0 value=(vector,(0,7,2))");
    let out = Dpm::run(["--virtual-nodes", "7", "--tree-fanout", "2", "-n", "7", &program("pmi2_putfence")]).output();
    out.assert_success();
    assert_eq!(out.lines().iter().filter(|l| l.starts_with("pmi2 putfence ok")).count(), 7, "{}", out.describe());
}

#[test]
fn the_tree_really_is_a_tree() {
    let mut run = Dpm::run(["--virtual-nodes", "7", "--tree-fanout", "2", "-n", "7", "sleep", "30"]).spawn();
    run.wait_for_procs(7);
    let dpm = run.pid();
    let direct: Vec<u32> = daemons_below(dpm)
        .into_iter()
        .filter(|&pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            stat.rsplit(')').next().and_then(|s| s.split_whitespace().nth(1)).and_then(|p| p.parse::<u32>().ok()) == Some(dpm)
        })
        .collect();
    let all = daemons_below(dpm);
    run.signal("TERM");
    let out = run.wait();
    assert_eq!(out.code(), 143, "{}", out.describe());
    assert_eq!(direct.len(), 2, "the launcher should start only its 2 children, started {direct:?}");
    assert_eq!(all.len(), 7, "7 daemons in all: {all:?}");
}

#[test]
fn spawn_through_the_tree_places_children_on_deeper_nodes() {
    let out = Dpm::run(["--virtual-nodes", "7", "--tree-fanout", "2", "--report-placement", "-n", "1", &program("spawn_args"), "6"]).output();
    out.assert_success();
    out.assert_stdout_contains("spawn ok children=6");
    let hosts: std::collections::HashSet<String> = common::placement(&out.stderr_str()).into_iter().filter(|p| p.0 == 1).map(|p| p.2).collect();
    assert!(hosts.len() >= 5, "6 children should spread over the free nodes, got {hosts:?}\n{}", out.describe());
}

#[test]
fn losing_an_inner_daemon_ends_the_run_and_its_subtree() {
    let mut run = Dpm::run(["--virtual-nodes", "7", "--tree-fanout", "2", "-n", "14", "sleep", "600"]).spawn();
    run.wait_for_procs(14);
    let dpm = run.pid();
    let node0 = daemons_below(dpm)
        .into_iter()
        .find(|pid| String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default()).replace('\0', " ").contains("daemon --node 0 "))
        .expect("node 0's daemon");
    assert!(std::process::Command::new("kill").args(["-KILL", &node0.to_string()]).status().unwrap().success());
    let out = run.wait(); // also checks that no rank is left anywhere
    assert_eq!(out.code(), 1, "{}", out.describe());
    out.assert_stderr_contains("node 0 (");
    out.assert_stderr_contains("was lost: its daemon exited");
    // Reaped by init once dpm is gone: wait for that (a hang guard, not a bound).
    let deadline = Instant::now() + Duration::from_secs(30);
    while !daemons_below(dpm).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(daemons_below(dpm).is_empty(), "daemons left below the finished dpm");
}

#[test]
fn one_virtual_node_is_still_a_forked_daemon() {
    let out = Dpm::run(["--virtual-nodes", "1", "-n", "1", "sh", "-c", "ps -o args= -p $PPID"]).output();
    out.assert_success();
    out.assert_stdout_contains(" daemon --node 0 ");
}
