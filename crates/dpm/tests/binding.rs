//! CPU binding, mapping, memory binding and GPU assignment, black-box: each
//! rank reads its own `Cpus_allowed_list` (from /proc/self/status) and must
//! be exactly what `--report-bindings` printed for it, for every binding and
//! mapping, on one node and on `--virtual-nodes 4`; spawned ranks land on
//! objects no live rank holds, and so do a warm spawn's pooled children
//! when they are claimed (moved there if they started elsewhere); the same
//! cases as Hydra give Hydra's CPUs.
//!
//! This machine has 2 CPUs: the synthetic hwloc topologies of
//! `crates/binding/tests/topologies` (2 packages x 2 NUMA x 8 cores x 2
//! threads; GPU boxes) are given with `HWLOC_XMLFILE`, and dpm binds only
//! within its own affinity, so the real checks use the CPUs that exist. The
//! interleaved one numbers CPU 1 in the other package, so core, socket, numa
//! and hwthread each put two ranks on CPUs 0 and 1 apart. Expected sets are
//! computed by `dpm-binding` for this process's own affinity (so the test
//! holds on a machine with more CPUs); on 2 CPUs they are spelled out too.

mod common;

use std::collections::BTreeMap;

use common::{repo_root, Dpm, Output};
use dpm_binding::{BindPolicy, Binder, CpuSet, Topology};

/// The rank's line: "R <rank> cpus <list> gpus <CUDA_VISIBLE_DEVICES> <ROCR_VISIBLE_DEVICES>".
const SHOW: &str =
    r#"echo "R $PMI_RANK cpus $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status) gpus ${CUDA_VISIBLE_DEVICES:--} ${ROCR_VISIBLE_DEVICES:--}""#;

fn topology(name: &str) -> String {
    repo_root().join("crates/binding/tests/topologies").join(name).to_string_lossy().into_owned()
}

/// This process's CPUs (what dpm, its child, may use).
fn own_cpus() -> CpuSet {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let list = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap().trim().to_string();
    CpuSet::parse_list(&list).unwrap()
}

/// Each rank's CPUs as it read them, and as `--report-bindings` said.
struct Bound {
    read: BTreeMap<String, String>,
    reported: BTreeMap<String, String>,
    gpus: BTreeMap<String, String>,
    out: Output,
}

fn run(args: &[&str], xml: Option<&str>, n: u32) -> Bound {
    let n = n.to_string();
    let mut all: Vec<&str> = vec!["--report-bindings"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-n", &n, "sh", "-c", SHOW]);
    let mut dpm = Dpm::run(all);
    if let Some(x) = xml {
        dpm = dpm.env("HWLOC_XMLFILE", &topology(x));
    }
    let out = dpm.output();
    out.assert_success();
    let mut read = BTreeMap::new();
    let mut gpus = BTreeMap::new();
    for l in out.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        if let ["R", rank, "cpus", list, "gpus", cuda, rocr] = w.as_slice() {
            read.insert(rank.to_string(), list.to_string());
            gpus.insert(rank.to_string(), format!("{cuda} {rocr}"));
        }
    }
    let mut reported = BTreeMap::new();
    for l in out.err_lines() {
        // [host:pid] Rank R bound to ... (cpus LIST)...  |  ... Rank R is not bound ...
        let Some(rest) = l.split_once("] Rank ").map(|(_, r)| r) else { continue };
        let rank = rest.split_whitespace().next().unwrap().to_string();
        let list = match rest.split_once("(cpus ") {
            Some((_, tail)) => tail.split(')').next().unwrap().to_string(),
            None => own_cpus().to_list(),
        };
        reported.insert(rank, list);
    }
    assert_eq!(read.len(), n.parse::<usize>().unwrap(), "every rank reports\n{}", out.describe());
    assert_eq!(read, reported, "what the ranks run on is what --report-bindings said\n{}", out.describe());
    Bound { read, reported, gpus, out }
}

/// What dpm-binding computes for one node of `n` ranks under these options.
fn expected(args: &[&str], xml: &str, n: usize) -> Vec<String> {
    let mut p = BindPolicy::default();
    for pair in args.chunks(2) {
        match pair[0] {
            "-bind-to" => p.set_bind(pair[1]).unwrap(),
            "-map-by" => drop(p.set_map(pair[1]).unwrap()),
            "--cpus-per-rank" => p.set_cpus_per_rank(pair[1]).unwrap(),
            "-membind" => p.set_membind(pair[1]).unwrap(),
            "--gpus-per-rank" | "-gpus-per-proc" => p.set_gpus_per_rank(pair[1]).unwrap(),
            o => panic!("{o}"),
        }
    }
    let topo = Topology::from_xml(&std::fs::read_to_string(topology(xml)).unwrap()).unwrap();
    let mut b = Binder::new(topo, &own_cpus(), None).unwrap();
    b.bind(&p, n, false).unwrap().ranks.iter().map(|r| r.cpus.as_ref().unwrap_or(&own_cpus()).to_list()).collect()
}

