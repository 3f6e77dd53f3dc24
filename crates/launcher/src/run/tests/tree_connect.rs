//! PMIx collectives across the runs of one tree (`run::tree_connect`): the
//! sub-machine alone (a collective completes when every node of every job
//! has called; an unknown namespace and a job that ends fail every node
//! that called, at once), two runs of one tree meeting through it, and
//! Open MPI's rendezvous lookups of a job that has ended answered at once.

use super::*;
use dpm_proto::{CollectiveKind, GroupSpec, JobMap, NameRequest};

/// The sub-machine's effects, recorded.
#[derive(Default)]
struct Rec {
    sent: Vec<(NodeId, ToDaemon)>,
    ids: u64,
}

impl TreeConnectEffects for Rec {
    fn send(&mut self, node: NodeId, msg: ToDaemon) {
        self.sent.push((node, msg));
    }
    fn context_id(&mut self) -> u64 {
        self.ids += 1;
        self.ids
    }
}

type Answer = (usize, u64, Result<(Vec<JobId>, Vec<u8>), String>, Option<u64>);

/// The `ConnectDone`s sent: (node, request, the maps' jobs and the data or why not, context id).
fn answers(sent: &[(NodeId, ToDaemon)]) -> Vec<Answer> {
    sent.iter()
        .filter_map(|(n, m)| match m {
            ToDaemon::ConnectDone { request, result, context_id } => {
                Some((n.0, request.0, result.clone().map(|(maps, data)| (maps.iter().map(|m| m.job).collect(), data)), *context_id))
            }
            _ => None,
        })
        .collect()
}

fn map(job: u32, node_of: &[usize]) -> JobMap {
    JobMap {
        job: JobId(job),
        kvsname: format!("ns{job}"),
        node_of: node_of.iter().map(|&n| NodeId(n)).collect(),
        appnums: vec![0; node_of.len()],
        universe_size: -1,
    }
}

fn part(node: usize, request: u64, nspaces: &[&str], kind: CollectiveKind, data: &[u8]) -> Contribution {
    Contribution {
        node: NodeId(node),
        request: RequestId(request),
        nspaces: nspaces.iter().map(|s| s.to_string()).collect(),
        ranks: Vec::new(),
        kind,
        group: None,
        data: data.to_vec(),
    }
}

/// Jobs 1 (ranks on nodes 0 and 1) and 2 (node 2) registered.
fn two_jobs() -> TreeConnects {
    let mut tree = TreeConnects::default();
    tree.register(map(1, &[0, 1]));
    tree.register(map(2, &[2]));
    tree
}

fn live(job: JobId) -> bool {
    job == JobId(1) || job == JobId(2)
}

#[test]
fn a_collective_across_runs_completes_when_every_node_of_every_job_has_called() {
    let (mut tree, mut fx) = (two_jobs(), Rec::default());
    for (node, request, data) in [(2, 10, &b"c"[..]), (0, 11, b"a")] {
        tree.contribute(&mut fx, part(node, request, &["ns2", "ns1"], CollectiveKind::Fence, data));
        tree.check_invariants(&live);
        assert!(fx.sent.is_empty(), "node 1 has not called");
    }
    tree.contribute(&mut fx, part(1, 12, &["ns1", "ns2"], CollectiveKind::Fence, b"b"));
    tree.check_invariants(&live);
    let mut done = answers(&fx.sent);
    done.sort_by_key(|a| a.0);
    let all = b"abc".to_vec();
    assert_eq!(done, vec![(0, 11, Ok((vec![], all.clone())), None), (1, 12, Ok((vec![], all.clone())), None), (2, 10, Ok((vec![], all)), None)]);
    assert_eq!(tree.waiting(), 0);
}

