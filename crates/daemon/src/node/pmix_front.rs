//! [`PmixFront`], the node reactor's PMIx front end (Open MPI 5): the second
//! front end beside the PMI-1/2 [`dpm_pmi::Engine`], over the same node
//! services — the tree's fences, the launcher's abort and exit judgement.
//! It owns which jobs are PMIx jobs, their namespaces, their fences, and
//! its requests in flight (names, spawns, connects, direct modex, other
//! jobs' namespaces); the node reactor holds it as one field and reaches
//! none of its maps. What it uses of the node comes as a [`PmixCtx`] (the
//! host name, the node's [`Requests`]); what of an upcall is the node's (a
//! rank's progress, its output) it hands back ([`ForNode`]). The node's
//! PMIx server itself (OpenPMIx, `dpm-pmix`) lives in the driver, which
//! turns each library upcall into a plain [`PmixEvent`] with a
//! [`PmixRequest`] id, and completes it when the front end answers through
//! [`NodeEffects::pmix_answer`].
//!
//! A fence upcall is this node's part of a job-wide fence: its blob rides
//! the ordinary `FenceIn` as one put, `pmix-blob-<node>` (hex), and under
//! the allgather design (the launcher forces it for PMIx jobs) the
//! `FenceDone` delta brings every node's; the concatenation in node order
//! is the fence's answer. One-node fences never get here: the library
//! completes them itself. A fence over several namespaces, or over part of
//! one, is the launcher's collective (`connect`).
//!
//! Direct modex (Open MPI's async modex: a rank asks for a peer's data when
//! it first needs it) rides the KVS messages between daemons: a
//! `KvsMsg::Get` of key `pmix-dmodex-<rank>` to the node hosting the rank,
//! where `PMIx_server_dmodex_request` fetches the data, and a
//! `KvsMsg::Reply` (hex, or no value: not found) back to the asking node.
//!
//! Submodules: `namespace` (what a job is registered as), `server_log`
//! (the server library's own lines to the runs), `spawn` (a spawn
//! upcall as the ordinary `ToLauncher::Spawn`)
//! and `connect` (connect, disconnect and fences over several namespaces as
//! the launcher's collective; other jobs' namespaces registered here).

use std::collections::{BTreeMap, HashMap};

use dpm_kvs::remote::{GetReply, GetRequest, KvsDest, KvsMsg};
use dpm_kvs::{JobId, NodeId, Rank};
use dpm_pmi::PmiState;
use dpm_pmix::{JobSpec, ProcPlace, PMIX_ERROR, PMIX_ERR_NOT_SUPPORTED, PMIX_SUCCESS, RANK_WILDCARD};
use dpm_proto::{CollectiveKind, LaunchJob, Stream, ToLauncher};

use super::requests::{Asker, Requests};
use crate::node::NodeEffects;

mod connect;
mod event;
mod group;
mod namespace;
mod server_log;
mod spawn;
mod timeout;
pub use event::{PmixAnswer, PmixEvent, PmixRequest};
pub use group::{GroupAnswer, GroupDirectives};
pub use namespace::job_spec;
use namespace::map_spec;
pub use spawn::PmixApp;

/// The put a node's fence blob rides under: `pmix-blob-<node>`.
const BLOB_KEY: &str = "pmix-blob-";
/// The key a direct-modex request asks the rank's node for: `pmix-dmodex-<rank>`.
const DMODEX_KEY: &str = "pmix-dmodex-";

/// A PMIx job on this node.
struct PmixJob {
    nspace: String,
    /// This node's ranks (the namespace's registered clients here).
    ranks: Vec<u32>,
    /// This node's index among all nodes (the blob's key).
    node: NodeId,
    /// The node of each rank.
    node_of: Vec<NodeId>,
    /// Progress the library reported for a rank of `ranks` before the
    /// rank's start was recorded (see [`ForNode::Progress`]).
    early: HashMap<u32, PmiState>,
    /// Fences completed (the epoch of the next `FenceIn`).
    epoch: u64,
    /// The fence upcall waiting for its `FenceDone`.
    fence: Option<PmixRequest>,
    /// A fence whose upcall timed out still waits for its `FenceDone`: its
    /// `FenceIn` is up the tree, so another fence (same epoch) must wait.
    abandoned: bool,
    /// The server library's own log lines passed to the job's run (`server_log`).
    server_lines: u32,
}

