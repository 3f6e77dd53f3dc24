//! One job's record: its ranks and how each ended, its placement and
//! slots, its fence tally, and the spawn answer it owes. A plain value held
//! by its one owner — the run's job table ([`super::jobs::Jobs`]) or, while
//! it is pooled and unclaimed, the tree's [`super::Pool`] — which moves it
//! whole at a claim.

use dpm_kvs::{FenceTally, JobId, NodeId, Rank};
use dpm_proto::{LaunchJob, RequestId, ToDaemon};

use crate::kvs_root::KvsRoot;
use crate::node_table::{NodeTable, Reservation};

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
struct RankState {
    pid: Option<u32>,
    end: Option<RankEnd>,
    /// It waits in a fence a dead rank can never join (`-disable-auto-cleanup`).
    stuck: bool,
}

/// See the module documentation.
pub(super) struct Job {
    kvsname: String,
    fence: FenceTally,
    ranks: Vec<RankState>,
    /// Nodes hosting ranks of this job.
    daemons: Vec<NodeId>,
    /// The node of each rank, and the slots they hold.
    slots: Reservation,
    /// Set once the job is being torn down (failure, abort, signal, timeout).
    killing: bool,
    /// A spawned job (the failure policy may let it fail alone).
    spawned: bool,
    /// It failed alone (policy): when its own teardown began.
    alone_since: Option<u64>,
    /// For a spawned job answered late (`spawn::answers_before_start`): the
    /// parent's pending spawn request, answered once every child has started
    /// (or one could not be).
    spawn_request: Option<(NodeId, RequestId)>,
    /// A warm-spawn pooled job claimed, its claim not confirmed yet: its
    /// output is held, its end is nobody's business (`warm`).
    pool: bool,
    /// The spawn answer's error codes: empty unless a `soft` spawn started
    /// fewer processes than it asked for.
    spawn_errcodes: Vec<i32>,
    /// The app of each rank (a PMIx connect's job map).
    appnums: Vec<i64>,
    /// Launched with `pmix_watch`: each app's program as the user wrote
    /// it, until a node's watch trips ([`Job::take_watched`]).
    watched: Option<Vec<String>>,
    /// Each app's program (resolved path) and the app of each rank: the
    /// MPIR table's `executable_name`.
    programs: Vec<String>,
    app_of: Vec<u32>,
    /// Launched held for a debugger (`LaunchJob::hold`), not continued yet.
    held: bool,
    /// Every rank started and the run said so ([`super::RunEffects::procs_started`]).
    announced: bool,
}

impl Job {
    /// A job of `launch` placed as `slots` says, none of its ranks started.
    /// The slots its ranks hold (the tree's ledger counts them).
    pub(super) fn slots(&self) -> &Reservation {
        &self.slots
    }

    pub(super) fn new(launch: &LaunchJob, slots: Reservation, spawn_request: Option<(NodeId, RequestId)>) -> Job {
        let mut daemons = slots.node_of().to_vec();
        daemons.sort_unstable();
        daemons.dedup();
        Job {
            kvsname: launch.kvsname.clone(),
            fence: FenceTally::new(launch.size),
            ranks: vec![RankState { pid: None, end: None, stuck: false }; launch.size as usize],
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
            programs: launch.apps.iter().map(|a| a.exe.clone()).collect(),
            app_of: {
                let mut app_of = vec![0; launch.size as usize];
                for p in &launch.procs {
                    if let Some(a) = app_of.get_mut(p.rank.0 as usize) {
                        *a = p.app as u32;
                    }
                }
                app_of
            },
            held: launch.hold,
            announced: false,
        }
    }

    /// The program rank `rank` runs.
    pub(super) fn program(&self, rank: usize) -> &str {
        self.app_of.get(rank).and_then(|&a| self.programs.get(a as usize)).map_or("?", String::as_str)
    }

    /// Once, when every rank has a pid: whether its ranks are held (`None`:
    /// not every rank has started, or said already).
    pub(super) fn announce(&mut self) -> Option<bool> {
        if self.announced || !self.all_started() {
            return None;
        }
        self.announced = true;
        Some(self.held)
    }

    /// The job is continued (its held ranks got SIGCONT); `true` if it was held.
    pub(super) fn unhold(&mut self) -> bool {
        std::mem::take(&mut self.held)
    }

    /// How far its ranks are in their fences ([`FenceTally::progress`]).
    pub(super) fn fence_progress(&self) -> (u64, u32) {
        self.fence.progress()
    }

    pub(super) fn kvsname(&self) -> &str {
        &self.kvsname
    }

    /// The nodes hosting ranks of the job, sorted.
    pub(super) fn daemons(&self) -> &[NodeId] {
        &self.daemons
    }

    pub(super) fn size(&self) -> usize {
        self.ranks.len()
    }

    /// The node of each rank.
    pub(super) fn node_of(&self) -> &[NodeId] {
        self.slots.node_of()
    }

    pub(super) fn node(&self, rank: Rank) -> Option<NodeId> {
        self.slots.node(rank.0 as usize)
    }

    pub(super) fn appnums(&self) -> &[i64] {
        &self.appnums
    }

    pub(super) fn pid(&self, rank: Rank) -> Option<u32> {
        self.ranks.get(rank.0 as usize).and_then(|r| r.pid)
    }

    /// Ranks started and not ended, with their pids.
    pub(super) fn live(&self) -> Vec<(Rank, u32)> {
        self.ranks.iter().enumerate().filter(|(_, r)| r.end.is_none()).filter_map(|(i, r)| Some((Rank(i as u32), r.pid?))).collect()
    }

    pub(super) fn all_started(&self) -> bool {
        self.ranks.iter().all(|r| r.pid.is_some())
    }