fn lists(b: &Bound) -> Vec<String> {
    b.read.values().cloned().collect()
}

const INTER: &str = "2s2n8c2t-interleaved.xml";

#[test]
fn every_binding_and_mapping_on_one_node() {
    let two = own_cpus().to_list() == "0-1";
    let cases: &[(&[&str], u32, &[&str])] = &[
        (&["-bind-to", "hwthread"], 2, &["0", "1"]),
        (&["-bind-to", "core"], 2, &["0", "1"]),
        (&["-bind-to", "l2cache"], 2, &["0", "1"]),
        (&["-bind-to", "l3cache"], 2, &["0", "1"]),
        (&["-bind-to", "numa"], 2, &["0", "1"]),
        (&["-bind-to", "socket"], 2, &["0", "1"]),
        (&["-bind-to", "board"], 2, &["0-1", "0-1"]),
        (&["-bind-to", "hwthread:2"], 1, &["0-1"]),
        (&["-bind-to", "rr"], 2, &["0", "1"]),
        (&["-bind-to", "user:0+1,1"], 3, &["0-1", "1", "0-1"]),
        (&["-bind-to", "none"], 2, &["0-1", "0-1"]),
        (&["-bind-to", "core", "-map-by", "socket"], 2, &["0", "1"]),
        (&["-bind-to", "core", "-map-by", "numa"], 2, &["0", "1"]),
        (&["-map-by", "ppr:1:socket"], 2, &["0", "1"]),
        (&["-map-by", "ppr:1:socket:pe=2"], 2, &["0", "1"]),
        (&["--cpus-per-rank", "2"], 1, &["0-1"]),
        (&["-bind-to", "core", "-membind", "numa"], 2, &["0", "1"]),
    ];
    for (args, n, on_two) in cases {
        let b = run(args, Some(INTER), *n);
        assert_eq!(lists(&b), expected(args, INTER, *n as usize), "{args:?}");
        if two {
            assert_eq!(lists(&b), *on_two, "{args:?} on CPUs 0-1");
        }
    }
}

#[test]
fn the_machines_own_topology() {
    // No HWLOC_XMLFILE: hwloc's discovery of this machine.
    let n = own_cpus().len().min(4) as u32;
    let b = run(&["-bind-to", "hwthread"], None, n);
    let cpus: Vec<String> = own_cpus().iter().take(n as usize).map(|c| c.to_string()).collect();
    assert_eq!(lists(&b), cpus, "one hardware thread each, in order");
}

#[test]
fn oversubscribed_bindings_say_so() {
    let b = run(&["-bind-to", "board"], Some(INTER), 2);
    b.out.assert_stderr_contains("oversubscribed");
    let quiet = run(&["-bind-to", "board:overload-allowed"], Some(INTER), 2);
    assert!(!quiet.out.stderr_str().contains("oversubscribed"), "{}", quiet.out.describe());
    let apart = run(&["-bind-to", "core"], Some(INTER), 2);
    assert!(!apart.out.stderr_str().contains("oversubscribed"), "{}", apart.out.describe());
}

#[test]
fn four_virtual_nodes_bind_each_their_own() {
    for args in [&["-bind-to", "hwthread"][..], &["-bind-to", "core", "-map-by", "socket"], &["-bind-to", "user:1,0"]] {
        let mut all = vec!["--virtual-nodes", "4"];
        all.extend_from_slice(args);
        let b = run(&all, Some(INTER), 8);
        // Two ranks per node, each node binding its own: the same pattern 4 times.
        let per_node = expected(args, INTER, 2);
        let want: Vec<String> = (0..4).flat_map(|_| per_node.clone()).collect();
        let mut got: Vec<(u32, String)> = b.read.iter().map(|(r, l)| (r.parse().unwrap(), l.clone())).collect();
        got.sort();
        assert_eq!(got.into_iter().map(|(_, l)| l).collect::<Vec<_>>(), want, "{args:?}");
        assert_eq!(b.reported.len(), 8);
    }
}

