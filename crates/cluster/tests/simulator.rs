//! The startup simulator under calibrated costs and contention: the
//! orderings the black-box tests observe hold in virtual time (a fence
//! completes after the last node's entry, the ring follows the tree's
//! pre-order, a spawn is answered after its children started), contention
//! is monotonic, and `dpm model`'s answers are stable and consistent.

use std::time::Duration;

use dpm_cluster::calibration::Calibration;
use dpm_cluster::model::{answer, fanouts, predict, Query};
use dpm_cluster::sim::{boot_time, costs, simulate, Bootstrap, Scenario, Workload, SPAWNS};
use dpm_cluster::{get, put, Cluster, Layout, Step};
use dpm_kvs::{JobId, KvsDesign, NodeId};
use dpm_launcher::run::FailurePolicy;
use dpm_proto::tree;

const LIMIT: Duration = Duration::from_secs(3600);

fn scenario(nodes: usize, ppn: u32) -> Scenario {
    Scenario { nodes, ppn, kvs: KvsDesign::Auto, fanout: 32, bootstrap: Bootstrap::Ssh, booted: false, workload: Workload::Hello, cores: 0, one_host: false }
}

/// A cluster under the sample's calibrated costs with `cores` per node.
fn calibrated(nodes: usize, ppn: u32, fanout: usize, kvs: KvsDesign, cores: usize) -> Cluster {
    let costs = costs(&Calibration::sample(), cores, false);
    Cluster::new(Layout { slots: ppn, fanout, kvs, costs, ..Layout::nodes(nodes) })
}

#[test]
fn a_fence_completes_after_the_last_node_entered_it_under_calibrated_costs() {
    for design in KvsDesign::ALL {
        let mut c = calibrated(7, 3, 2, design, 2);
        let ex = vec![Step::Init, put("bc-{rank}", "card-{rank}"), Step::Barrier, get("bc-{next}"), Step::Finalize, Step::Exit(0)];
        let mut late = ex.clone();
        late.insert(2, Step::Work(Duration::from_millis(30)));
        c.script("ex", ex).script("late", late);
        // The late rank is the last one: on the deepest node of the tree.
        let job = c.launch_mixed(&[("ex", 20), ("late", 1)]);
        assert_eq!(c.run_until(LIMIT), Some(0), "{design:?}: {:?}", c.said);
        let ranks = c.ranks(job);
        assert_eq!(ranks[20].node, 6);
        // Replies 0-3: the start sequence; 4: the put; 5: the fence.
        let last_entry = ranks.iter().map(|p| p.reply_times[4]).max().unwrap();
        let late_entry = ranks[20].reply_times[4];
        assert_eq!(last_entry, late_entry, "{design:?}: the late rank entered last");
        for p in &ranks {
            assert!(
                p.reply_times[5] > last_entry,
                "{design:?}: rank {} left the fence at {:?}, before the last entry at {last_entry:?}",
                p.rank.0,
                p.reply_times[5]
            );
            assert_eq!(p.proc.values[&format!("bc-{}", (p.rank.0 + 1) % 21)], Ok(format!("card-{}", (p.rank.0 + 1) % 21)));
        }
    }
}

/// The tree's nodes in pre-order (a parent, then each child's subtree).
fn pre_order(parent: Option<NodeId>, nodes: usize, fanout: usize, out: &mut Vec<usize>) {
    for child in tree::children(parent, nodes, fanout) {
        out.push(child.0);
        pre_order(Some(child), nodes, fanout, out);
    }
}

#[test]
fn the_ring_follows_the_trees_pre_order() {
    for (nodes, fanout) in [(7, 2), (10, 3), (5, 32)] {
        let mut c = calibrated(nodes, 2, fanout, KvsDesign::Allgather, 0);
        c.script("ring", vec![Step::Init2, Step::Ring("v{rank}".into()), Step::Finalize, Step::Exit(0)]);
        let job = c.launch("ring", 2 * nodes as u32, None);
        assert_eq!(c.run_until(LIMIT), Some(0), "{:?}", c.said);
        let mut by_ring: Vec<(usize, usize)> = c.ranks(job).iter().map(|p| (p.proc.values["ring-rank"].clone().unwrap().parse().unwrap(), p.node)).collect();
        by_ring.sort();
        let mut order: Vec<usize> = by_ring.iter().map(|r| r.1).collect();
        order.dedup();
        let mut expected = Vec::new();
        pre_order(None, nodes, fanout, &mut expected);
        assert_eq!(order, expected, "{nodes} nodes, fan-out {fanout}");
    }
}

