//! Spawns under the run reactor: when a spawn is answered (before or after
//! its children start), soft spawns, refusals, and how a failure in a
//! spawned job ends the run or not (`--survive-spawned-jobs`).

use super::*;

fn spawn_answer(rec: &Recorder) -> Option<Result<String, String>> {
    rec.sent().into_iter().find_map(|(n, m)| match m {
        ToDaemon::SpawnDone { request: RequestId(7), result, .. } if n == NodeId(0) => Some(result.clone()),
        _ => None,
    })
}

#[test]
fn a_spawn_is_answered_before_its_children_are_launched() {
    let (mut run, mut rec) = fixture(&[2, 2]);
    let parent = started(&mut run, &mut rec, &[0]);
    rec.take();
    let child = spawn(&mut run, &mut rec, parent, "true", 2, Vec::new());
    let order: Vec<&str> = rec
        .sent()
        .iter()
        .filter_map(|(_, m)| match m {
            ToDaemon::SpawnDone { .. } => Some("answer"),
            ToDaemon::Launch(l) if l.job == child => Some("launch"),
            _ => None,
        })
        .collect();
    assert_eq!(order, ["answer", "launch", "launch"], "the parent polls again before its children are placed");
    assert!(matches!(spawn_answer(&rec), Some(Ok(name)) if name.ends_with("_1")));
}

/// A parent job of two processes is answered once its children started
/// (`run::spawn::answers_before_start`: MPICH's race with a non-root parent rank).
#[test]
fn a_spawn_from_a_two_rank_parent_is_answered_once_every_child_started() {
    let (mut run, mut rec) = fixture(&[4]);
    let parent = started(&mut run, &mut rec, &[0, 0]);
    let child = spawn(&mut run, &mut rec, parent, "true", 1, Vec::new());
    assert!(spawn_answer(&rec).is_none(), "not before the child started");
    run.on_message(&mut rec, NodeId(0), ToLauncher::Started { job: child, rank: Rank(0), pid: 200 });
    assert!(matches!(spawn_answer(&rec), Some(Ok(_))));
}

#[test]
fn under_continue_a_spawn_is_answered_once_every_child_started() {
    let (mut run, mut rec) = fixture(&[2, 2]);
    run.set_failure_policy(FailurePolicy::SurviveSpawnedJobs);
    let parent = started(&mut run, &mut rec, &[0]);
    let child = spawn(&mut run, &mut rec, parent, "true", 2, Vec::new());
    let launched: Vec<NodeId> = rec.sent().iter().filter(|(_, m)| matches!(m, ToDaemon::Launch(l) if l.job == child)).map(|(n, _)| *n).collect();
    assert_eq!(launched, vec![NodeId(0), NodeId(1)], "placed by free slots: node 1 first, then node 0");
    run.on_message(&mut rec, NodeId(1), ToLauncher::Started { job: child, rank: Rank(0), pid: 200 });
    assert!(spawn_answer(&rec).is_none(), "not before every child started");
    run.on_message(&mut rec, NodeId(0), ToLauncher::Started { job: child, rank: Rank(1), pid: 201 });
    assert!(matches!(spawn_answer(&rec), Some(Ok(name)) if name.ends_with("_1")));
}

#[test]
fn a_soft_spawn_starts_what_fits_and_answers_the_rest_as_not_started() {
    let (mut run, mut rec) = fixture(&[2, 1]);
    run.settings.no_oversubscribe = true;
    let parent = started(&mut run, &mut rec, &[0]);
    let soft = vec![("soft".to_string(), "1:4".to_string())];
    let child = spawn(&mut run, &mut rec, parent, "true", 4, soft);
    let launch = rec.sent().into_iter().find_map(|(_, m)| if let ToDaemon::Launch(l) = m { (l.job == child).then(|| l.clone()) } else { None });
    assert_eq!(launch.map(|l| l.size), Some(2), "two free slots: two of the four");
    for r in 0..2 {
        run.on_message(&mut rec, NodeId(1 - r as usize), ToLauncher::Started { job: child, rank: Rank(r), pid: 200 + r });
    }
    let codes =
        rec.sent().into_iter().find_map(|(_, m)| if let ToDaemon::SpawnDone { result: Ok(_), errcodes, .. } = m { Some(errcodes.clone()) } else { None });
    assert_eq!(codes, Some(vec![0, 0, crate::spawn::NOT_STARTED, crate::spawn::NOT_STARTED]));
}

