//! A node out of file descriptors says which limit ran out and how to raise
//! it (it used to say "No buffer space available": the kernel truncates the
//! fds a spawner thread passes back). Its own test binary: it lowers the
//! process's `RLIMIT_NOFILE`.

use dpm_daemon::DaemonConfig;
use dpm_kvs::{JobId, KvsDesign, NodeId, Rank};
use dpm_proto::link::Down;
use dpm_proto::{AppSpec, LaunchJob, PmiMode, ProcSpec, ToDaemon, ToLauncher};
use nix::sys::resource::{getrlimit, setrlimit, Resource};

#[test]
fn running_out_of_file_descriptors_names_the_limit_and_ulimit() {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    // As `ulimit -n 64` would; 40 ranks need four each.
    setrlimit(Resource::RLIMIT_NOFILE, 64, hard).unwrap();
    let n = 40;
    let launch = LaunchJob {
        job: JobId(0),
        kvsname: "kvs_fd_limit".into(),
        size: n,
        appnums: vec![0; n as usize],
        universe_size: n as i64,
        process_mapping: String::new(),
        spawner: None,
        preput: vec![],
        pmi_mode: PmiMode::Fd,
        stdin_rank: None,
        apps: vec![AppSpec { exe: "/bin/sleep".into(), argv: vec!["sleep".into(), "5".into()], env: vec![], wdir: "/".into(), node_env: false }],
        procs: (0..n).map(|r| ProcSpec { rank: Rank(r), app: 0 }).collect(),
        kvs: KvsDesign::Allgather,
        node_of: vec![NodeId(0); n as usize],
        awaiting_claim: false,
        binding: Default::default(),
        pmix_watch: false,
        hold: false,
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let failure = tokio::task::LocalSet::new().block_on(&rt, async move {
        let (down_tx, down_rx) = tokio::sync::mpsc::unbounded_channel();
        let (up_tx, mut up_rx) = tokio::sync::mpsc::unbounded_channel();
        let daemon = tokio::task::spawn_local(dpm_daemon::run(DaemonConfig { host: "here".into(), trace: false }, down_rx, up_tx));
        down_tx.send(Down::To { node: NodeId(0), msg: ToDaemon::Launch(launch) }).unwrap();
        let mut failure = None;
        while let Some(msg) = up_rx.recv().await {
            if let ToLauncher::LaunchFailed { error, errno, .. } = msg {
                failure = Some((error, errno));
                break;
            }
        }
        // The ranks that did start go with the job.
        down_tx.send(Down::To { node: NodeId(0), msg: ToDaemon::Forget { job: JobId(0) } }).unwrap();
        down_tx.send(Down::Shutdown).unwrap();
        daemon.await.unwrap();
        failure
    });
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();
    let (error, errno) = failure.expect("40 ranks cannot start with 64 file descriptors");
    assert_eq!(errno, libc::EMFILE, "{error}");
    assert!(error.contains("ran out of file descriptors (RLIMIT_NOFILE: soft 64,"), "{error}");
    assert!(error.contains("`ulimit -n`"), "{error}");
}
