//! Pooled jobs kept by the tree's pool across runs (`run::pool`): handed
//! over at a run's end instead of killed, served by the pool while kept
//! (fences, output held), claimed by a later run's spawn of the same shape
//! in one event, never by another environment or argument; bounded per
//! shape, killed after their idle time (the pool's own timer) or for a
//! placement, forgotten once their ends are heard.

use super::warm::{answer, claimed, ended, launches, request, request_arg, start_all, warm_fixture};
use super::*;
use dpm_proto::Stream;

const IDLE: Duration = Duration::from_secs(60);

/// A message from `node` for the pool (as `controller::dispatch` hands it
/// over); what the pool sent. Its invariants hold after it.
fn to_pool(rec: &mut Recorder, node: usize, msg: ToLauncher) -> Vec<(NodeId, ToDaemon)> {
    let mut out = PoolOutbox::default();
    let shared = &mut rec.shared;
    shared.pool.on_message(&mut out, &mut shared.nodes, NodeId(node), msg);
    rec.shared.pool.check_invariants(&[]);
    out.sent
}

/// The pool's timer at `now`: what it sent, and when it wants to be woken next.
fn pool_timer(rec: &mut Recorder, now: u64) -> (Vec<(NodeId, ToDaemon)>, Option<u64>) {
    let mut out = PoolOutbox::default();
    let shared = &mut rec.shared;
    shared.pool.on_timer(&mut out, &mut shared.nodes, now);
    rec.shared.pool.check_invariants(&[]);
    (out.sent, out.wake)
}

/// A run of the same tree as `rec` (owner `owner`), pooling one job per shape.
fn next_run(owner: u32) -> Run {
    let mut run = Run::new(settings_for(&[8]));
    (run.settings.warm_spawn, run.settings.warm_verbose, run.settings.owner) = (1, true, owner);
    run
}

/// Run 1 of a tree keeping one job per shape: its parent spawns once (a
/// miss: a cold job and a pooled one), then everything but the pooled job
/// ends. Returns the run, the recorder and the pooled job.
fn first_run_kept() -> (Run, Recorder, JobId) {
    let (mut run, mut rec) = warm_fixture(&[8], 1);
    rec.shared.pool.set_policy(1, IDLE);
    let parent = started(&mut run, &mut rec, &[0]);
    request(&mut run, &mut rec, parent, 1, 1);
    let l = launches(&rec);
    let (cold, pooled) = (l[1].0, l[2].0);
    start_all(&mut run, &mut rec, cold, 1);
    start_all(&mut run, &mut rec, pooled, 1);
    ended(&mut run, &mut rec, cold, 1, ExitStatus::Code(0));
    exit(&mut run, &mut rec, 0, parent, 0, ExitStatus::Code(0), DONE, LATER);
    (run, rec, pooled)
}

/// Issue 37: a one-shot run of a tree that keeps jobs (a boot) starts
/// nothing while it goes, but what it learned is kept: at its spawning
/// job's end, the shape it spawned once gets a pooled job, kept, and the
/// next run's first spawn of it claims it. A plain run keeps nothing.
#[test]
fn a_one_shot_runs_spawn_is_learned_by_a_tree_that_keeps_jobs() {
    for keeps in [true, false] {
        let (mut run, mut rec) = warm_fixture(&[8], 2);
        if keeps {
            rec.shared.pool.set_policy(1, IDLE);
        }
        let parent = started(&mut run, &mut rec, &[0]);
        rec.take();
        let (cold, _) = super::warm::request_cold(&mut run, &mut rec, parent, 1, 1, "a").expect("a miss");
        start_all(&mut run, &mut rec, cold, 1);
        ended(&mut run, &mut rec, cold, 1, ExitStatus::Code(0));
        assert_eq!(launches(&rec).len(), 1, "keeps {keeps}: nothing while the run goes");
        exit(&mut run, &mut rec, 0, parent, 0, ExitStatus::Code(0), DONE, LATER);
        assert_eq!(run.exit_code(), Some(0));
        let pooled: Vec<JobId> = launches(&rec).into_iter().filter(|l| l.1).map(|l| l.0).collect();
        if !keeps {
            assert!(pooled.is_empty(), "a plain run keeps nothing: {:?}", launches(&rec));
            continue;
        }
        assert_eq!(pooled.len(), 1, "one, as many as the tree keeps per shape: {:?}", launches(&rec));
        assert!(rec.shared.pool.holds(pooled[0]) && signals(&rec, pooled[0]).is_empty(), "kept");
        assert!(rec.said().iter().any(|l| l.starts_with("dpm: warm spawn: learned ")), "{:?}", rec.said());
        start_all(&mut run, &mut rec, pooled[0], 1);
        rec.take();
        let mut second = next_run(2);
        let parent = started(&mut second, &mut rec, &[0]);
        rec.take();
        assert!(super::warm::request_cold(&mut second, &mut rec, parent, 1, 7, "a").is_none(), "the next run's first spawn claims it");
        assert!(rec.sent().iter().any(|(_, m)| matches!(m, ToDaemon::Claim { job, .. } if *job == pooled[0])));
    }
}

