//! `dpm model` at scale: the exit phase is what its mechanism says (each
//! rank's end a frame the launcher takes), every design's curve over the
//! fan-outs has one minimum, extrapolation keeps close to full simulation
//! (the launcher's queue of frames included), and "best" is named only
//! beyond the model's error.

use dpm_cluster::calibration::Calibration;
use dpm_cluster::model::{answer, best_of, depth, fanouts, predict, Prediction, Query, FULL_RANKS, MODEL_ERROR};
use dpm_cluster::sim::{frame_cost, Bootstrap, Scenario, Workload};
use dpm_kvs::KvsDesign;

fn scenario(nodes: usize, ppn: u32, bootstrap: Bootstrap) -> Scenario {
    Scenario { nodes, ppn, kvs: KvsDesign::Auto, fanout: 32, bootstrap, booted: false, workload: Workload::Hello, cores: 0, one_host: false }
}

/// The built-in calibration (what `dpm model` answers with).
fn built_in() -> Calibration {
    Calibration::built_in().expect("the committed calibration validates")
}

#[test]
fn at_2000_nodes_the_exit_phase_is_the_launchers_frames_and_a_minority() {
    let cal = built_in();
    let frame = frame_cost(&cal, false).as_secs_f64();
    let hop = cal.get("link_hop").unwrap().as_secs_f64();
    for bootstrap in Bootstrap::ALL {
        let sc = scenario(2000, 50, bootstrap);
        let p = predict(&cal, &sc, FULL_RANKS).unwrap();
        let exit = p.breakdown["exit"];
        // One `Exited` frame per rank, taken one after another by the
        // launcher, then the last one's way up the tree.
        let frames = 100_000.0 * frame;
        let up = f64::from(depth(2000, 32)) * (hop + frame);
        assert!(exit >= frames + up - 1e-9 && exit <= 1.05 * (frames + up), "{bootstrap:?}: exit {exit} s against {frames} s of frames");
        assert!(exit < 0.5 * p.startup_s, "{bootstrap:?}: exit {exit} s of {} s", p.startup_s);
        let sum: f64 = p.breakdown.values().sum();
        assert!((sum - p.startup_s).abs() < 1e-9);
    }
}

/// The index of the minimum, after asserting the curve falls to it and
/// rises after it (flat stretches allowed): one minimum.
fn one_minimum(what: &str, curve: &[(usize, f64)]) -> usize {
    let min = (0..curve.len()).min_by(|&a, &b| curve[a].1.total_cmp(&curve[b].1)).unwrap();
    for w in curve[..=min].windows(2) {
        assert!(w[1].1 <= w[0].1 + 1e-9, "{what}: rises from fan-out {} to {} before the minimum: {curve:?}", w[0].0, w[1].0);
    }
    for w in curve[min..].windows(2) {
        assert!(w[1].1 >= w[0].1 - 1e-9, "{what}: falls from fan-out {} to {} after the minimum: {curve:?}", w[0].0, w[1].0);
    }
    min
}

#[test]
fn every_designs_curve_over_the_fanouts_has_one_minimum() {
    let cal = built_in();
    let cases = [
        (2000, 50, Bootstrap::Slurm, false, Workload::Hello),
        (2000, 50, Bootstrap::Ssh, false, Workload::Hello),
        (2000, 50, Bootstrap::Fork, false, Workload::PmiNeighbours),
        (2000, 50, Bootstrap::Slurm, true, Workload::Hello),
        (500, 64, Bootstrap::Ssh, false, Workload::PmiNeighbours),
        (256, 16, Bootstrap::Slurm, false, Workload::Hello),
    ];
    for (nodes, ppn, bootstrap, booted, workload) in cases {
        let sc = Scenario { booted, workload, ..scenario(nodes, ppn, bootstrap) };
        let a = answer(&cal, &Query { scenario: sc, kvs: None, fanout: None, limit: FULL_RANKS }).unwrap();
        for design in KvsDesign::ALL {
            let curve: Vec<(usize, f64)> = a.candidates.iter().filter(|c| c.kvs == design.name()).map(|c| (c.fanout, c.startup_s)).collect();
            assert_eq!(curve.len(), fanouts(nodes).len());
            one_minimum(&format!("{nodes}x{ppn} {bootstrap:?} booted={booted} {workload:?} {design:?}"), &curve);
        }
    }
}

