//! A booted tree for one test (`dpm boot` in a private runtime directory,
//! `dpm down` on drop), for the tests of runs submitted to a boot.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use super::{dpm_bin, send_signal, unique, Dpm};

/// A booted tree for one test; `dpm down` (and a check that it worked) on drop.
pub struct Boot {
    pub dir: PathBuf,
    pub pid: u32,
    /// Cleared once the test itself ran `dpm down`.
    pub up: bool,
}

impl Boot {
    pub fn start(args: &[&str]) -> Boot {
        Boot::start_with_env(args, &[])
    }

    /// [`Boot::start`] with these variables in the boot server's environment.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Boot {
        let dir = std::env::temp_dir().join(unique("dpm-boot-test"));
        let mut cmd = Command::new(dpm_bin());
        cmd.arg("boot").args(args).env("DPM_RUNTIME_DIR", &dir).env_remove("DPM_BOOT");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("run dpm boot");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "dpm boot failed: {}\n{stdout}{}", out.status, String::from_utf8_lossy(&out.stderr));
        let pid = stdout.split("(pid ").nth(1).and_then(|s| s.split(')').next()).and_then(|p| p.parse().ok());
        let pid = pid.unwrap_or_else(|| panic!("dpm boot did not say its pid: {stdout}"));
        Boot { dir, pid, up: true }
    }

    pub fn down(&mut self) -> std::process::Output {
        self.up = false;
        self.command("down")
    }

    /// `dpm run ARGS` through this boot.
    pub fn run(&self, args: &[&str]) -> Dpm {
        Dpm::run(args).env("DPM_NO_BOOT", "").env("DPM_RUNTIME_DIR", &self.dir.to_string_lossy())
    }

    /// `dpm SUBCOMMAND` (status, down) against this boot.
    pub fn command(&self, sub: &str) -> std::process::Output {
        Command::new(dpm_bin()).arg(sub).env("DPM_RUNTIME_DIR", &self.dir).output().expect("run dpm")
    }

    /// `dpm boot ARGS` against this boot (`--add …`, `--drain …`).
    pub fn boot_command(&self, args: &[&str]) -> std::process::Output {
        Command::new(dpm_bin()).arg("boot").args(args).env("DPM_RUNTIME_DIR", &self.dir).env_remove("DPM_BOOT").output().expect("run dpm boot")
    }

    pub fn status(&self) -> String {
        let out = self.command("status");
        assert!(out.status.success(), "dpm status failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Poll `dpm status` until `done` holds (or panic after `limit`, showing it).
    pub fn status_until(&self, limit: Duration, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let status = self.status();
            if done(&status) {
                return status;
            }
            assert!(Instant::now() < deadline, "dpm status never got there:\n{status}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The status line of node `n` (empty when there is none).
    pub fn node_line(status: &str, n: usize) -> String {
        status.lines().find(|l| l.starts_with(&format!("{n} "))).unwrap_or_default().to_string()
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join("default.sock")
    }

    /// The boot's rendezvous file: each node listed as (host, slots, state).
    pub fn rendezvous_nodes(&self) -> Vec<(String, u64, String)> {
        let text = std::fs::read_to_string(self.dir.join("default.json")).expect("the boot's rendezvous file");
        let json: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        json["nodes"]
            .as_array()
            .unwrap_or_else(|| panic!("no nodes: {text}"))
            .iter()
            .map(|n| (n["host"].as_str().unwrap_or("").to_string(), n["slots"].as_u64().unwrap_or(0), n["state"].as_str().unwrap_or("").to_string()))
            .collect()
    }
}

/// Whether `pid` still runs (a zombie waiting for init to reap it does not)
/// after a generous grace to end in: every caller expects it to end, and
/// the wait returns as soon as it has.
pub fn running(pid: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit(')').next().and_then(|r| r.split_whitespace().next()).map(String::from));
        match state.as_deref() {
            None | Some("Z") | Some("X") => return false,
            _ if Instant::now() > deadline => return true,
            _ => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

impl Drop for Boot {
    fn drop(&mut self) {
        if !self.up {
            let _ = std::fs::remove_dir_all(&self.dir);
            return;
        }
        let out = self.command("down");
        let alive = running(self.pid);
        if alive {
            send_signal(self.pid, "KILL");
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        if !std::thread::panicking() {
            assert!(out.status.success(), "dpm down failed: {}", String::from_utf8_lossy(&out.stderr));
            assert!(!alive, "the boot server (pid {}) outlived dpm down", self.pid);
        }
    }
}
