//! The node reactor's PMIx dynamic processes under the recorder: a spawn
//! upcall up as `ToLauncher::Spawn` and answered with the child namespace,
//! a spawned job registered with its parent, a connect that registers the
//! other job's namespace before answering, a fence over two namespaces
//! through the launcher's collective, and the other namespace forgotten
//! with the last local job that connected to it; `PMIX_TIMEOUT` on each
//! kind of waiting request.

use dpm_kvs::{JobId, NodeId, Rank};
use dpm_pmix::ffi::PMIX_ERR_TIMEOUT;
use dpm_pmix::{Proc, PMIX_ERROR, PMIX_SUCCESS, RANK_WILDCARD};
use dpm_proto::{CollectiveKind, JobMap, PmiMode, ToDaemon, ToLauncher};

use super::recorder::{Recorded, RecordingEffects};
use super::tests::{launch, node, J};
use super::{GroupAnswer, GroupDirectives, NodeReactor, PmixAnswer, PmixApp, PmixEvent, PmixRequest, Timer};

const NS: &str = "kvs_7_3";
const OTHER: &str = "kvs_7_4";

/// A PMIx job J of 2 ranks, both here (node 0), launched and started.
fn pmix_node() -> (NodeReactor, RecordingEffects) {
    let (mut r, mut fx) = node();
    fx.serve_pmix = true;
    r.on_message(&mut fx, ToDaemon::Launch(launch(2, 2, PmiMode::Pmix)));
    fx.settle(&mut r);
    (r, fx)
}

fn answers(fx: &mut RecordingEffects) -> Vec<(PmixRequest, PmixAnswer)> {
    fx.take().into_iter().filter_map(|e| if let Recorded::PmixAnswer(q, a) = e { Some((q, a)) } else { None }).collect()
}

fn registered(fx: &RecordingEffects) -> Vec<dpm_pmix::JobSpec> {
    fx.log.iter().filter_map(|e| if let Recorded::PmixRegister(s) = e { Some(s.clone()) } else { None }).collect()
}

#[test]
fn a_spawn_goes_up_and_is_answered_with_the_child_namespace() {
    let (mut r, mut fx) = pmix_node();
    fx.take();
    let app = PmixApp { cmd: "./child".into(), argv: vec!["./child".into(), "x".into()], env: vec!["A=1".into()], cwd: None, maxprocs: 3, info: vec![] };
    r.on_pmix(&mut fx, PmixEvent::Spawn { nspace: NS.into(), rank: 1, job_info: vec![], apps: vec![app], timeout: None, req: PmixRequest(9) });
    let up = fx.take_up();
    let [ToLauncher::Spawn { request, job: J, rank: Rank(1), preput, commands }] = &up[..] else { panic!("{up:?}") };
    assert_eq!(preput, &vec![("dpm-pmix-parent-rank".to_string(), "1".to_string())]);
    assert_eq!((commands[0].exe.as_str(), commands[0].args.as_slice(), commands[0].maxprocs), ("./child", &["x".to_string()][..], 3));
    assert_eq!(commands[0].info, vec![("env".to_string(), "A=1".to_string())]);
    r.on_message(&mut fx, ToDaemon::SpawnDone { request: *request, result: Ok(OTHER.into()), errcodes: vec![] });
    assert_eq!(answers(&mut fx), vec![(PmixRequest(9), PmixAnswer::Spawned(PMIX_SUCCESS, OTHER.into()))]);
    // A failed spawn answers an error; an unknown namespace is refused at once.
    r.on_pmix(&mut fx, PmixEvent::Spawn { nspace: NS.into(), rank: 0, job_info: vec![], apps: vec![], timeout: None, req: PmixRequest(10) });
    assert!(matches!(&answers(&mut fx)[..], [(PmixRequest(10), PmixAnswer::Spawned(s, _))] if *s != PMIX_SUCCESS), "no apps: refused");
}

