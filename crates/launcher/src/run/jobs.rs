//! A run's jobs rank by rank: starts, launch failures, exits, aborts, lost
//! nodes, fences, names, and the end of a job. How a failure is judged and
//! what it does to the run is [`super::verdict`]'s.

use dpm_kvs::{JobId, NodeId, Rank};
use dpm_proto::{ExitStatus, NameRequest, PmiProgress, RequestId, ToDaemon};

use super::kvsname::open_mpi_port_family;
use super::{describe_rank, open_mpi_family, signal_name, FailurePolicy, Run, RunEffects};
use dpm_kvs::FenceTally;
use dpm_proto::LaunchJob;

use crate::kvs_root::KvsRoot;
use crate::node_table::{NodeState, Reservation};

/// How a rank ended, from the launcher's point of view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum RankEnd {
    Ok,
    /// The reason it failed, and the exit status dpm reports for it.
    Failed {
        why: String,
        code: i32,
    },
    /// Killed by dpm while ending the job.
    Terminated,
}

#[derive(Clone, Debug)]
pub(super) struct RankState {
    pub(super) pid: Option<u32>,
    pub(super) end: Option<RankEnd>,
}

pub(super) struct Job {
    pub(super) kvsname: String,
    pub(super) fence: FenceTally,
    pub(super) ranks: Vec<RankState>,
    /// Nodes hosting ranks of this job.
    pub(super) daemons: Vec<NodeId>,
    /// The node of each rank, and the slots they hold.
    pub(super) slots: Reservation,
    /// Set once the job is being torn down (failure, abort, signal, timeout).
    pub(super) killing: bool,
    /// A spawned job (the failure policy may let it fail alone).
    pub(super) spawned: bool,
    /// It failed alone (policy): when its own teardown began.
    pub(super) alone_since: Option<u64>,
    /// For a spawned job answered late (`spawn::answers_before_start`): the
    /// parent's pending spawn request, answered once every child has started
    /// (or one could not be).
    pub(super) spawn_request: Option<(NodeId, RequestId)>,
    /// A warm-spawn pooled job claimed, its claim not confirmed yet: its
    /// output is held, its end is nobody's business (`warm`).
    pub(super) pool: bool,
    /// The spawn answer's error codes: empty unless a `soft` spawn started
    /// fewer processes than it asked for.
    pub(super) spawn_errcodes: Vec<i32>,
    /// The app of each rank (a PMIx connect's job map).
    pub(super) appnums: Vec<i64>,
    /// Launched with `pmix_watch`: each app's program as the user wrote
    /// it, until a node's watch trips (`Run::watch_tripped`).
    pub(super) watched: Option<Vec<String>>,
}

impl Job {
    /// A job of `launch` placed as `slots` says, none of its ranks started.
    pub(super) fn new(launch: &LaunchJob, slots: Reservation, spawn_request: Option<(NodeId, RequestId)>) -> Job {
        let mut daemons = slots.node_of().to_vec();
        daemons.sort_unstable();
        daemons.dedup();
        Job {
            kvsname: launch.kvsname.clone(),
            fence: FenceTally::new(launch.size),
            ranks: vec![RankState { pid: None, end: None }; launch.size as usize],
            daemons,
            slots,
            killing: false,
            spawned: launch.spawner.is_some(),
            alone_since: None,
            spawn_request,
            pool: false,
            spawn_errcodes: Vec::new(),
            appnums: launch.appnums.clone(),
            watched: launch.pmix_watch.then(|| launch.apps.iter().map(|a| a.argv.first().unwrap_or(&a.exe).clone()).collect()),
        }
    }

    pub(super) fn done(&self) -> bool {
        self.ranks.iter().all(|r| r.end.is_some())
    }

    /// Record how rank `r` ended (the first word counts); its slot is free again.
    pub(super) fn end_rank(&mut self, r: usize, end: RankEnd) {
        if self.ranks.get(r).is_some_and(|s| s.end.is_none()) {
            self.slots.release(r);
            self.ranks[r].end = Some(end);
        }
    }

    pub(super) fn node(&self, rank: Rank) -> Option<NodeId> {
        self.slots.node(rank.0 as usize)
    }
}

impl Run {
    /// A rank has a pid; a spawn answered late (`spawn::answers_before_start`)
    /// is answered once every child has one.
    pub(super) fn started(&mut self, fx: &mut dyn RunEffects, job: JobId, rank: Rank, pid: u32) {
        let Some(j) = self.jobs.get_mut(&job) else { return };
        if let Some(r) = j.ranks.get_mut(rank.0 as usize) {
            r.pid = Some(pid);
        }
        if j.spawn_request.is_none() || j.ranks.iter().any(|r| r.pid.is_none()) {
            return;
        }
        if let Some((node, request)) = j.spawn_request.take() {
            fx.send(node, ToDaemon::SpawnDone { request, result: Ok(j.kvsname.clone()), errcodes: std::mem::take(&mut j.spawn_errcodes) });
        }
    }

