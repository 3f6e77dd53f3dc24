//! Warm spawn in the run reactor: a miss that starts only its own children,
//! pools filled once a missed shape's job ended and its parent lives on (or
//! at its second miss) and after a claim, claims answered at once with the preputs sent to the job's nodes,
//! held output, quiet ends of pooled jobs, free slots only, eviction, and the
//! end of a run with a full pool.

use super::*;
use dpm_proto::Stream;

use crate::run::warm::{DEPTH_GROWTH, LEARN_DELAY, REFILL_DELAY};

/// A run whose spawns keep `n` pooled jobs per shape, saying its warm lines.
pub(super) fn warm_fixture(slots: &[u32], n: usize) -> (Run, Recorder) {
    let (mut run, rec) = fixture(slots);
    run.settings.warm_spawn = n;
    run.settings.warm_verbose = true;
    (run, rec)
}

/// Rank 0 of `parent` spawns `n` copies of `true` (request `req`, preput
/// `PARENT_ROOT_PORT_NAME=port<req>`); a miss's shape is then pooled, as
/// [`LEARN_DELAY`] after a spawned job's end while its parent lives on.
pub(super) fn request(run: &mut Run, rec: &mut Recorder, parent: JobId, n: u32, req: u64) {
    request_arg(run, rec, parent, n, req, "a");
}

/// The same with `true`'s argument `arg` (another shape than `a`).
pub(super) fn request_arg(run: &mut Run, rec: &mut Recorder, parent: JobId, n: u32, req: u64, arg: &str) {
    if request_cold(run, rec, parent, n, req, arg).is_some() {
        run.on_timer(rec, Timer::WarmLearn);
    }
}

/// The spawn alone: the cold job it launched (a miss), if any, and its size.
pub(super) fn request_cold(run: &mut Run, rec: &mut Recorder, parent: JobId, n: u32, req: u64, arg: &str) -> Option<(JobId, u32)> {
    let commands = vec![SpawnCommand { exe: "true".into(), args: vec![arg.into()], maxprocs: n, info: Vec::new() }];
    let preput = vec![("PARENT_ROOT_PORT_NAME".to_string(), format!("port{req}"))];
    let before = rec.sent().len();
    deliver(run, rec, 0, ToLauncher::Spawn { request: RequestId(req), job: parent, rank: Rank(0), preput, commands });
    rec.sent()[before..].iter().find_map(|(_, m)| match m {
        ToDaemon::Launch(l) if !l.awaiting_claim => Some((l.job, l.size)),
        _ => None,
    })
}

/// The jobs launched since the recorder was last taken: (job, awaiting claim, preput).
pub(super) fn launches(rec: &Recorder) -> Vec<(JobId, bool, usize)> {
    let mut out: Vec<(JobId, bool, usize)> = Vec::new();
    for (_, m) in rec.sent() {
        if let ToDaemon::Launch(l) = m {
            if !out.iter().any(|(j, _, _)| *j == l.job) {
                out.push((l.job, l.awaiting_claim, l.preput.len()));
            }
        }
    }
    out
}

/// Every rank of `job` starts.
pub(super) fn start_all(run: &mut Run, rec: &mut Recorder, job: JobId, n: u32) {
    for r in 0..n {
        deliver(run, rec, 0, ToLauncher::Started { job, rank: Rank(r), pid: 300 + 10 * job.0 + r });
    }
}

pub(super) fn answer(rec: &Recorder, req: u64) -> Option<Result<String, String>> {
    rec.sent().into_iter().find_map(|(_, m)| match m {
        ToDaemon::SpawnDone { request, result, .. } if *request == RequestId(req) => Some(result.clone()),
        _ => None,
    })
}

/// Node 0 confirms (`alive`) or refuses the claim of `job`.
pub(super) fn claimed(run: &mut Run, rec: &mut Recorder, job: JobId, alive: bool) {
    claimed_ready(run, rec, job, alive, true);
}

/// The same, saying whether its ranks were waiting for the claim (`ready`).
pub(super) fn claimed_ready(run: &mut Run, rec: &mut Recorder, job: JobId, alive: bool, ready: bool) {
    deliver(run, rec, 0, ToLauncher::Claimed { job, alive, ready });
}

pub(super) fn ended(run: &mut Run, rec: &mut Recorder, job: JobId, n: u32, status: ExitStatus) {
    for r in 0..n {
        let pid = 300 + 10 * job.0 + r;
        deliver(run, rec, 0, ToLauncher::Exited(RankExit { job, rank: Rank(r), pid, status, pmi: DONE, at: LATER }));
    }
}

