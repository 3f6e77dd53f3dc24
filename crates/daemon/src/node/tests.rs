//! The node reactor driven without a socket or a process: a recorder stands
//! in for the world, fake processes speak PMI-1 by bytes.

use dpm_kvs::{JobId, KvsDesign, NodeId, Rank};
use dpm_pmi::ConnId;
use dpm_proto::{AppSpec, ExitStatus, LaunchJob, PmiMode, PmiProgress, ProcSpec, RankExit, Stream, ToDaemon, ToLauncher};

use super::recorder::{Recorded, RecordingEffects, FIRST_PID};
use super::*;
use crate::DaemonConfig;

pub(super) const J: JobId = JobId(3);
const KVS: &str = "kvs_7_3";

pub(super) fn node() -> (NodeReactor, RecordingEffects) {
    (NodeReactor::new(&DaemonConfig { host: "n0".into(), trace: false }), RecordingEffects::new())
}

/// A node running `n` ranks of job `J`.
pub(super) fn running(n: u32) -> (NodeReactor, RecordingEffects) {
    let (mut r, mut fx) = node();
    r.on_message(&mut fx, ToDaemon::Launch(launch(n, n, PmiMode::Fd)));
    fx.settle(&mut r);
    fx.take();
    (r, fx)
}

/// A job of `size` ranks, the first `local` of them on this node.
pub(super) fn launch(size: u32, local: u32, mode: PmiMode) -> LaunchJob {
    LaunchJob {
        job: J,
        kvsname: KVS.into(),
        size,
        appnums: vec![0; size as usize],
        universe_size: size as i64,
        process_mapping: format!("(vector,(0,1,{size}))"),
        spawner: None,
        preput: vec![],
        pmi_mode: mode,
        stdin_rank: Some(Rank(0)),
        apps: vec![AppSpec {
            exe: "/bin/app".into(),
            argv: vec!["app".into(), "-x".into()],
            env: vec![("HOME".into(), "/h".into())],
            wdir: "/".into(),
            node_env: false,
        }],
        procs: (0..local).map(|r| ProcSpec { rank: Rank(r), app: 0 }).collect(),
        kvs: KvsDesign::Allgather,
        node_of: vec![NodeId(0); size as usize],
        awaiting_claim: false,
        binding: Default::default(),
        pmix_watch: false,
        hold: false,
    }
}

/// Launch `local` ranks of a job of `local` on this node, in `PMI_FD` mode;
/// returns each rank's PMI connection.
pub(super) fn launched(r: &mut NodeReactor, fx: &mut RecordingEffects, local: u32) -> Vec<ConnId> {
    r.on_message(fx, ToDaemon::Launch(launch(local, local, PmiMode::Fd)));
    fx.settle(r);
    let conns = fx.starts().iter().map(|s| s.pmi_conn.expect("PMI_FD mode")).collect();
    fx.take();
    conns
}

/// Each connection says PMI-1 `init`.
pub(super) fn init(r: &mut NodeReactor, fx: &mut RecordingEffects, conns: &[ConnId]) {
    for &conn in conns {
        assert!(talk(r, fx, conn, "cmd=init pmi_version=1 pmi_subversion=1\n").starts_with("cmd=response_to_init rc=0"));
    }
}

pub(super) fn talk(r: &mut NodeReactor, fx: &mut RecordingEffects, conn: ConnId, line: &str) -> String {
    r.on_pmi_bytes(fx, conn, line.as_bytes());
    fx.take_written(conn)
}