#[test]
fn extrapolation_keeps_close_to_full_simulation_in_deep_trees() {
    // 256 nodes of 4 ranks simulated in full, and extrapolated from flat
    // trees of at most 32 nodes, for deep and shallow trees.
    let cal = built_in();
    for bootstrap in [Bootstrap::Fork, Bootstrap::Slurm] {
        for kvs in [KvsDesign::Allgather, KvsDesign::Direct, KvsDesign::Tree] {
            for fanout in [2, 4, 16] {
                let sc = Scenario { kvs, fanout, ..scenario(256, 4, bootstrap) };
                let full = predict(&cal, &sc, 1024).unwrap();
                let fitted = predict(&cal, &sc, 128).unwrap();
                assert_eq!((full.method.as_str(), fitted.method.as_str()), ("simulated", "extrapolated from 32,16,8 nodes"));
                let error = fitted.startup_s / full.startup_s - 1.0;
                // The flat samples route every frame through the launcher: for
                // designs whose traffic a deeper tree keeps below the root
                // (direct, tree) on one host's shared cores they are an upper
                // bound (`predict_with`), 12-14 % above with the calibration of
                // 2026-12-08; never below the model's error.
                let above = if bootstrap == Bootstrap::Fork && kvs != KvsDesign::Allgather { 0.15 } else { MODEL_ERROR };
                assert!(
                    error > -MODEL_ERROR && error < above,
                    "{bootstrap:?} {kvs:?} k={fanout}: fitted {} s vs simulated {} s",
                    fitted.startup_s,
                    full.startup_s
                );
            }
        }
    }
}

#[test]
fn the_launchers_queue_of_start_frames_holds_the_fence_as_full_simulation_does() {
    // A launcher slow enough per frame that 1,024 ranks' start frames
    // outlast the ranks' library start: the fence waits for them.
    let mut cal = built_in();
    let mut slow = cal.costs["frame_cpu"].clone();
    (slow.median_us, slow.p10_us, slow.p90_us) = (300.0, 250.0, 350.0);
    cal.costs.insert("frame_cpu".into(), slow);
    let sc = Scenario { kvs: KvsDesign::Allgather, fanout: 8, ..scenario(256, 4, Bootstrap::Fork) };
    let full = predict(&cal, &sc, 1024).unwrap();
    let fitted = predict(&cal, &sc, 128).unwrap();
    let frames = 1024.0 * 300e-6;
    assert!(full.breakdown["pmi"] + full.breakdown["library"] + full.breakdown["launch"] > frames, "the queue shows in full simulation: {full:?}");
    let error = fitted.startup_s / full.startup_s - 1.0;
    assert!(error.abs() < MODEL_ERROR, "fitted {} s vs simulated {} s", fitted.startup_s, full.startup_s);
    assert!(fitted.breakdown["exit"] >= frames, "every end frame is taken before the run ends");
}

fn candidate(kvs: &str, fanout: usize, startup_s: f64) -> Prediction {
    Prediction { kvs: kvs.into(), fanout, startup_s, breakdown: Default::default(), spawn_s: None, method: "simulated".into() }
}

#[test]
fn a_best_is_named_only_beyond_the_models_error() {
    let clear = best_of(&[candidate("allgather", 4, 2.0), candidate("tree", 4, 2.0 * (1.0 + MODEL_ERROR) + 0.01), candidate("dkvs", 8, 5.0)]).unwrap();
    assert!(clear.clear && clear.tied.is_empty() && clear.kvs == "allgather");
    let tie = best_of(&[candidate("allgather", 4, 2.0), candidate("tree", 4, 1.999), candidate("dkvs", 8, 2.1), candidate("direct", 2, 3.0)]).unwrap();
    assert_eq!((tie.kvs.as_str(), tie.fanout, tie.clear), ("tree", 4, false));
    let tied: Vec<(&str, usize)> = tie.tied.iter().map(|c| (c.kvs.as_str(), c.fanout)).collect();
    assert_eq!(tied, [("allgather", 4), ("dkvs", 8)]);
    assert!(best_of(&[]).is_none());
    // At 2,000 x 50 over Slurm the designs tie at their best fan-outs: no clear best.
    let a = answer(&built_in(), &Query { scenario: scenario(2000, 50, Bootstrap::Slurm), kvs: None, fanout: None, limit: FULL_RANKS }).unwrap();
    let fastest = a.candidates.iter().map(|c| c.startup_s).fold(f64::INFINITY, f64::min);
    assert_eq!(a.best.startup_s, fastest);
    for c in &a.candidates {
        let within = c.startup_s <= fastest * (1.0 + MODEL_ERROR);
        let listed = a.best.tied.iter().any(|t| (t.kvs.as_str(), t.fanout) == (c.kvs.as_str(), c.fanout))
            || (c.kvs.as_str(), c.fanout) == (a.best.kvs.as_str(), a.best.fanout);
        assert_eq!(within, listed, "{} {}: {} s against the fastest {fastest} s", c.kvs, c.fanout, c.startup_s);
    }
}

