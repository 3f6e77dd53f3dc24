//! A plain `dpm run`'s job table for tools: `run-<pid>.json` in the private
//! runtime directory ([`crate::private_dir`]: 0700, its owner's only; the
//! file 0600), a [`RunStatus`] as JSON — each job's ranks with host, pid and
//! state — rewritten whenever a job's ranks have all started (and so as
//! each spawned job starts), removed at the run's end. `dpm status --json`
//! lists these beside a boot's runs. (A run through a boot is in the
//! boot's own status.)

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use dpm_proto::control::RunStatus;

use crate::private_dir::runtime_dir;

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

/// The tables of the plain runs still running (a file whose process is
/// gone is skipped).
pub fn read_all() -> Vec<RunStatus> {
    let Ok(dir) = runtime_dir() else { return Vec::new() };
    let Ok(entries) = std::fs::read_dir(&dir) else { return Vec::new() };
    let mut runs: Vec<RunStatus> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid: u32 = name.strip_prefix("run-")?.strip_suffix(".json")?.parse().ok()?;
            std::path::Path::new(&format!("/proc/{pid}")).exists().then_some(())?;
            serde_json::from_str(&std::fs::read_to_string(e.path()).ok()?).ok()
        })
        .collect();
    runs.sort_by_key(|r| r.client_pid);
    runs
}
