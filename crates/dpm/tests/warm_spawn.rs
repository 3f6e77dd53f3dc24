//! Warm spawn (`--warm-spawn`, `DPM_WARM_SPAWN`, `dpm boot --warm-spawn`,
//! info key `dpm_warm`) against the real MPICH wheel and mpi4py: spawn loops
//! whose iterations after the first claim a pooled job (seen in the `-v`
//! lines), with the children checking rank, size, appnum, argv, wdir, env,
//! the parent intercommunicator and messages both ways; spawn_multiple; a
//! pooled job that crashes before its claim; output of unclaimed jobs never
//! shown; nothing left behind by a full pool; `--no-oversubscribe` on a full
//! machine; `--virtual-nodes 2`; `dpm boot`; `MPIPoolExecutor`.
//!
//! The pool uses free slots only, and this machine may have two CPUs: the
//! runs give the node more slots (`-hosts localhost:8`).

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{dpm_bin, repo_root, unique, Dpm, Output};

/// Slots enough that a pool never waits for an ended job's slots (how pools
/// share slots is the run reactor's unit tests' business): the loops here
/// check claims, and a child's exit can lag its parent's next spawn.
const HOSTS: [&str; 2] = ["-hosts", "localhost:32"];

fn venv_python() -> String {
    let python = repo_root().join(".venv/bin/python");
    assert!(python.is_file(), "{} is missing: run ./scripts/setup.sh (it creates the venv with mpi4py)", python.display());
    python.to_string_lossy().into_owned()
}

/// The spawn loop: `loop.py parent ITERS K single|other|multi [CRASH_FLAG]`
/// (`other`: as `single`, with another last argument).
/// Children print `PRE-INIT` on stderr before `MPI_Init` (held until their
/// claim, and delivered whenever that is: on stderr it cannot split the
/// parent's lines on stdout), and
/// crash there (exit 3) once if the flag file exists (taking it: renamed
/// with the child's pid): the parent creates it
/// after its first iteration (a miss, which starts nothing but its own
/// child), so the first job to start afterwards — the pool dpm fills once
/// that child has ended and the parent lives on — crashes; the parent waits
/// until that child is gone (or a zombie) before its second spawn, so a
/// claim of the crashed job fails and is made again.
/// The parent leaves 50 ms between spawns for the pool to refill.
const LOOP: &str = r#"
import os, sys
if sys.argv[1] == "child":
    sys.stderr.write("PRE-INIT %d\n" % os.getpid())  # one write: a whole line
    flag = os.environ.get("WARM_CRASH_FLAG", "")
    if flag:
        try:
            os.rename(flag, flag + ".%d" % os.getpid())
            os._exit(3)
        except FileNotFoundError:
            pass
    from mpi4py import MPI
    parent = MPI.Comm.Get_parent()
    world = MPI.COMM_WORLD
    it = parent.bcast(None, root=0)
    parent.send(it + 1000, dest=0, tag=world.rank)
    report = (world.rank, world.size, world.Get_attr(MPI.APPNUM), sys.argv[2:], os.getcwd(),
              os.environ.get("WARM_X"), parent.Get_remote_size(), it)
    parent.gather(report, root=0)
    parent.Disconnect()
    sys.exit(0)

import time
from mpi4py import MPI
iters, k, mode = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
crash_flag = sys.argv[5] if len(sys.argv) > 5 else ""
wdir = os.path.realpath(os.environ["WARM_WDIR"])
me = os.path.abspath(__file__)
info = MPI.Info.Create()
info.Set("wdir", wdir)
info.Set("env", "WARM_X=42\nWARM_CRASH_FLAG=" + crash_flag)
if os.environ.get("WARM_INFO"):
    info.Set("dpm_warm", os.environ["WARM_INFO"])
