//! PMIx connect and disconnect (`PMIx_Connect`, which Open MPI calls over
//! the parent's and the children's namespaces after a spawn, and between
//! two jobs for connect/accept): a collective over every node hosting ranks
//! of the listed jobs. Each node contributes once every local participant
//! has called (its PMIx library aggregates them); the collective completes
//! when every node of every listed job has, and each contributing node is
//! answered with the maps of the listed jobs it hosts no rank of, which it
//! registers before answering its clients. A disconnect is the same
//! collective; its maps are ignored. A fence over every rank of several
//! jobs (Open MPI's `MPI_Comm_disconnect`) is the same collective too, with
//! each node's blob: the answer is their concatenation in node order. A
//! fence over part of a job's ranks (`PMIx_Fence` on a proc array) expects
//! only the nodes hosting those ranks, and is keyed by them too, so fences
//! over different parts of one job do not mix. A group construct
//! (`PMIx_Group_construct`: Open MPI's `MPI_Comm_create_from_group`,
//! `MPI_Intercomm_create_from_groups`, sessions) is a fence over its
//! members that is also keyed by the group's id, answers like a connect
//! (the maps) and, when a node's members asked, with a context id unique in
//! the tree ([`TreeShared::context_id`](super::TreeShared::context_id)).
//!
//! A collective naming a job of another run of the tree (connect/accept
//! between two `dpm run`s of one boot) is the tree's (`run::tree_connect`).
//!
//! Bounded: at most [`MAX_CONNECTS`] collectives wait at once per run; a
//! collective whose job ends before it completes is answered with an error
//! on the nodes that contributed (never a hang).

use std::collections::BTreeSet;

use dpm_kvs::{JobId, NodeId};
use dpm_proto::{CollectiveKind, GroupSpec, JobMap, RequestId, ToDaemon};

use super::jobs::Jobs;
use super::{Contribution, RunEffects};

/// Collectives waiting at once in one run. Each is held by clients blocked
/// in `PMIx_Connect`; a program has one per spawn or connect in flight.
pub const MAX_CONNECTS: usize = 1_024;

/// The jobs taking part in a collective with some ranks only, sorted; the
/// others take part whole.
pub(super) type Parts = Vec<(JobId, Vec<u32>)>;

/// A namespace's job and its size, or why it names none.
pub(super) type JobSize<'a> = dyn Fn(&str) -> Result<(JobId, usize), String> + 'a;

/// The jobs among `jobs` taking part with some ranks only, as `ranks`
/// lists them (namespace, ranks; `sized` gives a namespace's job and size,
/// or why not): sorted, each rank one of the job's and listed once; a job
/// whose every rank is listed takes part whole (a node that does not know
/// the job's size lists them all).
pub(super) fn parts(jobs: &[JobId], ranks: &[(String, Vec<u32>)], sized: &JobSize<'_>) -> Result<Parts, String> {
    let mut parts = Vec::with_capacity(ranks.len());
    for (ns, some) in ranks {
        let (job, size) = sized(ns)?;
        if !jobs.contains(&job) || some.is_empty() || some.iter().any(|&r| r as usize >= size) {
            return Err(format!("ranks {some:?} of namespace '{}' (size {size}) are not part of the collective", dpm_pmi::sanitize::escape(ns)));
        }
        let mut some = some.clone();
        some.sort_unstable();
        some.dedup();
        if some.len() < size {
            parts.push((job, some));
        }
    }
    parts.sort_unstable();
    parts.dedup_by_key(|(job, _)| *job);
    Ok(parts)
}

/// One collective in flight.
#[derive(Debug)]
pub(super) struct Collective {
    /// The listed jobs, sorted.
    pub(super) jobs: Vec<JobId>,
    /// The jobs taking part with some ranks only, sorted; the others whole.
    pub(super) parts: Parts,
    kind: CollectiveKind,
    /// A group construct's group (`kind` is `Group`); `context_id`: any
    /// node's members asked for one.
    group: Option<GroupSpec>,
    /// Every node hosting ranks of the listed jobs.
    pub(super) expect: BTreeSet<NodeId>,
    /// The nodes that contributed: the request to answer there, their data.
    pub(super) arrived: Vec<(NodeId, RequestId, Vec<u8>)>,
}

