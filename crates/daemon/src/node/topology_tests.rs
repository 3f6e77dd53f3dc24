//! The node's topology file (`PMI_hwloc_xmlfile`) through the reactor: one
//! export, started by the first ask or the first spawned job, waited for
//! by every ask, bounded by [`TOPOLOGY_WAIT`].

use dpm_proto::{PmiMode, ToDaemon};

use super::recorder::Recorded;
use super::tests::{init, launch, launched, node, talk};
use super::*;
use crate::topology::TopologySource;

const ASK: &str = "cmd=get kvsname=kvs_7_3 key=PMI_hwloc_xmlfile\n";

/// A node exporting on demand with `local` initialised PMI-1 ranks.
fn exporting(local: u32) -> (NodeReactor, recorder::RecordingEffects, Vec<dpm_pmi::ConnId>) {
    let (mut r, mut fx) = node();
    r.serve_topology(TopologySource::Export);
    let c = launched(&mut r, &mut fx, local);
    init(&mut r, &mut fx, &c);
    (r, fx, c)
}

fn exports(fx: &recorder::RecordingEffects) -> usize {
    fx.log.iter().filter(|e| matches!(e, Recorded::ExportTopology)).count()
}

#[test]
fn the_first_ask_exports_the_topology_and_every_ask_waits_for_it() {
    let (mut r, mut fx, c) = exporting(2);
    assert_eq!(talk(&mut r, &mut fx, c[0], ASK), "", "waits");
    assert_eq!(exports(&fx), 1);
    assert!(fx.log.iter().any(|e| matches!(e, Recorded::SetTimer(TOPOLOGY_WAIT, Timer::TopologyWait))), "the wait is bounded");
    assert_eq!(talk(&mut r, &mut fx, c[1], ASK), "", "waits too");
    assert_eq!(exports(&fx), 1, "one export");
    r.on_topology(&mut fx, Some("/proc/1/fd/5"));
    for &conn in &c {
        assert_eq!(fx.take_written(conn), "cmd=get_result rc=0 value=/proc/1/fd/5\n");
    }
    // A late timer changes nothing.
    r.on_timer(&mut fx, Timer::TopologyWait);
    assert_eq!(talk(&mut r, &mut fx, c[0], ASK), "cmd=get_result rc=0 value=/proc/1/fd/5\n");
}

#[test]
fn asks_still_waiting_when_the_wait_is_over_are_answered_absent() {
    let (mut r, mut fx, c) = exporting(1);
    assert_eq!(talk(&mut r, &mut fx, c[0], ASK), "");
    r.on_timer(&mut fx, Timer::TopologyWait);
    assert_eq!(fx.take_written(c[0]), "cmd=get_result rc=1 msg=key_'PMI_hwloc_xmlfile'_is_not_provided\n");
    // A file that comes after all serves later asks.
    r.on_topology(&mut fx, Some("/proc/1/fd/5"));
    assert_eq!(talk(&mut r, &mut fx, c[0], ASK), "cmd=get_result rc=0 value=/proc/1/fd/5\n");
}

#[test]
fn a_spawned_job_starts_the_export_before_anyone_asks() {
    let (mut r, mut fx) = node();
    r.serve_topology(TopologySource::Export);
    let mut spawned = launch(1, 1, PmiMode::Fd);
    spawned.spawner = Some("kvs_7_0".into());
    r.on_message(&mut fx, ToDaemon::Launch(spawned));
    assert_eq!(exports(&fx), 1);
    fx.settle(&mut r);
    let conn = fx.starts()[0].pmi_conn.expect("PMI_FD mode");
    init(&mut r, &mut fx, &[conn]);
    assert_eq!(talk(&mut r, &mut fx, conn, ASK), "", "waits for the export under way");
    assert_eq!(exports(&fx), 1, "no second export");
    r.on_topology(&mut fx, None);
    assert_eq!(fx.take_written(conn), "cmd=get_result rc=1 msg=key_'PMI_hwloc_xmlfile'_is_not_provided\n");
}

#[test]
fn a_node_without_a_topology_source_answers_absent_at_once() {
    let (mut r, mut fx) = node();
    let c = launched(&mut r, &mut fx, 1);
    init(&mut r, &mut fx, &c);
    assert_eq!(talk(&mut r, &mut fx, c[0], ASK), "cmd=get_result rc=1 msg=key_'PMI_hwloc_xmlfile'_is_not_provided\n");
    assert_eq!(exports(&fx), 0);
}
