//! One job's record: its ranks and how each ended, its placement and
//! slots, its fence tally, and the spawn answer it owes. A plain value held
//! by its one owner — the run's job table ([`super::jobs::Jobs`]) or, while
//! it is pooled and unclaimed, the tree's [`super::Pool`] — which moves it
//! whole at a claim.

use dpm_kvs::{FenceTally, JobId, NodeId, Rank};
use dpm_proto::{LaunchJob, RequestId, ToDaemon};

use crate::kvs_root::KvsRoot;
use crate::node_table::Reservation;

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
    /// it, until a node's watch trips (`Jobs::watch_tripped`).
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
