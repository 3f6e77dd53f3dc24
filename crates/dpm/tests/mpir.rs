//! MPIR, the MPI Forum's Process Acquisition Interface, with real gdb as
//! the tool (docs/debugging.md):
//! - the symbols are in the dynamic symbol table, also of a stripped dpm;
//! - attach mode: gdb attached to a running `dpm run` reads the table by
//!   its C layout and finds every rank's live pid and program — one node,
//!   two virtual nodes, through a boot, spawned ranks, Open MPI (ssh hosts:
//!   `ssh_hosts.rs`);
//! - launch mode: gdb starts dpm with `MPIR_being_debugged` set; at
//!   `MPIR_Breakpoint` every rank exists, stopped at its first instruction
//!   (none has run `main`); after `continue` the job ends 0; a tool that
//!   detaches there leaves a normal job.

mod common;

use std::path::Path;

use common::boot::Boot;
use common::debugger::{exe_of, gdb, launch_script, parse_table, read_table, ready_pids, states, stripped_dpm, ProcDesc};
use common::{dpm_bin, hostname, program, unique, Dpm, TempDir, TempFile};

/// `-genv` arguments selecting ch4:ofi over TCP for the spawning jobs: the
/// wheel's default ucx has a race in a spawned child's `MPI_Init`
/// (as in `spawn.rs`), not what these tests are about.
const OFI: [&str; 6] = ["-genv", "MPIR_CVAR_CH4_NETMOD", "ofi", "-genv", "FI_PROVIDER", "tcp"];

const SYMBOLS: [&str; 10] = [
    "MPIR_proctable",
    "MPIR_proctable_size",
    "MPIR_debug_state",
    "MPIR_being_debugged",
    "MPIR_i_am_starter",
    "MPIR_partial_attach_ok",
    "MPIR_ignore_queues",
    "MPIR_Breakpoint",
    "MPIR_executable_path",
    "MPIR_server_arguments",
];

#[test]
fn the_symbols_are_dynamic_also_in_a_stripped_binary() {
    for bin in [Path::new(dpm_bin()).to_path_buf(), stripped_dpm()] {
        let out = std::process::Command::new("nm").arg("-D").arg("--defined-only").arg(&bin).output().expect("run nm");
        let text = String::from_utf8_lossy(&out.stdout);
        for s in SYMBOLS {
            assert!(text.lines().any(|l| l.split_whitespace().last() == Some(s)), "{s} is not a dynamic symbol of {}", bin.display());
        }
        assert!(text.lines().any(|l| l.ends_with(" T MPIR_Breakpoint")), "MPIR_Breakpoint is not a function in {}", bin.display());
    }
}

/// What gdb read, and the program each entry's pid ran then.
struct Attached {
    table: Vec<ProcDesc>,
    live: Vec<String>,
}

/// Every entry names the rank that printed its pid, live then and running
/// `exe`, on its host (`hosts` in blocks of equal size, in rank order).
fn assert_table(read: &Attached, pids: &[u32], exe: &str, hosts: &[&str]) {
    let table = &read.table;
    assert_eq!(table.len(), pids.len(), "the table {table:?} against the ranks {pids:?}");
    for (r, e) in table.iter().enumerate() {
        assert_eq!(e.pid, pids[r], "rank {r}: {table:?}");
        assert_eq!(e.exe, exe, "rank {r}'s program");
        assert_eq!(read.live[r], exe, "rank {r}'s live process runs another program");
        assert_eq!(e.host, hosts[r * hosts.len() / table.len()], "rank {r}'s host");
    }
}

/// Run `dpm` (the given binary) with `args` ending in `mpir_job DIR [spawn N]`,
/// attach gdb once `ready` ranks are up, and return the table and the pids
/// the ranks printed (world, then spawned children).
fn attach(dpm: Dpm, dir: &TempDir, ready: usize) -> (Attached, Vec<u32>, Vec<u32>) {
    let gdb = gdb().expect("gdb");
    let mut running = dpm.spawn();
    running.wait_for_lines("mpir_job ", ready);
    let table = read_table(&gdb, running.pid());
    let live = table.iter().map(|e| exe_of(e.pid)).collect();
    let table = Attached { table, live };
    std::fs::write(dir.path.join("go"), b"").expect("write go");
    let out = running.wait();
    out.assert_success();
    let stdout = out.stdout_str();
    (table, ready_pids(&stdout, "world"), ready_pids(&stdout, "child"))
}

