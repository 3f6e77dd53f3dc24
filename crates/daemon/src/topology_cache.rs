//! The node's exported topology kept across dpm processes on one machine
//! boot, so that a rank's `PMI_hwloc_xmlfile` ask never waits for hwloc.
//!
//! hwloc's discovery of the machine (reading /proc and /sys, the I/O
//! devices included) takes 20–45 ms of CPU per export; done when a job's
//! first rank asked for the key, that rank waited for it in `MPI_Init`
//! (docs/benchmarks.md, "Where a cold start's time goes"). What hwloc
//! discovers only changes when the machine does, so the XML is kept in a
//! file that names what it depends on:
//! - the machine's boot (`/proc/sys/kernel/random/boot_id`) and host name —
//!   a reboot, or a home directory shared by hosts, never reuses a file;
//! - the CPUs online (`/sys/devices/system/cpu/online`) and this process's
//!   allowed CPUs and memory nodes (`Cpus_allowed_list`, `Mems_allowed_list`:
//!   hwloc leaves out what the process may not use, and a Slurm step or a
//!   cgroup gives each daemon its own set);
//! - dpm's version (the filter it exports with).
//!
//! Nothing is kept or read when any `HWLOC_*` variable is set (a
//! synthetic or XML topology, a component choice: the result is not the
//! machine's), nor where the directory is not this user's own.
//!
//! The files live in `$TMPDIR/dpm-<uid>/` (`/tmp` by default), which must be
//! a directory owned by this user with no access for others (created 0700
//! if missing; anything else, e.g. one another user made first, is not
//! used). A file is written whole under a private name, then renamed: a
//! reader sees a complete file or none. At most [`KEPT_FILES`] are kept; the
//! oldest go first.

use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// How many topology files a user's directory keeps (one per machine boot
/// and CPU set seen; older ones are removed when a new one is written).
pub const KEPT_FILES: usize = 8;
/// The longest file read back (a 1,000-core machine's XML is a few MB).
const MAX_BYTES: u64 = 64 << 20;
const PREFIX: &str = "topology-";
const SUFFIX: &str = ".xml";

/// Where this machine's topology is kept for this process, if it may be.
pub fn file() -> Option<PathBuf> {
    if std::env::vars_os().any(|(k, _)| k.to_string_lossy().starts_with("HWLOC_")) {
        return None;
    }
    let key = key()?;
    let dir = private_dir()?;
    Some(dir.join(format!("{PREFIX}{key:016x}{SUFFIX}")))
}

/// The kept XML at `path`, if it is there and whole.
pub fn load(path: &Path) -> Option<Vec<u8>> {
    let meta = fs::symlink_metadata(path).ok()?;
    if !meta.is_file() || meta.uid() != nix::unistd::geteuid().as_raw() || meta.len() > MAX_BYTES {
        return None;
    }
    let xml = fs::read(path).ok()?;
    whole(&xml).then_some(xml)
}

/// Keep `xml` at `path` (best effort: a failure only costs the next
/// process an export), and remove the oldest files beyond [`KEPT_FILES`].
pub fn store(path: &Path, xml: &[u8]) {
    let Some(dir) = path.parent() else { return };
    let temp = dir.join(format!(".{PREFIX}{}.tmp", std::process::id()));
    let written =
        fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&temp).and_then(|mut f| f.write_all(xml)).and_then(|()| fs::rename(&temp, path));
    if let Err(e) = written {
        tracing::debug!("cannot keep the topology in {}: {e}", path.display());
        let _ = fs::remove_file(&temp);
        return;
    }
    prune(dir);
}

/// Whether `xml` is a complete hwloc XML document.
fn whole(xml: &[u8]) -> bool {
    let end = xml.trim_ascii_end();
    xml.starts_with(b"<?xml") && end.ends_with(b"</topology>")
}

/// What the topology depends on, hashed (see the module documentation).
fn key() -> Option<u64> {
    let boot = fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let online = fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let allowed: Vec<&str> = status.lines().filter(|l| l.starts_with("Cpus_allowed_list:") || l.starts_with("Mems_allowed_list:")).collect();
    let host = nix::unistd::gethostname().ok()?.to_string_lossy().into_owned();
    // SipHash with fixed keys: the same inputs give the same name in every
    // process of this build (the version is part of the key).
    let mut h = std::hash::DefaultHasher::new();
    (env!("CARGO_PKG_VERSION"), boot.trim(), host, online.trim(), allowed).hash(&mut h);
    Some(h.finish())
}

/// `$TMPDIR/dpm-<uid>`, created 0700 if missing; `None` unless it is a
/// directory of this user's that nobody else can enter or write.
fn private_dir() -> Option<PathBuf> {
    let uid = nix::unistd::geteuid().as_raw();
    let dir = std::env::temp_dir().join(format!("dpm-{uid}"));
    let _ = fs::DirBuilder::new().mode(0o700).create(&dir);
    let meta = fs::symlink_metadata(&dir).ok()?;
    (meta.is_dir() && meta.uid() == uid && meta.mode() & 0o077 == 0).then_some(dir)
}

/// Remove the oldest topology files beyond [`KEPT_FILES`].
fn prune(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    let mut kept: Vec<(std::time::SystemTime, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with(PREFIX) && n.ends_with(SUFFIX)))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    if kept.len() <= KEPT_FILES {
        return;
    }
    kept.sort();
    for (_, old) in &kept[..kept.len() - KEPT_FILES] {
        let _ = fs::remove_file(old);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("dpm-topology-cache-test-{}-{:?}", std::process::id(), std::thread::current().id()));
        let _ = fs::remove_dir_all(&dir);
        fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
        dir
    }

    const XML: &[u8] = b"<?xml version=\"1.0\"?>\n<topology version=\"2.0\">\n</topology>\n";

    #[test]
    fn a_kept_topology_reads_back_whole_and_a_torn_one_does_not() {
        let dir = scratch();
        let path = dir.join("topology-1.xml");
        store(&path, XML);
        assert_eq!(load(&path).as_deref(), Some(XML));
        fs::write(&path, &XML[..XML.len() - 12]).unwrap();
        assert_eq!(load(&path), None, "a file cut short is no topology");
        assert_eq!(load(&dir.join("absent.xml")), None);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn only_the_newest_files_are_kept() {
        let dir = scratch();
        for i in 0..KEPT_FILES + 3 {
            let path = dir.join(format!("{PREFIX}{i}{SUFFIX}"));
            store(&path, XML);
            let t = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000 + i as u64);
            fs::File::options().write(true).open(&path).unwrap().set_modified(t).unwrap();
        }
        store(&dir.join(format!("{PREFIX}last{SUFFIX}")), XML);
        let mut names: Vec<String> = fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        assert_eq!(names.len(), KEPT_FILES);
        assert!(!names.contains(&format!("{PREFIX}0{SUFFIX}")) && names.contains(&format!("{PREFIX}last{SUFFIX}")), "{names:?}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_key_is_the_same_within_a_process() {
        assert_eq!(key(), key());
        assert!(key().is_some(), "boot_id and /proc/self/status are readable on Linux");
    }
}
