//! `dpm model`: predicted startup (and spawn) costs for a configuration,
//! their breakdown, and the best KVS design and fan-out — answered by the
//! simulator ([`crate::sim`]), on dpm's own reactors.
//!
//! Up to a limit ([`FULL_RANKS`] by default, `dpm model --sim-ranks`) the
//! configuration is simulated in full. Above, the same ranks per node are
//! simulated in flat trees of up to 3 smaller node counts and each phase is
//! scaled by its mechanism ([`predict_with`]): what grows with the nodes as
//! the samples' line, the tree's further levels analytically, the
//! launcher's thread as a queue of every rank's start and end frames, the
//! bootstrap exactly. A fan-out then changes a prediction only through the
//! tree's depth and the bootstrap. The answer says which method answered.
//! The search for the best design and fan-out uses the same method and
//! limit (each small simulation once: [`Sims`]), so the asked prediction is
//! one of the candidates compared, and it names a best only when every
//! other candidate is slower by more than the model's error
//! ([`MODEL_ERROR`]); else it lists the ties.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use dpm_kvs::KvsDesign;
use serde::Serialize;

use crate::calibration::Calibration;
use crate::sim::{frame_cost, run, run_fixed, tree_up, Outcome, Scenario, SimError, Workload, MAX_RANKS, MAX_RANKS_ALL};

/// Full simulation up to this many ranks by default. Measured here
/// (`examples/simspeed`, `hello`, ssh, auto, fan-out 32): 1,024 ranks
/// 0.1 s and 26 MB; 16,384 ranks (256 × 64) 18.5 s and 1.3 GB, most of it
/// the allgather's copy of every card on every node; `pmi-all` at 1,024
/// ranks (a million gets) 24 s. A search compares up to ~40 candidates, each
/// 3 simulations when extrapolated: 1,024 keeps `dpm model` within seconds.
pub const FULL_RANKS: usize = 1024;

/// dpm's default fan-out (`dpm_launcher::config::DEFAULT_FANOUT`).
pub const DEFAULT_FANOUT: usize = 32;

/// The designs the search compares.
pub const DESIGNS: [KvsDesign; 5] = KvsDesign::ALL;

/// One prediction.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Prediction {
    pub kvs: String,
    pub fanout: usize,
    pub startup_s: f64,
    /// Phase → seconds, summing to `startup_s`.
    pub breakdown: BTreeMap<String, f64>,
    /// The mean spawn, for `spawn-loop`.
    pub spawn_s: Option<f64>,
    /// `simulated` or `extrapolated from N1,N2,N3 nodes`.
    pub method: String,
}

/// What `dpm model --json` prints.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Answer {
    pub nodes: usize,
    pub ppn: u32,
    pub ranks: usize,
    pub bootstrap: String,
    pub booted: bool,
    pub workload: String,
    /// The asked (or default) design and fan-out's prediction, its fields
    /// at the top level.
    #[serde(flatten)]
    pub asked: Prediction,
    /// The fastest of `candidates`.
    pub best: Best,
    /// Every design × fan-out the search tried (or those asked for).
    pub candidates: Vec<Prediction>,
    pub calibration: CalibrationInfo,
}

/// The fastest candidate; `clear` when every other is slower by more than
/// the model's error ([`MODEL_ERROR`]), else `tied` lists those within it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Best {
    pub kvs: String,
    pub fanout: usize,
    pub startup_s: f64,
    pub clear: bool,
    pub tied: Vec<Choice>,
}

/// A design and fan-out, and its prediction.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Choice {
    pub kvs: String,
    pub fanout: usize,
    pub startup_s: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CalibrationInfo {
    pub host: String,
    pub commit: String,
    pub date: String,
}

/// The fan-outs worth trying for `nodes` nodes: powers of two up to a flat tree.
pub fn fanouts(nodes: usize) -> Vec<usize> {
    let mut v = vec![2];
    while *v.last().unwrap() < nodes {
        v.push(v.last().unwrap() * 2);
    }
    v
}

