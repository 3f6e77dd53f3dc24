//! The run reactor under a recorder and a virtual clock: the exit-status
//! rules of docs/guide.md "Exit status" and `crates/dpm/tests/failures.rs`, the
//! failure policy, fences, spawns, lost nodes and the defects fixed here.

use std::time::Duration;

use dpm_kvs::{JobId, NodeId, Rank};
use dpm_proto::{AppSpec, ExitStatus, LaunchJob, PmiMode, PmiProgress, ProcSpec, RankExit, RequestId, SpawnCommand, ToDaemon, ToLauncher};

use super::jobs::rank_ranges;
use super::*;
use crate::node_table::NodeTable;

const GRACE: Duration = Duration::from_secs(3);

/// A run over `slots.len()` nodes `h0`, `h1`… of fan-out 2.
fn fixture(slots: &[u32]) -> (Run, Recorder) {
    let hosts: Vec<String> = (0..slots.len()).map(|i| format!("h{i}")).collect();
    let table = NodeTable::new(hosts.into_iter().zip(slots.iter().copied()), 2);
    (Run::new(settings_for(slots)), Recorder::new(TreeShared::new(table, 0x5eed)))
}

/// The settings of a run over `slots.len()` nodes (see [`fixture`]).
pub(crate) fn settings_for(slots: &[u32]) -> Settings {
    let hosts: Vec<String> = (0..slots.len()).map(|i| format!("h{i}")).collect();
    Settings {
        label: false,
        kill_grace: GRACE,
        universe_size: slots.iter().map(|&s| i64::from(s)).sum(),
        universe_follows: None,
        pmi_mode: PmiMode::Fd,
        no_oversubscribe: false,
        report_placement: false,
        spawn: crate::spawn::SpawnContext {
            base_env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            cwd: "/tmp".into(),
            host: "h0".into(),
            nodes: hosts,
            node_env: false,
        },
        node_slots: slots.to_vec(),
        fanout: 2,
        heap_nodes: usize::MAX,
        owner: 1,
        warm_spawn: 0,
        warm_verbose: false,
        warm_starting: 0,
        binding: Default::default(),
        on_timeout: Default::default(),
    }
}

/// A job of `/bin/true` with rank `r` on node `node_of[r]`.
fn job(rec: &mut Recorder, node_of: &[usize]) -> LaunchJob {
    let (id, kvsname) = rec.shared.new_job_id();
    let app = AppSpec { exe: "/bin/true".into(), argv: vec!["true".into()], env: Vec::new(), wdir: "/".into(), node_env: false };
    let mut planned = crate::plan::PlannedJob::new();
    planned.push_app(app, node_of.len() as u32);
    LaunchJob {
        stdin_rank: Some(Rank(0)),
        ..planned.into_launch(id, kvsname, 4, node_of.iter().copied().map(NodeId).collect(), PmiMode::Fd, Default::default())
    }
}

/// Launch a job and start its ranks (pid 100 + rank for job 0, 200 + rank for job 1…).
fn started(run: &mut Run, rec: &mut Recorder, node_of: &[usize]) -> JobId {
    let launch = job(rec, node_of);
    let id = launch.job;
    run.launch(rec, launch).unwrap();
    run.settle(rec);
    for (r, &n) in node_of.iter().enumerate() {
        let pid = 100 * (id.0 + 1) + r as u32;
        deliver(run, rec, n, ToLauncher::Started { job: id, rank: Rank(r as u32), pid });
    }
    id
}

#[allow(clippy::too_many_arguments)]
fn exit(run: &mut Run, rec: &mut Recorder, node: usize, job: JobId, rank: u32, status: ExitStatus, pmi: PmiProgress, at: u64) {
    let pid = 100 * (job.0 + 1) + rank;
    deliver(run, rec, node, ToLauncher::Exited(RankExit { job, rank: Rank(rank), pid, status, pmi, at }));
}

