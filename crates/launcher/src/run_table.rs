//! A plain `dpm run`'s job table for tools: `run-<pid>.json` in the private
//! runtime directory ([`crate::private_dir`]: 0700, its owner's only; the
//! file 0600), a [`RunStatus`] as JSON — each job's ranks with host, pid and
//! state — rewritten whenever a job's ranks have all started (and so as
//! each spawned job starts) and as ranks end (at most every
//! [`REWRITE_EVERY`]), removed at the run's end. `dpm status --json`
//! lists these beside a boot's runs. (A run through a boot is in the
//! boot's own status.) A file whose run is gone (a `dpm run` killed by
//! SIGKILL has no end to remove it at) is removed by the next `dpm run` or
//! `dpm status` that looks ([`sweep`]): its pid is not alive, not the
//! owner's, or a process that started after the file was last written (the
//! pid was reused).
//!
//! The ranks' PMI states (the call each waits in, since when) live on their
//! nodes; `dpm status --json` asks each run for them with the signal its
//! table names ([`states_signal`]), waits at most [`STATES_WAIT`] for the
//! run to list them in its table, and reads that ([`read_all_with_states`]).
//! The kernel lets only the run's owner (or root) send it.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use dpm_proto::control::RunStatus;

use crate::private_dir::runtime_dir;

/// How often a run's table is rewritten at most as its ranks end (a job of
/// thousands of ranks ends in a burst).
pub const REWRITE_EVERY: Duration = Duration::from_millis(200);

/// This process's table file.
fn path() -> Option<PathBuf> {
    runtime_dir().ok().map(|d| d.join(format!("run-{}.json", std::process::id())))
}

/// Write the table anew (a temporary file renamed over it: a reader sees
/// a whole table or the one before).
pub fn write(status: &RunStatus) {
    let Some(path) = path() else { return };
    let tmp = path.with_extension("json.tmp");
    let _ = std::fs::remove_file(&tmp);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(&tmp)
        .and_then(|mut f| f.write_all(serde_json::to_string(status).unwrap_or_default().as_bytes()))
        .and_then(|()| std::fs::rename(&tmp, &path));
    if let Err(e) = written {
        tracing::debug!("cannot write {}: {e}", path.display());
        let _ = std::fs::remove_file(&tmp);
    }
}

/// The run is over: its table goes.
pub fn remove() {
    if let Some(path) = path() {
        let _ = std::fs::remove_file(path);
    }
}

/// How long `dpm status --json` waits for the runs to list their ranks'
/// states: the run's bound for its nodes (`run::report::LIST_WAIT`), and
/// the rewrite of its table.
pub const STATES_WAIT: Duration = Duration::from_secs(3);

/// The signal that asks a plain `dpm run` to list its ranks' PMI states in
/// its table (a real-time signal: no tool or terminal sends it by chance;
/// a run's table names it, so that only a run that answers it gets it).
pub fn states_signal() -> i32 {
    libc::SIGRTMIN() + 2
}

/// Send `run` (its `dpm run`, or a booted run's client, which forwards it)
/// the signal that asks for its ranks' states, if its table names one;
/// whether it was sent.
pub fn ask_states(run: &RunStatus) -> bool {
    let Some(sig) = run.states_signal else { return false };
    // SAFETY: kill(2) with a pid and a signal number; no memory is involved.
    unsafe { libc::kill(run.client_pid as libc::pid_t, sig) == 0 }
}

/// [`read_all`], each run asked first for its live ranks' PMI states: the
/// tables as rewritten with them, or, for a run that did not answer
/// within [`STATES_WAIT`], as they were.
pub fn read_all_with_states() -> Vec<RunStatus> {
    let mut runs = read_all();
    let mut asked = Vec::new();
    for (i, run) in runs.iter().enumerate() {
        if ask_states(run) {
            asked.push(i);
        }
    }
    let deadline = std::time::Instant::now() + STATES_WAIT;
    while !asked.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        asked.retain(|&i| {
            let pid = runs[i].client_pid;
            let file = runtime_dir().map(|d| d.join(format!("run-{pid}.json")));
            let read = file.ok().and_then(|f| std::fs::read_to_string(f).ok()).and_then(|t| serde_json::from_str::<RunStatus>(&t).ok());
            match read {
                Some(now) if now.states_listed > runs[i].states_listed => {
                    runs[i] = now;
                    false
                }
                Some(_) => true,
                // The run ended meanwhile: its last table stands.
                None => false,
            }
        });
    }
    runs
}

/// The tables of the plain runs still running (after a [`sweep`]).
pub fn read_all() -> Vec<RunStatus> {
    let mut runs: Vec<RunStatus> = sweep().iter().filter_map(|path| serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()).collect();
    runs.sort_by_key(|r| r.client_pid);
    runs
}

/// Remove the tables whose run is gone; the paths of the others.
pub fn sweep() -> Vec<PathBuf> {
    let Ok(dir) = runtime_dir() else { return Vec::new() };
    let Ok(entries) = std::fs::read_dir(&dir) else { return Vec::new() };
    let me = nix::unistd::getuid().as_raw();
    let mut live = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix("run-").and_then(|n| n.strip_suffix(".json")).and_then(|p| p.parse::<u32>().ok()) else { continue };
        let written = e.metadata().and_then(|m| m.modified()).ok();
        if written.is_some_and(|w| run_alive(pid, me, w)) {
            live.push(e.path());
        } else {
            tracing::debug!("removing the table of a run that is gone: {}", e.path().display());
            let _ = std::fs::remove_file(e.path());
        }
    }
    live
}

/// Whether `pid` is still the run that last wrote its table at `written`:
/// alive, `uid`'s, and started before then.
fn run_alive(pid: u32, uid: u32, written: SystemTime) -> bool {
    use std::os::unix::fs::MetadataExt;
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let Ok(meta) = std::fs::metadata(&proc_dir) else { return false };
    if meta.uid() != uid {
        return false;
    }
    // A clock tick of slack: the start time is counted in ticks.
    started_at(&proc_dir).is_none_or(|s| s <= written + Duration::from_millis(20))
}

/// When the process of `/proc/<pid>` started (its `stat`'s start time in
/// clock ticks after boot, and the boot time of `/proc/stat`).
fn started_at(proc_dir: &Path) -> Option<SystemTime> {
    let stat = std::fs::read_to_string(proc_dir.join("stat")).ok()?;
    // The fields after the command (which may hold spaces and parentheses).
    let after = stat.rsplit_once(')')?.1;
    let ticks: u64 = after.split_whitespace().nth(19)?.parse().ok()?;
    let btime: u64 = std::fs::read_to_string("/proc/stat").ok()?.lines().find_map(|l| l.strip_prefix("btime ")?.trim().parse().ok())?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok().flatten().filter(|&h| h > 0)? as u64;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(btime) + Duration::from_micros(ticks * 1_000_000 / hz))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_run_is_this_users_process_started_before_its_table() {
        let me = std::process::id();
        let uid = nix::unistd::getuid().as_raw();
        let now = SystemTime::now();
        assert!(run_alive(me, uid, now), "this process, its table written now");
        assert!(!run_alive(me, uid, now - Duration::from_secs(3600 * 24 * 365 * 30)), "a table older than the process: the pid was reused");
        assert!(!run_alive(me, uid.wrapping_add(1), now), "another user's process");
        assert!(!run_alive(u32::MAX - 1, uid, now), "no such process");
        let started = started_at(Path::new("/proc/self")).expect("a start time");
        assert!(started <= now && now.duration_since(started).unwrap() < Duration::from_secs(3600 * 24), "{started:?}");
    }
}