#[test]
fn dpm_runs_own_start_and_end_make_the_one_client_run_what_the_calibration_measured() {
    // The calibration's whole run of one raw PMI client is predicted as
    // measured: dpm's own start and end (`run_fixed`) are the rest.
    let cal = built_in();
    let whole = cal.field("pmi_client_start", "wall_one_us").unwrap();
    let one = Scenario { fanout: 1, workload: Workload::PmiNeighbours, cores: cal.machine.cpus as usize, one_host: true, ..scenario(1, 1, Bootstrap::Fork) };
    let t = dpm_cluster::sim::simulate(&cal, &one).unwrap();
    assert!(t.total.abs_diff(whole) < std::time::Duration::from_micros(2), "{:?} against {whole:?}", t.total);
    let fixed = dpm_cluster::sim::run_fixed(&cal);
    assert!(fixed > std::time::Duration::ZERO && fixed < whole, "{fixed:?}");
    assert_eq!(t.phases[0], ("bootstrap", fixed), "one forked node: the bootstrap is dpm's own start");
    // Every scenario's bootstrap carries it.
    let booted = Scenario { booted: true, ..scenario(8, 4, Bootstrap::Ssh) };
    assert_eq!(dpm_cluster::sim::boot_time(&cal, &booted).unwrap(), fixed + cal.get("link_auth").unwrap());
    // Without the one-client run measured, nothing is added.
    let mut bare = Calibration::sample();
    if let Some(c) = bare.costs.get_mut("pmi_client_start") {
        c.extra.remove("wall_one_us");
    }
    assert_eq!(dpm_cluster::sim::run_fixed(&bare), std::time::Duration::ZERO);
}

#[test]
fn the_model_chooses_a_fanout_only_beyond_its_error() {
    let cal = built_in();
    // Over ssh a parent starts its children one after another: at 256
    // nodes a flat-ish tree of 32 is slower than 4 by far more than 10 %.
    let ssh = Scenario { ppn: 16, ..scenario(256, 16, Bootstrap::Ssh) };
    let (k, why) = dpm_cluster::model::choose_fanout(&cal, &ssh, 32).unwrap();
    assert_eq!(k, 4, "{why}");
    assert!(why.contains("chosen by the model") && why.contains("with the default 32"), "{why}");
    // Its prediction is the search's: every other fan-out is slower.
    let a = answer(&cal, &Query { scenario: ssh.clone(), kvs: Some(KvsDesign::Auto), fanout: None, limit: 64 }).unwrap();
    assert_eq!((a.best.fanout, a.best.clear), (4, true));
    // Virtual nodes of this 2-core host: the fan-outs tie, the default stays
    // (a flat tree whose daemons' start is a small share: none other tried).
    for nodes in [2, 4, 16, 64] {
        let fork = Scenario { cores: 2, one_host: true, ..scenario(nodes, 4, Bootstrap::Fork) };
        let (k, why) = dpm_cluster::model::choose_fanout(&cal, &fork, 32).unwrap();
        assert_eq!(k, 32, "{nodes} virtual nodes: {why}");
        assert!(why.contains("(the default)"), "{why}");
        let tie = why.contains("within its ±10 %") || why.contains("no fan-out can be faster beyond its ±10 %");
        assert!(if nodes <= 2 { why.contains("the same flat tree") } else { tie }, "{why}");
    }
}

