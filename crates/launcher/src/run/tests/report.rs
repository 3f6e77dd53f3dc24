//! A hung job explains itself: at `--timeout` with a report asked for, the
//! run asks every live rank's node first, prints each report as it comes,
//! and kills only once all are in (or their wait is over, the missing ones
//! named; one signal per node); MPIR's process table is announced once per job, with its hold.

use dpm_proto::control::{ProcInfo, TimeoutReport};

use super::*;

fn reporting(on_timeout: TimeoutReport) -> (Run, Recorder) {
    let (_, rec) = fixture(&[2, 2]);
    (Run::new(Settings { on_timeout, ..settings_for(&[2, 2]) }), rec)
}

fn report(run: &mut Run, rec: &mut Recorder, node: usize, job: JobId, rank: u32, stack: Option<&str>) {
    let msg = ToLauncher::RankReport { job, rank: Rank(rank), pid: 100 + rank, state: "waits in PMI `barrier_in`".into(), stack: stack.map(String::from) };
    deliver(run, rec, node, msg);
}

#[test]
fn stacks_are_asked_of_every_node_and_printed_before_the_kill() {
    let (mut run, mut rec) = reporting(TimeoutReport::Stacks);
    let j = started(&mut run, &mut rec, &[0, 1]);
    run.set_timeout(&mut rec, Duration::from_secs(5));
    run.on_timer(&mut rec, Timer::Timeout);
    let asked: Vec<usize> = rec.sent().iter().filter_map(|(n, m)| matches!(m, ToDaemon::Report { stacks: true, .. }).then_some(n.0)).collect();
    assert_eq!(asked, vec![0, 1]);
    assert!(signals(&rec, j).is_empty(), "killed before the reports");
    report(&mut run, &mut rec, 1, j, 1, Some("Thread 1:\n#0 MPI_Recv ()"));
    assert!(signals(&rec, j).is_empty());
    report(&mut run, &mut rec, 0, j, 0, Some("#0 PMPI_Barrier ()"));
    assert_eq!(signals(&rec, j), vec![libc::SIGTERM; 2]);
    let said = rec.said();
    assert!(said.contains(&"dpm: rank 1 (pid 101 on h1): waits in PMI `barrier_in`"), "{said:?}");
    assert!(said.contains(&"[rank 1 on h1] #0 MPI_Recv ()"), "{said:?}");
    assert!(said.contains(&"[rank 0 on h0] #0 PMPI_Barrier ()"), "{said:?}");
}

#[test]
fn a_rank_that_does_not_report_is_named_and_the_kill_goes_on() {
    let (mut run, mut rec) = reporting(TimeoutReport::State);
    let j = started(&mut run, &mut rec, &[0, 1]);
    run.set_timeout(&mut rec, Duration::from_secs(5));
    run.on_timer(&mut rec, Timer::Timeout);
    assert!(rec.sent().iter().any(|(_, m)| matches!(m, ToDaemon::Report { stacks: false, .. })));
    report(&mut run, &mut rec, 0, j, 0, None);
    run.on_timer(&mut rec, Timer::Reports);
    assert!(rec.said().iter().any(|l| l.starts_with("dpm: rank 1 (on h1): no report within")), "{:?}", rec.said());
    assert_eq!(signals(&rec, j), vec![libc::SIGTERM; 2]);
    // A late report changes nothing.
    report(&mut run, &mut rec, 1, j, 1, None);
    assert_eq!(signals(&rec, j), vec![libc::SIGTERM; 2]);
}

#[test]
fn without_a_report_the_timeout_kills_at_once() {
    let (mut run, mut rec) = reporting(TimeoutReport::Nothing);
    let j = started(&mut run, &mut rec, &[0, 1]);
    run.set_timeout(&mut rec, Duration::from_secs(5));
    run.on_timer(&mut rec, Timer::Timeout);
    assert!(!rec.sent().iter().any(|(_, m)| matches!(m, ToDaemon::Report { .. })));
    assert_eq!(signals(&rec, j), vec![libc::SIGTERM; 2]);
}

