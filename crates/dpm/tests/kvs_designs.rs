//! The KVS designs (`dpm run --kvs`) and the PMI-2 extensions end to end:
//! real daemon trees of virtual nodes (a 3-level tree with `--tree-fanout 2`),
//! unmodified MPICH (PMI-1) under every design, Slurm's libpmi2 for the ring
//! (`PMIX_Ring`), and a raw wire client (`tests/programs/pmi2_ext.c`) for
//! hints, waiting gets and srcid, which no client library exposes.

mod common;

use std::collections::BTreeMap;

use common::{hello, program, Dpm, Output, TempDir};

const DESIGNS: [&str; 5] = ["allgather", "tree", "dkvs", "direct", "auto"];

/// Four virtual nodes, two ranks each, in a 3-level tree under dpm:
/// dpm → nodes 0 and 1; node 0 → nodes 2 and 3.
const TREE: [&str; 8] = ["--virtual-nodes", "4", "--tree-fanout", "2", "-ppn", "2", "-n", "8"];

fn ext(design: &str, steps: &[&str]) -> Output {
    ext_in(design, &TempDir::new("dpm-ext-sync"), steps)
}

/// [`ext`] with `sync` as the ranks' `EXT_SYNC_DIR` (for `await` steps).
fn ext_in(design: &str, sync: &TempDir, steps: &[&str]) -> Output {
    let mut args = vec!["--kvs", design];
    args.extend_from_slice(&TREE);
    let prog = program("pmi2_ext");
    args.push(&prog);
    args.extend_from_slice(steps);
    let out = Dpm::run(args).env("EXT_SYNC_DIR", &sync.path_str()).output();
    out.assert_success();
    out.assert_stdout_lacks("FAIL");
    for r in 0..8 {
        out.assert_stdout_contains(&format!("ext ok rank {r}\n"));
    }
    out
}

fn mpich_ring_and_hello(design: &str) {
    let out = Dpm::run(["--kvs", design, "--virtual-nodes", "4", "-n", "8", &program("ring")]).output();
    out.assert_success();
    out.assert_stdout_contains("ring ok size=8 sum=288");
    let mut args = vec!["--kvs", design];
    args.extend_from_slice(&TREE);
    let hello = hello();
    args.push(&hello);
    let out = Dpm::run(args).output();
    out.assert_success();
    for r in 0..8 {
        out.assert_stdout_contains(&format!("hello from rank {r} of 8 on host"));
    }
    out.assert_stdout_contains("sum of ranks = 28 (expected 28)");
}

#[test]
fn mpich_runs_unchanged_under_allgather() {
    mpich_ring_and_hello("allgather");
}

#[test]
fn mpich_runs_unchanged_under_tree() {
    mpich_ring_and_hello("tree");
}

#[test]
fn mpich_runs_unchanged_under_dkvs() {
    mpich_ring_and_hello("dkvs");
}

#[test]
fn mpich_runs_unchanged_under_direct() {
    mpich_ring_and_hello("direct");
}

#[test]
fn mpich_runs_unchanged_under_auto() {
    mpich_ring_and_hello("auto");
}

#[test]
fn the_design_comes_from_dpm_kvs_and_a_bad_one_is_refused() {
    let out = Dpm::run(["--virtual-nodes", "2", "-n", "2", &program("ring")]).env("DPM_KVS", "dkvs").output();
    out.assert_success();
    let out = Dpm::run(["-n", "1", "true"]).env("DPM_KVS", "gossip").output();
    out.assert_code(2);
    out.assert_stderr_contains("unknown KVS design 'gossip'");
    let out = Dpm::run(["--kvs", "gossip", "-n", "1", "true"]).output();
    out.assert_code(2);
    out.assert_stderr_contains("'--kvs gossip': unknown KVS design");
}

/// Puts are visible after the fence, a later put wins (in one epoch and
/// across fences), copies fetched before a fence are fetched again after it,
/// and a key nobody put is not found — whether gets name their source or not.
#[test]
fn put_fence_get_keeps_pmi_semantics_under_every_design() {
    for design in DESIGNS {
        ext(
            design,
            &[
                "put:k{r}:a{r}:sparse",
                "put:k{r}:A{r}:sparse",
                "put:d{r}:dense{r}:dense",
                "fence",
                "get:k{r+1}:x:A{r+1}",
                "get:k{r-1}:{r-1}:A{r-1}",
                "get:d{r+1}:-1:dense{r+1}",
                "fence",
                "put:k{r}:b{r}:sparse",
                "fence",
                "get:k{r+1}:-1:b{r+1}",
                "get:k{r-1}:{r-1}:b{r-1}",
                "get:k{r+1}:x:b{r+1}",
                "get:nothing:x:-",
                "get:nothing:{r+1}:-",
                "fence",
            ],
        );
    }
}