#[test]
fn a_miss_runs_cold_and_fills_the_pool_then_a_spawn_claims_at_once() {
    let (mut run, mut rec) = warm_fixture(&[8], 2);
    let parent = started(&mut run, &mut rec, &[0]);
    rec.take();
    request(&mut run, &mut rec, parent, 2, 1);
    let l = launches(&rec);
    assert_eq!(l.len(), 3, "the cold job, then two pooled: {l:?}");
    assert_eq!((l[0].1, l[0].2), (false, 1), "the cold job has the preput");
    assert!(l[1..].iter().all(|&(_, awaiting, preput)| awaiting && preput == 0), "{l:?}");
    let (cold, pooled) = (l[0].0, l[1].0);
    start_all(&mut run, &mut rec, cold, 2);
    start_all(&mut run, &mut rec, pooled, 2);
    start_all(&mut run, &mut rec, l[2].0, 2);
    assert!(matches!(answer(&rec, 1), Some(Ok(_))));
    assert_eq!(rec.shared.nodes.live(), 7, "parent, cold job and two pooled jobs hold slots");
    ended(&mut run, &mut rec, cold, 2, ExitStatus::Code(0));
    rec.take();
    request(&mut run, &mut rec, parent, 2, 2);
    assert!(answer(&rec, 2).is_none(), "not before the node confirms the claim");
    claimed(&mut run, &mut rec, pooled, true);
    let sent = rec.sent();
    let claim = sent.iter().position(|(_, m)| matches!(m, ToDaemon::Claim { job, preput } if *job == pooled && preput[0].1 == "port2"));
    let done =
        sent.iter().position(|(_, m)| matches!(m, ToDaemon::SpawnDone { request: RequestId(2), result: Ok(k), .. } if k.ends_with(&format!("_{}", pooled.0))));
    assert!(claim.is_some() && claim < done, "the claim, then the answer: {sent:?}");
    assert!(launches(&rec).is_empty(), "no replacement on the claim's path: {sent:?}");
    assert!(rec.effects.iter().any(|e| matches!(e, Effect::Arm(Timer::WarmRefill, _))));
    run.on_timer(&mut rec, Timer::WarmRefill);
    assert_eq!(launches(&rec).iter().filter(|l| l.1).count(), 1, "the replacement, a moment later");
    let said = rec.said().join("\n");
    assert!(said.contains(&format!("dpm: warm spawn: claimed {pooled} for 'true' x2 from job 0")), "{said}");
    // A different shape (other arguments) does not match.
    rec.take();
    let commands = vec![SpawnCommand { exe: "true".into(), args: vec!["b".into()], maxprocs: 2, info: Vec::new() }];
    deliver(&mut run, &mut rec, 0, ToLauncher::Spawn { request: RequestId(3), job: parent, rank: Rank(0), preput: Vec::new(), commands });
    assert!(!rec.sent().iter().any(|(_, m)| matches!(m, ToDaemon::Claim { .. })));
    assert!(rec.said().iter().any(|l| l.starts_with("dpm: warm spawn: miss for")));
}

