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
//! - `soft` (MPI 4.x §11.8.4): a comma list of triplets `a`, `a:b`,
//!   `a:b:c` naming the process counts the spawn may start; the placer
//!   starts the largest allowed count that fits ([`parse_soft`]);
//! - `arch`, `file`: accepted with a warning (meaningless here);
//! - `dpm_warm` (`true`/`false`): ask for or refuse a warm spawn (`run::warm`).
//!
//! Any other key is logged and ignored, never an error.

use std::path::{Path, PathBuf};

use dpm_pmi::sanitize::quote;
use dpm_proto::{AppSpec, SpawnCommand};

use crate::plan::{resolve_program, resolve_wdir, Files, PlanError, PlannedJob, ProgramId};

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
    /// `base_env` is set over each node's own environment (the first
    /// segment's `-genvnone`/`-genvlist`: [`AppSpec::node_env`]).
    pub node_env: bool,
}

/// A spawn request checked and resolved into processes.
pub struct SpawnPlan {
    pub job: PlannedJob,
    /// Per app: the nodes its processes may go to (`None`: any node).
    pub nodes: Vec<Option<Vec<usize>>>,
    /// `Some(false)` if an info key turned oversubscription off.
    pub oversubscribe: Option<bool>,
    /// Per app: the process counts it may start, largest first — its
    /// `maxprocs` alone, or what its `soft` key allows.
    pub counts: Vec<Vec<u32>>,
}

/// The error code of a process a `soft` spawn did not start: MPICH's
/// `MPI_ERR_SPAWN` (42 in its `mpi.h`), which its PMI-1 client copies into
/// `MPI_Comm_spawn`'s `array_of_errcodes` as it is.
pub const NOT_STARTED: i32 = 42;

impl SpawnPlan {
    /// Some app may start fewer than its `maxprocs` (a `soft` key).
    pub fn is_soft(&self) -> bool {
        self.counts.iter().zip(self.maxprocs()).any(|(c, max)| c.as_slice() != [max])
    }

    /// Each app's `maxprocs`.
    pub fn maxprocs(&self) -> Vec<u32> {
        let mut out = vec![0u32; self.job.apps.len()];
        for p in &self.job.procs {
            out[p.app] += 1;
        }
        out
    }

    /// The job with `started[app]` processes of each app (the first ones),
    /// and the spawn answer's error codes: empty if every requested process
    /// starts, else one per requested process, [`NOT_STARTED`] for the rest.
    pub fn started(self, started: &[u32]) -> (PlannedJob, Vec<i32>) {
        let maxprocs = self.maxprocs();
        if started == maxprocs.as_slice() {
            return (self.job, Vec::new());
        }
        let mut job = PlannedJob::new();
        let mut errcodes = Vec::new();
        for ((app, &max), &n) in self.job.apps.into_iter().zip(&maxprocs).zip(started) {
            let n = n.min(max);
            job.push_app(app, n);
            errcodes.extend(std::iter::repeat_n(0, n as usize));
            errcodes.extend(std::iter::repeat_n(NOT_STARTED, (max - n) as usize));
        }
        (job, errcodes)
    }
}

/// The counts a `soft` value allows out of `maxprocs`, largest first. The
/// value is a comma list of Fortran-90 triplets: `a` (a alone), `a:b` (a to
/// b), `a:b:c` (a, a+c, a+2c, … not beyond b; c may be negative, not 0).
/// As the standard says, negative counts and counts above `maxprocs` are
/// ignored. So is 0: a spawn that starts nothing is refused instead (MPICH
/// answers a spawn of no process with an empty, unusable communicator).
/// `None`: the value is malformed or allows no count from 1 to `maxprocs`.
pub fn parse_soft(value: &str, maxprocs: u32) -> Option<Vec<u32>> {
    // i128: no sum or product of two parsed i64 values overflows.
    let max = i128::from(maxprocs);
    let mut allowed = vec![false; maxprocs as usize + 1];
    for triplet in value.split(',').map(str::trim) {
        let parts: Vec<i128> = triplet.split(':').map(|p| p.trim().parse::<i64>().ok().map(i128::from)).collect::<Option<_>>()?;
        let (a, b, c) = match parts[..] {
            [a] => (a, a, 1),
            [a, b] => (a, b, 1),
            [a, b, c] if c != 0 => (a, b, c),
            _ => return None,
        };
        // The triplet's values lie between a and b; only those in 1..=max
        // matter: start at the first of them, so a huge range costs at
        // most `max` steps.
        let (lo, hi) = if c > 0 { (a.max(1), b.min(max)) } else { (b.max(1), a.min(max)) };
        let skip = if c > 0 { (lo - a).max(0) } else { (a - hi).max(0) };
        let step = c.abs();
        let mut v = a + (skip + step - 1) / step * c;
        while lo <= v && v <= hi {
            allowed[v as usize] = true;
            v += c;
        }
    }
    let counts: Vec<u32> = (1..=maxprocs).rev().filter(|&n| allowed[n as usize]).collect();
    (!counts.is_empty()).then_some(counts)
}