#[test]
fn a_runs_unclaimed_pooled_job_is_kept_and_claimed_by_the_next_run() {
    let (first, mut rec, pooled) = first_run_kept();
    assert_eq!(first.exit_code(), Some(0), "the run is over");
    assert!(signals(&rec, pooled).is_empty(), "kept, not killed");
    assert!(rec.said().iter().any(|l| l.starts_with(&format!("dpm: warm spawn: kept {pooled} for later runs"))), "{:?}", rec.said());
    assert_eq!(rec.shared.destination(Some(pooled)), Destination::Pool, "never routed to the run: the pool's from its launch");
    assert!(rec.shared.pool.holds(pooled));
    assert_eq!(rec.shared.nodes.live(), 1, "it holds its slot");
    // While kept, the pool serves it: its output is held for the claim, its
    // fence completes.
    let out = to_pool(&mut rec, 0, ToLauncher::Output { job: pooled, rank: Rank(0), stream: Stream::Stderr, data: b"pre\n".to_vec() });
    assert!(out.is_empty());
    let out = to_pool(&mut rec, 0, ToLauncher::FenceIn { job: pooled, epoch: 0, count: 1, puts: vec![("k".into(), "v".into())] });
    assert!(matches!(out.as_slice(), [(NodeId(0), ToDaemon::FenceDone { job, epoch: 0, delta })] if *job == pooled && delta.len() == 1), "{out:?}");
    rec.take();

    let mut second = next_run(2);
    let parent = started(&mut second, &mut rec, &[0]);
    rec.take();
    request(&mut second, &mut rec, parent, 1, 7);
    assert!(launches(&rec).is_empty(), "no cold job, no pool yet: {:?}", rec.sent());
    assert!(rec.sent().iter().any(|(_, m)| matches!(m, ToDaemon::Claim { job, preput } if *job == pooled && preput[0].1 == "port7")));
    assert!(matches!(rec.shared.destination(Some(pooled)), Destination::Run(_)), "its messages go to the claiming run");
    assert_eq!(rec.shared.jobs.get(&pooled).map(|j| j.0), Some(2), "listed as the claiming run's");
    assert!(!rec.shared.pool.holds(pooled));
    claimed(&mut second, &mut rec, pooled, true);
    assert!(matches!(answer(&rec, 7), Some(Ok(k)) if k.ends_with(&format!("_{}", pooled.0))));
    let output: Vec<&[u8]> =
        rec.effects.iter().filter_map(|e| if let Effect::Output(_, j, _, _, d) = e { (*j == pooled).then_some(d.as_slice()) } else { None }).collect();
    assert_eq!(output, vec![b"pre\n".as_slice()], "what it said while kept, at the claim");
    let said = rec.said().join("\n");
    assert!(said.contains(&format!("claimed {pooled} for 'true' x1 from {parent} (kept from an earlier run)")), "{said}");
}