#[test]
fn a_spawned_job_is_registered_with_its_parent() {
    let (mut r, mut fx) = node();
    fx.serve_pmix = true;
    let mut child = launch(1, 1, PmiMode::Pmix);
    child.spawner = Some("kvs_7_0".into());
    child.preput = vec![("dpm-pmix-parent-rank".into(), "5".into())];
    r.on_message(&mut fx, ToDaemon::Launch(child));
    let specs = registered(&fx);
    assert_eq!(specs.len(), 1);
    assert_eq!(specs[0].parent, Some(Proc { nspace: "kvs_7_0".into(), rank: 5 }));
}

#[test]
fn a_connect_registers_the_other_job_and_a_two_job_fence_rides_the_collective() {
    let (mut r, mut fx) = pmix_node();
    fx.take();
    let procs = vec![(NS.to_string(), RANK_WILDCARD), (OTHER.to_string(), RANK_WILDCARD)];
    r.on_pmix(&mut fx, PmixEvent::Connect { procs: procs.clone(), disconnect: false, timeout: None, req: PmixRequest(1) });
    let up = fx.take_up();
    let [ToLauncher::Connect { request, job: J, nspaces, kind: CollectiveKind::Connect, data, ranks, group: None }] = &up[..] else { panic!("{up:?}") };
    assert!(ranks.is_empty(), "every rank of each");
    assert_eq!((nspaces.clone(), data.is_empty()), (vec![NS.to_string(), OTHER.to_string()], true));
    let map = JobMap { job: JobId(4), kvsname: OTHER.into(), node_of: [1, 1, 2].map(NodeId).to_vec(), appnums: vec![0; 3], universe_size: 4 };
    r.on_message(&mut fx, ToDaemon::ConnectDone { request: *request, result: Ok((vec![map], vec![])), context_id: None });
    let specs = registered(&fx);
    let [spec] = &specs[..] else { panic!("{specs:?}") };
    assert_eq!((spec.nspace.as_str(), spec.local_ranks(), spec.nodes.len()), (OTHER, &[][..], 3), "this node: an entry without ranks");
    spec.validate().unwrap();
    assert_eq!(answers(&mut fx), vec![(PmixRequest(1), PmixAnswer::Status(PMIX_SUCCESS))]);
    // A fence over every rank of both: the collective with this node's blob.
    let every = vec![(NS.to_string(), 0), (NS.to_string(), 1), (OTHER.to_string(), RANK_WILDCARD)];
    r.on_pmix(&mut fx, PmixEvent::Fence { procs: every, data: vec![7], timeout: None, req: PmixRequest(2) });
    let up = fx.take_up();
    let [ToLauncher::Connect { request, kind: CollectiveKind::Fence, data, .. }] = &up[..] else { panic!("{up:?}") };
    assert_eq!(data, &vec![7]);
    r.on_message(&mut fx, ToDaemon::ConnectDone { request: *request, result: Ok((vec![], vec![7, 8])), context_id: None });
    assert_eq!(answers(&mut fx), vec![(PmixRequest(2), PmixAnswer::Data(PMIX_SUCCESS, vec![7, 8]))]);
    // Part of each namespace: the collective with the ranks that take part.
    let part = vec![(OTHER.to_string(), 2), (NS.to_string(), 0), (OTHER.to_string(), 0)];
    r.on_pmix(&mut fx, PmixEvent::Fence { procs: part, data: vec![5], timeout: None, req: PmixRequest(3) });
    let up = fx.take_up();
    let [ToLauncher::Connect { request, kind: CollectiveKind::Fence, nspaces, ranks, .. }] = &up[..] else { panic!("{up:?}") };
    assert_eq!(nspaces, &vec![NS.to_string(), OTHER.to_string()]);
    assert_eq!(ranks, &vec![(NS.to_string(), vec![0]), (OTHER.to_string(), vec![0, 2])]);
    r.on_message(&mut fx, ToDaemon::ConnectDone { request: *request, result: Ok((vec![], vec![5, 6])), context_id: None });
    assert_eq!(answers(&mut fx), vec![(PmixRequest(3), PmixAnswer::Data(PMIX_SUCCESS, vec![5, 6]))]);
    // A rank the namespace does not have goes up as listed, for the
    // launcher to refuse on every node alike (refused here alone, the other
    // nodes' parts would wait for ever)...
    r.on_pmix(&mut fx, PmixEvent::Fence { procs: vec![(NS.to_string(), 2), (NS.to_string(), 0)], data: vec![], timeout: None, req: PmixRequest(40) });
    let up = fx.take_up();
    let [ToLauncher::Connect { request, kind: CollectiveKind::Fence, ranks, .. }] = &up[..] else { panic!("{up:?}") };
    assert_eq!(ranks, &vec![(NS.to_string(), vec![0, 2])]);
    r.on_message(&mut fx, ToDaemon::ConnectDone { request: *request, result: Err("refused".into()), context_id: None });
    assert_eq!(answers(&mut fx), vec![(PmixRequest(40), PmixAnswer::Data(PMIX_ERROR, vec![]))]);
    // ...and none of whose namespaces this node knows is refused at once.
    r.on_pmix(&mut fx, PmixEvent::Fence { procs: vec![("kvs_unknown".into(), 0)], data: vec![], timeout: None, req: PmixRequest(41) });
    assert!(matches!(&answers(&mut fx)[..], [(PmixRequest(41), PmixAnswer::Data(s, _))] if *s != PMIX_SUCCESS));
    assert!(fx.take_up().is_empty());
    // A failed collective answers an error.
    r.on_pmix(&mut fx, PmixEvent::Connect { procs, disconnect: true, timeout: None, req: PmixRequest(4) });
    let up = fx.take_up();
    let [ToLauncher::Connect { request, kind: CollectiveKind::Disconnect, .. }] = &up[..] else { panic!("{up:?}") };
    r.on_message(&mut fx, ToDaemon::ConnectDone { request: *request, result: Err("gone".into()), context_id: None });
    assert_eq!(answers(&mut fx), vec![(PmixRequest(4), PmixAnswer::Status(PMIX_ERROR))]);
    // The other namespace goes with the last local job that connected to it.
    r.on_message(&mut fx, ToDaemon::Forget { job: J });
    let forgotten: Vec<String> = fx.take().into_iter().filter_map(|e| if let Recorded::PmixForget(n) = e { Some(n) } else { None }).collect();
    assert_eq!(forgotten, vec![NS.to_string(), OTHER.to_string()]);
}

