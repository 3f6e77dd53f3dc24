//! What all runs of one daemon tree share ([`TreeShared`], a part of the
//! tree level's `crate::tree::Tree`), reached by a run through
//! [`super::RunEffects::shared`]: among it the routes, the one rule that
//! says where a message from the daemons goes ([`TreeShared::destination`]:
//! to the run owning its job, else to the pool holding it), which the
//! `Tree` applies for every driver, and the tree's invariants
//! ([`TreeShared::check_invariants`]).

use std::collections::{BTreeMap, BTreeSet};

use dpm_kvs::{JobId, NameService, NodeId};
use dpm_proto::{RequestId, ToDaemon};

use super::kvsname::{self, open_mpi_family};
use super::tree_connect::{next_context_id, Contribution, TreeConnects, TreeOutbox};
use super::Pool;
use crate::node_table::NodeTable;

/// State shared by every run of one daemon tree (see the module documentation).
pub struct TreeShared {
    /// Published names; a parked lookup is answered at `(node, request)`.
    pub names: NameService<(NodeId, RequestId)>,
    next_job: u32,
    /// Random per tree (128 bits): part of every kvsname (see [`kvsname`]).
    run_tag: u128,
    pub nodes: NodeTable,
    /// Live jobs: (owner's pid, kvsname, size), for `dpm status`.
    pub jobs: BTreeMap<JobId, (u32, String, u32)>,
    /// Each listed job's ranks once all started (`dpm status --json`).
    pub ranks: BTreeMap<JobId, Vec<dpm_proto::control::RankStatus>>,
    /// How many times each run (by its owner) has listed its ranks' PMI
    /// states into `ranks` (`report::Listing`).
    pub states_listed: BTreeMap<u32, u64>,
    /// Pooled jobs kept for later runs (`dpm boot --warm-spawn`; off by default).
    pub pool: Pool,
    /// The Open MPI families of the last kvsnames handed out, live before
    /// their job is registered in `jobs` (kept hashed: a boot hands out
    /// names for ever, and each new one is checked against them all).
    issued: std::collections::VecDeque<u16>,
    /// The last PMIx group context id handed out ([`Self::context_id`]).
    context_ids: u64,
    /// PMIx collectives across runs and the live jobs they may name.
    pub connects: TreeConnects,
    /// The run (its owner, `Settings::owner`) each live job's messages go to;
    /// set by the run as it registers, claims and forgets jobs.
    routes: BTreeMap<JobId, u32>,
}

/// Where a message from the daemons goes ([`TreeShared::destination`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Destination {
    /// The run of this owner.
    Run(u32),
    /// The tree's pool: a pooled job no run has claimed, or one it kills.
    Pool,
    /// Every run: a message about no job (a `--pmi-trace` line).
    Every,
    /// No one: its job is forgotten.
    Nowhere,
}

/// A run as the tree's invariants see it: its owner, its live jobs and the
/// node of each slot they hold.
pub struct RunView {
    pub owner: u32,
    pub jobs: Vec<JobId>,
    pub held: Vec<NodeId>,
}

impl TreeShared {
    /// `run_tag`: the random part of the tree's kvsnames (128 bits), drawn
    /// by the driver (`controller::random_tag`) so that the reactor draws
    /// nothing.
    pub fn new(nodes: NodeTable, run_tag: u128) -> Self {
        let (fanout, first) = (nodes.fanout(), nodes.first());
        TreeShared {
            names: NameService::default(),
            next_job: 0,
            run_tag,
            nodes,
            jobs: BTreeMap::new(),
            ranks: BTreeMap::new(),
            states_listed: BTreeMap::new(),
            pool: Pool::new(fanout, first),
            issued: Default::default(),
            context_ids: 0,
            connects: TreeConnects::default(),
            routes: BTreeMap::new(),
        }
    }

    /// Messages about `job` go to the run of `owner` from now on (`None`: to no run).
    pub fn route(&mut self, job: JobId, owner: Option<u32>) {
        match owner {
            Some(owner) => self.routes.insert(job, owner),
            None => self.routes.remove(&job),
        };
    }

