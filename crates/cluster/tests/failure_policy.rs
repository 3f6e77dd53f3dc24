//! The failure policy and exit status, on the in-process cluster: the cases
//! of `crates/dpm/tests/failures.rs` (which prove them against real MPICH),
//! here between the real run reactor and real node reactors on two nodes,
//! in virtual time. Bystander ranks hang until killed, so a run that ends
//! proves they were.

use std::time::Duration;

use dpm_cluster::{Cluster, Layout, Step};
use dpm_launcher::run::FailurePolicy;
use dpm_proto::ExitStatus;

const LIMIT: Duration = Duration::from_secs(60);

/// MPI_Init, then `then` for the failing rank and a hang for the others.
fn one_rank_fails(failing: u32, n: u32, then: Vec<Step>) -> Cluster {
    let mut c = Cluster::new(Layout::nodes(2));
    let mut bad = vec![Step::Init];
    bad.extend(then);
    c.script("bad", bad);
    c.script("bystander", vec![Step::Init, Step::Hang]);
    c.launch_mixed(&[("bystander", failing), ("bad", 1), ("bystander", n - failing - 1)]);
    c
}

fn summary(c: &Cluster) -> String {
    c.said.last().cloned().unwrap_or_default()
}

#[test]
fn mpi_abort_ends_the_job_with_its_code() {
    let mut c = one_rank_fails(1, 4, vec![Step::Abort(7), Step::Hang]);
    assert_eq!(c.run_until(LIMIT), Some(7));
    let s = summary(&c);
    assert!(s.contains("rank 1 ") && s.contains("MPI_Abort"), "{s}");
    assert_eq!(c.live(), 0, "every rank was killed");
    let t = c.finished_at.expect("finished");
    assert!(t < Duration::from_millis(100), "ended at once, not after the kill grace: {t:?}");
}

#[test]
fn segfault_is_128_plus_the_signal() {
    let mut c = one_rank_fails(1, 3, vec![Step::Die(11)]);
    assert_eq!(c.run_until(LIMIT), Some(128 + 11));
    let s = summary(&c);
    assert!(s.contains("signal 11") || s.contains("SIGSEGV"), "{s}");
    assert_eq!(c.live(), 0);
}

#[test]
fn exit_without_finalize_after_pmi_init_is_1() {
    let mut c = one_rank_fails(1, 3, vec![Step::Exit(0)]);
    assert_eq!(c.run_until(LIMIT), Some(1));
    assert!(summary(&c).contains("rank 1 "), "{}", summary(&c));
}

/// Without finalizing: the others wait for it, so they are killed. (After
/// `MPI_Finalize` nobody waits for it: they run on, as under Hydra.)
#[test]
fn a_rank_exit_code_decides() {
    let mut c = one_rank_fails(0, 2, vec![Step::Exit(3)]);
    assert_eq!(c.run_until(LIMIT), Some(3));
    assert_eq!(c.live(), 0);
}

#[test]
fn the_first_failure_decides() {
    let mut c = Cluster::new(Layout::nodes(2));
    c.script("first", vec![Step::Init, Step::Work(Duration::from_millis(5)), Step::Exit(4)]);
    c.script("second", vec![Step::Init, Step::Work(Duration::from_millis(50)), Step::Exit(9)]);
    c.script("bystander", vec![Step::Init, Step::Hang]);
    c.launch_mixed(&[("second", 1), ("bystander", 1), ("first", 1), ("bystander", 1)]);
    assert_eq!(c.run_until(LIMIT), Some(4));
    assert!(summary(&c).contains("rank 2 "), "{}", summary(&c));
}

#[test]
fn a_clean_run_exits_0_and_gives_back_every_slot() {
    let mut c = Cluster::new(Layout::nodes(2));
    c.script("ok", vec![Step::Init, Step::Barrier, Step::Finalize, Step::Exit(0)]);
    c.launch("ok", 4, None);
    assert_eq!(c.run_until(LIMIT), Some(0));
    assert_eq!(c.load(), 0, "slots left reserved");
    assert_eq!(c.shm_removed.len(), 2, "each node cleaned the job's shared memory");
}

#[test]
fn a_program_that_never_uses_pmi_may_exit_0() {
    let mut c = Cluster::new(Layout::nodes(2));
    c.script("plain", vec![Step::Exit(0)]);
    c.launch("plain", 3, None);
    assert_eq!(c.run_until(LIMIT), Some(0));
}

#[test]
fn the_timeout_kills_with_124() {
    let mut c = Cluster::new(Layout::nodes(2));
    c.script("slow", vec![Step::Init, Step::Hang]);
    c.launch("slow", 2, None);
    c.set_timeout(Duration::from_secs(10));
    assert_eq!(c.run_until(LIMIT), Some(124));
    let t = c.finished_at.expect("finished");
    assert!(t >= Duration::from_secs(10) && t < Duration::from_secs(11), "{t:?}");
    assert!(c.said.iter().any(|l| l.contains("timed out")), "{:?}", c.said);
}