#[test]
fn a_pooled_jobs_output_is_held_until_its_claim_and_its_crash_is_not_the_runs() {
    let (mut run, mut rec) = warm_fixture(&[8], 1);
    let parent = started(&mut run, &mut rec, &[0]);
    request(&mut run, &mut rec, parent, 1, 1);
    let l = launches(&rec);
    let (cold, pooled) = (l[l.len() - 2].0, l[l.len() - 1].0);
    let out = |job, data: &[u8]| ToLauncher::Output { job, rank: Rank(0), stream: Stream::Stderr, data: data.to_vec() };
    rec.take();
    deliver(&mut run, &mut rec, 0, out(pooled, b"one "));
    deliver(&mut run, &mut rec, 0, out(pooled, b"two\n"));
    assert!(!rec.effects.iter().any(|e| matches!(e, Effect::Output(..))), "held");
    start_all(&mut run, &mut rec, cold, 1);
    start_all(&mut run, &mut rec, pooled, 1);
    ended(&mut run, &mut rec, cold, 1, ExitStatus::Code(0));
    request(&mut run, &mut rec, parent, 1, 2);
    assert!(!rec.effects.iter().any(|e| matches!(e, Effect::Output(..))), "held until the claim is confirmed");
    claimed(&mut run, &mut rec, pooled, true);
    let shown: Vec<Vec<u8>> =
        rec.effects.iter().filter_map(|e| if let Effect::Output(_, j, _, _, d) = e { (*j == pooled).then(|| d.clone()) } else { None }).collect();
    assert_eq!(shown, vec![b"one ".to_vec(), b"two\n".to_vec()], "delivered in order at the claim");
    // The refill crashes before its claim: dropped, quietly.
    run.on_timer(&mut rec, Timer::WarmRefill);
    let refill = launches(&rec).last().unwrap().0;
    assert_ne!(refill, pooled);
    start_all(&mut run, &mut rec, refill, 1);
    deliver(&mut run, &mut rec, 0, out(refill, b"never shown"));
    ended(&mut run, &mut rec, refill, 1, ExitStatus::Signal(libc::SIGSEGV));
    assert!(rec.said().iter().any(|l| l.starts_with(&format!("dpm: warm spawn: dropped {refill}: rank 0 ended"))), "{:?}", rec.said());
    assert!(!rec.effects.iter().any(|e| matches!(e, Effect::Output(_, j, _, _, _) if *j == refill)));
    // The claimed job ends and gives its slot back: the pool is filled again.
    ended(&mut run, &mut rec, pooled, 1, ExitStatus::Code(0));
    let again = launches(&rec).last().unwrap().0;
    assert!(again != refill && rec.said().last().unwrap().starts_with(&format!("dpm: warm spawn: refilled {again}")));
    ended(&mut run, &mut rec, parent, 1, ExitStatus::Code(0));
    assert_eq!(signals(&rec, again), vec![libc::SIGKILL], "only the pool is left: killed");
    ended(&mut run, &mut rec, again, 1, ExitStatus::Signal(libc::SIGKILL));
    assert_eq!(run.exit_code(), Some(0), "{:?}", rec.said());
}

#[test]
fn output_beyond_the_bound_drops_the_pooled_job() {
    let (mut run, mut rec) = warm_fixture(&[8], 1);
    let parent = started(&mut run, &mut rec, &[0]);
    request(&mut run, &mut rec, parent, 1, 1);
    let pooled = launches(&rec).last().unwrap().0;
    start_all(&mut run, &mut rec, pooled, 1);
    let big = vec![b'x'; MAX_HELD_OUTPUT / 2 + 1];
    for _ in 0..2 {
        deliver(&mut run, &mut rec, 0, ToLauncher::Output { job: pooled, rank: Rank(0), stream: Stream::Stdout, data: big.clone() });
    }
    assert_eq!(signals(&rec, pooled), vec![libc::SIGKILL]);
    assert!(rec.said().iter().any(|l| l.contains(&format!("dropped {pooled}: it wrote more than"))));
}

#[test]
fn a_run_with_a_full_pool_kills_it_at_the_end_and_exits_0() {
    let (mut run, mut rec) = warm_fixture(&[8], 2);
    let parent = started(&mut run, &mut rec, &[0]);
    request(&mut run, &mut rec, parent, 1, 1);
    let l = launches(&rec);
    for &(job, _, _) in &l[1..] {
        start_all(&mut run, &mut rec, job, 1);
    }
    let cold = l[1].0;
    ended(&mut run, &mut rec, cold, 1, ExitStatus::Code(0));
    ended(&mut run, &mut rec, parent, 1, ExitStatus::Code(0));
    assert_eq!(run.exit_code(), Some(0), "the run is over with its own jobs");
    let pooled: Vec<JobId> = l[2..].iter().map(|x| x.0).collect();
    assert_eq!(rec.shared.nodes.live(), 0, "the pooled jobs' slots are free at once");
    for &p in &pooled {
        assert_eq!(signals(&rec, p), vec![libc::SIGKILL], "the pool kills what was made for the run");
        assert!(rec.shared.pool.holds(p), "until its end is heard");
        ended(&mut run, &mut rec, p, 1, ExitStatus::Signal(libc::SIGKILL));
    }
    assert!(rec.shared.pool.is_empty(), "forgotten once their ends are heard");
    assert!(rec.said().contains(&"dpm: warm spawn: 0 claimed, 1 missed, 2 refilled"), "{:?}", rec.said());
    assert!(!rec.said().iter().any(|l| l.contains("dropped") || l.contains("terminated")), "{:?}", rec.said());
}