for i in range(iters):
    if i == 1 and crash_flag:
        # Until the child that took the flag (renamed with its pid) is gone
        # or a zombie: a claim reaching it is then refused.
        import glob
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            taken = glob.glob(crash_flag + ".*")
            if taken:
                pid = taken[0].rsplit(".", 1)[1]
                try:
                    with open("/proc/%s/stat" % pid) as f:
                        if f.read().rsplit(")", 1)[1].split()[0] in "ZX":
                            break
                except (FileNotFoundError, ProcessLookupError):  # gone, also between open and read
                    break
            time.sleep(0.01)
        else:
            print("FAIL: no child crashed", flush=True)
    last = "w" if mode == "other" else "z"
    if mode == "multi":
        inter = MPI.COMM_SELF.Spawn_multiple([sys.executable, sys.executable],
                                             [[me, "child", "a"], [me, "child", "b c"]], [1, k], [info, info])
        expect = [(0, ["a"])] + [(1, ["b c"])] * k
    else:
        inter = MPI.COMM_SELF.Spawn(sys.executable, [me, "child", "x y", last], maxprocs=k, info=info)
        expect = [(0, ["x y", last])] * k
    n = len(expect)
    inter.bcast(i, root=MPI.ROOT)
    back = sorted(inter.recv(source=r, tag=r) for r in range(n))
    reports = inter.gather(None, root=MPI.ROOT)
    inter.Disconnect()
    ok = back == [i + 1000] * n
    for r, rep in enumerate(reports):
        want = (r, n, expect[r][0], expect[r][1], wdir, "42", 1, i)
        if rep != want:
            ok = False
            print("FAIL iteration", i, "child", r, "reported", rep, "wanted", want, flush=True)
    print("iteration", i, "ok" if ok else "FAIL", flush=True)
    if i == 0 and crash_flag:
        open(crash_flag, "w").close()
    # Idle time between spawns, which warm spawn is for: the pool refills
    # REFILL_DELAY (50 ms) after a claim, and a first miss's shape is pooled
    # LEARN_DELAY (20 ms) after its job's end: the second spawn may miss too.
    time.sleep(0.05)
print("loop done", flush=True)
"#;

/// A test directory with the loop script and a working directory for the children.
struct Scene {
    dir: PathBuf,
}

impl Scene {
    fn new() -> Scene {
        let dir = std::env::temp_dir().join(unique("dpm-warm"));
        fs::create_dir_all(dir.join("wd")).unwrap();
        fs::write(dir.join("loop.py"), LOOP).unwrap();
        Scene { dir }
    }

    fn script(&self) -> String {
        self.dir.join("loop.py").display().to_string()
    }

    fn wdir(&self) -> String {
        self.dir.join("wd").display().to_string()
    }

    /// `dpm run OPTS -n 1 python loop.py parent ITERS K MODE [FLAG]`.
    fn run(&self, opts: &[&str], iters: u32, k: u32, mode: &str, flag: Option<&Path>) -> Output {
        let python = venv_python();
        let (script, iters, k) = (self.script(), iters.to_string(), k.to_string());
        let mut args: Vec<String> = opts.iter().map(|s| s.to_string()).collect();
        args.extend(["-n", "1", &python, &script, "parent", &iters, &k, mode].map(String::from));
        args.extend(flag.map(|f| f.display().to_string()));
        Dpm::run(args).env("WARM_WDIR", &self.wdir()).watchdog(Duration::from_secs(120)).output()
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// dpm's `warm spawn:` lines of one kind (`claimed`, `miss`, `refilled`, `dropped`).
fn warm_lines(out: &Output, kind: &str) -> Vec<String> {
    let prefix = format!("dpm: warm spawn: {kind} ");
    out.err_lines().into_iter().filter(|l| l.starts_with(&prefix)).collect()
}

/// Exit 0, every iteration ok, no FAIL line.
fn assert_loop_ok(out: &Output, iters: u32) {
    out.assert_success();
    let lines = out.lines();
    assert!(!lines.iter().any(|l| l.contains("FAIL")), "a child reported a failure\n{}", out.describe());
    for i in 0..iters {
        assert!(lines.contains(&format!("iteration {i} ok")), "iteration {i} did not report ok\n{}", out.describe());
    }
    out.assert_stdout_contains("loop done");
}

/// Every iteration after the first two claimed a pooled job (the first
/// misses; the second claims the pool filled after the first's end, or —
/// the parent was quicker than `LEARN_DELAY` — misses and fills it); the
/// summary says so.
fn assert_warm(out: &Output, iters: u32) {
    let claimed = warm_lines(out, "claimed").len();
    let missed = warm_lines(out, "miss for").len();
    assert!((1..=2).contains(&missed) && claimed + missed == iters as usize, "{claimed} claims, {missed} misses\n{}", out.describe());
    let refilled = warm_lines(out, "refilled").len();
    let summary = format!("dpm: warm spawn: {claimed} claimed, {missed} missed, {refilled} refilled");
    out.assert_stderr_contains(&summary);
}

/// The kvsnames of the pooled jobs dpm started (`refilled job N (KVS) for …`).
fn pooled_kvsnames(out: &Output) -> Vec<String> {
    warm_lines(out, "refilled").iter().filter_map(|l| l.split_once(" (").and_then(|(_, r)| r.split_once(')')).map(|(k, _)| k.to_string())).collect()
}

/// MPICH's shared-memory segments of these kvsnames still in /dev/shm.
fn shm_left(kvsnames: &[String]) -> Vec<String> {
    let prefixes: Vec<String> = kvsnames
        .iter()
        .flat_map(|k| {
            let id = k.bytes().fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193));
            [format!("mpich_shm_{id:x}_"), format!("mpich_vci_{id:x}_")]
        })
        .collect();
    fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| prefixes.iter().any(|p| n.starts_with(p)))
        .collect()
}

