//! `MPI_Comm_spawn[_multiple]`: plan the request, place it with the node
//! table's placer (a `soft` spawn: as many as fit), launch it as a new job
//! of the run — or claim a pooled job of the same shape (`warm`). A parent job
//! of one process is answered as soon as the spawn is placed, before its
//! children start (`Run::answers_before_start`); a parent of several, under
//! the `continue` policy and for PMIx, once every child has started, or with
//! `rc≠0` on the first error (`jobs::started`, `jobs::launch_failed`,
//! `jobs::check_done`).

use dpm_kvs::{JobId, KeyValues, NodeId, Rank};
use dpm_proto::{LaunchJob, PmiMode, RequestId, SpawnCommand, ToDaemon};

use super::warm::Miss;
use super::{FailurePolicy, Run, RunEffects};
use crate::node_table::Reservation;
use crate::plan::PlannedJob;
use crate::spawn::plan_spawn;

/// A spawn request from rank `rank` of `parent`, on `node`: answered once,
/// with [`ToDaemon::SpawnDone`] for `request`.
#[derive(Clone, Debug)]
pub(super) struct SpawnAsk {
    pub node: NodeId,
    pub request: RequestId,
    pub parent: JobId,
    pub rank: Rank,
    pub preput: KeyValues,
    pub commands: Vec<SpawnCommand>,
}

impl Run {
    pub(super) fn spawn(&mut self, fx: &mut dyn RunEffects, ask: SpawnAsk) {
        let (parent_node, request, parent, rank) = (ask.node, ask.request, ask.parent, ask.rank);
        let Some(parent_kvs) = self.jobs.get(&parent).map(|j| j.kvsname.clone()) else { return };
        let refuse = |fx: &mut dyn RunEffects, msg: String| {
            tracing::warn!(%parent, rank = rank.0, "spawn refused: {}", dpm_pmi::sanitize::escape(&msg));
            fx.send(parent_node, ToDaemon::SpawnDone { request, result: Err(msg), errcodes: Vec::new() });
        };
        if self.verdict.ending() {
            return fx.send(parent_node, ToDaemon::SpawnDone { request, result: Err("the run is ending; no new processes".into()), errcodes: Vec::new() });
        }
        let (shape, choice) = self.shape(fx, parent, &ask.commands);
        let want = self.warm_wanted(choice);
        // A claim answers the parent once the pooled job's nodes confirm it
        // (`warm::warm_claimed`), or makes this spawn again if it fails.
        let ask = match want {
            0 => ask,
            _ => match self.warm_claim(fx, &shape, ask, want) {
                Some(missed) => missed,
                None => return,
            },
        };
        let (preput, commands) = (ask.preput, ask.commands);
        let plan = match plan_spawn(&self.settings.spawn, fx.files(), &commands) {
            Ok(p) => p,
            Err(e) => return refuse(fx, e.to_string()),
        };
        let oversubscribe = plan.oversubscribe.unwrap_or(!self.settings.no_oversubscribe);
        let (slots, started) = match self.place(fx, &plan, oversubscribe) {
            Ok(p) => p,
            // A `soft` spawn (any `soft` key, `1:1` too) asks for as many as
            // fit: none fitting is a normal answer (an elastic application
            // tries again later), not a warning; the parent still gets the
            // error.
            Err(e) if commands.iter().any(|c| c.info.iter().any(|(k, _)| k == "soft")) && e.is_no_room() => {
                tracing::info!(%parent, rank = rank.0, "soft spawn: no room: {e}");
                return fx.send(parent_node, ToDaemon::SpawnDone { request, result: Err(e.to_string()), errcodes: Vec::new() });
            }
            Err(e) => return refuse(fx, e.to_string()),
        };
        let (planned, errcodes) = match started {
            Some(started) => {
                let asked = plan.maxprocs();
                if started != asked {
                    tracing::info!(%parent, "soft spawn: {} of {} processes started", started.iter().sum::<u32>(), asked.iter().sum::<u32>());
                }
                plan.started(&started)
            }
            None => (plan.job, Vec::new()),
        };
        let mut launch = self.spawn_launch(fx, planned, &slots, parent, parent_kvs, preput);
        // The first miss of a shape fills its pool once its own children are
        // up (`warm::Priming`); a shape that repeats refills at once.
        let miss = (want > 0).then(|| self.warm_miss(fx, &shape, parent));
        launch.report_parent_asks = miss == Some(Miss::Prime);
        let (job, size) = (launch.job, launch.size);
        tracing::debug!(%parent, %job, size = launch.size, "spawn");
        if self.answers_before_start(parent) {
            fx.send(parent_node, ToDaemon::SpawnDone { request, result: Ok(launch.kvsname.clone()), errcodes });
            self.start_job(fx, launch, slots, None);
        } else {
            self.start_job(fx, launch, slots, Some((parent_node, request)));
            // Answered once every child has started (`jobs::started`).
            if let Some(j) = self.jobs.get_mut(&job) {
                j.spawn_errcodes = errcodes;
            }
        }
        match miss {
            Some(Miss::Prime) => self.warm_prime_after(job, size, shape, want, parent),
            Some(Miss::Refill) => self.warm_fill(fx, &shape, want, parent),
            Some(Miss::Remember) | None => {}
        }
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
    fn answers_before_start(&self, parent: JobId) -> bool {
        let single = self.jobs.get(&parent).is_some_and(|j| j.ranks.len() == 1);
        single && self.policy == FailurePolicy::EndRun && self.settings.pmi_mode != PmiMode::Pmix
    }

    /// The job a spawn by `parent` launches: a new job id and kvsname, the
    /// parent's KVS design, placed as `slots` says.
    pub(super) fn spawn_launch(
        &self,
        fx: &mut dyn RunEffects,
        planned: PlannedJob,
        slots: &Reservation,
        parent: JobId,
        parent_kvs: String,
        preput: KeyValues,
    ) -> LaunchJob {
        let (job, kvsname) = fx.shared().new_job_id();
        let design = self.kvs.design(parent).unwrap_or_default();
        let job_plan = planned.into_launch(job, kvsname, self.settings.universe_size, slots.node_of().to_vec(), self.settings.pmi_mode, design);
        LaunchJob { spawner: Some(parent_kvs), preput, binding: Box::new(self.settings.binding.clone()), ..job_plan }
    }
}
