//! Nothing left behind when dpm itself dies (issue 10, defect 11): shared
//! memory of MPICH and UCX, ranks, and dpm's own cleaner; for an Open MPI
//! job, the PMIx server's directory and the job's shared-memory directory.
//!
//! Before the cleaner, on this machine: `SIGKILL` of a one-node `dpm run`
//! left its ranks' `mpich_shm_<id>_0` in /dev/shm every time (the daemon that
//! removes it ran inside the killed launcher), and 8 SIGINTs at random
//! moments of a `spawn_loop` under UCX's default posix transport left 4
//! `ucx_shm_posix_*` files (children killed between UCX's `shm_open` and its
//! unlink).

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use common::{marked_procs, program, repo_root, unique, Dpm, Running};

/// How long the cleaner may take once dpm is gone (it waits for the killed
/// ranks' groups to empty first): a hang guard, generous for a loaded
/// machine; each wait ends as soon as nothing is left.
const CLEANED_WITHIN: Duration = Duration::from_secs(30);

fn venv_python() -> String {
    let python = repo_root().join(".venv/bin/python");
    assert!(python.is_file(), "{} is missing: run ./scripts/setup.sh (it creates the venv with mpi4py)", python.display());
    python.to_string_lossy().into_owned()
}

/// Each rank joins an allreduce (MPICH's node shared memory is in use), then
/// writes the `/dev/shm` segments it maps to `<dir>/<world rank>` and sleeps.
const MAPPED_THEN_SLEEP: &str = "\
import os, sys, time
from mpi4py import MPI
c = MPI.COMM_WORLD
c.allreduce(1)
names = sorted({l.split('/dev/shm/')[1].split()[0] for l in open('/proc/self/maps') if '/dev/shm/mpich_' in l})
tmp = os.path.join(sys.argv[1], 'tmp%d' % c.Get_rank())
open(tmp, 'w').write(' '.join(names))
os.rename(tmp, os.path.join(sys.argv[1], str(c.Get_rank())))
time.sleep(120)
";

/// A directory under the system temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let dir = std::env::temp_dir().join(unique("dpm-leftovers"));
        fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Wait until each of `n` ranks wrote its ready file; the segment names they map.
fn segments_when_ready(run: &mut Running, dir: &Path, n: usize) -> BTreeSet<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ready: Vec<String> = (0..n).filter_map(|r| fs::read_to_string(dir.join(r.to_string())).ok()).collect();
        if ready.len() == n {
            return ready.iter().flat_map(|names| names.split_whitespace().map(str::to_string)).collect();
        }
        assert!(Instant::now() < deadline, "only {} of {n} ranks got through MPI_Init and an allreduce in 30 s", ready.len());
        run.wait_for_procs(n);
        thread::sleep(Duration::from_millis(20));
    }
}

/// dpm's cleaners (`dpm clean-up-after <pid>`) of process `pid`.
fn cleaners_of(pid: u32) -> Vec<u32> {
    let needle = format!("clean-up-after\0{pid}\0");
    fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c.windows(needle.len()).any(|w| w == needle.as_bytes())))
        .collect()
}

/// The cleaner of node process `node` was forked (no exec of the binary):
/// that process's own child, named for `top`, with no descriptor but its
/// notes' pipe, /dev/null and stderr.
fn assert_forked_cleaner(node: u32) {
    let cleaners = cleaners_of(node);
    assert_eq!(cleaners.len(), 1, "process {node} runs one cleaner: {cleaners:?}");
    let cleaner = cleaners[0];
    let stat = fs::read_to_string(format!("/proc/{cleaner}/stat")).unwrap_or_default();
    let ppid = stat.rsplit(')').next().and_then(|s| s.split_whitespace().nth(1)).and_then(|p| p.parse::<u32>().ok());
    assert_eq!(ppid, Some(node), "the cleaner {cleaner} is not process {node}'s child: {stat}");
    let comm = fs::read_to_string(format!("/proc/{cleaner}/comm")).unwrap_or_default();
    assert_eq!(comm.trim(), "dpm-cleaner", "the cleaner {cleaner}'s name");
    let fds: BTreeSet<String> = fs::read_dir(format!("/proc/{cleaner}/fd")).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(fds, BTreeSet::from(["0".into(), "1".into(), "2".into()]), "the cleaner {cleaner}'s descriptors");
    let null = fs::read_link(format!("/proc/{cleaner}/fd/1")).unwrap();
    assert_eq!(null, Path::new("/dev/null"), "the cleaner {cleaner}'s stdout");
}