#[test]
fn a_spawn_loop_claims_pooled_jobs_after_its_first_spawn() {
    let scene = Scene::new();
    let out = scene.run(&["-v", "--warm-spawn", HOSTS[0], HOSTS[1]], 4, 2, "single", None);
    assert_loop_ok(&out, 4);
    assert_warm(&out, 4);
}

/// A loop whose spawns come faster than a pool of one is refilled (a
/// Python child needs far more than the loop's 50 ms between spawns to
/// reach its claim): the claims find their jobs still starting, or the
/// pool empty, and the pool deepens — never past 4 × N.
#[test]
fn a_pool_that_falls_behind_its_loop_deepens() {
    let scene = Scene::new();
    let iters = 6;
    let out = scene.run(&["-v", "--warm-spawn=1", HOSTS[0], HOSTS[1]], iters, 1, "single", None);
    assert_loop_ok(&out, iters);
    let deeper = warm_lines(&out, "pool of");
    assert!(!warm_lines(&out, "claimed").is_empty(), "no claim\n{}", out.describe());
    assert!(deeper.iter().any(|l| l.ends_with("now 2 deep: its spawns come faster than it is refilled")), "{deeper:?}\n{}", out.describe());
    assert!(!deeper.iter().any(|l| l.contains("now 5 deep")), "deeper than 4 × 1: {deeper:?}\n{}", out.describe());
}

#[test]
fn spawn_multiple_is_claimed_warm() {
    let scene = Scene::new();
    let out = scene.run(&["--report-placement", "--warm-spawn=1", HOSTS[0], HOSTS[1]], 3, 2, "multi", None);
    assert_loop_ok(&out, 3);
    assert_warm(&out, 3);
}

/// A three-iteration loop of one child under `-v`, with `DPM_WARM_SPAWN`
/// and the parent's `dpm_warm` info value as given.
fn loop_with(warm_env: Option<&str>, info: Option<&str>) -> Output {
    let scene = Scene::new();
    let (python, script) = (venv_python(), scene.script());
    let mut dpm = Dpm::run(["-v", HOSTS[0], HOSTS[1], "-n", "1", &python, &script, "parent", "3", "1", "single"]).env("WARM_WDIR", &scene.wdir());
    if let Some(n) = warm_env {
        dpm = dpm.env("DPM_WARM_SPAWN", n);
    }
    if let Some(v) = info {
        dpm = dpm.env("WARM_INFO", v);
    }
    let out = dpm.output();
    assert_loop_ok(&out, 3);
    out
}

#[test]
fn the_environment_variable_turns_warm_spawn_on() {
    assert_warm(&loop_with(Some("1"), None), 3);
}