#[test]
fn a_launch_starts_each_rank_with_its_pmi_environment() {
    let (mut r, mut fx) = node();
    r.on_message(&mut fx, ToDaemon::Launch(launch(4, 3, PmiMode::Fd)));
    // Every rank founds its own session and group (pgid 0), all in one batch.
    let batches: Vec<Vec<i32>> =
        fx.log.iter().filter_map(|e| if let Recorded::Start(b) = e { Some(b.iter().map(|s| s.pgid).collect()) } else { None }).collect();
    assert_eq!(batches, vec![vec![0, 0, 0]]);
    // The job's shared memory is tracked before any rank can make some.
    let track = fx.log.iter().position(|e| matches!(e, Recorded::TrackShm { job: J, kvsname } if kvsname == KVS));
    let start = fx.log.iter().position(|e| matches!(e, Recorded::Start(_)));
    assert!(track.is_some() && track < start, "{:?}", fx.log);
    let starts = fx.starts();
    for (i, s) in starts.iter().enumerate() {
        assert_eq!((s.rank, s.exe.as_str(), &s.argv[..]), (Rank(i as u32), "/bin/app", &["app".to_string(), "-x".to_string()][..]));
        let vars = ["PMI_RANK", "PMI_SIZE", "PMI_JOBID", "PMI_HOSTNAME", "MPI_LOCALNRANKS", "MPI_LOCALRANKID"].map(|k| s.var(k));
        let i = i.to_string();
        assert_eq!(vars, [Some(i.as_str()), Some("4"), Some(KVS), Some("n0"), Some("3"), Some(i.as_str())]);
        assert!(s.env.socketpair && s.var("PMI_PORT").is_none() && s.var("PMI_SPAWNED").is_none());
        assert_eq!(s.with_stdin, i == "0", "only the stdin rank reads stdin");
    }
    let conns: std::collections::HashSet<_> = starts.iter().map(|s| s.pmi_conn.unwrap()).collect();
    assert_eq!(conns.len(), 3, "one PMI connection each");
    fx.settle(&mut r);
    let started: Vec<(Rank, u32)> =
        fx.take_up().into_iter().map(|m| if let ToLauncher::Started { rank, pid, .. } = m { (rank, pid) } else { panic!("{m:?}") }).collect();
    assert_eq!(started, (0..3).map(|i| (Rank(i), (FIRST_PID + i as i32) as u32)).collect::<Vec<_>>());
}

#[test]
fn a_port_mode_launch_opens_the_jobs_port_and_passes_it() {
    let (mut r, mut fx) = node();
    r.on_message(&mut fx, ToDaemon::Launch(launch(2, 2, PmiMode::Port)));
    fx.settle(&mut r);
    assert!(matches!(fx.log[0], Recorded::OpenPort(J)));
    for s in fx.starts() {
        assert!(!s.env.socketpair && s.pmi_conn.is_none());
        assert_eq!(s.var("PMI_ID"), Some(s.rank.0.to_string().as_str()));
        assert!(s.var("PMI_PORT").is_some_and(|p| p.starts_with("127.0.0.1:")));
    }
    // A connection on the port is served until the job is forgotten.
    let conn = r.on_port_connection(J).expect("the job is known");
    init(&mut r, &mut fx, &[conn]);
    r.on_message(&mut fx, ToDaemon::Forget { job: J });
    assert!(fx.log.iter().any(|e| matches!(e, Recorded::ClosePort(J))));
    assert!(fx.log.iter().any(|e| matches!(e, Recorded::PmiDrop(c) if *c == conn)));
    assert!(r.on_port_connection(J).is_none(), "no connections for a job that is gone");
}

#[test]
fn pmi_requests_are_answered_on_their_connection() {
    let (mut r, mut fx) = node();
    let c = launched(&mut r, &mut fx, 2);
    // The start of MPICH 5's PMI-1 conversation (crates/pmi/tests/transcripts.rs).
    let transcript = [
        ("cmd=init pmi_version=1 pmi_subversion=1\n", "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1\n".to_string()),
        ("cmd=get_maxes\n", "cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024\n".into()),
        ("cmd=get_appnum\n", "cmd=appnum rc=0 appnum=0\n".into()),
        ("cmd=get_my_kvsname\n", format!("cmd=my_kvsname rc=0 kvsname={KVS}\n")),
        ("cmd=get kvsname=kvs_7_3 key=PMI_process_mapping\n", "cmd=get_result rc=0 value=(vector,(0,1,2))\n".into()),
    ];
    for (line, reply) in transcript {
        assert_eq!(talk(&mut r, &mut fx, c[1], line), reply);
    }
    assert!(fx.take_written(c[0]).is_empty(), "nothing for the other rank");
    assert!(fx.take_up().is_empty());
}