/// Which jobs are PMIx jobs and their fences; see the module documentation.
#[derive(Default)]
pub(super) struct PmixFront {
    jobs: HashMap<JobId, PmixJob>,
    by_nspace: HashMap<String, JobId>,
    /// Direct-modex requests of other nodes being fetched from the local
    /// library, by token: where the answer goes.
    dmodex: HashMap<u64, GetRequest>,
    next_token: u64,
    /// Name-service requests sent up, by id: the upcall and, for a lookup, its key.
    names: HashMap<dpm_proto::RequestId, (PmixRequest, Option<String>)>,
    /// Spawn requests sent up, by id: the upcall to answer.
    spawns: HashMap<dpm_proto::RequestId, PmixRequest>,
    /// Connects sent up, by id.
    connects: HashMap<dpm_proto::RequestId, connect::Connecting>,
    /// Spawns whose upcall timed out, until the launcher answers them.
    late_spawns: std::collections::HashSet<dpm_proto::RequestId>,
    /// Other jobs' namespaces registered here for a connect, by namespace.
    foreign: HashMap<String, connect::Foreign>,
}

impl PmixFront {
    /// A PMIx job of this node, or one it knows through a connect.
    pub(super) fn has(&self, job: JobId) -> bool {
        self.jobs.contains_key(&job) || self.foreign.values().any(|f| f.map.job == job)
    }

    /// The participants of a fence over `procs` as the launcher's
    /// collective takes them: the namespaces taking part with some of their
    /// ranks only (sorted; empty: every rank of each), or `None` when a
    /// namespace is not known here (a local job or one registered for a
    /// connect) or a rank is not one of its.
    fn participants(&self, procs: &[(String, u32)]) -> Option<Vec<(String, Vec<u32>)>> {
        let mut by_nspace: std::collections::BTreeMap<&str, Vec<u32>> = std::collections::BTreeMap::new();
        for (ns, rank) in procs {
            by_nspace.entry(ns.as_str()).or_default().push(*rank);
        }
        let mut parts = Vec::new();
        for (ns, mut ranks) in by_nspace {
            let size = match self.by_nspace.get(ns).and_then(|job| self.jobs.get(job)) {
                Some(j) if j.node_of.is_empty() => j.ranks.len(),
                Some(j) => j.node_of.len(),
                None => self.foreign.get(ns)?.map.node_of.len(),
            };
            ranks.sort_unstable();
            ranks.dedup();
            if ranks.contains(&RANK_WILDCARD) || ranks.iter().copied().eq(0..size as u32) {
                continue;
            }
            if ranks.last().is_some_and(|&r| r as usize >= size) {
                return None;
            }
            parts.push((ns.to_string(), ranks));
        }
        (!procs.is_empty()).then_some(parts)
    }

    /// Where a direct modex for `rank` of `nspace` goes: the job, this
    /// node's index (the answer's address) and the rank's node, unless the
    /// rank is here or unknown.
    fn rank_home(&self, nspace: &str, rank: u32) -> Option<(JobId, NodeId, NodeId)> {
        let (job, here, node_of) = match self.by_nspace.get(nspace).and_then(|job| self.jobs.get(job).map(|j| (*job, j))) {
            Some((job, j)) => (job, j.node, &j.node_of),
            None => self.foreign.get(nspace).map(|f| (f.map.job, f.node, &f.map.node_of))?,
        };
        node_of.get(rank as usize).filter(|&&n| n != here).map(|&owner| (job, here, owner))
    }
}

