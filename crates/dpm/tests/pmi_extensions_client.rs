//! The PMI extensions of paper 004 (docs/pmi-extensions.md) through the C
//! client libraries: the ring exchange (PMI2_KVS_Ring and PMIX_Ring in
//! dpm's libpmi2, PMIX_Ring in Slurm's), puts with a SPARSE/DENSE hint,
//! and the waiting get. They need the server side of the extensions;
//! against a server without it the library returns PMI2_ERR_OTHER (14) and
//! the programs print `pmi2 FAIL ... rc=14`.

mod common;

use std::collections::HashMap;

use common::{assert_bench_line, pmi_bench, program, Dpm, Output};

/// One ring call as tests/programs/pmi2_ring prints it.
#[derive(Debug)]
struct RingLine {
    rank: u32,
    ring_rank: u32,
    size: u32,
    left: String,
    right: String,
}

/// `pmi2 ring CALL round N rank R ringrank X size S left L right V`
fn ring_lines(out: &Output, call: &str, round: u32) -> Vec<RingLine> {
    let head = format!("pmi2 ring {call} round {round} ");
    out.lines()
        .iter()
        .filter_map(|l| l.strip_prefix(&head))
        .map(|rest| {
            let w: Vec<&str> = rest.split(' ').collect();
            assert!(w.len() == 10 && w[0] == "rank" && w[2] == "ringrank" && w[4] == "size", "bad ring line {rest:?}");
            RingLine {
                rank: w[1].parse().unwrap(),
                ring_rank: w[3].parse().unwrap(),
                size: w[5].parse().unwrap(),
                left: w[7].to_string(),
                right: w[9].to_string(),
            }
        })
        .collect()
}

/// Every process of `n` took part once; the ring ranks are a permutation
/// of 0..n and each process got its ring neighbours' values (rank r's
/// value is `v<round>-<r>`), wrapping around.
fn assert_ring(out: &Output, call: &str, round: u32, n: u32) {
    let lines = ring_lines(out, call, round);
    assert_eq!(lines.len(), n as usize, "expected {n} {call} round {round} lines\n{}", out.describe());
    let by_ring: HashMap<u32, &RingLine> = lines.iter().map(|l| (l.ring_rank, l)).collect();
    assert_eq!(by_ring.len(), n as usize, "ring ranks are not distinct: {lines:?}");
    for l in &lines {
        assert_eq!(l.size, n, "ring size: {l:?}");
        let left = by_ring[&((l.ring_rank + n - 1) % n)];
        let right = by_ring[&((l.ring_rank + 1) % n)];
        assert_eq!(l.left, format!("v{round}-{}", left.rank), "left of ring rank {}: {lines:?}", l.ring_rank);
        assert_eq!(l.right, format!("v{round}-{}", right.rank), "right of ring rank {}: {lines:?}", l.ring_rank);
    }
}

fn assert_ring_run(out: &Output, second_call: &str, n: u32) {
    out.assert_success();
    out.assert_stdout_lacks("FAIL");
    assert_ring(out, "PMIX_Ring", 1, n);
    assert_ring(out, second_call, 2, n);
    for r in 0..n {
        out.assert_stdout_contains(&format!("pmi2 ring ok rank {r}\n"));
    }
}

#[test]
fn ring_through_dpm_libpmi2() {
    let out = Dpm::run(["-n", "4", &program("dpm_pmi2_ring")]).output();
    assert_ring_run(&out, "PMI2_KVS_Ring", 4);
}

#[test]
fn ring_one_process() {
    // Left and right are the caller's own value.
    let out = Dpm::run(["-n", "1", &program("dpm_pmi2_ring")]).output();
    assert_ring_run(&out, "PMI2_KVS_Ring", 1);
}

#[test]
fn ring_over_virtual_nodes() {
    // The ring keeps each node's ranks together and crosses the tree.
    let out = Dpm::run(["--virtual-nodes", "3", "-n", "6", &program("dpm_pmi2_ring")]).output();
    assert_ring_run(&out, "PMI2_KVS_Ring", 6);
}

#[test]
fn ring_through_slurm_libpmi2() {
    // Slurm's own PMIX_Ring against dpm's server (its ring-count reply key).
    let out = Dpm::run(["-n", "3", &program("pmi2_ring")]).output();
    assert_ring_run(&out, "PMIX_Ring", 3);
}

/// dpm_pmi2_hint on `n` ranks: every rank read every kind of key back.
fn assert_hints(out: &Output, n: u32) {
    out.assert_success();
    out.assert_stdout_lacks("FAIL");
    for r in 0..n {
        out.assert_stdout_contains(&format!("pmi2 hint ok rank {r}\n"));
    }
}

#[test]
fn put_hints_sparse_dense_none() {
    assert_hints(&Dpm::run(["-n", "4", &program("dpm_pmi2_hint")]).output(), 4);
}

#[test]
fn put_hints_over_virtual_nodes() {
    assert_hints(&Dpm::run(["--virtual-nodes", "2", "-n", "4", &program("dpm_pmi2_hint")]).output(), 4);
}

fn assert_getwait(out: &Output, n: u32) {
    out.assert_success();
    out.assert_stdout_lacks("FAIL");
    let lines = out.lines();
    for r in 1..n {
        let head = format!("pmi2 getwait rank {r} got late after ");
        let line = lines.iter().find(|l| l.starts_with(&head)).unwrap_or_else(|| panic!("no {head:?} line\n{}", out.describe()));
        let ms: f64 = line[head.len()..].trim_end_matches(" ms").parse().unwrap_or_else(|_| panic!("bad line {line:?}"));
        // Asked before rank 0 put it (300 ms later): the get waited.
        assert!(ms >= 100.0, "rank {r} got the key after {ms} ms: the get did not wait\n{}", out.describe());
    }
    for r in 0..n {
        out.assert_stdout_contains(&format!("pmi2 getwait ok rank {r}\n"));
    }
}

#[test]
fn waiting_get_without_fence() {
    assert_getwait(&Dpm::run(["-n", "3", &program("dpm_pmi2_getwait")]).output(), 3);
}

#[test]
fn waiting_get_across_virtual_nodes() {
    assert_getwait(&Dpm::run(["--virtual-nodes", "2", "-n", "4", &program("dpm_pmi2_getwait")]).output(), 4);
}

#[test]
fn bench_pmi_extension_patterns() {
    // bench/pmi's ring and fence-free patterns (PMI-2 only).
    let bench = pmi_bench();
    for pattern in ["ring", "dense-wait", "sparse-wait"] {
        let out = Dpm::run(["--virtual-nodes", "2", "-n", "4", &bench, "--reps", "2", pattern]).output();
        assert_bench_line(&out, pattern, 2, 4);
    }
}
