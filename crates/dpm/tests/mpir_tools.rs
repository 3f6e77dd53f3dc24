//! MPIR tool daemons (`MPIR_executable_path`, `MPIR_server_arguments`, the
//! extension Flux implements), with real gdb as the tool in launch mode:
//! the daemon starts once on each node of the job, sees the job's ranks,
//! writes to the run's output, and ends with the run (docs/debugging.md).

mod common;

use common::boot::Boot;
use common::debugger::{gdb, launch_script, parse_table, ready_pids};
use common::{dpm_bin, hostname, program, unique, Dpm, TempDir, TempFile};
use std::path::Path;

/// A tool daemon that says what it sees: its arguments, then each of the
/// job's pids on its node that it finds live (and their program), on
/// stdout; a line on stderr; last `tool host H pid P ranks R pids Q`. It
/// stays (a daemon), so that the run's end must end it.
const TOOL_DAEMON: &str = r#"#!/bin/sh
echo "tool args [$1] [$2]"
for p in $DPM_TOOL_PIDS; do test -d /proc/$p && echo "tool on $DPM_TOOL_HOST sees $p $(readlink /proc/$p/exe)"; done
echo "tool on $DPM_TOOL_HOST says on stderr" >&2
echo "tool host $DPM_TOOL_HOST pid $$ ranks $DPM_TOOL_RANKS pids $DPM_TOOL_PIDS"
exec sleep 600
"#;

/// gdb as the tool in launch mode, asking at the breakpoint for the tool
/// daemon `path` (arguments `-v`, `two words`); the test lets the ranks go
/// once `nodes` daemons said `tool host`. gdb's output.
fn launch_with_tool(args: &[&str], dir: &TempDir, path: &str, nodes: usize, env: &[(&str, &str)]) -> common::Output {
    let gdb = gdb().expect("gdb");
    let set_tool = format!(
        "set var *(char (*)[{}])&MPIR_executable_path = \"{path}\"\nset var *(char (*)[15])&MPIR_server_arguments = \"-v\\0two words\\0\"\n",
        path.len() + 1
    );
    let script = launch_script(&dir.path, false, 0).replace(&format!("shell touch {}/go\n", dir.path.display()), &set_tool);
    let script = TempFile::new("mpir-tool.gdb", script.as_bytes(), 0o600);
    let marker = unique("dpmtest");
    let mut all: Vec<String> =
        ["-nx", "-batch", "-x", &script.path_str(), "--args", dpm_bin(), "run", "-genv", common::MARKER_VAR, &marker].map(String::from).to_vec();
    all.extend(args.iter().map(|s| s.to_string()));
    // The marker in dpm's own environment too: a tool daemon left behind is found.
    // A hang guard: at a load of 50 on 2 cores gdb and the tool daemons took
    // over 60 s to get this far.
    let mut run = Dpm::raw(all).exe(Path::new(&gdb)).env(common::MARKER_VAR, &marker).watchdog(std::time::Duration::from_secs(300));
    for (k, v) in env {
        run = run.env(k, v);
    }
    let mut running = run.spawn();
    if nodes > 0 {
        running.wait_for_lines("tool host ", nodes);
    }
    std::fs::write(dir.path.join("go"), b"").expect("write go");
    let out = running.wait_unchecked();
    let left = common::leftovers_after(&marker, common::LEFTOVER_GRACE);
    assert!(left.is_empty(), "left behind: {left:?}\n{}", out.describe());
    out
}

/// Each `tool host H pid P ranks R pids Q` line: (host, pids).
fn tool_reports(stdout: &str) -> Vec<(String, Vec<u32>)> {
    stdout
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("tool host ")?;
            let (host, rest) = rest.split_once(' ')?;
            let pids = rest.split_once(" pids ")?.1.split(' ').filter_map(|p| p.parse().ok()).collect();
            Some((host.to_string(), pids))
        })
        .collect()
}