/// Simulations already run, by everything that makes one differ: a fan-out
/// of at least a sample's node count is the same flat tree, so a search
/// over fan-outs simulates each small flat tree once.
#[derive(Default)]
pub struct Sims {
    done: HashMap<SimKey, Outcome>,
    /// `dpm run`'s own start and end ([`run_fixed`]), once.
    fixed: Option<Duration>,
}

type SimKey = (KvsDesign, usize, usize, u32, &'static str, bool, &'static str, usize, bool);

impl Sims {
    fn simulate(&mut self, cal: &Calibration, sc: &Scenario) -> Result<Outcome, SimError> {
        let key = (sc.kvs, sc.fanout.min(sc.nodes), sc.nodes, sc.ppn, sc.bootstrap.name(), sc.booted, sc.workload.name(), sc.cores, sc.one_host);
        if let Some(o) = self.done.get(&key) {
            return Ok(o.clone());
        }
        let o = run(cal, sc, self.fixed(cal))?;
        self.done.insert(key, o.clone());
        Ok(o)
    }

    fn fixed(&mut self, cal: &Calibration) -> Duration {
        *self.fixed.get_or_insert_with(|| run_fixed(cal))
    }

    /// [`crate::sim::boot_time`], `dpm run`'s own start computed once.
    fn boot_time(&mut self, cal: &Calibration, sc: &Scenario) -> Result<Duration, SimError> {
        Ok(self.fixed(cal) + tree_up(cal, sc)?)
    }
}

/// Predict one scenario: simulated, or extrapolated above `limit` ranks.
pub fn predict(cal: &Calibration, sc: &Scenario, limit: usize) -> Result<Prediction, SimError> {
    predict_with(&mut Sims::default(), cal, sc, limit)
}

/// The levels of daemons under the launcher in dpm's tree of `nodes` nodes
/// (`dpm_proto::tree`: the launcher's `fanout` children, theirs, ...).
pub fn depth(nodes: usize, fanout: usize) -> u32 {
    let k = fanout.max(1);
    let (mut covered, mut level, mut d) = (0usize, 1usize, 0u32);
    while covered < nodes {
        level = level.saturating_mul(k);
        covered = covered.saturating_add(level);
        d += 1;
    }
    d
}

/// Link traversals per tree level on a phase's critical path: the launch
/// goes down once, the fence up and down, a get of a key held elsewhere up
/// to its owner and back (every design but allgather; `auto` is allgather
/// for unhinted keys, direct for the sparse pattern's hinted ones), each
/// rank's exit up once; a spawn's request up, launch down, reports up,
/// answer down.
fn traversals(phase: &str, sc: &Scenario) -> u32 {
    let fetches = match sc.kvs {
        KvsDesign::Allgather => false,
        KvsDesign::Auto => sc.workload == Workload::PmiNeighbours,
        _ => true,
    };
    match phase {
        "launch" | "exit" => 1,
        "pmi" => 2 + 2 * u32::from(fetches),
        "spawn" => 4,
        _ => 0,
    }
}

/// Least-squares line `a + c·n` through the samples, its slope at least 0
/// (more nodes never make a cost smaller), evaluated at `at`.
fn line(samples: &[(f64, f64)], at: f64) -> f64 {
    let n = samples.len() as f64;
    if samples.is_empty() {
        return 0.0;
    }
    let (mx, my) = (samples.iter().map(|s| s.0).sum::<f64>() / n, samples.iter().map(|s| s.1).sum::<f64>() / n);
    let sxx: f64 = samples.iter().map(|s| (s.0 - mx).powi(2)).sum();
    let c = if sxx > 0.0 { (samples.iter().map(|s| (s.0 - mx) * (s.1 - my)).sum::<f64>() / sxx).max(0.0) } else { 0.0 };
    my + c * (at - mx)
}

