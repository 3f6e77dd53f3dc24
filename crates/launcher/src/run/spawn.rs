//! `MPI_Comm_spawn[_multiple]`, the parts that are plain functions: plan
//! a request and place it with the node table's placer (a `soft` spawn: as
//! many as fit; pooled jobs give their slots up), make its job, and say when
//! the parent is answered. The run ([`super::Run`]'s `spawn`) strings them
//! together with warm spawn's claim and miss (`warm`). A parent job of one
//! process is answered as soon as the spawn is placed, before its children
//! start ([`answers_before_start`]); a parent of several, under the
//! `continue` policy and for PMIx, once every child has started, or with
//! `rc≠0` on the first error (`Jobs::started`, `Jobs::launch_failed`, the
//! run's `check_done`).

use dpm_kvs::{JobId, KeyValues, NodeId, Rank};
use dpm_proto::{LaunchJob, PmiMode, RequestId, SpawnCommand};

use super::effects::with_pool;
use super::jobs::Jobs;
use super::{FailurePolicy, RunEffects, Settings};
use crate::kvs_root::KvsRoot;
use crate::node_table::{PlaceError, Reservation};
use crate::plan::PlannedJob;
use crate::spawn::{plan_spawn, SpawnPlan};

/// A spawn request from rank `rank` of `parent`, on `node`: answered once,
/// with [`dpm_proto::ToDaemon::SpawnDone`] for `request`.
#[derive(Clone, Debug)]
pub(super) struct SpawnAsk {
    pub node: NodeId,
    pub request: RequestId,
    pub parent: JobId,
    pub rank: Rank,
    pub preput: KeyValues,
    pub commands: Vec<SpawnCommand>,
}

/// Whether a planned and placed spawn is answered before its children
/// start, as Hydra's `mpiexec` answers before its proxy forks them.
///
/// Measured (docs/benchmarks.md, "Spawn loop"): answered after the start,
/// the parent sits blocked in its PMI read while the child is forked and
/// exec'd, its CPU idle, and the kernel's fork/exec balancing places the
/// child there; the parent then wakes next to the child and its busy-poll
/// in `MPI_Comm_spawn`'s accept takes the CPU the child's `MPI_Init`
/// needs (`perf sched`: the second child of a taskmaster window waited
/// ~40 ms per start against ~20 under Hydra). Answered first, the parent
/// is polling on its own CPU when the child is placed.
///
/// The program, `wdir`, slots and universe size are checked in the plan,
/// before this answer, so those errors still come back as the spawn's.
/// A child that cannot start after it (a file that is not a program, the
/// process limit, a program missing on another node) is a failure of the
/// run under the `end` policy, as a child's crash is: the run ends with
/// its error, nothing waits. Under `continue` the run must go on, and the
/// parent, blocked in its accept, would wait for ever: there the answer
/// waits for every child's start, and such a child is the spawn's error.
/// PMIx spawns keep the late answer too: Open MPI's parent connects to
/// the new namespace at once, which its node must have registered.
///
/// Only for a parent job of one process. With two, MPICH 5.0.2 (UCX) has
/// a race in a tight spawn loop: in the next spawn's accept a non-root
/// parent rank connects to the previous child while it finishes
/// (`mm_posix.c: open(/proc/<its pid>/fd/14)`: ENOENT, the spawn fails).
/// It happens under every launcher — 1 of 150 two-rank taskmaster runs
/// under Hydra, 2 of 120 under dpm answering after the start — but 4 of
/// 60 answered this early; a one-process parent never failed (0 of 120).
pub(super) fn answers_before_start(jobs: &Jobs, policy: FailurePolicy, settings: &Settings, parent: JobId) -> bool {
    let single = jobs.get(parent).is_some_and(|j| j.size() == 1);
    single && policy == FailurePolicy::EndRun && settings.pmi_mode != PmiMode::Pmix
}