/// A message from `node` for the launcher, routed by the tree's one rule
/// ([`TreeShared::destination`]): to the tree's pool if it holds its job (a
/// pooled job no run has claimed), else to the run. The invariants hold after it.
fn deliver(run: &mut Run, rec: &mut Recorder, node: usize, msg: ToLauncher) {
    match rec.shared.destination(msg.job()) {
        Destination::Pool => {
            crate::run::effects::with_pool(rec, |pool, nodes, pfx| pool.on_message(pfx, nodes, NodeId(node), msg));
            run.check_invariants(&rec.shared);
        }
        _ => run.on_message(rec, NodeId(node), msg),
    }
    // The tree's invariants, when this run is its only one (tests of
    // several runs check them with all: `check_tree`).
    if rec.shared.owners().iter().all(|&o| o == run.owner()) {
        rec.shared.check_invariants(&[run.view()]);
    }
}

/// The tree's invariants with every run of it.
fn check_tree(rec: &Recorder, runs: &[&Run]) {
    rec.shared.check_invariants(&runs.iter().map(|r| r.view()).collect::<Vec<_>>());
}

/// Signals sent to `job`, in order.
fn signals(rec: &Recorder, job: JobId) -> Vec<i32> {
    rec.sent().into_iter().filter_map(|(_, m)| if let ToDaemon::Signal { job: j, signal } = m { (*j == job).then_some(*signal) } else { None }).collect()
}

fn summary(rec: &Recorder) -> String {
    rec.said().last().map(|s| s.to_string()).unwrap_or_default()
}

const DONE: PmiProgress = PmiProgress::Finalized;
/// An exit after any teardown began (the recorder's clock stands at 1 s).
const LATER: u64 = 2_000_000;

#[test]
fn every_rank_finalizing_is_success_and_gives_everything_back() {
    let (mut run, mut rec) = fixture(&[2, 2]);
    let j = started(&mut run, &mut rec, &[0, 0, 1]);
    assert_eq!(rec.shared.nodes.loads(), vec![2, 1]);
    assert!(
        matches!(rec.sent()[..], [(NodeId(0), ToDaemon::Launch(a)), (NodeId(1), ToDaemon::Launch(b))] if a.procs.len() == 2 && b.procs.len() == 1 && a.stdin_rank == Some(Rank(0)) && b.stdin_rank.is_none())
    );
    for (node, rank) in [(0, 0), (0, 1), (1, 2)] {
        assert_eq!(run.exit_code(), None);
        exit(&mut run, &mut rec, node, j, rank, ExitStatus::Code(0), DONE, 10);
    }
    assert_eq!(run.exit_code(), Some(0));
    assert_eq!(rec.exit_code(), Some(0));
    assert!(rec.said().is_empty(), "{:?}", rec.said());
    assert_eq!(rec.shared.nodes.live(), 0, "every slot given back");
    assert!(rec.shared.jobs.is_empty());
    let forgets = rec.sent().iter().filter(|(_, m)| matches!(m, ToDaemon::Forget { .. })).count();
    assert_eq!(forgets, 2, "both nodes forget the job");
    assert_eq!(rec.shared.destination(Some(j)), Destination::Nowhere, "routed nowhere once forgotten");
}

/// Past `MPI_Finalize` nobody waits for a rank: its non-zero exit kills
/// nobody (Hydra's behaviour), and its code still decides.
#[test]
fn a_non_zero_exit_after_finalize_kills_nobody_and_decides() {
    let (mut run, mut rec) = fixture(&[2, 2]);
    let j = started(&mut run, &mut rec, &[0, 1, 1]);
    exit(&mut run, &mut rec, 1, j, 1, ExitStatus::Code(3), DONE, 500);
    assert!(signals(&rec, j).is_empty(), "nobody is killed");
    assert_eq!(run.exit_code(), None, "the others run on");
    exit(&mut run, &mut rec, 0, j, 0, ExitStatus::Code(0), DONE, LATER);
    exit(&mut run, &mut rec, 1, j, 2, ExitStatus::Code(0), DONE, LATER);
    assert_eq!(run.exit_code(), Some(3));
    assert_eq!(summary(&rec), "dpm: rank 1 (pid 101 on h1) exited with code 3");
}

