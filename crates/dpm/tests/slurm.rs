//! dpm inside a Slurm allocation, on a private Slurm cluster built by
//! `tests/fixtures/slurm.sh` (munged, slurmctld and four slurmd "nodes"
//! n1..n4 on this machine, Debian's slurm-wlm).
//!
//! Scenarios: dpm inside `salloc` (the ranks inherit the job's environment),
//! the Slurm bootstrap (one srun step per node) across 3 nodes, MPI_Comm_spawn
//! inside the allocation (what srun alone cannot do), `dpm boot` /
//! `dpm run` / `dpm down` inside an allocation, and MPIR attach: gdb
//! attached to a `dpm run` inside `salloc` reads the table of its ranks on
//! the allocation's nodes (docs/debugging.md).
//!
//! Needs root and `slurm-wlm` + `munge` (scripts/setup.sh --tests installs them).
//! When the fixture cannot be built the test says `SKIPPED: <reason>`
//! loudly and passes — except under `CI=true`, where it fails: CI installs
//! Slurm through `scripts/setup.sh --tests`, so a fixture it cannot build is a broken
//! set-up, never a pass.
//!
//! One #[test] brings the cluster up once (~1.5 s), runs every scenario in
//! turn (a failing one does not stop the others; all failures are listed at
//! the end), and brings it down again in a Drop guard, also when the test
//! panics. After each scenario the cluster must have no job left.

mod common;

use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use common::{debugger, dpm_bin, hello, program, repo_root, Dpm, FixtureLock, TempDir, TempFile};

fn fixture_script() -> PathBuf {
    repo_root().join("tests/fixtures/slurm.sh")
}

fn script(args: &[&str]) -> std::process::Output {
    common::run_fixture(&fixture_script(), args)
}

fn take_lock() -> FixtureLock {
    common::lock_fixture("dpm-slurm-test.lock", "Slurm cluster")
}

struct Fixture {
    /// The fixture's state directory (gone after `down`).
    state: PathBuf,
    /// `sh` script: `slurm.sh exec salloc -N1 -n2 dpm run "$@"`.
    salloc_1x2: TempFile,
    /// `sh` script: `slurm.sh exec salloc -N3 -n3 dpm run "$@"`.
    salloc_3x1: TempFile,
    lock: Option<FixtureLock>,
    down: bool,
}

impl Fixture {
    /// Build the cluster; `Err(reason)` when this machine cannot.
    fn up() -> Result<Fixture, String> {
        let lock = take_lock();
        let info = common::fixture_up(&fixture_script())?;
        let state = common::fixture_info(&info, "STATE").into();
        let wrapper = |shape: &str| format!("#!/bin/sh\nexec bash '{}' exec salloc {shape} '{}' run \"$@\"\n", fixture_script().display(), dpm_bin());
        let salloc_1x2 = TempFile::new("dpm-salloc", wrapper("-N1 -n2").as_bytes(), 0o755);
        let salloc_3x1 = TempFile::new("dpm-salloc", wrapper("-N3 -n3").as_bytes(), 0o755);
        Ok(Fixture { state, salloc_1x2, salloc_3x1, lock: Some(lock), down: false })
    }

    /// `salloc -N1 -n2 dpm run -genv DPM_TEST_MARKER <marker> ARGS` (the
    /// marker lets the harness check that no rank outlives the run).
    fn dpm_in_allocation(&self, args: &[&str]) -> Dpm {
        Dpm::mpiexec(&self.salloc_1x2.path, args).watchdog(Duration::from_secs(20))
    }

    /// `salloc -N3 -n6 dpm run ARGS` must succeed; its (stdout, stderr).
    fn dpm_in_3_node_allocation(&self, args: &[&str]) -> (String, String) {
        let mut cmd = vec!["salloc", "-N3", "-n6", dpm_bin(), "run"];
        cmd.extend_from_slice(args);
        let out = self.client(&cmd);
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
        assert!(out.status.success(), "{:?}\n{stdout}\n{stderr}", out.status);
        (stdout, stderr)
    }

    /// A client command of the cluster (`slurm.sh exec CMD`).
    fn client(&self, cmd: &[&str]) -> std::process::Output {
        let mut args = vec!["exec"];
        args.extend_from_slice(cmd);
        script(&args)
    }

