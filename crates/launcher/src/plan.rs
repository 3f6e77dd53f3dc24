//! From parsed options to processes: executable resolution, environments,
//! working directories, appnums and the `PMI_process_mapping` string.
//!
//! Everything that can be checked before a process starts is checked here, so
//! that a typo in a program name is an error with nothing left running.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use dpm_kvs::{JobId, KvsDesign, Rank};
use dpm_proto::{AppSpec, LaunchJob, PmiMode, ProcSpec};

use crate::cli::{EnvMode, RunOptions, Segment};

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

/// The environment a segment's processes get, before dpm's `PMI_*` variables.
pub fn segment_env(opts: &RunOptions, seg: &Segment, launcher_env: &[(String, String)]) -> Vec<(String, String)> {
    let mode = seg.env_mode.as_ref().unwrap_or(&opts.genv_mode);
    let mut env: Vec<(String, String)> = match mode {
        EnvMode::All => launcher_env.to_vec(),
        EnvMode::None => Vec::new(),
        EnvMode::List(names) => launcher_env.iter().filter(|(k, _)| names.contains(k)).cloned().collect(),
    };
    // An outer launcher's PMI variables would point the ranks at the wrong
    // server (and PMIX_* makes MPICH refuse PMI-1/2 altogether); a link
    // secret is never a rank's business.
    env.retain(|(k, _)| !is_launcher_var(k) && !dpm_proto::auth::is_secret_var(k));
    for (k, v) in opts.genv.iter().chain(seg.env.iter()) {
        env.retain(|(ek, _)| ek != k);
        env.push((k.clone(), v.clone()));
    }
    env
}

fn is_launcher_var(name: &str) -> bool {
    name.starts_with("PMI_") || name.starts_with("PMIX_") || name == "MPI_LOCALNRANKS" || name == "MPI_LOCALRANKID"
}

/// The absolute working directory for a segment.
pub fn resolve_wdir(wdir: Option<&str>, base: &Path) -> Result<PathBuf, PlanError> {
    let dir = match wdir {
        Some(d) => base.join(d),
        None => base.to_path_buf(),
    };
    match std::fs::metadata(&dir) {
        Ok(m) if m.is_dir() => Ok(dir),
        Ok(_) => Err(PlanError::BadWdir(dir.display().to_string(), std::io::Error::from_raw_os_error(libc::ENOTDIR))),
        Err(e) => Err(PlanError::BadWdir(dir.display().to_string(), e)),
    }
}

/// Find `program` as `execvp` would after a `chdir(wdir)`: a name with a `/`
/// is taken relative to `wdir`; a bare name is searched in `path`.
pub fn resolve_program(program: &str, wdir: &Path, path: Option<&str>) -> Result<PathBuf, PlanError> {
    if program.is_empty() {
        return Err(PlanError::NotFound(program.to_string()));
    }
    if program.contains('/') {
        let candidate = wdir.join(program);
        return check_executable(&candidate, program);
    }
    let mut denied = false;
    for dir in path.unwrap_or("/usr/local/bin:/usr/bin:/bin").split(':') {
        let dir = if dir.is_empty() { Path::new(".") } else { Path::new(dir) };
        let candidate = wdir.join(dir).join(program);
        match check_executable(&candidate, program) {
            Ok(p) => return Ok(p),
            Err(PlanError::NotExecutable(_)) => denied = true,
            Err(_) => {}
        }
    }
    Err(if denied { PlanError::NotExecutable(program.to_string()) } else { PlanError::NotFound(program.to_string()) })
}

