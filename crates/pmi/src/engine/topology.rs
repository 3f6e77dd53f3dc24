//! `PMI_hwloc_xmlfile`: the node's hardware topology as an hwloc XML file,
//! which MPICH asks for in `MPI_Init` and otherwise discovers itself (hwloc
//! reading /proc and /sys: ~5 ms of CPU per process on the 2-core VM, quiet
//! — 64 ranks of one node paid it 64 times). Hydra's proxy exports the
//! topology on the first request and answers every rank with the file; so
//! does a node that [`Engine::export_topology_on_demand`]: the first ask
//! raises [`Effect::ExportTopology`], and every ask until the node answers
//! with [`Engine::set_topology_file`] or [`Engine::topology_unavailable`]
//! waits for it (one export instead of one discovery per rank). An engine
//! that was not told so answers the key absent at once, as the key is
//! optional (MPICH then discovers the topology itself).

use super::{ConnId, Effect, Engine};
use crate::reply::Reply;

/// The key MPICH asks for.
pub const TOPOLOGY_KEY: &str = "PMI_hwloc_xmlfile";

/// What the engine knows of the node's topology file.
#[derive(Debug, Default)]
pub(super) enum Topology {
    /// None to give: the key is absent.
    #[default]
    Absent,
    /// To be exported when first asked for.
    OnDemand,
    /// Being exported: the connections waiting for it (`true`: a PMI-2
    /// job attribute, else a PMI-1 get), one request each.
    Exporting(Vec<(ConnId, bool)>),
    Ready(String),
}

impl Engine {
    /// Export the topology when a rank first asks for it, and hold the
    /// askers until it is there (see the module documentation).
    pub fn export_topology_on_demand(&mut self) {
        if matches!(self.topology, Topology::Absent) {
            self.topology = Topology::OnDemand;
        }
    }

    /// Answer `PMI_hwloc_xmlfile` with this path from now on, and every ask
    /// that waits for it now.
    pub fn set_topology_file(&mut self, path: &str) {
        let waiting = match std::mem::replace(&mut self.topology, Topology::Ready(path.to_string())) {
            Topology::Exporting(waiting) => waiting,
            _ => Vec::new(),
        };
        for (conn, _) in waiting {
            self.finish_deferred(conn, &Reply::Value(path.to_string()));
        }
    }

    /// The export failed (or took too long): the key is absent from now
    /// on, and every ask that waits is answered so.
    pub fn topology_unavailable(&mut self) {
        // A file already given stays (a late timeout).
        if matches!(self.topology, Topology::Ready(_)) {
            return;
        }
        let waiting = match std::mem::take(&mut self.topology) {
            Topology::Exporting(waiting) => waiting,
            _ => Vec::new(),
        };
        for (conn, attr) in waiting {
            let reply = if attr { Reply::Absent } else { Reply::Error(format!("key '{TOPOLOGY_KEY}' is not provided")) };
            self.finish_deferred(conn, &reply);
        }
    }

    /// The node starts the export before anyone asked (a spawned job came):
    /// true if it is to (the engine exports on demand and no export was
    /// started); asks from then on wait for it without starting another.
    pub fn topology_export_started(&mut self) -> bool {
        let start = matches!(self.topology, Topology::OnDemand);
        if start {
            self.topology = Topology::Exporting(Vec::new());
        }
        start
    }

    /// Whether an export is under way (asks wait for it).
    pub fn topology_exporting(&self) -> bool {
        matches!(self.topology, Topology::Exporting(_))
    }

    /// `conn` is gone: it waits for nothing any more.
    pub(super) fn forget_topology_wait(&mut self, conn: ConnId) {
        if let Topology::Exporting(waiting) = &mut self.topology {
            waiting.retain(|(c, _)| *c != conn);
        }
    }
}

impl Topology {
    /// The file's path, if there is one to give.
    pub(super) fn file(&self) -> Option<&str> {
        match self {
            Topology::Ready(path) => Some(path),
            _ => None,
        }
    }

    /// Whether an ask must wait for the export (it is to come or under way);
    /// otherwise it is answered the usual way (the file, or absent).
    pub(super) fn must_wait(&self) -> bool {
        matches!(self, Topology::OnDemand | Topology::Exporting(_))
    }

    /// `conn` (whose reply the caller deferred) waits for the export; the
    /// first ask starts it. Only when [`Topology::must_wait`].
    pub(super) fn wait(&mut self, conn: ConnId, attr: bool, effects: &mut Vec<Effect>) {
        match self {
            Topology::OnDemand => {
                *self = Topology::Exporting(vec![(conn, attr)]);
                effects.push(Effect::ExportTopology);
            }
            Topology::Exporting(waiting) => waiting.push((conn, attr)),
            // Answered the usual way: the caller checked `must_wait`.
            Topology::Absent | Topology::Ready(_) => {}
        }
    }
}