#[test]
fn a_fence_goes_up_once_for_the_node_and_its_completion_releases_every_rank() {
    let (mut r, mut fx) = node();
    let c = launched(&mut r, &mut fx, 2);
    init(&mut r, &mut fx, &c);
    assert_eq!(talk(&mut r, &mut fx, c[0], "cmd=put kvsname=kvs_7_3 key=k0 value=v0\n"), "cmd=put_result rc=0\n");
    assert_eq!(talk(&mut r, &mut fx, c[0], "cmd=barrier_in\n"), "", "waits for rank 1");
    assert!(fx.take_up().is_empty(), "nothing goes up before every local rank entered");
    talk(&mut r, &mut fx, c[1], "cmd=barrier_in\n");
    let ups = fx.take_up();
    let [ToLauncher::FenceIn { job: J, epoch: 0, count: 2, puts }] = &ups[..] else { panic!("{ups:?}") };
    assert_eq!(puts, &vec![("k0".to_string(), "v0".to_string())]);
    r.on_message(&mut fx, ToDaemon::FenceDone { job: J, epoch: 0, delta: puts.clone() });
    for &conn in &c {
        assert_eq!(fx.take_written(conn), "cmd=barrier_out rc=0\n");
    }
    assert_eq!(talk(&mut r, &mut fx, c[1], "cmd=get kvsname=kvs_7_3 key=k0\n"), "cmd=get_result rc=0 value=v0\n");
}

fn exited(fx: &mut RecordingEffects) -> Vec<(Rank, ExitStatus, PmiProgress)> {
    fx.take_up()
        .into_iter()
        .filter_map(|m| if let ToLauncher::Exited(RankExit { rank, status, pmi, .. }) = m { Some((rank, status, pmi)) } else { None })
        .collect()
}

#[test]
fn an_exit_is_reported_only_after_its_pmi_connection_and_output_closed() {
    let (mut r, mut fx) = node();
    let c = launched(&mut r, &mut fx, 1);
    init(&mut r, &mut fx, &c);
    assert_eq!(talk(&mut r, &mut fx, c[0], "cmd=finalize\n"), "cmd=finalize_ack rc=0\n");
    r.on_output(&mut fx, J, Rank(0), Stream::Stdout, b"bye\n".to_vec());
    r.on_exited(&mut fx, J, Rank(0), ExitStatus::Code(0), 42);
    assert!(fx.log.iter().any(|e| matches!(e, Recorded::SetTimer(DRAIN_GRACE, Timer::DrainGrace { job: J, rank: Rank(0) }))));
    r.on_output_closed(&mut fx, J, Rank(0), Stream::Stdout);
    r.on_output_closed(&mut fx, J, Rank(0), Stream::Stderr);
    let ups = fx.take_up();
    assert!(matches!(&ups[..], [ToLauncher::Output { .. }]), "reaped, output through, PMI still open: {ups:?}");
    r.on_pmi_closed(&mut fx, c[0]);
    let ups = fx.take_up();
    assert!(
        matches!(&ups[..], [ToLauncher::Exited(RankExit { job: J, rank: Rank(0), pid, status: ExitStatus::Code(0), pmi: PmiProgress::Finalized, at: 42 })] if *pid == FIRST_PID as u32),
        "{ups:?}"
    );
    // The grace timer firing later changes nothing.
    r.on_timer(&mut fx, Timer::DrainGrace { job: J, rank: Rank(0) });
    assert!(fx.take_up().is_empty());
}

#[test]
fn an_exit_held_up_by_an_open_connection_is_reported_after_the_grace() {
    let (mut r, mut fx) = node();
    let c = launched(&mut r, &mut fx, 2);
    init(&mut r, &mut fx, &c[1..]);
    // A grandchild keeps rank 1's connection and stdout open.
    r.on_output_closed(&mut fx, J, Rank(1), Stream::Stderr);
    r.on_exited(&mut fx, J, Rank(1), ExitStatus::Signal(9), 7);
    assert!(exited(&mut fx).is_empty());
    r.on_timer(&mut fx, Timer::DrainGrace { job: J, rank: Rank(1) });
    assert_eq!(exited(&mut fx), vec![(Rank(1), ExitStatus::Signal(9), PmiProgress::Active)], "judged by what it said so far");
    // Output after the report still goes up; the late close reports nothing more.
    r.on_output(&mut fx, J, Rank(1), Stream::Stdout, b"late".to_vec());
    r.on_pmi_closed(&mut fx, c[1]);
    let ups = fx.take_up();
    assert!(matches!(&ups[..], [ToLauncher::Output { .. }]), "{ups:?}");
}

