//! Warm spawn's pooled jobs on the in-process cluster: the tree's pool owns
//! each from its launch (its messages are the pool's, routed to no run)
//! until a spawn claims it, which moves it to the run in one event (its
//! later fence, output and exit are the run's); the pool refilled after a
//! claim; a pooled job kept past its run's end claimed by the next run of
//! the tree (a boot's); idle eviction by the pool's own timer; a pooled job
//! that dies before its claim; a plain run's end and the end of the tree
//! killing what is unclaimed — the real run, pool and node reactors in
//! virtual time, their invariants checked after every event.

use std::time::Duration;

use dpm_cluster::{get, put, Cluster, Layout, Step};
use dpm_kvs::{JobId, Rank};
use dpm_proto::ExitStatus;

const IDLE: Duration = Duration::from_secs(60);

/// Pre-`MPI_Init` output (held until a claim), `MPI_Init` (a pooled child
/// parks at its parent's port), then a fence and output of its own.
fn child() -> Vec<Step> {
    vec![
        Step::Print("pre-init".into()),
        Step::Init,
        put("c-{rank}", "v{rank}"),
        Step::Barrier,
        get("c-{rank}"),
        Step::Print("child done".into()),
        Step::Finalize,
        Step::Exit(0),
    ]
}

/// A parent spawning one `child` per entry of `gaps`, computing that long
/// after each spawn's accept.
fn parent(gaps: &[u64]) -> Vec<Step> {
    let mut steps = vec![Step::Init];
    for &ms in gaps {
        steps.extend([Step::Spawn { n: 1, script: "child".into() }, Step::Accept, Step::Work(Duration::from_millis(ms))]);
    }
    steps.extend([Step::Finalize, Step::Exit(0)]);
    steps
}

/// Two nodes of two slots, the run pooling one job per shape.
fn cluster(gaps: &[u64]) -> Cluster {
    let mut c = Cluster::new(Layout::nodes(2));
    c.set_warm_spawn(1);
    c.script("child", child()).script("parent", parent(gaps));
    c
}

fn said(c: &Cluster, what: &str) -> Vec<String> {
    c.said.iter().filter(|l| l.starts_with("dpm: warm spawn:") && l.contains(what)).cloned().collect()
}

/// The child `job` ran to its end as the child of `parent`: the port its
/// parent's spawn preput, its own fence, every line of its output.
fn assert_served(c: &Cluster, job: JobId, parent: JobId) {
    let k = &c.ranks(job)[0];
    let port = format!("port-of-{}-0", c.ranks(parent)[0].proc.kvsname);
    assert_eq!(k.proc.values.get("PARENT_ROOT_PORT_NAME"), Some(&Ok(port)), "{:?}", c.said);
    assert_eq!(k.proc.values.get("c-0"), Some(&Ok("v0".into())), "its fence completed: {:?}", c.said);
    assert_eq!(k.end, Some(ExitStatus::Code(0)));
    let out = String::from_utf8_lossy(&c.output[&(job, Rank(0))]).into_owned();
    assert_eq!(out, "pre-init\nchild done\n", "held output first, then the rest, once");
}

#[test]
fn a_spawn_claims_a_pooled_job_and_its_later_fence_output_and_exit_are_the_runs() {
    let mut c = cluster(&[200, 0]);
    let p = c.launch("parent", 1, None);
    assert_eq!(c.run_until(Duration::from_secs(30)), Some(0), "{:?}", c.said);
    // Job 1: the first spawn's, cold; job 2: pooled once job 1 was up.
    assert_eq!(said(&c, "miss for").len(), 1, "{:?}", c.said);
    let claimed = said(&c, "claimed job");
    assert!(matches!(claimed.as_slice(), [l] if l.contains("claimed job 2 ")), "{:?}", c.said);
    assert_served(&c, JobId(1), p);
    assert_served(&c, JobId(2), p);
    assert_eq!((c.live(), c.load()), (0, 0), "the refill after the claim went with the parent");
}

#[test]
fn a_pooled_job_that_dies_before_its_claim_is_dropped_and_the_spawn_runs_cold() {
    let mut c = cluster(&[500, 0]);
    let p = c.launch("parent", 1, None);
    c.kill_at(Duration::from_millis(300), JobId(2), Rank(0));
    assert_eq!(c.run_until(Duration::from_secs(30)), Some(0), "its death is not the run's failure: {:?}", c.said);
    assert!(said(&c, "dropped job 2").iter().any(|l| l.contains("before a claim")), "{:?}", c.said);
    assert!(said(&c, "claimed job").is_empty(), "{:?}", c.said);
    assert_eq!(said(&c, "miss for").len(), 2, "{:?}", c.said);
    let second = (3..6).map(JobId).find(|&j| c.ranks(j).first().is_some_and(|k| k.end == Some(ExitStatus::Code(0)))).expect("a cold child");
    assert_served(&c, second, p);
    assert_eq!((c.live(), c.load()), (0, 0));
}

/// Run 1 of a tree keeping one pooled job per shape: its parent spawns once
/// (job 1 cold, job 2 pooled) and ends; job 2 goes to the tree's pool.
fn first_run_kept() -> Cluster {
    let mut c = cluster(&[200]);
    c.keep_pooled(1, IDLE);
    c.launch("parent", 1, None);
    assert_eq!(c.run_until(Duration::from_secs(10)), Some(0), "{:?}", c.said);
    assert_eq!(said(&c, "kept job 2").len(), 1, "{:?}", c.said);
    assert!(c.pool_holds(JobId(2)));
    assert_eq!((c.live(), c.load()), (1, 1), "the kept job runs and holds its slot");
    c
}