/// The timers the reactor set, and the messages it sent up, since the last take.
fn timers_and_up(fx: &mut RecordingEffects) -> (Vec<(std::time::Duration, Timer)>, Vec<ToLauncher>) {
    let (mut timers, mut up) = (Vec::new(), Vec::new());
    for e in fx.take() {
        match e {
            Recorded::SetTimer(after, t) => timers.push((after, t)),
            Recorded::Up(m) => up.push(m),
            _ => {}
        }
    }
    (timers, up)
}

#[test]
fn a_fence_past_its_timeout_is_answered_timeout_and_the_next_waits_for_its_completion() {
    let (mut r, mut fx) = pmix_node();
    fx.take();
    let whole = vec![(NS.to_string(), RANK_WILDCARD)];
    r.on_pmix(&mut fx, PmixEvent::Fence { procs: whole.clone(), data: vec![1], timeout: Some(3), req: PmixRequest(20) });
    let (timers, up) = timers_and_up(&mut fx);
    assert_eq!(timers, vec![(std::time::Duration::from_secs(3), Timer::PmixTimeout(PmixRequest(20)))]);
    assert!(matches!(&up[..], [ToLauncher::FenceIn { job: J, epoch: 0, .. }]), "{up:?}");
    r.on_timer(&mut fx, Timer::PmixTimeout(PmixRequest(20)));
    assert_eq!(answers(&mut fx), vec![(PmixRequest(20), PmixAnswer::Data(PMIX_ERR_TIMEOUT, vec![]))]);
    // Its FenceIn is up the tree: another fence before its completion is refused.
    r.on_pmix(&mut fx, PmixEvent::Fence { procs: whole.clone(), data: vec![], timeout: None, req: PmixRequest(21) });
    assert_eq!(answers(&mut fx), vec![(PmixRequest(21), PmixAnswer::Data(PMIX_ERROR, vec![]))]);
    // The late completion answers nothing; the next fence is epoch 1.
    r.on_message(&mut fx, ToDaemon::FenceDone { job: J, epoch: 0, delta: vec![] });
    assert_eq!(answers(&mut fx), vec![]);
    r.on_pmix(&mut fx, PmixEvent::Fence { procs: whole, data: vec![], timeout: Some(3), req: PmixRequest(22) });
    let (_, up) = timers_and_up(&mut fx);
    assert!(matches!(&up[..], [ToLauncher::FenceIn { job: J, epoch: 1, .. }]), "{up:?}");
    r.on_message(&mut fx, ToDaemon::FenceDone { job: J, epoch: 1, delta: vec![] });
    assert_eq!(answers(&mut fx), vec![(PmixRequest(22), PmixAnswer::Data(PMIX_SUCCESS, vec![]))]);
    // Its timer, firing after the answer, does nothing.
    r.on_timer(&mut fx, Timer::PmixTimeout(PmixRequest(22)));
    assert_eq!(fx.take().len(), 0);
}