/// [`predict`], reusing (and adding to) `sims`.
///
/// Above the limit, the same design and ranks per node are simulated in
/// flat trees of up to 3 smaller node counts (the largest within the
/// limit, its half and its quarter), and each phase is scaled by its
/// mechanism:
/// - what grows with the nodes (the launcher's frames: one per rank's
///   start and end, a fence's one per node, the fetches the design routes
///   between nodes) as the samples' least-squares line per node, never
///   falling; measured on flat trees, every frame through the launcher: a
///   design whose traffic between nodes a deeper tree keeps below the
///   root is bounded by its flat tree's;
/// - the asked tree's further levels ([`depth`]) analytically: each level
///   a phase's critical path crosses ([`traversals`]) costs a hop and a
///   frame (`link_hop` and [`frame_cost`]);
/// - the launcher's thread as the queue it is: every rank's `Started` frame
///   (`frame_cost` each) is taken before the fence it carries on can pass
///   it, and every rank's `Exited` frame before the run ends: the PMI phase
///   ends no sooner than the launch plus the ranks' start frames, the exit
///   phase lasts no less than their end frames;
/// - the bootstrap exactly ([`crate::sim::boot_time`]).
///
/// So a fan-out changes an extrapolated prediction only through the tree's
/// depth and the bootstrap: smooth in the fan-out, with the bootstrap's
/// one minimum.
///
/// A spawn's per-node part saturates at its children's count (`ppn`: a
/// spawn cannot reach more nodes than it starts children).
pub fn predict_with(sims: &mut Sims, cal: &Calibration, sc: &Scenario, limit: usize) -> Result<Prediction, SimError> {
    let limit = limit.min(if sc.workload == Workload::PmiAll { MAX_RANKS_ALL } else { MAX_RANKS });
    let named = |method: String, o: Outcome| prediction(sc, o, method);
    if sc.ranks() <= limit {
        return Ok(named("simulated".into(), sims.simulate(cal, sc)?));
    }
    let per = sc.ppn as usize;
    if per > limit {
        return Err(SimError::Scenario(format!("{per} ranks per node is beyond simulation ({limit} ranks)")));
    }
    let top = 1usize << (limit / per).ilog2();
    let mut points: Vec<usize> = [top, top / 2, top / 4].into_iter().filter(|&n| n >= 1).collect();
    points.dedup();
    // Flat samples: what grows with the nodes is measured with every frame
    // through the launcher; the asked tree's levels are added below.
    let flat = |nodes: usize| Scenario { nodes, fanout: nodes, ..sc.clone() };
    let runs = points.iter().map(|&nodes| Ok((nodes, sims.simulate(cal, &flat(nodes))?))).collect::<Result<Vec<_>, SimError>>()?;
    let frame = frame_cost(cal, sc.one_host);
    let level = (cal.required("link_hop") + frame).as_secs_f64();
    let levels = f64::from(depth(sc.nodes, sc.fanout));
    let scaled = |phase: &str, samples: Vec<(usize, f64)>, cap: f64| {
        let per_level = level * f64::from(traversals(phase, sc));
        let samples: Vec<(f64, f64)> = samples.iter().map(|&(n, y)| ((n as f64).min(cap), y)).collect();
        (line(&samples, (sc.nodes as f64).min(cap)) + per_level * (levels - 1.0)).max(0.0)
    };
    let names: Vec<&'static str> = runs[0].1.phases.iter().map(|p| p.0).collect();
    let mut phases = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let at = if *name == "bootstrap" {
            sims.boot_time(cal, sc)?.as_secs_f64()
        } else {
            scaled(name, runs.iter().map(|(n, o)| (*n, o.phases[i].1.as_secs_f64())).collect(), f64::INFINITY)
        };
        phases.push((*name, at));
    }
    // The launcher's thread: every rank's start frame before the fence
    // passes, every rank's end frame before the run ends.
    let frames = sc.ranks() as f64 * frame.as_secs_f64();
    let down = level * levels;
    let sum = |upto: &str| phases.iter().take_while(|p| p.0 != upto).map(|p| p.1).sum::<f64>();
    let launched = sum("library");
    if let Some(i) = phases.iter().position(|p| p.0 == "pmi") {
        let pmi_end = sum("pmi") + phases[i].1;
        phases[i].1 += (launched + frames + down - pmi_end).max(0.0);
    }
    if let Some(exit) = phases.iter_mut().find(|p| p.0 == "exit") {
        exit.1 = exit.1.max(frames + down);
    }
    let spawns: Vec<(usize, f64)> = runs.iter().filter_map(|(n, o)| Some((*n, o.spawn?.as_secs_f64()))).collect();
    let spawn = (!spawns.is_empty()).then(|| Duration::from_secs_f64(scaled("spawn", spawns, f64::from(sc.ppn))));
    let phases: Vec<(&'static str, Duration)> = phases.into_iter().map(|(n, s)| (n, Duration::from_secs_f64(s))).collect();
    let total = phases.iter().map(|p| p.1).sum();
    let list: Vec<String> = points.iter().map(usize::to_string).collect();
    Ok(named(format!("extrapolated from {} nodes", list.join(",")), Outcome { total, phases, spawn }))
}