    /// The one rule for a message from the daemons about `job` (`None`:
    /// about no job): the run it is routed to, else the pool if it holds
    /// it (a claim routes a pooled job to its run before the pool lets go).
    pub fn destination(&self, job: Option<JobId>) -> Destination {
        let Some(job) = job else { return Destination::Every };
        match self.routes.get(&job) {
            Some(&owner) => Destination::Run(owner),
            None if self.pool.holds(job) => Destination::Pool,
            None => Destination::Nowhere,
        }
    }

    /// The jobs routed to the run of `owner`.
    pub fn routed_to(&self, owner: u32) -> BTreeSet<JobId> {
        self.routes.iter().filter(|(_, o)| **o == owner).map(|(j, _)| *j).collect()
    }

    /// The owners of the runs some job is routed to.
    pub fn owners(&self) -> BTreeSet<u32> {
        self.routes.values().copied().collect()
    }

    /// Panics unless the tree holds together with `runs`, every run of the
    /// tree (tests, after every event): the routes are exactly the runs'
    /// live jobs, each to its own run; no job is both a run's and the
    /// pool's; and one ledger: each node's load is the slots held there by
    /// the runs' jobs and the pool's, every slot counted once.
    pub fn check_invariants(&self, runs: &[RunView]) {
        let mut expected = BTreeMap::new();
        for r in runs {
            for &job in &r.jobs {
                assert!(expected.insert(job, r.owner).is_none(), "{job} belongs to two runs");
                assert!(!self.pool.holds(job), "{job} is both a run's and the pool's");
            }
        }
        assert_eq!(self.routes, expected, "routes ≠ the runs' live jobs");
        let mut ledger = vec![0i64; self.nodes.len()];
        for node in runs.iter().flat_map(|r| r.held.iter().copied()).chain(self.pool.held_nodes()) {
            ledger[node.0] += 1;
        }
        assert_eq!(self.nodes.loads(), ledger, "the nodes' load ≠ the slots the runs' and the pool's jobs hold");
        self.nodes.check_shape();
    }

    /// A PMIx group's context id (`PMIX_GROUP_CONTEXT_ID`): unique among
    /// every run of the tree, so communicators of jobs that later connect
    /// never share one, and never 0 (Open MPI's base for communicators
    /// whose id it agreed on itself). Open MPI derives the new
    /// communicator's extended id from it.
    pub fn context_id(&mut self) -> u64 {
        next_context_id(&mut self.context_ids)
    }

    /// A node's part of a PMIx collective naming jobs of several runs
    /// ([`TreeConnects::contribute`]): the messages to send.
    pub fn connect_across(&mut self, c: Contribution) -> Vec<(NodeId, ToDaemon)> {
        let mut out = TreeOutbox { sent: Vec::new(), context_ids: &mut self.context_ids };
        self.connects.contribute(&mut out, c);
        out.sent
    }

    /// `job` ended: it leaves [`Self::connects`]; the messages to send.
    pub fn connects_job_ended(&mut self, job: JobId) -> Vec<(NodeId, ToDaemon)> {
        let mut out = TreeOutbox { sent: Vec::new(), context_ids: &mut self.context_ids };
        self.connects.job_ended(&mut out, job);
        out.sent
    }

    /// Whether a live job of the tree (listed, or kept in the pool) has
    /// the Open MPI job family `family`. (A job is listed before any of its
    /// ranks starts.)
    pub fn open_mpi_family_live(&self, family: u16) -> bool {
        self.jobs.values().map(|(_, name, _)| name.as_str()).chain(self.pool.kvsnames()).any(|n| open_mpi_family(n) == family)
    }

    /// A new job id and its kvsname (unique per daemon tree, short enough
    /// for MPICH, and distinct from every live job's in Open MPI's eyes:
    /// see [`kvsname::fresh`]).
    pub fn new_job_id(&mut self) -> (JobId, String) {
        let job = JobId(self.next_job);
        self.next_job += 1;
        let live: std::collections::HashSet<u16> =
            self.jobs.values().map(|(_, name, _)| name.as_str()).chain(self.pool.kvsnames()).map(open_mpi_family).chain(self.issued.iter().copied()).collect();
        let name = kvsname::fresh(self.run_tag, job, |family| live.contains(&family));
        if self.issued.len() >= kvsname::ISSUED_REMEMBERED {
            self.issued.pop_front();
        }
        self.issued.push_back(open_mpi_family(&name));
        (job, name)
    }
}
