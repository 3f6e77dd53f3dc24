//! `-disable-auto-cleanup` (`FailurePolicy::KeepOthers`): a rank dead
//! without finalizing is told to its job's nodes (`RanksDead`); the run ends
//! only once every live rank of the job waits in a doomed fence
//! (`FenceDoomed`, from each node), and its first failure decides.

use super::*;

#[test]
fn the_run_ends_once_every_live_rank_waits_for_the_dead() {
    let (mut run, mut rec) = fixture(&[2, 2]);
    run.set_failure_policy(FailurePolicy::KeepOthers);
    let j = started(&mut run, &mut rec, &[0, 0, 1, 1]);
    exit(&mut run, &mut rec, 0, j, 1, ExitStatus::Signal(libc::SIGSEGV), PmiProgress::Active, 10);
    let told: Vec<(usize, Vec<Rank>)> =
        rec.sent().iter().filter_map(|(n, m)| if let ToDaemon::RanksDead { ranks, .. } = m { Some((n.0, ranks.clone())) } else { None }).collect();
    assert_eq!(told, vec![(0, vec![Rank(1)]), (1, vec![Rank(1)])], "each node of the job learns it");
    assert!(signals(&rec, j).is_empty(), "the others run on");
    deliver(&mut run, &mut rec, 0, ToLauncher::FenceDoomed { job: j, waiting: vec![Rank(0)] });
    deliver(&mut run, &mut rec, 1, ToLauncher::FenceDoomed { job: j, waiting: vec![Rank(2)] });
    assert!(signals(&rec, j).is_empty(), "rank 3 may still print before its fence");
    deliver(&mut run, &mut rec, 1, ToLauncher::FenceDoomed { job: j, waiting: vec![Rank(2), Rank(3)] });
    assert_eq!(signals(&rec, j), vec![libc::SIGKILL, libc::SIGKILL], "nobody can finish: the run ends");
    for r in [0, 2, 3] {
        exit(&mut run, &mut rec, r / 2, j, r as u32, ExitStatus::Signal(libc::SIGKILL), PmiProgress::Active, LATER);
    }
    assert_eq!(run.exit_code(), Some(128 + libc::SIGSEGV));
    assert_eq!(summary(&rec), "dpm: job failed: rank 1 (pid 101 on h0) was killed by signal 11 (SIGSEGV); 3 other ranks terminated (3 of job 0)");
}

#[test]
fn a_rank_that_ends_while_the_others_wait_ends_the_run_too() {
    let (mut run, mut rec) = fixture(&[3]);
    run.set_failure_policy(FailurePolicy::KeepOthers);
    let j = started(&mut run, &mut rec, &[0, 0, 0]);
    exit(&mut run, &mut rec, 0, j, 1, ExitStatus::Code(3), PmiProgress::Active, 10);
    deliver(&mut run, &mut rec, 0, ToLauncher::FenceDoomed { job: j, waiting: vec![Rank(0)] });
    assert!(signals(&rec, j).is_empty());
    // Rank 2 exits 0 without finalizing (it could not either): the last one not waiting.
    exit(&mut run, &mut rec, 0, j, 2, ExitStatus::Code(0), PmiProgress::Active, 20);
    assert_eq!(signals(&rec, j), vec![libc::SIGKILL]);
    exit(&mut run, &mut rec, 0, j, 0, ExitStatus::Signal(libc::SIGKILL), PmiProgress::Active, LATER);
    assert_eq!(run.exit_code(), Some(3), "the first failure decides");
}