fn prediction(sc: &Scenario, o: Outcome, method: String) -> Prediction {
    Prediction {
        kvs: sc.kvs.name().into(),
        fanout: sc.fanout,
        startup_s: o.total.as_secs_f64(),
        breakdown: o.phases.iter().map(|(n, d)| (n.to_string(), d.as_secs_f64())).collect(),
        spawn_s: o.spawn.map(|d| d.as_secs_f64()),
        method,
    }
}

/// The designs and fan-outs a query asks about (`None`: all).
#[derive(Clone, Debug)]
pub struct Query {
    pub scenario: Scenario,
    pub kvs: Option<KvsDesign>,
    pub fanout: Option<usize>,
    /// Simulate in full up to this many ranks ([`FULL_RANKS`]).
    pub limit: usize,
}

/// The model's own error: the bound its predictions keep against held-out
/// measured runs (`bench/model/validate`, docs/model.md). One candidate is
/// the best only if every other is slower by more than this.
pub const MODEL_ERROR: f64 = 0.10;

/// The fastest candidate and those it cannot be told from (slower by no
/// more than [`MODEL_ERROR`]): `clear` if there are none.
pub fn best_of(candidates: &[Prediction]) -> Option<Best> {
    // Ties go to the earlier candidate: the simpler design, the narrower tree.
    let fastest = candidates.iter().min_by(|a, b| a.startup_s.total_cmp(&b.startup_s))?;
    let tied: Vec<Choice> = candidates
        .iter()
        .filter(|c| !std::ptr::eq(*c, fastest) && c.startup_s <= fastest.startup_s * (1.0 + MODEL_ERROR))
        .map(|c| Choice { kvs: c.kvs.clone(), fanout: c.fanout, startup_s: c.startup_s })
        .collect();
    Some(Best { kvs: fastest.kvs.clone(), fanout: fastest.fanout, startup_s: fastest.startup_s, clear: tied.is_empty(), tied })
}

/// Answer a query: the asked (or default) design and fan-out, and the best
/// over the search.
pub fn answer(cal: &Calibration, q: &Query) -> Result<Answer, SimError> {
    let sc = &q.scenario;
    let mut sims = Sims::default();
    let chosen = Scenario { kvs: q.kvs.unwrap_or_default(), fanout: q.fanout.unwrap_or(DEFAULT_FANOUT), ..sc.clone() };
    let designs: Vec<KvsDesign> = q.kvs.map_or(DESIGNS.to_vec(), |d| vec![d]);
    let fans: Vec<usize> = q.fanout.map_or_else(|| fanouts(sc.nodes), |f| vec![f]);
    let mut candidates = Vec::new();
    for &kvs in &designs {
        for &fanout in &fans {
            candidates.push(predict_with(&mut sims, cal, &Scenario { kvs, fanout, ..sc.clone() }, q.limit)?);
        }
    }
    let asked = candidates.iter().find(|c| c.kvs == chosen.kvs.name() && c.fanout == chosen.fanout).cloned();
    let main = match asked {
        Some(c) => c,
        None => predict_with(&mut sims, cal, &chosen, q.limit)?,
    };
    let best =
        best_of(&candidates).unwrap_or_else(|| Best { kvs: main.kvs.clone(), fanout: main.fanout, startup_s: main.startup_s, clear: true, tied: Vec::new() });
    Ok(Answer {
        nodes: sc.nodes,
        ppn: sc.ppn,
        ranks: sc.ranks(),
        bootstrap: sc.bootstrap.name().into(),
        booted: sc.booted,
        workload: sc.workload.name().into(),
        asked: main,
        best,
        candidates,
        calibration: CalibrationInfo { host: cal.machine.host.clone(), commit: cal.commit.clone(), date: cal.date.clone() },
    })
}