fn check_executable(candidate: &Path, program: &str) -> Result<PathBuf, PlanError> {
    match std::fs::metadata(candidate) {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => {
            // The mode bits say yes; access(2) asks the kernel for this user.
            let c = std::ffi::CString::new(candidate.as_os_str().as_encoded_bytes()).map_err(|_| PlanError::NotFound(program.into()))?;
            // SAFETY: access(2) with a valid NUL-terminated path.
            if unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0 {
                Ok(candidate.to_path_buf())
            } else {
                Err(PlanError::NotExecutable(program.to_string()))
            }
        }
        Ok(_) => Err(PlanError::NotExecutable(program.to_string())),
        Err(_) => Err(PlanError::NotFound(program.to_string())),
    }
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
    pub fn into_launch(self, job: JobId, kvsname: String, universe_size: i64, node_of: Vec<usize>, pmi_mode: PmiMode, kvs: KvsDesign) -> LaunchJob {
        let node_ids: Vec<u32> = node_of.iter().map(|&n| n as u32).collect();
        LaunchJob {
            job,
            kvsname,
            size: self.procs.len() as u32,
            appnums: self.appnums,
            universe_size,
            process_mapping: process_mapping(&node_ids),
            spawner: None,
            preput: Vec::new(),
            pmi_mode,
            stdin_rank: None,
            apps: self.apps,
            procs: self.procs,
            kvs,
            node_of,
            awaiting_claim: false,
            report_parent_asks: false,
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

/// Build the initial job's processes from the command line.
pub fn plan_job(opts: &RunOptions, launcher_env: &[(String, String)], cwd: &Path) -> Result<PlannedJob, PlanError> {
    let mut job = PlannedJob::new();
    for (appnum, seg) in opts.segments.iter().enumerate() {
        let env = segment_env(opts, seg, launcher_env);
        let wdir = resolve_wdir(seg.wdir.as_deref(), cwd)?;
        let path =
            env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.as_str()).or_else(|| launcher_env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.as_str()));
        let exe = resolve_program(&seg.program, &wdir, path)?;
        let n = seg.nprocs.unwrap_or(1);
        if n == 0 {
            return Err(PlanError::Invalid(format!("segment {} ({}) has 0 processes", appnum + 1, seg.program)));
        }
        let mut argv = vec![seg.program.clone()];
        argv.extend(seg.args.iter().cloned());
        job.push_app(AppSpec { exe: exe.display().to_string(), argv, env, wdir: wdir.display().to_string() }, n);
    }
    Ok(job)
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
    fn mapping_of_irregular_layouts_is_explicit() {
        assert_eq!(process_mapping(&[3, 2, 1, 0]), "(vector,(3,1,1),(2,1,1),(1,1,1),(0,1,1))");
        assert_eq!(process_mapping(&[0, 1, 0, 1]), "(vector,(0,2,1),(0,2,1))");
        assert_eq!(process_mapping(&[0, 0, 0, 1]), "(vector,(0,1,3),(1,1,1))");
    }

    #[test]
    fn programs_resolve_like_execvp() {
        let tmp = std::env::temp_dir();
        assert!(resolve_program("sh", &tmp, Some("/usr/bin:/bin")).is_ok());
        assert!(matches!(resolve_program("no-such-prog-dpm", &tmp, Some("/bin")), Err(PlanError::NotFound(_))));
        let plain = tmp.join(format!("dpm-plan-test-{}", std::process::id()));
        std::fs::write(&plain, "data").unwrap();
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
        let result = resolve_program(plain.to_str().unwrap(), &tmp, None);
        std::fs::remove_file(&plain).unwrap();
        assert!(matches!(result, Err(PlanError::NotExecutable(_))));
        assert!(matches!(resolve_program("/", &tmp, None), Err(PlanError::NotExecutable(_))));
        assert_eq!(PlanError::NotFound("x".into()).exit_code(), 127);
        assert_eq!(PlanError::NotExecutable("x".into()).exit_code(), 126);
    }

    #[test]
    fn environment_modes_and_overrides() {
        let launcher = vec![("PATH".to_string(), "/bin".to_string()), ("HOME".to_string(), "/root".to_string()), ("PMI_FD".to_string(), "9".to_string())];
        let mut opts = crate::cli::parse_run(&["-genv", "X", "1", "-n", "1", "-env", "HOME", "/h", "p"].map(String::from)).unwrap();
        let env = segment_env(&opts, &opts.segments[0], &launcher);
        assert!(env.contains(&("PATH".into(), "/bin".into())));
        assert!(env.contains(&("HOME".into(), "/h".into())));
        assert!(env.contains(&("X".into(), "1".into())));
        assert!(!env.iter().any(|(k, _)| k == "PMI_FD"));
        opts.genv_mode = EnvMode::None;
        let env = segment_env(&opts, &opts.segments[0], &launcher);
        assert_eq!(env, vec![("X".into(), "1".into()), ("HOME".into(), "/h".into())]);
    }
}
