//! What UCX leaves in `/dev/shm` when its processes are killed.
//!
//! UCX's posix transport (MPICH's default `ch4:ucx` netmod) creates each
//! segment as `/dev/shm/ucx_shm_posix_<random hex>` (`shm_open` with
//! `O_CREAT|O_EXCL`), fills it with zeros to prove the room is there, and
//! only then — by default (`UCX_POSIX_USE_PROC_LINK=y`) — unlinks it, its
//! peers attaching through `/proc/<pid>/fd/<fd>`; with `USE_PROC_LINK=n` the
//! name stays until the creator frees the segment. A process killed between
//! the create and the unlink (a Ctrl-C during `MPI_Init`, or during a spawn's
//! children's `MPI_Init`) leaves the file behind, megabytes each. Its name
//! derives from nothing dpm knows, and it is never mapped under its name
//! before the unlink, so it cannot be learnt in advance.
//!
//! What proves a file is garbage: its creator holds it open from the
//! `shm_open` that made it until the unlink (proc-link mode), or holds it
//! open and then mapped until it unlinks it itself (name mode: the fd is
//! closed only after the `mmap`). So a file that no process holds open or
//! mapped — fds are read before maps, so a creator between the two is seen
//! in one of them — can never be used again, by anyone: only such files go,
//! and only this user's, and only those written since the ended job arrived
//! (files of older runs are not this job's to judge). If the open files of
//! any process of this user cannot be read, nothing is removed; a process
//! whose open files can be read but not its mappings (the ptrace rules keep
//! a container's init's from root) is judged by its open files alone.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The prefix of UCX's posix segment names (`UCT_POSIX_FILE_FMT`).
const PREFIX: &str = "ucx_shm_posix_";

/// mtime is set from the kernel's coarse clock (a tick behind at most);
/// files written this much before the job arrived still count as its.
const CLOCK_SLACK: Duration = Duration::from_millis(100);