/// What `dpm run` may leave to the model: the fan-out (none given), the
/// design (`auto`: none given, or `--kvs auto`), or both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Free {
    pub fanout: bool,
    pub kvs: bool,
}

/// The model's choice for a run, and one line per free dimension saying why.
#[derive(Clone, Debug, PartialEq)]
pub struct Chosen {
    pub fanout: usize,
    pub kvs: KvsDesign,
    pub why: Vec<String>,
}

/// The fan-out and design `dpm run` takes where the user left them free
/// ([`Free`]), for `sc`'s size and bootstrap (an MPI hello's exchange: the
/// keys MPICH puts unhinted). First the fan-out, under the requested design
/// (`sc.kvs`; `auto`'s per-key rule when the design is free): the fastest
/// predicted, unless `default`'s prediction is within the model's error of
/// it ([`MODEL_ERROR`]). Then, at that fan-out, the design: a design changes
/// where keys live and how gets find them, so it changes the PMI exchange
/// and the exit after it, nothing before; when those two phases are no more
/// than the error's share of auto's prediction, no design can beat auto's
/// rule by more than the error, and none is simulated. Else every design is
/// predicted and one is taken only if it beats auto's rule beyond the error.
/// Cheap enough for every run of several nodes: above a few nodes the
/// search extrapolates from flat trees of at most 4 nodes
/// ([`predict_with`]), each simulated once, and a fan-out only changes the
/// bootstrap and the tree's depth.
pub fn choose(cal: &Calibration, sc: &Scenario, default: usize, free: Free) -> Result<Chosen, SimError> {
    let err = MODEL_ERROR * 100.0;
    let size = format!("{} nodes x {} ranks, {}", sc.nodes, sc.ppn, sc.bootstrap.name());
    let flat = sc.nodes <= 2;
    let mut why = Vec::new();
    let mut sims = Sims::default();
    let limit = sc.ppn as usize * 4;
    let mut predict = |kvs: KvsDesign, fanout: usize| predict_with(&mut sims, cal, &Scenario { kvs, fanout, ..sc.clone() }, limit);
    // The fan-out, under the requested design.
    let fanout = if !free.fanout {
        default
    } else if flat {
        why.push(format!("tree fan-out {default} (the default): {} nodes make the same flat tree under every fan-out", sc.nodes));
        default
    } else if let Some(line) = flat_is_best(&mut predict, sc.kvs, default, sc.nodes, &size)? {
        why.push(line);
        default
    } else {
        let mut fans = fanouts(sc.nodes);
        if !fans.contains(&default) {
            fans.push(default);
        }
        let mut predicted = Vec::new();
        for &fanout in &fans {
            predicted.push((fanout, predict(sc.kvs, fanout)?.startup_s));
        }
        let (fast, fast_s) = predicted.iter().copied().min_by(|a, b| a.1.total_cmp(&b.1).then((a.0 != default).cmp(&(b.0 != default)))).expect("a fan-out");
        let default_s = predicted.iter().find(|p| p.0 == default).map_or(f64::INFINITY, |p| p.1);
        if default_s <= fast_s * (1.0 + MODEL_ERROR) {
            why.push(format!(
                "tree fan-out {default} (the default): the model predicts {default_s:.3} s for {size}, within its ±{err:.0} % of the fastest (fan-out {fast}, {fast_s:.3} s)"
            ));
            default
        } else {
            why.push(format!(
                "tree fan-out {fast} chosen by the model: {fast_s:.3} s predicted for {size}, against {default_s:.3} s with the default {default} (beyond its ±{err:.0} %)"
            ));
            fast
        }
    };
    if !free.kvs {
        return Ok(Chosen { fanout, kvs: sc.kvs, why });
    }
    // The design, at that fan-out.
    let rule = "auto's per-key rule: allgather for unhinted keys, direct for sparse hints";
    let auto = predict(KvsDesign::Auto, fanout)?;
    let after = ["pmi", "exit"].iter().filter_map(|p| auto.breakdown.get(*p)).sum::<f64>();
    if after <= auto.startup_s * (1.0 - 1.0 / (1.0 + MODEL_ERROR)) {
        why.push(format!(
            "kvs auto ({rule}): the design changes only the PMI exchange and the exit, {:.1} ms of the {:.3} s the model predicts for an MPI hello on {size}: no design can be faster beyond its ±{err:.0} %",
            after * 1e3,
            auto.startup_s
        ));
        return Ok(Chosen { fanout, kvs: KvsDesign::Auto, why });
    }
    let mut predicted = vec![(KvsDesign::Auto, auto.startup_s)];
    for kvs in DESIGNS.into_iter().filter(|&d| d != KvsDesign::Auto) {
        predicted.push((kvs, predict(kvs, fanout)?.startup_s));
    }
    // Equal predictions (auto is allgather for MPICH's unhinted keys) go to auto.
    let (fast, fast_s) =
        predicted.iter().copied().min_by(|a, b| a.1.total_cmp(&b.1).then((a.0 != KvsDesign::Auto).cmp(&(b.0 != KvsDesign::Auto)))).expect("a design");
    if auto.startup_s <= fast_s * (1.0 + MODEL_ERROR) {
        why.push(format!(
            "kvs auto ({rule}): the model predicts {:.3} s for an MPI hello on {size}, within its ±{err:.0} % of the fastest (--kvs {}, {fast_s:.3} s)",
            auto.startup_s,
            fast.name()
        ));
        return Ok(Chosen { fanout, kvs: KvsDesign::Auto, why });
    }
    why.push(format!(
        "kvs {} chosen by the model: {fast_s:.3} s predicted for an MPI hello on {size}, against {:.3} s under auto's per-key rule (beyond its ±{err:.0} %)",
        fast.name(),
        auto.startup_s
    ));
    Ok(Chosen { fanout, kvs: fast, why })
}

