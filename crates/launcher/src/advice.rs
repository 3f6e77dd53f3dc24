//! The startup model's say in a run's shape: `dpm run` asks, before it
//! starts its daemons, what fan-out and KVS design the calibrated model
//! predicts fastest for this run's size, where the user did not choose
//! (no `--tree-fanout`/`DPM_FANOUT`; `--kvs auto`, the default). The model
//! lives in `dpm-cluster`, which depends on this crate: the binary installs
//! it here ([`set_advisor`]); without one (the library alone, its tests),
//! or with `DPM_ADVICE=off`, the defaults stay. The binary's model reads
//! `DPM_CALIBRATION` (a calibration of the user's machines) if set.

use std::sync::OnceLock;

use dpm_kvs::KvsDesign;

use crate::error::UsageError;

/// A run's size and bootstrap, as the model asks for them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    pub nodes: usize,
    /// The most ranks on one node.
    pub ppn: u32,
    /// `fork` (virtual nodes), `ssh` or `slurm`.
    pub bootstrap: &'static str,
    /// The requested fan-out (the default), which the model keeps unless it
    /// predicts another faster by more than its error.
    pub fanout: usize,
    /// The fan-out is the model's to choose (the user gave none).
    pub fanout_free: bool,
    /// The requested design; the model's to choose when it is `auto`.
    pub kvs: KvsDesign,
}

/// The model's answer: the fan-out and design, and a line per choice
/// saying why (logged under `-v`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Advice {
    pub fanout: usize,
    pub kvs: KvsDesign,
    pub why: Vec<String>,
}

/// The model's answer for a shape: `Ok(None)` when it has none (a size it
/// cannot simulate), an error when the user's calibration cannot be read.
pub type Advisor = fn(&Shape) -> Result<Option<Advice>, String>;

static ADVISOR: OnceLock<Advisor> = OnceLock::new();

/// Install the model (once; a second call changes nothing).
pub fn set_advisor(advisor: Advisor) {
    let _ = ADVISOR.set(advisor);
}

/// The model's fan-out and design for `shape`, if one is installed and answers.
pub fn advise(shape: &Shape) -> Result<Option<Advice>, String> {
    ADVISOR.get().map_or(Ok(None), |f| f(shape))
}

/// `DPM_ADVICE=off` (or `0`, `no`): the run keeps the defaults, unasked.
pub fn disabled(value: Option<&str>) -> bool {
    value.is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "off" | "0" | "no" | "false"))
}

/// `dpm run`'s fan-out and design: the user's where given, else the
/// model's (its reasons logged under `-v`), else the defaults. `shape` is
/// asked only when something is left to choose (`kvs` is `auto` or the
/// fan-out was not given).
pub fn choose(fanout_given: bool, fanout: usize, kvs: KvsDesign, shape: impl FnOnce() -> Option<Shape>) -> Result<(usize, KvsDesign), UsageError> {
    let kvs_free = kvs == KvsDesign::Auto;
    if (fanout_given && !kvs_free) || disabled(std::env::var("DPM_ADVICE").ok().as_deref()) {
        return Ok((fanout, kvs));
    }
    let Some(shape) = shape().map(|s| Shape { fanout, fanout_free: !fanout_given, kvs, ..s }) else {
        return Ok((fanout, kvs));
    };
    Ok(match advise(&shape).map_err(UsageError)? {
        Some(a) => {
            for line in &a.why {
                tracing::debug!("{line}");
            }
            (if fanout_given { fanout } else { a.fanout }, if kvs_free { a.kvs } else { kvs })
        }
        None => (fanout, kvs),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_user_gave_is_kept_and_no_model_keeps_the_defaults() {
        let asked = std::cell::Cell::new(false);
        let shape = || {
            asked.set(true);
            Some(Shape { nodes: 4, ppn: 1, bootstrap: "fork", fanout: 32, fanout_free: true, kvs: KvsDesign::Auto })
        };
        assert_eq!(choose(true, 7, KvsDesign::Dkvs, shape), Ok((7, KvsDesign::Dkvs)));
        assert!(!asked.get(), "a fan-out and a design the user gave are not questioned");
        // No advisor is installed in this crate's tests: the defaults stay.
        let shape = || Some(Shape { nodes: 4, ppn: 1, bootstrap: "fork", fanout: 32, fanout_free: true, kvs: KvsDesign::Auto });
        assert_eq!(choose(false, 32, KvsDesign::Auto, shape), Ok((32, KvsDesign::Auto)));
        assert_eq!(choose(true, 8, KvsDesign::Auto, || None), Ok((8, KvsDesign::Auto)));
    }

    #[test]
    fn dpm_advice_off_turns_the_model_off() {
        for v in ["off", "0", "no", "OFF", "false"] {
            assert!(disabled(Some(v)), "{v}");
        }
        for v in [None, Some("on"), Some("1"), Some("")] {
            assert!(!disabled(v), "{v:?}");
        }
    }
}
