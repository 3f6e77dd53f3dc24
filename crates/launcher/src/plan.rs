//! Processes from plain input: executable and working-directory resolution
//! over [`Files`], a job's apps, ranks and appnums ([`PlannedJob`]) and the
//! `PMI_process_mapping` string. The command line's part (segments and
//! their environments) is planned in [`crate::local`].
//!
//! Everything that can be checked before a process starts is checked here, so
//! that a typo in a program name is an error with nothing left running.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use dpm_kvs::{JobId, KvsDesign, NodeId, Rank};
use dpm_proto::{AppSpec, LaunchJob, PmiMode, ProcSpec};

/// Why a program cannot be started; maps to the shell's exit codes.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("{0}: command not found")]
    NotFound(String),
    #[error("{0}: permission denied (not an executable file)")]
    NotExecutable(String),
    #[error("working directory {0}: {1}")]
    BadWdir(String, std::io::Error),
    #[error("{0}")]
    Invalid(String),
}

impl PlanError {
    /// 127 for "not found", 126 for "found but cannot run", like a shell.
    pub fn exit_code(&self) -> i32 {
        match self {
            PlanError::NotFound(_) => 127,
            PlanError::NotExecutable(_) => 126,
            PlanError::BadWdir(..) | PlanError::Invalid(_) => 1,
        }
    }
}

/// What resolving a program, a directory or a spawn's host file needs to
/// know of the file system. The drivers answer from this machine
/// ([`HostFiles`]); the run reactor asks through its effects
/// (`RunEffects::files`), so its tests answer from a table ([`FileTable`]).
pub trait Files {
    /// Ok if `path` is a directory; else why not (`ENOTDIR` for another file).
    fn dir(&self, path: &Path) -> std::io::Result<()>;
    /// Whether `path` is a file this user may execute.
    fn access(&self, path: &Path) -> Access;
    /// A text file's contents.
    fn read_to_string(&self, path: &Path) -> std::io::Result<String>;
    /// Which file `path` is now (`None` if there is none).
    fn identity(&self, path: &Path) -> Option<ProgramId>;
}

/// What a file is, as far as starting it goes: a program rebuilt or
/// replaced under the same path is another one. Device and inode name the
/// file; size and modification time change when it is rewritten in place.
/// Part of a warm spawn's shape (`run::warm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProgramId {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i128,
}

/// What [`Files::access`] finds at a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Executable,
    /// There, but not an executable file for this user.
    Denied,
    Missing,
}

/// This machine's file system.
pub struct HostFiles;

impl Files for HostFiles {
    fn dir(&self, path: &Path) -> std::io::Result<()> {
        match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => Err(std::io::Error::from_raw_os_error(libc::ENOTDIR)),
            Err(e) => Err(e),
        }
    }

    fn access(&self, path: &Path) -> Access {
        match std::fs::metadata(path) {
            // The mode bits say yes; access(2) asks the kernel for this user.
            Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => match nix::unistd::access(path, nix::unistd::AccessFlags::X_OK) {
                Ok(()) => Access::Executable,
                Err(_) => Access::Denied,
            },
            Ok(_) => Access::Denied,
            Err(_) => Access::Missing,
        }
    }

    fn read_to_string(&self, path: &Path) -> std::io::Result<String> {
        std::fs::read_to_string(path)
    }

    fn identity(&self, path: &Path) -> Option<ProgramId> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(ProgramId { dev: m.dev(), ino: m.ino(), size: m.size(), mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()) })
    }
}

/// A file system of a few named directories, executables and text files,
/// for tests: nothing else exists.
#[derive(Clone, Debug, Default)]
pub struct FileTable {
    pub dirs: BTreeSet<PathBuf>,
    pub executables: BTreeSet<PathBuf>,
    pub texts: BTreeMap<PathBuf, String>,
    /// Each file's identity where a test sets one (else all alike).
    pub identities: BTreeMap<PathBuf, ProgramId>,
}

impl FileTable {
    /// `/` and `/tmp`, with `/bin/true` and `/bin/sh` in `/bin`.
    pub fn small() -> Self {
        let mut t = FileTable::default();
        for d in ["/", "/tmp", "/bin"] {
            t.dirs.insert(d.into());
        }
        for e in ["/bin/true", "/bin/sh"] {
            t.executables.insert(e.into());
        }
        t
    }
}

impl Files for FileTable {
    fn dir(&self, path: &Path) -> std::io::Result<()> {
        let path = normal(path);
        if self.dirs.contains(&path) {
            Ok(())
        } else if self.executables.contains(&path) || self.texts.contains_key(&path) {
            Err(std::io::Error::from_raw_os_error(libc::ENOTDIR))
        } else {
            Err(std::io::Error::from_raw_os_error(libc::ENOENT))
        }
    }

    fn access(&self, path: &Path) -> Access {
        let path = normal(path);
        if self.executables.contains(&path) {
            Access::Executable
        } else if self.dirs.contains(&path) || self.texts.contains_key(&path) {
            Access::Denied
        } else {
            Access::Missing
        }
    }