/// When the default fan-out makes a flat tree of the run's nodes, every
/// other fan-out adds levels: more hops for the launch, the fence and each
/// exit, and its only gain is the daemons' start (the launcher starts each
/// of its children one after another; a deeper tree starts subtrees side by
/// side). So when the flat tree's bootstrap is no more than the error's
/// share of its prediction, no fan-out can be faster beyond the error: the
/// line that says so, and none other is simulated.
fn flat_is_best(
    predict: &mut impl FnMut(KvsDesign, usize) -> Result<Prediction, SimError>,
    kvs: KvsDesign,
    default: usize,
    nodes: usize,
    size: &str,
) -> Result<Option<String>, SimError> {
    if nodes > default {
        return Ok(None);
    }
    let p = predict(kvs, default)?;
    let boot = p.breakdown.get("bootstrap").copied().unwrap_or(0.0);
    Ok((boot <= p.startup_s * (1.0 - 1.0 / (1.0 + MODEL_ERROR))).then(|| {
        format!(
            "tree fan-out {default} (the default): a deeper tree only starts the daemons sooner, and their start is {:.1} ms of the {:.3} s the model predicts for {size}: no fan-out can be faster beyond its ±{:.0} %",
            boot * 1e3,
            p.startup_s,
            MODEL_ERROR * 100.0
        )
    }))
}

/// [`choose`] with the design given (`sc.kvs`): the fan-out only.
pub fn choose_fanout(cal: &Calibration, sc: &Scenario, default: usize) -> Result<(usize, String), SimError> {
    let c = choose(cal, sc, default, Free { fanout: true, kvs: false })?;
    Ok((c.fanout, c.why.join("; ")))
}