    pub(super) fn done(&self) -> bool {
        self.ranks.iter().all(|r| r.end.is_some())
    }

    /// Ranks not ended yet, and the slots the job holds.
    pub(super) fn live_and_held(&self) -> (usize, usize) {
        (self.ranks.iter().filter(|r| r.end.is_none()).count(), self.slots.held())
    }

    pub(super) fn killing(&self) -> bool {
        self.killing
    }

    pub(super) fn spawned(&self) -> bool {
        self.spawned
    }

    /// A claimed pooled job whose claim is not confirmed yet.
    pub(super) fn pool(&self) -> bool {
        self.pool
    }

    pub(super) fn set_pool(&mut self, pool: bool) {
        self.pool = pool;
    }

    /// When it began to fail alone (the failure policy), if it did.
    pub(super) fn alone_since(&self) -> Option<u64> {
        self.alone_since
    }

    /// It fails alone from `now` on (the first time counts); `true` the first time.
    pub(super) fn fail_alone_at(&mut self, now: u64) -> bool {
        let first = self.alone_since.is_none();
        self.alone_since.get_or_insert(now);
        first
    }

    /// Rank `rank` has a pid: the pending spawn request and its error codes,
    /// once every rank has one.
    pub(super) fn started(&mut self, rank: Rank, pid: u32) -> Option<((NodeId, RequestId), Vec<i32>)> {
        if let Some(r) = self.ranks.get_mut(rank.0 as usize) {
            r.pid = Some(pid);
        }
        if self.spawn_request.is_none() || !self.all_started() {
            return None;
        }
        self.spawn_request.take().map(|at| (at, std::mem::take(&mut self.spawn_errcodes)))
    }

    /// The spawn request it answers (taken: answered now).
    pub(super) fn take_spawn_request(&mut self) -> Option<(NodeId, RequestId)> {
        self.spawn_request.take()
    }

    /// Answer `request` once every rank has started, with `errcodes`.
    pub(super) fn answer_when_started(&mut self, request: (NodeId, RequestId), errcodes: Vec<i32>) {
        self.spawn_request = Some(request);
        self.spawn_errcodes = errcodes;
    }

    /// Set the spawn answer's error codes (its request is answered once every rank started).
    pub(super) fn set_spawn_errcodes(&mut self, errcodes: Vec<i32>) {
        self.spawn_errcodes = errcodes;
    }

    /// The programs of the watched apps, once (`None`: not watched, or taken).
    pub(super) fn take_watched(&mut self) -> Option<Vec<String>> {
        self.watched.take()
    }

    /// How rank `r` ended, if it did.
    pub(super) fn rank_end(&self, r: usize) -> Option<&RankEnd> {
        self.ranks.get(r)?.end.as_ref()
    }

    /// Record how rank `r` ended (the first word counts); its slot is free
    /// again in `nodes`, the tree's ledger.
    pub(super) fn end_rank(&mut self, nodes: &mut NodeTable, r: usize, end: RankEnd) {
        if self.ranks.get(r).is_some_and(|s| s.end.is_none()) {
            nodes.release(&mut self.slots, r);
            self.ranks[r].end = Some(end);
        }
    }

    /// `waiting` wait in a fence a dead rank can never join: whether every
    /// rank of the job now waits so or has ended (nobody can finish).
    pub(super) fn stuck(&mut self, waiting: &[Rank]) -> bool {
        for r in waiting {
            if let Some(s) = self.ranks.get_mut(r.0 as usize) {
                s.stuck = true;
            }
        }
        self.ranks.iter().any(|s| s.stuck) && self.ranks.iter().all(|s| s.stuck || s.end.is_some())
    }

    /// Ranks that were never started will never report: ended here.
    pub(super) fn end_unstarted(&mut self, nodes: &mut NodeTable) {
        for r in 0..self.ranks.len() {
            if self.ranks[r].pid.is_none() {
                self.end_rank(nodes, r, RankEnd::Terminated);
            }
        }
    }

    /// The nodes `lost` are gone: its ranks there have ended. `false` if it
    /// had none there.
    pub(super) fn lose_nodes(&mut self, nodes: &mut NodeTable, lost: &[NodeId]) -> bool {
        if !self.daemons.iter().any(|d| lost.contains(d)) {
            return false;
        }
        for r in 0..self.ranks.len() {
            if self.node(Rank(r as u32)).is_some_and(|n| lost.contains(&n)) {
                self.end_rank(nodes, r, RankEnd::Terminated);
            }
        }
        self.daemons.retain(|d| !lost.contains(d));
        true
    }

    /// Every slot is free at once in `nodes` (a pooled or claimed job
    /// dropped, or the run over without word of its ranks' ends).
    pub(super) fn release_slots(&mut self, nodes: &mut NodeTable) {
        nodes.release_all(&mut self.slots);
    }

    /// The job is being torn down: each of its nodes is sent `signal`.
    pub(super) fn kill(&mut self, job: JobId, signal: i32, send: &mut dyn FnMut(NodeId, ToDaemon)) {
        self.killing = true;
        self.signal(job, signal, send);
    }

    /// Each of its nodes is sent `signal` (the job goes on).
    pub(super) fn signal(&self, job: JobId, signal: i32, send: &mut dyn FnMut(NodeId, ToDaemon)) {
        for &d in &self.daemons {
            send(d, ToDaemon::Signal { job, signal });
        }
    }

    /// Its ranks that dpm terminated, but `failed` (the run's failure).
    pub(super) fn terminated(&self, job: JobId, failed: Option<(JobId, Rank)>) -> usize {
        (0..self.ranks.len()).filter(|&r| self.ranks[r].end == Some(RankEnd::Terminated) && failed != Some((job, Rank(r as u32)))).count()
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
