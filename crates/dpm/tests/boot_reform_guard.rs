//! A boot's re-attach listener serves the boot's own daemons only.
//!
//! 4 virtual nodes with `--tree-fanout 2`: nodes 2 and 3 hang below node
//! 0 and are given the boot server's re-attach address. Strangers connect
//! there (`tests/programs/reattach_intruder.py`): as user `nobody` they get
//! not one byte; as the owner's uid without the boot's secret (what a
//! process on another machine is), claiming node 2, detached and waiting
//! for its daemon, every try is refused within the handshake's limits (no
//! secret, a wrong, reflected or replayed proof, a huge or malformed frame,
//! a hello dripped a byte a second), nothing of them is left in the
//! server, and node 2 stays detached until its wait ends (20 heartbeat
//! timeouts, `DPM_HEARTBEAT_TIMEOUT`). A boot without
//! daemons below daemons listens on no TCP port at all.

mod common;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use common::boot::Boot;
use common::{hostname, send_signal};

/// The TCP ports `pid` listens on (its sockets in `/proc/PID/net/tcp*` in LISTEN state).
fn tcp_listeners(pid: u32) -> Vec<SocketAddr> {
    let inodes: HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.flatten().filter_map(|e| std::fs::read_link(e.path()).ok()).collect::<Vec<_>>())
        .unwrap_or_default()
        .iter()
        .filter_map(|l| l.to_str()?.strip_prefix("socket:[")?.strip_suffix(']').map(String::from))
        .collect();
    let mut out = Vec::new();
    for (file, v6) in [("tcp", false), ("tcp6", true)] {
        let table = std::fs::read_to_string(format!("/proc/{pid}/net/{file}")).unwrap_or_default();
        for line in table.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 || f[3] != "0A" || !inodes.contains(f[9]) {
                continue;
            }
            let (ip, port) = f[1].split_once(':').unwrap();
            let port = u16::from_str_radix(port, 16).unwrap();
            let ip: std::net::IpAddr = if v6 {
                let b: Vec<u8> = (0..16).map(|i| u8::from_str_radix(&ip[2 * i..2 * i + 2], 16).unwrap()).collect();
                let mut words = [0u8; 16];
                for w in 0..4 {
                    words[4 * w..4 * w + 4].copy_from_slice(&[b[4 * w + 3], b[4 * w + 2], b[4 * w + 1], b[4 * w]]);
                }
                std::net::Ipv6Addr::from(words).into()
            } else {
                std::net::Ipv4Addr::from(u32::from_str_radix(ip, 16).unwrap().swap_bytes()).into()
            };
            out.push(SocketAddr::new(ip, port));
        }
    }
    out
}

/// Whether every thread of `pid` is stopped (`T` in its `stat`).
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    tasks.flatten().all(|t| {
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        stat.rsplit(')').next().and_then(|r| r.split_whitespace().next()) == Some("T")
    })
}

fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Each intruder mode's line: (mode, bytes got, seconds until closed, verdict).
fn intrude(as_nobody: bool, addr: SocketAddr, node: usize, claimed: &str, protocol: u32, modes: &[&str]) -> (u32, Vec<(String, u64, f64, String)>) {
    let script = common::repo_root().join("tests/programs/reattach_intruder.py");
    let mut cmd = if as_nobody {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3"]);
        c
    } else {
        Command::new("/usr/bin/python3")
    };
    let out = cmd.arg(&script).arg(addr.to_string()).arg(node.to_string()).arg(claimed).arg(protocol.to_string()).args(modes).output().expect("run python3");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "the intruder failed: {text}{}", String::from_utf8_lossy(&out.stderr));
    let protocol = text.lines().find_map(|l| l.strip_prefix("protocol ")).map_or(protocol, |p| p.parse().unwrap());
    let lines = text
        .lines()
        .filter(|l| l.contains(" got="))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let val = |k: &str| f.iter().find_map(|x| x.strip_prefix(k)).unwrap().to_string();
            (f[0].to_string(), val("got=").parse().unwrap(), val("closed_after=").parse().unwrap(), val("verdict="))
        })
        .collect::<Vec<_>>();
    assert_eq!(lines.len(), modes.len(), "{text}");
    (protocol, lines)
}

const MODES: &[&str] = &["silent", "drip", "huge", "garbage", "noproof", "wrong", "reflect", "replay", "flood"];

/// The resident memory of `pid`, KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()?.parse().ok()).unwrap_or(0)
}