#[test]
fn signals_reach_the_groups_and_each_rank_and_forget_cleans_up() {
    let (mut r, mut fx) = node();
    let c = launched(&mut r, &mut fx, 2);
    r.on_message(&mut fx, ToDaemon::Signal { job: J, signal: libc::SIGTERM });
    let leader = FIRST_PID;
    let mut sent: Vec<String> = fx.take().iter().map(|e| format!("{e:?}")).collect();
    sent.sort();
    let mut expected = [
        Recorded::KillGroup { pgid: leader, signal: libc::SIGTERM },
        Recorded::KillGroup { pgid: leader + 1, signal: libc::SIGTERM },
        Recorded::KillProcess { pid: leader, signal: libc::SIGTERM },
        Recorded::KillProcess { pid: leader + 1, signal: libc::SIGTERM },
    ]
    .iter()
    .map(|e| format!("{e:?}"))
    .collect::<Vec<_>>();
    expected.sort();
    assert_eq!(sent, expected, "each rank's group once, and each rank (one may have left its group)");
    r.on_message(&mut fx, ToDaemon::Stdin { job: J, data: b"in".to_vec() });
    r.on_message(&mut fx, ToDaemon::Forget { job: J });
    let log = fx.take();
    assert!(matches!(log[0], Recorded::StdinWrite(J, _)));
    for pid in [leader, leader + 1] {
        assert!(log.iter().any(|e| matches!(e, Recorded::KillGroup { pgid, signal: libc::SIGKILL } if *pgid == pid)));
        assert!(log.iter().any(|e| matches!(e, Recorded::ReleaseLeader(p) if *p == pid)));
    }
    assert!(log.iter().any(|e| matches!(e, Recorded::StdinClose(J))));
    assert!(log.iter().any(|e| matches!(e, Recorded::RemoveShm { job: J, kvsname, killed: true } if kvsname == KVS)));
    let dropped: Vec<ConnId> = log.iter().filter_map(|e| if let Recorded::PmiDrop(c) = e { Some(*c) } else { None }).collect();
    assert_eq!(dropped, c);
    // The leader is released only after the group was killed.
    let kill = log.iter().position(|e| matches!(e, Recorded::KillGroup { .. })).unwrap();
    let release = log.iter().position(|e| matches!(e, Recorded::ReleaseLeader(_))).unwrap();
    assert!(kill < release);
    // Stdin for a forgotten job goes nowhere.
    r.on_message(&mut fx, ToDaemon::Stdin { job: J, data: b"more".to_vec() });
    assert!(fx.take().is_empty());
}

#[test]
fn a_spawn_goes_up_and_its_answer_comes_back_to_the_asking_connection() {
    let (mut r, mut fx) = node();
    let c = launched(&mut r, &mut fx, 2);
    init(&mut r, &mut fx, &c);
    let block = "mcmd=spawn\nnprocs=2\nexecname=./child\ntotspawns=1\nspawnssofar=1\nargcnt=0\npreput_num=0\ninfo_num=0\nendcmd\n";
    r.on_pmi_bytes(&mut fx, c[1], block.as_bytes());
    let ups = fx.take_up();
    let [ToLauncher::Spawn { request, job: J, rank: Rank(1), commands, .. }] = &ups[..] else { panic!("{ups:?}") };
    assert_eq!((commands[0].exe.as_str(), commands[0].maxprocs), ("./child", 2));
    r.on_message(&mut fx, ToDaemon::SpawnDone { request: *request, result: Ok("kvs_7_4".into()), errcodes: Vec::new() });
    assert_eq!(fx.take_written(c[1]), "cmd=spawn_result rc=0\n");
    assert!(fx.take_written(c[0]).is_empty());
    // An answer to no request in flight is dropped.
    r.on_message(&mut fx, ToDaemon::SpawnDone { request: *request, result: Ok("kvs_7_4".into()), errcodes: Vec::new() });
    assert!(fx.take().is_empty());
}

