//! A boot over ssh re-forms its tree around a cut host: the netns hosts
//! fixture (`tests/fixtures/netns_hosts.sh`), `dpm boot` on h0 over h1..h4
//! with `--tree-fanout 2` (node 0 = h1 starts nodes 2 and 3 = h3 and h4).
//! h1's cable is pulled (silence: no FIN, no RST): the run with ranks on h1
//! ends naming it; h3's and h4's daemons re-attach to the boot server on
//! h0, and the run on h2, h3 and h4 passes a PMI fence after the cut and
//! exits 0; the next run takes h2, h3 and h4; `dpm down` leaves nothing on
//! the hosts that stayed. Needs root and sshd; fails under CI without them.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{dpm_bin, repo_root, wait_then_fence, Dpm, TempDir, TempFile};

fn fixture_script() -> PathBuf {
    repo_root().join("tests/fixtures/netns_hosts.sh")
}

/// `dpm ARGS` on h0 against the boot in `dir`, to completion.
fn on_h0(dir: &Path, ssh: &str, args: &[&str]) -> std::process::Output {
    Command::new("bash")
        .arg(fixture_script())
        .args(["exec", "h0", "env", &format!("DPM_RUNTIME_DIR={}", dir.display()), &format!("DPM_SSH={ssh}"), "DPM_NO_BOOT=", dpm_bin()])
        .args(args)
        .output()
        .expect("run the fixture")
}

/// The processes left on `hosts` but the sshd listeners (the fixture's).
fn dpm_procs_on(hosts: &[&str]) -> Vec<String> {
    let out = common::run_fixture(&fixture_script(), &["pids"]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| hosts.iter().any(|h| l.starts_with(&format!("{h} "))) && !l.contains("[listener]"))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_cut_interior_host_of_a_boot_over_ssh_ends_its_runs_and_the_hosts_below_it_re_attach() {
    let _lock = common::lock_fixture("dpm-netns-hosts.lock", "netns hosts");
    let info = match common::fixture_up(&fixture_script()) {
        Ok(info) => info,
        Err(reason) => return common::fixture_unavailable("netns hosts fixture (boot_reform_ssh)", &reason),
    };
    let ssh = common::fixture_info(&info, "SSH_COMMAND");
    let dir = std::env::temp_dir().join(common::unique("dpm-netns-reform"));
    let boot = on_h0(&dir, &ssh, &["boot", "-launcher", "ssh", "-hosts", "h1,h2,h3,h4", "--tree-fanout", "2"]);
    let result = std::panic::catch_unwind(|| scenario(&dir, &ssh, &String::from_utf8_lossy(&boot.stdout), boot.status.success()));
    let _ = on_h0(&dir, &ssh, &["down"]);
    let _ = common::run_fixture(&fixture_script(), &["link", "h1", "up"]);
    // The hosts that stayed: the re-attached daemons went with `dpm down`.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut left = dpm_procs_on(&["h2", "h3", "h4"]);
    while !left.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        left = dpm_procs_on(&["h2", "h3", "h4"]);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let down = common::run_fixture(&fixture_script(), &["down"]);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    assert!(left.is_empty(), "dpm processes left after dpm down: {left:#?}");
    assert!(down.status.success(), "netns_hosts.sh down: {}", String::from_utf8_lossy(&down.stderr));
}

fn scenario(dir: &Path, ssh: &str, booted: &str, ok: bool) {
    assert!(ok && booted.contains("4 nodes up"), "dpm boot failed: {booted}");
    let wrapper = format!(
        "#!/bin/sh\nexec bash '{}' exec h0 env 'DPM_RUNTIME_DIR={}' DPM_NO_BOOT= '{}' run \"$@\"\n",
        fixture_script().display(),
        dir.display(),
        dpm_bin()
    );
    let run_on_h0 = TempFile::new("dpm-run-on-h0", wrapper.as_bytes(), 0o755);
    let files = TempDir::new("reform-ssh");
    let script = wait_then_fence().display().to_string();
    let go = format!("{}/go", files.path_str());
    // Each host's slots (`dpm status`: node, host, slots, load).
    let status = String::from_utf8_lossy(&on_h0(dir, ssh, &["status"]).stdout).into_owned();
    let slots: usize = status.lines().find(|l| l.starts_with("0 ")).and_then(|l| l.split_whitespace().nth(2)).and_then(|s| s.parse().ok()).unwrap_or(0);
    assert!(slots > 0, "no slots for node 0 in:\n{status}");
    let (n, n3) = (slots.to_string(), (3 * slots).to_string());
    // A fills h1 (node 0, interior), B h2, h3 and h4.
    let mut a = Dpm::mpiexec(&run_on_h0.path, ["--report-placement", "-n", &n, "sleep", "600"]).spawn();
    a.wait_for_procs(slots);
    let mut b = Dpm::mpiexec(&run_on_h0.path, ["--report-placement", "-n", &n3, &script, &go]).spawn();
    b.wait_for_lines("rank ", 3 * slots);
    let out = common::run_fixture(&fixture_script(), &["link", "h1", "down"]);
    assert!(out.status.success(), "netns_hosts.sh link h1 down: {}", String::from_utf8_lossy(&out.stderr));

    let out = a.wait_unchecked();
    assert_eq!(out.code(), 1, "{}", out.describe());
    out.assert_stderr_contains("node 0 (h1) was lost");

    // h3 and h4 re-attach (neither detached nor lost).
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        let status = String::from_utf8_lossy(&on_h0(dir, ssh, &["status"]).stdout).into_owned();
        let line = |n: usize| status.lines().find(|l| l.starts_with(&format!("{n} "))).unwrap_or_default().to_string();
        if (1..4).all(|n| !line(n).is_empty() && !line(n).contains("detached") && !line(n).contains("lost")) {
            break status;
        }
        assert!(Instant::now() < deadline, "h3 and h4 never re-attached:\n{status}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(status.lines().any(|l| l.starts_with("0 ") && l.contains("lost")), "{status}");

    std::fs::write(&go, b"").unwrap();
    let out = b.wait();
    assert_eq!(out.lines().iter().filter(|l| l.ends_with(" passed")).count(), 3 * slots, "{}", out.describe());
    let hosts: Vec<String> = common::placement(&out.stderr_str()).into_iter().map(|p| p.2).collect();
    assert_eq!(hosts, ["h2", "h3", "h4"], "{}", out.describe());

    let next = Dpm::mpiexec(&run_on_h0.path, ["--report-placement", "-n", &n3, &script, &go]).output();
    next.assert_success();
    assert_eq!(next.lines().iter().filter(|l| l.ends_with(" passed")).count(), 3 * slots, "{}", next.describe());
    let hosts: Vec<String> = common::placement(&next.stderr_str()).into_iter().map(|p| p.2).collect();
    assert_eq!(hosts, ["h2", "h3", "h4"], "{}", next.describe());
}