#[test]
fn first_failing_rank_decides_names_it_and_others_are_killed() {
    let (mut run, mut rec) = fixture(&[2, 2]);
    let j = started(&mut run, &mut rec, &[0, 1, 1]);
    exit(&mut run, &mut rec, 1, j, 1, ExitStatus::Code(3), PmiProgress::Active, 500);
    assert_eq!(signals(&rec, j), vec![libc::SIGKILL, libc::SIGKILL], "each node of the job is told to kill it");
    exit(&mut run, &mut rec, 0, j, 0, ExitStatus::Signal(libc::SIGKILL), DONE, LATER);
    exit(&mut run, &mut rec, 1, j, 2, ExitStatus::Signal(libc::SIGKILL), DONE, LATER);
    assert_eq!(run.exit_code(), Some(3));
    assert_eq!(summary(&rec), "dpm: rank 1 (pid 101 on h1) exited with code 3; 2 other ranks terminated (2 of job 0)");
}

#[test]
fn the_earliest_exit_decides_even_when_read_later() {
    let (mut run, mut rec) = fixture(&[2]);
    let j = started(&mut run, &mut rec, &[0, 0]);
    exit(&mut run, &mut rec, 0, j, 1, ExitStatus::Code(5), DONE, 300);
    exit(&mut run, &mut rec, 0, j, 0, ExitStatus::Code(2), DONE, 200);
    assert_eq!(run.exit_code(), Some(2));
    assert!(summary(&rec).contains("rank 0 (pid 100 on h0) exited with code 2"), "{}", summary(&rec));
}

#[test]
fn a_signal_death_is_128_plus_n() {
    let (mut run, mut rec) = fixture(&[1]);
    let j = started(&mut run, &mut rec, &[0]);
    exit(&mut run, &mut rec, 0, j, 0, ExitStatus::Signal(libc::SIGSEGV), PmiProgress::Active, 10);
    assert_eq!(run.exit_code(), Some(128 + libc::SIGSEGV));
    assert!(summary(&rec).ends_with("was killed by signal 11 (SIGSEGV)"), "{}", summary(&rec));
}

#[test]
fn exit_zero_without_finalize_after_pmi_init_is_1() {
    let (mut run, mut rec) = fixture(&[2]);
    let j = started(&mut run, &mut rec, &[0, 0]);
    exit(&mut run, &mut rec, 0, j, 0, ExitStatus::Code(0), PmiProgress::Silent, 10);
    exit(&mut run, &mut rec, 0, j, 1, ExitStatus::Code(0), PmiProgress::Active, 20);
    assert_eq!(run.exit_code(), Some(1));
    assert!(summary(&rec).contains("rank 1 (pid 101 on h0) exited with code 0 without calling MPI_Finalize"), "{}", summary(&rec));
}

#[test]
fn an_abort_decides_with_its_code_and_255_for_pmi2() {
    let (mut run, mut rec) = fixture(&[2]);
    let j = started(&mut run, &mut rec, &[0, 0]);
    // A peer cut off by the abort fails first; the abort is still the cause.
    exit(&mut run, &mut rec, 0, j, 1, ExitStatus::Code(9), DONE, 10);
    run.on_message(&mut rec, NodeId(0), ToLauncher::Abort { job: j, rank: Rank(0), code: -1, message: "abort".into() });
    exit(&mut run, &mut rec, 0, j, 0, ExitStatus::Code(255), PmiProgress::Active, 30);
    assert_eq!(run.exit_code(), Some(255));
    assert_eq!(summary(&rec), "dpm: job failed: rank 0 (pid 100 on h0) called MPI_Abort with exit code -1");
    let (mut run, mut rec) = fixture(&[1]);
    let j = started(&mut run, &mut rec, &[0]);
    run.on_message(&mut rec, NodeId(0), ToLauncher::Abort { job: j, rank: Rank(0), code: 7, message: "bye".into() });
    exit(&mut run, &mut rec, 0, j, 0, ExitStatus::Code(7), PmiProgress::Active, 30);
    assert_eq!(run.exit_code(), Some(7));
    assert!(summary(&rec).ends_with("with exit code 7: bye"), "{}", summary(&rec));
}

