//! What a run's state and the tree's pool must hold after every event:
//! checked by the unit tests (every [`Run::settle`]) and the in-process
//! cluster (after every event of its run).

use dpm_kvs::JobId;

use super::{Run, TreeShared};

impl Run {
    /// Panics if the run's state does not hold together with the tree's
    /// (`shared`): each job holds a slot per live rank (fewer only once it
    /// is being killed: a dropped pooled job gives its slots back at once),
    /// the jobs `dpm status` lists for this run are its jobs, every claim in
    /// flight is a claimed job of the run, no job is both the run's and the
    /// pool's, and the pool's own invariants ([`super::Pool::check_invariants`])
    /// and those of the collectives across runs
    /// ([`super::TreeConnects::check_invariants`]).
    pub fn check_invariants(&self, shared: &TreeShared) {
        for (job, j) in &self.jobs {
            let live = j.ranks.iter().filter(|r| r.end.is_none()).count();
            let held = j.slots.held();
            assert!(held <= live, "{job}: {held} slots held for {live} live ranks");
            assert!(j.killing || held == live, "{job}: {held} slots held for {live} live ranks, not being killed");
        }
        let listed: Vec<JobId> = shared.jobs.iter().filter(|(_, (owner, _, _))| *owner == self.settings.owner).map(|(j, _)| *j).collect();
        let own: Vec<JobId> = self.jobs.keys().copied().collect();
        assert_eq!(listed, own, "the jobs listed for this run are not its jobs");
        for c in &self.warm.claims {
            assert!(self.jobs.get(&c.job).is_some_and(|j| j.pool), "claim of {} is no claimed job of the run", c.job);
        }
        for (job, j) in &self.jobs {
            let claiming = self.warm.claims.iter().any(|c| c.job == *job);
            assert!(!j.pool || claiming || j.killing, "{job}: marked claimed, no claim in flight, not being killed");
        }
        shared.pool.check_invariants(&own);
        shared.connects.check_invariants(&|job| shared.jobs.contains_key(&job));
    }

    /// Panics unless `routed` — the jobs whose messages the driver routes
    /// to this run (its [`super::RunEffects::route`]s) — are its jobs: a
    /// pooled job is routed to no run until a claim moves it.
    pub fn check_routes(&self, routed: &std::collections::BTreeSet<JobId>) {
        let expected: std::collections::BTreeSet<JobId> = self.jobs.keys().copied().collect();
        assert_eq!(routed, &expected, "routes ≠ the run's jobs");
    }
}