#[test]
fn the_model_chooses_a_design_for_auto_only_beyond_its_error() {
    use dpm_cluster::model::{choose, Free};
    let cal = built_in();
    let both = Free { fanout: true, kvs: true };
    // MPICH's hello on this machine's calibration: the designs tie (auto is
    // allgather for its unhinted keys), so auto's rule stays, and says so.
    for (nodes, bootstrap) in [(16, Bootstrap::Fork), (256, Bootstrap::Ssh), (2000, Bootstrap::Slurm)] {
        let sc = Scenario { cores: if bootstrap == Bootstrap::Fork { 2 } else { 0 }, one_host: bootstrap == Bootstrap::Fork, ..scenario(nodes, 16, bootstrap) };
        let c = choose(&cal, &sc, 32, both).unwrap();
        assert_eq!(c.kvs, KvsDesign::Auto, "{nodes} nodes: {:?}", c.why);
        assert_eq!(c.why.len(), 2, "a line for the fan-out and one for the design: {:?}", c.why);
        assert!(c.why[1].starts_with("kvs auto (auto's per-key rule"), "{:?}", c.why);
        // On one host MPI_Init dominates: the PMI exchange and the exit are
        // too small a share for any design to win beyond the error, and no
        // design is simulated; at 2,000 nodes they are compared, and tie.
        let skipped = c.why[1].contains("no design can be faster beyond its ±10 %");
        assert!(skipped || c.why[1].contains("within its ±10 % of the fastest"), "{:?}", c.why);
        assert!(skipped || bootstrap != Bootstrap::Fork, "{:?}", c.why);
    }
    // Where moving every card to every node is dear (a byte costing 1000x
    // this machine's), allgather — and auto's rule for unhinted keys — loses
    // beyond the error: the model picks a design that fetches instead.
    let mut dear = built_in();
    dear.costs.get_mut("link_byte").unwrap().median_us *= 1000.0;
    let sc = scenario(256, 16, Bootstrap::Ssh);
    let c = choose(&dear, &sc, 32, both).unwrap();
    assert!(matches!(c.kvs, KvsDesign::Tree | KvsDesign::Dkvs | KvsDesign::Direct), "{:?}: {:?}", c.kvs, c.why);
    assert!(c.why[1].starts_with(&format!("kvs {} chosen by the model", c.kvs.name())), "{:?}", c.why);
    let auto = predict(&dear, &Scenario { kvs: KvsDesign::Auto, fanout: 32, ..sc.clone() }, 64).unwrap().startup_s;
    let picked = predict(&dear, &Scenario { kvs: c.kvs, fanout: c.fanout, ..sc.clone() }, 64).unwrap().startup_s;
    assert!(picked * (1.0 + MODEL_ERROR) < auto, "{picked} against auto's {auto}");
    // A design the user gave is not questioned; nor is a given fan-out.
    let given = choose(&dear, &Scenario { kvs: KvsDesign::Allgather, ..sc.clone() }, 32, Free { fanout: true, kvs: false }).unwrap();
    assert_eq!(given.kvs, KvsDesign::Allgather);
    assert_eq!(given.why.len(), 1, "{:?}", given.why);
    let fixed = choose(&dear, &sc, 32, Free { fanout: false, kvs: true }).unwrap();
    assert_eq!((fixed.fanout, fixed.why.len()), (32, 1), "{:?}", fixed.why);
    assert_eq!(choose(&dear, &sc, 32, Free { fanout: false, kvs: false }).unwrap().why.len(), 0);
}

/// 16 virtual nodes of 4 ranks on one host of 2 cores, cold or booted.
fn sixteen_of_four_on_two_cores(booted: bool) -> Scenario {
    Scenario { cores: 2, one_host: true, booted, kvs: KvsDesign::Auto, fanout: 32, workload: Workload::PmiNeighbours, ..scenario(16, 4, Bootstrap::Fork) }
}

#[test]
fn a_cold_daemons_unseen_cpu_is_charged_on_one_host_and_booted_runs_pay_none() {
    let cal = built_in();
    let mut more = built_in();
    more.costs.get_mut("daemon_start_fork").unwrap().extra.insert("cpu_unseen_us".into(), 5000.0.into());
    let at = |c: &Calibration, booted: bool| predict(c, &sixteen_of_four_on_two_cores(booted), FULL_RANKS).unwrap().startup_s;
    // 15 forked daemons' 5 ms more on 2 cores: the cold run takes longer...
    let (before, after) = (at(&cal, false), at(&more, false));
    assert!(after > before + 0.015, "{before} -> {after}");
    // ...and a booted one, whose daemons were started before, not at all.
    assert_eq!(at(&cal, true), at(&more, true));
}

#[test]
fn a_booted_runs_nodes_charge_their_per_run_cpu_and_a_cold_run_does_not() {
    let cal = built_in();
    assert!(cal.get("booted_run").is_some(), "the committed calibration holds booted_run");
    let mut none = built_in();
    none.costs.remove("booted_run");
    let mut dear = built_in();
    dear.costs.get_mut("booted_run").unwrap().median_us = 5000.0;
    let at = |c: &Calibration, booted: bool| predict(c, &sixteen_of_four_on_two_cores(booted), FULL_RANKS).unwrap().startup_s;
    // 15 booted nodes' 5 ms each on 2 cores: the booted run takes longer...
    let (base, more) = (at(&none, true), at(&dear, true));
    assert!(more > base + 0.03, "{base} -> {more}");
    assert!(at(&cal, true) > base, "the committed cost is charged");
    // ...and a cold one, whose daemons' start includes it, not at all.
    assert_eq!(at(&none, false), at(&dear, false));
}