/// Under `continue` (and `-disable-auto-cleanup`) a spawn is answered once
/// its children started (one that cannot start is the spawn's error); under
/// `end` at once, and its children
/// are forked after the answer left (`run::spawn::answers_before_start`).
#[test]
fn each_spawn_is_answered_before_or_after_its_children_started_as_the_policy_says() {
    for policy in [FailurePolicy::EndRun, FailurePolicy::SurviveSpawnedJobs, FailurePolicy::KeepOthers] {
        let mut c = calibrated(4, 2, 2, KvsDesign::Auto, 2);
        c.set_failure_policy(policy);
        let child = vec![Step::Init, put("bc-{rank}", "x"), Step::Barrier, Step::Finalize, Step::Exit(0)];
        let spawn = Step::Spawn { n: 3, script: "child".into() };
        c.script("child", child).script("parent", vec![Step::Init, spawn.clone(), spawn, Step::Finalize, Step::Exit(0)]);
        let parent = c.launch("parent", 1, None);
        assert_eq!(c.run_until(LIMIT), Some(0), "{:?}", c.said);
        let p = &c.ranks(parent)[0];
        for (i, reply) in [4, 5].into_iter().enumerate() {
            let kids = c.ranks(JobId(parent.0 + 1 + i as u32));
            assert_eq!(kids.len(), 3);
            let (asked, answered) = (p.reply_times[reply - 1], p.reply_times[reply]);
            let first_fork = kids.iter().map(|k| k.forked_at).min();
            for k in &kids {
                assert!(k.started_at > asked, "{policy:?} spawn {i}: asked {asked:?}, child started {:?}", k.started_at);
            }
            match policy {
                FailurePolicy::SurviveSpawnedJobs | FailurePolicy::KeepOthers => {
                    assert!(kids.iter().all(|k| answered > k.forked_at), "{policy:?} spawn {i}: answered {answered:?}")
                }
                FailurePolicy::EndRun => assert!(Some(answered) < first_fork, "{policy:?} spawn {i}: answered {answered:?}, first fork {first_fork:?}"),
            }
        }
    }
}

/// `Accept` holds the parent until its children's MPI_Init is over (each
/// has come to its `Finalize`), as MPI_Comm_spawn's accept does; a failed
/// spawn's accept returns at once.
#[test]
fn a_parent_asks_for_its_next_spawn_only_after_its_children_are_up() {
    let mut c = calibrated(4, 2, 2, KvsDesign::Auto, 2);
    let child = vec![Step::Init, put("bc-{rank}", "x"), Step::Barrier, Step::Work(Duration::from_millis(20)), Step::Finalize, Step::Exit(0)];
    let spawn = |n| Step::Spawn { n, script: "child".into() };
    let parent = vec![Step::Init, spawn(3), Step::Accept, spawn(3), Step::Accept, spawn(100_000), Step::Accept, Step::Finalize, Step::Exit(0)];
    c.script("child", child).script("parent", parent);
    let job = c.launch("parent", 1, None);
    assert_eq!(c.run_until(LIMIT), Some(0), "{:?}", c.said);
    let p = &c.ranks(job)[0];
    let first_kids = c.ranks(JobId(job.0 + 1));
    let up = first_kids.iter().map(|k| *k.request_times.last().unwrap()).max().unwrap();
    let ended = first_kids.iter().map(|k| k.ended_at.unwrap()).max().unwrap();
    // Requests: 4 of the start, then the spawns (5th, 6th, 7th), then finalize.
    let second = p.request_times[5];
    assert!(second >= up, "second spawn asked at {second:?}, before the first one's children were up ({up:?})");
    assert!(second < ended, "the accept does not wait for the children's end: asked {second:?}, last end {ended:?}");
    assert!(p.proc.replies[6].contains("rc=") && !p.proc.replies[6].contains("rc=0"), "the third spawn fails: {:?}", p.proc.replies[6]);
    assert!(p.request_times[7] - p.reply_times[6] < Duration::from_millis(1), "a failed spawn's accept returns at once");
}