#[test]
fn a_pooled_job_kept_past_its_runs_end_is_claimed_by_the_next_run_of_the_tree() {
    let mut c = first_run_kept();
    c.next_run(1);
    c.script("parent2", parent(&[0]));
    let p = c.launch("parent2", 1, None);
    assert_eq!(c.run_until(Duration::from_secs(20)), Some(0), "{:?}", c.said);
    assert!(said(&c, "claimed job 2 ").iter().any(|l| l.ends_with("(kept from an earlier run)")), "{:?}", c.said);
    assert!(!c.pool_holds(JobId(2)), "the run's now");
    assert_served(&c, JobId(2), p);
}

#[test]
fn a_kept_job_not_claimed_within_its_idle_time_is_killed_and_forgotten() {
    let mut c = first_run_kept();
    assert_eq!(c.run_until(IDLE - Duration::from_secs(1)), Some(0));
    assert!(c.ranks(JobId(2))[0].end.is_none(), "not before its idle time");
    c.run_until(IDLE + Duration::from_secs(20));
    assert_eq!(c.ranks(JobId(2))[0].end, Some(ExitStatus::Signal(libc::SIGKILL)));
    assert!(!c.pool_holds(JobId(2)), "forgotten once its end was heard");
    assert_eq!((c.live(), c.load()), (0, 0));
}

/// Where `job`'s messages went, µs by µs until the run ends: to the
/// pool alone (pooled, routed to no run), then to the run alone (claimed).
fn owners_over_time(c: &mut Cluster, job: JobId) -> (bool, bool) {
    let (mut pooled, mut claimed) = (false, false);
    let mut t = Duration::ZERO;
    while c.exit.is_none() && t < Duration::from_secs(30) {
        t += Duration::from_micros(1);
        c.run_until(t);
        let (in_pool, in_run) = (c.pool_holds(job), c.routed_to_run(job));
        assert!(!(in_pool && in_run), "{job} both the pool's and the run's");
        pooled |= in_pool && !claimed;
        claimed |= in_run && pooled;
    }
    (pooled, claimed)
}

#[test]
fn a_live_runs_pooled_job_is_the_pools_until_the_same_runs_spawn_claims_it() {
    let mut c = cluster(&[200, 0]);
    let p = c.launch("parent", 1, None);
    let (pooled, claimed) = owners_over_time(&mut c, JobId(2));
    assert!(pooled && claimed, "the pool's from its launch, then the run's: {:?}", c.said);
    assert_eq!(c.exit, Some(0), "{:?}", c.said);
    assert!(said(&c, "claimed job 2 ").iter().all(|l| !l.contains("kept")), "made for this run: {:?}", c.said);
    // Its fence, output and exit after the claim were the run's.
    assert_served(&c, JobId(2), p);
    assert!(!c.pool_holds(JobId(2)) && !c.routed_to_run(JobId(2)));
    assert_eq!((c.live(), c.load()), (0, 0));
}

#[test]
fn the_pool_is_refilled_after_a_claim_and_the_refill_is_claimed_next() {
    let mut c = cluster(&[200, 200, 0]);
    let p = c.launch("parent", 1, None);
    assert_eq!(c.run_until(Duration::from_secs(30)), Some(0), "{:?}", c.said);
    let refilled: Vec<String> = said(&c, "refilled job");
    assert!(refilled.len() >= 2, "after the first miss, then after the claim: {:?}", c.said);
    let second = refilled[1].split_whitespace().nth(5).and_then(|j| j.parse().ok()).map(JobId).expect("a job number");
    let claimed = said(&c, "claimed job");
    assert_eq!(claimed.len(), 2, "{:?}", c.said);
    assert!(claimed[0].contains("claimed job 2 ") && claimed[1].contains(&format!("claimed {second} ")), "{:?}", c.said);
    assert_served(&c, second, p);
    assert_eq!((c.live(), c.load()), (0, 0));
}

#[test]
fn a_plain_runs_end_kills_its_unclaimed_pooled_jobs() {
    let mut c = cluster(&[200]);
    c.launch("parent", 1, None);
    assert_eq!(c.run_until(Duration::from_secs(10)), Some(0), "{:?}", c.said);
    assert_eq!(said(&c, "refilled job 2").len(), 1, "{:?}", c.said);
    assert!(said(&c, "kept").is_empty(), "a plain run keeps nothing: {:?}", c.said);
    c.run_until(Duration::from_secs(20));
    assert_eq!(c.ranks(JobId(2))[0].end, Some(ExitStatus::Signal(libc::SIGKILL)));
    assert!(!c.pool_holds(JobId(2)), "forgotten once its end was heard");
    assert_eq!((c.live(), c.load()), (0, 0));
}

#[test]
fn the_end_of_the_tree_kills_what_is_unclaimed() {
    // A boot going down: its pool's kept job.
    let mut c = first_run_kept();
    c.end_tree();
    c.run_until(Duration::from_secs(20));
    assert_eq!(c.ranks(JobId(2))[0].end, Some(ExitStatus::Signal(libc::SIGKILL)));
    assert!(!c.pool_holds(JobId(2)));
    assert_eq!((c.live(), c.load()), (0, 0));
}