/// Hex, the blob's form in a put (values are text).
pub(crate) fn hex(data: &[u8]) -> String {
    let mut out = String::with_capacity(1 + 2 * data.len());
    out.push('x'); // never an empty value
    for b in data {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

pub(crate) fn unhex(text: &str) -> Option<Vec<u8>> {
    let digits = text.strip_prefix('x')?.as_bytes();
    if digits.len() % 2 != 0 {
        return None;
    }
    digits.chunks(2).map(|p| std::str::from_utf8(p).ok().and_then(|s| u8::from_str_radix(s, 16).ok())).collect()
}

impl PmixFront {
    /// A PMIx job is launched here with these local ranks.
    fn add(&mut self, job: JobId, nspace: &str, node: NodeId, node_of: Vec<NodeId>, ranks: Vec<u32>) {
        self.by_nspace.insert(nspace.to_string(), job);
        self.jobs.insert(
            job,
            PmixJob { nspace: nspace.to_string(), ranks, node, node_of, early: HashMap::new(), epoch: 0, fence: None, abandoned: false, server_lines: 0 },
        );
    }

    /// Keeps `state` for `rank` of local `job` until its start is recorded;
    /// false unless the rank is one of the job's registered clients here.
    pub(super) fn note_early(&mut self, job: JobId, rank: u32, state: PmiState) -> bool {
        let Some(j) = self.jobs.get_mut(&job).filter(|j| j.ranks.contains(&rank)) else { return false };
        j.early.insert(rank, state);
        true
    }

    /// The progress reported for `rank` of `job` before its start was recorded.
    pub(super) fn take_early(&mut self, job: JobId, rank: u32) -> Option<PmiState> {
        self.jobs.get_mut(&job)?.early.remove(&rank)
    }

    /// Forget a job: its namespace, its ranks here and a fence still waiting.
    fn remove(&mut self, job: JobId) -> Option<(String, Vec<u32>, Option<PmixRequest>)> {
        let j = self.jobs.remove(&job)?;
        self.by_nspace.remove(&j.nspace);
        self.dmodex.retain(|_, r| r.job != job);
        Some((j.nspace, j.ranks, j.fence))
    }

    /// This node's part of a fence: the `FenceIn` to send up, or the status
    /// to refuse it with (a fence over anything but one whole namespace of
    /// this node, or a second one while one waits).
    fn fence_in(&mut self, procs: &[(String, u32)], data: &[u8], req: PmixRequest) -> Result<ToLauncher, i32> {
        let [(nspace, RANK_WILDCARD)] = procs else { return Err(PMIX_ERR_NOT_SUPPORTED) };
        let Some(&job) = self.by_nspace.get(nspace) else { return Err(PMIX_ERROR) };
        let j = self.jobs.get_mut(&job).ok_or(PMIX_ERROR)?;
        if j.fence.is_some() || j.abandoned {
            return Err(PMIX_ERROR);
        }
        j.fence = Some(req);
        let puts = vec![(format!("{BLOB_KEY}{}", j.node.0), hex(data))];
        Ok(ToLauncher::FenceIn { job, epoch: j.epoch, count: j.ranks.len() as u32, puts })
    }

    /// Fence `epoch` of `job` completed with `delta`: the waiting upcall and
    /// its answer (every node's blob in node order).
    fn fence_done(&mut self, job: JobId, epoch: u64, delta: &[(String, String)]) -> Option<(PmixRequest, PmixAnswer)> {
        let j = self.jobs.get_mut(&job)?;
        if epoch != j.epoch {
            tracing::warn!(%job, epoch, expected = j.epoch, "PMIx fence completion out of order");
            return None;
        }
        j.epoch += 1;
        j.abandoned = false;
        let req = j.fence.take()?;
        let mut blobs: Vec<(usize, &str)> =
            delta.iter().filter_map(|(k, v)| k.strip_prefix(BLOB_KEY).and_then(|n| n.parse().ok()).map(|n| (n, v.as_str()))).collect();
        blobs.sort_by_key(|(n, _)| *n);
        let mut all = Vec::new();
        for (node, text) in blobs {
            match unhex(text) {
                Some(bytes) => all.extend_from_slice(&bytes),
                None => {
                    tracing::error!(%job, node, "a node's PMIx fence blob is not hex");
                    return Some((req, PmixAnswer::Data(PMIX_ERROR, Vec::new())));
                }
            }
        }
        Some((req, PmixAnswer::Data(PMIX_SUCCESS, all)))
    }
}

/// Answer another node's direct-modex request (`None`: not found).
fn dmodex_reply(fx: &mut (impl NodeEffects + ?Sized), get: GetRequest, value: Option<String>) {
    let reply = GetReply { job: get.job, key: get.key, id: get.id, value, valid_through: 0 };
    fx.send_up(ToLauncher::Kvs { to: KvsDest::Node(get.origin), msg: KvsMsg::Reply(reply) });
}

/// What the PMIx front end uses of the node besides its own maps.
pub(super) struct PmixCtx<'a> {
    /// The node's host name (in the server library's lines to the runs).
    pub host: &'a str,
    /// The node's requests up to the launcher.
    pub requests: &'a mut Requests,
}

/// The part of an upcall that is the node's: a rank's progress (answered
/// by the node, which knows the rank's process) or its output.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum ForNode {
    Progress { job: JobId, rank: Rank, state: PmiState, req: PmixRequest },
    Output { job: JobId, rank: Rank, output: Vec<(Stream, Vec<u8>)> },
}