#[test]
fn the_info_key_refuses_warm_spawn_for_its_spawn() {
    let out = loop_with(Some("1"), Some("false"));
    assert!(out.err_lines().iter().all(|l| !l.starts_with("dpm: warm spawn:")), "{}", out.describe());
}

#[test]
fn the_info_key_asks_for_warm_spawn_when_it_is_off() {
    assert_warm(&loop_with(None, Some("true")), 3);
}

#[test]
fn without_warm_spawn_every_spawn_is_cold() {
    let out = loop_with(None, None);
    assert!(out.err_lines().iter().all(|l| !l.starts_with("dpm: warm spawn:")), "{}", out.describe());
}

#[test]
fn a_pooled_job_that_crashes_before_its_claim_is_only_dropped() {
    let scene = Scene::new();
    let flag = scene.dir.join("crash-once");
    let out = scene.run(&["-v", "--warm-spawn=2", HOSTS[0], HOSTS[1]], 4, 1, "single", Some(&flag));
    assert_loop_ok(&out, 4);
    assert!(!flag.exists(), "no child started after the first iteration\n{}", out.describe());
    let taken = fs::read_dir(&scene.dir).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().starts_with("crash-once.")).count();
    assert_eq!(taken, 1, "one child took the flag\n{}", out.describe());
    let dropped = warm_lines(&out, "dropped");
    assert!(dropped.iter().any(|l| l.contains("before a claim")), "no pooled job was dropped: {dropped:?}\n{}", out.describe());
    assert_eq!(warm_lines(&out, "claimed").len(), 3, "{}", out.describe());
    assert!(!out.stderr_str().contains("exited with code 3"), "the crash counted as the run's failure\n{}", out.describe());
}

#[test]
fn unclaimed_output_never_appears_and_a_full_pool_leaves_nothing_behind() {
    let scene = Scene::new();
    let (iters, k) = (3, 2);
    let out = scene.run(&["-v", "--warm-spawn=2", HOSTS[0], HOSTS[1]], iters, k, "single", None);
    assert_loop_ok(&out, iters);
    // The claimed jobs' output before MPI_Init is delivered; the pool's
    // unclaimed jobs (two of them at the end) print theirs into nothing.
    let pre = out.stderr_str().matches("PRE-INIT").count();
    assert_eq!(pre, (iters * k) as usize, "{}", out.describe());
    let kvsnames = pooled_kvsnames(&out);
    assert!(kvsnames.len() >= 2, "no pooled job: {kvsnames:?}\n{}", out.describe());
    // Dpm::output checked that none of the run's processes is left.
    assert_eq!(shm_left(&kvsnames), Vec::<String>::new(), "{}", out.describe());
}

#[test]
fn no_oversubscribe_the_pool_gives_its_slots_to_a_spawn_that_needs_them() {
    // Three slots: the parent, one spawned child at a time, one pooled job.
    // The spawn of two children fits only if the pooled job gives its slot back.
    const SCRIPT: &str = r#"
import sys, time
from mpi4py import MPI
if MPI.Comm.Get_parent() != MPI.COMM_NULL:
    MPI.Comm.Get_parent().Disconnect()
    sys.exit(0)
for n in (1, 1, 1, 2):
    # The previous child's exit may reach dpm after this spawn (a loaded
    # machine): a refusal is retried for a while, never forever.
    for attempt in range(60):
        try:
            inter = MPI.COMM_SELF.Spawn(sys.executable, [__file__], maxprocs=n)
            break
        except MPI.Exception as e:
            err = e.Get_error_string()
            time.sleep(0.5)
    else:
        print("FAIL spawn of", n, "refused:", err, flush=True)
        continue
    inter.Disconnect()
    time.sleep(0.5)
    print("spawn of", n, "ok", flush=True)
"#;
    let scene = Scene::new();
    let script = scene.dir.join("slots.py");
    fs::write(&script, SCRIPT).unwrap();
    let out = Dpm::run(["-v", "--no-oversubscribe", "--warm-spawn=1", "-hosts", "localhost:3", "-n", "1", &venv_python(), &script.display().to_string()])
        .watchdog(Duration::from_secs(120))
        .output();
    out.assert_success();
    assert!(!out.stdout_str().contains("FAIL"), "{}", out.describe());
    out.assert_stdout_contains("spawn of 2 ok");
    assert!(!warm_lines(&out, "claimed").is_empty(), "{}", out.describe());
    let dropped = warm_lines(&out, "dropped");
    assert!(dropped.iter().any(|l| l.contains("its slots are needed")), "{dropped:?}\n{}", out.describe());
}