#[test]
fn gpus_by_vendor_and_a_clear_error_without() {
    let b = run(&["-bind-to", "core", "--gpus-per-rank", "1"], Some("gpu-amd.xml"), 2);
    let expected_cpus = expected(&["-bind-to", "core"], "gpu-amd.xml", 2);
    assert_eq!(lists(&b), expected_cpus);
    let gpus: Vec<String> = b.gpus.values().cloned().collect();
    assert_eq!(gpus, ["- 0", "- 1"], "ROCR_VISIBLE_DEVICES, one each\n{}", b.out.describe());
    let b = run(&["-gpus-per-proc", "2"], Some("gpu-nvidia.xml"), 2);
    assert_eq!(b.gpus.values().cloned().collect::<Vec<_>>(), ["0,1 -", "2,3 -"], "Hydra's spelling; CUDA_VISIBLE_DEVICES");
    b.out.assert_stderr_contains("gpus cuda0,cuda1");
    let out = Dpm::run(["--gpus-per-rank", "1", "-n", "1", "true"]).env("HWLOC_XMLFILE", &topology(INTER)).output();
    assert_ne!(out.code(), 0, "{}", out.describe());
    out.assert_stderr_contains("--gpus-per-rank 1: this node's topology shows no GPU");
    assert_eq!(out.stderr_str().matches("shows no GPU").count(), 1, "said once\n{}", out.describe());
}

#[test]
fn bad_values_are_usage_errors() {
    for args in [&["-bind-to", "cpu"][..], &["-map-by", "ppr:0:core"], &["--cpus-per-rank", "0"], &["-membind", "user:0"], &["--gpus-per-rank", "x"]] {
        let mut all = args.to_vec();
        all.extend_from_slice(&["-n", "1", "true"]);
        Dpm::run(all).output().assert_code(2);
    }
    Dpm::run(["-bind-to", "none", "--cpus-per-rank", "2", "-n", "1", "true"]).output().assert_code(2);
}

/// A request the node cannot meet is a usage error, as prterun refuses it
/// ("mapping too low", "too many procs"): more CPUs per rank than the node
/// has, or more ranks per object than it has units to bind them to —
/// unless sharing is asked for (`:overload-allowed`, `:oversubscribe`) or
/// nothing is bound. Before, each ran with at most a warning.
#[test]
fn requests_that_cannot_be_met_are_usage_errors_unless_sharing_is_asked_for() {
    let refused: &[(&[&str], &str)] = &[
        (&["--cpus-per-rank", "4096"], "--cpus-per-rank 4096: this node has only "),
        (&["-map-by", "core:pe=4096"], "-map-by :pe= 4096: this node has only "),
        (&["-map-by", "ppr:4096:core"], "-map-by ppr:4096:core: a core here has only 1 core(s)"),
        (&["-map-by", "ppr:2:core"], "-map-by ppr:2:core: a core here has only 1 core(s)"),
    ];
    for (args, says) in refused {
        let mut all = args.to_vec();
        all.extend_from_slice(&["-n", "2", "true"]);
        let out = Dpm::run(&all).env("HWLOC_XMLFILE", &topology(INTER)).output();
        out.assert_code(2);
        out.assert_stderr_contains(says);
    }
    let allowed: &[&[&str]] = &[
        &["--cpus-per-rank", "4096", "-bind-to", "hwthread:overload-allowed"],
        &["-map-by", "ppr:4096:core:overload-allowed"],
        &["-map-by", "ppr:2:core:oversubscribe"],
        &["-map-by", "ppr:2:core", "-bind-to", "core:overload-allowed"],
        &["-map-by", "ppr:2:core", "-bind-to", "none"],
    ];
    for args in allowed {
        let mut all = args.to_vec();
        all.extend_from_slice(&["-n", "2", "true"]);
        Dpm::run(&all).env("HWLOC_XMLFILE", &topology(INTER)).output().assert_success();
    }
}

/// Hydra's CPUs for the same cases (this machine's topology; Hydra's
/// `mpiexec.hydra` from the venv).
#[test]
fn the_same_cpus_as_hydra() {
    let hydra = repo_root().join(".venv/bin/mpiexec.hydra");
    assert!(hydra.is_file(), "{} is missing: run ./scripts/setup.sh", hydra.display());
    for (bind, n) in [("hwthread", 2), ("core", 2), ("socket", 2), ("numa", 1), ("user:0+1,1", 3), ("none", 2)] {
        // Hydra's mpiexec can die of SIGPIPE under load (its own race).
        let out = common::hydra_rerun(|| std::process::Command::new(&hydra).args(["-bind-to", bind, "-n", &n.to_string(), "sh", "-c", SHOW]).output().unwrap());
        assert!(out.status.success(), "hydra -bind-to {bind}: {}", String::from_utf8_lossy(&out.stderr));
        let mut theirs = BTreeMap::new();
        for l in String::from_utf8_lossy(&out.stdout).lines() {
            let w: Vec<&str> = l.split_whitespace().collect();
            if let ["R", rank, "cpus", list, ..] = w.as_slice() {
                theirs.insert(rank.to_string(), list.to_string());
            }
        }
        let ours = run(&["-bind-to", bind], None, n);
        assert_eq!(ours.read, theirs, "-bind-to {bind}: dpm and Hydra");
    }
}