#[test]
fn a_missing_program_is_127_and_kills_the_started_ranks() {
    let (mut run, mut rec) = fixture(&[2]);
    let launch = job(&mut rec, &[0, 0]);
    let j = launch.job;
    run.launch(&mut rec, launch).unwrap();
    run.on_message(&mut rec, NodeId(0), ToLauncher::Started { job: j, rank: Rank(0), pid: 100 });
    run.on_message(&mut rec, NodeId(0), ToLauncher::LaunchFailed { job: j, rank: Rank(1), error: "No such file".into(), errno: libc::ENOENT });
    assert_eq!(signals(&rec, j), vec![libc::SIGKILL]);
    assert_eq!(rec.shared.nodes.live(), 1, "the unstarted rank's slot is free");
    exit(&mut run, &mut rec, 0, j, 0, ExitStatus::Signal(libc::SIGKILL), PmiProgress::Silent, LATER + 1);
    assert_eq!(run.exit_code(), Some(127));
    assert!(summary(&rec).starts_with("dpm: job failed: rank 1 (on h0) could not be started: No such file"), "{}", summary(&rec));
}

#[test]
fn the_timeout_is_124_with_sigkill_after_the_grace() {
    let (mut run, mut rec) = fixture(&[2]);
    let j = started(&mut run, &mut rec, &[0, 0]);
    run.set_timeout(&mut rec, Duration::from_secs(5));
    assert!(rec.effects.iter().any(|e| matches!(e, Effect::Arm(Timer::Timeout, d) if *d == Duration::from_secs(5))));
    run.on_timer(&mut rec, Timer::Timeout);
    assert!(rec.said().contains(&"dpm: job timed out after 5 s; killing it"), "{:?}", rec.said());
    assert_eq!(signals(&rec, j), vec![libc::SIGTERM]);
    assert!(matches!(rec.effects.last(), Some(Effect::Arm(Timer::KillGrace, d)) if *d == GRACE));
    exit(&mut run, &mut rec, 0, j, 0, ExitStatus::Signal(libc::SIGTERM), DONE, LATER + 1);
    // Rank 1 ignores SIGTERM: the grace runs out.
    run.on_timer(&mut rec, Timer::KillGrace);
    assert_eq!(signals(&rec, j), vec![libc::SIGTERM, libc::SIGKILL]);
    exit(&mut run, &mut rec, 0, j, 1, ExitStatus::Signal(libc::SIGKILL), DONE, LATER + 2);
    assert_eq!(run.exit_code(), Some(124));
}

#[test]
fn dpms_own_signal_is_forwarded_and_128_plus_n() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        let (mut run, mut rec) = fixture(&[2]);
        let j = started(&mut run, &mut rec, &[0, 0]);
        run.on_signal(&mut rec, sig);
        assert_eq!(signals(&rec, j), vec![sig]);
        assert!(matches!(rec.effects.last(), Some(Effect::Arm(Timer::KillGrace, _))));
        // A second signal: SIGKILL at once.
        run.on_signal(&mut rec, sig);
        assert_eq!(signals(&rec, j), vec![sig, libc::SIGKILL]);
        exit(&mut run, &mut rec, 0, j, 0, ExitStatus::Signal(sig), DONE, LATER + 1);
        exit(&mut run, &mut rec, 0, j, 1, ExitStatus::Code(1), DONE, LATER + 1);
        assert_eq!(run.exit_code(), Some(128 + sig));
        assert_eq!(summary(&rec), format!("dpm: job ended by {}", signal_name(sig)));
    }
}