#[test]
fn warm_spawn_across_two_virtual_nodes() {
    let scene = Scene::new();
    // Each virtual node has this machine's CPUs as slots (maybe two): one
    // child at a time, one pooled job.
    let out = scene.run(&["-v", "--warm-spawn=1", "--virtual-nodes", "2"], 3, 1, "single", None);
    assert_loop_ok(&out, 3);
    assert_warm(&out, 3);
}

#[test]
fn warm_spawn_through_a_boot() {
    let scene = Scene::new();
    let rt = scene.dir.join("rt");
    let dpm = dpm_bin();
    let sh = format!(
        "set -e; export DPM_RUNTIME_DIR='{rt}'; unset DPM_NO_BOOT DPM_BOOT; {dpm} boot -hosts localhost:8 --warm-spawn=1; set +e; \
         WARM_WDIR='{wd}' {dpm} run -v -n 1 '{py}' '{script}' parent 3 1 single; code=$?; {dpm} down; exit $code",
        rt = rt.display(),
        wd = scene.wdir(),
        py = venv_python(),
        script = scene.script(),
    );
    let out = Command::new("sh").args(["-c", &sh]).output().expect("sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
    for i in 0..3 {
        assert!(stdout.contains(&format!("iteration {i} ok")), "{stdout}\n{stderr}");
    }
    let claimed = stderr.lines().filter(|l| l.starts_with("dpm: warm spawn: claimed ")).count();
    assert!((1..=2).contains(&claimed), "{stdout}\n{stderr}");
    assert!(stderr.contains(&format!("dpm: warm spawn: {claimed} claimed, {} missed", 3 - claimed)), "{stderr}");
}

#[test]
fn mpi4py_pool_executor_is_claimed_warm() {
    const SCRIPT: &str = r#"
from mpi4py.futures import MPIPoolExecutor
if __name__ == "__main__":
    for round in range(3):
        with MPIPoolExecutor(max_workers=2) as ex:
            print("round", round, sorted(ex.map(pow, [2, 3, 4], [5, 5, 5])), flush=True)
"#;
    let scene = Scene::new();
    let script = scene.dir.join("pool.py");
    fs::write(&script, SCRIPT).unwrap();
    let out = Dpm::run(["-v", "--warm-spawn", HOSTS[0], HOSTS[1], "-n", "1", &venv_python(), &script.display().to_string()])
        .watchdog(Duration::from_secs(120))
        .output();
    out.assert_success();
    for round in 0..3 {
        out.assert_stdout_contains(&format!("round {round} [32, 243, 1024]"));
    }
    // The first round misses; the second claims, or misses and fills the pool.
    let claimed = warm_lines(&out, "claimed").len();
    assert!((1..=2).contains(&claimed), "{}", out.describe());
}

/// Issue 37: a one-shot run (one `MPIPoolExecutor`, used once) starts its
/// workers and nothing else: no pooled process after its only spawn.
#[test]
fn a_one_shot_run_starts_no_extra_processes_after_its_spawn() {
    const SCRIPT: &str = r#"
from mpi4py.futures import MPIPoolExecutor
if __name__ == "__main__":
    with MPIPoolExecutor(max_workers=2) as ex:
        print("result", sorted(ex.map(pow, [2, 3], [5, 5])), flush=True)
"#;
    let scene = Scene::new();
    let script = scene.dir.join("once.py");
    fs::write(&script, SCRIPT).unwrap();
    let out = Dpm::run(["-v", "--warm-spawn=2", HOSTS[0], HOSTS[1], "-n", "1", &venv_python(), &script.display().to_string()])
        .watchdog(Duration::from_secs(120))
        .output();
    out.assert_success();
    out.assert_stdout_contains("result [32, 243]");
    out.assert_stderr_contains("dpm: warm spawn: 0 claimed, 1 missed, 0 refilled");
    assert!(warm_lines(&out, "refilled").is_empty(), "{}", out.describe());
}

/// A boot of its own (`dpm boot -hosts localhost:32 --warm-spawn=1`, kept
/// jobs idle at most `idle` seconds) for runs of the spawn loop; `dpm down`
/// when dropped (if the test did not).
struct KeepingBoot {
    scene: Scene,
    rt: PathBuf,
}

impl KeepingBoot {
    fn up(idle: u32) -> KeepingBoot {
        let scene = Scene::new();
        let rt = scene.dir.join("rt");
        let boot = KeepingBoot { scene, rt };
        let out = boot.dpm(&["boot", "-hosts", "localhost:32", "--warm-spawn=1"]).env("DPM_WARM_IDLE", idle.to_string()).output().expect("dpm boot");
        assert!(out.status.success(), "dpm boot: {}", String::from_utf8_lossy(&out.stderr));
        boot
    }

    fn dpm(&self, args: &[&str]) -> Command {
        let mut c = Command::new(dpm_bin());
        c.args(args).env("DPM_RUNTIME_DIR", &self.rt).env_remove("DPM_NO_BOOT").env_remove("DPM_BOOT").env("WARM_WDIR", self.scene.wdir());
        c
    }

    /// `dpm run -v OPTS -n 1 python loop.py parent ITERS 1 MODE` through the boot: (stdout, stderr).
    fn run(&self, opts: &[&str], iters: u32, mode: &str) -> (String, String) {
        let (python, script, iters) = (venv_python(), self.scene.script(), iters.to_string());
        let mut args = vec!["run", "-v"];
        args.extend(opts);
        args.extend(["-n", "1", &python, &script, "parent", &iters, "1", mode]);
        let out = self.dpm(&args).output().expect("dpm run");
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
        assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
        for i in 0..iters.parse().unwrap() {
            assert!(stdout.contains(&format!("iteration {i} ok")) && !stdout.contains("FAIL"), "{stdout}\n{stderr}");
        }
        (stdout, stderr)
    }

    fn status(&self) -> String {
        let out = self.dpm(&["status"]).output().expect("dpm status");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Processes running the loop script (the children of every run).
    fn children(&self) -> Vec<String> {
        let out = Command::new("pgrep").args(["-af", &self.scene.script()]).output().expect("pgrep");
        String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect()
    }

    fn down(&self) {
        let out = self.dpm(&["down"]).output().expect("dpm down");
        assert!(out.status.success(), "dpm down: {}", String::from_utf8_lossy(&out.stderr));
    }
}

impl Drop for KeepingBoot {
    fn drop(&mut self) {
        let _ = self.dpm(&["down"]).output();
    }
}

fn lines_of<'a>(stderr: &'a str, kind: &str) -> Vec<&'a str> {
    let prefix = format!("dpm: warm spawn: {kind} ");
    stderr.lines().filter(|l| l.starts_with(&prefix)).collect()
}

