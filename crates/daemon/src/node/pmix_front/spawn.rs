//! PMIx spawn (`MPI_Comm_spawn` under Open MPI 5): a spawn upcall becomes
//! the ordinary `ToLauncher::Spawn`, so the launcher's spawn path places and
//! launches the child job as it does for PMI-1/2 jobs (a PMIx child, since
//! the run's flavour is PMIx), and its `SpawnDone` answers the upcall with
//! the child's namespace (= its kvsname) or an error — never a hang.
//!
//! Owns the translation of PMIx's spawn arguments into dpm's spawn commands
//! ([`spawn_commands`], pure): each app's `env` and the PMIx info keys in
//! the spelling dpm's spawn planner reads (`host`, `hostfile`, `wdir`,
//! `env`, `oversubscribe`, `map-by`), and the parent's rank, which rides
//! the spawn's preput ([`PARENT_RANK_KEY`]) to every child node, where the
//! child's namespace is registered with `PMIX_SPAWNED` and `PMIX_PARENT_ID`.

use dpm_kvs::Rank;
use dpm_pmix::{PMIX_ERROR, PMIX_ERR_NOT_SUPPORTED, PMIX_SUCCESS};
use dpm_proto::{RequestId, SpawnCommand, ToLauncher};

use super::{PmixAnswer, PmixFront, PmixRequest};
use crate::node::requests::{Asker, Requests};
use crate::node::NodeEffects;

/// The preput key that carries the spawning rank to the child's nodes.
pub const PARENT_RANK_KEY: &str = "dpm-pmix-parent-rank";

/// One application of a PMIx spawn, as plain data (info values as text).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PmixApp {
    pub cmd: String,
    /// Including `argv[0]`.
    pub argv: Vec<String>,
    /// `NAME=VALUE` entries for the children.
    pub env: Vec<String>,
    pub cwd: Option<String>,
    pub maxprocs: i32,
    pub info: Vec<(String, String)>,
}

/// `PMIX_MAPBY`: the policies dpm's placer can stand for (it fills nodes'
/// slots in order; `ppr`, `node` and `slot` are accepted as requests it
/// approximates) and the oversubscription modifiers.
fn map_by(value: &str) -> Result<(String, Option<bool>), String> {
    let mut parts = value.split(':');
    let policy = parts.next().unwrap_or("").to_ascii_lowercase();
    if !matches!(policy.as_str(), "ppr" | "node" | "slot" | "") {
        return Err(format!("PMIX_MAPBY '{value}' is not supported by dpm (ppr, node and slot are)"));
    }
    let mut oversubscribe = None;
    for modifier in parts {
        match modifier.to_ascii_uppercase().as_str() {
            "OVERSUBSCRIBE" => oversubscribe = Some(true),
            "NOOVERSUBSCRIBE" => oversubscribe = Some(false),
            _ => {}
        }
    }
    Ok((policy, oversubscribe))
}

/// Whether an entry of an app's `env` goes to the children: `NAME=VALUE`
/// on one line, and not a variable dpm set for the parent's job itself
/// (Open MPI passes its `OMPI_MCA_*` variables on; the parent's private
/// shared-memory directory would override the children's own).
fn carried(entry: &str) -> bool {
    let Some((name, _)) = entry.split_once('=') else { return false };
    !name.is_empty() && !entry.contains('\n') && !DPM_SET.contains(&name)
}

/// Variables dpm sets in a PMIx job's ranks' environment (`pmix_host`).
const DPM_SET: &[&str] = &["OMPI_MCA_btl_sm_backing_directory"];

/// The spawn commands of a PMIx spawn: each app with its info keys in dpm's
/// spelling (job-level info applies to every app; an app's own key wins),
/// or why the request cannot be served.
pub fn spawn_commands(apps: &[PmixApp], job_info: &[(String, String)]) -> Result<Vec<SpawnCommand>, String> {
    if apps.is_empty() {
        return Err("a spawn without applications".into());
    }
    let mut commands = Vec::with_capacity(apps.len());
    for app in apps {
        let maxprocs = u32::try_from(app.maxprocs).ok().filter(|&n| n > 0).ok_or_else(|| format!("spawn of '{}' with maxprocs {}", app.cmd, app.maxprocs))?;
        let mut info: Vec<(String, String)> = Vec::new();
        let mut set = |key: &str, value: String| {
            info.retain(|(k, _)| k != key);
            info.push((key.to_string(), value));
        };
        if let Some(cwd) = app.cwd.as_ref().filter(|c| !c.is_empty()) {
            set("wdir", cwd.clone());
        }
        for (key, value) in job_info.iter().chain(&app.info) {
            match key.as_str() {
                "pmix.host" | "pmix.addhost" | "host" | "add-host" => set("host", value.clone()),
                "pmix.hostfile" | "pmix.addhostfile" | "hostfile" | "add-hostfile" => set("hostfile", value.clone()),
                "pmix.wdir" | "wdir" => set("wdir", value.clone()),
                "pmix.mapby" | "map-by" => {
                    let (policy, oversubscribe) = map_by(value)?;
                    set("map-by", policy);
                    if let Some(o) = oversubscribe {
                        set("oversubscribe", o.to_string());
                    }
                }
                "oversubscribe" | "pmix.oversubscribe" => set("oversubscribe", value.clone()),
                other => tracing::debug!(key = %dpm_pmi::sanitize::escape(other), "PMIx spawn info key not used by dpm"),
            }
        }
        let env: Vec<&str> = app.env.iter().map(String::as_str).filter(|e| carried(e)).collect();
        if !env.is_empty() {
            set("env", env.join("\n"));
        }
        let args = app.argv.get(1..).unwrap_or_default().to_vec();
        commands.push(SpawnCommand { exe: app.cmd.clone(), args, maxprocs, info });
    }
    Ok(commands)
}