/// A collective every expected node has contributed to.
pub(super) struct Complete {
    /// The listed jobs, sorted.
    pub(super) jobs: Vec<JobId>,
    pub(super) kind: CollectiveKind,
    /// The nodes to answer, in node order, with their requests.
    pub(super) answer: Vec<(NodeId, RequestId)>,
    /// Every node's data, concatenated in node order.
    pub(super) data: Vec<u8>,
    /// Some node's members asked for a group context id.
    pub(super) context_id: bool,
}

impl Complete {
    /// The answer for each node: `maps(node)` (a connect's or group's maps
    /// of the jobs `node` hosts no rank of; none for the other kinds), every
    /// node's data, `context_id` if one was asked for.
    pub(super) fn answers(self, context_id: Option<u64>, maps: &dyn Fn(NodeId) -> Vec<JobMap>) -> Vec<(NodeId, ToDaemon)> {
        let wants_maps = matches!(self.kind, CollectiveKind::Connect | CollectiveKind::Group);
        let data = self.data;
        self.answer
            .into_iter()
            .map(|(node, request)| {
                let maps = if wants_maps { maps(node) } else { Vec::new() };
                (node, ToDaemon::ConnectDone { request, result: Ok((maps, data.clone())), context_id })
            })
            .collect()
    }
}

/// The collectives in flight of one run, or of the tree across runs: at
/// most [`MAX_CONNECTS`]. Each node hosting participants contributes once;
/// a collective completes when every expected node has.
#[derive(Debug, Default)]
pub(super) struct Collectives(Vec<Collective>);

impl Collectives {
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &Collective> {
        self.0.iter()
    }

    /// `node`'s part (`request`, `data`) of the collective of `kind` over
    /// `jobs` (sorted; `parts` of them with some ranks only, sorted;
    /// `group`: a group construct's) expecting `expect`: the collective once
    /// complete. `Err(())` when it would be a new one beyond [`MAX_CONNECTS`].
    #[allow(clippy::too_many_arguments)]
    pub(super) fn join(
        &mut self,
        jobs: Vec<JobId>,
        parts: Parts,
        kind: CollectiveKind,
        group: Option<GroupSpec>,
        expect: BTreeSet<NodeId>,
        node: NodeId,
        request: RequestId,
        data: Vec<u8>,
    ) -> Result<Option<Complete>, ()> {
        let id = group.as_ref().map(|g| g.id.as_str());
        let existing = self.0.iter().position(|c| {
            c.jobs == jobs
                && c.parts == parts
                && c.kind == kind
                && c.group.as_ref().map(|g| g.id.as_str()) == id
                && !c.arrived.iter().any(|(n, _, _)| *n == node)
        });
        let at = match existing {
            Some(at) => at,
            None if self.0.len() >= MAX_CONNECTS => return Err(()),
            None => {
                self.0.push(Collective { jobs, parts, kind, group: None, expect, arrived: Vec::new() });
                self.0.len() - 1
            }
        };
        let c = &mut self.0[at];
        if let Some(g) = group {
            let asked = c.group.as_ref().is_some_and(|had| had.context_id);
            c.group = Some(GroupSpec { context_id: g.context_id || asked, ..g });
        }
        c.arrived.push((node, request, data));
        if c.arrived.len() < c.expect.len() {
            return Ok(None);
        }
        let mut c = self.0.remove(at);
        c.arrived.sort_by_key(|(n, _, _)| *n);
        let data = c.arrived.iter().flat_map(|(_, _, d)| d.iter().copied()).collect();
        let context_id = c.group.as_ref().is_some_and(|g| g.context_id);
        let answer = c.arrived.into_iter().map(|(n, r, _)| (n, r)).collect();
        Ok(Some(Complete { jobs: c.jobs, kind: c.kind, answer, data, context_id }))
    }

    /// `job` ended: the collectives over it go, each node that contributed
    /// answered with an error (never a hang).
    pub(super) fn job_ended(&mut self, job: JobId) -> Vec<(NodeId, ToDaemon)> {
        let (gone, kept): (Vec<Collective>, Vec<Collective>) = std::mem::take(&mut self.0).into_iter().partition(|c| c.jobs.contains(&job));
        self.0 = kept;
        let why = format!("{job} ended before the collective completed");
        gone.into_iter()
            .flat_map(|c| c.arrived)
            .map(|(node, request, _)| (node, ToDaemon::ConnectDone { request, result: Err(why.clone()), context_id: None }))
            .collect()
    }
}

