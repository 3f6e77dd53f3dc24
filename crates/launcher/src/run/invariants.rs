//! What a run's parts and the tree's pool must hold after every event:
//! checked by the unit tests (every `Run::settle`) and the in-process
//! cluster (after every event of its run), through `Run::check_invariants`.

use dpm_kvs::JobId;

use super::connect::Collectives;
use super::jobs::Jobs;
use super::warm::WarmPool;
use super::TreeShared;
use crate::kvs_root::KvsRoot;

/// The run's parts, as the invariants see them.
pub(super) struct Parts<'a> {
    pub(super) jobs: &'a Jobs,
    pub(super) warm: &'a WarmPool,
    pub(super) connects: &'a Collectives,
    pub(super) kvs: &'a KvsRoot,
    /// The pid of the run's `dpm run` (whose jobs `dpm status` lists).
    pub(super) owner: u32,
    /// The run is over (its jobs forgotten, what waits on them moot).
    pub(super) over: bool,
}

/// Panics if the run's parts do not hold together, nor with the tree's
/// (`shared`): each part's own invariants (a slot per live rank, output
/// credit only for live jobs, collectives over live jobs only, claims,
/// shapes and priming for live jobs), the KVS root's jobs are the run's
/// (while it goes), the jobs
/// `dpm status` lists for this run are its jobs, every claim in flight is
/// a claimed job of the run and every claimed job has one (or is being
/// killed), the jobs routed to it are its jobs, no job is both the run's
/// and the pool's, and the pool's own
/// invariants ([`super::Pool::check_invariants`]) and those of the
/// collectives across runs ([`super::TreeConnects::check_invariants`]).
pub(super) fn check(p: &Parts<'_>, shared: &TreeShared) {
    p.jobs.check_invariants();
    if !p.over {
        let live = |job| p.jobs.contains(job);
        p.connects.check_invariants(&live);
        p.warm.check_invariants(&live);
        let mut held: Vec<JobId> = p.kvs.jobs().collect();
        held.sort_unstable();
        assert_eq!(held, p.jobs.ids(), "the KVS root's jobs are not the run's");
    }
    let listed: Vec<JobId> = shared.jobs.iter().filter(|(_, (owner, _, _))| *owner == p.owner).map(|(j, _)| *j).collect();
    let own = p.jobs.ids();
    assert_eq!(listed, own, "the jobs listed for this run are not its jobs");
    for job in p.warm.claimed_jobs() {
        assert!(p.jobs.get(job).is_some_and(|j| j.pool()), "claim of {job} is no claimed job of the run");
    }
    for (job, j) in p.jobs.iter() {
        assert!(!j.pool() || p.warm.claiming(job) || j.killing(), "{job}: marked claimed, no claim in flight, not being killed");
    }
    assert_eq!(shared.routed_to(p.owner).into_iter().collect::<Vec<_>>(), own, "the jobs routed to this run are not its jobs");
    shared.pool.check_invariants(&own);
    shared.connects.check_invariants(&|job| shared.jobs.contains_key(&job));
}