    /// Wait up to `grace` until the cluster has no job at all (an ended
    /// `salloc` gives its allocation back asynchronously); cancel and
    /// return what is left.
    fn settle(&self, grace: Duration) -> Vec<String> {
        let deadline = Instant::now() + grace;
        loop {
            let out = self.client(&["squeue", "-h", "-o", "%A %j %T"]);
            assert!(out.status.success(), "squeue failed: {}", String::from_utf8_lossy(&out.stderr));
            let jobs: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect();
            if jobs.is_empty() {
                return jobs;
            }
            if Instant::now() >= deadline {
                let _ = self.client(&["scancel", "--user=root"]);
                return jobs;
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// Tear down and check that nothing of the fixture remains.
    fn down(&mut self) -> Result<(), String> {
        self.down = true;
        let started = Instant::now();
        let out = script(&["down"]);
        let mut problems = Vec::new();
        if !out.status.success() {
            problems.push(format!("slurm.sh down failed: {}", String::from_utf8_lossy(&out.stderr)));
        }
        if self.state.exists() {
            problems.push(format!("{} left after down", self.state.display()));
        }
        eprintln!("fixture down in {:.2} s", started.elapsed().as_secs_f64());
        drop(self.lock.take());
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if !self.down {
            if let Err(e) = self.down() {
                eprintln!("slurm fixture: {e}");
            }
        }
    }
}

/// The issue's case: `salloc -N1 -n2 dpm run -n 2 hello`.
fn hello_in_allocation(fx: &Fixture) {
    let out = fx.dpm_in_allocation(&["-n", "2", &hello()]).output();
    out.assert_success();
    for r in 0..2 {
        out.assert_stdout_contains(&format!("hello from rank {r} of 2 on host"));
    }
    out.assert_stdout_contains("sum of ranks = 1 (expected 1)");
    out.assert_stderr_contains("salloc: Granted job allocation");
}

/// The ranks run inside the allocation: they inherit salloc's job
/// environment (what a Slurm bootstrap will read).
fn ranks_see_the_job(fx: &Fixture) {
    let out = fx.dpm_in_allocation(&["-n", "2", &program("env_print"), "SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_TASKS_PER_NODE"]).output();
    out.assert_success();
    let job = out
        .stderr_str()
        .lines()
        .find_map(|l| l.strip_prefix("salloc: Granted job allocation ").map(|j| j.trim().to_string()))
        .unwrap_or_else(|| panic!("no job id in salloc's messages\n{}", out.describe()));
    for r in 0..2 {
        out.assert_stdout_contains(&format!("rank {r} SLURM_JOB_ID={job}\n"));
        out.assert_stdout_contains(&format!("rank {r} SLURM_JOB_NODELIST=n1\n"));
        out.assert_stdout_contains(&format!("rank {r} SLURM_TASKS_PER_NODE=2\n"));
    }
}

/// The fixture's promise: one job step across all four nodes.
fn step_on_every_node(fx: &Fixture) {
    let out = fx.client(&["srun", "--nodes=4", "--ntasks=4", "--ntasks-per-node=1", "printenv", "SLURMD_NODENAME"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "srun failed: {:?}\n{stdout}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    let mut nodes: Vec<&str> = stdout.lines().collect();
    nodes.sort();
    assert_eq!(nodes, ["n1", "n2", "n3", "n4"], "{stdout}");
}

/// `salloc -N3 -n6 dpm run …`: dpm reads the allocation, starts one daemon
/// per node with an srun step each, and MPICH wires up across the nodes.
fn dpm_bootstraps_through_slurm(fx: &Fixture) {
    let (stdout, stderr) = fx.dpm_in_3_node_allocation(&["--report-placement", "-n", "6", &program("ring")]);
    assert!(stdout.contains("ring ok size=6 sum="), "{stdout}\n{stderr}");
    let placed = common::placement(&stderr);
    let hosts: Vec<&str> = placed.iter().map(|p| p.2.as_str()).collect();
    assert_eq!(hosts, ["n1", "n2", "n3"], "one daemon per allocated node, 2 slots each\n{stderr}");
    assert!(placed.iter().all(|p| p.1.contains('-')), "two ranks per node\n{stderr}");
}

/// What `srun` alone cannot do: MPI_Comm_spawn inside the allocation, the
/// children placed on the other allocated nodes.
fn spawn_inside_the_allocation(fx: &Fixture) {
    let (stdout, stderr) = fx.dpm_in_3_node_allocation(&["--report-placement", "-n", "1", &program("spawn_args"), "4"]);
    assert!(stdout.contains("spawn ok children=4"), "{stdout}\n{stderr}");
    let child_hosts: std::collections::HashSet<String> = common::placement(&stderr).into_iter().filter(|p| p.0 == 1).map(|p| p.2).collect();
    assert!(child_hosts.contains("n2") && child_hosts.contains("n3"), "children not spread: {child_hosts:?}\n{stderr}");
}

/// Binding under Slurm: each daemon binds within the CPUs its step was
/// given, and every rank runs on what `--report-bindings` said.
fn binding_inside_the_allocation(fx: &Fixture) {
    let show = r#"echo "R $PMI_RANK cpus $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)""#;
    let (stdout, stderr) = fx.dpm_in_3_node_allocation(&["--report-bindings", "-bind-to", "hwthread", "-n", "6", "sh", "-c", show]);
    let mut read = std::collections::BTreeMap::new();
    for l in stdout.lines() {
        if let ["R", rank, "cpus", list] = l.split_whitespace().collect::<Vec<_>>().as_slice() {
            read.insert(rank.to_string(), list.to_string());
        }
    }
    let mut reported = std::collections::BTreeMap::new();
    let mut daemons = std::collections::BTreeSet::new();
    for l in stderr.lines() {
        let Some((who, rest)) = l.split_once("] Rank ") else { continue };
        // [host:pid]: the daemon that bound it (every node runs on this host).
        daemons.insert(who.to_string());
        let rank = rest.split_whitespace().next().unwrap_or("").to_string();
        let list = rest.split_once("(cpus ").and_then(|(_, t)| t.split(')').next()).unwrap_or("?").to_string();
        reported.insert(rank, list);
    }
    assert_eq!(read.len(), 6, "{stdout}\n{stderr}");
    assert_eq!(read, reported, "every rank runs where --report-bindings said\n{stdout}\n{stderr}");
    assert_eq!(daemons.len(), 3, "each node's daemon binds its own ranks\n{stderr}");
}

/// `dpm boot` inside the allocation: one srun step per node starts the
/// daemons once; later `dpm run`s (an MPI ring, a spawn onto the other
/// nodes) go through them; `dpm down` ends it all before salloc returns.
fn boot_inside_the_allocation(fx: &Fixture) {
    let dir = std::env::temp_dir().join(common::unique("dpm-slurm-boot"));
    let script = common::boot_session_script(&dir, "", 6, 2);
    let out = fx.client(&["salloc", "-N3", "-n6", "sh", "-c", &script]);
    let _ = std::fs::remove_dir_all(&dir);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{:?}\n{stdout}\n{stderr}", out.status);
    assert!(stdout.contains("dpm boot: 3 nodes up"), "{stdout}\n{stderr}");
    for node in ["n1", "n2", "n3"] {
        assert!(stdout.lines().any(|l| l.contains(node) && l.trim_end().ends_with(" 0")), "status lacks idle node {node}\n{stdout}");
    }
    assert!(stdout.contains("ring ok size=6 sum="), "{stdout}\n{stderr}");
    assert!(stdout.contains("spawn ok children=2"), "{stdout}\n{stderr}");
    let child_hosts = common::spawned_hosts(&stderr);
    assert!(!child_hosts.is_empty() && child_hosts.iter().all(|h| h != "n1"), "children not on the free nodes: {child_hosts:?}\n{stderr}");
}

/// The process that `parent` started running `exe` (`dpm run` under salloc).
fn child_running(parent: u32, exe: &str) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok()).find(|pid| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid = stat.rsplit(')').next().and_then(|s| s.split_whitespace().nth(1)).and_then(|p| p.parse::<u32>().ok());
        ppid == Some(parent) && debugger::exe_of(*pid) == exe
    })
}

/// MPIR attach mode under Slurm: `salloc -N3 -n3 dpm run -n 3 mpir_job`
/// (one srun step per node starts the daemons); gdb attached to that
/// `dpm run` reads `MPIR_proctable` by its C layout and finds every rank's
/// live pid, its program, and the node Slurm runs it on (n1, n2, n3 in rank
/// order); then the job ends 0.
fn mpir_attach_inside_the_allocation(fx: &Fixture) {
    let gdb = debugger::gdb().expect("gdb");
    let dir = TempDir::new("mpir-slurm");
    let exe = program("mpir_job");
    // The daemons on other nodes cannot see that gdb holds `dpm run`: a
    // longer silence timeout, as docs/debugging.md tells a user attaching.
    let mut running = Dpm::mpiexec(&fx.salloc_3x1.path, ["-n", "3", &exe, &dir.path_str()]).env("DPM_HEARTBEAT_TIMEOUT", "60").spawn();
    running.wait_for_lines("mpir_job world", 3);
    // The wrapper became salloc; its child is the `dpm run` a tool attaches to.
    let starter = child_running(running.pid(), dpm_bin()).unwrap_or_else(|| panic!("no dpm run under salloc (pid {})", running.pid()));
    let table = debugger::read_table(&gdb, starter);
    let live: Vec<String> = table.iter().map(|e| debugger::exe_of(e.pid)).collect();
    std::fs::write(dir.path.join("go"), b"").expect("write go");
    let out = running.wait();
    out.assert_success();
    let pids = debugger::ready_pids(&out.stdout_str(), "world");
    assert_eq!(table.iter().map(|e| e.pid).collect::<Vec<_>>(), pids, "the table {table:?}\n{}", out.describe());
    assert_eq!(table.iter().map(|e| e.host.as_str()).collect::<Vec<_>>(), ["n1", "n2", "n3"], "{table:?}");
    assert!(table.iter().all(|e| e.exe == exe), "{table:?}");
    assert_eq!(live, [exe.clone(), exe.clone(), exe], "each entry's pid ran the program when gdb read it");
}

/// MPIR launch mode across the allocation: gdb starts `dpm run` with
/// `MPIR_being_debugged` set and holds it at `MPIR_Breakpoint` longer than
/// the daemons' default silence timeout (they cannot see it traced on
/// other nodes; dpm waits out a debugger's hold there): every rank is held
/// before `main` on n1, n2, n3, and after `continue` the job ends 0.
fn mpir_launch_across_the_allocation(fx: &Fixture) {
    let gdb = debugger::gdb().expect("gdb");
    let dir = TempDir::new("mpir-slurm");
    let exe = program("mpir_job");
    let held = debugger::launch_script(&dir.path, false, 0).replace("shell touch", "shell sleep 4\nshell touch");
    let script = TempFile::new("mpir-launch.gdb", held.as_bytes(), 0o600);
    let cmd = ["salloc", "-N3", "-n3", &gdb, "-nx", "-batch", "-x", &script.path_str(), "--args", dpm_bin(), "run", "-n", "3", &exe, &dir.path_str()];
    let out = fx.client(&cmd);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("exited normally"), "{:?}\n{text}", out.status);
    let table = debugger::parse_table(&text, 0);
    assert_eq!(table.iter().map(|e| e.host.as_str()).collect::<Vec<_>>(), ["n1", "n2", "n3"], "{text}");
    let states = debugger::states(&text);
    assert!(states.len() == 3 && states.iter().all(|(_, state, program)| state == "T" && *program == exe), "not every rank held in its program\n{text}");
    assert!(text.contains("MAIN-FILES 0"), "a rank ran main before the debugger let it:\n{text}");
    assert_eq!(debugger::ready_pids(&text, "world"), table.iter().map(|e| e.pid).collect::<Vec<_>>(), "{text}");
}

/// `HYDRA_LAUNCHER_EXTRA_ARGS` reach srun after its own options, as under
/// Hydra: a harmless one runs the job, an unknown one is srun's error.
fn launcher_extra_args_reach_srun(fx: &Fixture) {
    let run = |extra: &str| {
        let cmd =
            ["salloc", "-N3", "-n3", "env", &format!("HYDRA_LAUNCHER_EXTRA_ARGS={extra}"), dpm_bin(), "run", "--report-placement", "-n", "3", "/bin/true"];
        fx.client(&cmd)
    };
    let out = run("--quiet --overlap");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let mut hosts: Vec<String> = common::placement(&stderr).into_iter().map(|(_, _, host)| host).collect();
    hosts.sort_unstable();
    assert_eq!(hosts, ["n1", "n2", "n3"], "{stderr}");
    let out = run("--dpm-no-such-option");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("dpm-no-such-option"), "srun did not get the extra word: {stderr}");
}