#[test]
fn a_connect_across_runs_gives_each_node_the_maps_it_lacks_and_a_group_its_context_id() {
    let (mut tree, mut fx) = (two_jobs(), Rec::default());
    for node in 0..3 {
        tree.contribute(&mut fx, part(node, node as u64, &["ns1", "ns2"], CollectiveKind::Connect, &[]));
    }
    let mut done = answers(&fx.sent);
    done.sort_by_key(|a| a.0);
    let maps: Vec<Vec<JobId>> = done.iter().map(|a| a.2.clone().unwrap().0).collect();
    assert_eq!(maps, vec![vec![JobId(2)], vec![JobId(2)], vec![JobId(1)]]);
    fx.sent.clear();
    for node in 0..3 {
        let mut c = part(node, 20 + node as u64, &["ns1", "ns2"], CollectiveKind::Group, &[]);
        c.group = Some(GroupSpec { id: "g".into(), context_id: node == 1 });
        tree.contribute(&mut fx, c);
        tree.check_invariants(&live);
    }
    let done = answers(&fx.sent);
    assert_eq!(done.len(), 3, "{done:?}");
    assert!(done.iter().all(|a| a.3 == Some(1)), "one context id for every node: {done:?}");
}

#[test]
fn an_unknown_namespace_or_a_stranger_node_is_refused_at_once() {
    let (mut tree, mut fx) = (two_jobs(), Rec::default());
    tree.contribute(&mut fx, part(0, 1, &["ns1", "gone"], CollectiveKind::Connect, &[]));
    tree.contribute(&mut fx, part(3, 2, &["ns1", "ns2"], CollectiveKind::Connect, &[]));
    let done = answers(&fx.sent);
    assert_eq!(done.len(), 2, "{done:?}");
    assert!(matches!(&done[0].2, Err(why) if why.contains("'gone' is not a live job of this boot")), "{done:?}");
    assert!(matches!(&done[1].2, Err(why) if why.contains("hosts no rank")), "{done:?}");
    assert_eq!(tree.waiting(), 0);
}

#[test]
fn a_job_that_ends_fails_the_collectives_over_it_on_every_node_that_called() {
    let (mut tree, mut fx) = (two_jobs(), Rec::default());
    tree.contribute(&mut fx, part(0, 1, &["ns1", "ns2"], CollectiveKind::Connect, &[]));
    tree.contribute(&mut fx, part(1, 2, &["ns1", "ns2"], CollectiveKind::Connect, &[]));
    tree.job_ended(&mut fx, JobId(2));
    tree.check_invariants(&|j| j == JobId(1));
    let done = answers(&fx.sent);
    assert_eq!(done.iter().map(|a| (a.0, a.1)).collect::<Vec<_>>(), vec![(0, 1), (1, 2)]);
    assert!(done.iter().all(|a| matches!(&a.2, Err(why) if why.contains("job 2 ended"))), "{done:?}");
    assert!(!tree.knows("ns2") && tree.knows("ns1"));
    fx.sent.clear();
    tree.contribute(&mut fx, part(0, 3, &["ns1", "ns2"], CollectiveKind::Connect, &[]));
    assert!(matches!(&answers(&fx.sent)[0].2, Err(why) if why.contains("not a live job")), "a later connect to it is refused");
}

fn connect_from(run: &mut Run, rec: &mut Recorder, node: usize, req: u64, job: JobId, nspaces: &[&str]) {
    let nspaces = nspaces.iter().map(|s| s.to_string()).collect();
    run.on_message(
        rec,
        NodeId(node),
        ToLauncher::Connect { request: RequestId(req), job, nspaces, kind: CollectiveKind::Connect, data: vec![], ranks: vec![], group: None },
    );
    run.settle(rec);
}

fn connect_answers(rec: &Recorder) -> Vec<Answer> {
    let sent: Vec<(NodeId, ToDaemon)> = rec.sent().into_iter().map(|(n, m)| (n, m.clone())).collect();
    answers(&sent)
}