fn info<'a>(cmd: &'a SpawnCommand, keys: &[&str]) -> Option<&'a str> {
    cmd.info.iter().find(|(k, _)| keys.contains(&k.as_str())).map(|(_, v)| v.as_str())
}

/// The program a spawn command runs, as `execvp` after `chdir(wdir)` finds
/// it: through the `path` info key (directories, like `PATH`), else the
/// environment's `PATH`.
fn resolve_exe(cmd: &SpawnCommand, wdir: &Path, env: &[(String, String)], files: &dyn Files) -> Result<PathBuf, PlanError> {
    match info(cmd, &["path"]) {
        Some(path) if !cmd.exe.contains('/') => resolve_program(&cmd.exe, wdir, Some(path), files),
        Some(path) => resolve_program(&Path::new(path).join(&cmd.exe).display().to_string(), wdir, None, files),
        None => {
            let path = env.iter().rev().find(|(k, _)| k == "PATH").map(|(_, v)| v.as_str());
            resolve_program(&cmd.exe, wdir, path, files)
        }
    }
}

/// The identity of the program each spawn command would run now, in
/// `files` (`None` for one that cannot be found: its spawn fails in the
/// plan): part of a warm spawn's shape (`run::warm`).
pub fn program_ids(ctx: &SpawnContext, files: &dyn Files, commands: &[SpawnCommand]) -> Vec<Option<ProgramId>> {
    commands
        .iter()
        .map(|cmd| {
            let wdir = resolve_wdir(info(cmd, &["wdir"]), &ctx.cwd, files).ok()?;
            let mut env = ctx.base_env.clone();
            if let Some(list) = info(cmd, &["env"]) {
                env.extend(list.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())));
            }
            files.identity(&resolve_exe(cmd, &wdir, &env, files).ok()?)
        })
        .collect()
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
        } else if crate::machine::is_this_host(name, &ctx.host) {
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

/// Plan a spawn request: check its info keys, resolve its programs,
/// directories and host files in `files` (the driver's answer for this
/// machine, a table in tests) and count its processes.
pub fn plan_spawn(ctx: &SpawnContext, files: &dyn Files, commands: &[SpawnCommand]) -> Result<SpawnPlan, PlanError> {
    let total: u64 = commands.iter().map(|c| u64::from(c.maxprocs)).sum();
    if total > MAX_SPAWN_PROCS {
        return Err(PlanError::Invalid(format!("spawn of {total} processes refused: at most {MAX_SPAWN_PROCS} per request")));
    }
    let mut job = PlannedJob::new();
    let mut nodes = Vec::new();
    let mut oversubscribe = None;
    let mut counts = Vec::new();
    for cmd in commands {
        for (key, value) in &cmd.info {
            match key.as_str() {
                "wdir" | "path" | "env" | "host" | "hosts" | "add-host" | "hostfile" | "add-hostfile" | "soft" | "map-by" | "oversubscribe" => {}
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
            let text = files.read_to_string(&ctx.cwd.join(file)).map_err(|e| PlanError::Invalid(format!("hostfile {file}: {e}")))?;
            let lines: Vec<&str> = text.lines().map(|l| l.split('#').next().unwrap_or("").trim()).filter(|l| !l.is_empty()).collect();
            allowed = nodes_named(&lines.join(","), ctx)?;
        }
        nodes.push(allowed);
        if let Some(v) = info(cmd, &["oversubscribe"]) {
            oversubscribe = Some(matches!(v.to_ascii_lowercase().as_str(), "true" | "1" | "yes"));
        }
        let wdir = resolve_wdir(info(cmd, &["wdir"]), &ctx.cwd, files)?;
        let mut env = ctx.base_env.clone();
        if let Some(list) = info(cmd, &["env"]) {
            for line in list.lines().filter(|l| !l.trim().is_empty()) {
                let (k, v) = line.split_once('=').ok_or_else(|| PlanError::Invalid(format!("info env entry '{line}' is not NAME=VALUE")))?;
                env.retain(|(ek, _)| ek != k);
                env.push((k.to_string(), v.to_string()));
            }
        }
        let exe = resolve_exe(cmd, &wdir, &env, files)?;
        if cmd.maxprocs == 0 {
            return Err(PlanError::Invalid(format!("spawn of '{}' with maxprocs 0", cmd.exe)));
        }
        counts.push(match info(cmd, &["soft"]) {
            Some(v) => parse_soft(v, cmd.maxprocs).ok_or_else(|| {
                PlanError::Invalid(format!("soft '{}' allows no process count from 1 to maxprocs {} (a comma list of a, a:b or a:b:c)", quote(v), cmd.maxprocs))
            })?,
            None => vec![cmd.maxprocs],
        });
        let mut argv = vec![cmd.exe.clone()];
        argv.extend(cmd.args.iter().cloned());
        job.push_app(AppSpec { exe: exe.display().to_string(), argv, env, wdir: wdir.display().to_string(), node_env: ctx.node_env }, cmd.maxprocs);
    }
    Ok(SpawnPlan { job, nodes, oversubscribe, counts })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soft_triplets_name_the_allowed_counts_largest_first() {
        assert_eq!(parse_soft("1:4", 4), Some(vec![4, 3, 2, 1]));
        assert_eq!(parse_soft("2", 4), Some(vec![2]));
        assert_eq!(parse_soft("1,4", 8), Some(vec![4, 1]));
        assert_eq!(parse_soft("2:10:2", 7), Some(vec![6, 4, 2]), "beyond maxprocs: ignored");
        assert_eq!(parse_soft("10:1:-3", 8), Some(vec![7, 4, 1]), "a negative stride counts down");
        assert_eq!(parse_soft("-5:10:3", 8), Some(vec![7, 4, 1]), "negative counts: ignored");
        assert_eq!(parse_soft(" 1 : 2 , 5 ", 5), Some(vec![5, 2, 1]));
        assert_eq!(parse_soft("0:2", 4), Some(vec![2, 1]), "0 is never chosen");
        // Huge ranges cost only maxprocs steps; extreme numbers do not overflow.
        assert_eq!(parse_soft("-9223372036854775808:9223372036854775807:9223372036854775807", 3), None);
        assert_eq!(parse_soft("-9223372036854775808:9223372036854775807", 3), Some(vec![3, 2, 1]));
        assert_eq!(parse_soft("9223372036854775807:1:-1", 2), Some(vec![2, 1]));
        // Nothing allowed, or not triplets.
        for bad in ["", "0", "5:9", "4:1", "1:4:0", "1:2:3:4", "a", "1:b", "1,,2", "99999999999999999999"] {
            assert_eq!(parse_soft(bad, 4), None, "{bad:?}");
        }
    }

    fn plan(cmds: &[(u32, Option<&str>)]) -> Result<SpawnPlan, PlanError> {
        let ctx = SpawnContext { base_env: vec![], cwd: "/".into(), host: "h".into(), nodes: vec!["h".into()], node_env: false };
        let commands: Vec<SpawnCommand> = cmds
            .iter()
            .map(|&(maxprocs, soft)| SpawnCommand {
                exe: "/bin/true".into(),
                args: vec![],
                maxprocs,
                info: soft.map(|v| vec![("soft".to_string(), v.to_string())]).unwrap_or_default(),
            })
            .collect();
        plan_spawn(&ctx, &crate::plan::FileTable::small(), &commands)
    }

    #[test]
    fn a_soft_plan_starts_the_first_processes_of_each_app_and_codes_the_rest() {
        let p = plan(&[(3, Some("1:3")), (2, None)]).unwrap();
        assert!(p.is_soft());
        assert_eq!(p.counts, vec![vec![3, 2, 1], vec![2]]);
        let (job, errcodes) = p.started(&[1, 2]);
        assert_eq!(job.appnums, vec![0, 1, 1]);
        assert_eq!(job.procs.iter().map(|p| p.rank.0).collect::<Vec<_>>(), vec![0, 1, 2]);
        assert_eq!(errcodes, vec![0, NOT_STARTED, NOT_STARTED, 0, 0]);
        // All started: the plan as it was, no codes.
        let (job, errcodes) = plan(&[(3, Some("1:3"))]).unwrap().started(&[3]);
        assert_eq!((job.procs.len(), errcodes), (3, vec![]));
        assert!(!plan(&[(3, None)]).unwrap().is_soft());
        assert!(!plan(&[(3, Some("3"))]).unwrap().is_soft(), "soft allowing maxprocs alone");
        let err = plan(&[(2, Some("5:9"))]).err().unwrap().to_string();
        assert!(err.contains("soft '5:9' allows no process count from 1 to maxprocs 2"), "{err}");
    }
}