/// Rank 0 of job 0 on node 0 spawns `n` copies of `exe` with `info`; the
/// spawned job's id.
fn spawn(run: &mut Run, rec: &mut Recorder, parent: JobId, exe: &str, n: u32, info: Vec<(String, String)>) -> JobId {
    let commands = vec![SpawnCommand { exe: exe.into(), args: Vec::new(), maxprocs: n, info }];
    run.on_message(rec, NodeId(0), ToLauncher::Spawn { request: RequestId(7), job: parent, rank: Rank(0), preput: Vec::new(), commands });
    let launched = rec.sent().into_iter().rev().find_map(|(_, m)| if let ToDaemon::Launch(l) = m { Some(l.job) } else { None });
    launched.filter(|&j| j != parent).unwrap_or(JobId(u32::MAX))
}

#[test]
fn a_fence_completes_after_the_last_node() {
    let (mut run, mut rec) = fixture(&[2, 2]);
    let j = started(&mut run, &mut rec, &[0, 0, 1]);
    rec.take();
    let fence_in = |count, puts: Vec<(String, String)>| ToLauncher::FenceIn { job: j, epoch: 0, count, puts };
    run.on_message(&mut rec, NodeId(1), fence_in(1, vec![("b".into(), "2".into())]));
    assert!(rec.sent().is_empty(), "one node is not the whole job");
    run.on_message(&mut rec, NodeId(0), fence_in(2, vec![("a".into(), "1".into())]));
    let done: Vec<(NodeId, usize)> =
        rec.sent().iter().filter_map(|(n, m)| if let ToDaemon::FenceDone { delta, .. } = m { Some((*n, delta.len())) } else { None }).collect();
    assert_eq!(done, vec![(NodeId(0), 2), (NodeId(1), 2)], "to each top-level subtree, with every put");
}

#[test]
fn a_lost_node_fails_the_run_naming_it() {
    let (mut run, mut rec) = fixture(&[2, 2, 2]);
    // Fan-out 2: node 2 is below node 0; losing 0 loses 2.
    let j = started(&mut run, &mut rec, &[0, 1, 2]);
    run.on_node_lost(&mut rec, NodeId(0), "no heartbeat for 1.5 s".into());
    assert_eq!(rec.shared.nodes.state(NodeId(2)), Some(crate::node_table::NodeState::Lost));
    assert_eq!(rec.shared.nodes.live(), 1, "the lost ranks' slots are free");
    assert_eq!(signals(&rec, j), vec![libc::SIGKILL], "only node 1 is left to kill");
    exit(&mut run, &mut rec, 1, j, 1, ExitStatus::Signal(libc::SIGKILL), DONE, LATER + 1);
    assert_eq!(run.exit_code(), Some(1));
    assert_eq!(summary(&rec), "dpm: job failed: node 0 (h0) was lost: no heartbeat for 1.5 s; 2 other ranks terminated (2 of job 0)");
}

/// Two runs of one tree: a lost node ends the run with ranks there, as a
/// plain run ends; the other goes on, and its next spawn never goes there.
#[test]
fn a_lost_node_ends_only_the_run_with_ranks_there() {
    let (mut a, mut rec) = fixture(&[2, 2, 2]);
    a.settings.owner = 1;
    let mut b = Run::new(settings_for(&[2, 2, 2]));
    b.settings.owner = 2;
    let ja = started(&mut a, &mut rec, &[0]);
    let jb = started(&mut b, &mut rec, &[1]);
    check_tree(&rec, &[&a, &b]);
    // Both hear it, as every run of a boot does.
    rec.take();
    a.on_node_lost(&mut rec, NodeId(1), "its daemon exited".into());
    b.on_node_lost(&mut rec, NodeId(1), "its daemon exited".into());
    assert_eq!(b.exit_code(), Some(1));
    assert!(summary(&rec).starts_with("dpm: job failed: node 1 (h1) was lost: its daemon exited"), "{}", summary(&rec));
    assert_eq!(a.exit_code(), None, "the run with no rank there goes on");
    assert!(signals(&rec, ja).is_empty(), "and nothing of it is killed");
    assert_eq!(rec.shared.destination(Some(jb)), Destination::Nowhere);
    check_tree(&rec, &[&a, &b]);
    assert_eq!(rec.shared.nodes.loads(), vec![1, 0, 0], "the lost ranks' slots are free");
    let spawned = rec.shared.nodes.place_spawn(&[0, 0, 0, 0], &[None], true, -1).unwrap();
    assert!(spawned.iter().all(|n| *n != NodeId(1)), "a spawn never goes to the lost node: {spawned:?}");
}