#[test]
fn a_rank_that_cannot_start_fails_the_launch_with_its_errno() {
    let (mut r, mut fx) = node();
    let err = StartError { errno: libc::ENOENT, message: "No such file or directory (os error 2)".into() };
    fx.fail_start.insert((J, Rank(2)), err);
    r.on_message(&mut fx, ToDaemon::Launch(launch(3, 3, PmiMode::Fd)));
    fx.settle(&mut r);
    let ups = fx.take_up();
    let started = ups.iter().filter(|m| matches!(m, ToLauncher::Started { .. })).count();
    assert_eq!(started, 2, "the others started (and the launcher kills them)");
    let Some(ToLauncher::LaunchFailed { job: J, rank: Rank(2), error, errno }) = ups.last() else { panic!("{ups:?}") };
    assert_eq!((*errno, error.as_str()), (libc::ENOENT, "cannot start '/bin/app': No such file or directory (os error 2)"));

    // A program that cannot be passed to exec never reaches a start.
    let (mut r, mut fx) = node();
    let mut bad = launch(1, 1, PmiMode::Fd);
    bad.apps[0].argv.push("nul\0byte".into());
    r.on_message(&mut fx, ToDaemon::Launch(bad));
    assert!(fx.starts().is_empty());
    let ups = fx.take_up();
    assert!(matches!(&ups[..], [ToLauncher::LaunchFailed { errno: libc::EINVAL, .. }]), "{ups:?}");

    // Nor does one whose PMI port cannot be opened.
    let (mut r, mut fx) = node();
    fx.fail_port = Some(libc::EADDRINUSE);
    r.on_message(&mut fx, ToDaemon::Launch(launch(1, 1, PmiMode::Port)));
    assert!(fx.starts().is_empty());
    let ups = fx.take_up();
    assert!(matches!(&ups[..], [ToLauncher::LaunchFailed { errno: libc::EADDRINUSE, .. }]), "{ups:?}");
}

#[test]
fn an_adoption_without_its_descriptor_is_refused() {
    // What an `Adopt` that crossed a process boundary looks like.
    let (mut r, mut fx) = node();
    let pmi = dpm_proto::link::InProcessFd::default();
    r.on_message(&mut fx, ToDaemon::Adopt { launch: launch(1, 1, PmiMode::Fd), rank: Rank(0), pid: 77, pmi });
    let ups = fx.take_up();
    assert!(matches!(&ups[..], [ToLauncher::LaunchFailed { errno: libc::EBADF, .. }]), "{ups:?}");
}

#[test]
fn an_adopted_singleton_is_served_and_watched() {
    let (mut r, mut fx) = node();
    let (theirs, _ours) = std::os::unix::net::UnixStream::pair().unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&theirs);
    let pmi = dpm_proto::link::InProcessFd::new(theirs.into());
    r.on_message(&mut fx, ToDaemon::Adopt { launch: launch(1, 1, PmiMode::Fd), rank: Rank(0), pid: 77, pmi });
    let log = fx.take();
    let [Recorded::TrackShm { job: J, .. }, Recorded::PmiServeFd { job: J, conn, fd: served }, Recorded::WatchPid { job: J, rank: Rank(0), pid: 77 }, Recorded::Up(ToLauncher::Started { pid: 77, .. })] =
        &log[..]
    else {
        panic!("{log:?}")
    };
    assert_eq!(*served, fd);
    assert!(talk(&mut r, &mut fx, *conn, "cmd=get_appnum\n").starts_with("cmd=appnum rc=0"));
    // No output pipes: the exit waits only for the connection.
    r.on_exited(&mut fx, J, Rank(0), ExitStatus::Code(0), 1);
    r.on_pmi_closed(&mut fx, *conn);
    assert_eq!(exited(&mut fx), vec![(Rank(0), ExitStatus::Code(0), PmiProgress::Active)]);
}

#[test]
fn the_reactor_takes_its_effects_as_a_trait_object() {
    // An in-process cluster may wire nodes through `dyn NodeEffects`.
    let (mut r, mut rec) = node();
    let fx: &mut dyn NodeEffects = &mut rec;
    r.on_message(fx, ToDaemon::Launch(launch(1, 1, PmiMode::Fd)));
    assert_eq!(rec.starts().len(), 1);
}