/// Whether `name` is a UCX posix segment's (`ucx_shm_posix_<hex>`).
pub fn is_segment_name(name: &str) -> bool {
    name.strip_prefix(PREFIX).is_some_and(|id| !id.is_empty() && id.len() <= 16 && id.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The paths named in a `/proc/<pid>/maps` text (mappings of deleted files
/// end in ` (deleted)` and never equal a linked file's path).
pub fn mapped_paths(maps: &str) -> impl Iterator<Item = &str> {
    // address perms offset dev inode path — the path may hold spaces.
    maps.lines().filter_map(|line| {
        let mut rest = line;
        for _ in 0..5 {
            rest = rest.trim_start().split_once(' ')?.1;
        }
        let path = rest.trim_start();
        path.starts_with('/').then_some(path)
    })
}

/// The candidates that no process holds: `used` is every path open or
/// mapped anywhere.
pub fn unreferenced(candidates: Vec<PathBuf>, used: &HashSet<PathBuf>) -> Vec<PathBuf> {
    candidates.into_iter().filter(|c| !used.contains(c)).collect()
}

/// This user's UCX segment files in `dir` modified since `since` (less
/// [`CLOCK_SLACK`]).
pub fn candidates(dir: &Path, since: SystemTime) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let since = since.checked_sub(CLOCK_SLACK).unwrap_or(since);
    let uid = nix::unistd::getuid().as_raw();
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries
        .flatten()
        .filter(|e| is_segment_name(&e.file_name().to_string_lossy()))
        .filter(|e| e.metadata().is_ok_and(|m| m.is_file() && m.uid() == uid && m.modified().is_ok_and(|t| t >= since)))
        .map(|e| e.path())
        .collect()
}

/// Which of `paths` some process holds open or mapped, from `/proc`; `None`
/// when a process of this user could not be inspected (nothing is proven).
/// Another user's processes cannot open this user's 0600 segments.
pub fn held(paths: &[PathBuf]) -> Option<HashSet<PathBuf>> {
    let wanted: HashSet<&Path> = paths.iter().map(PathBuf::as_path).collect();
    let mut used = HashSet::new();
    let uid = nix::unistd::getuid().as_raw();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let proc_dir = entry.path();
        // Open files first, then mappings: a creator that closes its fd does
        // so only after mapping the file.
        match std::fs::read_dir(proc_dir.join("fd")) {
            Ok(fds) => {
                for fd in fds.flatten() {
                    if let Ok(target) = std::fs::read_link(fd.path()) {
                        if wanted.contains(target.as_path()) {
                            used.insert(target);
                        }
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue, // gone
            Err(_) if !runs_as(&proc_dir, uid) => continue,
            Err(e) => {
                tracing::debug!(proc = %proc_dir.display(), "cannot inspect a process of this user: {e}");
                return None;
            }
        }
        match std::fs::read_to_string(proc_dir.join("maps")) {
            Ok(maps) => used.extend(mapped_paths(&maps).map(Path::new).filter(|p| wanted.contains(p)).map(Path::to_path_buf)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            // Exited between the two reads (ESRCH reads as an empty file or
            // an error); its fds were looked at.
            Err(_) if !runs_as(&proc_dir, uid) => {}
            Err(_) if !proc_dir.exists() => {}
            // Its fds were readable but its mappings are not (a container's
            // init, under the ptrace rules): judged by its open files alone,
            // which decides every file of UCX's default proc-link mode.
            Err(e) => tracing::debug!(proc = %proc_dir.display(), "cannot read a process's mappings: {e}"),
        }
    }
    Some(used)
}

/// Whether any of the process's user ids (real, effective, saved, fs) is `uid`.
fn runs_as(proc_dir: &Path, uid: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(proc_dir.join("status")) else { return false };
    status.lines().find_map(|l| l.strip_prefix("Uid:")).is_some_and(|ids| ids.split_whitespace().any(|id| id.parse() == Ok(uid)))
}

/// Remove this user's UCX segments in `dir` written since `since` that no
/// process holds; returns how many went.
pub fn remove_orphans(dir: &Path, since: SystemTime) -> usize {
    let found = candidates(dir, since);
    if found.is_empty() {
        return 0;
    }
    let Some(used) = held(&found) else { return 0 };
    unreferenced(found, &used).iter().filter(|p| std::fs::remove_file(p).is_ok()).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_are_the_prefix_and_hex() {
        assert!(is_segment_name("ucx_shm_posix_1247e210"));
        assert!(is_segment_name("ucx_shm_posix_9f6d3c0"));
        assert!(!is_segment_name("ucx_shm_posix_"));
        assert!(!is_segment_name("ucx_shm_posix_12x"));
        assert!(!is_segment_name("mpich_shm_1_0"));
        assert!(!is_segment_name("ucx_shm_posix_11111111111111111"));
    }

    #[test]
    fn maps_lines_give_their_paths() {
        let maps = "7f00-7f01 rw-s 00000000 00:1a 123  /dev/shm/ucx_shm_posix_ab\n\
                    7f01-7f02 rw-s 00000000 00:1a 124  /dev/shm/ucx_shm_posix_cd (deleted)\n\
                    7f02-7f03 rw-p 00000000 00:00 0 \n\
                    7f03-7f04 r--p 00000000 08:01 9  /usr/lib/a b.so\n\
                    7ffd-7ffe rw-p 00000000 00:00 0  [stack]\n";
        let paths: Vec<&str> = mapped_paths(maps).collect();
        assert_eq!(paths, ["/dev/shm/ucx_shm_posix_ab", "/dev/shm/ucx_shm_posix_cd (deleted)", "/usr/lib/a b.so"]);
    }

    #[test]
    fn only_files_nobody_holds_and_written_since_go() {
        let dir = std::env::temp_dir().join(format!("dpm-ucx-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let old = dir.join("ucx_shm_posix_1");
        std::fs::write(&old, b"x").unwrap();
        let old_time = SystemTime::now() - Duration::from_secs(3600);
        std::fs::File::options().write(true).open(&old).unwrap().set_modified(old_time).unwrap();
        let since = SystemTime::now();
        let held_open = dir.join("ucx_shm_posix_2");
        let orphan = dir.join("ucx_shm_posix_3");
        let other = dir.join("mpich_shm_3_0");
        std::fs::write(&orphan, b"x").unwrap();
        std::fs::write(&other, b"x").unwrap();
        let holder = std::fs::File::create(&held_open).unwrap();
        assert_eq!(remove_orphans(&dir, since), 1);
        assert!(!orphan.exists(), "the orphan stayed");
        assert!(held_open.exists(), "a file held open went");
        assert!(old.exists(), "a file from before the job went");
        assert!(other.exists(), "not a UCX segment, yet it went");
        drop(holder);
        assert_eq!(remove_orphans(&dir, since), 1);
        assert!(!held_open.exists(), "released, yet it stayed");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