#[test]
fn more_ranks_per_node_on_fewer_cores_is_never_faster() {
    let cal = Calibration::sample();
    // The same 64 ranks, packed ever tighter on nodes of 4 cores (booted:
    // fewer nodes also come up sooner, which is not the question here).
    let mut last = Duration::ZERO;
    for (nodes, ppn) in [(16, 4), (8, 8), (4, 16), (2, 32), (1, 64)] {
        let t = simulate(&cal, &Scenario { cores: 4, booted: true, ..scenario(nodes, ppn) }).unwrap().total;
        assert!(t >= last, "{nodes} × {ppn} on 4 cores: {t:?} < {last:?}");
        last = t;
    }
    // The same layout on fewer cores; and virtual nodes on one host.
    let mut last = Duration::ZERO;
    for cores in [16, 8, 4, 2, 1] {
        let t = simulate(&cal, &Scenario { cores, ..scenario(4, 8) }).unwrap().total;
        assert!(t >= last, "{cores} cores: {t:?} < {last:?}");
        last = t;
    }
    let spread = simulate(&cal, &Scenario { cores: 2, ..scenario(4, 8) }).unwrap().total;
    let one_host = simulate(&cal, &Scenario { cores: 2, one_host: true, ..scenario(4, 8) }).unwrap().total;
    assert!(one_host > spread, "4 nodes sharing 2 cores ({one_host:?}) beat 4 × 2 cores ({spread:?})");
    // Library starts queue for the cores: 8 ranks' CPU on 1 core add up.
    let lib = cal.field("mpi_lib_start", "cpu_us").unwrap() + cal.field("mpi_init", "cpu_us").unwrap();
    let one = simulate(&cal, &Scenario { cores: 1, ..scenario(1, 8) }).unwrap().total;
    let nine = simulate(&cal, &Scenario { cores: 9, ..scenario(1, 8) }).unwrap().total;
    assert!(one >= nine + lib * 6, "1 core {one:?}, 9 cores {nine:?}, a library's CPU {lib:?}");
}

#[test]
fn daemons_start_their_children_one_after_another_and_booted_skips_it() {
    let cal = Calibration::sample();
    let serial = cal.get("daemon_start_ssh").unwrap();
    let first = cal.field("daemon_start_ssh", "latency_us").unwrap();
    let auth = cal.get("link_auth").unwrap();
    // Flat: the launcher's last of 8 children is up 7 serial starts after the first.
    assert_eq!(boot_time(&cal, &Scenario { fanout: 32, ..scenario(8, 1) }).unwrap(), first + serial * 7);
    // Fan-out 2, 6 nodes: two levels, the second after the first's link is
    // up; node 5 is the second child of the launcher's second child.
    assert_eq!(boot_time(&cal, &Scenario { fanout: 2, ..scenario(6, 1) }).unwrap(), (first + serial) * 2);
    // Without a single-daemon latency, the first is a serial start and its authentication.
    let mut plain = cal.clone();
    plain.costs.get_mut("daemon_start_ssh").unwrap().extra.clear();
    assert_eq!(boot_time(&plain, &Scenario { fanout: 32, ..scenario(8, 1) }).unwrap(), serial * 8 + auth);
    assert_eq!(boot_time(&cal, &Scenario { booted: true, ..scenario(64, 1) }).unwrap(), auth);
    let fork = boot_time(&cal, &Scenario { bootstrap: Bootstrap::Fork, ..scenario(64, 1) }).unwrap();
    let ssh = boot_time(&cal, &scenario(64, 1)).unwrap();
    assert!(fork < ssh);
    let cold = simulate(&cal, &scenario(8, 4)).unwrap();
    let booted = simulate(&cal, &Scenario { booted: true, ..scenario(8, 4) }).unwrap();
    assert_eq!(cold.total - booted.total, cold.phases[0].1 - booted.phases[0].1, "booting changes the bootstrap phase alone");
}

#[test]
fn every_workload_runs_and_its_phases_add_up() {
    let cal = Calibration::sample();
    for workload in Workload::ALL {
        for kvs in KvsDesign::ALL {
            let out = simulate(&cal, &Scenario { workload, kvs, fanout: 2, ..scenario(5, 4) }).unwrap();
            let names: Vec<&str> = out.phases.iter().map(|p| p.0).collect();
            assert_eq!(names, ["bootstrap", "launch", "library", "pmi", "exit"]);
            assert_eq!(out.phases.iter().map(|p| p.1).sum::<Duration>(), out.total, "{workload:?} {kvs:?}");
            // MPI programs start MPICH; paper 004's raw PMI clients do not.
            let mpi = matches!(workload, Workload::Hello | Workload::SpawnLoop);
            assert_eq!(out.phases[2].1 >= cal.get("mpi_lib_start").unwrap(), mpi, "{workload:?}: {:?}", out.phases);
            assert_eq!(out.spawn.is_some(), workload == Workload::SpawnLoop);
        }
    }
    let hello = simulate(&cal, &scenario(8, 8)).unwrap();
    let all = simulate(&cal, &Scenario { workload: Workload::PmiAll, ..scenario(8, 8) }).unwrap();
    let neighbours = simulate(&cal, &Scenario { workload: Workload::PmiNeighbours, ..scenario(8, 8) }).unwrap();
    assert!(all.phases[3].1 > neighbours.phases[3].1, "64 gets per rank take longer than 2");
    assert!(hello.total > Duration::ZERO);
    let spawn = simulate(&cal, &Scenario { workload: Workload::SpawnLoop, ..scenario(4, 4) }).unwrap().spawn.unwrap();
    assert!(spawn > cal.get("spawn_base").unwrap() && spawn * SPAWNS as u32 <= LIMIT);
}

