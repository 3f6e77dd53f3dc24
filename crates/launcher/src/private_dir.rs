//! dpm's private per-user runtime directory, and files in it that only the
//! user can read (the manual bootstrap's secret; later the persistent
//! daemons' control socket and state).
//!
//! The directory is `$DPM_RUNTIME_DIR`, else `$XDG_RUNTIME_DIR/dpm`, else
//! `/tmp/dpm-<uid>`. It is created with mode 0700 when missing, and refused
//! when it is a symbolic link, belongs to another user, or is open to group
//! or others — in a shared `/tmp`, someone else could have made it first.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Overrides where dpm keeps its runtime files.
pub const RUNTIME_DIR_ENV: &str = "DPM_RUNTIME_DIR";

#[derive(Debug, thiserror::Error)]
pub enum PrivateDirError {
    #[error("cannot create the runtime directory {path}: {source}")]
    Create { path: PathBuf, source: std::io::Error },
    #[error("the runtime directory {path} {why}: it must be a directory of yours that only you can use (fix it, or point {RUNTIME_DIR_ENV} elsewhere)")]
    Unsafe { path: PathBuf, why: String },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

/// The private runtime directory, created if missing and checked.
pub fn runtime_dir() -> Result<PathBuf, PrivateDirError> {
    let uid = nix::unistd::geteuid().as_raw();
    let nonempty = |name| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    let dir = if let Some(dir) = nonempty(RUNTIME_DIR_ENV) {
        dir
    } else if let Some(xdg) = nonempty("XDG_RUNTIME_DIR") {
        xdg.join("dpm")
    } else {
        std::env::temp_dir().join(format!("dpm-{uid}"))
    };
    ensure_private_dir(&dir, uid)?;
    Ok(dir)
}

/// Create `dir` (mode 0700) unless it exists, then check that it is a real
/// directory owned by `uid` with no access for group or others.
fn ensure_private_dir(dir: &Path, uid: u32) -> Result<(), PrivateDirError> {
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(source) => return Err(PrivateDirError::Create { path: dir.to_path_buf(), source }),
    }
    // lstat: a symbolic link is refused, not followed.
    let meta = fs::symlink_metadata(dir).map_err(|source| PrivateDirError::Create { path: dir.to_path_buf(), source })?;
    let unsafe_dir = |why: String| PrivateDirError::Unsafe { path: dir.to_path_buf(), why };
    if meta.file_type().is_symlink() {
        return Err(unsafe_dir("is a symbolic link".into()));
    }
    if !meta.is_dir() {
        return Err(unsafe_dir("is not a directory".into()));
    }
    if meta.uid() != uid {
        return Err(unsafe_dir(format!("belongs to uid {}, not to you (uid {uid})", meta.uid())));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(unsafe_dir(format!("has mode {mode:03o}")));
    }
    Ok(())
}

/// A file only its owner can read (mode 0600, created anew: never an
/// existing file or a link), removed when dropped.
#[derive(Debug)]
pub struct PrivateFile {
    path: PathBuf,
}

impl PrivateFile {
    /// Create `dir/name` holding `contents`.
    pub fn create(dir: &Path, name: &str, contents: &[u8]) -> Result<PrivateFile, PrivateDirError> {
        let path = dir.join(name);
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|source| PrivateDirError::Write { path: path.clone(), source })?;
        // From here on the file is ours to remove, also if writing fails.
        let created = PrivateFile { path };
        file.write_all(contents).map_err(|source| PrivateDirError::Write { path: created.path.clone(), source })?;
        Ok(created)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PrivateFile {
    fn drop(&mut self) {
        if let Err(e) = fs::remove_file(&self.path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!("cannot remove {}: {e}", self.path.display());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("dpm-private-dir-test-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir(&dir).unwrap();
        dir
    }

    #[test]
    fn a_missing_directory_is_created_private_and_files_in_it_are_0600() {
        let base = scratch("create");
        let dir = base.join("rt");
        let uid = nix::unistd::geteuid().as_raw();
        ensure_private_dir(&dir, uid).unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        ensure_private_dir(&dir, uid).unwrap(); // a second time: it exists, fine
        let file = PrivateFile::create(&dir, "s", b"x\n").unwrap();
        assert_eq!(fs::metadata(file.path()).unwrap().permissions().mode() & 0o777, 0o600);
        assert!(PrivateFile::create(&dir, "s", b"y").is_err(), "never an existing file");
        let path = file.path().to_path_buf();
        drop(file);
        assert!(!path.exists(), "removed when dropped");
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn unsafe_directories_are_refused() {
        let base = scratch("unsafe");
        let uid = nix::unistd::geteuid().as_raw();
        let open = base.join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o755)).unwrap();
        let e = ensure_private_dir(&open, uid).unwrap_err();
        assert!(e.to_string().contains("has mode 755"), "{e}");
        let link = base.join("link");
        let target = base.join("target");
        fs::create_dir(&target).unwrap();
        fs::set_permissions(&target, fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = ensure_private_dir(&link, uid).unwrap_err();
        assert!(e.to_string().contains("is a symbolic link"), "{e}");
        let e = ensure_private_dir(&target, uid + 1).unwrap_err();
        assert!(e.to_string().contains("not to you"), "{e}");
        fs::remove_dir_all(&base).unwrap();
    }
}