#[test]
fn lookups_spawns_and_connects_past_their_timeout_are_answered_timeout_once() {
    let (mut r, mut fx) = pmix_node();
    fx.take();
    // OTHER known here (connected), so a fence over both is the collective.
    let both = vec![(NS.to_string(), RANK_WILDCARD), (OTHER.to_string(), RANK_WILDCARD)];
    r.on_pmix(&mut fx, PmixEvent::Connect { procs: both, disconnect: false, timeout: None, req: PmixRequest(29) });
    let [ToLauncher::Connect { request, .. }] = &fx.take_up()[..] else { panic!() };
    let map = JobMap { job: JobId(4), kvsname: OTHER.into(), node_of: vec![NodeId(1)], appnums: vec![0], universe_size: 1 };
    r.on_message(&mut fx, ToDaemon::ConnectDone { request: *request, result: Ok((vec![map], vec![])), context_id: None });
    assert_eq!(answers(&mut fx), vec![(PmixRequest(29), PmixAnswer::Status(PMIX_SUCCESS))]);
    r.on_pmix(&mut fx, PmixEvent::Lookup { nspace: NS.into(), keys: vec!["svc".into()], wait: true, timeout: Some(1), req: PmixRequest(30) });
    let app = PmixApp { cmd: "./child".into(), argv: vec!["./child".into()], env: vec![], cwd: None, maxprocs: 1, info: vec![] };
    r.on_pmix(&mut fx, PmixEvent::Spawn { nspace: NS.into(), rank: 0, job_info: vec![], apps: vec![app], timeout: Some(2), req: PmixRequest(31) });
    let procs = vec![(NS.to_string(), RANK_WILDCARD), (OTHER.to_string(), RANK_WILDCARD)];
    r.on_pmix(&mut fx, PmixEvent::Connect { procs: procs.clone(), disconnect: false, timeout: Some(4), req: PmixRequest(32) });
    r.on_pmix(&mut fx, PmixEvent::Fence { procs, data: vec![], timeout: Some(5), req: PmixRequest(33) });
    r.on_pmix(&mut fx, PmixEvent::Lookup { nspace: NS.into(), keys: vec!["other".into()], wait: true, timeout: None, req: PmixRequest(34) });
    let (timers, up) = timers_and_up(&mut fx);
    let secs: Vec<(u64, PmixRequest)> = timers.iter().map(|(d, t)| (d.as_secs(), if let Timer::PmixTimeout(q) = t { *q } else { panic!("{t:?}") })).collect();
    assert_eq!(secs, vec![(1, PmixRequest(30)), (2, PmixRequest(31)), (4, PmixRequest(32)), (5, PmixRequest(33))], "no timer without PMIX_TIMEOUT");
    let [ToLauncher::Name { request: lookup, .. }, ToLauncher::Spawn { request: spawn, .. }, ToLauncher::Connect { request: connect, .. }, ToLauncher::Connect { request: fence, .. }, ToLauncher::Name { request: untimed, .. }] =
        &up[..]
    else {
        panic!("{up:?}")
    };
    for q in [30, 31, 32, 33] {
        r.on_timer(&mut fx, Timer::PmixTimeout(PmixRequest(q)));
    }
    assert_eq!(
        answers(&mut fx),
        vec![
            (PmixRequest(30), PmixAnswer::Found(PMIX_ERR_TIMEOUT, vec![])),
            (PmixRequest(31), PmixAnswer::Spawned(PMIX_ERR_TIMEOUT, String::new())),
            (PmixRequest(32), PmixAnswer::Status(PMIX_ERR_TIMEOUT)),
            (PmixRequest(33), PmixAnswer::Data(PMIX_ERR_TIMEOUT, vec![])),
        ]
    );
    // The launcher's late answers complete nothing (each upcall is answered once).
    r.on_message(&mut fx, ToDaemon::NameDone { request: *lookup, result: Ok(Some("port".into())) });
    r.on_message(&mut fx, ToDaemon::SpawnDone { request: *spawn, result: Ok("kvs_7_9".into()), errcodes: vec![] });
    r.on_message(&mut fx, ToDaemon::ConnectDone { request: *connect, result: Ok((vec![], vec![])), context_id: None });
    r.on_message(&mut fx, ToDaemon::ConnectDone { request: *fence, result: Ok((vec![], vec![])), context_id: None });
    assert_eq!(answers(&mut fx), vec![]);
    // The lookup without a timeout still waits, and is answered when its name comes.
    r.on_message(&mut fx, ToDaemon::NameDone { request: *untimed, result: Ok(Some("p2".into())) });
    assert_eq!(answers(&mut fx), vec![(PmixRequest(34), PmixAnswer::Found(PMIX_SUCCESS, vec![("other".into(), "p2".into())]))]);
}

