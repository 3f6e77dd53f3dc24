//! The PMI-2 extensions of paper 004 (ring, put hints, waiting get, srcid)
//! through the codec and the engine, without sockets: the exact bytes Slurm's
//! `PMIX_Ring` sends, and the extension keys as `docs/pmi-extensions.md`
//! specifies them.

use dpm_kvs::remote::{GetReply, KvsDest, KvsMsg, OwnerPut};
use dpm_kvs::ring::{root_slot, RingSegment, RingSlot};
use dpm_kvs::{Hint, JobId, KvsDesign, NodeId, Rank};
use dpm_pmi::limits::{EARLY_KVS_MAX, ENDED_JOBS_REMEMBERED};
use dpm_pmi::reply::{encode, Reply};
use dpm_pmi::wire::{parse_v2_body, Version};
use dpm_pmi::{ConnId, Effect, Engine, JobSetup, Request};

const KVS: &str = "kvs_42_0";

fn parse(body: &str) -> Result<Request, String> {
    let frame = parse_v2_body(body).map_err(|e| e.to_string())?;
    Request::parse(&frame).map_err(|e| e.to_string())
}

#[test]
fn ring_request_is_what_slurm_sends() {
    assert_eq!(parse("cmd=ring;ring-count=1;ring-left=addr-3;ring-right=addr-3;"), Ok(Request::Ring { value: "addr-3".into() }));
    for (body, why) in [
        ("cmd=ring;ring-count=2;ring-left=a;ring-right=a;", "ring-count=2"),
        ("cmd=ring;ring-count=1;ring-left=a;ring-right=b;", "must both be"),
        ("cmd=ring;ring-count=1;ring-left=a;", "missing attribute `ring-right`"),
        ("cmd=ring;ring-left=a;ring-right=a;", "missing attribute `ring-count`"),
        ("cmd=ring;ring-count=x;ring-left=a;ring-right=a;", "not a number"),
        ("cmd=ring;ring-count=1;ring-left=;ring-right=;", "empty"),
    ] {
        let err = parse(body).unwrap_err();
        assert!(err.contains(why), "{body}: {err}");
    }
    let long = "v".repeat(1025);
    assert!(parse(&format!("cmd=ring;ring-count=1;ring-left={long};ring-right={long};")).unwrap_err().contains("exceeds 1024"));
}

#[test]
fn ring_response_carries_rank_size_and_neighbours() {
    let reply = Reply::Ring { rank: 2, size: 5, left: "L".into(), right: "R".into() };
    let bytes = String::from_utf8(encode(Version::V2, "ring", &reply)).unwrap();
    let body = "cmd=ring-response;rc=0;ring-count=2;ring-rank=2;ring-size=5;ring-left=L;ring-right=R;";
    assert_eq!(bytes, format!("{:6}{body}", body.len()));
}

#[test]
fn put_hints_parse_and_a_bad_hint_is_an_error() {
    let put = |hint: &str| parse(&format!("cmd=kvs-put;key=k;value=v;{hint}"));
    let hinted = |h| Ok(Request::Put { kvsname: None, key: "k".into(), value: "v".into(), hint: h });
    assert_eq!(put(""), hinted(None));
    assert_eq!(put("hint=sparse;"), hinted(Some(Hint::Sparse)));
    assert_eq!(put("hint=DENSE;"), hinted(Some(Hint::Dense)));
    assert!(put("hint=often;").unwrap_err().contains("hint 'often' is not sparse or dense"));
}

#[test]
fn waiting_get_and_srcid_parse() {
    assert_eq!(
        parse("cmd=kvs-get;jobid=J;srcid=3;key=k;wait=TRUE;"),
        Ok(Request::Get { kvsname: Some("J".into()), key: "k".into(), srcid: Some(3), wait: true })
    );
    // srcid=-1 (Slurm's "unknown") and no wait: a plain PMI-2 get.
    assert_eq!(parse("cmd=kvs-get;jobid=J;srcid=-1;key=k;"), Ok(Request::Get { kvsname: Some("J".into()), key: "k".into(), srcid: None, wait: false }));
}

fn setup(size: u32, design: KvsDesign, node: usize, node_of: Vec<usize>) -> JobSetup {
    let local_ranks = (0..size).filter(|&r| node_of.get(r as usize).is_none_or(|&n| n == node)).map(Rank).collect();
    JobSetup {
        job: JobId(0),
        kvsname: KVS.into(),
        size,
        local_ranks,
        appnums: vec![0; size as usize],
        universe_size: 8,
        process_mapping: "(vector,(0,1,1))".into(),
        spawner: None,
        preput: vec![],
        kvs: design,
        node: NodeId(node),
        node_of: node_of.into_iter().map(NodeId).collect(),
    }
}

