//! What MPICH leaves in `/dev/shm` when its ranks are killed.
//!
//! MPICH's ch4 shared-memory transport names a job's per-node segments
//! `mpich_shm_<id>_<node>` and `mpich_vci_<id>_<node>`, where `<id>` is the
//! 32-bit FNV-1a hash of the kvsname in hex. The last process to attach
//! unlinks them — which a killed job never does, so every abort, crash or
//! Ctrl-C would leave megabytes behind until the machine reboots. When a job
//! has ended on a node nothing can use its segments any more, and the daemon
//! removes them.

use std::path::Path;

/// MPICH's job id for shared-memory names: FNV-1a over the kvsname's bytes.
pub fn world_id(kvsname: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in kvsname.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// Remove the ended job's segments from `dir` (`/dev/shm`); returns how many.
/// Only files of this user: another user's are not ours to judge.
pub fn remove_segments(dir: &Path, kvsname: &str) -> usize {
    use std::os::unix::fs::MetadataExt;
    let id = world_id(kvsname);
    let prefixes = [format!("mpich_shm_{id:x}_"), format!("mpich_vci_{id:x}_")];
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    let uid = nix::unistd::getuid().as_raw();
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let ours = prefixes.iter().any(|p| name.strip_prefix(p.as_str()).is_some_and(|node| node.bytes().all(|b| b.is_ascii_digit())));
        if ours && entry.metadata().is_ok_and(|m| m.uid() == uid) && std::fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn world_id_is_fnv1a_32() {
        // FNV-1a test vectors.
        assert_eq!(world_id(""), 0x811c_9dc5);
        assert_eq!(world_id("a"), 0xe40c_292c);
        assert_eq!(world_id("foobar"), 0xbf9c_f968);
    }

    #[test]
    fn only_the_jobs_segments_go() {
        let dir = std::env::temp_dir().join(format!("dpm-shm-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let id = world_id("kvs_1_2_3");
        let mine = [format!("mpich_shm_{id:x}_0"), format!("mpich_shm_{id:x}_12"), format!("mpich_vci_{id:x}_0")];
        let others = [format!("mpich_shm_{:x}_0", id ^ 1), format!("mpich_shm_{id:x}_0x"), "ucx_shm_posix_1".to_string()];
        for f in mine.iter().chain(&others) {
            std::fs::write(dir.join(f), b"x").unwrap();
        }
        assert_eq!(remove_segments(&dir, "kvs_1_2_3"), 3);
        for f in &others {
            assert!(dir.join(f).exists(), "{f} was removed");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