#[test]
fn the_model_is_stable_and_its_best_is_the_fastest_candidate() {
    let cal = Calibration::sample();
    let q = Query { scenario: scenario(16, 4), kvs: None, fanout: None, limit: 1024 };
    let a = answer(&cal, &q).unwrap();
    assert_eq!(a, answer(&cal, &q).unwrap(), "a rerun gives identical numbers");
    assert_eq!(a.candidates.len(), KvsDesign::ALL.len() * fanouts(16).len());
    let fastest = a.candidates.iter().map(|c| c.startup_s).fold(f64::INFINITY, f64::min);
    assert_eq!(a.best.startup_s, fastest);
    assert!(a.candidates.iter().any(|c| (c.kvs.as_str(), c.fanout) == (a.best.kvs.as_str(), a.best.fanout)));
    // The asked (default) design and fan-out is one of the candidates.
    let asked = a.candidates.iter().find(|c| c.kvs == "auto" && c.fanout == 32);
    assert!(asked.is_none(), "16 nodes: fan-outs stop at a flat tree (16)");
    assert_eq!((a.asked.kvs.as_str(), a.asked.fanout, a.asked.method.as_str()), ("auto", 32, "simulated"));
    let sum: f64 = a.asked.breakdown.values().sum();
    assert!((sum - a.asked.startup_s).abs() < 1e-9, "{sum} vs {}", a.asked.startup_s);
    // Fan-out 32 over 16 nodes is as flat as 16.
    let flat = a.candidates.iter().find(|c| c.kvs == "auto" && c.fanout == 16).unwrap();
    assert_eq!(flat.startup_s, a.asked.startup_s);
    // The same question asked for one design and fan-out answers the same.
    let one = answer(&cal, &Query { kvs: Some(KvsDesign::Tree), fanout: Some(4), ..q.clone() }).unwrap();
    let tree4 = a.candidates.iter().find(|c| c.kvs == "tree" && c.fanout == 4).unwrap();
    assert_eq!((one.candidates.len(), one.asked.startup_s), (1, tree4.startup_s));
}

#[test]
fn above_the_limit_the_model_extrapolates_close_to_full_simulation() {
    let cal = Calibration::sample();
    for kvs in [KvsDesign::Allgather, KvsDesign::Dkvs] {
        let sc = Scenario { kvs, fanout: 8, ..scenario(128, 4) };
        let full = predict(&cal, &sc, 512).unwrap();
        let fitted = predict(&cal, &sc, 128).unwrap();
        assert_eq!(full.method, "simulated");
        assert_eq!(fitted.method, "extrapolated from 32,16,8 nodes");
        assert_eq!(full.breakdown["bootstrap"], fitted.breakdown["bootstrap"], "the bootstrap is exact at any scale");
        let error = (fitted.startup_s - full.startup_s).abs() / full.startup_s;
        assert!(error < 0.25, "{kvs:?}: fitted {} s vs simulated {} s", fitted.startup_s, full.startup_s);
    }
    // Larger is never predicted faster.
    let mut last = 0.0;
    for nodes in [256, 1024, 4096, 16384] {
        let t = predict(&cal, &scenario(nodes, 64), 1024).unwrap().startup_s;
        assert!(t >= last, "{nodes} nodes: {t} < {last}");
        last = t;
    }
}

#[test]
fn bad_scenarios_are_refused_not_run() {
    let cal = Calibration::sample();
    assert!(simulate(&cal, &scenario(0, 4)).is_err());
    assert!(simulate(&cal, &Scenario { fanout: 0, ..scenario(2, 2) }).is_err());
    assert!(simulate(&cal, &Scenario { workload: Workload::PmiAll, ..scenario(64, 64) }).is_err(), "ranks² gets beyond the limit");
    assert!(simulate(&cal, &scenario(1 << 12, 64)).is_err(), "beyond full simulation");
    assert!(boot_time(&cal, &scenario(usize::MAX, 1)).is_err(), "beyond the model");
    let huge_fanout = Scenario { fanout: usize::MAX, ..scenario(3, 2) };
    assert_eq!(simulate(&cal, &huge_fanout).unwrap(), simulate(&cal, &Scenario { fanout: 3, ..scenario(3, 2) }).unwrap(), "flat either way");
    assert!("rsh".parse::<Bootstrap>().is_err() && "ring".parse::<Workload>().is_err());
    assert_eq!("pmi-all".parse::<Workload>().unwrap(), Workload::PmiAll);
    let mut no_slurm = cal.clone();
    no_slurm.costs.remove("daemon_start_slurm");
    assert!(simulate(&no_slurm, &Scenario { bootstrap: Bootstrap::Slurm, ..scenario(2, 2) }).is_err());
}