#[test]
fn spawned_ranks_take_free_objects() {
    let python = repo_root().join(".venv/bin/python");
    assert!(python.is_file(), "{} is missing: run ./scripts/setup.sh", python.display());
    let script = repo_root().join("tests/programs/bind_spawn.py");
    let out = Dpm::run(["--report-bindings", "-bind-to", "hwthread", "-n", "1", python.to_str().unwrap(), script.to_str().unwrap(), "1"]).output();
    out.assert_success();
    let line = |role: &str| {
        out.lines()
            .into_iter()
            .find_map(|l| l.strip_prefix(&format!("{role} 0 cpus ")).map(str::to_string))
            .unwrap_or_else(|| panic!("no {role} line\n{}", out.describe()))
    };
    let (parent, child) = (CpuSet::parse_list(&line("parent")).unwrap(), CpuSet::parse_list(&line("child")).unwrap());
    if own_cpus().len() >= 2 {
        assert!(!parent.intersects(&child), "the child got a CPU no live rank holds: parent {parent}, child {child}\n{}", out.describe());
    }
    // The spawned rank's report (job.rank) says what it ran on.
    let reported = out.err_lines().into_iter().find(|l| l.contains("] Rank 1.0 ")).unwrap_or_else(|| panic!("no report for the child\n{}", out.describe()));
    assert!(reported.contains(&format!("(cpus {child})")), "{reported}");
}

#[test]
fn claimed_pooled_children_take_free_objects() {
    let python = repo_root().join(".venv/bin/python");
    assert!(python.is_file(), "{} is missing: run ./scripts/setup.sh", python.display());
    let script = repo_root().join("tests/programs/bind_warm.py");
    let iters = 4;
    // Slots enough that the pool always has room (as in warm_spawn.rs).
    let args = ["-v", "--warm-spawn", "--report-bindings", "-bind-to", "core", "-hosts", "localhost:32", "-n", "1"];
    let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    all.extend([python.display().to_string(), script.display().to_string(), iters.to_string()]);
    let out = Dpm::run(&all).output();
    out.assert_success();
    out.assert_stdout_contains("done\n");
    let why = out.describe();
    // The first spawn misses; the second claims the pool filled after the
    // first child's end or — its parent quicker than the learning delay —
    // misses too and fills it (warm_spawn.rs); every later one claims.
    let claimed = out.err_lines().into_iter().filter(|l| l.starts_with("dpm: warm spawn: claimed ")).count();
    let missed = out.err_lines().into_iter().filter(|l| l.starts_with("dpm: warm spawn: miss for ")).count();
    assert!((1..=2).contains(&missed) && claimed + missed == iters, "{claimed} claims, {missed} misses\n{why}");
    let cpus_of = |prefix: &str| -> CpuSet {
        let list = out.lines().into_iter().find_map(|l| l.strip_prefix(prefix).map(str::to_string)).unwrap_or_else(|| panic!("no '{prefix}' line\n{why}"));
        CpuSet::parse_list(&list).unwrap()
    };
    let parent = cpus_of("parent 0 cpus ");
    // The claims' reports: "[host:pid] Rank J.0 bound to … (cpus L) (claimed)".
    let reports: Vec<CpuSet> = out
        .err_lines()
        .into_iter()
        .filter(|l| l.ends_with(" (claimed)"))
        .map(|l| CpuSet::parse_list(l.split_once("(cpus ").unwrap().1.split(')').next().unwrap()).unwrap())
        .collect();
    assert_eq!(reports.len(), claimed, "a report per claim\n{why}");
    // Another core than the parent's exists unless one core is all there is.
    let room = parent != own_cpus();
    for i in 0..iters {
        let child = cpus_of(&format!("child {i} cpus "));
        if room {
            assert!(!child.intersects(&parent), "child {i} on {child}, which the parent ({parent}) holds\n{why}");
        }
        if i >= missed {
            assert!(reports.contains(&child), "child {i} runs on {child}, which no claim reported\n{why}");
        }
    }
}