/// Two runs of one tree (owners 1 and 2), each with a one-rank job
/// (nodes 0 and 1); their kvsnames.
fn two_runs() -> (Run, Run, Recorder, JobId, JobId, String, String) {
    let (mut a, mut rec) = fixture(&[1, 1]);
    a.settings.owner = 1;
    let mut b = Run::new(settings_for(&[1, 1]));
    b.settings.owner = 2;
    let ja = started(&mut a, &mut rec, &[0]);
    let jb = started(&mut b, &mut rec, &[1]);
    let (na, nb) = (a.jobs.get(ja).unwrap().kvsname().to_string(), b.jobs.get(jb).unwrap().kvsname().to_string());
    check_tree(&rec, &[&a, &b]);
    (a, b, rec, ja, jb, na, nb)
}

#[test]
fn two_runs_of_one_tree_connect_through_it() {
    let (mut a, mut b, mut rec, ja, jb, na, nb) = two_runs();
    connect_from(&mut a, &mut rec, 0, 1, ja, &[&na, &nb]);
    assert!(connect_answers(&rec).is_empty(), "run 2's node has not called");
    connect_from(&mut b, &mut rec, 1, 2, jb, &[&nb, &na]);
    b.check_invariants(&rec.shared);
    let mut done = connect_answers(&rec);
    done.sort_by_key(|d| d.0);
    assert_eq!(done, vec![(0, 1, Ok((vec![jb], vec![])), None), (1, 2, Ok((vec![ja], vec![])), None)]);
    check_tree(&rec, &[&a, &b]);
}

#[test]
fn a_run_whose_job_ends_fails_the_other_runs_connect_to_it() {
    let (mut a, mut b, mut rec, ja, jb, na, nb) = two_runs();
    connect_from(&mut a, &mut rec, 0, 1, ja, &[&na, &nb]);
    exit(&mut b, &mut rec, 1, jb, 0, ExitStatus::Code(0), PmiProgress::Finalized, 0);
    b.settle(&mut rec);
    let done = connect_answers(&rec);
    assert_eq!(done.len(), 1, "{done:?}");
    assert!(matches!(&done[0].2, Err(why) if why.contains(&format!("{jb} ended"))), "{done:?}");
    connect_from(&mut a, &mut rec, 0, 2, ja, &[&na, &nb]);
    assert!(matches!(&connect_answers(&rec)[1].2, Err(why) if why.contains("is not a live job of this run")), "{:?}", connect_answers(&rec));
    check_tree(&rec, &[&a, &b]);
}

fn name_done(rec: &Recorder) -> Vec<(u64, Result<Option<String>, String>)> {
    rec.sent().into_iter().filter_map(|(_, m)| if let ToDaemon::NameDone { request, result } = m { Some((request.0, result.clone())) } else { None }).collect()
}

#[test]
fn open_mpis_rendezvous_names_of_an_ended_job_are_answered_at_once() {
    let (mut a, mut b, mut rec, ja, jb, _, nb) = two_runs();
    let rendezvous = format!("{}.0:77:accept", u32::from(open_mpi_family(&nb)) << 16);
    let wait = |service: &str| NameRequest::LookupWait { service: service.to_string() };
    a.on_message(&mut rec, NodeId(0), ToLauncher::Name { request: RequestId(1), job: ja, op: wait(&rendezvous) });
    a.settle(&mut rec);
    assert!(name_done(&rec).is_empty(), "run 2's job is live: the lookup waits");
    exit(&mut b, &mut rec, 1, jb, 0, ExitStatus::Code(0), PmiProgress::Finalized, 0);
    b.settle(&mut rec);
    assert!(matches!(&name_done(&rec)[..], [(1, Err(why))] if why.contains("ended")), "{:?}", name_done(&rec));
    a.on_message(&mut rec, NodeId(0), ToLauncher::Name { request: RequestId(2), job: ja, op: wait(&rendezvous) });
    assert!(matches!(&name_done(&rec)[1..], [(2, Err(why))] if why.contains("a job that has ended")), "{:?}", name_done(&rec));
    a.on_message(&mut rec, NodeId(0), ToLauncher::Name { request: RequestId(3), job: ja, op: wait("plain-name") });
    assert_eq!(name_done(&rec).len(), 2, "another name waits as before");
    check_tree(&rec, &[&a, &b]);
}