#[test]
fn pools_take_only_free_slots_and_give_them_to_a_spawn_that_needs_them() {
    let (mut run, mut rec) = warm_fixture(&[3], 2);
    run.settings.no_oversubscribe = true;
    run.settings.universe_size = 3;
    let parent = started(&mut run, &mut rec, &[0]);
    request(&mut run, &mut rec, parent, 1, 1);
    assert_eq!(launches(&rec).iter().filter(|l| l.1).count(), 1, "one free slot: one pooled job, not two");
    let cold = launches(&rec)[1].0;
    start_all(&mut run, &mut rec, cold, 1);
    ended(&mut run, &mut rec, cold, 1, ExitStatus::Code(0));
    run.on_timer(&mut rec, Timer::WarmLearn);
    assert_eq!(launches(&rec).iter().filter(|l| l.1).count(), 2, "the cold job's slot went to the pool");
    assert_eq!(rec.shared.nodes.live(), 3);
    rec.take();
    // A spawn of two of another shape fits only without the pool.
    let commands = vec![SpawnCommand { exe: "true".into(), args: Vec::new(), maxprocs: 2, info: Vec::new() }];
    deliver(&mut run, &mut rec, 0, ToLauncher::Spawn { request: RequestId(5), job: parent, rank: Rank(0), preput: Vec::new(), commands });
    assert_eq!(rec.said().iter().filter(|l| l.contains("its slots are needed")).count(), 2, "{:?}", rec.said());
    assert!(rec.sent().iter().any(|(_, m)| matches!(m, ToDaemon::Launch(l) if !l.awaiting_claim && l.size == 2)), "placed");
    assert!(matches!(answer(&rec, 5), Some(Ok(_))), "not refused: {:?}", answer(&rec, 5));
}

#[test]
fn a_spawners_pool_goes_with_it() {
    let (mut run, mut rec) = warm_fixture(&[8], 1);
    let parent = started(&mut run, &mut rec, &[0]);
    request(&mut run, &mut rec, parent, 1, 1);
    let child = launches(&rec)[1].0;
    start_all(&mut run, &mut rec, child, 1);
    // The spawned job spawns in turn (another shape: the same one would
    // claim its parent's pooled job): its own pool.
    request_arg(&mut run, &mut rec, child, 1, 2, "b");
    let grandchildren: Vec<JobId> = launches(&rec).iter().skip(3).map(|l| l.0).collect();
    assert_eq!(grandchildren.len(), 2, "a cold job and a pooled one");
    let pooled = grandchildren[1];
    ended(&mut run, &mut rec, child, 1, ExitStatus::Code(0));
    assert_eq!(signals(&rec, pooled), vec![libc::SIGKILL], "nobody is left to claim it");
    assert!(!rec.said().iter().any(|l| l.contains("dropped")), "quietly: {:?}", rec.said());
    ended(&mut run, &mut rec, pooled, 1, ExitStatus::Signal(libc::SIGKILL));
    assert_eq!(rec.shared.nodes.live(), 3, "the parent, its own pooled job and the child's cold job are left");
}

/// A miss starts its own children and nothing else; once the missed job
/// ended, the pool waits [`LEARN_DELAY`] for the parent: a one-shot run
/// (its parent ends first) never starts a pooled process.
#[test]
fn a_one_shot_runs_only_spawn_starts_nothing_else() {
    let (mut run, mut rec) = warm_fixture(&[16], 2);
    let parent = started(&mut run, &mut rec, &[0]);
    rec.take();
    let (cold, size) = request_cold(&mut run, &mut rec, parent, 2, 1, "a").expect("a miss");
    assert_eq!((launches(&rec).len(), size), (1, 2), "the cold job alone");
    assert!(matches!(answer(&rec, 1), Some(Ok(_))));
    start_all(&mut run, &mut rec, cold, 2);
    ended(&mut run, &mut rec, cold, 2, ExitStatus::Code(0));
    assert_eq!(launches(&rec).len(), 1, "nothing at the job's end");
    assert!(rec.effects.iter().any(|e| matches!(e, Effect::Arm(Timer::WarmLearn, d) if *d == LEARN_DELAY)), "the pool waits for the parent");
    ended(&mut run, &mut rec, parent, 1, ExitStatus::Code(0));
    run.on_timer(&mut rec, Timer::WarmLearn);
    assert_eq!(launches(&rec).len(), 1, "the parent ended first: no pooled job");
    assert_eq!(run.exit_code(), Some(0));
    assert!(rec.said().contains(&"dpm: warm spawn: 0 claimed, 1 missed, 0 refilled"), "{:?}", rec.said());
}