/// A spawned job's few processes here are started by the node's own thread
/// (they start among busy-polling ranks), and so is a job's only process
/// here; a job's start of more and a larger spawn by the spawner threads.
#[test]
fn a_small_spawn_is_started_by_the_nodes_own_thread() {
    let starters = |spawner: Option<&str>, n: u32| {
        let (mut r, mut fx) = node();
        let spec = LaunchJob { spawner: spawner.map(String::from), ..launch(n, n, PmiMode::Fd) };
        r.on_message(&mut fx, ToDaemon::Launch(spec));
        fx.starts().iter().map(|s| s.by).collect::<Vec<_>>()
    };
    let max = StartBy::NODE_THREAD_MAX as u32;
    assert_eq!(starters(Some("kvs_7_0"), 1), vec![StartBy::NodeThread]);
    assert_eq!(starters(Some("kvs_7_0"), max), vec![StartBy::NodeThread; max as usize]);
    assert_eq!(starters(Some("kvs_7_0"), max + 1), vec![StartBy::SpawnerThreads; max as usize + 1]);
    assert_eq!(starters(None, 1), vec![StartBy::NodeThread], "a job's one process here");
    assert_eq!(starters(None, 2), vec![StartBy::SpawnerThreads; 2]);
}

/// Warm spawn: a job launched awaiting its claim parks its ranks' get of the
/// parent's port (and tells the launcher its ranks wait); the claim brings
/// the preput and answers it.
#[test]
fn a_pooled_job_waits_for_its_claim_then_gets_the_port() {
    let (mut r, mut fx) = node();
    fx.pooled_nice = 19;
    let spec = LaunchJob { spawner: Some("kvs_7_0".into()), awaiting_claim: true, ..launch(1, 1, PmiMode::Fd) };
    r.on_message(&mut fx, ToDaemon::Launch(spec));
    fx.settle(&mut r);
    let conn = fx.starts()[0].pmi_conn.expect("PMI_FD mode");
    assert_eq!(fx.starts()[0].var("PMI_SPAWNED"), Some("1"), "launched as a spawned job");
    let pid = fx.starts()[0].result.as_ref().expect("started").pid;
    let nice = |fx: &RecordingEffects| -> Vec<(i32, u8)> {
        fx.log.iter().filter_map(|r| if let Recorded::SessionNice { pid, nice } = r { Some((*pid, *nice)) } else { None }).collect()
    };
    assert_eq!(nice(&fx), vec![(pid, 19)], "a pooled rank starts in the background (DPM_WARM_NICE=19)");
    fx.take();
    init(&mut r, &mut fx, &[conn]);
    let get = format!("cmd=get kvsname={KVS} key=PARENT_ROOT_PORT_NAME\n");
    assert_eq!(talk(&mut r, &mut fx, conn, &get), "", "parked until the claim");
    let up = fx.take_up();
    assert!(up.iter().any(|m| matches!(m, ToLauncher::AwaitingClaim { job: J })), "its one rank waits: the launcher hears so: {up:?}");
    r.on_message(&mut fx, ToDaemon::Claim { job: J, preput: vec![("PARENT_ROOT_PORT_NAME".into(), "port#1$".into())] });
    assert_eq!(nice(&fx), vec![(pid, 0)], "claimed: out of the background");
    assert_eq!(fx.take_written(conn), "cmd=get_result rc=0 value=port#1$\n");
    assert!(matches!(fx.take_up()[..], [ToLauncher::Claimed { job: J, alive: true, ready: true }]), "its one rank waited for it");
}

/// A job launched as any other (a cold spawn's) never leaves the foreground.
#[test]
fn a_cold_job_is_never_put_in_the_background() {
    let (mut r, mut fx) = node();
    fx.pooled_nice = 19;
    let spec = LaunchJob { spawner: Some("kvs_7_0".into()), ..launch(2, 2, PmiMode::Fd) };
    r.on_message(&mut fx, ToDaemon::Launch(spec));
    fx.settle(&mut r);
    assert_eq!(fx.starts().len(), 2);
    assert!(!fx.log.iter().any(|r| matches!(r, Recorded::SessionNice { .. })), "{:?}", fx.log.len());
}