/// The tool daemon ran once on each of `hosts`, with the arguments, saw
/// every rank of its node live running `exe`, wrote to the run's stdout and
/// stderr; the job ended 0 (and the daemon with it: `launch_with_tool`).
fn assert_tool_daemons(out: &common::Output, exe: &str, hosts: &[String]) {
    let text = out.stdout_str();
    let table = parse_table(&format!("{text}{}", out.stderr_str()), 0);
    let mut reports = tool_reports(&text);
    reports.sort();
    assert_eq!(reports.iter().map(|r| r.0.clone()).collect::<Vec<_>>(), hosts, "one tool daemon per node\n{}", out.describe());
    for (host, pids) in &reports {
        let want: Vec<u32> = table.iter().filter(|e| &e.host == host).map(|e| e.pid).collect();
        assert_eq!(pids, &want, "the pids told to the tool on {host}\n{}", out.describe());
        for pid in pids {
            assert!(text.contains(&format!("tool on {host} sees {pid} {exe}\n")), "the tool on {host} did not see rank pid {pid}\n{}", out.describe());
        }
        assert!(out.stderr_str().contains(&format!("tool on {host} says on stderr\n")), "{}", out.describe());
    }
    assert_eq!(text.matches("tool args [-v] [two words]\n").count(), hosts.len(), "{}", out.describe());
    out.assert_stdout_contains("exited normally");
}

#[test]
fn tool_daemon_once_on_one_node() {
    let dir = TempDir::new("mpir");
    let exe = program("mpir_job");
    let tool = TempFile::new("tool-daemon", TOOL_DAEMON.as_bytes(), 0o700);
    let out = launch_with_tool(&["-n", "3", &exe, &dir.path_str()], &dir, &tool.path_str(), 1, &[]);
    assert_tool_daemons(&out, &exe, &[hostname()]);
}

#[test]
fn tool_daemon_once_on_each_of_two_virtual_nodes() {
    let dir = TempDir::new("mpir");
    let exe = program("mpir_job");
    let tool = TempFile::new("tool-daemon", TOOL_DAEMON.as_bytes(), 0o700);
    let out = launch_with_tool(&["--virtual-nodes", "2", "-n", "4", &exe, &dir.path_str()], &dir, &tool.path_str(), 2, &[]);
    assert_tool_daemons(&out, &exe, &[format!("{}-v0", hostname()), format!("{}-v1", hostname())]);
}

/// Through a boot: the client reads the symbols, the boot's daemons start the tool.
#[test]
fn tool_daemon_through_a_boot() {
    let boot = Boot::start(&[]);
    let dir = TempDir::new("mpir");
    let exe = program("mpir_job");
    let tool = TempFile::new("tool-daemon", TOOL_DAEMON.as_bytes(), 0o700);
    let runtime = boot.dir.to_string_lossy().into_owned();
    let out = launch_with_tool(&["-n", "2", &exe, &dir.path_str()], &dir, &tool.path_str(), 1, &[("DPM_NO_BOOT", ""), ("DPM_RUNTIME_DIR", &runtime)]);
    let host = parse_table(&format!("{}{}", out.stdout_str(), out.stderr_str()), 0)[0].host.clone();
    assert_tool_daemons(&out, &exe, &[host]);
}

/// A tool daemon that cannot be started: one clear line, the job runs on.
#[test]
fn a_tool_daemon_that_cannot_start_is_one_line() {
    let dir = TempDir::new("mpir");
    let exe = program("mpir_job");
    let missing = std::env::temp_dir().join(unique("no-such-tool"));
    let out = launch_with_tool(&["-n", "2", &exe, &dir.path_str()], &dir, &missing.to_string_lossy(), 0, &[]);
    let line = format!(
        "dpm: error: {}: cannot start the tool daemon {}: No such file or directory (os error 2); the job runs on without it",
        hostname(),
        missing.display()
    );
    assert_eq!(out.stderr_str().lines().filter(|l| l.starts_with("dpm: error:")).collect::<Vec<_>>(), vec![line.as_str()], "{}", out.describe());
    assert_eq!(ready_pids(&out.stdout_str(), "world").len(), 2, "{}", out.describe());
    out.assert_stdout_contains("exited normally");
}
