//! The per-user private directory where dpm keeps what only its owner may
//! reach: a booted tree's control socket and rendezvous file, its log, the
//! manual bootstrap's secret file ([`PrivateFile`]).
//!
//! `$DPM_RUNTIME_DIR`, else `$XDG_RUNTIME_DIR/dpm`, else `/tmp/dpm-<uid>`.
//! Created mode 0700; an existing one must be a real directory (not a
//! symlink) owned by the user and closed to group and others — otherwise
//! another user could plant or read our sockets, and dpm refuses it.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::DirError;

pub fn runtime_dir() -> Result<PathBuf, DirError> {
    let uid = nix::unistd::getuid().as_raw();
    let dir = match (std::env::var_os("DPM_RUNTIME_DIR"), std::env::var_os("XDG_RUNTIME_DIR")) {
        (Some(d), _) if !d.is_empty() => PathBuf::from(d),
        (_, Some(x)) if !x.is_empty() => PathBuf::from(x).join("dpm"),
        _ => PathBuf::from(format!("/tmp/dpm-{uid}")),
    };
    match std::fs::symlink_metadata(&dir) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new().mode(0o700).create(&dir).map_err(|source| DirError::Create { dir: dir.clone(), source })?;
        }
        Err(source) => return Err(DirError::Stat { dir, source }),
    }
    let meta = std::fs::symlink_metadata(&dir).map_err(|source| DirError::Stat { dir: dir.clone(), source })?;
    if !meta.file_type().is_dir() {
        return Err(DirError::NotADirectory(dir));
    }
    if meta.uid() != uid {
        return Err(DirError::NotOwned { dir, owner: meta.uid(), me: uid });
    }
    if meta.mode() & 0o077 != 0 {
        return Err(DirError::Open { dir, mode: meta.mode() & 0o777 });
    }
    Ok(dir)
}

/// A file only its owner can read (mode 0600, created anew: never an
/// existing file or a link), removed when dropped.
#[derive(Debug)]
pub struct PrivateFile {
    path: PathBuf,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot write {path}: {source}")]
pub struct WriteError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

impl PrivateFile {
    /// Create `dir/name` holding `contents` (`dir`: [`runtime_dir`]).
    pub fn create(dir: &Path, name: &str, contents: &[u8]) -> Result<PrivateFile, WriteError> {
        let path = dir.join(name);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags((nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_CLOEXEC).bits())
            .open(&path)
            .map_err(|source| WriteError { path: path.clone(), source })?;
        // From here on the file is ours to remove, also if writing fails.
        let created = PrivateFile { path };
        file.write_all(contents).map_err(|source| WriteError { path: created.path.clone(), source })?;
        Ok(created)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PrivateFile {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_file(&self.path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!("cannot remove {}: {e}", self.path.display());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    // One test: it sets DPM_RUNTIME_DIR, which other tests must not see change.
    #[test]
    fn creates_private_and_refuses_open_directories() {
        let base = std::env::temp_dir().join(format!("dpm-private-dir-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir(&base).unwrap();
        let dir = base.join("rt");
        std::env::set_var("DPM_RUNTIME_DIR", &dir);
        let got = super::runtime_dir().unwrap();
        assert_eq!(got, dir);
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(super::runtime_dir().unwrap_err().to_string().contains("open to other users"));
        let link = base.join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        std::env::set_var("DPM_RUNTIME_DIR", &link);
        assert!(super::runtime_dir().unwrap_err().to_string().contains("not a directory"));
        std::env::remove_var("DPM_RUNTIME_DIR");
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn private_files_are_0600_new_and_removed_when_dropped() {
        let dir = std::env::temp_dir().join(format!("dpm-private-file-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let file = super::PrivateFile::create(&dir, "s", b"x\n").unwrap();
        assert_eq!(std::fs::metadata(file.path()).unwrap().permissions().mode() & 0o777, 0o600);
        assert!(super::PrivateFile::create(&dir, "s", b"y").is_err(), "never an existing file");
        std::os::unix::fs::symlink(dir.join("elsewhere"), dir.join("link")).unwrap();
        assert!(super::PrivateFile::create(&dir, "link", b"y").is_err(), "never through a link");
        assert!(!dir.join("elsewhere").exists());
        let path = file.path().to_path_buf();
        drop(file);
        assert!(!path.exists(), "removed when dropped");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
