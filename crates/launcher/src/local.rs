//! A run planned and driven by this process: the command line's segments
//! into a job (environments by `-genv*`/`-env*`, programs and directories
//! resolved on this machine), and one run driven to its end on daemons
//! started for it (`dpm run`, the singleton).

use std::path::Path;

use dpm_proto::AppSpec;

use crate::cli::{EnvMode, RunOptions, Segment};
use crate::controller::{self, Controller, DaemonLink, Settings, Shared};
use crate::error::Error;
use crate::nodes;
use crate::output;
use crate::plan::{resolve_program, resolve_wdir, HostFiles, PlanError, PlannedJob};

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

/// Build the initial job's processes from the command line.
pub fn plan_job(opts: &RunOptions, launcher_env: &[(String, String)], cwd: &Path) -> Result<PlannedJob, PlanError> {
    let mut job = PlannedJob::new();
    for (appnum, seg) in opts.segments.iter().enumerate() {
        let env = segment_env(opts, seg, launcher_env);
        let wdir = resolve_wdir(seg.wdir.as_deref(), cwd, &HostFiles)?;
        let path =
            env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.as_str()).or_else(|| launcher_env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.as_str()));
        let exe = resolve_program(&seg.program, &wdir, path, &HostFiles)?;
        let n = seg.nprocs.unwrap_or(1);
        if n == 0 {
            return Err(PlanError::Invalid(format!("segment {} ({}) has 0 processes", appnum + 1, seg.program)));
        }
        let mut argv = vec![seg.program.clone()];
        argv.extend(seg.args.iter().cloned());
        let node_env = !matches!(seg.env_mode.as_ref().unwrap_or(&opts.genv_mode), EnvMode::All);
        job.push_app(AppSpec { exe: exe.display().to_string(), argv, env, wdir: wdir.display().to_string(), node_env }, n);
    }
    Ok(job)
}

/// Drive one run on daemons started for it, to its end; then shut them down.
/// `lazy`: the listed nodes after the daemons' start theirs when first needed.
pub async fn drive(
    daemons: nodes::Daemons,
    settings: Settings,
    start: impl FnOnce(&mut Controller),
    timeout: Option<std::time::Duration>,
    stdin: bool,
    lazy: Option<crate::controller::lazy::Lazy>,
) -> i32 {
    let (links, up, waiter) = daemons.split();
    let shared = Shared::for_run(links.clone(), up, &settings, lazy);
    tokio::task::spawn_local(controller::dispatch(shared.clone()));
    tokio::task::spawn_local(crate::controller::lazy::drive(shared.clone()));
    let mut controller = Controller::new(settings, shared.clone(), output::stdout_sink());
    start(&mut controller);
    controller.stops_itself();
    let inputs = controller::local_inputs(stdin, true, true);
    let code = controller.run(timeout, inputs).await;
    // The run's unclaimed pooled jobs (warm spawn) go with its tree.
    controller::drain_pool(&shared).await;
    // The daemons kill whatever is left when they shut down; wait for that.
    // Dropping the links closes their pipes: a daemon's blocked read ends.
    let late: Vec<DaemonLink> = shared.borrow().links().iter().skip(links.len()).cloned().collect();
    for link in links.into_iter().chain(late) {
        link.shutdown();
    }
    waiter.wait().await;
    crate::controller::lazy::wait(&shared).await;
    code
}

/// This process's environment and directory, and the job planned in them.
pub type PlannedHere = (Vec<(String, String)>, std::path::PathBuf, PlannedJob);

/// The job planned in this process's environment and directory (programs
/// resolved like `execvp` after `chdir`).
pub fn plan_here(opts: &RunOptions) -> Result<PlannedHere, Error> {
    let launcher_env: Vec<(String, String)> = std::env::vars().collect();
    let cwd = std::env::current_dir().map_err(|e| Error::failed(format!("cannot read the current directory: {e}")))?;
    let planned = plan_job(opts, &launcher_env, &cwd)?;
    Ok((launcher_env, cwd, planned))
}

#[cfg(test)]
mod tests {
    use super::*;

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