#[test]
fn dpm_inside_a_slurm_allocation() {
    let mut fx = match Fixture::up() {
        Ok(fx) => fx,
        Err(reason) => return common::fixture_unavailable("Slurm cluster fixture (slurm)", &reason),
    };
    let scenarios: [(&str, common::Scenario<Fixture>); 10] = [
        ("salloc -N1 -n2 dpm run -n 2 hello", hello_in_allocation),
        ("ranks see the job's environment", ranks_see_the_job),
        ("one step on every node", step_on_every_node),
        ("dpm bootstraps through Slurm across 3 nodes", dpm_bootstraps_through_slurm),
        ("MPI_Comm_spawn inside the allocation", spawn_inside_the_allocation),
        ("dpm boot inside the allocation", boot_inside_the_allocation),
        ("binding inside the allocation", binding_inside_the_allocation),
        ("MPIR attach inside the allocation", mpir_attach_inside_the_allocation),
        ("MPIR launch mode across the allocation", mpir_launch_across_the_allocation),
        ("HYDRA_LAUNCHER_EXTRA_ARGS reach srun", launcher_extra_args_reach_srun),
    ];
    let mut failures = common::run_scenarios("slurm", &fx, &scenarios, |fx, name| {
        // A hang guard: settling ends as soon as the queue is empty.
        let left = fx.settle(Duration::from_secs(30));
        (!left.is_empty()).then(|| format!("{name}: jobs left 30 s after the run: {left:?}"))
    });
    if let Err(e) = fx.down() {
        failures.push(format!("fixture down: {e}"));
    }
    assert!(failures.is_empty(), "{} of {} scenarios failed:\n\n{}", failures.len(), scenarios.len(), failures.join("\n\n"));
}