#[test]
fn attach_one_node_stripped() {
    let dir = TempDir::new("mpir");
    let exe = program("mpir_job");
    let (table, world, _) = attach(Dpm::run(["-n", "3", &exe, &dir.path_str()]).exe(&stripped_dpm()), &dir, 3);
    assert_table(&table, &world, &exe, &[&hostname()]);
}

#[test]
fn attach_two_virtual_nodes() {
    let dir = TempDir::new("mpir");
    let exe = program("mpir_job");
    let (table, world, _) = attach(Dpm::run(["--virtual-nodes", "2", "-ppn", "2", "-n", "4", &exe, &dir.path_str()]), &dir, 4);
    let (v0, v1) = (format!("{}-v0", hostname()), format!("{}-v1", hostname()));
    assert_table(&table, &world, &exe, &[&v0, &v1]);
}

#[test]
fn attach_finds_spawned_ranks_after_the_world() {
    let dir = TempDir::new("mpir");
    let exe = program("mpir_job");
    let (table, world, children) = attach(Dpm::run(OFI.iter().copied().chain(["-n", "2", &exe, &dir.path_str(), "spawn", "2"])), &dir, 4);
    let all: Vec<u32> = world.iter().chain(&children).copied().collect();
    assert_table(&table, &all, &exe, &[&hostname()]);
}

#[test]
fn attach_open_mpi() {
    let Some(exe) = common::ompi_program("mpir_job") else { return };
    let dir = TempDir::new("mpir");
    let (table, world, _) = attach(Dpm::run(["-n", "2", &exe, &dir.path_str()]), &dir, 2);
    assert_table(&table, &world, &exe, &[&hostname()]);
}

#[test]
fn attach_through_a_boot() {
    let boot = Boot::start(&[]);
    let dir = TempDir::new("mpir");
    let exe = program("mpir_job");
    let (table, world, _) = attach(boot.run(&["-n", "2", &exe, &dir.path_str()]).exe(&stripped_dpm()), &dir, 2);
    let host = table.table[0].host.clone();
    assert_table(&table, &world, &exe, &[&host]);
}

/// `dpm run ARGS` under gdb in launch mode (`launch_script`): gdb's output
/// and exit, the run's marker for the leftover check.
fn launch(dpm: &Path, args: &[&str], dir: &TempDir, detach: bool, env: &[(&str, &str)]) -> common::Output {
    launch_stops(dpm, args, dir, detach, env, 0)
}

fn launch_stops(dpm: &Path, args: &[&str], dir: &TempDir, detach: bool, env: &[(&str, &str)], more_stops: usize) -> common::Output {
    let gdb = gdb().expect("gdb");
    let script = TempFile::new("mpir-launch.gdb", launch_script(&dir.path, detach, more_stops).as_bytes(), 0o600);
    let marker = unique("dpmtest");
    let mut all: Vec<String> = ["-nx", "-batch", "-x", &script.path_str(), "--args"].iter().map(|s| s.to_string()).collect();
    all.push(dpm.display().to_string());
    all.extend(["run", "-genv", common::MARKER_VAR, &marker].iter().map(|s| s.to_string()));
    all.extend(args.iter().map(|s| s.to_string()));
    let mut run = Dpm::raw(all).exe(Path::new(&gdb));
    for (k, v) in env {
        run = run.env(k, v);
    }
    let out = run.spawn().wait_unchecked();
    let left = common::leftovers_after(&marker, common::LEFTOVER_GRACE);
    assert!(left.is_empty(), "left behind: {left:?}\n{}", out.describe());
    out
}

