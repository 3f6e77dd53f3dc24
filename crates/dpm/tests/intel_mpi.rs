//! Intel MPI 2021 under `dpm run`: its runtime (PyPI `impi-rt`, installed
//! on first use by `tests/fixtures/impi.sh` into `target/impi`) runs the
//! MPICH-built programs of `tests/programs` (MPICH's ABI, libmpi.so.12):
//! a job over two virtual nodes; a spawn whose children are all on node 1
//! (Intel MPI aborts in `MPI_Init` when `PMI_process_mapping` numbers a
//! job's nodes from anything but 0); and `-bind-to core`, which Intel MPI
//! takes as its pinning (under a launcher other than its own Hydra it does
//! not pin, so `I_MPI_PIN` changes nothing: its `I_MPI_DEBUG` pin table shows
//! what dpm bound). Without the fixture the tests say SKIPPED (and fail
//! under `CI=true`).

mod common;

use std::path::{Path, PathBuf};

use common::{repo_root, Dpm, Output};

/// Intel MPI's prefix (`I_MPI_ROOT`), if it can be installed here.
fn impi() -> Option<PathBuf> {
    match common::fixture_up(&repo_root().join("tests/fixtures/impi.sh")) {
        Ok(info) => Some(common::fixture_info(&info, "PREFIX").into()),
        Err(reason) => {
            common::fixture_unavailable("Intel MPI runtime", &reason);
            None
        }
    }
}

fn program(name: &str) -> String {
    repo_root().join("tests/programs/bin").join(name).display().to_string()
}

/// `dpm run ARGS` with Intel MPI's libraries in place of MPICH's.
fn run(prefix: &Path, args: &[&str]) -> Dpm {
    let lib = prefix.join("lib");
    Dpm::run(args).env("I_MPI_ROOT", &prefix.display().to_string()).env("LD_LIBRARY_PATH", &lib.display().to_string())
}

fn assert_intel(out: &Output) {
    let all = format!("{}{}", out.stdout_str(), out.stderr_str());
    assert!(all.contains("Intel(R) MPI Library"), "the ranks ran Intel MPI\n{}", out.describe());
}

#[test]
fn a_job_over_two_virtual_nodes() {
    let Some(prefix) = impi() else { return };
    let out =
        run(&prefix, &["--virtual-nodes", "2", "--map-by", "node", "--report-placement", "-genv", "I_MPI_DEBUG", "4", "-n", "4", &program("ring")]).output();
    out.assert_success();
    out.assert_stdout_contains("ring ok size=4 sum=64");
    assert_intel(&out);
    let hosts: std::collections::HashSet<String> = common::placement(&out.stderr_str()).into_iter().map(|p| p.2).collect();
    assert_eq!(hosts.len(), 2, "ranks on both nodes\n{}", out.describe());
}

#[test]
fn spawned_children_all_on_node_1_start() {
    let Some(prefix) = impi() else { return };
    // The parents fill node 0's two slots: the children go to node 1.
    let out = run(&prefix, &["--virtual-nodes", "2", "--report-placement", "-genv", "I_MPI_DEBUG", "4", "-n", "2", &program("spawn_args"), "2"])
        .env("I_MPI_SPAWN", "on")
        .output();
    out.assert_success();
    out.assert_stdout_contains("spawn ok children=2 parents=2");
    for child in 0..2 {
        out.assert_stdout_contains(&format!("child {child} ok argc=4 size=2"));
    }
    assert_intel(&out);
    let placed = common::placement(&out.stderr_str());
    let host_of = |job: u32| placed.iter().filter(|p| p.0 == job).map(|p| p.2.clone()).collect::<std::collections::HashSet<_>>();
    let (parents, children) = (host_of(0), host_of(1));
    assert_eq!(children.len(), 1, "the children on one node\n{}", out.describe());
    assert!(parents.is_disjoint(&children), "children on another node than the parents\n{}", out.describe());
}

#[test]
fn bind_to_core_is_intel_mpis_pinning() {
    let Some(prefix) = impi() else { return };
    for pin in ["on", "off"] {
        let out = run(&prefix, &["--report-bindings", "-bind-to", "core", "-genv", "I_MPI_DEBUG", "5", "-genv", "I_MPI_PIN", pin, "-n", "2", &program("ring")])
            .output();
        out.assert_success();
        assert_intel(&out);
        // dpm: "[host:pid] Rank R bound to … (cpus L)".
        let reported: Vec<(String, String)> = out
            .err_lines()
            .into_iter()
            .filter_map(|l| {
                let rest = l.split_once("] Rank ")?.1;
                let rank = rest.split_whitespace().next()?.to_string();
                Some((rank, rest.split_once("(cpus ")?.1.split(')').next()?.to_string()))
            })
            .collect();
        // Intel MPI: "[0] MPI startup(): R  PID  HOST  {L}".
        let pinned: Vec<(String, String)> = out
            .lines()
            .into_iter()
            .chain(out.err_lines())
            .filter_map(|l| {
                let w: Vec<&str> = l.strip_prefix("[0] MPI startup(): ")?.split_whitespace().collect();
                match w.as_slice() {
                    [rank, pid, _host, set] if pid.parse::<u32>().is_ok() && set.starts_with('{') => {
                        Some((rank.to_string(), set.trim_matches(|c| c == '{' || c == '}').to_string()))
                    }
                    _ => None,
                }
            })
            .collect();
        assert_eq!(reported.len(), 2, "I_MPI_PIN={pin}: dpm reports both ranks\n{}", out.describe());
        let mut pinned = pinned;
        pinned.sort();
        let mut reported = reported;
        reported.sort();
        assert_eq!(pinned, reported, "I_MPI_PIN={pin}: Intel MPI's pin table is dpm's binding\n{}", out.describe());
    }
}
