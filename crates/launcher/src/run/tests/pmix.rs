//! PMIx in the run reactor: connect, disconnect and multi-job fences as
//! collectives over every node of the listed jobs (maps for the nodes that
//! lack a job, blobs in node order, failure when a job ends first), lookups
//! that wait for their name, and PMIx spawns never pooled.

use super::*;
use dpm_proto::{CollectiveKind, NameRequest};

fn connect(run: &mut Run, rec: &mut Recorder, node: usize, req: u64, nspaces: &[&str], kind: CollectiveKind, data: &[u8]) {
    let nspaces = nspaces.iter().map(|s| s.to_string()).collect();
    run.on_message(rec, NodeId(node), ToLauncher::Connect { request: RequestId(req), job: JobId(0), nspaces, kind, data: data.to_vec(), ranks: vec![] });
}

/// A `ConnectDone`'s result: the jobs' maps and the collected data, or why not.
type ConnectResult = Result<(Vec<dpm_proto::JobMap>, Vec<u8>), String>;

/// The `ConnectDone` answers sent: (node, request, result).
fn connect_done(rec: &Recorder) -> Vec<(NodeId, u64, ConnectResult)> {
    rec.sent()
        .into_iter()
        .filter_map(|(n, m)| if let ToDaemon::ConnectDone { request, result } = m { Some((n, request.0, result.clone())) } else { None })
        .collect()
}

fn kvsname(run: &Run, job: JobId) -> String {
    run.jobs[&job].kvsname.clone()
}

#[test]
fn a_connect_completes_when_every_node_of_every_job_has_called() {
    let (mut run, mut rec) = fixture(&[2, 2, 2]);
    let a = started(&mut run, &mut rec, &[0, 1]);
    let b = started(&mut run, &mut rec, &[2]);
    let (na, nb) = (kvsname(&run, a), kvsname(&run, b));
    connect(&mut run, &mut rec, 2, 10, &[&nb, &na], CollectiveKind::Connect, &[]);
    connect(&mut run, &mut rec, 0, 11, &[&na, &nb], CollectiveKind::Connect, &[]);
    assert!(connect_done(&rec).is_empty(), "node 1 has not called");
    connect(&mut run, &mut rec, 1, 12, &[&na, &nb], CollectiveKind::Connect, &[]);
    let done = connect_done(&rec);
    assert_eq!(done.len(), 3, "{done:?}");
    for (node, req, result) in done {
        let (maps, data) = result.unwrap();
        assert!(data.is_empty());
        let named: Vec<JobId> = maps.iter().map(|m| m.job).collect();
        // Each node learns the jobs it hosts no rank of, with their maps.
        match node.0 {
            0 | 1 => assert_eq!((req, named), (10 + node.0 as u64 + 1, vec![b])),
            _ => {
                assert_eq!((req, named), (10, vec![a]));
                assert_eq!((maps[0].node_of.clone(), maps[0].appnums.clone(), maps[0].kvsname.clone()), (vec![0, 1], vec![0, 0], na.clone()));
            }
        }
    }
    assert!(run.connects.is_empty());
}

#[test]
fn a_multi_job_fence_concatenates_blobs_in_node_order_and_fails_when_a_job_ends() {
    let (mut run, mut rec) = fixture(&[2, 2]);
    let a = started(&mut run, &mut rec, &[1]);
    let b = started(&mut run, &mut rec, &[0]);
    let (na, nb) = (kvsname(&run, a), kvsname(&run, b));
    connect(&mut run, &mut rec, 1, 1, &[&na, &nb], CollectiveKind::Fence, &[2, 2]);
    connect(&mut run, &mut rec, 0, 2, &[&na, &nb], CollectiveKind::Fence, &[1]);
    let done = connect_done(&rec);
    assert_eq!(done.len(), 2);
    assert!(done.iter().all(|(_, _, r)| r.as_ref().map(|(maps, data)| maps.is_empty() && data == &[1, 2, 2]) == Ok(true)), "{done:?}");
    // A disconnect that one node never joins: answered with an error when a job ends.
    rec.effects.clear();
    connect(&mut run, &mut rec, 0, 3, &[&na, &nb], CollectiveKind::Disconnect, &[]);
    assert!(connect_done(&rec).is_empty());
    exit(&mut run, &mut rec, 1, a, 0, ExitStatus::Code(0), DONE, 10);
    let done = connect_done(&rec);
    assert!(matches!(&done[..], [(NodeId(0), 3, Err(e))] if e.contains("ended")), "{done:?}");
    assert!(run.connects.is_empty());
}

#[test]
fn a_connect_over_an_unknown_namespace_or_from_a_stranger_node_is_refused() {
    let (mut run, mut rec) = fixture(&[2, 2]);
    let a = started(&mut run, &mut rec, &[0]);
    let na = kvsname(&run, a);
    connect(&mut run, &mut rec, 0, 1, &[&na, "kvs_nobody"], CollectiveKind::Connect, &[]);
    connect(&mut run, &mut rec, 1, 2, &[&na], CollectiveKind::Connect, &[]);
    let done = connect_done(&rec);
    assert!(matches!(&done[..], [(NodeId(0), 1, Err(e1)), (NodeId(1), 2, Err(e2))] if e1.contains("kvs_nobody") && e2.contains("hosts no rank")), "{done:?}");
    assert!(run.connects.is_empty());
}