impl Collectives {
    /// `node`'s part of a collective over the jobs named `nspaces` (only
    /// `ranks` of the jobs listed there; `group`: a group construct's), the
    /// run's jobs in `jobs` (maps sent with `universe_size`): answered on
    /// every contributing node once complete, or refused at once.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn contribute(
        &mut self,
        fx: &mut dyn RunEffects,
        jobs: &Jobs,
        universe_size: i64,
        node: NodeId,
        request: RequestId,
        nspaces: &[String],
        ranks: &[(String, Vec<u32>)],
        kind: CollectiveKind,
        group: Option<GroupSpec>,
        data: Vec<u8>,
    ) {
        let refuse = |fx: &mut dyn RunEffects, why: String| fx.send(node, ToDaemon::ConnectDone { request, result: Err(why), context_id: None });
        if (kind == CollectiveKind::Group) != group.is_some() {
            return refuse(fx, "a group collective names its group, no other does".to_string());
        }
        // A namespace of another run of the tree: the tree holds the
        // collective (`tree_connect`).
        if nspaces.iter().any(|ns| jobs.named(ns).is_err() && fx.shared().connects.knows(ns)) {
            let c = Contribution { node, request, nspaces: nspaces.to_vec(), ranks: ranks.to_vec(), kind, group, data };
            let out = fx.shared().connect_across(c);
            for (node, msg) in out {
                fx.send(node, msg);
            }
            return;
        }
        let mut listed = Vec::with_capacity(nspaces.len());
        for ns in nspaces {
            match jobs.named(ns) {
                Ok(id) => listed.push(id),
                Err(why) => return refuse(fx, why),
            }
        }
        listed.sort_unstable();
        listed.dedup();
        let job = |id: &JobId| jobs.get(*id).expect("a listed job is live");
        let sized = |ns: &str| jobs.named(ns).map(|id| (id, job(&id).size()));
        let parts = match parts(&listed, ranks, &sized) {
            Ok(parts) => parts,
            Err(why) => return refuse(fx, why),
        };
        let expect: BTreeSet<NodeId> = listed
            .iter()
            .flat_map(|j| match parts.iter().find(|(p, _)| p == j) {
                Some((_, some)) => some.iter().map(|&r| job(j).node_of()[r as usize]).collect::<Vec<_>>(),
                None => job(j).daemons().to_vec(),
            })
            .collect();
        if !expect.contains(&node) {
            return refuse(fx, "a node that hosts no rank of the collective's namespaces".to_string());
        }
        let done = match self.join(listed, parts, kind, group, expect, node, request, data) {
            Ok(Some(done)) => done,
            Ok(None) => return,
            Err(()) => return refuse(fx, format!("too many collectives waiting at once (limit {MAX_CONNECTS})")),
        };
        tracing::debug!(jobs = ?done.jobs, kind = ?done.kind, nodes = done.answer.len(), "PMIx collective complete");
        let context_id = done.context_id.then(|| fx.shared().context_id());
        let listed = done.jobs.clone();
        let maps = |node: NodeId| listed.iter().filter(|j| !job(j).daemons().contains(&node)).map(|&j| jobs.job_map(j, universe_size)).collect();
        for (node, msg) in done.answers(context_id, &maps) {
            fx.send(node, msg);
        }
    }

    /// Panics unless every collective waits for live jobs of the run
    /// (`live`) and has heard from expected nodes only, each once.
    pub(super) fn check_invariants(&self, live: &dyn Fn(JobId) -> bool) {
        for c in &self.0 {
            assert!(c.jobs.iter().all(|&j| live(j)), "a collective over {:?} outlives one of its jobs", c.jobs);
            let mut seen = BTreeSet::new();
            for (n, _, _) in &c.arrived {
                assert!(c.expect.contains(n) && seen.insert(*n), "a collective over {:?} heard node {} unexpected or twice", c.jobs, n.0);
            }
        }
    }
}
