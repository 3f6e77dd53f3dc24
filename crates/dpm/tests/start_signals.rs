//! Signals while dpm starts its daemons: every ssh client it started ends
//! with it (they are in process groups of their own, out of reach of a
//! terminal's Ctrl-C); and the files of a boot server that was killed are
//! cleaned up by the next command, which says so.

mod common;

use std::fs;
use std::thread;
use std::time::{Duration, Instant};

use common::{ends_within, send_signal, unique, Dpm, TempFile};

/// An "ssh" that never connects: it notes its pid, then waits (a host whose
/// sshd is slow to answer).
const SLOW_SSH: &str = "#!/bin/sh\necho $$ >> \"$DPM_TEST_SSH_PIDS\"\nexec sleep 300\n";

/// The pids in `file` once it holds `n` of them (20 s at most).
fn wait_for_pids(file: &str, n: usize) -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let pids: Vec<u32> = fs::read_to_string(file).unwrap_or_default().lines().filter_map(|l| l.trim().parse().ok()).collect();
        if pids.len() >= n {
            return pids;
        }
        assert!(Instant::now() < deadline, "the fake ssh clients did not start: {pids:?}");
        thread::sleep(Duration::from_millis(20));
    }
}

fn signal_during_ssh_start(sig: &str, code: i32, said: &str) {
    let ssh = TempFile::new("dpm-slow-ssh", SLOW_SSH.as_bytes(), 0o755);
    let pids_file = std::env::temp_dir().join(unique("dpm-ssh-pids")).display().to_string();
    let running = Dpm::run(["-launcher", "ssh", "--ssh-command", &ssh.path_str(), "-hosts", "node-a:1,node-b:1", "-n", "2", "/bin/true"])
        .env("DPM_TEST_SSH_PIDS", &pids_file)
        .spawn();
    let pids = wait_for_pids(&pids_file, 2);
    running.signal(sig);
    let out = running.wait_unchecked();
    let _ = fs::remove_file(&pids_file);
    let left: Vec<u32> = pids.iter().copied().filter(|&p| !ends_within(p, Duration::from_secs(60))).collect();
    for &p in &left {
        send_signal(p, "KILL");
    }
    assert!(left.is_empty(), "ssh clients {left:?} outlived dpm\n{}", out.describe());
    out.assert_code(code);
    out.assert_stderr_contains(said);
}

#[test]
fn sigint_during_ssh_start_up_ends_every_ssh_client() {
    signal_during_ssh_start("INT", 130, "interrupted (SIGINT) while waiting for the daemons");
}

#[test]
fn sigterm_during_ssh_start_up_ends_every_ssh_client() {
    signal_during_ssh_start("TERM", 143, "terminated (SIGTERM) while waiting for the daemons");
}

#[test]
fn a_dead_boot_s_files_are_cleaned_up_with_one_line() {
    let dir = std::env::temp_dir().join(unique("dpm-deadboot"));
    fs::create_dir_all(&dir).unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
    let runtime = dir.display().to_string();
    let boot = Dpm::raw(["boot"]).env("DPM_RUNTIME_DIR", &runtime).output();
    boot.assert_success();
    let json: String = fs::read_to_string(dir.join("default.json")).expect("the boot's rendezvous");
    let pid: u32 = json.split("\"pid\":").nth(1).and_then(|s| s.split([',', '}']).next()).and_then(|p| p.trim().parse().ok()).expect("a pid in the rendezvous");
    send_signal(pid, "KILL");
    assert!(ends_within(pid, Duration::from_secs(60)), "the boot server {pid} survived SIGKILL");
    assert!(dir.join("default.sock").exists(), "a killed server leaves its socket");
    // The next command (here a run) cleans up, saying so once; later ones find nothing.
    let run = Dpm::run(["-n", "1", "/bin/true"]).env("DPM_RUNTIME_DIR", &runtime).env("DPM_NO_BOOT", "0").output();
    run.assert_success();
    let said: Vec<String> = run.err_lines().into_iter().filter(|l| l.contains("removed the files of a boot server that is gone")).collect();
    assert_eq!(said.len(), 1, "{}", run.describe());
    assert!(!dir.join("default.sock").exists() && !dir.join("default.json").exists());
    let down = Dpm::raw(["down"]).env("DPM_RUNTIME_DIR", &runtime).output();
    assert!(!down.stderr_str().contains("removed the files"), "{}", down.describe());
    let _ = fs::remove_dir_all(&dir);
}
