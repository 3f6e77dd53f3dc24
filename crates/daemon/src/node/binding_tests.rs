//! Binding on the node (`node_binding`) over a fixed topology (2 packages
//! of 8 cores of 2 hardware threads, the binding crate's test topology):
//! what a rank holds is free again once it exits, and only then.

use dpm_kvs::{JobId, Rank};
use dpm_proto::{ExitStatus, LaunchJob, PmiMode, ToDaemon};

use super::recorder::{RecordingEffects, StartRecord};
use super::tests::{launch, node, J};
use super::NodeReactor;

const TOPOLOGY: &str = include_str!("../../../binding/tests/topologies/2s2n8c2t.xml");

/// A job of `n` ranks here, each bound to a core; any but the first is
/// spawned by it (a spawned job's ranks are bound against the ranks live).
fn bound_job(job: JobId, n: u32) -> LaunchJob {
    let spawner = (job != J).then(|| "kvs_7_3".to_string());
    let mut spec = LaunchJob { job, kvsname: format!("kvs_7_{}", job.0), spawner, ..launch(n, n, PmiMode::Fd) };
    spec.binding.set_bind("core").unwrap();
    spec
}

/// Each start of `job`'s CPU mask, in launch order.
fn masks(fx: &RecordingEffects, job: JobId) -> Vec<Vec<u64>> {
    let cpus = |s: &&StartRecord| s.env.affinity.as_ref().and_then(|a| a.cpus.clone()).expect("bound");
    fx.starts().iter().filter(|s| s.job == job).map(cpus).collect()
}

fn bound_node() -> (NodeReactor, RecordingEffects) {
    let (r, mut fx) = node();
    fx.topology = Some(TOPOLOGY.into());
    (r, fx)
}

#[test]
fn an_exited_ranks_core_goes_to_the_next_launch_and_a_live_ranks_does_not() {
    let (mut r, mut fx) = bound_node();
    r.on_message(&mut fx, ToDaemon::Launch(bound_job(J, 2)));
    fx.settle(&mut r);
    let first = masks(&fx, J);
    assert_eq!(first.len(), 2);
    assert_ne!(first[0], first[1], "two ranks, two cores");

    // Both still run: a spawned rank shares neither core.
    r.on_message(&mut fx, ToDaemon::Launch(bound_job(JobId(4), 1)));
    fx.settle(&mut r);
    let second = masks(&fx, JobId(4));
    assert!(!first.contains(&second[0]), "{second:?} is a live rank's ({first:?})");

    // Rank 0 exits: its core is the least held, and the next rank's.
    r.on_exited(&mut fx, J, Rank(0), ExitStatus::Code(0), 1);
    r.on_message(&mut fx, ToDaemon::Launch(bound_job(JobId(5), 1)));
    fx.settle(&mut r);
    assert_eq!(masks(&fx, JobId(5)), vec![first[0].clone()]);

    // Forgetting the jobs frees the rest; the node's invariants held throughout.
    for job in [J, JobId(4), JobId(5)] {
        r.on_message(&mut fx, ToDaemon::Forget { job });
    }
    r.check_invariants().unwrap();
}