#[test]
fn strangers_at_the_re_attach_port_get_nothing_and_leave_nothing() {
    if !common::root_to_act_as_another_user("strangers_at_the_re_attach_port_get_nothing_and_leave_nothing") {
        return;
    }
    // A 1 s heartbeat timeout: node 2 waits 20 of them (20 s) to re-attach.
    let boot = Boot::start_with_env(&["--virtual-nodes", "4", "--tree-fanout", "2"], &[("DPM_HEARTBEAT_TIMEOUT", "1")]);
    let host = hostname();
    let listening = tcp_listeners(boot.pid);
    assert_eq!(listening.len(), 1, "the boot server listens on {listening:?}");
    let addr = listening[0];
    assert!(addr.ip().is_loopback(), "virtual nodes re-attach over loopback; the server listens on {addr}");

    // Another user: closed before a byte, every way it tries (not even the
    // server's hello, which would tell the protocol), 300 times over too;
    // nothing of it stays in the server.
    let (files, rss) = (fd_count(boot.pid), rss_kib(boot.pid));
    let (protocol, tries) = intrude(true, addr, 2, &format!("{host}-v2"), 0, MODES);
    assert_eq!(protocol, 0, "another user learnt the protocol");
    for (mode, got, closed, verdict) in &tries {
        assert_eq!((*got, verdict.as_str()), (0, "none"), "{mode}: another user got an answer");
        let limit = if mode == "flood" { 60.0 } else { 5.0 };
        assert!(*closed < limit, "{mode}: another user's connections stayed open {closed} s");
    }
    assert_eq!(fd_count(boot.pid), files, "the boot server holds descriptors of the refused connections");
    let grown = rss_kib(boot.pid).saturating_sub(rss);
    assert!(grown < 8 * 1024, "the boot server grew by {grown} KiB for refused connections");

    // The protocol, as a stranger on another machine learns it from the server's hello.
    let (protocol, _) = intrude(false, addr, 2, &format!("{host}-v2"), 0, &["noproof"]);
    assert!(protocol > 0);

    // Node 2's daemon dies with its parent: node 2 is detached, waiting
    // for a daemon that never comes (a stopped one would not do: the kernel
    // hangs up a stopped process whose process group its parent's death
    // orphaned). Node 3's re-attaches.
    let node0 = common::daemon_of(boot.pid, 0).expect("node 0's daemon");
    let node2 = common::daemon_of(node0, 2).expect("node 2's daemon, below node 0's");
    // Node 0's daemon stopped first (every thread of it), so that it cannot
    // tell of node 2's end; then both killed, node 2 first.
    send_signal(node0, "STOP");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !all_threads_stopped(node0) {
        assert!(Instant::now() < deadline, "node 0's daemon does not stop");
        std::thread::sleep(Duration::from_millis(10));
    }
    send_signal(node2, "KILL");
    send_signal(node0, "KILL");
    let status = boot.status_until(Duration::from_secs(20), |s| Boot::node_line(s, 0).contains("lost") && !Boot::node_line(s, 3).contains("detached"));
    assert!(Boot::node_line(&status, 2).contains("detached"), "node 2 is not waiting to re-attach:\n{status}");
    let detached_at = Instant::now();
    let files_before = fd_count(boot.pid);
    let listed = boot.rendezvous_nodes();
    assert!(listed.iter().any(|n| n.0 == format!("{host}-v2") && n.2 == "detached"), "{listed:?}");

    // The owner's uid without the secret (a process on another machine):
    // each try refused within the handshake's limits (2 s to say hello, 10 s in all).
    let owner_modes: Vec<&str> = MODES.iter().copied().filter(|m| *m != "flood").collect();
    let (_, tries) = intrude(false, addr, 2, &format!("{host}-v2"), protocol, &owner_modes);
    for (mode, _, closed, verdict) in &tries {
        assert_ne!(verdict, "accepted", "{mode}: a stranger's proof was accepted");
        assert!(*closed < 12.0, "{mode}: the connection stayed open {closed} s");
    }
    for proof in ["wrong", "reflect", "replay"] {
        let (_, _, _, verdict) = tries.iter().find(|t| t.0 == proof).unwrap();
        assert_eq!(verdict, "refused", "{proof}: {tries:?}");
    }
    // Nothing of them is left: every connection's socket is closed.
    let deadline = Instant::now() + Duration::from_secs(10);
    while fd_count(boot.pid) > files_before {
        assert!(Instant::now() < deadline, "the boot server holds {} descriptors, {files_before} before the tries", fd_count(boot.pid));
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = boot.status();
    assert!(detached_at.elapsed() > Duration::from_secs(19) || Boot::node_line(&status, 2).contains("detached"), "a stranger took node 2's place:\n{status}");

    // No daemon of its own came: node 2 is lost when its wait is over, and
    // the rendezvous file lists nodes 1 and 3.
    // The wait follows DPM_HEARTBEAT_TIMEOUT: 20 timeouts.
    let status = boot.status_until(Duration::from_secs(60), |s| Boot::node_line(s, 2).contains("did not re-attach within"));
    assert!(Boot::node_line(&status, 2).contains("did not re-attach within 20 s"), "{status}");
    assert!(detached_at.elapsed() > Duration::from_secs(15), "node 2 was lost {:?} after its parent", detached_at.elapsed());
    let listed = boot.rendezvous_nodes();
    let states: Vec<(&str, &str)> = listed.iter().map(|n| (n.0.as_str(), n.2.as_str())).collect();
    let (v1, v3) = (format!("{host}-v1"), format!("{host}-v3"));
    assert_eq!(states, [(v1.as_str(), "up"), (v3.as_str(), "up")], "{listed:?}");

    // The refusals were logged in summary, not a line each.
    let log = std::fs::read_to_string(boot.dir.join("default.log")).unwrap_or_default();
    let refused = log.lines().filter(|l| l.contains("re-attaching connection")).count();
    assert!((1..=12).contains(&refused), "{refused} lines about refused connections:\n{log}");
    assert!(log.contains("uid 65534"), "another user's refusal not named:\n{log}");

    // The boot serves on, on nodes 1 and 3.
    let slots = std::thread::available_parallelism().map_or(1, |n| n.get());
    let out = boot.run(&["--report-placement", "-n", &(2 * slots).to_string(), "true"]).output();
    out.assert_success();
    let hosts: Vec<String> = common::placement(&out.stderr_str()).into_iter().map(|p| p.2).collect();
    assert!(hosts.iter().any(|h| h.ends_with("-v3")), "node 3 took no ranks: {hosts:?}");
}

#[test]
fn a_boot_without_daemons_below_daemons_listens_on_no_tcp_port() {
    for args in [&["--virtual-nodes", "2"][..], &["--virtual-nodes", "4", "--tree-fanout", "4"][..], &[][..]] {
        let boot = Boot::start(args);
        let listening = tcp_listeners(boot.pid);
        assert!(listening.is_empty(), "dpm boot {args:?} listens on {listening:?}");
    }
}