/// A parent that entered a fence after its spawn (MPICH's `MPI_Finalize`)
/// is ending: at [`LEARN_DELAY`] after the missed job's end its learned
/// shape gets no pool, though the parent has not ended yet.
#[test]
fn a_parent_that_fenced_since_its_spawn_gets_no_pool() {
    let (mut run, mut rec) = warm_fixture(&[16], 2);
    let parent = started(&mut run, &mut rec, &[0]);
    rec.take();
    let (cold, _) = request_cold(&mut run, &mut rec, parent, 2, 1, "a").expect("a miss");
    start_all(&mut run, &mut rec, cold, 2);
    deliver(&mut run, &mut rec, 0, ToLauncher::FenceIn { job: parent, epoch: 0, count: 1, puts: Vec::new() });
    ended(&mut run, &mut rec, cold, 2, ExitStatus::Code(0));
    run.on_timer(&mut rec, Timer::WarmLearn);
    assert_eq!(launches(&rec).len(), 1, "the cold job alone: {:?}", launches(&rec));
    // Its next spawn of the shape (it was not finalizing after all) fills the pool.
    let (again, _) = request_cold(&mut run, &mut rec, parent, 2, 2, "a").expect("a second miss");
    assert!(launches(&rec).iter().any(|l| l.1), "pooled at the second miss: {:?}", launches(&rec));
    start_all(&mut run, &mut rec, again, 2);
}

/// A parent that lives on after its spawned job's end gets its pool
/// [`LEARN_DELAY`] later; the next spawn claims it.
#[test]
fn a_parent_that_lives_on_gets_its_pool_after_the_missed_job_ended() {
    let (mut run, mut rec) = warm_fixture(&[16], 1);
    let parent = started(&mut run, &mut rec, &[0]);
    rec.take();
    let (cold, _) = request_cold(&mut run, &mut rec, parent, 1, 1, "a").expect("a miss");
    start_all(&mut run, &mut rec, cold, 1);
    run.on_timer(&mut rec, Timer::WarmRefill);
    assert_eq!(launches(&rec).len(), 1, "the refill timer does not pool a shape seen once");
    ended(&mut run, &mut rec, cold, 1, ExitStatus::Code(0));
    run.on_timer(&mut rec, Timer::WarmLearn);
    let pooled: Vec<JobId> = launches(&rec).into_iter().filter(|l| l.1).map(|l| l.0).collect();
    assert_eq!(pooled.len(), 1, "{:?}", launches(&rec));
    start_all(&mut run, &mut rec, pooled[0], 1);
    assert!(request_cold(&mut run, &mut rec, parent, 1, 2, "a").is_none(), "claimed, no cold job");
    claimed(&mut run, &mut rec, pooled[0], true);
    assert!(matches!(answer(&rec, 2), Some(Ok(k)) if k.ends_with(&format!("_{}", pooled[0].0))));
}

/// A second miss of a shape (a spawn loop faster than its children's end,
/// or than its pool) fills the pool at once.
#[test]
fn a_later_miss_of_a_known_shape_refills_at_once() {
    let (mut run, mut rec) = warm_fixture(&[16], 1);
    let parent = started(&mut run, &mut rec, &[0]);
    rec.take();
    let (first, _) = request_cold(&mut run, &mut rec, parent, 1, 1, "a").expect("a miss");
    assert_eq!(launches(&rec).len(), 1, "the first miss: cold only");
    start_all(&mut run, &mut rec, first, 1);
    rec.take();
    assert!(request_cold(&mut run, &mut rec, parent, 1, 2, "a").is_some(), "a second miss");
    let l = launches(&rec);
    assert_eq!(l.iter().map(|l| l.1).collect::<Vec<_>>(), [false, true], "cold, and the pool with it: {l:?}");
    let pooled = l[1].0;
    start_all(&mut run, &mut rec, pooled, 1);
    assert!(request_cold(&mut run, &mut rec, parent, 1, 3, "a").is_none(), "claimed, no cold job");
    claimed(&mut run, &mut rec, pooled, true);
    rec.take();
    assert!(request_cold(&mut run, &mut rec, parent, 1, 4, "a").is_some(), "the pool is used up: a miss");
    let l = launches(&rec);
    let want = [false, true, true];
    assert_eq!(l.iter().map(|l| l.1).collect::<Vec<_>>(), want, "cold, and the refill with it, one deeper (the spawns outran it): {l:?}");
}

