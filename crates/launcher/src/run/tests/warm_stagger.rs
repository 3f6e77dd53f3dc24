//! Pooled jobs start a few at a time (`Settings::warm_starting`): a job
//! that would start beside pooled ranks still starting, beyond the bound,
//! waits until one of them waits for its claim on every node
//! (`ToLauncher::AwaitingClaim`), so the first pooled job is ready sooner
//! than when all of them share the cores.

use super::warm::{answer, claimed, ended, launches, request_cold, start_all, warm_fixture};
use super::*;

/// A run keeping `n` pooled jobs per shape, at most `starting` pooled ranks
/// starting at once; its parent (one rank) has spawned `k` children of
/// shape `a` once and their job ended, and the shape's learn timer fired:
/// the pooled jobs launched then, in order.
fn learned(n: usize, starting: usize, k: u32) -> (Run, Recorder, JobId, Vec<JobId>) {
    let (mut run, mut rec) = warm_fixture(&[16], n);
    run.settings.warm_starting = starting;
    let parent = started(&mut run, &mut rec, &[0]);
    let (cold, _) = request_cold(&mut run, &mut rec, parent, k, 1, "a").expect("a miss");
    start_all(&mut run, &mut rec, cold, k);
    ended(&mut run, &mut rec, cold, k, ExitStatus::Code(0));
    rec.take();
    run.on_timer(&mut rec, Timer::WarmLearn);
    let pooled = pooled(&rec);
    (run, rec, parent, pooled)
}

/// The pooled jobs launched since the recorder was last taken.
fn pooled(rec: &Recorder) -> Vec<JobId> {
    launches(rec).into_iter().filter(|l| l.1).map(|l| l.0).collect()
}

/// `node` says every rank of `job` there waits for its claim; whether the
/// run was woken for it (its `WarmNext` timer armed).
fn parked(run: &mut Run, rec: &mut Recorder, node: usize, job: JobId) -> bool {
    rec.take();
    deliver(run, rec, node, ToLauncher::AwaitingClaim { job });
    rec.effects.iter().any(|e| matches!(e, Effect::Arm(Timer::WarmNext, d) if d.is_zero()))
}

#[test]
fn a_pooled_job_waits_for_the_one_still_starting() {
    let (mut run, mut rec, parent, first) = learned(2, 2, 2);
    assert_eq!(first.len(), 1, "two ranks start: the second job waits");
    rec.take();
    run.on_timer(&mut rec, Timer::WarmRefill);
    run.on_timer(&mut rec, Timer::WarmNext);
    assert!(pooled(&rec).is_empty(), "still held back while the first starts");
    start_all(&mut run, &mut rec, first[0], 2);
    assert!(parked(&mut run, &mut rec, 0, first[0]), "the first is ready: the run hears of it");
    run.on_timer(&mut rec, Timer::WarmNext);
    let second = pooled(&rec);
    assert_eq!(second.len(), 1, "now the second starts");
    // The ready one is claimed at once; the refill waits for the second's start.
    rec.take();
    assert!(request_cold(&mut run, &mut rec, parent, 2, 2, "a").is_none(), "claimed");
    claimed(&mut run, &mut rec, first[0], true);
    assert!(matches!(answer(&rec, 2), Some(Ok(_))));
    run.on_timer(&mut rec, Timer::WarmRefill);
    assert!(pooled(&rec).is_empty(), "the replacement waits for the second's start");
    start_all(&mut run, &mut rec, second[0], 2);
    assert!(parked(&mut run, &mut rec, 0, second[0]));
    run.on_timer(&mut rec, Timer::WarmNext);
    assert_eq!(pooled(&rec).len(), 1, "and then starts");
    let said = rec.said().join("\n");
    assert!(!said.contains("dropped"), "{said}");
}

/// Single-rank jobs start two at a time under a bound of two; without a
/// bound (0) every job of the pool starts at once.
#[test]
fn the_bound_counts_ranks_and_zero_is_none() {
    let (_, _, _, first) = learned(4, 2, 1);
    assert_eq!(first.len(), 2, "two one-rank jobs fit the bound");
    let (_, _, _, first) = learned(4, 0, 1);
    assert_eq!(first.len(), 4, "no bound: the whole pool");
    let (_, _, _, first) = learned(2, 2, 4);
    assert_eq!(first.len(), 1, "a job larger than the bound starts alone");
}

/// A job on two nodes is ready once both said so; a node's word twice, or
/// a word for a job the pool does not hold, changes nothing.
#[test]
fn a_job_is_ready_once_every_node_waits() {
    let (mut run, mut rec) = warm_fixture(&[1, 1, 1, 1], 2);
    run.settings.warm_starting = 2;
    let parent = started(&mut run, &mut rec, &[0]);
    let (cold, _) = request_cold(&mut run, &mut rec, parent, 2, 1, "a").expect("a miss");
    start_all(&mut run, &mut rec, cold, 2);
    ended(&mut run, &mut rec, cold, 2, ExitStatus::Code(0));
    rec.take();
    run.on_timer(&mut rec, Timer::WarmLearn);
    let first = pooled(&rec);
    assert_eq!(first.len(), 1, "{:?}", launches(&rec));
    let nodes: Vec<usize> = rec.sent().iter().filter_map(|(n, m)| matches!(m, ToDaemon::Launch(l) if l.job == first[0]).then_some(n.0)).collect();
    assert_eq!(nodes.len(), 2, "one rank on each of two nodes: {nodes:?}");
    assert!(!parked(&mut run, &mut rec, nodes[0], first[0]), "one node of two");
    assert!(!parked(&mut run, &mut rec, nodes[0], first[0]), "the same node again");
    assert!(!parked(&mut run, &mut rec, nodes[0], JobId(99)), "no such job");
    assert!(parked(&mut run, &mut rec, nodes[1], first[0]), "both");
}

/// A job claimed while still starting holds every refill back until its
/// node says it has started (a refill never delays a claimed job's start),
/// whatever the pool's depth; one that ended holds nothing.
#[test]
fn a_job_claimed_still_starting_holds_the_refill_until_it_started() {
    let (mut run, mut rec, parent, first) = learned(1, 2, 1);
    assert_eq!(first.len(), 1);
    start_all(&mut run, &mut rec, first[0], 1);
    rec.take();
    assert!(request_cold(&mut run, &mut rec, parent, 1, 2, "a").is_none(), "claimed");
    super::warm::claimed_ready(&mut run, &mut rec, first[0], true, false);
    assert!(matches!(answer(&rec, 2), Some(Ok(_))));
    run.on_timer(&mut rec, Timer::WarmRefill);
    assert!(pooled(&rec).is_empty(), "held back while the claimed job starts");
    assert!(parked(&mut run, &mut rec, 0, first[0]), "it started: the run is woken");
    run.on_timer(&mut rec, Timer::WarmNext);
    assert_eq!(pooled(&rec).len(), 2, "the refill, as deep as the late claim made the pool");
    // Again, and the late job ends without a word of its start: its end
    // lets the refill go.
    let (mut run, mut rec, parent, first) = learned(1, 2, 1);
    start_all(&mut run, &mut rec, first[0], 1);
    assert!(request_cold(&mut run, &mut rec, parent, 1, 2, "a").is_none());
    super::warm::claimed_ready(&mut run, &mut rec, first[0], true, false);
    rec.take();
    run.on_timer(&mut rec, Timer::WarmRefill);
    assert!(pooled(&rec).is_empty());
    ended(&mut run, &mut rec, first[0], 1, ExitStatus::Code(0));
    assert!(!pooled(&rec).is_empty(), "refilled at its end");
}