/// Defect: a boot that loses a node ends its runs with SIGTERM, and the run
/// said "job ended by SIGTERM", exit 143, instead of naming the node.
#[test]
fn a_lost_node_decides_over_the_sigterm_that_follows_it() {
    let (mut run, mut rec) = fixture(&[2, 2]);
    let j = started(&mut run, &mut rec, &[0, 1]);
    run.on_node_lost(&mut rec, NodeId(1), "link closed".into());
    run.on_signal(&mut rec, libc::SIGTERM);
    exit(&mut run, &mut rec, 0, j, 0, ExitStatus::Signal(libc::SIGTERM), DONE, LATER + 1);
    assert_eq!(run.exit_code(), Some(1));
    assert!(summary(&rec).starts_with("dpm: job failed: node 1 (h1) was lost: link closed"), "{}", summary(&rec));
}

#[test]
fn the_daemons_going_away_ends_the_run() {
    let (mut run, mut rec) = fixture(&[2]);
    started(&mut run, &mut rec, &[0, 0]);
    run.on_daemons_gone(&mut rec);
    assert_eq!(run.exit_code(), Some(1));
    assert_eq!(summary(&rec), "dpm: job failed: dpm: the node daemon went away");
    assert_eq!(rec.shared.nodes.live(), 0, "the slots of jobs never reported are given back");
}

/// Defect: a control frame with no appnums or a rank beyond the size
/// panicked the run's task; now the run fails saying why, sending nothing.
#[test]
fn a_job_that_does_not_hold_together_is_refused_not_a_panic() {
    type Spoil = fn(&mut LaunchJob);
    let bad: Vec<(&str, Spoil)> = vec![
        ("appnums", |l| l.appnums.clear()),
        ("rank 5", |l| l.procs.push(ProcSpec { rank: Rank(5), app: 0 })),
        ("rank 1", |l| l.procs[0].rank = Rank(1)),
        ("app 3", |l| l.procs[0].app = 3),
        ("no processes", |l| {
            l.size = 0;
            l.node_of.clear();
            l.appnums.clear();
        }),
        ("nodes", |l| l.node_of[1] = NodeId(9)),
    ];
    for (what, spoil) in bad {
        let (mut run, mut rec) = fixture(&[2]);
        let mut launch = job(&mut rec, &[0, 0]);
        spoil(&mut launch);
        assert!(run.launch(&mut rec, launch).is_err(), "{what}");
        run.settle(&mut rec);
        assert_eq!(run.exit_code(), Some(2), "{what}");
        assert!(summary(&rec).starts_with("dpm: job failed: invalid job: ") && summary(&rec).contains(what), "{what}: {}", summary(&rec));
        assert!(rec.sent().is_empty(), "{what}: nothing sent");
        assert_eq!(rec.shared.nodes.live(), 0, "{what}: nothing held");
    }
}