/// An engine for `node`, with a connection (id = rank) per local rank.
fn engine(size: u32, design: KvsDesign, node: usize, node_of: Vec<usize>) -> Engine {
    let mut e = Engine::new(false);
    let s = setup(size, design, node, node_of);
    let locals = s.local_ranks.clone();
    e.add_job(s);
    for r in locals {
        e.attach(ConnId(r.0 as u64), JobId(0), Some(r));
    }
    e
}

fn frame(body: &str) -> Vec<u8> {
    format!("{:6}{body}", body.len()).into_bytes()
}

/// Send `body` from `conn`; return what was written back to it.
fn talk(e: &mut Engine, conn: u64, body: &str) -> String {
    e.on_bytes(ConnId(conn), &frame(body));
    sent_to(&e.take_effects(), conn)
}

fn sent_to(effects: &[Effect], conn: u64) -> String {
    effects
        .iter()
        .filter_map(|f| match f {
            Effect::Send(c, b) if *c == ConnId(conn) => Some(String::from_utf8(b.clone()).unwrap()),
            _ => None,
        })
        .collect()
}

#[test]
fn one_node_ring_goes_up_once_and_wraps() {
    let mut e = engine(3, KvsDesign::Auto, 0, vec![]);
    // Ranks enter out of order; the ring follows rank order.
    for r in [2u64, 0] {
        assert_eq!(talk(&mut e, r, &format!("cmd=ring;ring-count=1;ring-left=v{r};ring-right=v{r};")), "");
    }
    e.on_bytes(ConnId(1), &frame("cmd=ring;ring-count=1;ring-left=v1;ring-right=v1;"));
    let effects = e.take_effects();
    let segment = RingSegment { count: 3, first: "v0".into(), last: "v2".into() };
    assert_eq!(effects, vec![Effect::RingIn { job: JobId(0), seq: 0, segment: segment.clone() }]);
    e.ring_out(JobId(0), 0, &root_slot(&segment));
    let effects = e.take_effects();
    let answer = |r: u64, left: &str, right: &str| {
        let body = format!("cmd=ring-response;rc=0;ring-count={r};ring-rank={r};ring-size=3;ring-left={left};ring-right={right};");
        format!("{:6}{body}", body.len())
    };
    assert_eq!(sent_to(&effects, 0), answer(0, "v2", "v1"));
    assert_eq!(sent_to(&effects, 1), answer(1, "v0", "v2"));
    assert_eq!(sent_to(&effects, 2), answer(2, "v1", "v0"));
    // A second ring is matched as the next one.
    for r in 0..3u64 {
        e.on_bytes(ConnId(r), &frame("cmd=ring;ring-count=1;ring-left=x;ring-right=x;"));
    }
    assert!(e.take_effects().iter().any(|f| matches!(f, Effect::RingIn { seq: 1, .. })));
}

#[test]
fn a_node_answers_its_ranks_from_its_slot() {
    // Node 1 of two holds ranks 2 and 3; its stretch starts at ring rank 2.
    let mut e = engine(4, KvsDesign::Tree, 1, vec![0, 0, 1, 1]);
    talk(&mut e, 2, "cmd=ring;ring-count=1;ring-left=c;ring-right=c;");
    e.on_bytes(ConnId(3), &frame("cmd=ring;ring-count=1;ring-left=d;ring-right=d;"));
    assert!(matches!(&e.take_effects()[..], [Effect::RingIn { segment, .. }] if segment.count == 2));
    e.ring_out(JobId(0), 0, &RingSlot { offset: 2, left: "b".into(), right: "a".into() });
    let effects = e.take_effects();
    assert!(sent_to(&effects, 2).contains("ring-rank=2;ring-size=4;ring-left=b;ring-right=d;"));
    assert!(sent_to(&effects, 3).contains("ring-rank=3;ring-size=4;ring-left=c;ring-right=a;"));
    // An answer to a ring not in progress changes nothing.
    e.ring_out(JobId(0), 5, &RingSlot { offset: 0, left: "x".into(), right: "x".into() });
    assert!(e.take_effects().is_empty());
}

