//! The per-user private directory where dpm keeps what only its owner may
//! reach: a booted tree's control socket and rendezvous file, its log.
//!
//! `$DPM_RUNTIME_DIR`, else `$XDG_RUNTIME_DIR/dpm`, else `/tmp/dpm-<uid>`.
//! Created mode 0700; an existing one must be a real directory (not a
//! symlink) owned by the user and closed to group and others — otherwise
//! another user could plant or read our sockets, and dpm refuses it.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::PathBuf;

pub fn runtime_dir() -> Result<PathBuf, String> {
    let uid = nix::unistd::getuid().as_raw();
    let dir = match (std::env::var_os("DPM_RUNTIME_DIR"), std::env::var_os("XDG_RUNTIME_DIR")) {
        (Some(d), _) if !d.is_empty() => PathBuf::from(d),
        (_, Some(x)) if !x.is_empty() => PathBuf::from(x).join("dpm"),
        _ => PathBuf::from(format!("/tmp/dpm-{uid}")),
    };
    match std::fs::symlink_metadata(&dir) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&dir)
                .map_err(|e| format!("cannot create the private directory {}: {e}", dir.display()))?;
        }
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    }
    let meta = std::fs::symlink_metadata(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !meta.file_type().is_dir() {
        return Err(format!("{} is not a directory (a symlink?); refusing to use it", dir.display()));
    }
    if meta.uid() != uid {
        return Err(format!("{} belongs to uid {}, not to you (uid {uid}); refusing to use it", dir.display(), meta.uid()));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!("{} is open to other users (mode {:o}); make it 0700", dir.display(), meta.mode() & 0o777));
    }
    Ok(dir)
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
        assert!(super::runtime_dir().unwrap_err().contains("open to other users"));
        let link = base.join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        std::env::set_var("DPM_RUNTIME_DIR", &link);
        assert!(super::runtime_dir().unwrap_err().contains("not a directory"));
        std::env::remove_var("DPM_RUNTIME_DIR");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