impl PmixFront {
    /// An upcall of the node's PMIx server: served here, or handed back
    /// with its job when it is the node's ([`ForNode`]).
    pub(super) fn on_event(&mut self, fx: &mut (impl NodeEffects + ?Sized), cx: PmixCtx<'_>, event: PmixEvent) -> Option<ForNode> {
        if let Some((req, secs)) = event.timeout() {
            fx.set_timer(std::time::Duration::from_secs(secs.into()), crate::node::Timer::PmixTimeout(req));
        }
        match event {
            PmixEvent::Connected { nspace, rank, req } => return self.progress(fx, &nspace, rank, PmiState::Active, req),
            PmixEvent::Finalized { nspace, rank, req } => return self.progress(fx, &nspace, rank, PmiState::Finalized, req),
            PmixEvent::Log { nspace, rank, output } => match self.by_nspace.get(&nspace) {
                Some(&job) => return Some(ForNode::Output { job, rank: Rank(rank), output }),
                None => self.server_log(fx, cx.host, &nspace, rank, output),
            },
            PmixEvent::Abort { nspace, rank, status, message, req } => {
                match self.by_nspace.get(&nspace) {
                    Some(&job) => fx.send_up(ToLauncher::Abort { job, rank: Rank(rank), code: status, message }),
                    None => tracing::warn!(%nspace, rank, "PMIx abort from an unknown namespace"),
                }
                fx.pmix_answer(req, PmixAnswer::Status(PMIX_SUCCESS));
            }
            PmixEvent::DirectModex { nspace, rank, req } => match self.rank_home(&nspace, rank) {
                Some((job, origin, owner)) => {
                    tracing::debug!(%job, rank, owner = owner.0, "PMIx direct modex: asking the rank's node");
                    let get = GetRequest { job, key: format!("{DMODEX_KEY}{rank}"), origin, id: req.0, epoch: 0, wait: false };
                    fx.send_up(ToLauncher::Kvs { to: KvsDest::Node(owner), msg: KvsMsg::Get(get) });
                }
                None => {
                    tracing::warn!(%nspace, rank, "PMIx direct modex for a rank of no other node");
                    fx.pmix_answer(req, PmixAnswer::Data(dpm_pmix::PMIX_ERR_NOT_FOUND, Vec::new()));
                }
            },
            PmixEvent::DmodexAnswer { token, status, data } => {
                if let Some(get) = self.dmodex.remove(&token) {
                    dmodex_reply(fx, get, (status == PMIX_SUCCESS).then(|| hex(&data)));
                }
            }
            PmixEvent::Publish { nspace, pairs, req } => match pairs.as_slice() {
                [(service, port)] => {
                    let op = dpm_proto::NameRequest::Publish { service: service.clone(), port: port.clone() };
                    self.name(fx, cx.requests, &nspace, op, req, None);
                }
                _ => fx.pmix_answer(req, PmixAnswer::Status(PMIX_ERR_NOT_SUPPORTED)),
            },
            PmixEvent::Unpublish { nspace, keys, req } => match keys.as_slice() {
                [service] => self.name(fx, cx.requests, &nspace, dpm_proto::NameRequest::Unpublish { service: service.clone() }, req, None),
                _ => fx.pmix_answer(req, PmixAnswer::Status(PMIX_ERR_NOT_SUPPORTED)),
            },
            PmixEvent::Lookup { nspace, keys, wait, req, .. } => match keys.as_slice() {
                [service] => {
                    let service = service.clone();
                    let op = match wait {
                        true => dpm_proto::NameRequest::LookupWait { service: service.clone() },
                        false => dpm_proto::NameRequest::Lookup { service: service.clone() },
                    };
                    self.name(fx, cx.requests, &nspace, op, req, Some(service));
                }
                _ => fx.pmix_answer(req, PmixAnswer::Found(PMIX_ERR_NOT_SUPPORTED, Vec::new())),
            },
            PmixEvent::Spawn { nspace, rank, job_info, apps, req, .. } => self.spawn(fx, cx.requests, &nspace, rank, &apps, &job_info, req),
            PmixEvent::Connect { procs, disconnect, req, .. } => {
                let kind = if disconnect { CollectiveKind::Disconnect } else { CollectiveKind::Connect };
                self.connect(fx, cx.requests, &procs, kind, Vec::new(), Vec::new(), None, req)
            }
            PmixEvent::Fence { procs, data, req, .. } => match self.fence_in(&procs, &data, req) {
                Ok(up) => fx.send_up(up),
                // Several namespaces, or part of one: the launcher's
                // collective. A namespace or rank this node does not know
                // goes up as listed: the launcher, which knows every job,
                // refuses it on every node alike (refused here alone, the
                // other nodes' parts would wait for ever).
                Err(PMIX_ERR_NOT_SUPPORTED) if !procs.is_empty() => {
                    let parts = self.participants(&procs).unwrap_or_else(|| group::listed(&procs));
                    self.connect(fx, cx.requests, &procs, CollectiveKind::Fence, data, parts, None, req)
                }
                Err(status) => {
                    tracing::warn!(?procs, "PMIx fence refused (a namespace or rank not known here)");
                    fx.pmix_answer(req, PmixAnswer::Data(status, Vec::new()));
                }
            },
            PmixEvent::Group { construct, id, members, directives, data, req, .. } => {
                self.group(fx, cx.requests, construct, id, members, directives, data, req)
            }
        }
        None
    }