    fn read_to_string(&self, path: &Path) -> std::io::Result<String> {
        self.texts.get(&normal(path)).cloned().ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOENT))
    }

    fn identity(&self, path: &Path) -> Option<ProgramId> {
        let path = normal(path);
        let there = self.executables.contains(&path) || self.texts.contains_key(&path);
        self.identities.get(&path).copied().or(there.then_some(ProgramId { dev: 1, ino: 1, size: 1, mtime_ns: 1 }))
    }
}

/// `path` without `.` components (a table's lookups; `..` is kept as is).
fn normal(path: &Path) -> PathBuf {
    path.components().filter(|c| !matches!(c, std::path::Component::CurDir)).collect()
}

/// The absolute working directory for a segment.
pub fn resolve_wdir(wdir: Option<&str>, base: &Path, files: &dyn Files) -> Result<PathBuf, PlanError> {
    let dir = match wdir {
        Some(d) => base.join(d),
        None => base.to_path_buf(),
    };
    match files.dir(&dir) {
        Ok(()) => Ok(dir),
        Err(e) => Err(PlanError::BadWdir(dir.display().to_string(), e)),
    }
}

/// Find `program` as `execvp` would after a `chdir(wdir)`: a name with a `/`
/// is taken relative to `wdir`; a bare name is searched in `path`.
pub fn resolve_program(program: &str, wdir: &Path, path: Option<&str>, files: &dyn Files) -> Result<PathBuf, PlanError> {
    if program.is_empty() {
        return Err(PlanError::NotFound(program.to_string()));
    }
    let check = |candidate: PathBuf| match files.access(&candidate) {
        Access::Executable => Ok(candidate),
        Access::Denied => Err(PlanError::NotExecutable(program.to_string())),
        Access::Missing => Err(PlanError::NotFound(program.to_string())),
    };
    if program.contains('/') {
        return check(wdir.join(program));
    }
    let mut denied = false;
    for dir in path.unwrap_or("/usr/local/bin:/usr/bin:/bin").split(':') {
        let dir = if dir.is_empty() { Path::new(".") } else { Path::new(dir) };
        match check(wdir.join(dir).join(program)) {
            Ok(p) => return Ok(p),
            Err(PlanError::NotExecutable(_)) => denied = true,
            Err(_) => {}
        }
    }
    Err(if denied { PlanError::NotExecutable(program.to_string()) } else { PlanError::NotFound(program.to_string()) })
}

/// The programs and processes of a job, rank order; a rank's appnum is its app's index.
pub struct PlannedJob {
    pub apps: Vec<AppSpec>,
    pub procs: Vec<ProcSpec>,
    pub appnums: Vec<i64>,
}

impl PlannedJob {
    pub fn new() -> Self {
        PlannedJob { apps: Vec::new(), procs: Vec::new(), appnums: Vec::new() }
    }

    /// The job to launch with rank `r` on node `node_of[r]`: no parent, no
    /// preput keys, no stdin (callers set those that apply).
    pub fn into_launch(self, job: JobId, kvsname: String, universe_size: i64, node_of: Vec<NodeId>, pmi_mode: PmiMode, kvs: KvsDesign) -> LaunchJob {
        LaunchJob {
            job,
            kvsname,
            size: self.procs.len() as u32,
            appnums: self.appnums,
            universe_size,
            process_mapping: process_mapping(&job_node_numbers(&node_of)),
            spawner: None,
            preput: Vec::new(),
            pmi_mode,
            stdin_rank: None,
            apps: self.apps,
            procs: self.procs,
            kvs,
            node_of,
            awaiting_claim: false,
            binding: Default::default(),
            pmix_watch: false,
            hold: false,
        }
    }

    /// Add `n` ranks running `app`.
    pub fn push_app(&mut self, app: AppSpec, n: u32) {
        let index = self.apps.len();
        self.apps.push(app);
        for _ in 0..n {
            self.procs.push(ProcSpec { rank: Rank(self.procs.len() as u32), app: index });
            self.appnums.push(index as i64);
        }
    }
}

impl Default for PlannedJob {
    fn default() -> Self {
        Self::new()
    }
}

/// Each rank's node numbered within its job, as Hydra numbers a job's nodes
/// (its proxies): from 0, in the order the ranks first reach them. Intel
/// MPI needs it in `PMI_process_mapping` (a spawned job all on the run's
/// node 1 given `(vector,(1,1,2))` asks for a business card `bc--1` and
/// aborts in `MPI_Init`); MPICH takes either. dpm itself places, routes
/// and reports by the run-wide [`NodeId`](dpm_kvs::NodeId)s in `node_of`.
pub fn job_node_numbers(node_of: &[NodeId]) -> Vec<u32> {
    let mut seen: Vec<NodeId> = Vec::new();
    node_of
        .iter()
        .map(|n| match seen.iter().position(|s| s == n) {
            Some(i) => i as u32,
            None => {
                seen.push(*n);
                (seen.len() - 1) as u32
            }
        })
        .collect()
}