/// A claim that reaches a pooled job with a rank already ended — reported,
/// read, or known only to the kernel — is not delivered, and says so.
#[test]
fn a_claim_of_a_pooled_job_with_an_ended_rank_fails() {
    let port = || vec![("PARENT_ROOT_PORT_NAME".to_string(), "port#1$".to_string())];
    for how in ["kernel", "read", "reported"] {
        let (mut r, mut fx) = node();
        let spec = LaunchJob { spawner: Some("kvs_7_0".into()), awaiting_claim: true, ..launch(2, 2, PmiMode::Fd) };
        r.on_message(&mut fx, ToDaemon::Launch(spec));
        fx.settle(&mut r);
        let conns: Vec<ConnId> = fx.starts().iter().map(|s| s.pmi_conn.expect("PMI_FD mode")).collect();
        let pid = fx.starts()[1].result.as_ref().expect("started").pid;
        init(&mut r, &mut fx, &conns);
        let get = format!("cmd=get kvsname={KVS} key=PARENT_ROOT_PORT_NAME\n");
        assert_eq!(talk(&mut r, &mut fx, conns[0], &get), "", "parked until the claim");
        match how {
            "kernel" => drop(fx.exited.insert(pid)),
            "read" => r.on_exited(&mut fx, J, Rank(1), ExitStatus::Code(3), 1),
            _ => {
                r.on_exited(&mut fx, J, Rank(1), ExitStatus::Code(3), 1);
                r.on_pmi_closed(&mut fx, conns[1]);
                r.on_output_closed(&mut fx, J, Rank(1), Stream::Stdout);
                r.on_output_closed(&mut fx, J, Rank(1), Stream::Stderr);
                assert_eq!(exited(&mut fx), vec![(Rank(1), ExitStatus::Code(3), PmiProgress::Active)], "{how}");
            }
        }
        fx.take();
        r.on_message(&mut fx, ToDaemon::Claim { job: J, preput: port() });
        assert_eq!(fx.take_written(conns[0]), "", "{how}: not delivered");
        assert!(matches!(fx.take_up()[..], [ToLauncher::Claimed { job: J, alive: false, ready: false }]), "{how}");
    }
}

#[test]
fn starts_are_answered_later_and_nothing_is_reported_before() {
    let (mut r, mut fx) = node();
    r.on_message(&mut fx, ToDaemon::Launch(launch(3, 3, PmiMode::Fd)));
    assert!(fx.take_up().is_empty(), "no Started before a result");
    // All asked at once, each founding its own session and group.
    assert_eq!(fx.starts().iter().map(|s| (s.rank, s.pgid)).collect::<Vec<_>>(), vec![(Rank(0), 0), (Rank(1), 0), (Rank(2), 0)]);
    // Results come back in any order, each reported as it comes.
    let mut rest = std::mem::take(&mut fx.started);
    rest.reverse();
    for (job, rank, result) in rest {
        r.on_started(&mut fx, job, rank, result);
    }
    let ranks: Vec<Rank> = fx.take_up().into_iter().map(|m| if let ToLauncher::Started { rank, .. } = m { rank } else { panic!("{m:?}") }).collect();
    assert_eq!(ranks, vec![Rank(2), Rank(1), Rank(0)]);
}

#[test]
fn a_rank_that_cannot_start_fails_the_launch_once_every_start_is_back() {
    let (mut r, mut fx) = node();
    fx.fail_start.insert((J, Rank(1)), StartError { errno: libc::EACCES, message: "Permission denied".into() });
    r.on_message(&mut fx, ToDaemon::Launch(launch(3, 3, PmiMode::Fd)));
    fx.settle(&mut r);
    assert_eq!(fx.starts().len(), 3);
    let ups = fx.take_up();
    let failed: Vec<&ToLauncher> = ups.iter().filter(|m| matches!(m, ToLauncher::LaunchFailed { .. })).collect();
    assert!(matches!(&failed[..], [ToLauncher::LaunchFailed { rank: Rank(1), errno: libc::EACCES, .. }]), "{ups:?}");
    assert!(matches!(ups.last(), Some(ToLauncher::LaunchFailed { .. })), "reported after the others' starts: {ups:?}");
}

#[test]
fn a_process_started_after_its_job_ended_is_killed_and_released() {
    let (mut r, mut fx) = node();
    r.on_message(&mut fx, ToDaemon::Launch(launch(2, 2, PmiMode::Fd)));
    // The job ends (the run failed elsewhere) before the founder's result.
    r.on_message(&mut fx, ToDaemon::Forget { job: J });
    fx.take();
    fx.settle(&mut r);
    let log = fx.take();
    let pid = FIRST_PID;
    assert!(log.iter().any(|e| matches!(e, Recorded::KillGroup { pgid, signal: libc::SIGKILL } if *pgid == pid)), "{log:?}");
    assert!(log.iter().any(|e| matches!(e, Recorded::KillProcess { pid: p, signal: libc::SIGKILL } if *p == pid)), "{log:?}");
    assert!(log.iter().any(|e| matches!(e, Recorded::PmiDrop(_))), "{log:?}");
    assert!(!log.iter().any(|e| matches!(e, Recorded::Up(_) | Recorded::Start(_))), "nothing reported, nothing more started: {log:?}");
    // The leader stays a zombie until its exit is seen; then it is released.
    r.on_exited(&mut fx, J, Rank(0), ExitStatus::Signal(libc::SIGKILL), 1);
    assert!(matches!(&fx.take()[..], [Recorded::ReleaseLeader(p)] if *p == pid));
}