    /// A rank's PMI progress (connected, finalized): the node's to record
    /// and answer ([`ForNode::Progress`]), or refused here for a namespace
    /// not known.
    fn progress(&mut self, fx: &mut (impl NodeEffects + ?Sized), nspace: &str, rank: u32, state: PmiState, req: PmixRequest) -> Option<ForNode> {
        match self.by_nspace.get(nspace) {
            Some(&job) => Some(ForNode::Progress { job, rank: Rank(rank), state, req }),
            None => {
                fx.pmix_answer(req, PmixAnswer::Status(PMIX_ERROR));
                None
            }
        }
    }

    /// A name-service request up to the launcher: the run's `NameService`,
    /// shared with the PMI-1/2 jobs of the run (or boot).
    fn name(
        &mut self,
        fx: &mut (impl NodeEffects + ?Sized),
        requests: &mut Requests,
        nspace: &str,
        op: dpm_proto::NameRequest,
        req: PmixRequest,
        key: Option<String>,
    ) {
        let Some(&job) = self.by_nspace.get(nspace) else {
            return fx.pmix_answer(req, PmixAnswer::Found(PMIX_ERROR, Vec::new()));
        };
        let request = requests.open(Asker::Pmix);
        self.names.insert(request, (req, key));
        fx.send_up(ToLauncher::Name { request, job, op });
    }

    /// The launcher's answer to [`Self::name`].
    pub(super) fn name_done(&mut self, fx: &mut (impl NodeEffects + ?Sized), request: dpm_proto::RequestId, result: Result<Option<String>, String>) {
        let Some((req, key)) = self.names.remove(&request) else { return };
        let answer = match (key, result) {
            (Some(key), Ok(Some(port))) => PmixAnswer::Found(PMIX_SUCCESS, vec![(key, port)]),
            (Some(_), _) => PmixAnswer::Found(dpm_pmix::PMIX_ERR_NOT_FOUND, Vec::new()),
            (None, Ok(_)) => PmixAnswer::Status(PMIX_SUCCESS),
            (None, Err(e)) => {
                tracing::debug!("PMIx name service: {e}");
                PmixAnswer::Status(PMIX_ERROR)
            }
        };
        fx.pmix_answer(req, answer);
    }

