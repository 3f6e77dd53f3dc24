//! Link liveness (hardening defect 5): a busy node is never declared dead; a
//! dead one is seen at once and a hung one within the configured
//! `DPM_HEARTBEAT_TIMEOUT`.
//!
//! Measured on the 2-core test machine before the fix, each of the busy
//! cases below failed 3 of 3 runs after ~1.55 s with "node 0 (…) was lost:
//! no word from its daemon for 1.5 s": the daemon's one thread waited for
//! thousands of clones (or for spawner threads starved by CPU-bound ranks)
//! and sent no heartbeat.

mod common;

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::{hostname, proc_state, Dpm, Running};

/// One test at a time: the busy ones load both cores on purpose, and the
/// timed ones measure detection, not a machine made busy by their neighbours.
fn alone() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The daemon of `node` (a child of the run's dpm).
fn daemon_of(run: &Running, node: usize) -> u32 {
    common::daemon_of(run.pid(), node).unwrap_or_else(|| panic!("node {node}'s daemon"))
}

/// The soft limit on open files this test (and the dpm it starts) runs with.
fn fd_limit() -> usize {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    limits.lines().find(|l| l.starts_with("Max open files")).and_then(|l| l.split_whitespace().nth(3)).and_then(|v| v.parse().ok()).unwrap_or(1024)
}

/// As many ranks as fit two daemons' fd tables (four fds per rank, some
/// spare), at most `want`.
fn ranks_that_fit(want: usize) -> usize {
    want.min((fd_limit().saturating_sub(200) / 4) * 2)
}

#[test]
fn thousands_of_ranks_on_one_daemon_do_not_make_it_look_lost() {
    let _alone = alone();
    // 6000 on 2 virtual nodes: 3000 clones per daemon, over 1.5 s of starts
    // on 2 cores.
    let n = ranks_that_fit(6000);
    assert!(n >= 4000, "the fd limit ({}) is too low for this test to mean anything", fd_limit());
    // A hang guard: at a load of 40 on 2 cores the 6000 starts alone took
    // over 120 s; the assertions below are what the test is about.
    let out = Dpm::run(["--virtual-nodes", "2", "-n", &n.to_string(), "/bin/true"]).watchdog(Duration::from_secs(600)).output();
    out.assert_success();
    assert!(!out.stderr_str().contains("was lost"), "{}", out.describe());
}

#[test]
fn cpu_bound_ranks_on_four_virtual_nodes_succeed_three_times_in_three() {
    let _alone = alone();
    // 64 busy ranks per daemon on 2 cores, each ~20 ms of CPU (~6 s a run):
    // the spawner threads and the links compete with them.
    let spin = "i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done";
    for attempt in 1..=3 {
        let out = Dpm::run(["--virtual-nodes", "4", "-n", "256", "sh", "-c", spin]).watchdog(Duration::from_secs(180)).output();
        assert_eq!(out.code(), 0, "attempt {attempt}: {}", out.describe());
        assert!(!out.stderr_str().contains("was lost"), "attempt {attempt}: {}", out.describe());
    }
}

#[test]
fn a_hung_daemon_is_lost_within_the_configured_timeout_and_named() {
    let _alone = alone();
    // The ranks would sleep past the watchdog: only the timeout can end the
    // run in time. Which rule ended it, and after how much silence, the
    // message says (the silence is measured by dpm from its last frame).
    let mut run = Dpm::run(["--virtual-nodes", "3", "-n", "6", "sleep", "600"]).env("DPM_HEARTBEAT_TIMEOUT", "1").spawn();
    run.wait_for_procs(6);
    let victim = daemon_of(&run, 1);
    common::send_signal(victim, "STOP");
    let out = run.wait();
    assert_eq!(out.code(), 1, "{}", out.describe());
    let host = hostname();
    // Its process is on this host: stopped, named as such, after dpm's own
    // measure of the silence (never less than the 1 s timeout).
    let err = out.stderr_str();
    let tag = format!("node 1 ({host}-v1) was lost: its daemon is stopped (SIGSTOP?) and sent no word for ");
    let silence: f64 =
        err.split_once(&tag).and_then(|(_, rest)| rest.split(' ').next()?.parse().ok()).unwrap_or_else(|| panic!("no {tag:?}\n{}", out.describe()));
    assert!(silence >= 1.0, "declared lost after {silence} s of silence, under the 1 s timeout\n{}", out.describe());
}

#[test]
fn every_daemon_gets_the_timeout_and_a_killed_one_is_seen_at_once_whatever_it_is() {
    let _alone = alone();
    // A long timeout changes nothing for a daemon that is gone: its link closes.
    let mut run = Dpm::run(["--virtual-nodes", "3", "-n", "6", "sleep", "600"]).env("DPM_HEARTBEAT_TIMEOUT", "30").spawn();
    run.wait_for_procs(6);
    // Both ends of every link agree on the timeout: each daemon is told.
    for node in 0..3 {
        let cmd = std::fs::read(format!("/proc/{}/cmdline", daemon_of(&run, node))).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        assert!(cmd.contains(" --heartbeat-timeout 30"), "node {node}'s daemon was not given the timeout: {cmd}");
    }
    let victim = daemon_of(&run, 1);
    common::send_signal(victim, "KILL");
    let out = run.wait();
    assert_eq!(out.code(), 1, "{}", out.describe());
    let host = hostname();
    out.assert_stderr_contains(&format!("node 1 ({host}-v1) was lost: its daemon exited"));
}

/// A bad value is a usage error: exit 2, as for every other variable
/// (issue 26: it exited 1), for a run on one node or several.
#[test]
fn an_invalid_heartbeat_timeout_is_refused_with_a_clear_error() {
    let _alone = alone();
    for (bad, nodes) in [("abc", "2"), ("0", "2"), ("-1", "1"), ("0.1", "2")] {
        let out = Dpm::run(["--virtual-nodes", nodes, "-n", "2", "/bin/true"]).env("DPM_HEARTBEAT_TIMEOUT", bad).output();
        assert_eq!(out.code(), 2, "DPM_HEARTBEAT_TIMEOUT={bad}: {}", out.describe());
        out.assert_stderr_contains(&format!("DPM_HEARTBEAT_TIMEOUT: invalid heartbeat timeout \"{bad}\": expected seconds from 0.5 to 86400"));
    }
}

/// Ctrl-Z (SIGTSTP) stops the launcher and every rank; after 3 s — twice
/// the heartbeat timeout — `fg` (SIGCONT) resumes them and the run ends
/// as if nothing happened: every rank's last line printed, no node lost.
/// The ranks are single processes (`lines`): a shell's child caught by the
/// stop between fork and exec would hold its parent in state D.
fn ctrl_z_for_3_s_then_fg(placement: &[&str]) {
    let _alone = alone();
    let lines = common::program("lines");
    let mut args: Vec<&str> = placement.to_vec();
    args.extend(["-n", "4", &lines, "40", "100000"]);
    let run = Dpm::run(args).watchdog(Duration::from_secs(120)).spawn();
    // Hang guards only: nothing below depends on how long a step takes.
    let guard = Duration::from_secs(60);
    let ranks = common::wait_for_ranks(run.marker(), &lines, 4);
    common::send_signal(run.pid(), "TSTP");
    let deadline = Instant::now() + guard;
    let all_stopped = || proc_state(run.pid()) == Some('T') && ranks.iter().all(|&p| proc_state(p) == Some('T'));
    while !all_stopped() {
        assert!(
            Instant::now() < deadline,
            "{guard:?} after SIGTSTP, dpm is {:?} and its ranks {:?}",
            proc_state(run.pid()),
            ranks.iter().map(|&p| proc_state(p)).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        all_stopped(),
        "something ran on while stopped: dpm {:?}, ranks {:?}",
        proc_state(run.pid()),
        ranks.iter().map(|&p| proc_state(p)).collect::<Vec<_>>()
    );
    common::send_signal(run.pid(), "CONT");
    let out = run.wait();
    out.assert_success();
    for r in 0..4 {
        out.assert_stdout_contains(&format!("rank {r} line 39 end\n"));
    }
    assert!(!out.stderr_str().contains("lost"), "{}", out.describe());
}

#[test]
fn ctrl_z_and_fg_suspend_and_resume_a_run_on_two_virtual_nodes() {
    ctrl_z_for_3_s_then_fg(&["--virtual-nodes", "2"]);
}

#[test]
fn ctrl_z_and_fg_suspend_and_resume_a_one_node_run() {
    ctrl_z_for_3_s_then_fg(&[]);
}

/// A cgroup (v1) freezer group of this test's own, holding one process
/// frozen; thawed and removed when dropped.
struct Frozen {
    group: std::path::PathBuf,
}

impl Frozen {
    const ROOT: &'static str = "/sys/fs/cgroup/freezer";

    /// Freeze `pid` in a new group; `None` (said by `cannot_run`) where the
    /// v1 freezer is not mounted or not writable here.
    fn freeze(pid: u32) -> Option<Frozen> {
        let group = std::path::Path::new(Self::ROOT).join(common::unique("dpm-liveness-test"));
        if let Err(e) = std::fs::create_dir(&group) {
            common::cannot_run("a frozen daemon", &format!("no cgroup v1 freezer to use at {}: {e}", Self::ROOT));
            return None;
        }
        let frozen = Frozen { group };
        std::fs::write(frozen.group.join("cgroup.procs"), pid.to_string()).expect("move the daemon into the freezer group");
        std::fs::write(frozen.group.join("freezer.state"), "FROZEN").expect("freeze the group");
        Some(frozen)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = std::fs::write(self.group.join("freezer.state"), "THAWED");
        // Its process moves back to the root group when it exits; the
        // group can go once it is empty.
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::fs::remove_dir(&self.group).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Whether SIGKILL is pending for `pid` (it cannot act on it while frozen).
fn kill_pending(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().filter(|l| l.starts_with("SigPnd:") || l.starts_with("ShdPnd:")).any(|l| {
        let mask = u64::from_str_radix(l.split_whitespace().nth(1).unwrap_or("0"), 16).unwrap_or(0);
        mask & (1 << (9 - 1)) != 0
    })
}

/// Hung is not starved: a daemon whose threads neither run nor wait for a
/// CPU (frozen by the cgroup freezer: state `D`, its scheduler account
/// still) is lost after 20 timeouts of that, and named as hung — where a
/// starved one (runnable, or its account moving) never is.
#[test]
fn a_daemon_that_neither_runs_nor_waits_for_a_cpu_is_lost_as_hung() {
    let _alone = alone();
    // Two ranks per node (each node has the machine's slots: at least two).
    let mut run = Dpm::run(["--virtual-nodes", "2", "-ppn", "2", "-n", "4", "sleep", "600"])
        .env("DPM_HEARTBEAT_TIMEOUT", "0.5")
        .watchdog(Duration::from_secs(120))
        .spawn();
    run.wait_for_procs(4);
    let victim = daemon_of(&run, 1);
    let Some(frozen) = Frozen::freeze(victim) else {
        run.signal("KILL");
        return;
    };
    // dpm takes it for lost and kills it (SIGKILL waits for the thaw):
    // then thaw it, so that the run can reap it and end.
    let deadline = Instant::now() + Duration::from_secs(90);
    while !kill_pending(victim) && proc_state(victim).is_some() {
        assert!(Instant::now() < deadline, "the frozen daemon was not taken for lost within 90 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(frozen);
    let out = run.wait();
    assert_eq!(out.code(), 1, "{}", out.describe());
    let tag = format!("node 1 ({}-v1) was lost: no word from its daemon for ", hostname());
    out.assert_stderr_contains(&tag);
    out.assert_stderr_contains("(hung)");
    let idle: f64 = out
        .stderr_str()
        .split_once("neither ran nor waited for a CPU for ")
        .and_then(|(_, rest)| rest.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no idle time named\n{}", out.describe()));
    assert!(idle >= 10.0, "taken for hung after {idle} s without scheduler activity, under 20 timeouts of 0.5 s\n{}", out.describe());
}