/// At the breakpoint: every rank in the table, stopped (`T`) in its own
/// program, none has run `main`; afterwards every one did.
fn assert_held(out: &common::Output, dir: &TempDir, exe: &str, n: usize) {
    let text = format!("{}{}", out.stdout_str(), out.stderr_str());
    let table = parse_table(&text, 0);
    assert_eq!(table.len(), n, "{text}");
    let held = states(&text);
    assert_eq!(held.len(), n, "{text}");
    for (e, (pid, state, program)) in table.iter().zip(&held) {
        assert_eq!((e.pid, e.exe.as_str()), (*pid, exe), "{text}");
        assert_eq!((state.as_str(), program.as_str()), ("T", exe), "rank pid {pid} is not held in its program at the breakpoint\n{text}");
    }
    assert!(text.contains("MAIN-FILES 0"), "a rank ran main before the debugger let it:\n{text}");
    let mains =
        std::fs::read_dir(&dir.path).expect("read dir").filter(|e| e.as_ref().is_ok_and(|e| e.file_name().to_string_lossy().starts_with("main."))).count();
    assert_eq!(mains, n, "after the breakpoint every rank ran main\n{text}");
    assert_eq!(ready_pids(&text, "world"), table.iter().map(|e| e.pid).collect::<Vec<_>>(), "{text}");
}

#[test]
fn launch_mode_holds_every_rank_before_main_stripped() {
    let dir = TempDir::new("mpir");
    let exe = program("mpir_job");
    let out = launch(&stripped_dpm(), &["-n", "3", &exe, &dir.path_str()], &dir, false, &[]);
    assert_held(&out, &dir, &exe, 3);
    out.assert_stdout_contains("exited normally");
}

#[test]
fn launch_mode_on_two_virtual_nodes() {
    let dir = TempDir::new("mpir");
    let exe = program("mpir_job");
    let out = launch(Path::new(dpm_bin()), &["--virtual-nodes", "2", "-n", "4", &exe, &dir.path_str()], &dir, false, &[]);
    assert_held(&out, &dir, &exe, 4);
    out.assert_stdout_contains("exited normally");
}

#[test]
fn launch_mode_open_mpi() {
    let Some(exe) = common::ompi_program("mpir_job") else { return };
    let dir = TempDir::new("mpir");
    let out = launch(Path::new(dpm_bin()), &["-n", "2", &exe, &dir.path_str()], &dir, false, &[]);
    assert_held(&out, &dir, &exe, 2);
    out.assert_stdout_contains("exited normally");
}

#[test]
fn launch_mode_a_tool_that_detaches_leaves_a_normal_job() {
    let dir = TempDir::new("mpir");
    let exe = program("mpir_job");
    // gdb ends at the detach; dpm goes on with gdb's stdout, which the
    // harness reads to its end: the job's output is there once it ended.
    let out = launch(Path::new(dpm_bin()), &["-n", "2", &exe, &dir.path_str()], &dir, true, &[]);
    assert_held(&out, &dir, &exe, 2);
}

#[test]
fn launch_mode_through_a_boot() {
    let boot = Boot::start(&[]);
    let dir = TempDir::new("mpir");
    let exe = program("mpir_job");
    let runtime = boot.dir.to_string_lossy().into_owned();
    let out = launch(&stripped_dpm(), &["-n", "2", &exe, &dir.path_str()], &dir, false, &[("DPM_NO_BOOT", ""), ("DPM_RUNTIME_DIR", &runtime)]);
    assert_held(&out, &dir, &exe, 2);
    out.assert_stdout_contains("exited normally");
}

