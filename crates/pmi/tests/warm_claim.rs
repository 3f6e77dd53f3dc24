//! A job awaiting its claim (warm spawn): a get of a key that is not there
//! waits instead of failing, for PMI-1 and PMI-2 and under a design whose
//! gets leave the node, until the claim brings the preputs; then a key still
//! missing fails as it would have at once. A closed connection is forgotten.

#[allow(dead_code)] // this file does not use `engine`
mod common;

use common::{sent, setup};
use dpm_kvs::remote::{GetReply, KvsMsg};
use dpm_kvs::{JobId, KvsDesign, NodeId, Rank};
use dpm_pmi::{ConnId, Effect, Engine};

const PORT: (&str, &str) = ("PARENT_ROOT_PORT_NAME", "tag#0$connentry#0102$");

/// A spawned job of `size` ranks, all here, awaiting its claim.
fn awaiting(size: u32) -> Engine {
    let mut e = Engine::new(false);
    let mut s = setup(size);
    s.spawner = Some("kvs_parent".into());
    e.add_job(s);
    e.await_claim(JobId(0));
    for r in 0..size {
        e.attach(ConnId(r as u64), JobId(0), Some(Rank(r)));
    }
    e
}

fn v2(body: &str) -> String {
    format!("{:6}{body}", body.len())
}

#[test]
fn pmi1_get_of_the_port_waits_for_the_claim() {
    let mut e = awaiting(2);
    e.on_bytes(ConnId(0), b"cmd=get kvsname=kvs_42_0 key=PARENT_ROOT_PORT_NAME\n");
    assert_eq!(sent(&mut e, 0), "", "parked, not failed");
    // What the node knows is answered as ever meanwhile.
    e.on_bytes(ConnId(1), b"cmd=get kvsname=kvs_42_0 key=PMI_process_mapping\n");
    assert_eq!(sent(&mut e, 1), "cmd=get_result rc=0 value=(vector,(0,1,2))\n");
    e.on_bytes(ConnId(1), b"cmd=get kvsname=kvs_42_0 key=nosuch\n");
    assert_eq!(sent(&mut e, 1), "");
    e.claim(JobId(0), &[(PORT.0.into(), PORT.1.into())]);
    let effects = e.take_effects();
    let to = |c: u64| -> String {
        effects
            .iter()
            .filter_map(|f| if let Effect::Send(x, b) = f { (*x == ConnId(c)).then(|| String::from_utf8(b.clone()).unwrap()) } else { None })
            .collect()
    };
    assert_eq!(to(0), format!("cmd=get_result rc=0 value={}\n", PORT.1));
    assert!(to(1).starts_with("cmd=get_result rc=1 "), "still missing after the claim: {}", to(1));
    // After the claim a missing key fails at once again.
    e.on_bytes(ConnId(1), b"cmd=get kvsname=kvs_42_0 key=nosuch\n");
    assert!(sent(&mut e, 1).starts_with("cmd=get_result rc=1 "));
}

/// A claim says whether every local rank was waiting for it (ready) or one
/// was still starting (the pool fell behind its spawns).
#[test]
fn a_claim_says_whether_every_rank_was_waiting_for_it() {
    let mut e = awaiting(2);
    e.on_bytes(ConnId(0), b"cmd=get kvsname=kvs_42_0 key=PARENT_ROOT_PORT_NAME\n");
    assert!(!e.claim(JobId(0), &[(PORT.0.into(), PORT.1.into())]), "rank 1 had not asked yet");
    let mut e = awaiting(2);
    e.on_bytes(ConnId(0), b"cmd=get kvsname=kvs_42_0 key=PARENT_ROOT_PORT_NAME\n");
    e.on_bytes(ConnId(1), v2("cmd=kvs-get;jobid=kvs_42_0;key=PARENT_ROOT_PORT_NAME;").as_bytes());
    assert!(e.claim(JobId(0), &[(PORT.0.into(), PORT.1.into())]), "both waited");
    assert!(sent(&mut e, 1).contains("found=TRUE"), "and both are answered");
    assert!(!Engine::new(false).claim(JobId(7), &[]), "an unknown job is not ready");
}

#[test]
fn pmi2_kvs_get_waits_for_the_claim() {
    let mut e = awaiting(1);
    e.on_bytes(ConnId(0), v2("cmd=kvs-get;jobid=kvs_42_0;key=PARENT_ROOT_PORT_NAME;").as_bytes());
    assert_eq!(sent(&mut e, 0), "");
    e.claim(JobId(0), &[(PORT.0.into(), PORT.1.into())]);
    let r = sent(&mut e, 0);
    assert!(r.contains("cmd=kvs-get-response;rc=0;found=TRUE;value=tag#0$connentry#0102$;"), "{r}");
}