#[test]
fn another_environment_or_argument_never_claims_a_kept_job() {
    let (_, mut rec, pooled) = first_run_kept();
    let mut other_env = next_run(2);
    other_env.settings.spawn.base_env.push(("X".into(), "1".into()));
    let parent = started(&mut other_env, &mut rec, &[0]);
    rec.take();
    request(&mut other_env, &mut rec, parent, 1, 2);
    assert!(!rec.sent().iter().any(|(_, m)| matches!(m, ToDaemon::Claim { .. })), "another environment: {:?}", rec.said());
    let mut other_dir = next_run(3);
    other_dir.settings.spawn.cwd = "/elsewhere".into();
    let parent = started(&mut other_dir, &mut rec, &[0]);
    request(&mut other_dir, &mut rec, parent, 1, 3);
    let mut same = next_run(4);
    let parent = started(&mut same, &mut rec, &[0]);
    request_arg(&mut same, &mut rec, parent, 1, 4, "b");
    assert!(!rec.sent().iter().any(|(_, m)| matches!(m, ToDaemon::Claim { .. })), "another argument: {:?}", rec.said());
    assert!(rec.shared.pool.holds(pooled), "still kept");
}

/// Issue 26: the program rebuilt between two runs of one boot (same path,
/// another file) must not claim a child started from the old one; the same
/// file still does.
#[test]
fn a_rebuilt_program_never_claims_a_job_of_the_old_one() {
    let (_, mut rec, pooled) = first_run_kept();
    rec.files.identities.insert("/bin/true".into(), crate::plan::ProgramId { dev: 1, ino: 2, size: 3, mtime_ns: 4 });
    let mut rebuilt = next_run(2);
    let parent = started(&mut rebuilt, &mut rec, &[0]);
    rec.take();
    request(&mut rebuilt, &mut rec, parent, 1, 2);
    assert!(!rec.sent().iter().any(|(_, m)| matches!(m, ToDaemon::Claim { .. })), "a rebuilt program claimed: {:?}", rec.said());
    assert!(rec.said().iter().any(|l| l.contains("miss for")), "{:?}", rec.said());
    assert!(rec.shared.pool.holds(pooled), "still kept (for the old program's spawns)");
    rec.files.identities.clear();
    let mut same = next_run(3);
    let parent = started(&mut same, &mut rec, &[0]);
    request(&mut same, &mut rec, parent, 1, 3);
    assert!(rec.sent().iter().any(|(_, m)| matches!(m, ToDaemon::Claim { job, .. } if *job == pooled)), "the same file claims: {:?}", rec.said());
}

#[test]
fn kept_jobs_are_bounded_per_shape_and_killed_after_their_idle_time() {
    // A run pooling two jobs of a shape, on a tree keeping one per shape.
    let (mut run, mut rec) = warm_fixture(&[8], 2);
    rec.shared.pool.set_policy(1, IDLE);
    let parent = started(&mut run, &mut rec, &[0]);
    request(&mut run, &mut rec, parent, 1, 1);
    let l = launches(&rec);
    let (cold, pooled) = (l[1].0, [l[2].0, l[3].0]);
    for job in [cold, pooled[0], pooled[1]] {
        start_all(&mut run, &mut rec, job, 1);
    }
    ended(&mut run, &mut rec, cold, 1, ExitStatus::Code(0));
    rec.take();
    exit(&mut run, &mut rec, 0, parent, 0, ExitStatus::Code(0), DONE, LATER);
    assert!(rec.shared.pool.holds(pooled[0]) && signals(&rec, pooled[0]).is_empty(), "the oldest is kept");
    assert_eq!(signals(&rec, pooled[1]), vec![libc::SIGKILL], "no room for the other: killed");
    ended(&mut run, &mut rec, pooled[1], 1, ExitStatus::Signal(libc::SIGKILL));
    assert_eq!(run.exit_code(), Some(0));
    // Not claimed within its idle time: killed, then forgotten once its end is heard.
    let due = rec.now + u64::try_from(IDLE.as_micros()).unwrap();
    assert!(rec.effects.iter().any(|e| matches!(e, Effect::WakePool(at) if *at == due)), "the pool asks to be woken at its idle end");
    let soon = rec.now + 1;
    let (out, again) = pool_timer(&mut rec, soon);
    assert!(out.is_empty(), "not yet");
    assert_eq!(again, Some(due), "woken again when it is due");
    let (out, again) = pool_timer(&mut rec, due);
    assert!(matches!(out.as_slice(), [(_, ToDaemon::Signal { job, signal: libc::SIGKILL })] if *job == pooled[0]), "{out:?}");
    assert_eq!(again, None, "nothing left to wake for");
    assert_eq!(rec.shared.nodes.live(), 0, "its slot is free at once");
    assert!(rec.shared.pool.holds(pooled[0]), "dying: its end is still to come");
    let exited = ToLauncher::Exited(RankExit { job: pooled[0], rank: Rank(0), pid: 1, status: ExitStatus::Signal(9), pmi: DONE, at: LATER });
    let out = to_pool(&mut rec, 0, exited);
    assert!(matches!(out.as_slice(), [(_, ToDaemon::Forget { job })] if *job == pooled[0]), "{out:?}");
    assert!(rec.shared.pool.is_empty());
}

