//! The name service as a run reaches it (`MPI_Publish_name`,
//! `MPI_Lookup_name`, Open MPI's rendezvous names): plain functions over
//! the tree's [`super::TreeShared::names`], which owns the names and the
//! waiting lookups; the run owns nothing here.

use dpm_kvs::{JobId, NodeId};
use dpm_proto::{NameRequest, RequestId, ToDaemon};

use super::kvsname::open_mpi_port_family;
use super::{open_mpi_family, RunEffects};

/// A name-service request from `node`, answered there at once — except a
/// waiting lookup of a name not yet published, answered by the publish
/// (with the port) or the asking job's end (not found).
pub(super) fn serve(fx: &mut dyn RunEffects, node: NodeId, request: RequestId, job: JobId, op: NameRequest) {
    tracing::trace!(%job, ?op, "name service");
    let result = match op {
        NameRequest::Publish { service, port } => match fx.shared().names.publish(service, port.clone(), job) {
            Ok(woken) => {
                for (at, waiting) in woken {
                    fx.send(at, ToDaemon::NameDone { request: waiting, result: Ok(Some(port.clone())) });
                }
                Ok(None)
            }
            Err(e) => Err(e.to_string()),
        },
        NameRequest::Unpublish { service } => fx.shared().names.unpublish(&service).map(|()| None).map_err(|e| e.to_string()),
        NameRequest::Lookup { service } => fx.shared().names.lookup(&service).map(|p| Some(p.to_string())).map_err(|e| e.to_string()),
        // Open MPI's connect/accept waits for names of the peer
        // process; one whose job has ended will never publish.
        NameRequest::LookupWait { service }
            if fx.shared().names.lookup(&service).is_err() && open_mpi_port_family(&service).is_some_and(|f| !fx.shared().open_mpi_family_live(f)) =>
        {
            Err(format!("the process that would publish '{}' belongs to a job that has ended", dpm_pmi::sanitize::escape(&service)))
        }
        NameRequest::LookupWait { service } => match fx.shared().names.lookup_or_park(&service, (node, request), job) {
            Ok(None) => return tracing::debug!(%job, service = %dpm_pmi::sanitize::escape(&service), "lookup waits for its name"),
            other => other.map_err(|e| e.to_string()),
        },
    };
    fx.send(node, ToDaemon::NameDone { request, result });
}

/// `job` (named `kvsname`) ended: its names are withdrawn, its waiting
/// lookups answered "not found", and so are the lookups of the Open MPI
/// rendezvous names its processes would have published.
pub(super) fn job_ended(fx: &mut dyn RunEffects, job: JobId, kvsname: &str) {
    let names = &mut fx.shared().names;
    let withdrawn = names.withdraw_job(job);
    if withdrawn > 0 {
        tracing::debug!(%job, withdrawn, "names withdrawn with their job");
    }
    let cancelled = names.cancel_waits(job);
    for (node, request) in cancelled {
        fx.send(node, ToDaemon::NameDone { request, result: Err(format!("{job} ended while its lookup waited")) });
    }
    let family = open_mpi_family(kvsname);
    let orphaned = fx.shared().names.cancel_services(|s| open_mpi_port_family(s) == Some(family));
    for (node, request) in orphaned {
        fx.send(node, ToDaemon::NameDone { request, result: Err(format!("{job}, whose process would publish the name, ended")) });
    }
}
