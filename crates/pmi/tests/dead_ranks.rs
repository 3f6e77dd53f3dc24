//! Ranks that died while the others run on (`-disable-auto-cleanup`):
//! `PMI_dead_processes` lists them (PMI-1 `get`, PMI-2 job attribute), and
//! each rank that waits in a fence they can never join is reported, whether
//! it entered before or after the news.

mod common;

use common::{engine, sent};
use dpm_kvs::{JobId, Rank};
use dpm_pmi::{ConnId, Effect, Engine};

fn v2(body: &str) -> String {
    format!("{:6}{body}", body.len())
}

fn doomed(e: &mut Engine) -> Vec<Vec<Rank>> {
    e.take_effects().into_iter().filter_map(|f| if let Effect::FenceDoomed { waiting, .. } = f { Some(waiting) } else { None }).collect()
}

#[test]
fn pmi1_get_lists_the_dead_ranks_in_the_order_reported() {
    let mut e = engine(4);
    e.on_bytes(ConnId(0), b"cmd=get kvsname=kvs_42_0 key=PMI_dead_processes\n");
    assert!(sent(&mut e, 0).starts_with("cmd=get_result rc=1 "), "none dead: not found (Hydra: found, empty; dpm never replies an empty value)");
    e.ranks_dead(JobId(0), &[Rank(3)]);
    e.ranks_dead(JobId(0), &[Rank(1), Rank(3)]);
    e.ranks_dead(JobId(0), &[Rank(9)]); // not a rank of the job
    e.on_bytes(ConnId(0), b"cmd=get kvsname=kvs_42_0 key=PMI_dead_processes\n");
    assert_eq!(sent(&mut e, 0), "cmd=get_result rc=0 value=3,1\n");
}

#[test]
fn pmi2_job_attribute_is_absent_until_a_rank_dies() {
    let mut e = engine(2);
    e.on_bytes(ConnId(0), v2("cmd=info-getjobattr;key=PMI_dead_processes;").as_bytes());
    assert!(sent(&mut e, 0).contains("found=FALSE"));
    e.ranks_dead(JobId(0), &[Rank(1)]);
    e.on_bytes(ConnId(0), v2("cmd=info-getjobattr;key=PMI_dead_processes;").as_bytes());
    let r = sent(&mut e, 0);
    assert!(r.contains("found=TRUE;value=1;"), "{r}");
}

#[test]
fn the_ranks_in_a_fence_entered_before_the_death_are_reported() {
    let mut e = engine(3);
    e.on_bytes(ConnId(0), b"cmd=barrier_in\n");
    e.on_bytes(ConnId(2), b"cmd=barrier_in\n");
    assert!(doomed(&mut e).is_empty(), "nobody is dead yet");
    e.detach(ConnId(1));
    e.ranks_dead(JobId(0), &[Rank(1)]);
    assert_eq!(doomed(&mut e), vec![vec![Rank(0), Rank(2)]]);
}

#[test]
fn each_rank_entering_a_fence_after_the_death_is_reported() {
    let mut e = engine(3);
    e.ranks_dead(JobId(0), &[Rank(2)]);
    assert!(doomed(&mut e).is_empty(), "nobody waits in a fence");
    e.on_bytes(ConnId(1), v2("cmd=kvs-fence;").as_bytes());
    assert_eq!(doomed(&mut e), vec![vec![Rank(1)]]);
    e.on_bytes(ConnId(0), b"cmd=barrier_in\n");
    assert_eq!(doomed(&mut e), vec![vec![Rank(0)]], "only the one that entered");
}