#[test]
fn every_job_is_announced_once_in_rank_order_and_a_held_one_continues_when_told() {
    let (mut run, mut rec) = fixture(&[2, 2]);
    let mut launch = job(&mut rec, &[1, 0]);
    launch.hold = true;
    let j = launch.job;
    run.launch(&mut rec, launch).unwrap();
    deliver(&mut run, &mut rec, 0, ToLauncher::Started { job: j, rank: Rank(1), pid: 11 });
    assert!(!rec.effects.iter().any(|e| matches!(e, Effect::ProcsStarted(..))), "announced before every rank started");
    deliver(&mut run, &mut rec, 1, ToLauncher::Started { job: j, rank: Rank(0), pid: 10 });
    let announced: Vec<_> =
        rec.effects.iter().filter_map(|e| if let Effect::ProcsStarted(job, procs, held) = e { Some((*job, procs.clone(), *held)) } else { None }).collect();
    let procs = vec![
        ProcInfo { rank: 0, host: "h1".into(), exe: "/bin/true".into(), pid: 10 },
        ProcInfo { rank: 1, host: "h0".into(), exe: "/bin/true".into(), pid: 11 },
    ];
    assert_eq!(announced, vec![(j, procs, true)]);
    assert!(signals(&rec, j).is_empty(), "continued before the debugger let it");
    run.continue_job(&mut rec, j);
    assert_eq!(signals(&rec, j), vec![libc::SIGCONT, libc::SIGCONT]);
    run.continue_job(&mut rec, j);
    assert_eq!(signals(&rec, j).len(), 2, "continued twice");
}

/// The PMI states each rank of `job` has listed (`dpm status --json`).
fn listed_pmi(rec: &mut Recorder, job: JobId) -> Vec<Option<String>> {
    rec.shared().ranks.get(&job).into_iter().flatten().map(|r| r.pmi.clone()).collect()
}

/// A tool's listing of the ranks' states (`dpm status --json`): asked of
/// every node without stacks, each state into the rank's `pmi` (nothing
/// printed, nothing killed), a rank whose node has not answered within the
/// bound named; each listing over counts once.
#[test]
fn a_listing_for_a_tool_fills_each_ranks_pmi_and_names_a_silent_node() {
    let (mut run, mut rec) = reporting(TimeoutReport::Nothing);
    let j = started(&mut run, &mut rec, &[0, 1]);
    rec.take();
    run.on_signal(&mut rec, crate::run_table::states_signal());
    let asked: Vec<usize> = rec.sent().iter().filter_map(|(n, m)| matches!(m, ToDaemon::Report { stacks: false, .. }).then_some(n.0)).collect();
    assert_eq!(asked, vec![0, 1]);
    report(&mut run, &mut rec, 0, j, 0, None);
    assert!(rec.shared().states_listed.is_empty(), "over before every state is in");
    run.on_timer(&mut rec, Timer::Listing);
    let want =
        vec![Some("waits in PMI `barrier_in`".to_string()), Some(format!("no report from its node h1 within {} s", super::super::report::LIST_WAIT.as_secs()))];
    assert_eq!(listed_pmi(&mut rec, j), want);
    assert_eq!(rec.shared().states_listed.values().copied().collect::<Vec<_>>(), vec![1]);
    assert!(signals(&rec, j).is_empty() && rec.said().is_empty(), "{:?}", rec.said());
    // The next listing ends as its last state comes.
    run.on_signal(&mut rec, crate::run_table::states_signal());
    assert_eq!(listed_pmi(&mut rec, j), vec![None, None], "the states of the listing before");
    report(&mut run, &mut rec, 1, j, 1, None);
    report(&mut run, &mut rec, 0, j, 0, None);
    assert_eq!(rec.shared().states_listed.values().copied().collect::<Vec<_>>(), vec![2]);
    assert_eq!(listed_pmi(&mut rec, j), vec![Some("waits in PMI `barrier_in`".to_string()); 2]);
}