    /// A KVS message for a PMIx job: a direct-modex request from another
    /// node, or the answer to one of ours.
    pub(super) fn on_kvs(&mut self, fx: &mut (impl NodeEffects + ?Sized), msg: KvsMsg) {
        match msg {
            KvsMsg::Get(get) => {
                let rank = get.key.strip_prefix(DMODEX_KEY).and_then(|r| r.parse::<u32>().ok());
                let nspace = self.jobs.get(&get.job).map(|j| j.nspace.clone());
                let (Some(rank), Some(nspace)) = (rank, nspace) else { return dmodex_reply(fx, get, None) };
                let token = self.next_token;
                self.next_token += 1;
                match fx.pmix_dmodex(&nspace, rank, token) {
                    Ok(()) => {
                        self.dmodex.insert(token, get);
                    }
                    Err(e) => {
                        tracing::warn!(%nspace, rank, "direct modex: {e}");
                        dmodex_reply(fx, get, None);
                    }
                }
            }
            KvsMsg::Reply(reply) => {
                let answer = match reply.value.as_deref().map(unhex) {
                    Some(Some(data)) => PmixAnswer::Data(PMIX_SUCCESS, data),
                    _ => PmixAnswer::Data(dpm_pmix::PMIX_ERR_NOT_FOUND, Vec::new()),
                };
                fx.pmix_answer(PmixRequest(reply.id), answer);
            }
            other => tracing::warn!(job = %other.job(), "a KVS message a PMIx job does not use; dropped"),
        }
    }

    /// `FenceDone` for a PMIx job.
    pub(super) fn on_fence_done(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: JobId, epoch: u64, delta: &[(String, String)]) {
        if let Some((req, answer)) = self.fence_done(job, epoch, delta) {
            fx.pmix_answer(req, answer);
        }
    }

    /// A PMIx job's namespace and clients, registered before its ranks
    /// start: each local rank's variables, in launch order.
    pub(super) fn register(
        &mut self,
        fx: &mut (impl NodeEffects + ?Sized),
        launch: &LaunchJob,
        node: NodeId,
        places: BTreeMap<u32, ProcPlace>,
    ) -> Result<Vec<Vec<(String, String)>>, String> {
        let spec = JobSpec { places, ..job_spec(launch, node) };
        let ranks = spec.local_ranks().to_vec();
        let app = launch.apps.first().ok_or("a job without programs")?;
        // Known before it is registered: a failed launch is forgotten too,
        // which removes whatever the registration left.
        self.add(launch.job, &launch.kvsname, node, launch.node_of.clone(), ranks.clone());
        let envs = fx.pmix_register(spec, app)?;
        // The driver answers in the namespace's rank order; the launch's
        // order may differ.
        let by_rank: HashMap<u32, Vec<(String, String)>> = ranks.into_iter().zip(envs).collect();
        launch.procs.iter().map(|p| by_rank.get(&p.rank.0).cloned().ok_or_else(|| format!("rank {} not registered", p.rank.0))).collect()
    }

    /// The job is over here: deregister it and fail a fence still waiting.
    pub(super) fn forget(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: JobId) {
        let Some((nspace, ranks, fence)) = self.remove(job) else { return };
        if let Some(req) = fence {
            fx.pmix_answer(req, PmixAnswer::Data(PMIX_ERROR, Vec::new()));
        }
        fx.pmix_forget(&nspace, &ranks);
        self.forget_foreign(fx, job);
    }