/// Until `cond` or `secs` seconds.
fn wait_for(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    cond()
}

#[test]
fn a_boot_keeps_pooled_jobs_for_the_next_run_of_the_same_shape_until_its_idle_timeout() {
    let boot = KeepingBoot::up(6);
    let (_, first) = boot.run(&[], 2, "single");
    assert_eq!(lines_of(&first, "kept").len(), 1, "the unclaimed pooled job is kept: {first}");
    assert!(boot.status().contains("kept for later runs"), "{}", boot.status());
    // The next run's first spawn claims the kept job: no miss at all.
    let (_, second) = boot.run(&[], 2, "single");
    let claimed = lines_of(&second, "claimed");
    assert_eq!(claimed.len(), 2, "{second}");
    assert!(claimed[0].ends_with("(kept from an earlier run)"), "{second}");
    assert!(second.contains("dpm: warm spawn: 2 claimed, 0 missed"), "{second}");
    // Another environment, or another argument: no match.
    let (_, env) = boot.run(&["-genv", "WARM_OTHER", "1"], 1, "single");
    assert!(env.contains("dpm: warm spawn: 0 claimed, 1 missed"), "{env}");
    let (_, argv) = boot.run(&[], 1, "other");
    assert!(argv.contains("dpm: warm spawn: 0 claimed, 1 missed"), "{argv}");
    // Each run kept one of its shape: they die after the idle time.
    assert!(!boot.children().is_empty());
    assert!(wait_for(20, || boot.children().is_empty()), "kept jobs outlived their idle time: {:?}", boot.children());
    assert!(!boot.status().contains("kept for later runs"), "{}", boot.status());
    boot.down();
}

