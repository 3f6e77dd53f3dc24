//! The `OMPI_*` variables an Open MPI rank finds in its environment before
//! `MPI_Init` (scripts and GPU-selection wrappers read them) under `dpm run
//! --pmi pmix`, against Open MPI's own `mpirun` (PRRTE, `.venv-ompi`) on the
//! same command: the key set and every value, on one node, for spawned
//! children, and on two virtual nodes (where mpirun cannot go: by PRRTE's
//! rules). Without the wheel the tests say SKIPPED (and fail under `CI=true`).

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{repo_root, Dpm, TempFile};

/// Each rank prints `rank R: NAME=value ...`, its Open MPI placement
/// variables sorted (the names mpirun sets for every job).
const SHOW: &str =
    "env | grep -E '^OMPI_(COMM_WORLD_|WORLD_|UNIVERSE_SIZE|NUM_APP_CTX)' | sort | tr '\\n' ' ' | sed \"s/^/rank $OMPI_COMM_WORLD_RANK: /\"; echo";

fn venv() -> Option<PathBuf> {
    let venv = repo_root().join(".venv-ompi");
    if venv.join("bin/mpirun").is_file() {
        return Some(venv);
    }
    common::fixture_unavailable("Open MPI (.venv-ompi)", "mpirun missing (./scripts/setup.sh --tests installs it)");
    None
}

/// Open MPI's `mpirun ARGS` (a hang guard of 120 s), its stdout lines sorted.
fn mpirun(venv: &std::path::Path, args: &[&str]) -> Vec<String> {
    let out = Command::new("timeout")
        .arg("120")
        .arg(venv.join("bin/mpirun"))
        .args(["--allow-run-as-root", "--oversubscribe"])
        .args(args)
        .output()
        .expect("run mpirun");
    assert!(out.status.success(), "mpirun {args:?}: {out:?}");
    sorted_lines(&String::from_utf8_lossy(&out.stdout))
}

/// `dpm run --pmi pmix ARGS` (the PMIx library from the wheel), its stdout lines sorted.
fn dpm(venv: &std::path::Path, args: &[&str]) -> Vec<String> {
    let prefix = venv.display().to_string();
    let mut all = vec!["--pmi", "pmix", "-genv", "OPAL_PREFIX", &prefix];
    all.extend(args);
    let out = Dpm::run(&all).output();
    out.assert_success();
    sorted_lines(&out.stdout_str())
}

fn sorted_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text.lines().map(|l| l.trim_end().to_string()).filter(|l| !l.is_empty()).collect();
    lines.sort();
    lines
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// What PRRTE gives rank `rank` of `size` (one app): `local` ranks of the
/// job on its node, it the `local_rank`th, after `before` ranks of other jobs there.
fn expected(rank: usize, size: usize, local_rank: usize, local: usize, before: usize, universe: usize) -> String {
    format!(
        "rank {rank}: OMPI_COMM_WORLD_LOCAL_RANK={local_rank} OMPI_COMM_WORLD_LOCAL_SIZE={local} OMPI_COMM_WORLD_NODE_RANK={} \
         OMPI_COMM_WORLD_RANK={rank} OMPI_COMM_WORLD_SIZE={size} OMPI_NUM_APP_CTX=1 OMPI_UNIVERSE_SIZE={universe} \
         OMPI_WORLD_LOCAL_SIZE={local} OMPI_WORLD_SIZE={size}",
        before + local_rank
    )
}

#[test]
fn one_node_gets_mpirun_s_variables() {
    let Some(venv) = venv() else { return };
    for n in [1, 2] {
        let n_text = n.to_string();
        let args = ["-n", &n_text, "/bin/sh", "-c", SHOW];
        let got = dpm(&venv, &args);
        // The universe is the node's slots (its CPUs), as mpirun's.
        let want: Vec<String> = (0..n).map(|r| expected(r, n, r, n, 0, cpus().max(n))).collect();
        assert_eq!(got, want, "dpm, -n {n}");
        assert_eq!(mpirun(&venv, &args), want, "mpirun, -n {n}");
    }
}

#[test]
fn spawned_children_get_mpirun_s_variables() {
    let Some(venv) = venv() else { return };
    let Some(spawn) = common::ompi_program("spawn") else { return };
    // The child prints its variables, then becomes the spawn program's child.
    let child = TempFile::new("dpm-ompi-child", format!("#!/bin/sh\n{SHOW}\nexec {spawn}\n").as_bytes(), 0o755);
    let args = ["-n", "1", &spawn, "2", &child.path_str()];
    let children = |lines: Vec<String>| lines.into_iter().filter(|l| l.starts_with("rank ")).collect::<Vec<_>>();
    // After the parent on the node: node ranks 1 and 2.
    let want: Vec<String> = (0..2).map(|r| expected(r, 2, r, 2, 1, cpus().max(2))).collect();
    assert_eq!(children(dpm(&venv, &args)), want, "dpm");
    assert_eq!(children(mpirun(&venv, &args)), want, "mpirun");
}

#[test]
fn two_virtual_nodes_number_each_node_s_ranks() {
    let Some(venv) = venv() else { return };
    let got = dpm(&venv, &["--virtual-nodes", "2", "--map-by", "node", "-n", "3", "/bin/sh", "-c", SHOW]);
    // Ranks 0 and 2 on the first node, 1 on the second; the universe both nodes' slots.
    let universe = (2 * cpus()).max(3);
    let want = vec![expected(0, 3, 0, 2, 0, universe), expected(1, 3, 0, 1, 0, universe), expected(2, 3, 1, 2, 0, universe)];
    assert_eq!(got, want);
}