#[test]
fn the_info_key_refuses_or_asks_for_warm_spawn() {
    let (mut run, mut rec) = warm_fixture(&[8], 0);
    let parent = started(&mut run, &mut rec, &[0]);
    let info = |v: &str| vec![(WARM_INFO_KEY.to_string(), v.to_string())];
    let commands = vec![SpawnCommand { exe: "true".into(), args: Vec::new(), maxprocs: 1, info: info("true") }];
    deliver(&mut run, &mut rec, 0, ToLauncher::Spawn { request: RequestId(1), job: parent, rank: Rank(0), preput: Vec::new(), commands });
    run.on_timer(&mut rec, Timer::WarmLearn);
    assert_eq!(launches(&rec).iter().filter(|l| l.1).count(), DEFAULT_WARM_SPAWN, "asked for: the default pool");
    let (mut run, mut rec) = warm_fixture(&[8], 2);
    let parent = started(&mut run, &mut rec, &[0]);
    let commands = vec![SpawnCommand { exe: "true".into(), args: Vec::new(), maxprocs: 1, info: info("false") }];
    deliver(&mut run, &mut rec, 0, ToLauncher::Spawn { request: RequestId(1), job: parent, rank: Rank(0), preput: Vec::new(), commands });
    run.on_timer(&mut rec, Timer::WarmLearn);
    assert_eq!(launches(&rec).iter().filter(|l| l.1).count(), 0, "refused: cold only");
}

/// A claim that fails — the node says a rank had ended, or a rank's end
/// arrives before every node confirmed — drops the pooled job and makes the
/// spawn again: the next pooled job is claimed, or (none left) a cold one
/// started; the parent gets exactly one answer, for the job that lives.
#[test]
fn a_failed_claim_drops_the_job_and_makes_the_spawn_again() {
    for how in ["refused", "ended"] {
        let (mut run, mut rec) = warm_fixture(&[8], 2);
        let parent = started(&mut run, &mut rec, &[0]);
        rec.take();
        request(&mut run, &mut rec, parent, 1, 1);
        let l = launches(&rec);
        let (cold, first, second) = (l[0].0, l[1].0, l[2].0);
        for job in [cold, first, second] {
            start_all(&mut run, &mut rec, job, 1);
        }
        rec.take();
        request(&mut run, &mut rec, parent, 1, 2);
        match how {
            "refused" => claimed(&mut run, &mut rec, first, false),
            _ => ended(&mut run, &mut rec, first, 1, ExitStatus::Code(3)),
        }
        let said = rec.said().join("\n");
        assert!(said.contains(&format!("dpm: warm spawn: dropped {first}: ")) && said.contains("the spawn is made again"), "{how}: {said}");
        assert_eq!(signals(&rec, first), vec![libc::SIGKILL], "{how}");
        let claims: Vec<JobId> = rec.sent().iter().filter_map(|(_, m)| if let ToDaemon::Claim { job, .. } = m { Some(*job) } else { None }).collect();
        assert_eq!(claims, vec![first, second], "{how}: the next pooled job is claimed");
        assert!(answer(&rec, 2).is_none(), "{how}");
        claimed(&mut run, &mut rec, second, true);
        let answers: Vec<_> = rec.sent().into_iter().filter(|(_, m)| matches!(m, ToDaemon::SpawnDone { request: RequestId(2), .. })).collect();
        assert!(matches!(&answers[..], [(_, ToDaemon::SpawnDone { result: Ok(k), .. })] if k.ends_with(&format!("_{}", second.0))), "{how}: {answers:?}");
        // The second fails too: nothing pooled is left, so the third try is cold.
        rec.take();
        request(&mut run, &mut rec, parent, 1, 3);
        let third = rec.sent().iter().find_map(|(_, m)| if let ToDaemon::Claim { job, .. } = m { Some(*job) } else { None });
        assert!(third.is_none(), "{how}: the refill waits for its timer, so nothing to claim");
        assert!(rec.sent().iter().any(|(_, m)| matches!(m, ToDaemon::Launch(l) if !l.awaiting_claim && l.preput.len() == 1)), "{how}: cold");
        assert_eq!(run.exit_code(), None, "{how}: the run goes on");
        ended(&mut run, &mut rec, first, 1, ExitStatus::Signal(libc::SIGKILL));
        assert!(!rec.said().iter().any(|l| l.contains("job failed")), "{how}: {:?}", rec.said());
    }
}