#[test]
fn launch_mode_follows_a_spawn() {
    let dir = TempDir::new("mpir");
    let exe = program("mpir_job");
    let out = launch_stops(Path::new(dpm_bin()), &[&OFI[..], &["-n", "2", &exe, &dir.path_str(), "spawn", "2"]].concat(), &dir, false, &[], 1);
    let text = format!("{}{}", out.stdout_str(), out.stderr_str());
    out.assert_stdout_contains("exited normally");
    // The world held at the first breakpoint; at the second, the children
    // follow it in the table (they are not held: they run as spawned).
    let world = ready_pids(&text, "world");
    let children = ready_pids(&text, "child");
    let first = parse_table(&text, 0);
    assert_eq!(first.iter().map(|e| e.pid).collect::<Vec<_>>(), world, "{text}");
    let second = parse_table(&text, 1);
    let all: Vec<u32> = world.iter().chain(&children).copied().collect();
    assert_eq!(second.iter().map(|e| e.pid).collect::<Vec<_>>(), all, "{text}");
    assert!(second.iter().all(|e| e.exe == exe), "{text}");
}

/// `--timeout 5 --get-stack-traces` on 4 ranks deadlocked in `MPI_Recv`:
/// each rank's state and stack, prefixed by rank and host, naming the
/// blocking call; then the timeout's status (124).
#[test]
fn stack_traces_of_a_deadlocked_job_at_the_timeout() {
    gdb().expect("gdb");
    let out = Dpm::run(["--timeout", "5", "--get-stack-traces", "-n", "4", &program("deadlock")]).output();
    out.assert_code(124);
    let err = out.stderr_str();
    let host = hostname();
    for r in 0..4 {
        let state = format!("dpm: rank {r} (pid ");
        assert!(err.lines().any(|l| l.starts_with(&state) && l.contains(&format!(" on {host}): running"))), "no state of rank {r}\n{}", out.describe());
        let prefix = format!("[rank {r} on {host}] #");
        assert!(err.lines().any(|l| l.starts_with(&prefix) && l.contains("MPI_Recv")), "rank {r}'s stack does not name MPI_Recv\n{}", out.describe());
    }
    assert!(err.contains("timed out after 5 s"), "{}", out.describe());
}

/// `--report-state-on-timeout`: the states only; without a tracer on the
/// node, `--get-stack-traces` says so in one line per rank.
#[test]
fn state_report_and_no_tracer_at_the_timeout() {
    let out = Dpm::run(["--timeout", "3", "--report-state-on-timeout", "-n", "2", &program("deadlock")]).output();
    out.assert_code(124);
    let err = out.stderr_str();
    assert_eq!(
        err.lines().filter(|l| l.starts_with("dpm: rank ") && l.ends_with("running (PMI initialised, no PMI call pending)")).count(),
        2,
        "{}",
        out.describe()
    );
    assert!(!err.contains("] #"), "stacks without --get-stack-traces\n{}", out.describe());

    let out = Dpm::run(["--timeout", "3", "--get-stack-traces", "-n", "2", &program("deadlock")]).env("PATH", "/nonexistent").output();
    out.assert_code(124);
    let none = "] no stack: neither gdb nor eu-stack is installed on this node";
    assert_eq!(out.stderr_str().lines().filter(|l| l.ends_with(none)).count(), 2, "{}", out.describe());
}

/// SIGQUIT (Ctrl-\) to a running `dpm run`: every rank's state and stack,
/// and the run goes on (here until SIGTERM ends it).
#[test]
fn sigquit_prints_the_stacks_and_the_run_goes_on() {
    gdb().expect("gdb");
    // stderr into stdout, so that the test sees the reports as they come.
    let merged = TempFile::new("dpm-2to1", format!("#!/bin/sh\nexec '{}' \"$@\" 2>&1\n", dpm_bin()).as_bytes(), 0o700);
    let out = quit_then_term(Dpm::run(["--timeout", "120", "-n", "2", &program("deadlock")]).exe(&merged.path).spawn());
    let text = out.stdout_str();
    let host = hostname();
    let term = text.find("got SIGTERM").unwrap_or_else(|| panic!("{}", out.describe()));
    for r in 0..2 {
        let stack = text.find(&format!("[rank {r} on {host}] #")).unwrap_or_else(|| panic!("no stack of rank {r}\n{}", out.describe()));
        assert!(stack < term, "rank {r}'s stack after the end\n{}", out.describe());
    }
    assert!(text.contains("MPI_Recv"), "{}", out.describe());
}

