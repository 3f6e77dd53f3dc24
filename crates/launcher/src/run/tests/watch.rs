//! The PMIx watch in the run reactor: a watched job's launch tells its
//! nodes to watch; a node's `WatchTripped` ends the run (exit 1, the
//! message naming that node's program and `--pmi pmix`, every rank told
//! SIGTERM), once; an unwatched job's is ignored.

use super::*;

/// A watched MPMD job of `-n 2 ./hello : -n 2 sh`, the first app's ranks
/// on node 0, the second's on node 1.
fn watched_job(rec: &mut Recorder) -> LaunchJob {
    let (id, kvsname) = rec.shared.new_job_id();
    let mut planned = crate::plan::PlannedJob::new();
    for (exe, argv0) in [("/work/hello", "./hello"), ("/bin/sh", "sh")] {
        planned.push_app(AppSpec { exe: exe.into(), argv: vec![argv0.into(), "-c".into(), "$PROG".into()], env: vec![], wdir: "/".into(), node_env: false }, 2);
    }
    let node_of = [0, 0, 1, 1].map(NodeId).to_vec();
    LaunchJob { stdin_rank: Some(Rank(0)), pmix_watch: true, ..planned.into_launch(id, kvsname, 4, node_of, PmiMode::Fd, Default::default()) }
}

#[test]
fn a_trip_ends_the_run_once_naming_the_program_on_that_node() {
    let (mut run, mut rec) = fixture(&[2, 2]);
    let launch = watched_job(&mut rec);
    let j = launch.job;
    run.launch(&mut rec, launch).unwrap();
    run.settle(&mut rec);
    let launches: Vec<bool> = rec.sent().iter().filter_map(|(_, m)| if let ToDaemon::Launch(l) = m { Some(l.pmix_watch) } else { None }).collect();
    assert_eq!(launches, vec![true, true], "every node of the job watches its ranks");
    for (r, node) in [0, 0, 1, 1].into_iter().enumerate() {
        deliver(&mut run, &mut rec, node, ToLauncher::Started { job: j, rank: Rank(r as u32), pid: 100 + r as u32 });
    }
    deliver(&mut run, &mut rec, 1, ToLauncher::WatchTripped { job: j });
    assert_eq!(signals(&rec, j), vec![libc::SIGTERM, libc::SIGTERM], "both nodes end their ranks");
    assert_eq!(run.exit_code(), None, "the ranks' ends are awaited");
    deliver(&mut run, &mut rec, 0, ToLauncher::WatchTripped { job: j });
    assert_eq!(signals(&rec, j).len(), 2, "the run is ended once, whichever nodes trip");
    for (r, node) in [0, 0, 1, 1].into_iter().enumerate() {
        exit(&mut run, &mut rec, node, j, r as u32, ExitStatus::Signal(libc::SIGTERM), PmiProgress::Silent, LATER);
    }
    assert_eq!(run.exit_code(), Some(1));
    let s = summary(&rec);
    assert!(s.starts_with("dpm: job failed: a rank of 'sh' runs Open MPI, which needs PMIx"), "{s}");
    assert!(s.contains("--pmi pmix") && s.contains("OPAL_PREFIX"), "{s}");
}

#[test]
fn a_trip_for_a_job_not_watched_is_ignored() {
    let (mut run, mut rec) = fixture(&[2]);
    let j = started(&mut run, &mut rec, &[0, 0]);
    assert!(rec.sent().iter().all(|(_, m)| !matches!(m, ToDaemon::Launch(l) if l.pmix_watch)), "no watch unless asked");
    deliver(&mut run, &mut rec, 0, ToLauncher::WatchTripped { job: j });
    assert!(signals(&rec, j).is_empty());
    for r in 0..2 {
        exit(&mut run, &mut rec, 0, j, r, ExitStatus::Code(0), DONE, 10);
    }
    assert_eq!(run.exit_code(), Some(0));
}