#[test]
fn a_bad_hint_gets_an_error_reply_and_the_connection_goes_on() {
    let mut e = engine(1, KvsDesign::Auto, 0, vec![]);
    let r = talk(&mut e, 0, "cmd=kvs-put;key=k;value=v;hint=loud;");
    assert!(r.contains("cmd=kvs-put-response;rc=1;errmsg=kvs-put: hint 'loud' is not sparse or dense;"), "{r}");
    assert!(talk(&mut e, 0, "cmd=kvs-put;key=k;value=v;hint=sparse;").contains("rc=0;"));
}

#[test]
fn a_waiting_get_on_the_node_is_answered_by_the_put() {
    for design in KvsDesign::ALL {
        let mut e = engine(2, design, 0, vec![]);
        assert_eq!(talk(&mut e, 1, "cmd=kvs-get;jobid=kvs_42_0;srcid=0;key=late;wait=TRUE;"), "", "{design}: blocked");
        // Meanwhile rank 0 is served as usual.
        assert!(talk(&mut e, 0, "cmd=job-getid;").contains("jobid=kvs_42_0"));
        e.on_bytes(ConnId(0), &frame("cmd=kvs-put;key=late;value=here;"));
        let effects = e.take_effects();
        assert!(sent_to(&effects, 0).contains("kvs-put-response;rc=0;"));
        assert!(sent_to(&effects, 1).contains("kvs-get-response;rc=0;found=TRUE;value=here;"), "{design}: {effects:?}");
    }
}

#[test]
fn a_remote_get_leaves_the_node_once_and_its_answer_serves_everyone() {
    // Dkvs over nodes 0 and 1: this is node 0, with ranks 0 and 1.
    let mut e = engine(4, KvsDesign::Dkvs, 0, vec![0, 0, 1, 1]);
    let key = (0..).map(|i| format!("k{i}")).find(|k| dpm_kvs::design::owner(k, &[NodeId(0), NodeId(1)]) == Some(NodeId(1))).unwrap();
    e.on_bytes(ConnId(0), &frame(&format!("cmd=kvs-get;jobid=kvs_42_0;srcid=-1;key={key};")));
    e.on_bytes(ConnId(1), &frame(&format!("cmd=kvs-get;jobid=kvs_42_0;key={key};")));
    let effects = e.take_effects();
    let asks: Vec<_> = effects.iter().filter_map(|f| if let Effect::Kvs { to, msg: KvsMsg::Get(r) } = f { Some((*to, r.clone())) } else { None }).collect();
    assert_eq!(asks.len(), 1, "coalesced: {effects:?}");
    assert_eq!(asks[0].0, KvsDest::Node(NodeId(1)), "asked of the owner");
    let req = &asks[0].1;
    e.kvs_msg(KvsMsg::Reply(GetReply { job: JobId(0), key: key.clone(), id: req.id, value: Some("v".into()), valid_through: 0 }));
    let effects = e.take_effects();
    for conn in [0, 1] {
        assert!(sent_to(&effects, conn).contains("kvs-get-response;rc=0;found=TRUE;value=v;"), "{effects:?}");
    }
}

#[test]
fn dkvs_enters_the_fence_only_once_the_owner_acknowledged() {
    let mut e = engine(2, KvsDesign::Dkvs, 0, vec![0, 1]);
    let key = (0..).map(|i| format!("k{i}")).find(|k| dpm_kvs::design::owner(k, &[NodeId(0), NodeId(1)]) == Some(NodeId(1))).unwrap();
    e.on_bytes(ConnId(0), &frame(&format!("cmd=kvs-put;key={key};value=v;")));
    let effects = e.take_effects();
    let id = effects.iter().find_map(|f| if let Effect::Kvs { to: KvsDest::Node(NodeId(1)), msg: KvsMsg::Put(p) } = f { Some(p.id) } else { None });
    let id = id.expect("the put goes to its owner");
    e.on_bytes(ConnId(0), &frame("cmd=kvs-fence;"));
    assert!(!e.take_effects().iter().any(|f| matches!(f, Effect::FenceIn { .. })), "not before the ack");
    e.kvs_msg(KvsMsg::PutAck { job: JobId(0), id });
    assert_eq!(e.take_effects(), vec![Effect::FenceIn { job: JobId(0), epoch: 0, count: 1, puts: vec![] }]);
}

