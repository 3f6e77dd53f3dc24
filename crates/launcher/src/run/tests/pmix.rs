//! PMIx in the run reactor: connect, disconnect and multi-job fences as
//! collectives over every node of the listed jobs (maps for the nodes that
//! lack a job, blobs in node order, failure when a job ends first), lookups
//! that wait for their name, and PMIx spawns never pooled.

use super::*;
use dpm_proto::{CollectiveKind, NameRequest};

fn connect(run: &mut Run, rec: &mut Recorder, node: usize, req: u64, nspaces: &[&str], kind: CollectiveKind, data: &[u8]) {
    let nspaces = nspaces.iter().map(|s| s.to_string()).collect();
    run.on_message(
        rec,
        NodeId(node),
        ToLauncher::Connect { request: RequestId(req), job: JobId(0), nspaces, kind, data: data.to_vec(), ranks: vec![], group: None },
    );
}

/// A `ConnectDone`'s result: the jobs' maps and the collected data, or why not.
type ConnectResult = Result<(Vec<dpm_proto::JobMap>, Vec<u8>), String>;

/// The `ConnectDone` answers sent: (node, request, result).
fn connect_done(rec: &Recorder) -> Vec<(NodeId, u64, ConnectResult)> {
    rec.sent()
        .into_iter()
        .filter_map(|(n, m)| if let ToDaemon::ConnectDone { request, result, .. } = m { Some((n, request.0, result.clone())) } else { None })
        .collect()
}

fn kvsname(run: &Run, job: JobId) -> String {
    run.jobs.get(job).unwrap().kvsname().to_string()
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
                assert_eq!((maps[0].node_of.clone(), maps[0].appnums.clone(), maps[0].kvsname.clone()), (vec![NodeId(0), NodeId(1)], vec![0, 0], na.clone()));
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
        group: None,
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

#[allow(clippy::too_many_arguments)]
fn group(run: &mut Run, rec: &mut Recorder, node: usize, req: u64, id: &str, members: &[(&str, &[u32])], context_id: bool, data: &[u8]) {
    let mut nspaces: Vec<String> = members.iter().map(|(ns, _)| ns.to_string()).collect();
    nspaces.sort();
    nspaces.dedup();
    let msg = ToLauncher::Connect {
        request: RequestId(req),
        job: JobId(0),
        nspaces,
        kind: CollectiveKind::Group,
        data: data.to_vec(),
        ranks: members.iter().map(|(ns, r)| (ns.to_string(), r.to_vec())).collect(),
        group: Some(dpm_proto::GroupSpec { id: id.into(), context_id }),
    };
    run.on_message(rec, NodeId(node), msg);
}

/// The `ConnectDone` answers sent with their context ids: (node, request, result, id).
fn group_done(rec: &Recorder) -> Vec<(NodeId, u64, ConnectResult, Option<u64>)> {
    rec.sent()
        .into_iter()
        .filter_map(
            |(n, m)| if let ToDaemon::ConnectDone { request, result, context_id } = m { Some((n, request.0, result.clone(), *context_id)) } else { None },
        )
        .collect()
}

#[test]
fn a_group_construct_gathers_its_members_nodes_and_gets_a_context_id_unique_in_the_tree() {
    let (mut run, mut rec) = fixture(&[2, 2]);
    let a = started(&mut run, &mut rec, &[0, 0, 1, 1]);
    let na = kvsname(&run, a);
    // Every rank listed is the whole job; two groups over the same members
    // at once do not mix (their ids differ); one node's members asking for
    // a context id is enough.
    group(&mut run, &mut rec, 1, 1, "g1", &[(&na, &[0, 1, 2, 3])], false, &[2, 2]);
    group(&mut run, &mut rec, 1, 2, "g2", &[(&na, &[0, 1, 2, 3])], true, &[9]);
    group(&mut run, &mut rec, 0, 3, "g1", &[(&na, &[3, 2, 1, 0])], true, &[1]);
    let done = group_done(&rec);
    assert_eq!(done.len(), 2, "g2 waits for node 0: {done:?}");
    for (node, req, result, id) in &done {
        assert_eq!((node.0, *req), if node.0 == 0 { (0, 3) } else { (1, 1) });
        assert_eq!(result.as_ref().map(|(maps, data)| (maps.len(), data.clone())), Ok((0, vec![1, 2, 2])), "blobs in node order");
        assert_eq!(*id, Some(1));
    }
    rec.effects.clear();
    group(&mut run, &mut rec, 0, 4, "g2", &[(&na, &[0, 1, 2, 3])], true, &[]);
    let ids: Vec<Option<u64>> = group_done(&rec).iter().map(|d| d.3).collect();
    assert_eq!(ids, vec![Some(2), Some(2)], "the next group gets the next id");
    assert_eq!(rec.shared.context_id(), 3, "ids come from what the tree's runs share");
    assert!(run.connects.is_empty());
}

#[test]
fn a_group_of_some_ranks_waits_for_their_nodes_only_and_fails_when_its_job_ends() {
    let (mut run, mut rec) = fixture(&[1, 1, 1]);
    let a = started(&mut run, &mut rec, &[0, 1, 2]);
    let b = started(&mut run, &mut rec, &[2]);
    let (na, nb) = (kvsname(&run, a), kvsname(&run, b));
    // Ranks 0 and 2 of a with b's rank 0 (a job only node 2 hosts): nodes 0 and 2.
    group(&mut run, &mut rec, 2, 1, "g", &[(&na, &[0, 2]), (&nb, &[0])], false, &[]);
    group(&mut run, &mut rec, 0, 2, "g", &[(&na, &[0, 2]), (&nb, &[0])], false, &[]);
    let done = group_done(&rec);
    assert_eq!(done.iter().map(|d| (d.0 .0, d.1, d.3)).collect::<Vec<_>>(), vec![(0, 2, None), (2, 1, None)], "no id asked, none given");
    let (maps, _) = done[0].2.clone().unwrap();
    assert_eq!(maps.iter().map(|m| m.job).collect::<Vec<_>>(), vec![b], "node 0 learns the job it hosts no rank of");
    // A group one node never joins fails on the others when a member's job ends.
    rec.effects.clear();
    group(&mut run, &mut rec, 1, 3, "h", &[(&na, &[1]), (&nb, &[0])], true, &[]);
    exit(&mut run, &mut rec, 2, b, 0, ExitStatus::Code(0), DONE, 10);
    let done = group_done(&rec);
    assert!(matches!(&done[..], [(NodeId(1), 3, Err(e), None)] if e.contains("ended")), "{done:?}");
    // A group message without its group, or a group kind without one: refused.
    rec.effects.clear();
    let msg = ToLauncher::Connect {
        request: RequestId(4),
        job: JobId(0),
        nspaces: vec![nb.clone()],
        kind: CollectiveKind::Group,
        data: vec![],
        ranks: vec![],
        group: None,
    };
    run.on_message(&mut rec, NodeId(2), msg);
    assert!(matches!(&group_done(&rec)[..], [(NodeId(2), 4, Err(_), None)]));
    assert!(run.connects.is_empty());
}

#[test]
fn a_nodes_note_about_a_job_is_said_on_the_runs_stderr() {
    let (mut run, mut rec) = fixture(&[2]);
    let job = started(&mut run, &mut rec, &[0]);
    run.on_message(&mut rec, NodeId(0), ToLauncher::Note { job, line: "dpm: PMIx server on h: text".into() });
    assert_eq!(rec.said().last().map(|s| s.to_string()), Some("dpm: PMIx server on h: text".to_string()));
}