fn group_event(construct: bool, directives: GroupDirectives, members: &[(&str, u32)], timeout: Option<u32>, req: u64) -> PmixEvent {
    let members = members.iter().map(|(ns, r)| (ns.to_string(), *r)).collect();
    PmixEvent::Group { construct, id: "g".into(), members, directives, data: vec![3, 4], timeout, req: PmixRequest(req) }
}

#[test]
fn a_group_construct_asking_for_a_context_id_is_the_launchers_collective() {
    let (mut r, mut fx) = pmix_node();
    fx.take();
    let ctx = GroupDirectives { context_id: true, ..Default::default() };
    // Both ranks of the job and another job's rank 1 (known through a connect: no).
    r.on_pmix(&mut fx, group_event(true, ctx, &[(NS, 0), (NS, 1), (OTHER, 1)], None, 1));
    let up = fx.take_up();
    let [ToLauncher::Connect { request, job: J, nspaces, kind: CollectiveKind::Group, data, ranks, group: Some(g) }] = &up[..] else { panic!("{up:?}") };
    assert_eq!((nspaces.clone(), data.clone(), g.id.as_str(), g.context_id), (vec![NS.to_string(), OTHER.to_string()], vec![3, 4], "g", true));
    // A namespace unknown here: every namespace goes as listed (the
    // launcher takes the local job's complete list as the whole job).
    assert_eq!(ranks, &vec![(NS.to_string(), vec![0, 1]), (OTHER.to_string(), vec![1])]);
    let map = JobMap { job: JobId(4), kvsname: OTHER.into(), node_of: [1, 1].map(NodeId).to_vec(), appnums: vec![0; 2], universe_size: 4 };
    r.on_message(&mut fx, ToDaemon::ConnectDone { request: *request, result: Ok((vec![map], vec![1, 3, 4])), context_id: Some(7) });
    assert_eq!(registered(&fx).len(), 1, "the other member job is registered before the answer");
    let members = vec![(NS.to_string(), 0), (NS.to_string(), 1), (OTHER.to_string(), 1)];
    let expect = GroupAnswer { members, context_id: Some(7), data: vec![1, 3, 4] };
    assert_eq!(answers(&mut fx), vec![(PmixRequest(1), PmixAnswer::Group(PMIX_SUCCESS, expect))]);
    // A failed collective, and one past its PMIX_TIMEOUT, answer an error.
    r.on_pmix(&mut fx, group_event(true, ctx, &[(NS, 0), (NS, 1)], None, 2));
    let up = fx.take_up();
    let [ToLauncher::Connect { request, kind: CollectiveKind::Group, ranks, .. }] = &up[..] else { panic!("{up:?}") };
    assert!(ranks.is_empty());
    r.on_message(&mut fx, ToDaemon::ConnectDone { request: *request, result: Err("ended".into()), context_id: None });
    assert_eq!(answers(&mut fx), vec![(PmixRequest(2), PmixAnswer::Group(PMIX_ERROR, GroupAnswer::default()))]);
    r.on_pmix(&mut fx, group_event(true, ctx, &[(NS, 0), (NS, 1)], Some(5), 3));
    assert_eq!(fx.take_up().len(), 1);
    r.on_timer(&mut fx, Timer::PmixTimeout(PmixRequest(3)));
    assert_eq!(answers(&mut fx), vec![(PmixRequest(3), PmixAnswer::Group(PMIX_ERR_TIMEOUT, GroupAnswer::default()))]);
}

