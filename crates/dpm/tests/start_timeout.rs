//! Every daemon's start is bounded by `--connect-timeout` /
//! `DPM_CONNECT_TIMEOUT` (30 s when neither is given): a launch agent that
//! never starts its daemon (a hung ssh) ends the run with one line naming
//! the host and the timeout, and the agent is killed with everything it
//! started — whether the launcher or a daemon below it started that agent.
//!
//! The agent is a stand-in `ssh`: for a host named `silent…` it notes its
//! pid and a child's and waits for ever; for any other host it runs the
//! command here (so node 0 is a real daemon that starts node 1 in turn).

mod common;

use std::fs;
use std::time::{Duration, Instant};

use common::{ends_within, send_signal, unique, Dpm, TempFile};

const AGENT: &str = r#"#!/bin/sh
[ "$1" = -x ] && shift
host="$1"; shift
case "$host" in
silent*)
    echo $$ >> "$DPM_TEST_AGENT_PIDS"
    sleep 300 &
    echo $! >> "$DPM_TEST_AGENT_PIDS"
    wait
    ;;
*) exec "$@" ;;
esac
"#;

/// Run `args` with the stand-in agent and `env`; the run must fail within
/// `within` naming `host` and `secs`, leaving no agent process behind.
fn fails_in_time(args: &[&str], env: &[(&str, &str)], host: &str, secs: u64, within: Duration) {
    let agent = TempFile::new("dpm-hung-agent", AGENT.as_bytes(), 0o755);
    let pids_file = std::env::temp_dir().join(unique("dpm-agent-pids")).display().to_string();
    let agent_path = agent.path_str();
    let mut all = vec!["-launcher", "ssh", "--ssh-command", &agent_path];
    all.extend_from_slice(args);
    let mut run = Dpm::run(all).env("DPM_TEST_AGENT_PIDS", &pids_file);
    for (k, v) in env {
        run = run.env(k, v);
    }
    let started = Instant::now();
    let out = run.output();
    let took = started.elapsed();
    let pids: Vec<u32> = fs::read_to_string(&pids_file).unwrap_or_default().lines().filter_map(|l| l.trim().parse().ok()).collect();
    let _ = fs::remove_file(&pids_file);
    let left: Vec<u32> = pids.iter().copied().filter(|&p| !ends_within(p, Duration::from_secs(20))).collect();
    for &p in &left {
        send_signal(p, "KILL");
    }
    assert_eq!(pids.len(), 2, "the agent for {host} did not start (its pid and its child's): {pids:?}\n{}", out.describe());
    assert!(left.is_empty(), "agent processes {left:?} outlived the failed start\n{}", out.describe());
    out.assert_code(1);
    let err = out.stderr_str();
    let lines: Vec<&str> = err.lines().filter(|l| l.contains(host)).collect();
    assert_eq!(lines.len(), 1, "not one line about {host}:\n{err}");
    assert!(lines[0].contains(&format!("no answer within {secs} s")) && lines[0].contains("--connect-timeout"), "{err}");
    assert!(took < within, "the run took {took:?} to fail (timeout {secs} s)\n{err}");
}

#[test]
fn a_hung_agent_of_the_launcher_is_bounded_by_connect_timeout() {
    fails_in_time(&["-hosts", "silent-a:1", "--connect-timeout", "2", "-n", "1", "/bin/true"], &[], "silent-a", 2, Duration::from_secs(15));
}

#[test]
fn a_hung_agent_of_a_daemon_is_bounded_by_dpm_connect_timeout_too() {
    // Node 0 runs here and starts node 1 itself (fan-out 1): the timeout
    // travels down the tree with its description.
    fails_in_time(
        &["-hosts", "good-a:1,silent-b:1", "--tree-fanout", "1", "-n", "2", "/bin/true"],
        &[("DPM_CONNECT_TIMEOUT", "2")],
        "silent-b",
        2,
        Duration::from_secs(15),
    );
}

#[test]
fn a_boot_s_start_is_bounded_by_connect_timeout() {
    let dir = std::env::temp_dir().join(unique("dpm-boot-start"));
    let agent = TempFile::new("dpm-hung-agent", AGENT.as_bytes(), 0o755);
    let pids_file = std::env::temp_dir().join(unique("dpm-agent-pids")).display().to_string();
    let started = Instant::now();
    let out = std::process::Command::new(common::dpm_bin())
        .args(["boot", "-launcher", "ssh", "--ssh-command", &agent.path_str(), "-hosts", "silent-c:1", "--connect-timeout", "2"])
        .env("DPM_RUNTIME_DIR", &dir)
        .env("DPM_TEST_AGENT_PIDS", &pids_file)
        .env_remove("DPM_BOOT")
        .output()
        .expect("run dpm boot");
    let took = started.elapsed();
    let pids: Vec<u32> = fs::read_to_string(&pids_file).unwrap_or_default().lines().filter_map(|l| l.trim().parse().ok()).collect();
    let _ = fs::remove_file(&pids_file);
    let _ = fs::remove_dir_all(&dir);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("silent-c") && err.contains("no answer within 2 s"), "{err}");
    assert!(took < Duration::from_secs(15), "dpm boot took {took:?} to fail\n{err}");
    assert_eq!(pids.len(), 2, "{pids:?}");
    assert!(pids.iter().all(|&p| ends_within(p, Duration::from_secs(20))), "agent processes outlived the failed boot: {pids:?}");
}

#[test]
fn a_zero_or_bad_connect_timeout_is_a_usage_error() {
    for (args, env) in [(&["--connect-timeout", "0"][..], None), (&[][..], Some("0")), (&[][..], Some("soon"))] {
        let mut all = vec!["-hosts", "a:1,b:1", "-launcher", "ssh"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-n", "1", "/bin/true"]);
        let mut run = Dpm::run(all);
        if let Some(v) = env {
            run = run.env("DPM_CONNECT_TIMEOUT", v);
        }
        let out = run.output();
        out.assert_code(2);
        assert!(out.stderr_str().to_lowercase().contains("connect"), "{}", out.describe());
    }
}
