//! PMIx connect and disconnect on the node: the library calls the host
//! once every local participant has called (`PMIx_Connect` over the
//! parent's and the children's namespaces after a spawn, or two jobs'
//! connect/accept); this node's part goes up as `ToLauncher::Connect`, and
//! the launcher's `ConnectDone` (every node of every listed namespace has
//! contributed) answers it — after registering here the namespaces of the
//! listed jobs this node hosts no rank of, which the library needs to know
//! before its clients talk to theirs. Such a namespace stays registered
//! until the last local job that connected to it is forgotten.

use dpm_pmix::{PMIX_ERROR, PMIX_SUCCESS};
use dpm_proto::{JobMap, RequestId, ToLauncher};

use super::{map_spec, PmixAnswer, PmixRequest};
use crate::node::reactor::NodeReactor;
use crate::node::NodeEffects;

/// A connect sent up: the upcall, whether it is a disconnect, and the
/// local job that asked.
#[derive(Debug)]
pub(super) struct Connecting {
    req: PmixRequest,
    disconnect: bool,
    job: dpm_kvs::JobId,
}

impl NodeReactor {
    /// This node's part of a connect (or disconnect) over `procs`' namespaces.
    pub(in crate::node::reactor) fn pmix_connect(&mut self, fx: &mut (impl NodeEffects + ?Sized), procs: &[(String, u32)], disconnect: bool, req: PmixRequest) {
        let mut nspaces: Vec<String> = procs.iter().map(|(ns, _)| ns.clone()).collect();
        nspaces.sort_unstable();
        nspaces.dedup();
        let Some(job) = nspaces.iter().find_map(|ns| self.pmix.by_nspace.get(ns).copied()) else {
            tracing::warn!(?nspaces, "PMIx connect over no namespace of this node");
            return fx.pmix_answer(req, PmixAnswer::Status(PMIX_ERROR));
        };
        let request = RequestId(self.next_request);
        self.next_request += 1;
        self.pmix.connects.insert(request, Connecting { req, disconnect, job });
        fx.send_up(ToLauncher::Connect { request, job, nspaces, disconnect });
    }

    /// The launcher's answer to [`Self::pmix_connect`].
    pub(in crate::node::reactor) fn pmix_connect_done(&mut self, fx: &mut (impl NodeEffects + ?Sized), request: RequestId, result: Result<Vec<JobMap>, String>) {
        let Some(c) = self.pmix.connects.remove(&request) else { return };
        let status = match result {
            Ok(maps) if !c.disconnect => match self.pmix_register_maps(fx, c.job, &maps) {
                Ok(()) => PMIX_SUCCESS,
                Err(e) => {
                    tracing::warn!("PMIx connect: {e}");
                    PMIX_ERROR
                }
            },
            Ok(_) => PMIX_SUCCESS,
            Err(e) => {
                tracing::info!("PMIx connect failed: {}", dpm_pmi::sanitize::escape(&e));
                PMIX_ERROR
            }
        };
        fx.pmix_answer(c.req, PmixAnswer::Status(status));
    }

    /// Register the namespaces of `maps` not known here, on behalf of local `job`.
    fn pmix_register_maps(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: dpm_kvs::JobId, maps: &[JobMap]) -> Result<(), String> {
        let Some(node) = self.pmix.jobs.get(&job).map(|j| j.node) else { return Err("the connecting job is gone".into()) };
        for map in maps {
            if self.pmix.by_nspace.contains_key(&map.kvsname) {
                continue;
            }
            let users = self.pmix.foreign.entry(map.kvsname.clone()).or_default();
            if users.is_empty() {
                fx.pmix_register_remote(map_spec(map, map.node_of.len() as u32, node))?;
            }
            if !users.contains(&job) {
                users.push(job);
            }
        }
        Ok(())
    }

    /// Local `job` is over: the other jobs' namespaces only it connected to
    /// are deregistered.
    pub(in crate::node::reactor) fn pmix_forget_foreign(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: dpm_kvs::JobId) {
        let mut gone = Vec::new();
        for (nspace, users) in &mut self.pmix.foreign {
            users.retain(|j| *j != job);
            if users.is_empty() {
                gone.push(nspace.clone());
            }
        }
        for nspace in gone {
            self.pmix.foreign.remove(&nspace);
            fx.pmix_forget(&nspace, &[]);
        }
    }
}