/// Poll until `check` returns nothing, for up to `within`; what is left then.
fn left_after<T>(within: Duration, mut check: impl FnMut() -> Vec<T>) -> Vec<T> {
    let deadline = Instant::now() + within;
    loop {
        let left = check();
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// `SIGKILL` dpm once its `n` ranks map MPICH's node segments; then nothing
/// of the run may be left: segments, ranks, cleaners.
fn sigkill_leaves_nothing(args: &[&str], n: usize) {
    let dir = TempDir::new();
    let python = venv_python();
    let dir_arg = dir.0.to_string_lossy().into_owned();
    let n_arg = n.to_string();
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["-n", &n_arg, &python, "-c", MAPPED_THEN_SLEEP, &dir_arg]);
    let mut run = Dpm::run(all).spawn();
    let segments = segments_when_ready(&mut run, &dir.0, n);
    assert!(!segments.is_empty(), "the ranks map no MPICH segment: nothing to test");
    for s in &segments {
        assert!(Path::new("/dev/shm").join(s).exists(), "{s} is not in /dev/shm while the job runs");
    }
    let pid = run.pid();
    let marker = run.marker().to_string();
    // The launcher runs one with its in-process node; each `dpm daemon` its own.
    let nodes: Vec<u32> = std::iter::once(pid).chain((0..n).filter_map(|node| common::daemon_of(pid, node))).collect();
    let cleaners_of_run = || nodes.iter().flat_map(|&p| cleaners_of(p)).collect::<Vec<u32>>();
    assert!(!cleaners_of_run().is_empty(), "no process of dpm {pid} runs a cleaner");
    // The launcher and each `dpm daemon` fork theirs.
    for &node in &nodes {
        assert_forked_cleaner(node);
    }
    run.signal("KILL");
    let out = run.wait_unchecked();
    assert_eq!(out.status.code(), None, "dpm was not killed\n{}", out.describe());
    let left = left_after(CLEANED_WITHIN, || segments.iter().filter(|s| Path::new("/dev/shm").join(s).exists()).cloned().collect());
    assert!(left.is_empty(), "segments of the killed run left in /dev/shm: {left:?}");
    let ranks = left_after(CLEANED_WITHIN, || marked_procs(&marker));
    common::kill_marked(&marker);
    assert!(ranks.is_empty(), "ranks of the killed run left: {ranks:?}");
    let cleaners = left_after(CLEANED_WITHIN, cleaners_of_run);
    assert!(cleaners.is_empty(), "cleaners of the killed dpm {pid}'s processes {nodes:?} still run: {cleaners:?}");
}

#[test]
fn sigkill_of_a_one_node_run_leaves_no_segment_rank_or_cleaner() {
    sigkill_leaves_nothing(&[], 2);
}

#[test]
fn sigkill_of_a_two_node_run_leaves_no_segment_rank_or_cleaner() {
    sigkill_leaves_nothing(&["--virtual-nodes", "2"], 4);
}

/// The PMIx server's directory and the jobs' shared-memory directories of
/// node process `pid` (node::pmix_host names them).
fn pmix_dirs(pid: u32) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let uid = fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(0);
    let prefix = format!("dpm.{uid}.{pid}.");
    let shm = fs::read_dir("/dev/shm").into_iter().flatten().flatten().map(|e| e.path());
    let mut dirs: Vec<PathBuf> = shm.filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&prefix))).collect();
    let server = std::env::temp_dir().join(format!("dpm-pmix.{pid}"));
    if server.exists() {
        dirs.push(server);
    }
    dirs
}

/// `SIGKILL` dpm while an Open MPI job (PMIx) runs past `MPI_Init`: its
/// nodes' PMIx server directories and shared-memory directories go too.
fn sigkill_of_an_open_mpi_run_leaves_nothing(args: &[&str], n: usize) {
    let waitgo = repo_root().join("tests/programs/bin/ompi/waitgo");
    assert!(waitgo.is_file(), "{} is missing: run ./scripts/setup.sh --tests (it builds the Open MPI programs)", waitgo.display());
    let dir = TempDir::new();
    let (dir_arg, n_arg, waitgo) = (dir.0.to_string_lossy().into_owned(), n.to_string(), waitgo.to_string_lossy().into_owned());
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["-n", &n_arg, &waitgo, &dir_arg, "0"]);
    let mut run = Dpm::run(all).spawn();
    let deadline = Instant::now() + Duration::from_secs(30);
    while (0..n).any(|r| !dir.0.join(format!("env{r}")).exists()) {
        assert!(Instant::now() < deadline, "the ranks did not get through MPI_Init in 30 s");
        run.wait_for_procs(n);
        thread::sleep(Duration::from_millis(20));
    }
    let pid = run.pid();
    let marker = run.marker().to_string();
    let nodes: Vec<u32> = std::iter::once(pid).chain((0..n).filter_map(|node| common::daemon_of(pid, node))).collect();
    let dirs = || nodes.iter().flat_map(|&p| pmix_dirs(p)).collect::<Vec<PathBuf>>();
    let before = dirs();
    assert!(before.iter().any(|d| d.starts_with(std::env::temp_dir())), "no PMIx server directory while the job runs: {before:?}");
    assert!(before.iter().any(|d| d.starts_with("/dev/shm")), "no shared-memory directory while the job runs: {before:?}");
    run.signal("KILL");
    let out = run.wait_unchecked();
    assert_eq!(out.status.code(), None, "dpm was not killed\n{}", out.describe());
    let left = left_after(CLEANED_WITHIN, dirs);
    let ranks = left_after(CLEANED_WITHIN, || marked_procs(&marker));
    common::kill_marked(&marker);
    assert!(left.is_empty(), "PMIx directories of the killed run left: {left:?}");
    assert!(ranks.is_empty(), "ranks of the killed run left: {ranks:?}");
}