/// `PMI_process_mapping` for ranks placed on nodes `node_of[rank]`, in MPICH's
/// vector grammar: runs of ranks on one node become `(start,nnodes,ppn)` blocks,
/// consecutive blocks over consecutive nodes with equal ppn are merged.
pub fn process_mapping(node_of: &[u32]) -> String {
    // (node, ranks-in-run)
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for &node in node_of {
        match runs.last_mut() {
            Some((n, count)) if *n == node => *count += 1,
            _ => runs.push((node, 1)),
        }
    }
    // (start, nnodes, ppn)
    let mut blocks: Vec<(u32, u32, u32)> = Vec::new();
    for (node, ppn) in runs {
        match blocks.last_mut() {
            Some((start, nnodes, p)) if *p == ppn && *start + *nnodes == node => *nnodes += 1,
            _ => blocks.push((node, 1, ppn)),
        }
    }
    let items: Vec<String> = blocks.iter().map(|(s, n, p)| format!("({s},{n},{p})")).collect();
    format!("(vector,{})", items.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_matches_hydra_for_block_layouts() {
        assert_eq!(process_mapping(&[0, 0]), "(vector,(0,1,2))");
        assert_eq!(process_mapping(&[0, 1]), "(vector,(0,2,1))");
        assert_eq!(process_mapping(&[0, 0, 1, 1]), "(vector,(0,2,2))");
        assert_eq!(process_mapping(&[0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]), "(vector,(0,3,4))");
    }

    #[test]
    fn a_job_numbers_its_own_nodes_from_0() {
        // A spawned job all on the run's node 1 (Intel MPI's case).
        assert_eq!(process_mapping(&job_node_numbers(&[1, 1].map(NodeId))), "(vector,(0,1,2))");
        assert_eq!(job_node_numbers(&[3, 1, 3, 1].map(NodeId)), [0, 1, 0, 1]);
        assert_eq!(process_mapping(&job_node_numbers(&[2, 2, 3, 3].map(NodeId))), "(vector,(0,2,2))");
        assert_eq!(job_node_numbers(&[0, 0, 1].map(NodeId)), [0, 0, 1], "the first job's numbers are unchanged");
        let launch = PlannedJob::new().into_launch(JobId(2), "kvs".into(), -1, vec![NodeId(1), NodeId(1)], PmiMode::Fd, KvsDesign::default());
        assert_eq!(
            (launch.process_mapping.as_str(), launch.node_of.as_slice()),
            ("(vector,(0,1,2))", &[NodeId(1), NodeId(1)][..]),
            "dpm keeps its own node ids"
        );
    }

    #[test]
    fn mapping_of_irregular_layouts_is_explicit() {
        assert_eq!(process_mapping(&[3, 2, 1, 0]), "(vector,(3,1,1),(2,1,1),(1,1,1),(0,1,1))");
        assert_eq!(process_mapping(&[0, 1, 0, 1]), "(vector,(0,2,1),(0,2,1))");
        assert_eq!(process_mapping(&[0, 0, 0, 1]), "(vector,(0,1,3),(1,1,1))");
    }

    #[test]
    fn programs_resolve_like_execvp() {
        let mut files = FileTable::small();
        files.dirs.insert("/usr/bin".into());
        files.texts.insert("/tmp/data".into(), "data".into());
        let tmp = Path::new("/tmp");
        assert_eq!(resolve_program("sh", tmp, Some("/usr/bin:/bin"), &files).unwrap(), PathBuf::from("/bin/sh"));
        assert!(matches!(resolve_program("no-such-prog-dpm", tmp, Some("/bin"), &files), Err(PlanError::NotFound(_))));
        assert!(matches!(resolve_program("data", tmp, Some("/bin:."), &files), Err(PlanError::NotExecutable(_))));
        assert!(matches!(resolve_program("./data", tmp, None, &files), Err(PlanError::NotExecutable(_))));
        assert!(matches!(resolve_program("/", tmp, None, &files), Err(PlanError::NotExecutable(_))));
        assert!(matches!(resolve_wdir(Some("data"), tmp, &files), Err(PlanError::BadWdir(..))));
        assert_eq!(resolve_wdir(None, tmp, &files).unwrap(), tmp);
        assert_eq!(PlanError::NotFound("x".into()).exit_code(), 127);
        assert_eq!(PlanError::NotExecutable("x".into()).exit_code(), 126);
    }

    /// This machine's answers: a shell on the PATH, a plain file that is
    /// not executable, a directory that is none.
    #[test]
    fn host_files_ask_this_machine() {
        let tmp = std::env::temp_dir();
        assert!(resolve_program("sh", &tmp, Some("/usr/bin:/bin"), &HostFiles).is_ok());
        let plain = tmp.join(format!("dpm-plan-test-{}", std::process::id()));
        std::fs::write(&plain, "data").unwrap();
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
        let result = resolve_program(plain.to_str().unwrap(), &tmp, None, &HostFiles);
        let as_dir = HostFiles.dir(&plain);
        std::fs::remove_file(&plain).unwrap();
        assert!(matches!(result, Err(PlanError::NotExecutable(_))));
        assert_eq!(as_dir.unwrap_err().raw_os_error(), Some(libc::ENOTDIR));
        assert!(matches!(resolve_program("/", &tmp, None, &HostFiles), Err(PlanError::NotExecutable(_))));
    }
}