    /// The front end's own invariants, and its part of the node's: its jobs
    /// are jobs of the node (`is_job`), every request it waits on is open
    /// and its own (`requests`).
    pub(super) fn check(&self, is_job: impl Fn(JobId) -> bool, requests: &Requests) -> Result<(), String> {
        for (job, j) in &self.jobs {
            if !is_job(*job) {
                return Err(format!("PMIx {job} is no job of the node"));
            }
            if self.by_nspace.get(&j.nspace) != Some(job) {
                return Err(format!("PMIx {job}'s namespace does not name it"));
            }
            if j.early.keys().any(|r| !j.ranks.contains(r)) {
                return Err(format!("PMIx {job} keeps progress of a rank not its own"));
            }
        }
        if self.by_nspace.len() != self.jobs.len() {
            return Err(format!("{} namespaces for {} PMIx jobs", self.by_nspace.len(), self.jobs.len()));
        }
        let waiting = self.names.keys().chain(self.spawns.keys()).chain(self.connects.keys()).chain(self.late_spawns.iter());
        for id in waiting {
            if requests.asker(*id) != Some(Asker::Pmix) {
                return Err(format!("the PMIx front end waits on request {id:?}, which is not its open request"));
            }
        }
        for (token, get) in &self.dmodex {
            if !self.jobs.contains_key(&get.job) {
                return Err(format!("direct modex {token} for {}, no PMIx job here", get.job));
            }
        }
        for (nspace, f) in &self.foreign {
            if f.users.is_empty() {
                return Err(format!("foreign namespace {nspace} without users"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dpm_proto::{AppSpec, PmiMode, ProcSpec};

    fn launch(node_of: Vec<NodeId>) -> LaunchJob {
        let size = node_of.len() as u32;
        LaunchJob {
            job: JobId(3),
            kvsname: "kvs_1_2_3".into(),
            size,
            appnums: vec![0; size as usize],
            universe_size: -1,
            process_mapping: String::new(),
            spawner: None,
            preput: vec![],
            pmi_mode: PmiMode::Pmix,
            stdin_rank: None,
            apps: vec![AppSpec { exe: "/bin/true".into(), argv: vec!["true".into()], env: vec![], wdir: "/".into(), node_env: false }],
            procs: vec![ProcSpec { rank: Rank(1), app: 0 }],
            kvs: Default::default(),
            node_of,
            awaiting_claim: false,
            binding: Default::default(),
            pmix_watch: false,
            hold: false,
        }
    }

    #[test]
    fn the_namespace_has_every_node_in_node_order() {
        let spec = job_spec(&launch([2, 0, 2, 0].map(NodeId).to_vec()), NodeId(0));
        let ranks: Vec<&[u32]> = spec.nodes.iter().map(|n| n.ranks.as_slice()).collect();
        assert_eq!(ranks, [&[1u32, 3][..], &[0, 2][..]]);
        assert_eq!((spec.this_node, spec.local_ranks()), (0, &[1u32, 3][..]));
        assert_eq!((spec.app_sizes.as_slice(), spec.universe_size, spec.nspace.as_str()), (&[4u32][..], 4, "kvs_1_2_3"));
        assert_eq!(job_spec(&launch([2, 0, 2, 0].map(NodeId).to_vec()), NodeId(2)).this_node, 1);
        spec.validate().unwrap();
    }

    #[test]
    fn fence_blobs_travel_as_puts_and_come_back_in_node_order() {
        let mut front = PmixFront::default();
        front.add(JobId(3), "ns", NodeId(1), [0, 0, 1, 1].map(NodeId).to_vec(), vec![2, 3]);
        let wild = vec![("ns".to_string(), RANK_WILDCARD)];
        let up = front.fence_in(&wild, &[0xab, 0x01], PmixRequest(7)).unwrap();
        let ToLauncher::FenceIn { job, epoch, count, puts } = up else { panic!("{up:?}") };
        assert_eq!((job, epoch, count), (JobId(3), 0, 2));
        assert_eq!(puts, vec![("pmix-blob-1".to_string(), "xab01".to_string())]);
        assert_eq!(front.fence_in(&wild, &[], PmixRequest(8)).err(), Some(PMIX_ERROR), "one fence at a time");
        assert_eq!(front.fence_in(&[("ns".into(), 0)], &[], PmixRequest(9)).err(), Some(PMIX_ERR_NOT_SUPPORTED));
        // Node 10 sorts after node 2 (numerically), an empty blob adds nothing.
        let delta = vec![("pmix-blob-10".into(), "x03".into()), ("pmix-blob-1".into(), "xab01".into()), ("pmix-blob-2".into(), "x".into())];
        assert_eq!(front.fence_done(JobId(3), 1, &delta), None, "a wrong epoch is ignored");
        assert_eq!(front.fence_done(JobId(3), 0, &delta), Some((PmixRequest(7), PmixAnswer::Data(PMIX_SUCCESS, vec![0xab, 0x01, 0x03]))));
        front.fence_in(&wild, &[], PmixRequest(10)).unwrap();
        let bad = vec![("pmix-blob-0".into(), "xzz".into())];
        assert_eq!(front.fence_done(JobId(3), 1, &bad), Some((PmixRequest(10), PmixAnswer::Data(PMIX_ERROR, vec![]))));
        assert_eq!(front.remove(JobId(3)), Some(("ns".into(), vec![2, 3], None)));
        assert!(front.fence_in(&wild, &[], PmixRequest(11)).is_err(), "gone with its job");
    }
}