#[test]
fn a_group_destruct_and_a_construct_without_id_or_barrier_complete_on_the_node() {
    let (mut r, mut fx) = pmix_node();
    fx.take();
    let ctx = GroupDirectives { context_id: true, ..Default::default() };
    let local = GroupDirectives { context_id: true, local_only: true, ..Default::default() };
    r.on_pmix(&mut fx, group_event(false, ctx, &[(NS, 0), (OTHER, 0)], None, 1));
    r.on_pmix(&mut fx, group_event(true, GroupDirectives::default(), &[(NS, 0), (OTHER, 0)], None, 2));
    r.on_pmix(&mut fx, group_event(true, local, &[(NS, 0)], None, 3));
    assert!(fx.take_up().is_empty(), "nothing leaves the node");
    let done = PmixAnswer::Group(PMIX_SUCCESS, GroupAnswer::default());
    assert_eq!(answers(&mut fx), vec![(PmixRequest(1), done.clone()), (PmixRequest(2), done.clone()), (PmixRequest(3), done)]);
    // With a barrier asked, a construct is the collective even without an id.
    let barrier = GroupDirectives { barrier: true, ..Default::default() };
    r.on_pmix(&mut fx, group_event(true, barrier, &[(NS, 0)], None, 4));
    assert!(matches!(&fx.take_up()[..], [ToLauncher::Connect { kind: CollectiveKind::Group, group: Some(g), .. }] if !g.context_id));
}