    pub(super) fn launch_failed(&mut self, fx: &mut dyn RunEffects, job: JobId, rank: Rank, error: String, errno: i32) {
        if self.jobs.get(&job).is_some_and(|j| j.pool) {
            self.end_unstarted(job);
            self.warm_ended(fx, job, rank, &format!("could not be started ({})", dpm_pmi::sanitize::escape(&error)), true);
            return;
        }
        let who = describe_rank(job, rank, None, &self.host(fx, job, rank));
        if let Some((node, request)) = self.jobs.get_mut(&job).and_then(|j| j.spawn_request.take()) {
            // A spawn that cannot start all its processes fails as a whole:
            // MPI_Comm_spawn returns an error in the parent, the run goes on.
            fx.send(node, ToDaemon::SpawnDone { request, result: Err(format!("{who} could not be started: {error}")), errcodes: Vec::new() });
            // Its children that did start are killed with it; their deaths
            // are not failures of the run.
            let now = fx.now_micros();
            if let Some(j) = self.jobs.get_mut(&job) {
                j.alone_since.get_or_insert(now);
            }
            self.end_unstarted(job);
            self.kill_job(fx, job, libc::SIGKILL);
        } else {
            let code = match errno {
                libc::ENOENT => 127,
                libc::EACCES | libc::ENOEXEC | libc::EISDIR | libc::EPERM => 126,
                _ => 1,
            };
            self.verdict.record(code, format!("{who} could not be started: {error}"), Some((job, rank)));
            self.end_unstarted(job);
            // A spawned job answered before its start (`spawn::answers_before_start`)
            // has a parent waiting in its accept: like a failed rank, this ends
            // every job of the run.
            self.kill_all(fx, libc::SIGKILL);
        }
        self.check_done(fx, job);
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn exited(&mut self, fx: &mut dyn RunEffects, job: JobId, rank: Rank, pid: u32, status: ExitStatus, pmi: PmiProgress, at: u64) {
        if self.warm_ended(fx, job, rank, &format!("ended ({status:?})"), true) {
            return;
        }
        fx.flush_output(job, rank);
        let host = self.host(fx, job, rank);
        let interrupted = self.verdict.interrupted.is_some() || self.verdict.timed_out;
        let Some(j) = self.jobs.get_mut(&job) else { return };
        // A process that ended before the teardown began was not ended by it,
        // even if its exit is read afterwards (the reads of several nodes and
        // connections race): judge it as a failure of its own.
        let before_teardown = self.verdict.teardown_at.or(j.alone_since).is_none_or(|t| at < t);
        let killing = j.killing && !before_teardown;
        let who = describe_rank(job, rank, Some(pid), &host);
        let end = match status {
            ExitStatus::Code(0) if pmi == PmiProgress::Active && !killing => {
                RankEnd::Failed { why: format!("{who} exited with code 0 without calling MPI_Finalize (PMI finalize)"), code: 1 }
            }
            ExitStatus::Code(0) => RankEnd::Ok,
            _ if killing || interrupted => RankEnd::Terminated,
            ExitStatus::Code(c) => RankEnd::Failed { why: format!("{who} exited with code {c}"), code: c },
            ExitStatus::Signal(s) => RankEnd::Failed { why: format!("{who} was killed by signal {s} ({})", signal_name(s)), code: 128 + s },
        };
        j.end_rank(rank.0 as usize, end.clone());
        if let RankEnd::Failed { why, code } = end {
            if self.policy == FailurePolicy::KeepOthers {
                tracing::warn!("{why}; the other ranks run on (-disable-auto-cleanup)");
                self.verdict.record_exit(code, why, (job, rank), at, fx.now_micros());
            } else if self.policy.ends_run(j.spawned) {
                self.verdict.record_exit(code, why, (job, rank), at, fx.now_micros());
                // Jobs of one run are connected (spawn, connect/accept): a failure
                // in any of them would leave the others waiting, so all end.
                self.kill_all(fx, libc::SIGKILL);
            } else {
                self.fail_alone(fx, job, &why);
            }
        }
        self.check_done(fx, job);
    }

    pub(super) fn abort(&mut self, fx: &mut dyn RunEffects, job: JobId, rank: Rank, code: i32, message: String) {
        if self.warm_ended(fx, job, rank, &format!("called MPI_Abort ({code})"), false) {
            return;
        }
        let host = self.host(fx, job, rank);
        let j = self.jobs.get(&job);
        let pid = j.and_then(|j| j.ranks.get(rank.0 as usize)).and_then(|r| r.pid);
        let spawned = j.is_some_and(|j| j.spawned);
        let who = describe_rank(job, rank, pid, &host);
        // PMI-2 always says -1; an exit status is 0..255.
        let status = code & 0xff;
        let detail = if message.is_empty() || message == "abort" { String::new() } else { format!(": {message}") };
        let why = format!("{who} called MPI_Abort with exit code {code}{detail}");
        if !self.policy.ends_run(spawned) {
            return self.fail_alone(fx, job, &why);
        }
        self.verdict.record_abort(status, why, (job, rank));
        // MPI_Abort ends the run: the aborting job's communicators may span
        // spawned and connected jobs.
        self.kill_all(fx, libc::SIGKILL);
    }

    /// The failure policy keeps the run going: this job alone ends.
    fn fail_alone(&mut self, fx: &mut dyn RunEffects, job: JobId, why: &str) {
        let now = fx.now_micros();
        let Some(j) = self.jobs.get_mut(&job) else { return };
        if j.alone_since.is_none() {
            tracing::warn!(%job, "{why}; the job is ended, the run goes on (failure policy)");
            j.alone_since = Some(now);
        }
        self.kill_job(fx, job, libc::SIGKILL);
    }

    /// Ranks that were never started will never report: end them here.
    fn end_unstarted(&mut self, job: JobId) {
        let Some(j) = self.jobs.get_mut(&job) else { return };
        for r in 0..j.ranks.len() {
            if j.ranks[r].pid.is_none() {
                j.end_rank(r, RankEnd::Terminated);
            }
        }
    }

    /// A daemon's link broke: its processes are gone — and those of every
    /// node below it in the tree — and the jobs using them cannot go on.
    pub(super) fn node_lost(&mut self, fx: &mut dyn RunEffects, node: NodeId, error: String) {
        let nodes = &fx.shared().nodes;
        if !nodes.contains(node) {
            return;
        }
        let host = nodes.host(node).to_string();
        self.node_lost_because(fx, node, format!("node {} ({host}) was lost: {error}", node.0));
    }

    /// `node` and its subtree are gone; `summary` says why (the run's
    /// failure, if it is the first).
    pub(super) fn node_lost_because(&mut self, fx: &mut dyn RunEffects, node: NodeId, summary: String) {
        let nodes = &mut fx.shared().nodes;
        if !nodes.contains(node) {
            return;
        }
        let lost = nodes.subtree(node);
        for &n in &lost {
            nodes.set_state(n, NodeState::Lost);
        }
        super::pool::with_pool(fx, |pool, pfx| pool.on_nodes_lost(pfx, &lost));
        let affected: Vec<JobId> = self.jobs.iter().filter(|(_, j)| j.daemons.iter().any(|d| lost.contains(d))).map(|(id, _)| *id).collect();
        if affected.is_empty() && self.jobs.is_empty() {
            return; // the run is over; daemons going away is expected
        }
        self.verdict.record_node_lost(summary);
        for job in &affected {
            if let Some(j) = self.jobs.get_mut(job) {
                for r in 0..j.ranks.len() {
                    if j.node(Rank(r as u32)).is_some_and(|n| lost.contains(&n)) {
                        j.end_rank(r, RankEnd::Terminated);
                    }
                }
                j.daemons.retain(|d| !lost.contains(d));
            }
        }
        self.kill_all(fx, libc::SIGKILL);
        for job in affected {
            self.check_done(fx, job);
        }
    }

    pub(super) fn fence_in(&mut self, fx: &mut dyn RunEffects, job: JobId, epoch: u64, count: u32, puts: Vec<(String, String)>) {
        let Some(j) = self.jobs.get_mut(&job) else {
            // Under tree and direct the puts stay at the root even so.
            let (_, out) = self.kvs.fence_puts(job, epoch, puts);
            return super::send_all(fx, out);
        };
        serve_fence(&mut self.kvs, j, job, epoch, count, puts, &mut |node, msg| fx.send(node, msg));
    }

    /// A name-service request from `node`, answered there at once — except
    /// a waiting lookup of a name not yet published, answered by the publish
    /// (with the port) or the asking job's end (not found).
    pub(super) fn name_op(&mut self, fx: &mut dyn RunEffects, node: NodeId, request: RequestId, job: JobId, op: NameRequest) {
        tracing::trace!(%job, ?op, "name service");
        let result = match op {
            NameRequest::Publish { service, port } => match fx.shared().names.publish(service, port.clone(), job) {
                Ok(woken) => {
                    for (at, waiting) in woken {
                        fx.send(at, ToDaemon::NameDone { request: waiting, result: Ok(Some(port.clone())) });
                    }
                    Ok(None)
                }
                Err(e) => Err(e.to_string()),
            },
            NameRequest::Unpublish { service } => fx.shared().names.unpublish(&service).map(|()| None).map_err(|e| e.to_string()),
            NameRequest::Lookup { service } => fx.shared().names.lookup(&service).map(|p| Some(p.to_string())).map_err(|e| e.to_string()),
            // Open MPI's connect/accept waits for names of the peer
            // process; one whose job has ended will never publish.
            NameRequest::LookupWait { service }
                if fx.shared().names.lookup(&service).is_err() && open_mpi_port_family(&service).is_some_and(|f| !fx.shared().open_mpi_family_live(f)) =>
            {
                Err(format!("the process that would publish '{}' belongs to a job that has ended", dpm_pmi::sanitize::escape(&service)))
            }
            NameRequest::LookupWait { service } => match fx.shared().names.lookup_or_park(&service, (node, request), job) {
                Ok(None) => return tracing::debug!(%job, service = %dpm_pmi::sanitize::escape(&service), "lookup waits for its name"),
                other => other.map_err(|e| e.to_string()),
            },
        };
        fx.send(node, ToDaemon::NameDone { request, result });
    }

    /// A job whose every rank has ended is over: its daemons forget it, its
    /// names are withdrawn, its slots given back (its reservation dropped).
    pub(super) fn check_done(&mut self, fx: &mut dyn RunEffects, job: JobId) {
        if !self.jobs.get(&job).is_some_and(|j| j.done()) {
            return;
        }
        let Some(j) = self.jobs.remove(&job) else { return };
        self.kvs.remove_job(job);
        tracing::debug!(%job, "job ended");
        if let Some((node, request)) = j.spawn_request {
            fx.send(node, ToDaemon::SpawnDone { request, result: Err(format!("{job} ended before all its processes started")), errcodes: Vec::new() });
        }
        for &d in &j.daemons {
            fx.send(d, ToDaemon::Forget { job });
        }
        self.written.retain(|(_, j), _| *j != job);
        fx.route(job, false);
        let shared = fx.shared();
        shared.jobs.remove(&job);
        let withdrawn = shared.names.withdraw_job(job);
        if withdrawn > 0 {
            tracing::debug!(%job, withdrawn, "names withdrawn with their job");
        }
        let cancelled = shared.names.cancel_waits(job);
        for (node, request) in cancelled {
            fx.send(node, ToDaemon::NameDone { request, result: Err(format!("{job} ended while its lookup waited")) });
        }
        // Open MPI's rendezvous names of the job's processes: never published now.
        let family = open_mpi_family(&j.kvsname);
        let orphaned = fx.shared().names.cancel_services(|s| open_mpi_port_family(s) == Some(family));
        for (node, request) in orphaned {
            fx.send(node, ToDaemon::NameDone { request, result: Err(format!("{job}, whose process would publish the name, ended")) });
        }
        self.warm_parent_ended(fx, job);
        self.connects_job_ended(fx, job);
        if j.spawned && !j.pool {
            self.warm_topup(fx);
        }
        if j.alone_since.is_some() || j.pool {
            return; // its failure was its own (or a pooled job's); its ranks are nobody's business
        }
        let failed = self.verdict.failed_rank();
        let terminated = (0..j.ranks.len()).filter(|&r| j.ranks[r].end == Some(RankEnd::Terminated) && failed != Some((job, Rank(r as u32)))).count();
        if terminated > 0 {
            self.verdict.terminated.push((job, terminated));
        }
    }
}

/// A fence arrival of `job` (`j`, its KVS root state in `kvs`): tallied;
/// once complete, its delta goes down to the top of each subtree running
/// the job (the run's jobs and the pool's kept ones alike).
#[allow(clippy::too_many_arguments)]
pub(super) fn serve_fence(
    kvs: &mut KvsRoot,
    j: &mut Job,
    job: JobId,
    epoch: u64,
    count: u32,
    puts: Vec<(String, String)>,
    send: &mut dyn FnMut(NodeId, ToDaemon),
) {
    // Under tree and direct the puts stay here instead of going down.
    let (puts, out) = kvs.fence_puts(job, epoch, puts);
    for (node, msg) in out {
        send(node, msg);
    }
    match j.fence.arrive(epoch, count, puts) {
        Ok(None) => {}
        Ok(Some(done)) => {
            tracing::debug!(%job, epoch = done.epoch, keys = done.delta.len(), "fence complete");
            // To the top of each subtree running the job; the daemons
            // pass it down (a job the KVS root does not know: to each node).
            let targets = kvs.fence_targets(job).unwrap_or_else(|| j.daemons.clone());
            if let Some((&last, rest)) = targets.split_last() {
                for &d in rest {
                    send(d, ToDaemon::FenceDone { job, epoch: done.epoch, delta: done.delta.clone() });
                }
                send(last, ToDaemon::FenceDone { job, epoch: done.epoch, delta: done.delta });
            }
        }
        Err(e) => tracing::error!(%job, "fence protocol error: {e}"),
    }
}