#[test]
fn a_waiting_lookup_is_answered_by_the_publish_or_by_its_jobs_end() {
    let (mut run, mut rec) = fixture(&[2, 2]);
    let a = started(&mut run, &mut rec, &[0]);
    let b = started(&mut run, &mut rec, &[1]);
    let names = |rec: &Recorder| -> Vec<(NodeId, u64, Result<Option<String>, String>)> {
        rec.sent()
            .into_iter()
            .filter_map(|(n, m)| if let ToDaemon::NameDone { request, result } = m { Some((n, request.0, result.clone())) } else { None })
            .collect()
    };
    let op = |service: &str| NameRequest::LookupWait { service: service.into() };
    run.on_message(&mut rec, NodeId(1), ToLauncher::Name { request: RequestId(5), job: b, op: op("svc") });
    run.on_message(&mut rec, NodeId(1), ToLauncher::Name { request: RequestId(6), job: b, op: op("never") });
    // A plain lookup still fails at once.
    run.on_message(&mut rec, NodeId(1), ToLauncher::Name { request: RequestId(7), job: b, op: NameRequest::Lookup { service: "svc".into() } });
    assert!(matches!(&names(&rec)[..], [(NodeId(1), 7, Err(_))]), "{:?}", names(&rec));
    rec.effects.clear();
    let publish = NameRequest::Publish { service: "svc".into(), port: "p".into() };
    run.on_message(&mut rec, NodeId(0), ToLauncher::Name { request: RequestId(8), job: a, op: publish });
    assert_eq!(names(&rec), vec![(NodeId(1), 5, Ok(Some("p".into()))), (NodeId(0), 8, Ok(None))]);
    rec.effects.clear();
    exit(&mut run, &mut rec, 1, b, 0, ExitStatus::Code(0), DONE, 10);
    assert!(matches!(&names(&rec)[..], [(NodeId(1), 6, Err(e))] if e.contains("ended")), "{:?}", names(&rec));
}

#[test]
fn pmix_spawns_are_never_pooled() {
    let (mut run, mut rec) = fixture(&[4]);
    run.settings.pmi_mode = PmiMode::Pmix;
    run.settings.warm_spawn = 2;
    let parent = started(&mut run, &mut rec, &[0]);
    let child = spawn(&mut run, &mut rec, parent, "true", 1, Vec::new());
    let launches: Vec<&LaunchJob> = rec.sent().into_iter().filter_map(|(_, m)| if let ToDaemon::Launch(l) = m { Some(l) } else { None }).collect();
    assert_eq!(launches.len(), 2, "the parent and the cold child, no pooled job");
    let l = launches.iter().find(|l| l.job == child).unwrap();
    assert_eq!((l.pmi_mode, l.awaiting_claim), (PmiMode::Pmix, false));
}

fn fence_part(run: &mut Run, rec: &mut Recorder, node: usize, req: u64, ns: &str, ranks: &[u32], data: &[u8]) {
    let msg = ToLauncher::Connect {
        request: RequestId(req),
        job: JobId(0),
        nspaces: vec![ns.to_string()],
        kind: CollectiveKind::Fence,
        data: data.to_vec(),
        ranks: vec![(ns.to_string(), ranks.to_vec())],
    };
    run.on_message(rec, NodeId(node), msg);
}

#[test]
fn a_fence_over_part_of_a_job_waits_for_the_nodes_of_those_ranks_only() {
    let (mut run, mut rec) = fixture(&[1, 1, 1]);
    let a = started(&mut run, &mut rec, &[0, 1, 2]);
    let na = kvsname(&run, a);
    // Ranks 0 and 2 (nodes 0 and 2), and at the same time ranks 0 and 1 (nodes 0 and 1).
    fence_part(&mut run, &mut rec, 2, 1, &na, &[2, 0], &[2]);
    fence_part(&mut run, &mut rec, 1, 2, &na, &[0, 1], &[1]);
    fence_part(&mut run, &mut rec, 0, 3, &na, &[0, 2], &[0]);
    let done = connect_done(&rec);
    assert_eq!(done.iter().map(|(n, q, _)| (n.0, *q)).collect::<Vec<_>>(), vec![(0, 3), (2, 1)], "node 1 is not part of it; the other fence still waits");
    assert!(done.iter().all(|(_, _, r)| r.as_ref().map(|(_, data)| data == &[0, 2]) == Ok(true)), "{done:?}");
    rec.effects.clear();
    fence_part(&mut run, &mut rec, 0, 4, &na, &[1, 0], &[0]);
    let done = connect_done(&rec);
    assert!(done.iter().all(|(_, _, r)| r.as_ref().map(|(_, data)| data == &[0, 1]) == Ok(true)) && done.len() == 2, "{done:?}");
    assert!(run.connects.is_empty());
    // A rank the job does not have, or none: refused at once.
    rec.effects.clear();
    fence_part(&mut run, &mut rec, 0, 5, &na, &[0, 3], &[]);
    fence_part(&mut run, &mut rec, 0, 6, &na, &[], &[]);
    let done = connect_done(&rec);
    assert!(matches!(&done[..], [(NodeId(0), 5, Err(e)), (NodeId(0), 6, Err(_))] if e.contains("size 3")), "{done:?}");
    assert!(run.connects.is_empty());
}