#[test]
fn under_continue_a_spawn_that_cannot_start_answers_rc_not_0_and_the_run_goes_on() {
    let (mut run, mut rec) = fixture(&[4]);
    run.set_failure_policy(FailurePolicy::SurviveSpawnedJobs);
    let parent = started(&mut run, &mut rec, &[0]);
    let child = spawn(&mut run, &mut rec, parent, "true", 2, Vec::new());
    run.on_message(&mut rec, NodeId(0), ToLauncher::Started { job: child, rank: Rank(0), pid: 200 });
    run.on_message(&mut rec, NodeId(0), ToLauncher::LaunchFailed { job: child, rank: Rank(1), error: "EAGAIN".into(), errno: libc::EAGAIN });
    assert!(matches!(spawn_answer(&rec), Some(Err(e)) if e.contains("rank 1 of job 1 (on h0) could not be started")));
    exit(&mut run, &mut rec, 0, child, 0, ExitStatus::Signal(libc::SIGKILL), PmiProgress::Active, LATER + 1);
    assert!(signals(&rec, parent).is_empty(), "the parent is not touched");
    exit(&mut run, &mut rec, 0, parent, 0, ExitStatus::Code(0), DONE, LATER + 2);
    assert_eq!(run.exit_code(), Some(0));
    assert_eq!(rec.shared.nodes.live(), 0);
}

/// Answered before its start, a child that then cannot start leaves its
/// parent waiting in its accept: the run ends with the start's error.
#[test]
fn a_spawned_child_that_cannot_start_after_the_answer_ends_the_run() {
    let (mut run, mut rec) = fixture(&[4]);
    let parent = started(&mut run, &mut rec, &[0]);
    let child = spawn(&mut run, &mut rec, parent, "true", 2, Vec::new());
    assert!(matches!(spawn_answer(&rec), Some(Ok(_))));
    run.on_message(&mut rec, NodeId(0), ToLauncher::Started { job: child, rank: Rank(0), pid: 200 });
    run.on_message(&mut rec, NodeId(0), ToLauncher::LaunchFailed { job: child, rank: Rank(1), error: "Exec format error".into(), errno: libc::ENOEXEC });
    assert_eq!(signals(&rec, parent), vec![libc::SIGKILL], "nothing is left waiting");
    assert_eq!(signals(&rec, child), vec![libc::SIGKILL]);
    exit(&mut run, &mut rec, 0, child, 0, ExitStatus::Signal(libc::SIGKILL), PmiProgress::Active, LATER + 1);
    exit(&mut run, &mut rec, 0, parent, 0, ExitStatus::Signal(libc::SIGKILL), PmiProgress::Active, LATER + 2);
    assert_eq!(run.exit_code(), Some(126));
    assert!(summary(&rec).contains("rank 1 of job 1 (on h0) could not be started: Exec format error"), "{}", summary(&rec));
    assert_eq!(rec.shared.nodes.live(), 0);
}

#[test]
fn spawns_are_refused_when_absurd_full_or_ending() {
    let (mut run, mut rec) = fixture(&[1, 1]);
    let parent = started(&mut run, &mut rec, &[0]);
    // Four billion processes: refused before anything is planned.
    spawn(&mut run, &mut rec, parent, "true", u32::MAX, Vec::new());
    assert!(matches!(spawn_answer(&rec), Some(Err(e)) if e.contains("at most 65536")), "{:?}", spawn_answer(&rec));
    assert_eq!(rec.shared.jobs.len(), 1, "no job made");
    assert_eq!(rec.shared.nodes.live(), 1);
    rec.take();
    // host info naming a node that is full, no oversubscription.
    let info = vec![("host".to_string(), "h0".to_string()), ("oversubscribe".to_string(), "false".to_string())];
    spawn(&mut run, &mut rec, parent, "true", 1, info);
    assert!(matches!(spawn_answer(&rec), Some(Err(e)) if e.contains("oversubscription is off")), "{:?}", spawn_answer(&rec));
    rec.take();
    run.on_signal(&mut rec, libc::SIGTERM);
    spawn(&mut run, &mut rec, parent, "true", 1, Vec::new());
    assert!(matches!(spawn_answer(&rec), Some(Err(e)) if e.contains("the run is ending")));
}