/// A waiting get blocks until the put, with no fence in between, and the
/// daemons go on serving everyone else meanwhile: rank 0 waits for a key
/// rank 7 puts only after it has read one that rank 1 — on rank 0's node —
/// puts once rank 0's waiting get is out; rank 6 puts what rank 3 waits for
/// once rank 3's get is out. So each get is sent before its put by what the
/// programs did (`await`), not by a sleep, and answered with the put's
/// value (else the program fails). A waiting get without srcid is answered
/// at the put (dkvs, auto with a sparse key) or once the put has ridden up
/// with its node's fence (allgather, tree, direct).
#[test]
fn a_waiting_get_is_answered_by_the_put_under_every_design() {
    for design in DESIGNS {
        let sync = TempDir::new("dpm-ext-sync");
        let out = ext_in(
            design,
            &sync,
            &[
                "put:x{r}:v{r}",
                "wget:x{r+1}:{r+1}:v{r+1}",
                "@1/await:wget-late-0",
                "@1/put:one:1:sparse",
                "@7/wget:one:1:1",
                "@7/put:late:seven",
                "@0/wget:late:7:seven",
                "@6/await:wget-late2-3",
                "@6/put:late2:two:sparse",
                "@3/wget:late2:x:two",
                "fence",
            ],
        );
        out.assert_stdout_contains("ext rank 0 wget late = seven\n");
        out.assert_stdout_contains("ext rank 7 wget one = 1\n");
        out.assert_stdout_contains("ext rank 3 wget late2 = two\n");
    }
}

#[test]
fn a_bad_hint_is_refused_and_the_client_goes_on() {
    let out = Dpm::run(["-n", "2", &program("pmi2_ext"), "badput:k{r}:v:loud", "put:k{r}:v{r}:dense", "fence", "get:k{r+1}:x:v{r+1}"]).output();
    out.assert_success();
    out.assert_stdout_lacks("FAIL");
    out.assert_stdout_contains("ext rank 0 badput refused: kvs-put: hint 'loud' is not sparse or dense");
    out.assert_stdout_contains("ext ok rank 1");
}

/// Identical gets from one node share one request: four ranks of node 0
/// wait for the same key of rank 4 (node 1), which puts it once all four
/// gets are out (`await`); node 0's daemon reports three of them coalesced
/// in its `-v` statistics.
#[test]
fn identical_gets_from_one_node_are_coalesced() {
    let sync = TempDir::new("dpm-ext-sync");
    let args = ["--kvs", "dkvs", "-v", "--virtual-nodes", "2", "-ppn", "4", "-n", "5", &program("pmi2_ext")];
    let steps = [
        "@4/await:wget-late-0",
        "@4/await:wget-late-1",
        "@4/await:wget-late-2",
        "@4/await:wget-late-3",
        "@4/sleep:200",
        "@4/put:late:v:sparse",
        "wget:late:4:v",
        "fence",
    ];
    let out = Dpm::run(args.iter().chain(steps.iter())).env("EXT_SYNC_DIR", &sync.path_str()).output();
    out.assert_success();
    out.assert_stdout_lacks("FAIL");
    let stats: Vec<String> = out.err_lines().into_iter().filter(|l| l.contains("kvs stats")).collect();
    assert_eq!(stats.len(), 2, "one statistics line per daemon\n{}", out.describe());
    assert!(stats.iter().any(|l| l.contains("remote_gets=1 coalesced=3")), "{stats:#?}\n{}", out.describe());
}

/// One ring from `pmi2_ring`'s output: ring rank → (PMI rank, left, right).
fn ring_round(out: &Output, round: u32, n: u32) -> BTreeMap<u32, (u32, String, String)> {
    let mut ring = BTreeMap::new();
    for line in out.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if let ["ring", r, "rank", rank, "pos", pos, "size", size, "left", left, "right", right] = w[..] {
            if r.parse::<u32>() == Ok(round) {
                assert_eq!(size.parse::<u32>(), Ok(n), "{line}");
                ring.insert(pos.parse().unwrap(), (rank.parse().unwrap(), left.to_string(), right.to_string()));
            }
        }
    }
    ring
}

/// Run `pmi2_ring` and check both of its rings against `order` (the PMI
/// ranks in ring order): positions, sizes, and each one's neighbours.
fn check_ring(args: &[&str], order: &[u32]) {
    let prog = program("pmi2_ring_order");
    let out = Dpm::run(args.iter().copied().chain([prog.as_str()])).output();
    out.assert_success();
    out.assert_stdout_lacks("FAIL");
    let n = order.len() as u32;
    for (round, tag) in [(0, 'r'), (1, 's')] {
        let ring = ring_round(&out, round, n);
        let got: Vec<u32> = ring.values().map(|(rank, _, _)| *rank).collect();
        assert_eq!(got, order, "round {round}: ring order\n{}", out.describe());
        for (pos, (_, left, right)) in &ring {
            let at = |p: u32| format!("{tag}{}", order[(p % n) as usize]);
            assert_eq!(left, &at(pos + n - 1), "round {round} pos {pos}: left\n{}", out.describe());
            assert_eq!(right, &at(pos + 1), "round {round} pos {pos}: right\n{}", out.describe());
        }
    }
}

#[test]
fn the_ring_keeps_each_node_together_in_tree_order() {
    // Fan-out 2 over four nodes: dpm → 0, 1 and 0 → 2, 3; the tree's
    // pre-order is nodes 0, 2, 3, 1, holding ranks 0-1, 4-5, 6-7, 2-3.
    check_ring(&TREE, &[0, 1, 4, 5, 6, 7, 2, 3]);
    // Flat, with a node of one rank: node order is rank order.
    check_ring(&["--virtual-nodes", "3", "-ppn", "2", "-n", "5"], &[0, 1, 2, 3, 4]);
    // Round robin: each node's ranks are still adjacent in the ring.
    check_ring(&["--virtual-nodes", "2", "--map-by", "node", "-n", "4"], &[0, 2, 1, 3]);
    // One node, in dpm's own process.
    check_ring(&["-n", "3"], &[0, 1, 2]);
    // A single process is its own left and right.
    check_ring(&["-n", "1"], &[0]);
}