/// A rank that gets through `PMIx_Init` before its start is recorded here
/// (the spawner thread's answer is behind the child's exec on a loaded
/// machine) is served, not refused: the library would close its connection
/// and the rank run as a world of one. What it reported is its progress
/// once its start is recorded; a rank the job does not have here is still
/// refused.
#[test]
fn a_rank_that_connects_before_its_start_is_recorded_is_served() {
    use dpm_proto::{ExitStatus, PmiProgress, RankExit, Stream};
    let (mut r, mut fx) = node();
    fx.serve_pmix = true;
    r.on_message(&mut fx, ToDaemon::Launch(launch(2, 2, PmiMode::Pmix)));
    fx.take();
    r.on_pmix(&mut fx, PmixEvent::Connected { nspace: NS.into(), rank: 0, req: PmixRequest(1) });
    r.on_pmix(&mut fx, PmixEvent::Finalized { nspace: NS.into(), rank: 0, req: PmixRequest(2) });
    r.on_pmix(&mut fx, PmixEvent::Connected { nspace: NS.into(), rank: 1, req: PmixRequest(3) });
    r.on_pmix(&mut fx, PmixEvent::Connected { nspace: NS.into(), rank: 2, req: PmixRequest(4) });
    r.on_pmix(&mut fx, PmixEvent::Connected { nspace: OTHER.into(), rank: 0, req: PmixRequest(5) });
    let got = answers(&mut fx);
    let ok = |q| (PmixRequest(q), PmixAnswer::Status(PMIX_SUCCESS));
    let refused = |q| (PmixRequest(q), PmixAnswer::Status(PMIX_ERROR));
    assert_eq!(got, vec![ok(1), ok(2), ok(3), refused(4), refused(5)]);
    fx.settle(&mut r);
    fx.take();
    for (rank, code) in [(0, 0), (1, 3)] {
        r.on_exited(&mut fx, J, Rank(rank), ExitStatus::Code(code), 42);
        r.on_output_closed(&mut fx, J, Rank(rank), Stream::Stdout);
        r.on_output_closed(&mut fx, J, Rank(rank), Stream::Stderr);
    }
    let exits: Vec<(Rank, PmiProgress)> =
        fx.take_up().into_iter().filter_map(|m| if let ToLauncher::Exited(RankExit { rank, pmi, .. }) = m { Some((rank, pmi)) } else { None }).collect();
    assert_eq!(exits, vec![(Rank(0), PmiProgress::Finalized), (Rank(1), PmiProgress::Active)]);
}

#[test]
fn the_server_librarys_own_lines_reach_the_jobs_run_bounded() {
    let (mut r, mut fx) = pmix_node();
    fx.take_up();
    let log = |text: &str| PmixEvent::Log { nspace: "pmix-server.42".into(), rank: 0, output: vec![(dpm_proto::Stream::Stderr, text.as_bytes().to_vec())] };
    r.on_pmix(&mut fx, log("first line\n\nsecond \u{1b}[31mline\n"));
    let notes =
        |up: Vec<ToLauncher>| up.into_iter().filter_map(|m| if let ToLauncher::Note { job, line } = m { Some((job, line)) } else { None }).collect::<Vec<_>>();
    let got = notes(fx.take_up());
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got.iter().all(|(job, line)| *job == J && line.starts_with("dpm: PMIx server on ")), "{got:?}");
    assert!(got[0].1.ends_with(": first line") && got[1].1.ends_with(r": second \u{1b}[31mline"), "escaped: {got:?}");
    let long = "x".repeat(5_000);
    for _ in 0..100 {
        r.on_pmix(&mut fx, log(&long));
    }
    let got = notes(fx.take_up());
    assert_eq!(got.len(), 19, "the rest of the 20 lines and one closing line: {got:?}");
    assert!(got[..18].iter().all(|(_, line)| line.len() < 1_200 && line.ends_with('…')), "cut");
    assert!(got[18].1.ends_with("further lines in dpm's log only"), "{:?}", got[18]);
    // A rank's own log stays the rank's output.
    r.on_pmix(&mut fx, PmixEvent::Log { nspace: NS.into(), rank: 1, output: vec![(dpm_proto::Stream::Stderr, b"mine\n".to_vec())] });
    assert!(notes(fx.take_up()).is_empty());
}
