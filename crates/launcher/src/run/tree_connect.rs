//! PMIx collectives across the runs of one tree ([`TreeConnects`], held in
//! [`TreeShared::connects`](super::TreeShared)): `MPI_Comm_connect` and
//! `MPI_Comm_accept` between jobs of two `dpm run`s of one boot, and the
//! disconnect and fences that follow. A collective over jobs of one run
//! stays in that run (`run::connect`); one that names a job of another run
//! is held here, with the same rules and the same bookkeeping
//! ([`Collectives`]): each node hosting participants
//! contributes once, the collective completes when every expected node has,
//! and each is answered with the maps of the listed jobs it hosts no rank of
//! (connect, group) and every node's data in node order.
//!
//! The tree's runs register their jobs here ([`TreeConnects::register`])
//! and report their ends ([`TreeConnects::job_ended`]): a collective naming
//! a job that is not live fails at once, one whose job ends before it
//! completes fails on every node that contributed — never a hang. A pooled
//! job of warm spawn is registered once a run has claimed it. Pure: acts only through [`TreeConnectEffects`].
//!
//! Bounded: at most [`MAX_CONNECTS`](super::connect::MAX_CONNECTS)
//! collectives wait here at once; the directory holds one map per live job.

use std::collections::{BTreeMap, BTreeSet};

use dpm_kvs::{JobId, NodeId};
use dpm_proto::{CollectiveKind, GroupSpec, JobMap, RequestId, ToDaemon};

use super::connect::{Collectives, Parts, MAX_CONNECTS};

/// What [`TreeConnects`] does to the world.
pub trait TreeConnectEffects {
    /// A message for the daemon of `node`.
    fn send(&mut self, node: NodeId, msg: ToDaemon);
    /// A PMIx group context id unique in the tree
    /// ([`TreeShared::context_id`](super::TreeShared::context_id)).
    fn context_id(&mut self) -> u64;
}

/// One node's part of a collective, as its daemon sent it.
#[derive(Clone, Debug)]
pub struct Contribution {
    pub node: NodeId,
    pub request: RequestId,
    pub nspaces: Vec<String>,
    pub ranks: Vec<(String, Vec<u32>)>,
    pub kind: CollectiveKind,
    pub group: Option<GroupSpec>,
    pub data: Vec<u8>,
}

/// The tree's live jobs that collectives may name, and the collectives
/// across runs in flight (see the module documentation).
#[derive(Debug, Default)]
pub struct TreeConnects {
    /// Live jobs by kvsname.
    directory: BTreeMap<String, JobMap>,
    pending: Collectives,
}

impl TreeConnects {
    /// `map`'s job is live and may be named by any run's collective.
    pub fn register(&mut self, map: JobMap) {
        self.directory.insert(map.kvsname.clone(), map);
    }

    /// Whether `nspace` is a live registered job.
    pub fn knows(&self, nspace: &str) -> bool {
        self.directory.contains_key(nspace)
    }

    /// The collectives waiting.
    pub fn waiting(&self) -> usize {
        self.pending.len()
    }

    fn map_of(&self, job: JobId) -> Option<&JobMap> {
        self.directory.values().find(|m| m.job == job)
    }

    /// The nodes hosting `job`'s ranks (all of them, or `some`).
    fn nodes_of(map: &JobMap, some: Option<&[u32]>) -> Vec<NodeId> {
        match some {
            Some(ranks) => ranks.iter().map(|&r| map.node_of[r as usize]).collect(),
            None => map.node_of.clone(),
        }
    }

    /// The listed jobs (sorted) and their parts, or why not.
    fn resolve(&self, c: &Contribution) -> Result<(Vec<JobId>, Parts), String> {
        let named = |ns: &str| self.directory.get(ns).ok_or_else(|| format!("namespace '{}' is not a live job of this boot", dpm_pmi::sanitize::escape(ns)));
        let mut jobs = Vec::with_capacity(c.nspaces.len());
        for ns in &c.nspaces {
            jobs.push(named(ns)?.job);
        }
        jobs.sort_unstable();
        jobs.dedup();
        let parts = super::connect::parts(&jobs, &c.ranks, &|ns: &str| named(ns).map(|m| (m.job, m.node_of.len())))?;
        Ok((jobs, parts))
    }