#[test]
fn the_timeout_kills_ranks_that_ignore_sigterm_after_the_grace() {
    let mut c = Cluster::new(Layout::nodes(2));
    c.script("stubborn", vec![Step::Init, Step::IgnoreTerm, Step::Hang]);
    c.launch("stubborn", 2, None);
    c.set_timeout(Duration::from_secs(10));
    assert_eq!(c.run_until(LIMIT), Some(124));
    let t = c.finished_at.expect("finished");
    // The grace is 3 s (Layout's default kill_grace, as dpm's).
    assert!(t >= Duration::from_secs(13) && t < Duration::from_secs(14), "{t:?}");
    assert!(c.procs.iter().all(|p| p.end == Some(ExitStatus::Signal(libc::SIGKILL))));
}

#[test]
fn dpm_interrupted_is_128_plus_the_signal() {
    let mut c = Cluster::new(Layout::nodes(2));
    c.script("slow", vec![Step::Init, Step::Hang]);
    c.launch("slow", 4, None);
    c.signal_at(Duration::from_millis(100), libc::SIGINT);
    assert_eq!(c.run_until(LIMIT), Some(130));
    assert!(c.procs.iter().all(|p| p.end == Some(ExitStatus::Signal(libc::SIGINT))));
}

#[test]
fn a_lost_node_fails_the_run_naming_it() {
    let mut c = Cluster::new(Layout::nodes(3));
    c.script("slow", vec![Step::Init, Step::Hang]);
    c.launch("slow", 6, None);
    c.lose_node_at(Duration::from_millis(100), 1);
    let code = c.run_until(LIMIT);
    assert_ne!(code, Some(0));
    assert!(c.said.iter().any(|l| l.contains("n1")), "the node is named: {:?}", c.said);
    assert_eq!(c.live(), 0, "the other nodes' ranks were killed");
}

#[test]
fn a_failing_spawned_job_ends_the_run_by_default() {
    let mut c = Cluster::new(Layout::nodes(2));
    c.script("child", vec![Step::Init, Step::Die(11)]);
    c.script("parent", vec![Step::Init, Step::Spawn { n: 1, script: "child".into() }, Step::Hang]);
    c.launch("parent", 1, None);
    assert_eq!(c.run_until(LIMIT), Some(128 + 11));
    assert_eq!(c.live(), 0);
}

#[test]
fn a_run_may_survive_its_spawned_jobs_failures() {
    let mut c = Cluster::new(Layout::nodes(2));
    c.set_failure_policy(FailurePolicy::SurviveSpawnedJobs);
    c.script("child", vec![Step::Init, Step::Die(11)]);
    c.script(
        "parent",
        vec![Step::Init, Step::Spawn { n: 1, script: "child".into() }, Step::Work(Duration::from_millis(200)), Step::Barrier, Step::Finalize, Step::Exit(0)],
    );
    c.launch("parent", 1, None);
    assert_eq!(c.run_until(LIMIT), Some(0), "{:?}", c.said);
    let parent = &c.procs[0];
    assert_eq!(parent.end, Some(ExitStatus::Code(0)));
}

#[test]
fn a_lost_node_still_decides_when_sigterm_follows() {
    // A booted tree whose node is lost ends its runs with SIGTERM; the run
    // must still fail naming the node, not "ended by SIGTERM" (exit 143).
    let mut c = Cluster::new(Layout::nodes(3));
    c.script("slow", vec![Step::Init, Step::Hang]);
    c.launch("slow", 6, None);
    c.lose_node_at(Duration::from_millis(100), 2);
    c.signal_at(Duration::from_millis(100) + Duration::from_micros(60), libc::SIGTERM);
    let code = c.run_until(LIMIT);
    assert!(matches!(code, Some(c) if c != 0 && c != 128 + libc::SIGTERM), "{code:?}: {:?}", c.said);
    assert!(summary(&c).contains("n2"), "{:?}", c.said);
}

/// A lost node with none of the run's ranks (a boot's node another run
/// used): the run goes on, its later spawn never goes there, and the
/// tree's invariants (routes, one slot ledger) hold after every event.
#[test]
fn a_lost_node_without_the_runs_ranks_leaves_it_running_and_takes_no_spawn() {
    let mut c = Cluster::new(Layout::nodes(4));
    c.script("child", vec![Step::Init, Step::Finalize, Step::Exit(0)]);
    c.script(
        "parent",
        vec![Step::Init, Step::Work(Duration::from_millis(200)), Step::Spawn { n: 6, script: "child".into() }, Step::Barrier, Step::Finalize, Step::Exit(0)],
    );
    c.launch("parent", 2, None);
    c.lose_node_at(Duration::from_millis(50), 3);
    assert_eq!(c.run_until(LIMIT), Some(0), "{:?}", c.said);
    assert_eq!(c.procs.len(), 2 + 2 * 6, "the parents and each one's children");
    assert!(c.procs.iter().all(|p| p.node != 3), "nothing placed on the lost node: {:?}", c.procs.iter().map(|p| p.node).collect::<Vec<_>>());
    assert!(c.procs[2..].iter().any(|p| p.node != 0), "the children went to the other nodes up");
}
