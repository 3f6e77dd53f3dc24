//! The calibration file: per-operation costs measured on one machine
//! (`bench/model`), read and validated here for the simulator and
//! `dpm model`.
//!
//! The format (schema 1) is shared with `bench/model` (which writes it):
//! `{"schema": 1, "machine": {"host", "cpus", "kernel"}, "commit", "date",
//! "costs": {NAME: {"median_us", "p10_us", "p90_us", "n", "per"}}}`. Either
//! side may add fields or cost names; none is ever renamed. Unknown fields
//! and names are kept out of the way (ignored), missing required names are
//! an error, and every cost must be a real spread: finite, a positive
//! median, `p10 ≤ median ≤ p90`, measured at least once.
//!
//! Optional names and fields the simulator uses when present (see
//! [`crate::sim`]): `mpi_init`, `pmi_client_start`, `mpi_rank_cpu` (with
//! its `pair_us`) and `frame_cpu` costs; `cpu_us` (the CPU part of a wall
//! cost; for `pmi_client_start` and `pmi_local_request` the host's whole
//! CPU per client or get) and `latency_us` (a daemon start's single-daemon
//! latency, its median being the serial cost per added daemon).
//!
//! Two calibrations are embedded at build time from files of this crate, so
//! the binary works anywhere and reads no file of the tree at run time (also
//! when built from a crate tarball or installed with `cargo install`):
//! [`SAMPLE_JSON`], the stand-in (`calibration/sample.json`, not measured),
//! and [`BUILT_IN_JSON`], the default of `dpm model`: the calibration
//! measured by `bench/model` (`calibration/polyglot.json`, which it
//! rewrites).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The schema this reader understands.
pub const SCHEMA: u64 = 1;

/// Cost names every calibration must hold.
pub const REQUIRED: &[&str] = &[
    "daemon_start_fork",
    "daemon_start_ssh",
    "link_auth",
    "link_hop",
    "link_byte",
    "rank_fork_exec",
    "mpi_lib_start",
    "pmi_local_request",
    "pmi_remote_get",
    "fence_per_node",
    "spawn_base",
];

/// The committed sample calibration (see the module documentation).
pub const SAMPLE_JSON: &str = include_str!("../calibration/sample.json");
/// The default calibration (see the module documentation).
pub const BUILT_IN_JSON: &str = include_str!("../calibration/polyglot.json");

/// What a calibration is wrong about.
#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    #[error("cannot read calibration {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("calibration is not valid JSON of schema {SCHEMA}: {0}")]
    Json(#[from] serde_json::Error),
    #[error("calibration schema {0} is not supported (this dpm reads schema {SCHEMA})")]
    Schema(u64),
    #[error("calibration lacks the cost {0:?}")]
    Missing(String),
    #[error("calibration cost {name:?}: {why}")]
    Bad { name: String, why: String },
    #[error("calibration machine: {0}")]
    Machine(String),
}

/// The machine the costs were measured on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub host: String,
    pub cpus: u32,
    #[serde(default)]
    pub kernel: String,
}

/// What one cost is counted per.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Per {
    Op,
    Byte,
    Rank,
    Node,
}

/// One measured cost, in microseconds, with its spread.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    pub median_us: f64,
    pub p10_us: f64,
    pub p90_us: f64,
    pub n: u64,
    pub per: Per,
    /// Further fields `bench/model` records (`cpu_us`, `latency_us`, `what`, …).
    #[serde(flatten)]
    pub extra: BTreeMap<String, serde_json::Value>,
}

impl Cost {
    /// The median as a duration (sub-µs costs, such as per byte, keep their nanoseconds).
    pub fn median(&self) -> Duration {
        Duration::from_secs_f64(self.median_us / 1e6)
    }

    /// A further field in µs, if present, finite and not negative.
    pub fn field_us(&self, name: &str) -> Option<f64> {
        self.extra.get(name).and_then(serde_json::Value::as_f64).filter(|v| v.is_finite() && *v >= 0.0)
    }

    fn check(&self) -> Result<(), String> {
        let all = [self.median_us, self.p10_us, self.p90_us];
        if all.iter().any(|v| !v.is_finite() || *v < 0.0) {
            return Err(format!("costs must be finite and not negative: {all:?}"));
        }
        if self.median_us <= 0.0 {
            return Err(format!("median_us must be positive, not {}", self.median_us));
        }
        if !(self.p10_us <= self.median_us && self.median_us <= self.p90_us) {
            return Err(format!("needs p10 ≤ median ≤ p90, got {} / {} / {}", self.p10_us, self.median_us, self.p90_us));
        }
        if self.n == 0 {
            return Err("n must be at least 1".into());
        }
        Ok(())
    }
}

/// A validated calibration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    pub schema: u64,
    pub machine: Machine,
    pub commit: String,
    pub date: String,
    pub costs: BTreeMap<String, Cost>,
}