#[test]
fn a_kept_job_that_ends_is_forgotten_and_one_whose_slots_are_needed_is_killed() {
    let (_, mut rec, pooled) = first_run_kept();
    let exited = ToLauncher::Exited(RankExit { job: pooled, rank: Rank(0), pid: 1, status: ExitStatus::Code(3), pmi: DONE, at: LATER });
    let out = to_pool(&mut rec, 0, exited);
    assert!(out.iter().any(|(_, m)| matches!(m, ToDaemon::Forget { .. })), "{out:?}");
    assert!(rec.shared.pool.is_empty());
    // A run whose cold spawn needs every slot takes them from a kept job.
    let (_, mut rec, pooled) = first_run_kept();
    let mut second = next_run(2);
    second.settings.warm_spawn = 0;
    let parent = started(&mut second, &mut rec, &[0]);
    rec.take();
    request_arg(&mut second, &mut rec, parent, 7, 1, "b");
    assert_eq!(signals(&rec, pooled), vec![libc::SIGKILL], "its slot is needed");
    assert!(rec.sent().iter().any(|(_, m)| matches!(m, ToDaemon::Launch(l) if l.size == 7)), "placed");
    assert_eq!(rec.shared.nodes.live(), 8, "the parent and the spawn, nothing oversubscribed");
}

/// A pooled job whose spawning job ended while its run goes on is kept at
/// once: the pool serves it as before (it never was the run's), and any
/// run's spawn of its shape may claim it — the run that made it too.
#[test]
fn a_job_kept_while_its_run_goes_is_claimed_by_any_run() {
    for claimer in ["maker", "other"] {
        let (mut run, mut rec) = warm_fixture(&[8], 1);
        rec.shared.pool.set_policy(1, IDLE);
        let parent = started(&mut run, &mut rec, &[0]);
        request(&mut run, &mut rec, parent, 1, 1);
        let child = launches(&rec)[1].0;
        start_all(&mut run, &mut rec, child, 1);
        rec.take();
        // The child spawns (shape b), then ends: its pooled job is kept
        // while the run goes on.
        request_arg(&mut run, &mut rec, child, 1, 2, "b");
        let l = launches(&rec);
        let (cold, pooled) = (l[0].0, l[1].0);
        start_all(&mut run, &mut rec, cold, 1);
        ended(&mut run, &mut rec, cold, 1, ExitStatus::Code(0));
        ended(&mut run, &mut rec, child, 1, ExitStatus::Code(0));
        assert!(rec.shared.pool.holds(pooled) && signals(&rec, pooled).is_empty(), "kept");
        assert!(rec.said().iter().any(|l| l.starts_with(&format!("dpm: warm spawn: kept {pooled} for later runs"))), "{:?}", rec.said());
        assert_eq!(rec.shared.destination(Some(pooled)), Destination::Pool, "never the run's");
        // Its start, while kept, is the pool's.
        start_all(&mut run, &mut rec, pooled, 1);
        rec.take();
        let (claiming, claiming_parent) = match claimer {
            "maker" => (&mut run, parent),
            _ => {
                let mut other = next_run(2);
                let p = started(&mut other, &mut rec, &[0]);
                rec.take();
                request_arg(&mut other, &mut rec, p, 1, 3, "b");
                assert!(rec.sent().iter().any(|(_, m)| matches!(m, ToDaemon::Claim { job, .. } if *job == pooled)), "{:?}", rec.said());
                claimed(&mut other, &mut rec, pooled, true);
                assert!(matches!(answer(&rec, 3), Some(Ok(_))), "answered at once: it started while kept");
                // Two runs, the pool between them: one ledger, routes = live jobs.
                assert_eq!(rec.shared.destination(Some(pooled)), Destination::Run(2), "the claimer's");
                check_tree(&rec, &[&run, &other]);
                continue;
            }
        };
        request_arg(claiming, &mut rec, claiming_parent, 1, 4, "b");
        assert!(rec.sent().iter().any(|(_, m)| matches!(m, ToDaemon::Claim { job, .. } if *job == pooled)), "{:?}", rec.said());
        assert!(matches!(rec.shared.destination(Some(pooled)), Destination::Run(_)), "routed to the claiming run");
        claimed(&mut run, &mut rec, pooled, true);
        assert!(matches!(answer(&rec, 4), Some(Ok(_))), "answered at once: it started while kept");
        check_tree(&rec, &[&run]);
    }
}

