//! The processes of a test's run, found by the marker in their environment
//! (`DPM_TEST_MARKER`): listing, waiting for, signalling and killing them,
//! and what is left of a run.

use std::fs;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::MARKER_VAR;

/// Processes (pid, command line) whose environment holds `DPM_TEST_MARKER=<marker>`.
pub fn marked_procs(marker: &str) -> Vec<(u32, String)> {
    let needle = format!("{MARKER_VAR}={marker}");
    let me = std::process::id();
    let mut found = Vec::new();
    let Ok(dir) = fs::read_dir("/proc") else { return found };
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        if pid == me {
            continue;
        }
        // Unreadable (not ours, or gone) or empty (a zombie): not a live process of ours.
        let Ok(environ) = fs::read(entry.path().join("environ")) else { continue };
        if environ.split(|&b| b == 0).any(|var| var == needle.as_bytes()) {
            let cmdline = fs::read(entry.path().join("cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ").trim().to_string();
            found.push((pid, cmdline));
        }
    }
    found
}

/// Poll for up to `grace` until no process carries the marker. Returns the
/// processes still alive at the end (and kills them, so a failing test does
/// not disturb the others).
pub fn leftovers_after(marker: &str, grace: Duration) -> Vec<(u32, String)> {
    let deadline = Instant::now() + grace;
    loop {
        let left = marked_procs(marker);
        if left.is_empty() {
            return left;
        }
        if Instant::now() >= deadline {
            kill_marked(marker);
            return left;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// The state letter of `pid` in `/proc/<pid>/stat` (`T`: stopped), if it lives.
/// The pids of the `n` processes of the run marked `marker` whose command
/// starts with `program`, once all are there (a hang guard of 60 s only:
/// nothing depends on how long the start takes).
pub fn wait_for_ranks(marker: &str, program: &str, n: usize) -> Vec<u32> {
    let guard = Duration::from_secs(60);
    let deadline = Instant::now() + guard;
    loop {
        let ranks: Vec<u32> = marked_procs(marker).into_iter().filter(|(_, cmd)| cmd.starts_with(program)).map(|(pid, _)| pid).collect();
        if ranks.len() == n {
            return ranks;
        }
        assert!(Instant::now() < deadline, "the {n} ranks did not start within {guard:?}: {ranks:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn proc_state(pid: u32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command's closing parenthesis: " <state> ...".
    stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next())
}

/// Whether `pid` is gone (or a zombie nobody reaped yet) within `limit`
/// (a hang guard: the wait ends as soon as it is).
pub fn ends_within(pid: u32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if matches!(proc_state(pid), None | Some('Z')) {
            return true;
        }
        thread::sleep(Duration::from_millis(20));
    }
    false
}

/// SIGKILL every process carrying the marker.
pub fn kill_marked(marker: &str) {
    for (pid, _) in marked_procs(marker) {
        send_signal(pid, "KILL");
    }
}

/// The daemon of virtual node `node`: a child of the dpm `dpm` running
/// `dpm daemon --node <node>`.
pub fn daemon_of(dpm: u32, node: usize) -> Option<u32> {
    let needle = format!("daemon --node {node} ");
    fs::read_dir("/proc").ok()?.flatten().filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok()).find(|pid| {
        let cmd = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid = stat.rsplit(')').next().and_then(|s| s.split_whitespace().nth(1)).and_then(|p| p.parse::<u32>().ok());
        ppid == Some(dpm) && String::from_utf8_lossy(&cmd).replace('\0', " ").contains(&needle)
    })
}

/// `kill -s SIG PID`, with the system's kill(1) (keeps the tests std-only).
pub fn send_signal(pid: u32, sig: &str) {
    let status = Command::new("kill")
        .args(["-s", sig, &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("cannot run kill(1): {e}"));
    // The process may already be gone; only a missing kill(1) is fatal.
    let _ = status;
}