#[test]
fn stdin_that_comes_while_its_reader_starts_is_passed_on_once_it_has() {
    let (mut r, mut fx) = node();
    r.on_message(&mut fx, ToDaemon::Launch(launch(2, 2, PmiMode::Fd)));
    r.on_message(&mut fx, ToDaemon::Stdin { job: J, data: b"early".to_vec() });
    r.on_message(&mut fx, ToDaemon::Stdin { job: J, data: Vec::new() });
    assert!(!fx.log.iter().any(|e| matches!(e, Recorded::StdinWrite(..) | Recorded::StdinClose(_))), "nothing to write to yet");
    fx.settle(&mut r);
    let stdin: Vec<&Recorded> = fx.log.iter().filter(|e| matches!(e, Recorded::StdinWrite(..) | Recorded::StdinClose(_))).collect();
    assert!(matches!(&stdin[..], [Recorded::StdinWrite(J, d), Recorded::StdinClose(J)] if d == b"early"), "{stdin:?}");
}

#[test]
fn a_signal_sent_while_ranks_start_reaches_those_that_start_after() {
    let (mut r, mut fx) = node();
    r.on_message(&mut fx, ToDaemon::Launch(launch(2, 2, PmiMode::Fd)));
    r.on_message(&mut fx, ToDaemon::Signal { job: J, signal: libc::SIGINT });
    fx.settle(&mut r);
    let killed: Vec<i32> = fx.log.iter().filter_map(|e| if let Recorded::KillProcess { pid, signal: libc::SIGINT } = e { Some(*pid) } else { None }).collect();
    assert_eq!(killed, vec![FIRST_PID, FIRST_PID + 1]);
}

/// A two-rank job whose ranks end with `ends` (`None`: still running),
/// then forgotten: whether its end asked for UCX's orphans to be looked for.
fn ucx_look_at_end(ends: [Option<ExitStatus>; 2]) -> Vec<bool> {
    let (mut r, mut fx) = node();
    launched(&mut r, &mut fx, 2);
    for (i, status) in ends.iter().enumerate() {
        let rank = Rank(i as u32);
        if let Some(status) = *status {
            r.on_exited(&mut fx, J, rank, status, 1);
            r.on_timer(&mut fx, Timer::DrainGrace { job: J, rank });
        }
    }
    assert_eq!(exited(&mut fx).len(), ends.iter().flatten().count());
    r.on_message(&mut fx, ToDaemon::Forget { job: J });
    fx.take().into_iter().filter_map(|e| if let Recorded::RemoveShm { job: J, killed, .. } = e { Some(killed) } else { None }).collect()
}

#[test]
fn only_a_job_with_a_killed_rank_has_ucx_orphans_looked_for_at_its_end() {
    // Every rank exited by itself (an error code too): its MPICH segments
    // go, no /proc scan (in a spawn loop the scan found the next child's
    // segments mid-creation and stalled the reactor).
    assert_eq!(ucx_look_at_end([Some(ExitStatus::Code(0)), Some(ExitStatus::Code(3))]), vec![false]);
    // A rank ended by a signal.
    assert_eq!(ucx_look_at_end([Some(ExitStatus::Code(0)), Some(ExitStatus::Signal(libc::SIGINT))]), vec![true]);
    // A rank still running at the end is killed by it.
    assert_eq!(ucx_look_at_end([Some(ExitStatus::Code(0)), None]), vec![true]);
    // A rank still starting, likewise.
    let (mut r, mut fx) = node();
    r.on_message(&mut fx, ToDaemon::Launch(launch(1, 1, PmiMode::Fd)));
    r.on_message(&mut fx, ToDaemon::Forget { job: J });
    assert!(fx.log.iter().any(|e| matches!(e, Recorded::RemoveShm { job: J, killed: true, .. })), "{:?}", fx.log);
}