#[test]
fn a_burst_of_claims_takes_the_pool_before_any_replacement_starts() {
    let (mut run, mut rec) = warm_fixture(&[16], 3);
    let parent = started(&mut run, &mut rec, &[0]);
    rec.take();
    request(&mut run, &mut rec, parent, 1, 1);
    let l = launches(&rec);
    assert_eq!(l.len(), 4, "the cold job and three pooled: {l:?}");
    for (job, _, _) in &l {
        start_all(&mut run, &mut rec, *job, 1);
    }
    let pooled: Vec<JobId> = l[1..].iter().map(|l| l.0).collect();
    // Three spawns back to back, each claiming (the children stay alive).
    for (i, &job) in pooled.iter().enumerate() {
        rec.take();
        request(&mut run, &mut rec, parent, 1, 2 + i as u64);
        claimed(&mut run, &mut rec, job, true);
        assert!(matches!(answer(&rec, 2 + i as u64), Some(Ok(k)) if k.ends_with(&format!("_{}", job.0))), "claim {i} answered");
        assert!(launches(&rec).is_empty(), "no replacement during the burst");
        let armed: Vec<Duration> = rec.effects.iter().filter_map(|e| if let Effect::Arm(Timer::WarmRefill, d) = e { Some(*d) } else { None }).collect();
        assert_eq!(armed, vec![REFILL_DELAY], "each claim pushes the refill back by the delay");
    }
    // The burst is over: the timer fires once, and the pool is filled again.
    rec.take();
    run.on_timer(&mut rec, Timer::WarmRefill);
    assert_eq!(launches(&rec).iter().filter(|l| l.1).count(), 3, "three replacements after the burst");
}

/// New shapes that nobody claims (a task loop passing each task its number)
/// stop being pooled at their first miss after `UNCLAIMED_SHAPES_MAX` of
/// them: each is remembered and pooled if it misses again; a claim pools new
/// shapes at their first miss again.
#[test]
fn new_shapes_that_go_unclaimed_are_pooled_only_from_their_second_miss() {
    use crate::run::warm::UNCLAIMED_SHAPES_MAX;
    let (mut run, mut rec) = warm_fixture(&[64], 1);
    let parent = started(&mut run, &mut rec, &[0]);
    let pooled = |rec: &Recorder| launches(rec).into_iter().filter(|l| l.1).map(|l| l.0).collect::<Vec<_>>();
    for i in 0..UNCLAIMED_SHAPES_MAX {
        rec.take();
        request_arg(&mut run, &mut rec, parent, 1, u64::from(i), &format!("task{i}"));
        assert_eq!(pooled(&rec).len(), 1, "new shape {i} is pooled at its first miss");
    }
    rec.take();
    assert!(request_cold(&mut run, &mut rec, parent, 1, 10, "task10").is_some(), "a miss");
    run.on_timer(&mut rec, Timer::WarmLearn);
    assert!(pooled(&rec).is_empty(), "a third unclaimed new shape is not pooled: {:?}", launches(&rec));
    assert!(rec.said().iter().any(|l| l.contains("not pooled")), "{:?}", rec.said());
    // It comes again: pooled now.
    request_arg(&mut run, &mut rec, parent, 1, 11, "task10");
    let again = pooled(&rec);
    assert_eq!(again.len(), 1, "{:?}", launches(&rec));
    // A claim: new shapes are pooled at their first miss again.
    start_all(&mut run, &mut rec, again[0], 1);
    assert!(request_cold(&mut run, &mut rec, parent, 1, 12, "task10").is_none(), "claimed");
    claimed(&mut run, &mut rec, again[0], true);
    assert!(matches!(answer(&rec, 12), Some(Ok(_))), "the claim answered the spawn");
    rec.take();
    run.on_timer(&mut rec, Timer::WarmRefill);
    assert_eq!(pooled(&rec).len(), 1, "task10's refill after its claim");
    rec.take();
    request_arg(&mut run, &mut rec, parent, 1, 13, "task13");
    assert_eq!(pooled(&rec).len(), 1, "after a claim, a new shape is pooled at its first miss: {:?}", launches(&rec));
}

