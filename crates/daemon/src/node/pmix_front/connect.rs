//! PMIx connect and disconnect on the node: the library calls the host
//! once every local participant has called (`PMIx_Connect` over the
//! parent's and the children's namespaces after a spawn, or two jobs'
//! connect/accept); this node's part goes up as `ToLauncher::Connect`, and
//! the launcher's `ConnectDone` (every node of every listed namespace has
//! contributed) answers it — after registering here the namespaces of the
//! listed jobs this node hosts no rank of, which the library needs to know
//! before its clients talk to theirs. Such a namespace stays registered
//! until the last local job that connected to it is forgotten.
//!
//! A fence over every rank of several namespaces (Open MPI's
//! `MPI_Comm_disconnect`), or over some ranks of one or more (`PMIx_Fence`
//! on a proc array), takes the same way, with this node's blob and the
//! ranks of the namespaces that take part only in part; the answer is every
//! participating node's blob in node order.

use dpm_kvs::NodeId;
use dpm_pmix::{PMIX_ERROR, PMIX_SUCCESS};
use dpm_proto::{CollectiveKind, GroupSpec, JobMap, RequestId, ToLauncher};

use super::{map_spec, GroupAnswer, PmixAnswer, PmixFront, PmixRequest};
use crate::node::requests::{Asker, Requests};
use crate::node::NodeEffects;

/// Another job's namespace registered here for a connect: its map, this
/// node's index, and the local jobs that connected to it.
#[derive(Debug)]
pub(super) struct Foreign {
    pub(super) map: JobMap,
    pub(super) node: NodeId,
    pub(super) users: Vec<dpm_kvs::JobId>,
}

/// A connect sent up: the upcall, whether it is a disconnect, and the
/// local job that asked.
#[derive(Debug)]
pub(super) struct Connecting {
    pub(super) req: PmixRequest,
    pub(super) kind: CollectiveKind,
    job: dpm_kvs::JobId,
    /// A group construct's members, as the library listed them.
    members: Vec<(String, u32)>,
}

/// The failure answer of a collective, with `status`.
pub(super) fn failed(kind: CollectiveKind, status: i32) -> PmixAnswer {
    match kind {
        CollectiveKind::Fence => PmixAnswer::Data(status, Vec::new()),
        CollectiveKind::Connect | CollectiveKind::Disconnect => PmixAnswer::Status(status),
        CollectiveKind::Group => PmixAnswer::Group(status, GroupAnswer::default()),
    }
}

impl PmixFront {
    /// This node's part of a collective over `procs`' namespaces (`ranks`:
    /// those taking part in part, see [`ToLauncher::Connect`]; `group`: a
    /// group construct's, whose members are `procs`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn connect(
        &mut self,
        fx: &mut (impl NodeEffects + ?Sized),
        requests: &mut Requests,
        procs: &[(String, u32)],
        kind: CollectiveKind,
        data: Vec<u8>,
        ranks: Vec<(String, Vec<u32>)>,
        group: Option<GroupSpec>,
        req: PmixRequest,
    ) {
        let mut nspaces: Vec<String> = procs.iter().map(|(ns, _)| ns.clone()).collect();
        nspaces.sort_unstable();
        nspaces.dedup();
        let Some(job) = nspaces.iter().find_map(|ns| self.by_nspace.get(ns).copied()) else {
            tracing::warn!(?nspaces, "PMIx connect over no namespace of this node");
            return fx.pmix_answer(req, failed(kind, PMIX_ERROR));
        };
        let request = requests.open(Asker::Pmix);
        let members = if group.is_some() { procs.to_vec() } else { Vec::new() };
        self.connects.insert(request, Connecting { req, kind, job, members });
        fx.send_up(ToLauncher::Connect { request, job, nspaces, kind, data, ranks, group });
    }

    /// The launcher's answer to [`Self::connect`].
    pub(in crate::node) fn connect_done(
        &mut self,
        fx: &mut (impl NodeEffects + ?Sized),
        request: RequestId,
        result: Result<(Vec<JobMap>, Vec<u8>), String>,
        context_id: Option<u64>,
    ) {
        let Some(c) = self.connects.remove(&request) else { return };
        let answer = match (c.kind, result) {
            (kind @ (CollectiveKind::Connect | CollectiveKind::Group), Ok((maps, data))) => match self.register_maps(fx, c.job, &maps) {
                Ok(()) if kind == CollectiveKind::Group => PmixAnswer::Group(PMIX_SUCCESS, GroupAnswer { members: c.members, context_id, data }),
                Ok(()) => PmixAnswer::Status(PMIX_SUCCESS),
                Err(e) => {
                    tracing::warn!("PMIx {kind:?}: {e}");
                    failed(kind, PMIX_ERROR)
                }
            },
            (CollectiveKind::Disconnect, Ok(_)) => PmixAnswer::Status(PMIX_SUCCESS),
            (CollectiveKind::Fence, Ok((_, data))) => PmixAnswer::Data(PMIX_SUCCESS, data),
            (kind, Err(e)) => {
                tracing::info!("PMIx {kind:?} failed: {}", dpm_pmi::sanitize::escape(&e));
                failed(kind, PMIX_ERROR)
            }
        };
        fx.pmix_answer(c.req, answer);
    }

    /// Register the namespaces of `maps` not known here, on behalf of local `job`.
    fn register_maps(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: dpm_kvs::JobId, maps: &[JobMap]) -> Result<(), String> {
        let Some(node) = self.jobs.get(&job).map(|j| j.node) else { return Err("the connecting job is gone".into()) };
        for map in maps {
            if self.by_nspace.contains_key(&map.kvsname) {
                continue;
            }
            if !self.foreign.contains_key(&map.kvsname) {
                fx.pmix_register_remote(map_spec(map, map.node_of.len() as u32, node))?;
                self.foreign.insert(map.kvsname.clone(), Foreign { map: map.clone(), node, users: Vec::new() });
            }
            let users = &mut self.foreign.get_mut(&map.kvsname).expect("inserted above").users;
            if !users.contains(&job) {
                users.push(job);
            }
        }
        Ok(())
    }

    /// Local `job` is over: the other jobs' namespaces only it connected to
    /// are deregistered.
    pub(super) fn forget_foreign(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: dpm_kvs::JobId) {
        let mut gone = Vec::new();
        for (nspace, f) in &mut self.foreign {
            f.users.retain(|j| *j != job);
            if f.users.is_empty() {
                gone.push(nspace.clone());
            }
        }
        for nspace in gone {
            self.foreign.remove(&nspace);
            fx.pmix_forget(&nspace, &[]);
        }
    }
}