#[test]
fn dpm_down_ends_the_kept_jobs_and_leaves_nothing() {
    let boot = KeepingBoot::up(600);
    let (_, first) = boot.run(&[], 1, "single");
    let kvsnames: Vec<String> =
        lines_of(&first, "refilled").iter().filter_map(|l| l.split_once(" (").and_then(|(_, r)| r.split_once(')')).map(|(k, _)| k.to_string())).collect();
    assert_eq!(lines_of(&first, "kept").len(), 1, "{first}");
    assert!(!boot.children().is_empty(), "the kept job runs");
    boot.down();
    assert!(boot.children().is_empty(), "{:?}", boot.children());
    assert!(shm_left(&kvsnames).is_empty(), "{:?}", shm_left(&kvsnames));
}

/// Issue 26: through `dpm boot --warm-spawn`, a program rebuilt between two
/// runs (same path, another file) was claimed from the pool kept from the
/// first run: the child ran the old code. Now the second run's child is the
/// new program, and a third run of it claims the job the second kept.
#[test]
fn a_program_rebuilt_between_two_runs_of_a_boot_is_never_claimed_from_the_old_pool() {
    let boot = KeepingBoot::up(600);
    let dir = &boot.scene.dir;
    let python = venv_python();
    let parent = dir.join("parent.py");
    fs::write(
        &parent,
        "import sys\nfrom mpi4py import MPI\ninter = MPI.COMM_SELF.Spawn(sys.argv[1], [], maxprocs=1)\n\
         print('child version', inter.recv(source=0), flush=True)\ninter.Disconnect()\n",
    )
    .unwrap();
    let child = dir.join("child.py");
    fs::write(&child, "import os\nfrom mpi4py import MPI\np = MPI.Comm.Get_parent()\np.send(os.environ['CHILD_VERSION'], dest=0)\np.Disconnect()\n").unwrap();
    // The program: rebuilt as a new file under the same name (as a compiler
    // or `cp` over a renamed temporary leaves it).
    let program = dir.join("child.sh");
    let build = |version: u32| {
        let tmp = dir.join("child.sh.new");
        fs::write(&tmp, format!("#!/bin/sh\nCHILD_VERSION={version} exec {python} {}\n", child.display())).unwrap();
        fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        fs::rename(&tmp, &program).unwrap();
    };
    let run = || {
        let out = boot.dpm(&["run", "-v", "-n", "1", &python, &parent.display().to_string(), &program.display().to_string()]).output().expect("dpm run");
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
        assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
        (stdout, stderr)
    };
    build(1);
    let (first, err) = run();
    assert_eq!(first, "child version 1\n", "{err}");
    assert_eq!(lines_of(&err, "kept").len(), 1, "a pooled job of version 1 is kept: {err}");
    build(2);
    let (second, err) = run();
    assert_eq!(second, "child version 2\n", "the rebuilt program's spawn ran the old one: {err}");
    assert!(err.contains("dpm: warm spawn: 0 claimed, 1 missed"), "{err}");
    let (third, err) = run();
    assert_eq!(third, "child version 2\n", "{err}");
    assert!(err.contains("dpm: warm spawn: 1 claimed, 0 missed"), "the new program's kept job is claimed: {err}");
    boot.down();
}