    /// `c.node`'s part of a collective over jobs of several runs.
    pub fn contribute(&mut self, fx: &mut dyn TreeConnectEffects, c: Contribution) {
        let refuse =
            |fx: &mut dyn TreeConnectEffects, why: String| fx.send(c.node, ToDaemon::ConnectDone { request: c.request, result: Err(why), context_id: None });
        if (c.kind == CollectiveKind::Group) != c.group.is_some() {
            return refuse(fx, "a group collective names its group, no other does".to_string());
        }
        let (jobs, parts) = match self.resolve(&c) {
            Ok(resolved) => resolved,
            Err(why) => return refuse(fx, why),
        };
        let expect: BTreeSet<NodeId> = jobs
            .iter()
            .filter_map(|j| self.map_of(*j))
            .flat_map(|m| Self::nodes_of(m, parts.iter().find(|(p, _)| *p == m.job).map(|(_, s)| s.as_slice())))
            .collect();
        if !expect.contains(&c.node) {
            return refuse(fx, "a node that hosts no rank of the collective's namespaces".to_string());
        }
        let done = match self.pending.join(jobs, parts, c.kind, c.group, expect, c.node, c.request, c.data) {
            Ok(Some(done)) => done,
            Ok(None) => return,
            Err(()) => return refuse(fx, format!("too many collectives across runs waiting at once (limit {MAX_CONNECTS})")),
        };
        tracing::debug!(jobs = ?done.jobs, kind = ?done.kind, nodes = done.answer.len(), "PMIx collective across runs complete");
        let context_id = done.context_id.then(|| fx.context_id());
        let maps: Vec<&JobMap> = done.jobs.iter().filter_map(|j| self.map_of(*j)).collect();
        let maps_for = |node: NodeId| maps.iter().filter(|m| !m.node_of.contains(&node)).map(|m| (*m).clone()).collect();
        for (node, msg) in done.answers(context_id, &maps_for) {
            fx.send(node, msg);
        }
    }

    /// `job` ended (or was never to be named again): it leaves the
    /// directory, and the collectives over it fail on the nodes that
    /// contributed.
    pub fn job_ended(&mut self, fx: &mut dyn TreeConnectEffects, job: JobId) {
        self.directory.retain(|_, m| m.job != job);
        for (node, msg) in self.pending.job_ended(job) {
            fx.send(node, msg);
        }
    }

    /// Panics unless: each directory entry is filed under its kvsname and
    /// is a job of `live` (the jobs `dpm status` lists), one entry per job;
    /// each collective waiting names registered jobs only, expects the
    /// nodes its jobs' ranks run on, has heard from a proper subset of them,
    /// each once; at most [`MAX_CONNECTS`] wait.
    pub fn check_invariants(&self, live: &dyn Fn(JobId) -> bool) {
        let mut seen = BTreeSet::new();
        for (name, m) in &self.directory {
            assert_eq!(name, &m.kvsname, "directory entry filed under another name");
            assert!(live(m.job), "{}: registered and not live", m.job);
            assert!(seen.insert(m.job), "{}: registered twice", m.job);
        }
        assert!(self.pending.len() <= MAX_CONNECTS, "{} collectives waiting", self.pending.len());
        for p in self.pending.iter() {
            let mut nodes = BTreeSet::new();
            for job in &p.jobs {
                let map = self.map_of(*job).unwrap_or_else(|| panic!("{job}: waited for, not registered"));
                let some = p.parts.iter().find(|(j, _)| j == job).map(|(_, s)| s.as_slice());
                nodes.extend(Self::nodes_of(map, some));
            }
            assert_eq!(nodes, p.expect, "a collective expects other nodes than its jobs run on");
            let arrived: BTreeSet<NodeId> = p.arrived.iter().map(|(n, _, _)| *n).collect();
            assert_eq!(arrived.len(), p.arrived.len(), "a node contributed twice");
            assert!(arrived.is_subset(&p.expect) && arrived.len() < p.expect.len(), "a collective waits with every node in, or one not expected");
        }
    }
}

/// The effects of one [`TreeConnects`] event, kept to send afterwards
/// (the run holds the tree's state and its own effects apart).
pub struct TreeOutbox<'a> {
    pub sent: Vec<(NodeId, ToDaemon)>,
    /// The tree's last context id ([`TreeShared::context_id`](super::TreeShared::context_id)).
    pub context_ids: &'a mut u64,
}

impl TreeConnectEffects for TreeOutbox<'_> {
    fn send(&mut self, node: NodeId, msg: ToDaemon) {
        self.sent.push((node, msg));
    }
    fn context_id(&mut self) -> u64 {
        next_context_id(self.context_ids)
    }
}

/// The next context id after `last` (never 0: see
/// [`TreeShared::context_id`](super::TreeShared::context_id)).
pub(super) fn next_context_id(last: &mut u64) -> u64 {
    *last += 1;
    *last
}