/// Two deadlocked ranks' run: SIGQUIT once both printed, the report's
/// lines, then SIGTERM; the run ends by it.
fn quit_then_term(mut running: common::Running) -> common::Output {
    running.wait_for_lines("rank ", 2);
    running.signal("QUIT");
    running.wait_for_lines("dpm: rank ", 2);
    running.signal("TERM");
    let out = running.wait();
    out.assert_code(128 + libc_sigterm());
    out
}

/// Through a boot: the stacks at the timeout, and on SIGQUIT to the run's
/// `dpm run` while the run goes on, as for a plain run.
#[test]
fn stack_traces_of_a_booted_run_at_the_timeout_and_on_sigquit() {
    gdb().expect("gdb");
    let boot = Boot::start(&[]);
    let host = hostname();
    // A booted run's jobs are numbered by the boot: its ranks are `J.R`.
    let recv_stack = |text: &str, r: usize| {
        text.lines().any(|l| {
            let label = l.strip_prefix("[rank ").and_then(|l| l.split_once(&format!(" on {host}] #"))).map(|(label, _)| label);
            label.is_some_and(|label| label.rsplit('.').next() == Some(&r.to_string())) && l.contains("MPI_Recv")
        })
    };
    let out = boot.run(&["--timeout", "5", "--get-stack-traces", "-n", "2", &program("deadlock")]).output();
    out.assert_code(124);
    assert!((0..2).all(|r| recv_stack(&out.stderr_str(), r)), "{}", out.describe());
    let merged = TempFile::new("dpm-2to1", format!("#!/bin/sh\nexec '{}' \"$@\" 2>&1\n", dpm_bin()).as_bytes(), 0o700);
    let out = quit_then_term(boot.run(&["--timeout", "120", "-n", "2", &program("deadlock")]).exe(&merged.path).spawn());
    assert!((0..2).all(|r| recv_stack(&out.stdout_str(), r)), "{}", out.describe());
}

fn libc_sigterm() -> i32 {
    15
}