#[test]
fn sigkill_of_an_open_mpi_run_leaves_no_pmix_directory() {
    sigkill_of_an_open_mpi_run_leaves_nothing(&[], 2);
}

#[test]
fn sigkill_of_a_two_node_open_mpi_run_leaves_no_pmix_directory() {
    sigkill_of_an_open_mpi_run_leaves_nothing(&["--virtual-nodes", "2"], 2);
}

#[test]
fn a_normal_end_ends_the_cleaner_with_dpm() {
    // The ranks end once the test has seen the cleaner (a file appears), not
    // after a fixed time a loaded machine could spend before the test looks.
    let dir = TempDir::new();
    let go = dir.0.join("go");
    let wait = format!("while [ ! -e '{}' ]; do sleep 0.05; done", go.display());
    let run = Dpm::run(["-n", "2", "/bin/sh", "-c", &wait]).spawn();
    let pid = run.pid();
    let deadline = Instant::now() + Duration::from_secs(60);
    while cleaners_of(pid).is_empty() {
        assert!(Instant::now() < deadline, "dpm {pid} started no cleaner");
        thread::sleep(Duration::from_millis(10));
    }
    assert_forked_cleaner(pid);
    fs::write(&go, b"").expect("create the go file");
    run.wait().assert_success();
    // With every job ended it has nothing to do: it exits on the pipe's end.
    let left = left_after(common::LEFTOVER_GRACE, || cleaners_of(pid));
    assert!(left.is_empty(), "the cleaner {left:?} outlived dpm {pid}");
}

/// This user's `ucx_shm_posix_*` files in /dev/shm with their modification times.
fn ucx_files() -> Vec<(String, SystemTime)> {
    use std::os::unix::fs::MetadataExt;
    let uid = fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(0);
    fs::read_dir("/dev/shm")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("ucx_shm_posix_"))
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            let modified = m.modified().ok()?;
            (m.uid() == uid).then(|| (e.file_name().to_string_lossy().into_owned(), modified))
        })
        .collect()
}

/// Whether any process holds `/dev/shm/<name>` open.
fn held_open(name: &str) -> bool {
    let path = Path::new("/dev/shm").join(name);
    fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .any(|p| fs::read_dir(p.path().join("fd")).into_iter().flatten().flatten().any(|fd| fs::read_link(fd.path()).is_ok_and(|t| t == path)))
}

/// SIGINT at random moments of a spawn loop under UCX (MPICH's default
/// netmod). `UCX_MM_SEG_SIZE=1m` makes each process's posix segments 130 MB,
/// so the window between UCX's create and unlink (it writes the whole
/// segment first) is wide enough to be hit by most runs.
#[test]
fn sigint_during_spawns_leaves_no_ucx_segment() {
    let before: BTreeSet<String> = ucx_files().into_iter().map(|(n, _)| n).collect();
    let started = SystemTime::now();
    let prog = program("spawn_loop");
    let mut seed = std::process::id() as u64;
    for _ in 0..6 {
        let mut run = Dpm::run(["-genv", "UCX_MM_SEG_SIZE", "1m", "-n", "1", &prog, "1000"]).spawn();
        run.wait_for_procs(1);
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        thread::sleep(Duration::from_millis(200 + (seed >> 33) % 800));
        run.signal("INT");
        let out = run.wait();
        out.assert_code(130);
        out.assert_stdout_lacks("spawn_loop ok");
    }
    let ended = SystemTime::now();
    // New files of this user written while the runs went, that nobody holds
    // (another user's, or a live job's, are not this test's).
    let left: Vec<String> =
        ucx_files().into_iter().filter(|(n, t)| !before.contains(n) && *t >= started && *t <= ended && !held_open(n)).map(|(n, _)| n).collect();
    for n in &left {
        let _ = fs::remove_file(Path::new("/dev/shm").join(n));
    }
    assert!(left.is_empty(), "UCX segments left by the interrupted spawns: {left:?}");
}