#[test]
fn pmi1_gets_go_through_the_design_too() {
    let mut e = engine(2, KvsDesign::Tree, 0, vec![0, 1]);
    e.on_bytes(ConnId(0), format!("cmd=get kvsname={KVS} key=-allgather-1-1\n").as_bytes());
    let effects = e.take_effects();
    assert!(matches!(&effects[..], [Effect::Kvs { to: KvsDest::Up, msg: KvsMsg::Get(r) }] if !r.wait), "{effects:?}");
}

/// A put for a key this node owns, from node 0, as an id-`id` [`KvsMsg::Put`].
fn owner_put(key: &str, id: u64) -> KvsMsg {
    KvsMsg::Put(OwnerPut { job: JobId(0), key: key.into(), value: format!("v{id}"), epoch: 0, origin: NodeId(0), id })
}

fn acks(effects: &[Effect]) -> Vec<u64> {
    effects.iter().filter_map(|f| if let Effect::Kvs { to: KvsDest::Node(NodeId(0)), msg: KvsMsg::PutAck { id, .. } } = f { Some(*id) } else { None }).collect()
}

/// A key node 1 owns under dkvs over nodes 0 and 1.
fn owned_by_node_1() -> String {
    (0..).map(|i| format!("k{i}")).find(|k| dpm_kvs::design::owner(k, &[NodeId(0), NodeId(1)]) == Some(NodeId(1))).unwrap()
}

/// Node 0 of a tree starts its ranks and serves their puts before it reads
/// node 1's `Launch` from its parent, so an owner put can reach node 1 before
/// its job does. It is held, acknowledged and served once the job arrives
/// (dropping it left node 0 waiting for the ack, and the fence hung).
#[test]
fn a_put_that_overtakes_its_job_is_kept_until_the_job_arrives() {
    let key = owned_by_node_1();
    let mut e = Engine::new(false);
    e.kvs_msg(owner_put(&key, 5));
    assert_eq!(e.take_effects(), vec![], "no job yet: nothing to answer");
    e.add_job(setup(2, KvsDesign::Dkvs, 1, vec![0, 1]));
    e.attach(ConnId(1), JobId(0), Some(Rank(1)));
    assert_eq!(acks(&e.take_effects()), vec![5], "acknowledged when the job came");
    assert!(talk(&mut e, 1, &format!("cmd=kvs-get;jobid={KVS};srcid=0;key={key};")).contains("found=TRUE;value=v5;"));
}

/// A late message for a job that ended here is dropped, not kept for a
/// job that will never come again.
#[test]
fn a_message_for_a_job_that_ended_here_is_dropped() {
    let key = owned_by_node_1();
    let mut e = engine(2, KvsDesign::Dkvs, 1, vec![0, 1]);
    e.remove_job(JobId(0));
    e.kvs_msg(owner_put(&key, 6));
    e.add_job(setup(2, KvsDesign::Dkvs, 1, vec![0, 1]));
    assert_eq!(acks(&e.take_effects()), Vec::<u64>::new());
}

/// The messages held for jobs not here yet are bounded: past the limit the
/// oldest go, the newest are kept.
#[test]
fn messages_held_for_a_job_not_here_yet_are_bounded() {
    let key = owned_by_node_1();
    let mut e = Engine::new(false);
    let total = EARLY_KVS_MAX as u64 + 3;
    for id in 0..total {
        e.kvs_msg(owner_put(&key, id));
    }
    e.add_job(setup(2, KvsDesign::Dkvs, 1, vec![0, 1]));
    let acked = acks(&e.take_effects());
    assert_eq!(acked.len(), EARLY_KVS_MAX);
    assert_eq!((acked[0], *acked.last().unwrap()), (3, total - 1), "the oldest three dropped, in order");
}

/// The jobs remembered as ended are bounded: past the limit the oldest is
/// forgotten, and a late message for it is then held like an early one
/// (bounded too) instead of dropped.
#[test]
fn jobs_remembered_as_ended_are_bounded() {
    let key = owned_by_node_1();
    let mut e = engine(2, KvsDesign::Dkvs, 1, vec![0, 1]);
    e.remove_job(JobId(0));
    for j in 1..=ENDED_JOBS_REMEMBERED as u32 {
        e.remove_job(JobId(j));
    }
    e.kvs_msg(owner_put(&key, 9));
    e.add_job(setup(2, KvsDesign::Dkvs, 1, vec![0, 1]));
    assert_eq!(acks(&e.take_effects()), vec![9], "job 0 fell out of the ended jobs: its message was held");
}
