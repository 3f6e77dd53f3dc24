//! `-outfile-pattern` / `-errfile-pattern`: each rank's stdout or stderr to
//! the file its pattern names, with Hydra's specifiers: `%r` the rank, `%g`
//! the job (Hydra's process group: 0 for the first job, then one per
//! spawned job), `%p` the node's index within the job (Hydra's proxy id:
//! the job's nodes numbered from 0 in rank order, as in its
//! `PMI_process_mapping`), `%h` the node's host, `%t` whole seconds since
//! dpm started, `%%` a `%`.
//!
//! A file is opened once per run (ranks whose names resolve alike share it),
//! created with mode 0666 less the umask, and appended to — never truncated:
//! a pattern without `%r` or two runs naming the same file cannot wipe
//! each other's output (Hydra opens without `O_TRUNC` either, but writes
//! from the start, over what was there). Writing happens on the output
//! thread, never on the run's event loop.
//!
//! Nothing is lost with success: a pattern whose first file's directory is
//! missing or not writable is refused before anything starts ([`preflight`],
//! a usage error, exit 2); a file that cannot be written later (its
//! directory vanished, the disk is full) gets its bytes on dpm's stderr
//! instead, and a run that would have exited 0 exits 1 ([`lost`]).

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// At most this many files open at once; a run naming more closes the
/// least recently opened (and reopens it, appending, when it is written again).
pub const MAX_OPEN_FILES: usize = 256;

/// A pattern that is not Hydra's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error("unknown specifier '%{0}' (use %r, %g, %p, %h, %t or %%)")]
    Unknown(char),
    #[error("a '%' at the end")]
    Dangling,
    #[error("empty")]
    Empty,
}

/// What a pattern's specifiers stand for, for one rank.
#[derive(Clone, Copy, Debug)]
pub struct Fields<'a> {
    pub rank: u32,
    pub job: u32,
    pub node_index: usize,
    pub host: &'a str,
    pub secs: u64,
}

/// Check `pattern` (at parse time, so that a run never fails on it later).
pub fn check(pattern: &str) -> Result<(), PatternError> {
    if pattern.is_empty() {
        return Err(PatternError::Empty);
    }
    let dummy = Fields { rank: 0, job: 0, node_index: 0, host: "h", secs: 0 };
    resolve(pattern, &dummy).map(drop)
}

/// The file name `pattern` gives for `f`.
pub fn resolve(pattern: &str, f: &Fields) -> Result<String, PatternError> {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('%') => out.push('%'),
            Some('r') => out.push_str(&f.rank.to_string()),
            Some('g') => out.push_str(&f.job.to_string()),
            Some('p') => out.push_str(&f.node_index.to_string()),
            Some('h') => out.push_str(f.host),
            Some('t') => out.push_str(&f.secs.to_string()),
            Some(other) => return Err(PatternError::Unknown(other)),
            None => return Err(PatternError::Dangling),
        }
    }
    Ok(out)
}

/// The run's open output files (owned by the output thread).
pub struct Files {
    open: HashMap<String, File>,
    /// Open order, for closing the oldest at [`MAX_OPEN_FILES`].
    order: std::collections::VecDeque<String>,
    /// Names already said to be unwritable (said once each).
    failed: std::collections::HashSet<String>,
}

impl Default for Files {
    fn default() -> Self {
        Self::new()
    }
}

impl Files {
    pub fn new() -> Self {
        Files { open: HashMap::new(), order: Default::default(), failed: Default::default() }
    }

    /// Append `data` to `name` (relative names: dpm's directory). An error
    /// is said once per file on stderr, and the bytes go to dpm's stderr
    /// instead (the run will not exit 0: [`lost`]).
    pub fn write(&mut self, name: &str, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        if !self.open.contains_key(name) {
            match std::fs::OpenOptions::new().append(true).create(true).open(name) {
                Ok(file) => {
                    if self.open.len() >= MAX_OPEN_FILES {
                        if let Some(old) = self.order.pop_front() {
                            self.open.remove(&old);
                        }
                    }
                    self.open.insert(name.to_string(), file);
                    self.order.push_back(name.to_string());
                }
                Err(e) => return self.failed(name, &e, data),
            }
        }
        if let Some(file) = self.open.get_mut(name) {
            if let Err(e) = file.write_all(data) {
                self.open.remove(name);
                self.failed(name, &e, data);
            }
        }
    }

    /// One line on dpm's stderr per file that cannot be written; its bytes
    /// follow there.
    fn failed(&mut self, name: &str, e: &std::io::Error, data: &[u8]) {
        LOST.store(true, Ordering::Relaxed);
        let mut err = std::io::stderr().lock();
        if self.failed.insert(name.to_string()) {
            let _ = writeln!(err, "dpm: error: cannot write output file {name}: {e}; its output follows on stderr");
        }
        let _ = err.write_all(data);
    }
}

/// Some output could not be written to its file (it went to stderr).
static LOST: AtomicBool = AtomicBool::new(false);

/// Whether some output of this process's runs missed its file: a run that
/// would exit 0 exits 1.
pub fn lost() -> bool {
    LOST.load(Ordering::Relaxed)
}

/// A file of `pattern` (named `option` for the message), resolved for rank
/// 0 of the first job on node 0 of `host`, must be creatable: its
/// directory (relative: `cwd`) exists and this user may write there.
pub fn preflight(option: &str, pattern: &str, host: &str, cwd: &Path) -> Result<(), String> {
    let fields = Fields { rank: 0, job: 0, node_index: 0, host, secs: 0 };
    let name = resolve(pattern, &fields).map_err(|e| format!("'{option} {pattern}': {e}"))?;
    let path = cwd.join(&name);
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(cwd);
    let why = match std::fs::metadata(dir) {
        Err(e) => Some(e.to_string()),
        Ok(m) if !m.is_dir() => Some("not a directory".to_string()),
        Ok(_) => nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK).err().map(|e| e.desc().to_string()),
    };
    match why {
        Some(why) => Err(format!("'{option} {pattern}': cannot create {name} in {}: {why}", dir.display())),
        None => Ok(()),
    }
}

/// When the run started, for `%t`.
pub fn started() -> Instant {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *START.get_or_init(Instant::now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hydra_specifiers_resolve() {
        let f = Fields { rank: 3, job: 1, node_index: 2, host: "n7", secs: 9 };
        assert_eq!(resolve("out.%g.%r.%p.%h.%t.%%", &f).unwrap(), "out.1.3.2.n7.9.%");
        assert_eq!(resolve("plain", &f).unwrap(), "plain");
        assert_eq!(check("x%q"), Err(PatternError::Unknown('q')));
        assert_eq!(check("x%"), Err(PatternError::Dangling));
        assert_eq!(check(""), Err(PatternError::Empty));
    }

    #[test]
    fn files_are_appended_to_and_shared() {
        let dir = std::env::temp_dir().join(format!("dpm-outfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let name = dir.join("o").display().to_string();
        std::fs::write(&name, "before\n").unwrap();
        let mut files = Files::new();
        files.write(&name, b"a\n");
        files.write(&name, b"b\n");
        drop(files);
        assert_eq!(std::fs::read_to_string(&name).unwrap(), "before\na\nb\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