/// The job a spawn by `parent` launches: a new job id and kvsname, the
/// parent's KVS design, placed as `slots` says.
#[allow(clippy::too_many_arguments)]
pub(super) fn launch_of(
    settings: &Settings,
    kvs: &KvsRoot,
    fx: &mut dyn RunEffects,
    planned: PlannedJob,
    slots: &Reservation,
    parent: JobId,
    parent_kvs: String,
    preput: KeyValues,
) -> LaunchJob {
    let (job, kvsname) = fx.shared().new_job_id();
    let design = kvs.design(parent).unwrap_or_default();
    let job_plan = planned.into_launch(job, kvsname, settings.universe_size, slots.node_of().to_vec(), settings.pmi_mode, design);
    LaunchJob { spawner: Some(parent_kvs), preput, binding: Box::new(settings.binding.clone()), ..job_plan }
}

/// A spawn that is not made, and what the parent is told.
pub(super) struct Refused {
    pub(super) why: String,
    /// A `soft` spawn that found no room: a normal answer, not a warning.
    pub(super) soft: bool,
}

/// Plan `commands` and place them: the planned job, its slots and the
/// spawn's error codes (a `soft` spawn that started fewer than it asked).
pub(super) fn plan_and_place(settings: &Settings, fx: &mut dyn RunEffects, commands: &[SpawnCommand]) -> Result<(PlannedJob, Reservation, Vec<i32>), Refused> {
    let refused = |why: String| Refused { why, soft: false };
    let plan = plan_spawn(&settings.spawn, fx.files(), commands).map_err(|e| refused(e.to_string()))?;
    let oversubscribe = plan.oversubscribe.unwrap_or(!settings.no_oversubscribe);
    let (slots, started) = match place(settings, fx, &plan, oversubscribe) {
        Ok(p) => p,
        // A `soft` spawn (any `soft` key, `1:1` too) asks for as many as
        // fit: none fitting is a normal answer (an elastic application
        // tries again later), not a warning; the parent still gets the error.
        Err(e) if commands.iter().any(|c| c.info.iter().any(|(k, _)| k == "soft")) && e.is_no_room() => return Err(Refused { why: e.to_string(), soft: true }),
        Err(e) => return Err(refused(e.to_string())),
    };
    let (planned, errcodes) = match started {
        Some(started) => {
            let asked = plan.maxprocs();
            if started != asked {
                tracing::info!("soft spawn: {} of {} processes started", started.iter().sum::<u32>(), asked.iter().sum::<u32>());
            }
            plan.started(&started)
        }
        None => (plan.job, Vec::new()),
    };
    Ok((planned, slots, errcodes))
}

/// Place a spawn with the node table's placer: `oversubscribe` as the run
/// and the spawn's info allow. Pooled jobs never take a slot a spawn
/// needs: while it does not fit in the free slots, the oldest pooled job
/// is killed and its slots given back at once.
/// A `soft` spawn is placed with as many processes as fit (the counts
/// started per command come back with the reservation), after pooled jobs
/// made room for all it asked for.
fn place(settings: &Settings, fx: &mut dyn RunEffects, plan: &SpawnPlan, oversubscribe: bool) -> Result<(Reservation, Option<Vec<u32>>), PlaceError> {
    let apps: Vec<usize> = plan.job.procs.iter().map(|p| p.app).collect();
    // The boot's slots as they are now, where the run's universe follows them.
    let universe = settings.spawn_universe(&fx.shared().nodes);
    // The pool's jobs made for this run first, then those kept for
    // later runs (a job being claimed is the run's: its spawn holds it).
    let owner = Some(settings.owner);
    while fx.shared().nodes.place_spawn(&apps, &plan.nodes, false, universe).is_err() {
        if !with_pool(fx, |pool, nodes, pfx| pool.drop_oldest(pfx, nodes, owner)) {
            break;
        }
    }
    let nodes = &mut fx.shared().nodes;
    let (node_of, started) = if plan.is_soft() {
        nodes.place_spawn_soft(&plan.counts, &plan.nodes, oversubscribe, universe).map(|(node_of, started)| (node_of, Some(started)))?
    } else {
        (nodes.place_spawn(&apps, &plan.nodes, oversubscribe, universe)?, None)
    };
    Ok((nodes.reserve(&node_of)?, started))
}