/// The sample with a host CPU curve for MPI ranks (`mpi_rank_cpu`: b = 20 ms
/// a rank, c = 0.5 ms a rank per other rank on the host).
fn with_host_curve() -> Calibration {
    let mut cal = Calibration::sample();
    let mut cost = cal.costs["rank_fork_exec"].clone();
    (cost.median_us, cost.p10_us, cost.p90_us) = (20_000.0, 15_000.0, 25_000.0);
    cost.extra = [("pair_us".to_string(), serde_json::json!(500.0))].into_iter().collect();
    cal.costs.insert("mpi_rank_cpu".into(), cost);
    cal
}

#[test]
fn on_one_host_the_wall_is_at_least_the_hosts_cpu_over_its_cores() {
    // Virtual nodes of one host of 2 cores: whatever the critical path, the
    // ranks' CPU (and the daemons') cannot take less than its sum over 2.
    let cal = with_host_curve();
    for (nodes, ppn) in [(1, 16), (4, 8), (16, 4)] {
        let ranks = (nodes * ppn as usize) as u32;
        let sc = Scenario { cores: 2, one_host: true, booted: true, ..scenario(nodes, ppn) };
        let per_rank = cal.get("mpi_rank_cpu").unwrap() + cal.field("mpi_rank_cpu", "pair_us").unwrap() * ranks;
        let t = simulate(&cal, &sc).unwrap().total;
        assert!(t >= per_rank * ranks / 2, "{nodes} × {ppn}: {t:?} < {:?}", per_rank * ranks / 2);
        let client = cal.field("pmi_client_start", "cpu_us").unwrap();
        let t = simulate(&cal, &Scenario { workload: Workload::PmiNeighbours, ..sc }).unwrap().total;
        assert!(t >= client * ranks / 2, "pmi-neighbours {nodes} × {ppn}: {t:?} < {:?}", client * ranks / 2);
    }
    // A rank costs more among more ranks on its host: per rank, 64 on one
    // host take longer than 16.
    let per = |ppn: u32| simulate(&cal, &Scenario { cores: 2, one_host: true, booted: true, ..scenario(1, ppn) }).unwrap().total / ppn;
    assert!(per(64) > per(16), "{:?} a rank at 64, {:?} at 16", per(64), per(16));
    // On dedicated nodes the curve counts a node's ranks, not the job's.
    let spread = simulate(&cal, &Scenario { cores: 2, booted: true, ..scenario(16, 4) }).unwrap().total;
    let packed = simulate(&cal, &Scenario { cores: 2, one_host: true, booted: true, ..scenario(16, 4) }).unwrap().total;
    assert!(packed > spread * 4, "16 nodes on one host {packed:?}, on 16 hosts {spread:?}");
}

#[test]
fn a_spawn_reaches_at_most_its_childrens_nodes_so_its_cost_saturates() {
    let cal = Calibration::sample();
    let spawn = |nodes: usize| {
        let sc = Scenario { workload: Workload::SpawnLoop, booted: true, ..scenario(nodes, 4) };
        predict(&cal, &sc, 256).unwrap().spawn_s.unwrap()
    };
    let (near, far, farther) = (spawn(64), spawn(4096), spawn(65536));
    assert!(near > 0.0);
    // A spawn of 4 children reaches 4 nodes: the job's size adds only its
    // tree's depth, not its nodes (linear in nodes it was 60× at 4,096).
    assert!(far < near * 2.0 && farther < near * 2.0, "64 nodes {near} s, 4096 {far} s, 65536 {farther} s");
    // Simulated in full, the spawn hardly grows with the job either.
    let full = |nodes: usize| simulate(&cal, &Scenario { workload: Workload::SpawnLoop, booted: true, ..scenario(nodes, 4) }).unwrap().spawn.unwrap();
    assert!(full(256) < full(16) * 2, "{:?} at 256 nodes, {:?} at 16", full(256), full(16));
}
