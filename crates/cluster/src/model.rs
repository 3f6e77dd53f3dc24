//! `dpm model`: predicted startup (and spawn) costs for a configuration,
//! their breakdown, and the best KVS design and fan-out — answered by the
//! simulator ([`crate::sim`]), on dpm's own reactors.
//!
//! Up to a limit ([`FULL_RANKS`] by default, `dpm model --sim-ranks`) the
//! configuration is simulated in full. Above,
//! the same ranks per node are simulated on 3 smaller node counts (the
//! largest within the limit, its half and its quarter) and each phase is
//! fitted, in paper 002's form, as `a + b·log2(nodes) + c·nodes` (a fixed
//! part, one per tree level, one per node) and evaluated at the asked node
//! count; the bootstrap is computed exactly at any scale. A spawn's
//! per-node term saturates at its children's count (`ppn`: a spawn cannot
//! reach more nodes than it starts children). The answer says
//! which method answered. The search for the best design and fan-out uses
//! the same method and limit, so the asked prediction is one of the
//! candidates compared.

use std::collections::BTreeMap;
use std::time::Duration;

use dpm_kvs::KvsDesign;
use serde::Serialize;

use crate::calibration::Calibration;
use crate::sim::{boot_time, simulate, Outcome, Scenario, SimError, Workload, MAX_RANKS, MAX_RANKS_ALL};

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

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Best {
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

/// Predict one scenario: simulated, or extrapolated above `limit` ranks.
pub fn predict(cal: &Calibration, sc: &Scenario, limit: usize) -> Result<Prediction, SimError> {
    let limit = limit.min(if sc.workload == Workload::PmiAll { MAX_RANKS_ALL } else { MAX_RANKS });
    let named = |method: String, o: Outcome| prediction(sc, o, method);
    if sc.ranks() <= limit {
        return Ok(named("simulated".into(), simulate(cal, sc)?));
    }
    let per = sc.ppn as usize;
    if per > limit {
        return Err(SimError::Scenario(format!("{per} ranks per node is beyond simulation ({limit} ranks)")));
    }
    let top = 1usize << (limit / per).ilog2();
    let points: Vec<usize> = [top, top / 2, top / 4].into_iter().filter(|&n| n >= 1).collect();
    let runs = points
        .iter()
        .map(|&nodes| {
            let small = Scenario { nodes, ..sc.clone() };
            Ok((nodes, simulate(cal, &small)?, boot_time(cal, &small)?))
        })
        .collect::<Result<Vec<_>, SimError>>()?;
    let names: Vec<&'static str> = runs[0].1.phases.iter().map(|p| p.0).collect();
    let mut phases = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let at = if *name == "bootstrap" {
            boot_time(cal, sc)?
        } else {
            let samples: Vec<(f64, f64)> = runs.iter().map(|(n, o, _)| (*n as f64, o.phases[i].1.as_secs_f64())).collect();
            Duration::from_secs_f64(fit(&samples, sc.nodes as f64).max(0.0))
        };
        phases.push((*name, at));
    }
    // A spawn of `ppn` children reaches at most `ppn` nodes, whatever the
    // job's: its per-node term stops growing there (its per-level term,
    // the tree's depth, does not).
    let spawns: Vec<(f64, f64)> = runs.iter().filter_map(|(n, o, _)| Some((*n as f64, o.spawn?.as_secs_f64()))).collect();
    let spawn = (!spawns.is_empty()).then(|| Duration::from_secs_f64(fit_capped(&spawns, sc.nodes as f64, f64::from(sc.ppn)).max(0.0)));
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

/// `log2(n)`, without libm. `f64::log2` was the only libm function in the
/// binary, and linking libm costs every dpm process one more shared
/// library to map and relocate at its start (docs/benchmarks.md, "The
/// booted path"). With `n = m·2^k`, `m` in [1, 2): `k + ln(m)/ln(2)`, and
/// `ln(m) = 2·atanh(z)` with `z = (m - 1)/(m + 1)` at most 1/3: the
/// series' 20 terms leave less than 1e-19.
fn log2(n: f64) -> f64 {
    if n.is_nan() || n < 0.0 {
        return f64::NAN;
    }
    if n == 0.0 {
        return f64::NEG_INFINITY;
    }
    if n.is_infinite() {
        return f64::INFINITY;
    }
    // A subnormal is scaled into the normal range first (by 2^64).
    let (x, scaled) = if n < f64::MIN_POSITIVE { (n * 18_446_744_073_709_551_616.0, 64) } else { (n, 0) };
    let bits = x.to_bits();
    let k = ((bits >> 52) & 0x7ff) as i64 - 1023 - scaled;
    let m = f64::from_bits((bits & !(0x7ff << 52)) | (1023 << 52));
    let z = (m - 1.0) / (m + 1.0);
    let z2 = z * z;
    let (mut power, mut sum) = (z, 0.0);
    for i in 0..20 {
        sum += power / f64::from(2 * i + 1);
        power *= z2;
    }
    k as f64 + 2.0 * sum * std::f64::consts::LOG2_E
}

/// `a + b·log2(n) + c·n` through the samples (least squares; fewer samples
/// drop terms from the right), evaluated at `at`.
pub fn fit(samples: &[(f64, f64)], at: f64) -> f64 {
    fit_capped(samples, at, f64::INFINITY)
}

/// [`fit`], its per-node term `c·n` evaluated at no more than `cap` nodes
/// (a cost that reaches at most `cap` nodes saturates there).
pub fn fit_capped(samples: &[(f64, f64)], at: f64, cap: f64) -> f64 {
    let basis = |n: f64| [1.0, log2(n), n];
    let terms = samples.len().min(3);
    if terms == 0 {
        return 0.0;
    }
    // The normal equations, solved by Gaussian elimination.
    let mut m = vec![vec![0.0; terms + 1]; terms];
    for &(n, y) in samples {
        let b = basis(n);
        for r in 0..terms {
            for c in 0..terms {
                m[r][c] += b[r] * b[c];
            }
            m[r][terms] += b[r] * y;
        }
    }
    for col in 0..terms {
        let pivot = (col..terms).max_by(|&a, &b| m[a][col].abs().total_cmp(&m[b][col].abs())).unwrap_or(col);
        m.swap(col, pivot);
        if m[col][col].abs() < 1e-12 {
            return samples.iter().map(|s| s.1).sum::<f64>() / samples.len() as f64;
        }
        let pivot_row = m[col].clone();
        for (_, row) in m.iter_mut().enumerate().filter(|(r, _)| *r != col) {
            let f = row[col] / pivot_row[col];
            for (x, p) in row.iter_mut().zip(&pivot_row).skip(col) {
                *x -= f * p;
            }
        }
    }
    let b = basis(at);
    let b = [b[0], b[1], at.min(cap)];
    (0..terms).map(|i| m[i][terms] / m[i][i] * b[i]).sum()
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

/// Answer a query: the asked (or default) design and fan-out, and the best
/// over the search.
pub fn answer(cal: &Calibration, q: &Query) -> Result<Answer, SimError> {
    let sc = &q.scenario;
    let chosen = Scenario { kvs: q.kvs.unwrap_or_default(), fanout: q.fanout.unwrap_or(DEFAULT_FANOUT), ..sc.clone() };
    let designs: Vec<KvsDesign> = q.kvs.map_or(DESIGNS.to_vec(), |d| vec![d]);
    let fans: Vec<usize> = q.fanout.map_or_else(|| fanouts(sc.nodes), |f| vec![f]);
    let mut candidates = Vec::new();
    for &kvs in &designs {
        for &fanout in &fans {
            candidates.push(predict(cal, &Scenario { kvs, fanout, ..sc.clone() }, q.limit)?);
        }
    }
    let asked = candidates.iter().find(|c| c.kvs == chosen.kvs.name() && c.fanout == chosen.fanout).cloned();
    let main = match asked {
        Some(c) => c,
        None => predict(cal, &chosen, q.limit)?,
    };
    // Ties go to the earlier candidate: the simpler design, the narrower tree.
    let best = candidates.iter().min_by(|a, b| a.startup_s.total_cmp(&b.startup_s)).unwrap_or(&main);
    let best = Best { kvs: best.kvs.clone(), fanout: best.fanout, startup_s: best.startup_s };
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
    s += &format!("best: --kvs {} --tree-fanout {} ({:.3} s)\n", a.best.kvs, a.best.fanout, a.best.startup_s);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fit_goes_through_its_samples_and_degrades_gracefully() {
        let f = |n: f64| 0.5 + 0.25 * n.log2() + 0.01 * n;
        let samples: Vec<(f64, f64)> = [4.0, 8.0, 16.0].iter().map(|&n| (n, f(n))).collect();
        for at in [4.0, 64.0, 16384.0] {
            assert!((fit(&samples, at) - f(at)).abs() < 1e-6 * f(at).max(1.0), "at {at}");
        }
        assert_eq!(fit(&[(8.0, 3.0)], 1000.0), 3.0, "one sample: a constant");
        let capped = |n: f64| 0.5 + 0.25 * n.log2() + 0.01 * n.min(64.0);
        for at in [16.0, 64.0, 4096.0] {
            assert!((fit_capped(&samples, at, 64.0) - capped(at)).abs() < 1e-6, "capped at {at}");
        }
        assert_eq!(fit(&[], 10.0), 0.0);
        assert_eq!(fanouts(1), [2]);
        assert_eq!(fanouts(16), [2, 4, 8, 16]);
        assert_eq!(fanouts(17), [2, 4, 8, 16, 32]);
    }

    #[test]
    fn log2_without_libm_matches_std() {
        for n in [1.0, 1.5, 2.0, 3.0, 4.0, 7.0, 10.0, 16.0, 100.0, 1000.0, 4096.0, 1e6, 0.5, 0.1, 1e-300, 5e-324, f64::MAX] {
            let (ours, std) = (log2(n), n.log2());
            assert!((ours - std).abs() <= 1e-12 * std.abs().max(1.0), "log2({n}): {ours} against {std}");
        }
        assert_eq!(log2(0.0), f64::NEG_INFINITY);
        assert_eq!(log2(f64::INFINITY), f64::INFINITY);
        assert!(log2(-1.0).is_nan() && log2(f64::NAN).is_nan());
    }
}
