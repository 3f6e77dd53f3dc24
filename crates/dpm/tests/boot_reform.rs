//! A boot's tree re-forms around a lost interior node: the daemons below
//! it re-attach straight below the boot server and their runs go on.
//!
//! 4 virtual nodes with `--tree-fanout 2`: the server's children are nodes
//! 0 and 1, node 0's are nodes 2 and 3. Killing node 0's daemon ends the
//! run with ranks there; a run on nodes 1, 2 and 3 goes on through a PMI
//! fence after the loss (its arrivals and completion go through the new
//! links) and exits 0; the next run takes nodes 1, 2 and 3. The rendezvous
//! file lists nodes 1, 2 and 3 up once they re-attached.

mod common;

use std::time::Duration;

use common::boot::Boot;
use common::{send_signal, wait_then_fence, TempDir};

#[test]
fn a_lost_interior_node_ends_its_runs_and_the_nodes_below_it_re_attach_and_go_on() {
    let boot = Boot::start(&["--virtual-nodes", "4", "--tree-fanout", "2"]);
    let slots = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (n, n3) = (slots.to_string(), (3 * slots).to_string());
    let dir = TempDir::new("reform");
    let script = wait_then_fence().display().to_string();
    let go = format!("{}/go", dir.path_str());
    // Run A fills node 0 (interior), run B nodes 1, 2 and 3.
    let mut a = boot.run(&["--report-placement", "-n", &n, "sleep", "60"]).spawn();
    a.wait_for_procs(slots);
    let mut b = boot.run(&["--report-placement", "-n", &n3, &script, &go]).spawn();
    b.wait_for_lines("rank ", 3 * slots);
    let daemon = common::daemon_of(boot.pid, 0).expect("node 0's daemon, a child of the boot server");
    send_signal(daemon, "KILL");

    // A had ranks there: it ends as a plain run does, naming the node.
    let out = a.wait_unchecked();
    assert_eq!(out.code(), 1, "{}", out.describe());
    let host = common::hostname();
    out.assert_stderr_contains(&format!("node 0 ({host}-v0) was lost: its daemon exited"));

    // Nodes 2 and 3 re-attach (neither detached nor lost); node 0 shows lost.
    let back = |line: String| !line.is_empty() && !line.contains("detached") && !line.contains("lost");
    let status = boot.status_until(Duration::from_secs(60), |s| (1..4).all(|i| back(Boot::node_line(s, i))));
    assert!(Boot::node_line(&status, 0).contains("lost: its daemon exited"), "{status}");
    // The rendezvous file was rewritten as they re-attached: up, not detached.
    let listed: Vec<(String, String)> = boot.rendezvous_nodes().into_iter().map(|n| (n.0, n.2)).collect();
    let want: Vec<(String, String)> = (1..4).map(|i| (format!("{host}-v{i}"), "up".to_string())).collect();
    assert_eq!(listed, want);

    // B goes on: its fence after the loss completes through the new links.
    std::fs::write(&go, b"").unwrap();
    let out = b.wait();
    let passed = out.lines().iter().filter(|l| l.ends_with(" passed")).count();
    assert_eq!(passed, 3 * slots, "{}", out.describe());
    let hosts: Vec<String> = common::placement(&out.stderr_str()).into_iter().map(|p| p.2).collect();
    for v in ["-v1", "-v2", "-v3"] {
        assert!(hosts.iter().any(|h| h.ends_with(v)), "B had ranks on {v}: {hosts:?}");
    }

    // The next run works on the other 3 nodes, through a fence too.
    let next = boot.run(&["--report-placement", "-n", &n3, &script, &go]).output();
    next.assert_success();
    assert_eq!(next.lines().iter().filter(|l| l.ends_with(" passed")).count(), 3 * slots, "{}", next.describe());
    let hosts: Vec<String> = common::placement(&next.stderr_str()).into_iter().map(|p| p.2).collect();
    assert!(hosts.iter().all(|h| !h.ends_with("-v0")), "a run went to the lost node: {hosts:?}");
    assert!(hosts.iter().any(|h| h.ends_with("-v2")) && hosts.iter().any(|h| h.ends_with("-v3")), "the re-attached nodes took no ranks: {hosts:?}");
}
