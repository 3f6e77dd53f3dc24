//! The node's hwloc topology file for `PMI_hwloc_xmlfile` ([`crate::topology`]):
//! exported once, when a rank first asks for it (the engine's
//! [`Effect::ExportTopology`](dpm_pmi::Effect::ExportTopology)) or when the
//! node launches its first spawned job, whichever comes first; the asks wait
//! for it, at most [`TOPOLOGY_WAIT`]. The engine keeps the export's state;
//! these are the node's steps on it.

use std::time::Duration;

use dpm_pmi::Engine;

use crate::node::{NodeEffects, Timer};

/// How long the asks wait for the export before they are answered "absent"
/// (and MPICH discovers the topology itself). An export takes 20–45 ms of
/// CPU; this only bounds a stuck one.
pub const TOPOLOGY_WAIT: Duration = Duration::from_secs(5);

/// A spawned job came: start the export unless it is started (or there
/// is none to make; the engine keeps that state).
pub(super) fn export_early(engine: &mut Engine, fx: &mut (impl NodeEffects + ?Sized)) {
    if engine.topology_export_started() {
        start_export(fx);
    }
}

/// The engine asked for the export (a rank's first ask): start it.
pub(super) fn start_export(fx: &mut (impl NodeEffects + ?Sized)) {
    fx.export_topology();
    fx.set_timer(TOPOLOGY_WAIT, Timer::TopologyWait);
}

/// The export ended: its file's path, or `None` if it failed.
pub(super) fn exported(engine: &mut Engine, path: Option<&str>) {
    match path {
        Some(path) => engine.set_topology_file(path),
        None => engine.topology_unavailable(),
    }
}

/// [`TOPOLOGY_WAIT`] after the export started: whoever still waits is
/// answered "absent" (a file that comes later serves later asks).
pub(super) fn wait_over(engine: &mut Engine) {
    if engine.topology_exporting() {
        tracing::debug!("the topology export takes too long: its waiting asks are answered 'absent'");
        engine.topology_unavailable();
    }
}