#[test]
fn a_get_that_walks_up_and_misses_waits_for_the_claim() {
    // Rank 0 here on node 0, rank 1 on node 1: under `tree` a miss asks up.
    let mut e = Engine::new(false);
    let mut s = setup(2);
    s.kvs = KvsDesign::Tree;
    s.node_of = vec![NodeId(0), NodeId(1)];
    s.local_ranks = vec![Rank(0)];
    e.add_job(s);
    e.await_claim(JobId(0));
    e.attach(ConnId(0), JobId(0), Some(Rank(0)));
    e.on_bytes(ConnId(0), b"cmd=get kvsname=kvs_42_0 key=PARENT_ROOT_PORT_NAME\n");
    let id =
        e.take_effects().into_iter().find_map(|f| if let Effect::Kvs { msg: KvsMsg::Get(g), .. } = f { Some(g.id) } else { None }).expect("the get walks up");
    let reply = GetReply { job: JobId(0), key: PORT.0.into(), id, value: None, valid_through: 0 };
    e.kvs_msg(KvsMsg::Reply(reply));
    let effects = e.take_effects();
    assert!(!effects.iter().any(|f| matches!(f, Effect::Send(..))), "not found up the tree: parked");
    assert!(effects.iter().any(|f| matches!(f, Effect::AwaitingClaim { job: JobId(0) })), "and the node's one rank awaits the claim");
    e.claim(JobId(0), &[(PORT.0.into(), PORT.1.into())]);
    assert_eq!(sent(&mut e, 0), format!("cmd=get_result rc=0 value={}\n", PORT.1));
}

#[test]
fn a_parked_connection_that_closes_is_forgotten() {
    let mut e = awaiting(1);
    e.on_bytes(ConnId(0), b"cmd=get kvsname=kvs_42_0 key=PARENT_ROOT_PORT_NAME\n");
    e.detach(ConnId(0));
    e.claim(JobId(0), &[(PORT.0.into(), PORT.1.into())]);
    assert_eq!(sent(&mut e, 0), "");
}

/// The node hears once that every local rank waits for the claim (the
/// launcher starts the next pooled job then), not before the last one parks.
#[test]
fn the_last_rank_parked_says_the_job_awaits_its_claim() {
    let awaits = |e: &mut Engine| e.take_effects().iter().filter(|f| matches!(f, Effect::AwaitingClaim { job: JobId(0) })).count();
    let mut e = awaiting(2);
    e.on_bytes(ConnId(0), b"cmd=get kvsname=kvs_42_0 key=PARENT_ROOT_PORT_NAME\n");
    assert_eq!(awaits(&mut e), 0, "rank 1 is still starting");
    e.on_bytes(ConnId(1), v2("cmd=kvs-get;jobid=kvs_42_0;key=PARENT_ROOT_PORT_NAME;").as_bytes());
    assert_eq!(awaits(&mut e), 1, "both wait now");
    e.claim(JobId(0), &[(PORT.0.into(), PORT.1.into())]);
    assert_eq!(awaits(&mut e), 0, "said once");
    // A job not awaiting a claim never says it.
    let mut e = Engine::new(false);
    e.add_job(setup(1));
    e.attach(ConnId(0), JobId(0), Some(Rank(0)));
    e.on_bytes(ConnId(0), b"cmd=get kvsname=kvs_42_0 key=nosuch\n");
    assert_eq!(awaits(&mut e), 0);
}

/// A job claimed while a rank was still starting says it awaits no more
/// once that rank asks for the parent's port (its start done: the
/// launcher's refill waited for it).
#[test]
fn a_job_claimed_while_starting_says_when_its_last_rank_asked_for_the_port() {
    let awaits = |e: &mut Engine| e.take_effects().iter().filter(|f| matches!(f, Effect::AwaitingClaim { job: JobId(0) })).count();
    let mut e = awaiting(2);
    e.on_bytes(ConnId(0), b"cmd=get kvsname=kvs_42_0 key=PARENT_ROOT_PORT_NAME\n");
    assert!(!e.claim(JobId(0), &[(PORT.0.into(), PORT.1.into())]), "rank 1 still starting");
    assert_eq!(awaits(&mut e), 0);
    e.on_bytes(ConnId(1), b"cmd=get kvsname=kvs_42_0 key=PMI_process_mapping\n");
    assert_eq!(awaits(&mut e), 0, "another key says nothing");
    e.on_bytes(ConnId(1), b"cmd=get kvsname=kvs_42_0 key=PARENT_ROOT_PORT_NAME\n");
    assert_eq!(awaits(&mut e), 1, "rank 1 got the port: started");
    e.on_bytes(ConnId(1), b"cmd=get kvsname=kvs_42_0 key=PARENT_ROOT_PORT_NAME\n");
    assert_eq!(awaits(&mut e), 0, "said once");
}
