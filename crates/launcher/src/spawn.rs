//! Turning a spawn request (`MPI_Comm_spawn[_multiple]`) into a job plan.
//!
//! Info keys understood (MPI's reserved keys, MPICH's and Open MPI's spellings):
//! - `wdir`: working directory (relative: to dpm's directory);
//! - `path`: directories to find the program in (`:`-separated);
//! - `env` (Open MPI): newline-separated `NAME=VALUE` for the children;
//! - `host`, `hosts`, `add-host`: comma-separated `name[:n]`;
//!   `hostfile`, `add-hostfile`: a file of `name[:n]` or `name slots=n` lines —
//!   every name must be a node of the run (or this machine);
//! - `oversubscribe` (`true`/`false`) and `map-by`: placement policy;
//! - `soft`: accepted (all `maxprocs` are started);
//! - `arch`, `file`: accepted with a warning (meaningless here);
//! - `dpm_warm` (`true`/`false`): ask for or refuse a warm spawn (`run::warm`).
//!
//! Any other key is logged and ignored, never an error.

use std::path::{Path, PathBuf};

use dpm_pmi::sanitize::quote;
use dpm_proto::{AppSpec, SpawnCommand};

use crate::plan::{resolve_program, resolve_wdir, PlanError, PlannedJob};

/// What every spawned job inherits from the `dpm run` that hosts it.
#[derive(Clone, Debug)]
pub struct SpawnContext {
    /// The environment of the first segment (dpm's environment as captured at
    /// start, after `-genv*`), before dpm's `PMI_*` variables.
    pub base_env: Vec<(String, String)>,
    pub cwd: PathBuf,
    pub host: String,
    /// The host name of each node (daemon) of the run.
    pub nodes: Vec<String>,
}

/// A spawn request checked and resolved into processes.
pub struct SpawnPlan {
    pub job: PlannedJob,
    /// Per app: the nodes its processes may go to (`None`: any node).
    pub nodes: Vec<Option<Vec<usize>>>,
    /// `Some(false)` if an info key turned oversubscription off.
    pub oversubscribe: Option<bool>,
}

fn info<'a>(cmd: &'a SpawnCommand, keys: &[&str]) -> Option<&'a str> {
    cmd.info.iter().find(|(k, _)| keys.contains(&k.as_str())).map(|(_, v)| v.as_str())
}

/// The nodes a host list names; `None` when it names this machine itself
/// (which every node of a one-machine run is).
fn nodes_named(list: &str, ctx: &SpawnContext) -> Result<Option<Vec<usize>>, PlanError> {
    let mut nodes = Vec::new();
    for entry in list.split([',', '\n']).map(str::trim).filter(|e| !e.is_empty()) {
        let name = entry.split([':', ' ']).next().unwrap_or(entry);
        let matching: Vec<usize> = ctx.nodes.iter().enumerate().filter(|(_, h)| *h == name).map(|(i, _)| i).collect();
        if !matching.is_empty() {
            nodes.extend(matching);
        } else if crate::is_this_host(name, &ctx.host) {
            return Ok(None);
        } else {
            return Err(PlanError::Invalid(format!("host '{name}' is not a node of this run (nodes: {})", ctx.nodes.join(", "))));
        }
    }
    nodes.sort_unstable();
    nodes.dedup();
    Ok(Some(nodes))
}

/// The most processes one spawn request may ask for. `maxprocs` arrives as
/// a 32-bit number from any rank; each process costs the launcher a rank
/// entry, a slot in the fence tally and a line of the launch message before
/// anything starts, so an absurd count (a garbled or hostile request) must be
/// refused before it is planned (a `maxprocs` of 4 billion made dpm try to
/// allocate and launch them all). 65,536 is a round limit well above a
/// spawn on any tree dpm runs, and still cheap to plan and to refuse.
pub const MAX_SPAWN_PROCS: u64 = 65_536;

pub fn plan_spawn(ctx: &SpawnContext, commands: &[SpawnCommand]) -> Result<SpawnPlan, PlanError> {
    let total: u64 = commands.iter().map(|c| u64::from(c.maxprocs)).sum();
    if total > MAX_SPAWN_PROCS {
        return Err(PlanError::Invalid(format!("spawn of {total} processes refused: at most {MAX_SPAWN_PROCS} per request")));
    }
    let mut job = PlannedJob::new();
    let mut nodes = Vec::new();
    let mut oversubscribe = None;
    for cmd in commands {
        for (key, value) in &cmd.info {
            match key.as_str() {
                "wdir" | "path" | "env" | "host" | "hosts" | "add-host" | "hostfile" | "add-hostfile" | "soft" | "map-by"
                | "oversubscribe" => {}
                // Warm spawn's own choice (`run::warm`), not a placement key.
                "dpm_warm" => {}
                // Keys and values come from a rank: quoted, so no newline in
                // them can forge a log line.
                "arch" | "file" => tracing::warn!("spawn info key '{}={}' has no meaning here and is ignored", quote(key), quote(value)),
                _ => tracing::warn!("unknown spawn info key '{}={}' ignored", quote(key), quote(value)),
            }
        }
        let mut allowed = None;
        if let Some(list) = info(cmd, &["host", "hosts", "add-host"]) {
            allowed = nodes_named(list, ctx)?;
        }
        if let Some(file) = info(cmd, &["hostfile", "add-hostfile"]) {
            let text = std::fs::read_to_string(ctx.cwd.join(file))
                .map_err(|e| PlanError::Invalid(format!("hostfile {file}: {e}")))?;
            let lines: Vec<&str> = text.lines().map(|l| l.split('#').next().unwrap_or("").trim()).filter(|l| !l.is_empty()).collect();
            allowed = nodes_named(&lines.join(","), ctx)?;
        }
        nodes.push(allowed);
        if let Some(v) = info(cmd, &["oversubscribe"]) {
            oversubscribe = Some(matches!(v.to_ascii_lowercase().as_str(), "true" | "1" | "yes"));
        }
        let wdir = resolve_wdir(info(cmd, &["wdir"]), &ctx.cwd)?;
        let mut env = ctx.base_env.clone();
        if let Some(list) = info(cmd, &["env"]) {
            for line in list.lines().filter(|l| !l.trim().is_empty()) {
                let (k, v) = line.split_once('=').ok_or_else(|| PlanError::Invalid(format!("info env entry '{line}' is not NAME=VALUE")))?;
                env.retain(|(ek, _)| ek != k);
                env.push((k.to_string(), v.to_string()));
            }
        }
        let exe = match info(cmd, &["path"]) {
            // `path` names where to look: a list of directories, like PATH.
            Some(path) if !cmd.exe.contains('/') => resolve_program(&cmd.exe, &wdir, Some(path)),
            Some(path) => resolve_program(&Path::new(path).join(&cmd.exe).display().to_string(), &wdir, None),
            None => {
                let path = env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.as_str());
                resolve_program(&cmd.exe, &wdir, path)
            }
        }?;
        if cmd.maxprocs == 0 {
            return Err(PlanError::Invalid(format!("spawn of '{}' with maxprocs 0", cmd.exe)));
        }
        let mut argv = vec![cmd.exe.clone()];
        argv.extend(cmd.args.iter().cloned());
        job.push_app(AppSpec { exe: exe.display().to_string(), argv, env, wdir: wdir.display().to_string() }, cmd.maxprocs);
    }
    Ok(SpawnPlan { job, nodes, oversubscribe })
}