impl Calibration {
    /// Parse and validate.
    pub fn from_json(text: &str) -> Result<Self, CalibrationError> {
        // The schema first: another schema may not parse as this one.
        let head: serde_json::Value = serde_json::from_str(text)?;
        match head.get("schema").and_then(serde_json::Value::as_u64) {
            Some(SCHEMA) => {}
            Some(other) => return Err(CalibrationError::Schema(other)),
            None => return Err(CalibrationError::Missing("schema".into())),
        }
        let calibration: Calibration = serde_json::from_value(head)?;
        calibration.validate()?;
        Ok(calibration)
    }

    pub fn from_file(path: &Path) -> Result<Self, CalibrationError> {
        let text = std::fs::read_to_string(path).map_err(|source| CalibrationError::Read { path: path.display().to_string(), source })?;
        Self::from_json(&text)
    }

    /// The committed sample.
    pub fn sample() -> Self {
        Self::from_json(SAMPLE_JSON).expect("the committed sample calibration validates (tested)")
    }

    /// The default calibration, built in.
    pub fn built_in() -> Result<Self, CalibrationError> {
        Self::from_json(BUILT_IN_JSON)
    }

    /// Every required name present, every cost a real spread.
    pub fn validate(&self) -> Result<(), CalibrationError> {
        if self.machine.cpus == 0 {
            return Err(CalibrationError::Machine("cpus must be at least 1".into()));
        }
        for name in REQUIRED {
            if !self.costs.contains_key(*name) {
                return Err(CalibrationError::Missing((*name).into()));
            }
        }
        for (name, cost) in &self.costs {
            cost.check().map_err(|why| CalibrationError::Bad { name: name.clone(), why })?;
        }
        Ok(())
    }

    /// A cost's median, if the calibration has it.
    pub fn get(&self, name: &str) -> Option<Duration> {
        self.costs.get(name).map(Cost::median)
    }

    /// A further field of a cost (see [`Cost::field_us`]) as a duration.
    pub fn field(&self, name: &str, field: &str) -> Option<Duration> {
        self.costs.get(name)?.field_us(field).map(|us| Duration::from_secs_f64(us / 1e6))
    }

    /// A required cost's median (present: validated).
    pub fn required(&self, name: &str) -> Duration {
        debug_assert!(REQUIRED.contains(&name), "{name} is not a required cost");
        self.get(name).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_value() -> serde_json::Value {
        serde_json::from_str(SAMPLE_JSON).unwrap()
    }

    fn check(v: serde_json::Value) -> Result<Calibration, CalibrationError> {
        Calibration::from_json(&v.to_string())
    }

    #[test]
    fn the_committed_sample_validates_and_holds_every_required_cost() {
        let c = Calibration::from_json(SAMPLE_JSON).unwrap();
        for name in REQUIRED {
            assert!(c.get(name).unwrap() > Duration::ZERO, "{name}");
        }
        assert_eq!(c.costs["link_byte"].per, Per::Byte);
        Calibration::built_in().expect("the built-in calibration validates");
    }

    #[test]
    fn unknown_fields_and_names_are_accepted() {
        let mut v = sample_value();
        v["extra"] = serde_json::json!({"anything": 1});
        v["costs"]["new_cost"] = serde_json::json!({"median_us": 1.0, "p10_us": 1.0, "p90_us": 2.0, "n": 3, "per": "op", "note": "x"});
        assert!(check(v).unwrap().costs.contains_key("new_cost"));
    }

    #[test]
    fn a_missing_cost_another_schema_and_bad_values_are_refused_by_name() {
        let mut v = sample_value();
        v["costs"].as_object_mut().unwrap().remove("link_hop");
        assert!(matches!(check(v), Err(CalibrationError::Missing(n)) if n == "link_hop"));

        let mut v = sample_value();
        v["schema"] = 2.into();
        assert!(matches!(check(v), Err(CalibrationError::Schema(2))));

        for (field, value) in [("median_us", 0.0), ("median_us", -1.0), ("p10_us", 1e9), ("p90_us", 0.5)] {
            let mut v = sample_value();
            v["costs"]["mpi_lib_start"][field] = value.into();
            let e = check(v).unwrap_err();
            assert!(matches!(&e, CalibrationError::Bad { name, .. } if name == "mpi_lib_start"), "{field}={value}: {e}");
        }
        let mut v = sample_value();
        v["costs"]["link_auth"]["per"] = "parsec".into();
        assert!(matches!(check(v), Err(CalibrationError::Json(_))));
        let mut v = sample_value();
        v["costs"]["link_auth"]["n"] = 0.into();
        assert!(check(v).is_err());
        assert!(Calibration::from_json("{").is_err());
        assert!(Calibration::from_json("[]").is_err());
    }

    #[test]
    fn slurm_may_be_absent() {
        let mut v = sample_value();
        v["costs"].as_object_mut().unwrap().remove("daemon_start_slurm");
        assert!(check(v).unwrap().get("daemon_start_slurm").is_none());
    }
}