#[test]
fn stdin_goes_to_rank_0s_node_and_output_is_passed_on() {
    let (mut run, mut rec) = fixture(&[1, 1]);
    let j = started(&mut run, &mut rec, &[1, 0]);
    rec.take();
    run.on_stdin(&mut rec, b"hi".to_vec());
    run.on_stdin(&mut rec, Vec::new());
    let stdin: Vec<(NodeId, usize)> =
        rec.sent().iter().filter_map(|(n, m)| if let ToDaemon::Stdin { data, .. } = m { Some((*n, data.len())) } else { None }).collect();
    assert_eq!(stdin, vec![(NodeId(1), 2), (NodeId(1), 0)]);
    run.on_message(&mut rec, NodeId(1), ToLauncher::Output { job: j, rank: Rank(0), stream: dpm_proto::Stream::Stdout, data: b"out".to_vec() });
    assert!(matches!(rec.effects.last(), Some(Effect::Output(_, _, Rank(0), _, d)) if d == b"out"));
}

#[test]
fn rank_ranges_are_compact() {
    assert_eq!(rank_ranges(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
    assert_eq!(rank_ranges(&[3]), "3");
}

mod dead;
mod pmix;
mod pool;
mod report;
mod resync;
mod spawns;
mod tree_connect;
mod warm;
mod warm_stagger;
mod watch;

#[test]
fn written_output_is_acknowledged_to_its_node_in_steps_until_the_job_ends() {
    use dpm_proto::OUTPUT_ACK_STEP;
    let (mut run, mut rec) = fixture(&[1, 1]);
    let j = started(&mut run, &mut rec, &[0, 1]);
    rec.take();
    let acks = |rec: &Recorder| -> Vec<(NodeId, u64)> {
        rec.sent()
            .iter()
            .filter_map(|(n, m)| {
                if let ToDaemon::OutputAck { job, bytes } = m {
                    assert_eq!(*job, j);
                    Some((*n, *bytes))
                } else {
                    None
                }
            })
            .collect()
    };
    // Credit per node: below the step nothing goes; at it, all of it.
    run.on_output_written(&mut rec, NodeId(0), j, OUTPUT_ACK_STEP - 1);
    run.on_output_written(&mut rec, NodeId(1), j, 10);
    assert!(acks(&rec).is_empty());
    run.on_output_written(&mut rec, NodeId(0), j, 2);
    assert_eq!(acks(&rec), vec![(NodeId(0), OUTPUT_ACK_STEP + 1)]);
    run.on_output_written(&mut rec, NodeId(1), j, OUTPUT_ACK_STEP);
    assert_eq!(acks(&rec), vec![(NodeId(0), OUTPUT_ACK_STEP + 1), (NodeId(1), OUTPUT_ACK_STEP + 10)]);
    rec.take();
    // Once the job has ended, its nodes forgot it: no more credit.
    run.on_signal(&mut rec, libc::SIGKILL);
    for (node, rank) in [(0, 0), (1, 1)] {
        let exited = ToLauncher::Exited(RankExit { job: j, rank: Rank(rank), pid: 1, status: ExitStatus::Signal(9), pmi: PmiProgress::Active, at: 1 });
        run.on_message(&mut rec, NodeId(node), exited);
    }
    assert!(rec.sent().iter().any(|(_, m)| matches!(m, ToDaemon::Forget { .. })), "the job ended");
    rec.take();
    run.on_output_written(&mut rec, NodeId(0), j, 2 * OUTPUT_ACK_STEP);
    assert!(acks(&rec).is_empty());
}

/// Open MPI tells jobs apart by a 16-bit hash of their namespace: the names
/// a tree hands out never share one with a live job or a name just issued
/// (4,000 jobs would hold ~120 clashes by chance).
#[test]
fn live_jobs_never_share_an_open_mpi_job_family() {
    let (_, mut rec) = fixture(&[4]);
    let shared = rec.shared();
    let mut live = std::collections::HashMap::new();
    for _ in 0..4000 {
        let (job, name) = shared.new_job_id();
        let family = super::open_mpi_family(&name);
        assert!(live.insert(family, name.clone()).is_none(), "{name} shares family {family} with {:?}", live.get(&family));
        shared.jobs.insert(job, (1, name, 1));
    }
}