#[test]
fn by_default_a_failure_in_a_spawned_job_ends_every_job() {
    let (mut run, mut rec) = fixture(&[4]);
    let parent = started(&mut run, &mut rec, &[0]);
    let child = spawn(&mut run, &mut rec, parent, "true", 2, Vec::new());
    for r in 0..2 {
        run.on_message(&mut rec, NodeId(0), ToLauncher::Started { job: child, rank: Rank(r), pid: 200 + r });
    }
    exit(&mut run, &mut rec, 0, child, 1, ExitStatus::Code(4), PmiProgress::Active, 10);
    assert_eq!(signals(&rec, parent), vec![libc::SIGKILL]);
    assert_eq!(signals(&rec, child), vec![libc::SIGKILL]);
    exit(&mut run, &mut rec, 0, child, 0, ExitStatus::Signal(libc::SIGKILL), PmiProgress::Active, LATER + 1);
    exit(&mut run, &mut rec, 0, parent, 0, ExitStatus::Signal(libc::SIGKILL), PmiProgress::Active, LATER + 1);
    assert_eq!(run.exit_code(), Some(4));
    assert_eq!(summary(&rec), "dpm: rank 1 of job 1 (pid 201 on h0) exited with code 4; 2 other ranks terminated (1 of job 1, 1 of job 0)");
}

#[test]
fn survive_spawned_jobs_keeps_the_run_and_the_parent() {
    let (mut run, mut rec) = fixture(&[4]);
    run.set_failure_policy(FailurePolicy::SurviveSpawnedJobs);
    let parent = started(&mut run, &mut rec, &[0]);
    let child = spawn(&mut run, &mut rec, parent, "true", 2, Vec::new());
    for r in 0..2 {
        run.on_message(&mut rec, NodeId(0), ToLauncher::Started { job: child, rank: Rank(r), pid: 200 + r });
    }
    exit(&mut run, &mut rec, 0, child, 1, ExitStatus::Code(4), PmiProgress::Active, 10);
    assert!(signals(&rec, parent).is_empty(), "the parent is not touched");
    assert_eq!(signals(&rec, child), vec![libc::SIGKILL], "the failed job ends");
    exit(&mut run, &mut rec, 0, child, 0, ExitStatus::Signal(libc::SIGKILL), PmiProgress::Active, LATER + 1);
    assert!(!rec.shared.jobs.contains_key(&child));
    assert_eq!(run.exit_code(), None, "the run goes on");
    // An abort in a later spawned job: the same.
    let second = spawn(&mut run, &mut rec, parent, "true", 1, Vec::new());
    run.on_message(&mut rec, NodeId(0), ToLauncher::Started { job: second, rank: Rank(0), pid: 300 });
    run.on_message(&mut rec, NodeId(0), ToLauncher::Abort { job: second, rank: Rank(0), code: 3, message: String::new() });
    exit(&mut run, &mut rec, 0, second, 0, ExitStatus::Code(3), PmiProgress::Active, LATER + 2);
    assert!(signals(&rec, parent).is_empty());
    exit(&mut run, &mut rec, 0, parent, 0, ExitStatus::Code(0), DONE, LATER + 3);
    assert_eq!(run.exit_code(), Some(0));
    assert!(rec.said().is_empty(), "reported to nobody: {:?}", rec.said());
    assert_eq!(rec.shared.nodes.live(), 0);
}

#[test]
fn survive_spawned_jobs_still_ends_the_run_on_a_failure_of_the_first_job() {
    let (mut run, mut rec) = fixture(&[4]);
    run.set_failure_policy(FailurePolicy::SurviveSpawnedJobs);
    let parent = started(&mut run, &mut rec, &[0, 0]);
    let child = spawn(&mut run, &mut rec, parent, "true", 1, Vec::new());
    run.on_message(&mut rec, NodeId(0), ToLauncher::Started { job: child, rank: Rank(0), pid: 200 });
    exit(&mut run, &mut rec, 0, parent, 1, ExitStatus::Code(6), PmiProgress::Active, 10);
    assert_eq!(signals(&rec, child), vec![libc::SIGKILL]);
    exit(&mut run, &mut rec, 0, parent, 0, ExitStatus::Signal(libc::SIGKILL), DONE, LATER + 1);
    exit(&mut run, &mut rec, 0, child, 0, ExitStatus::Signal(libc::SIGKILL), DONE, LATER + 1);
    assert_eq!(run.exit_code(), Some(6));
}