/// A run's spawn claims a pooled job made for it before one the tree kept
/// from an earlier run.
#[test]
fn a_run_claims_its_own_pooled_job_before_a_kept_one() {
    let (mut first, mut rec) = warm_fixture(&[8], 2);
    rec.shared.pool.set_policy(2, IDLE);
    let parent = started(&mut first, &mut rec, &[0]);
    request(&mut first, &mut rec, parent, 1, 1);
    let l = launches(&rec);
    let (cold, kept) = (l[1].0, [l[2].0, l[3].0]);
    for job in [cold, kept[0], kept[1]] {
        start_all(&mut first, &mut rec, job, 1);
    }
    ended(&mut first, &mut rec, cold, 1, ExitStatus::Code(0));
    exit(&mut first, &mut rec, 0, parent, 0, ExitStatus::Code(0), DONE, LATER);
    assert!(kept.iter().all(|&j| rec.shared.pool.holds(j)), "both kept");
    let mut second = next_run(2);
    let parent = started(&mut second, &mut rec, &[0]);
    let claims =
        |rec: &Recorder| rec.sent().iter().filter_map(|(_, m)| if let ToDaemon::Claim { job, .. } = m { Some(*job) } else { None }).collect::<Vec<_>>();
    rec.take();
    request(&mut second, &mut rec, parent, 1, 2);
    assert_eq!(claims(&rec), vec![kept[0]], "none of its own yet: the oldest kept one");
    claimed(&mut second, &mut rec, kept[0], true);
    run_refill(&mut second, &mut rec);
    let own = launches(&rec).iter().find(|l| l.1).map(|l| l.0).expect("its own pooled job, after the claim");
    start_all(&mut second, &mut rec, own, 1);
    rec.take();
    request(&mut second, &mut rec, parent, 1, 3);
    assert_eq!(claims(&rec), vec![own], "its own before the older kept one: {:?}", rec.said());
    assert!(rec.shared.pool.holds(kept[1]), "the kept one stays kept");
}

/// The refill after a claim (its timer).
fn run_refill(run: &mut Run, rec: &mut Recorder) {
    run.on_timer(rec, Timer::WarmRefill);
}

/// A node lost under a pooled job: the job is killed and, its ranks gone
/// with the node, forgotten at once (no end will ever be heard).
#[test]
fn a_pooled_job_on_a_lost_node_is_forgotten() {
    let (_, mut rec, pooled) = first_run_kept();
    assert!(rec.shared.pool.holds(pooled));
    let mut out = PoolOutbox::default();
    let shared = &mut rec.shared;
    shared.pool.on_nodes_lost(&mut out, &mut shared.nodes, &[NodeId(0)]);
    rec.shared.pool.check_invariants(&[]);
    assert!(rec.shared.pool.is_empty(), "nothing left to wait for");
    assert_eq!(rec.shared.nodes.live(), 0, "its slot is free");
}
