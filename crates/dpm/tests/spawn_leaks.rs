//! Leaks over many spawns: 200 `MPI_Comm_spawn`s under `dpm run` leave no
//! file descriptor, process, zombie or thread behind (tests/programs
//! spawn_loop.c reports its own; /proc shows dpm's children).

mod common;

use std::collections::{HashMap, HashSet};
use std::fs;
use std::thread;
use std::time::Duration;

use common::{assert_no_fail_lines, program, Dpm, Output};

/// `(state, ppid)` of every process, from /proc/<pid>/stat.
fn proc_states() -> Vec<(u32, char, u32)> {
    let mut all = Vec::new();
    let Ok(dir) = fs::read_dir("/proc") else { return all };
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(stat) = fs::read_to_string(entry.path().join("stat")) else { continue };
        // pid (comm) state ppid ...; comm may contain spaces and parentheses.
        let Some(close) = stat.rfind(')') else { continue };
        let mut rest = stat[close + 1..].split_whitespace();
        let state = rest.next().and_then(|s| s.chars().next()).unwrap_or('?');
        let ppid = rest.next().and_then(|s| s.parse().ok()).unwrap_or(0);
        all.push((pid, state, ppid));
    }
    all
}

/// A `name start=A end=B` line of spawn_loop's report.
fn start_end(out: &Output, name: &str) -> (i64, i64) {
    let prefix = format!("{name} start=");
    let line = out.lines().into_iter().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("no '{name} start=' line\n{}", out.describe()));
    let field = |key: &str| -> i64 {
        line.split_whitespace().find_map(|w| w.strip_prefix(key)).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no {key} in {line:?}"))
    };
    (field("start="), field("end="))
}

#[test]
fn two_hundred_spawns_leak_no_fds_processes_or_zombies() {
    const ITERATIONS: u32 = 200;
    let running = Dpm::run(["-n", "1", &program("spawn_loop"), &ITERATIONS.to_string()]).watchdog(Duration::from_secs(150)).spawn();
    let dpm = running.pid();
    // Sample dpm's zombie children while the loop runs. A zombie exists for a
    // moment between a child's exit and dpm's waitpid; one still there after
    // dpm has reaped five children first seen after it was never reaped
    // (dpm's progress decides, not a clock: a loaded machine only slows both).
    let mut reaped_since: HashMap<u32, HashSet<u32>> = HashMap::new();
    let mut seen: HashSet<u32> = HashSet::new();
    let mut max_zombies = 0;
    let mut stale: Vec<u32> = Vec::new();
    let mut samples = 0;
    loop {
        let states = proc_states();
        if !states.iter().any(|&(pid, _, _)| pid == dpm) {
            break;
        }
        let zombies: Vec<u32> = states.iter().filter(|&&(_, s, pp)| pp == dpm && s == 'Z').map(|&(p, _, _)| p).collect();
        if let Some(&(_, 'Z', _)) = states.iter().find(|&&(pid, _, _)| pid == dpm) {
            break; // dpm itself has exited; its children are init's now
        }
        samples += 1;
        max_zombies = max_zombies.max(zombies.len());
        let children: HashSet<u32> = states.iter().filter(|&&(_, _, pp)| pp == dpm).map(|&(p, _, _)| p).collect();
        for &child in &children {
            if seen.insert(child) {
                for later in reaped_since.values_mut() {
                    later.insert(child);
                }
            }
        }
        reaped_since.retain(|pid, _| zombies.contains(pid));
        for pid in zombies {
            reaped_since.entry(pid).or_default();
        }
        for (pid, later) in &reaped_since {
            if later.iter().filter(|p| !children.contains(p)).count() >= 5 && !stale.contains(pid) {
                stale.push(*pid);
            }
        }
        thread::sleep(Duration::from_millis(25));
    }
    let out = running.wait();
    assert_no_fail_lines(&out);
    out.assert_success();
    out.assert_stdout_contains(&format!("spawn_loop ok iterations={ITERATIONS}"));
    assert!(samples > 10, "dpm ended before the zombie scan could sample it ({samples} samples)\n{}", out.describe());
    assert!(stale.is_empty(), "dpm left zombie children unreaped while it reaped five later ones: {stale:?}\n{}", out.describe());
    assert!(max_zombies <= 3, "up to {max_zombies} zombie children of dpm at once\n{}", out.describe());
    let (fd0, fd1) = start_end(&out, "dpm fds");
    assert!((fd1 - fd0).abs() <= 2, "dpm's fd count went from {fd0} to {fd1} over {ITERATIONS} spawns\n{}", out.describe());
    let (p0, p1) = start_end(&out, "parent fds");
    assert!((p1 - p0).abs() <= 2, "the parent's fd count went from {p0} to {p1}\n{}", out.describe());
    let (t0, t1) = start_end(&out, "dpm threads");
    assert_eq!(t0, t1, "dpm's thread count changed\n{}", out.describe());
    out.assert_stdout_contains("dpm children end=1 zombies=0");
}