/// The claims of a spawn loop: each spawn claims a pooled job, its node says
/// whether the job was waiting (`ready`), the claimed job ends at once and
/// the pool is filled again. The pool's size after each round, and the
/// lines said.
fn claim_rounds(run: &mut Run, rec: &mut Recorder, parent: JobId, first_req: u64, ready: &[bool]) -> (Vec<usize>, String) {
    let (mut sizes, mut said) = (Vec::new(), String::new());
    for (i, &ready) in ready.iter().enumerate() {
        let req = first_req + i as u64;
        rec.take();
        request_cold(run, rec, parent, 1, req, "a");
        let job = rec.sent().iter().find_map(|(_, m)| if let ToDaemon::Claim { job, .. } = m { Some(*job) } else { None });
        let job = job.unwrap_or_else(|| panic!("round {i}: no claim: {:?}", rec.said()));
        claimed_ready(run, rec, job, true, ready);
        assert!(matches!(answer(rec, req), Some(Ok(_))), "round {i}: answered");
        ended(run, rec, job, 1, ExitStatus::Code(0));
        for (pooled, _, _) in launches(rec).into_iter().filter(|l| l.1) {
            start_all(run, rec, pooled, 1);
        }
        sizes.push(rec.shared.pool.listed().len());
        said += &rec.said().join("\n");
    }
    (sizes, said)
}

/// A pool whose claims find their jobs still starting is too shallow for
/// the rate of the spawns: it grows by one per such claim, up to
/// [`DEPTH_GROWTH`] times the N asked for; claims that find their jobs
/// waiting shrink it again, never below N, and the jobs beyond the depth
/// are only not refilled (never killed).
#[test]
fn a_pool_that_falls_behind_its_spawns_grows_and_shrinks_back() {
    let (mut run, mut rec) = warm_fixture(&[64], 2);
    let parent = started(&mut run, &mut rec, &[0]);
    let (cold, _) = request_cold(&mut run, &mut rec, parent, 1, 1, "a").expect("the first spawn misses");
    start_all(&mut run, &mut rec, cold, 1);
    ended(&mut run, &mut rec, cold, 1, ExitStatus::Code(0));
    run.on_timer(&mut rec, Timer::WarmLearn);
    for (pooled, _, _) in launches(&rec).into_iter().filter(|l| l.1) {
        start_all(&mut run, &mut rec, pooled, 1);
    }
    assert_eq!(rec.shared.pool.listed().len(), 2, "N = 2 at first");
    let (sizes, said) = claim_rounds(&mut run, &mut rec, parent, 2, &[false; 8]);
    assert_eq!(sizes, [3, 4, 5, 6, 7, 8, 8, 8], "one deeper per claim of a job still starting, at most 4 × 2");
    assert_eq!(2 * DEPTH_GROWTH, 8);
    assert!(said.contains("(still starting)") && said.contains("now 8 deep: its spawns come faster than it is refilled"), "{said}");
    // 8 claims in a row that found their jobs waiting: one shallower.
    let (sizes, said) = claim_rounds(&mut run, &mut rec, parent, 20, &[true; 8]);
    assert_eq!(sizes, [8, 8, 8, 8, 8, 8, 8, 7], "{said}");
    assert!(said.contains("now 7 deep: its claims find their jobs waiting"), "{said}");
    // And so on down to N, never below; nothing killed on the way.
    let (sizes, said) = claim_rounds(&mut run, &mut rec, parent, 40, &[true; 60]);
    assert_eq!(sizes.last(), Some(&2), "{sizes:?}");
    assert!(sizes.windows(2).all(|w| w[1] <= w[0]), "never refilled beyond the depth: {sizes:?}");
    assert!(!said.contains("dropped") && !said.contains("now 1 deep"), "{said}");
}

/// A miss of a shape pooled before (its pool was empty) grows it too.
#[test]
fn a_miss_of_a_pooled_shape_deepens_its_pool() {
    let (mut run, mut rec) = warm_fixture(&[64], 1);
    let parent = started(&mut run, &mut rec, &[0]);
    request(&mut run, &mut rec, parent, 1, 1);
    let pooled = launches(&rec).into_iter().filter(|l| l.1).map(|l| l.0).collect::<Vec<_>>();
    assert_eq!(pooled.len(), 1);
    start_all(&mut run, &mut rec, pooled[0], 1);
    rec.take();
    request_cold(&mut run, &mut rec, parent, 1, 2, "a");
    claimed_ready(&mut run, &mut rec, pooled[0], true, true);
    assert!(launches(&rec).is_empty(), "the refill waits");
    rec.take();
    // The next spawn comes before the refill: a miss; the pool deepens.
    assert!(request_cold(&mut run, &mut rec, parent, 1, 3, "a").is_some(), "a miss");
    assert!(rec.said().iter().any(|l| l.contains("now 2 deep")), "{:?}", rec.said());
    assert_eq!(launches(&rec).iter().filter(|l| l.1).count(), 2, "filled to its new depth at once");
}