/// The answer for people.
pub fn render(a: &Answer) -> String {
    let mut s = format!(
        "dpm model: {} nodes × {} ranks = {} ranks, {} bootstrap{}, workload {}\n",
        a.nodes,
        a.ppn,
        a.ranks,
        a.bootstrap,
        if a.booted { " (booted)" } else { " (cold)" },
        a.workload
    );
    s += &format!("calibration: {} (commit {}, {})\n", a.calibration.host, a.calibration.commit, a.calibration.date);
    let p = &a.asked;
    s += &format!("predicted startup with --kvs {} --tree-fanout {}: {:.3} s ({})\n", p.kvs, p.fanout, p.startup_s, p.method);
    for phase in ["bootstrap", "launch", "library", "pmi", "exit"] {
        if let Some(v) = p.breakdown.get(phase) {
            s += &format!("  {phase:<10} {:>9.3} s\n", v);
        }
    }
    if let Some(spawn) = p.spawn_s {
        s += &format!("  spawn of {} ranks: {:.3} s each (mean)\n", a.ppn, spawn);
    }
    if a.candidates.len() > 1 {
        s += "kvs        fanout   startup (s)  method\n";
        for c in &a.candidates {
            s += &format!("{:<10} {:>6} {:>13.3}  {}\n", c.kvs, c.fanout, c.startup_s, c.method);
        }
    }
    let b = &a.best;
    if a.candidates.len() <= 1 {
        s += &format!("best: --kvs {} --tree-fanout {} ({:.3} s; the only candidate asked)\n", b.kvs, b.fanout, b.startup_s);
    } else if b.clear {
        s += &format!(
            "best: --kvs {} --tree-fanout {} ({:.3} s; every other is slower by more than the model's ±{:.0} %)\n",
            b.kvs,
            b.fanout,
            b.startup_s,
            MODEL_ERROR * 100.0
        );
    } else {
        let others: Vec<String> = b.tied.iter().map(|c| format!("{}/{}", c.kvs, c.fanout)).collect();
        s += &format!(
            "no clear best: the fastest, --kvs {} --tree-fanout {} ({:.3} s), ties within the model's ±{:.0} % with {} other{}: {}\n",
            b.kvs,
            b.fanout,
            b.startup_s,
            MODEL_ERROR * 100.0,
            b.tied.len(),
            if b.tied.len() == 1 { "" } else { "s" },
            others.join(" ")
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_depth_is_dpm_trees_levels() {
        for (nodes, fanout) in [(1, 2), (2, 2), (3, 2), (6, 2), (7, 2), (2000, 2), (2000, 4), (2000, 16), (2000, 2048), (17, 16), (272, 16), (273, 16), (5, 1)]
        {
            // The deepest node's distance from the launcher, by dpm_proto::tree.
            let mut d = 0;
            let mut at = Some(dpm_kvs::NodeId(nodes - 1));
            while let Some(n) = at {
                d += 1;
                at = dpm_proto::tree::parent(n, fanout);
            }
            assert_eq!(depth(nodes, fanout), d, "{nodes} nodes, fan-out {fanout}");
        }
    }

    #[test]
    fn the_line_is_least_squares_and_never_falls() {
        let samples = [(4.0, 1.0), (8.0, 2.0), (16.0, 4.0)];
        let at = line(&samples, 2000.0);
        assert!((at - (2000.0 * 0.25)).abs() < 1e-9, "{at}");
        assert_eq!(line(&[(4.0, 3.0), (8.0, 2.0), (16.0, 1.0)], 2000.0), 2.0, "a falling cost stays at its mean");
        assert_eq!(line(&[(8.0, 3.0)], 1000.0), 3.0, "one sample: a constant");
        assert_eq!(line(&[], 10.0), 0.0);
        assert_eq!(fanouts(1), [2]);
        assert_eq!(fanouts(16), [2, 4, 8, 16]);
        assert_eq!(fanouts(17), [2, 4, 8, 16, 32]);
    }
}