impl PmixFront {
    /// `PMIx_Spawn` by `rank` of `nspace`: up to the launcher's spawn path.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn spawn(
        &mut self,
        fx: &mut (impl NodeEffects + ?Sized),
        requests: &mut Requests,
        nspace: &str,
        rank: u32,
        apps: &[PmixApp],
        job_info: &[(String, String)],
        req: PmixRequest,
    ) {
        let Some(&job) = self.by_nspace.get(nspace) else {
            return fx.pmix_answer(req, PmixAnswer::Spawned(PMIX_ERROR, String::new()));
        };
        let commands = match spawn_commands(apps, job_info) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(%nspace, rank, "PMIx spawn refused: {}", dpm_pmi::sanitize::escape(&e));
                return fx.pmix_answer(req, PmixAnswer::Spawned(PMIX_ERR_NOT_SUPPORTED, String::new()));
            }
        };
        tracing::debug!(%nspace, rank, ?commands, "PMIx spawn");
        let request = requests.open(Asker::Pmix);
        self.spawns.insert(request, req);
        let preput = vec![(PARENT_RANK_KEY.to_string(), rank.to_string())];
        fx.send_up(ToLauncher::Spawn { request, job, rank: Rank(rank), preput, commands });
    }

    /// The launcher's answer to [`Self::spawn`]: the child's namespace.
    pub(in crate::node) fn spawn_done(&mut self, fx: &mut (impl NodeEffects + ?Sized), request: RequestId, result: Result<String, String>) {
        let Some(req) = self.spawns.remove(&request) else {
            if self.late_spawns.remove(&request) {
                match result {
                    Ok(nspace) => {
                        tracing::warn!(%nspace, "a PMIx spawn answered after its PMIX_TIMEOUT: the caller got PMIX_ERR_TIMEOUT, the child job runs on")
                    }
                    Err(e) => tracing::info!("a PMIx spawn that timed out failed: {}", dpm_pmi::sanitize::escape(&e)),
                }
            }
            return;
        };
        let answer = match result {
            Ok(nspace) => PmixAnswer::Spawned(PMIX_SUCCESS, nspace),
            Err(e) => {
                tracing::info!("PMIx spawn failed: {}", dpm_pmi::sanitize::escape(&e));
                PmixAnswer::Spawned(PMIX_ERROR, String::new())
            }
        };
        fx.pmix_answer(req, answer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(info: &[(&str, &str)]) -> PmixApp {
        PmixApp {
            cmd: "./child".into(),
            argv: vec!["./child".into(), "a b".into()],
            env: vec!["OMPI_PARENT=x".into(), "bogus".into(), "A=1=2".into(), "B=two\nlines".into(), "OMPI_MCA_btl_sm_backing_directory=/dev/shm/p".into()],
            cwd: Some("/tmp".into()),
            maxprocs: 4,
            info: info.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }

    fn get<'a>(c: &'a SpawnCommand, key: &str) -> Option<&'a str> {
        c.info.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    #[test]
    fn apps_become_spawn_commands_in_dpm_spelling() {
        let job = vec![("pmix.mapby".to_string(), "ppr:2:node:OVERSUBSCRIBE".to_string()), ("pmix.host".to_string(), "n0".to_string())];
        let cmds = spawn_commands(&[app(&[("pmix.host", "n1,n2"), ("pmix.wdir", "/w"), ("pmix.notify.comp", "true")])], &job).unwrap();
        let [c] = &cmds[..] else { panic!("{cmds:?}") };
        assert_eq!((c.exe.as_str(), c.args.as_slice(), c.maxprocs), ("./child", &["a b".to_string()][..], 4));
        assert_eq!(get(c, "host"), Some("n1,n2"), "the app's key wins over the job's");
        assert_eq!(get(c, "wdir"), Some("/w"), "PMIX_WDIR wins over the app's cwd");
        assert_eq!((get(c, "map-by"), get(c, "oversubscribe")), (Some("ppr"), Some("true")));
        assert_eq!(get(c, "env"), Some("OMPI_PARENT=x\nA=1=2"), "entries that are not NAME=VALUE are dropped");
        assert_eq!(c.info.len(), 5, "{:?}", c.info);
        let plain = spawn_commands(&[PmixApp { env: vec![], info: vec![], ..app(&[]) }], &[]).unwrap();
        assert_eq!(plain[0].info, vec![("wdir".to_string(), "/tmp".to_string())]);
    }

    #[test]
    fn unsupported_requests_are_refused_with_a_reason() {
        let e = spawn_commands(&[app(&[("pmix.mapby", "core")])], &[]).unwrap_err();
        assert!(e.contains("'core'") && e.contains("ppr"), "{e}");
        assert!(spawn_commands(&[PmixApp { maxprocs: 0, ..app(&[]) }], &[]).is_err());
        assert!(spawn_commands(&[PmixApp { maxprocs: -3, ..app(&[]) }], &[]).is_err());
        assert!(spawn_commands(&[], &[]).is_err());
        let cmds = spawn_commands(&[app(&[("pmix.mapby", "node:NOOVERSUBSCRIBE")])], &[]).unwrap();
        assert_eq!(get(&cmds[0], "oversubscribe"), Some("false"));
    }
}