/// `dpm status --json` in `runtime`: the parsed object.
fn status_json(runtime: &Path) -> serde_json::Value {
    let out = std::process::Command::new(dpm_bin()).args(["status", "--json"]).env("DPM_RUNTIME_DIR", runtime).output().expect("run dpm status");
    assert!(out.status.success(), "dpm status --json: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

/// (rank, host, pid, state) of job `job` of the run of `client` in a status.
fn listed_ranks(runs: &serde_json::Value, client: u32) -> Vec<(u64, String, u64, String)> {
    let run = runs.as_array().and_then(|r| r.iter().find(|r| r["client_pid"] == client)).unwrap_or_else(|| panic!("no run of {client} in {runs}"));
    run["ranks"][0][1]
        .as_array()
        .unwrap_or_else(|| panic!("no ranks in {run}"))
        .iter()
        .map(|r| (r["rank"].as_u64().unwrap(), r["host"].as_str().unwrap().to_string(), r["pid"].as_u64().unwrap(), r["state"].as_str().unwrap().to_string()))
        .collect()
}

/// A plain run's job table: `run-<pid>.json` in the private directory
/// (0700, the file 0600), listed by `dpm status --json`, gone at the end.
#[test]
fn status_json_lists_a_plain_runs_ranks_privately() {
    use std::os::unix::fs::PermissionsExt;
    let runtime = std::env::temp_dir().join(unique("dpm-rt"));
    let dir = TempDir::new("mpir");
    let exe = program("mpir_job");
    let mut running = Dpm::run(["-n", "2", &exe, &dir.path_str()]).env("DPM_RUNTIME_DIR", &runtime.to_string_lossy()).spawn();
    running.wait_for_lines("mpir_job world", 2);
    let client = running.pid();
    let file = runtime.join(format!("run-{client}.json"));
    let status = status_json(&runtime);
    assert_eq!(std::fs::metadata(&runtime).unwrap().permissions().mode() & 0o777, 0o700);
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    let ranks = listed_ranks(&status["runs"], client);
    std::fs::write(dir.path.join("go"), b"").expect("write go");
    let out = running.wait();
    out.assert_success();
    let pids = ready_pids(&out.stdout_str(), "world");
    let want: Vec<_> = (0..2).map(|r| (r as u64, hostname(), u64::from(pids[r]), "running".to_string())).collect();
    assert_eq!(ranks, want, "{status}");
    assert!(!file.exists(), "the table outlived its run");
    let _ = std::fs::remove_dir_all(&runtime);
}

/// Through a boot: the boot's status lists the run's ranks.
#[test]
fn status_json_lists_a_booted_runs_ranks() {
    let boot = Boot::start(&[]);
    let dir = TempDir::new("mpir");
    let exe = program("mpir_job");
    let mut running = boot.run(&["-n", "2", &exe, &dir.path_str()]).spawn();
    running.wait_for_lines("mpir_job world", 2);
    let status = status_json(&boot.dir);
    let ranks = listed_ranks(&status["boot"]["runs"], running.pid());
    std::fs::write(dir.path.join("go"), b"").expect("write go");
    let out = running.wait();
    out.assert_success();
    let pids = ready_pids(&out.stdout_str(), "world");
    assert_eq!(ranks.iter().map(|r| r.2).collect::<Vec<_>>(), pids.iter().map(|&p| u64::from(p)).collect::<Vec<_>>(), "{status}");
    assert!(ranks.iter().all(|r| r.3 == "running"), "{status}");
}

/// The state report says since when a rank waits in its PMI call: rank 0
/// in `PMI_Barrier` for its peer, which never speaks PMI (`sleep`).
#[test]
fn state_report_says_since_when_a_rank_waits() {
    let out = Dpm::run(["--timeout", "3", "--report-state-on-timeout", "-n", "1", &program("dpm_pmi1_api"), ":", "-n", "1", "sleep", "100"]).output();
    out.assert_code(124);
    let err = out.stderr_str();
    let line = err.lines().find(|l| l.starts_with("dpm: rank 0 (pid ")).unwrap_or_else(|| panic!("no state of rank 0\n{}", out.describe()));
    let waited = line.split_once("): waits in PMI `barrier_in` for ").and_then(|(_, t)| t.strip_suffix(" s")).and_then(|t| t.parse::<f64>().ok());
    // At most the timeout, and what the node took to answer on a busy host.
    assert!(waited.is_some_and(|s| (0.0..=13.0).contains(&s)), "{line}\n{}", out.describe());
    assert!(err.lines().any(|l| l.starts_with("dpm: rank 1 (pid ") && l.ends_with("has not spoken PMI")), "{}", out.describe());
}

/// The job of `pmi_states`: rank 0 waits in `PMI_Barrier` for its peer,
/// which never speaks PMI (`sleep`).
fn waits_in_barrier() -> Vec<String> {
    ["-n", "1", &program("dpm_pmi1_api"), ":", "-n", "1", "sleep", "300"].map(String::from).to_vec()
}

/// Ask `dpm status --json` in `runtime` until the run of `running` (in
/// `status[section]["runs"]`) says its rank 0 waits in `PMI_Barrier`:
/// since when (as the state report at a timeout says it), its peer has not
/// spoken PMI; then the run is ended.
fn pmi_states(running: common::Running, runtime: &Path, section: Option<&str>) {
    let client = running.pid();
    let runs = |status: &serde_json::Value| section.map_or(status["runs"].clone(), |s| status[s]["runs"].clone());
    let pmi = |status: &serde_json::Value, rank: usize| {
        let run = runs(status).as_array().and_then(|r| r.iter().find(|r| r["client_pid"] == client)).cloned().unwrap_or_default();
        run["ranks"][0][1][rank]["pmi"].as_str().unwrap_or_default().to_string()
    };
    // Until rank 0 has come to its barrier (each status asks anew).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        let status = if runtime.exists() { status_json(runtime) } else { serde_json::Value::Null };
        if pmi(&status, 0).starts_with("waits in PMI `barrier_in` for ") || std::time::Instant::now() > deadline {
            break status;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let waited = pmi(&status, 0).strip_prefix("waits in PMI `barrier_in` for ").and_then(|t| t.strip_suffix(" s")).and_then(|t| t.parse::<f64>().ok());
    assert!(waited.is_some_and(|s| (0.0..=60.0).contains(&s)), "{status}");
    assert_eq!(pmi(&status, 1), "has not spoken PMI", "{status}");
    assert!(listed_ranks(&runs(&status), client).iter().all(|r| r.3 == "running"), "{status}");
    running.signal("TERM");
    let marker = running.marker().to_string();
    let _ = running.wait_unchecked();
    let left = common::leftovers_after(&marker, common::LEFTOVER_GRACE);
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// `dpm status --json` asks a plain run for its live ranks' PMI states.
#[test]
fn status_json_says_which_pmi_call_a_rank_waits_in_since_when() {
    let runtime = std::env::temp_dir().join(unique("dpm-rt"));
    pmi_states(Dpm::run(waits_in_barrier()).env("DPM_RUNTIME_DIR", &runtime.to_string_lossy()).spawn(), &runtime, None);
    let _ = std::fs::remove_dir_all(&runtime);
}

/// Through a boot: the run's client forwards the ask to its run in the
/// boot, and the boot's status has the states.
#[test]
fn status_json_says_which_pmi_call_a_booted_rank_waits_in() {
    let boot = Boot::start(&[]);
    let args = waits_in_barrier();
    pmi_states(boot.run(&args.iter().map(String::as_str).collect::<Vec<_>>()).spawn(), &boot.dir, Some("boot"));
}

/// A plain run's table follows its ranks' ends; the file a SIGKILLed
/// `dpm run` leaves is removed by the next `dpm status` that looks.
#[test]
fn the_run_table_follows_exits_and_a_killed_runs_table_is_removed() {
    let runtime = std::env::temp_dir().join(unique("dpm-rt"));
    let rt = runtime.to_string_lossy().into_owned();
    let running = Dpm::run(["-n", "1", "sleep", "2", ":", "-n", "1", "sleep", "300"]).env("DPM_RUNTIME_DIR", &rt).spawn();
    let client = running.pid();
    let file = runtime.join(format!("run-{client}.json"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let states = loop {
        let states: Vec<String> =
            if file.exists() { listed_ranks(&status_json(&runtime)["runs"], client).into_iter().map(|r| r.3).collect() } else { Vec::new() };
        if states.first().is_some_and(|s| s != "running") || std::time::Instant::now() > deadline {
            break states;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(states, ["exited 0", "running"], "rank 0's end in the table");
    running.signal("KILL");
    let marker = running.marker().to_string();
    let out = running.wait_unchecked();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&out.status), Some(9), "{}", out.describe());
    assert!(file.exists(), "a SIGKILLed run cannot remove its table");
    let status = status_json(&runtime);
    assert!(status["runs"].as_array().is_some_and(|r| r.is_empty()), "{status}");
    assert!(!file.exists(), "dpm status left the table of a killed run");
    let left = common::leftovers_after(&marker, common::LEFTOVER_GRACE);
    assert!(left.is_empty(), "left behind: {left:?}");
    let _ = std::fs::remove_dir_all(&runtime);
}

/// A table whose pid is now another process (started after the table was
/// last written) or no process is removed when `dpm status` looks.
#[test]
fn a_table_whose_pid_was_reused_or_is_gone_is_removed() {
    let runtime = std::env::temp_dir().join(unique("dpm-rt"));
    std::fs::create_dir_all(&runtime).expect("create the runtime dir");
    std::fs::set_permissions(&runtime, std::os::unix::fs::PermissionsExt::from_mode(0o700)).expect("chmod");
    let table = |pid: u32| serde_json::json!({"client_pid": pid, "jobs": [], "ranks": []}).to_string();
    // This test's own process: alive and ours, but it started after this "old" table.
    let reused = runtime.join(format!("run-{}.json", std::process::id()));
    std::fs::write(&reused, table(std::process::id())).expect("write");
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600 * 24 * 365);
    std::fs::File::options().write(true).open(&reused).and_then(|f| f.set_modified(old)).expect("age the table");
    // A pid no process has (above the kernel's pid_max).
    let gone = runtime.join("run-4294967.json");
    std::fs::write(&gone, table(4_294_967)).expect("write");
    let status = status_json(&runtime);
    assert!(status["runs"].as_array().is_some_and(|r| r.is_empty()), "{status}");
    assert!(!reused.exists() && !gone.exists(), "stale tables were kept");
    let _ = std::fs::remove_dir_all(&runtime);
}

/// A tracer that hangs (a `gdb` first in PATH that never answers): each
/// rank is named as not traced within the bound, and the run still ends
/// with the timeout's status.
#[test]
fn a_hung_tracer_is_named_and_the_run_ends_at_its_timeout() {
    let dir = TempDir::new("hung-gdb");
    let fake = dir.path.join("gdb");
    std::fs::write(&fake, "#!/bin/sh\nexec sleep 600\n").expect("write the fake gdb");
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o700)).expect("chmod");
    let path = format!("{}:{}", dir.path_str(), std::env::var("PATH").unwrap_or_default());
    let out = Dpm::run(["--timeout", "3", "--get-stack-traces", "-n", "2", &program("deadlock")]).env("PATH", &path).output();
    out.assert_code(124);
    let host = hostname();
    for r in 0..2 {
        let line = format!("[rank {r} on {host}] not traced: gdb did not answer within 15 s");
        assert!(out.stderr_str().lines().any(|l| l == line), "no `{line}`\n{}", out.describe());
    }
    assert!(out.stderr_str().contains("timed out after 3 s"), "{}", out.describe());
}

/// A rank that another tracer holds (a debugger attached to it) cannot be
/// traced by dpm's: it is named so, the other rank's stack is there, and
/// the run ends with the timeout's status.
#[test]
fn a_rank_ptraced_by_someone_else_is_named_not_traced() {
    use std::io::BufRead;
    let gdb = gdb().expect("gdb");
    let dir = TempDir::new("mpir");
    let merged = TempFile::new("dpm-2to1", format!("#!/bin/sh\nexec '{}' \"$@\" 2>&1\n", dpm_bin()).as_bytes(), 0o700);
    let mut running = Dpm::run(["--timeout", "12", "--get-stack-traces", "-n", "2", &program("mpir_job"), &dir.path_str()]).exe(&merged.path).spawn();
    running.wait_for_lines("mpir_job world", 2);
    // Rank 0 held by a gdb of the test's own until dpm has reported.
    let held = ready_pids(&running.stdout_so_far(), "world")[0];
    let mut holder = std::process::Command::new(&gdb)
        .args(["-nx", "-batch", "-p", &held.to_string(), "-ex", "echo HOLDING\\n", "-ex", "shell sleep 60"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run gdb");
    let mut lines = std::io::BufReader::new(holder.stdout.take().expect("piped")).lines();
    assert!(lines.any(|l| l.is_ok_and(|l| l.contains("HOLDING"))), "the holding gdb did not attach");
    // The report: each rank's state, then its stack or why there is none.
    let host = hostname();
    running.wait_for_lines(&format!("[rank 0 on {host}] no stack"), 1);
    running.wait_for_lines(&format!("[rank 1 on {host}] #"), 1);
    // The held rank's end reaches dpm only once its tracer lets go (the
    // kernel tells the tracer first): the holder goes now.
    let _ = holder.kill();
    let _ = holder.wait();
    let out = running.wait_unchecked();
    assert_eq!(out.code(), 124, "{}", out.describe());
    let text = out.stdout_str();
    assert!(text.lines().any(|l| l.starts_with(&format!("[rank 0 on {host}] no stack: gdb printed none"))), "{}", out.describe());
}
