//! Self-checks of the test helpers, so that a broken leftover scan cannot
//! make every "no orphans" assertion pass vacuously.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{leftovers_after, marked_procs, unique, MARKER_VAR};

#[test]
fn leftover_scan_finds_and_kills_a_marked_process() {
    let marker = unique("dpmtest-self");
    let mut child = Command::new("sleep").arg("30").env(MARKER_VAR, &marker).stdin(Stdio::null()).spawn().expect("start sleep");
    let pid = child.id();
    // Until the child has exec'd, /proc shows the test binary's environment
    // and command line, without the marker: wait for the exec (bounded).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut found = marked_procs(&marker);
    while found.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
        found = marked_procs(&marker);
    }
    assert_eq!(found.iter().map(|p| p.0).collect::<Vec<_>>(), vec![pid], "scan found {found:?}");
    assert!(found[0].1.starts_with("sleep 30"), "cmdline {:?}", found[0].1);
    // Another marker must not match (exact match, not a prefix).
    assert!(marked_procs(&marker[..marker.len() - 1]).is_empty());
    let left = leftovers_after(&marker, Duration::from_millis(100));
    assert_eq!(left.len(), 1, "leftovers_after should report the live process");
    let status = child.wait().expect("wait");
    assert!(status.code().is_none(), "leftovers_after should have killed it: {status:?}");
    assert!(marked_procs(&marker).is_empty());
}
