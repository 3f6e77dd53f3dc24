//! The startup model's say in a run's tree: `dpm run` asks, before it
//! starts its daemons, what fan-out the calibrated model predicts fastest
//! for this run's size, when the user did not choose one (`--tree-fanout`,
//! `DPM_FANOUT`). The model lives in `dpm-cluster`, which depends on this
//! crate: the binary installs it here ([`set_advisor`]); without one (the
//! library alone, its tests) the default stays.

use std::sync::OnceLock;

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
}

/// The model's answer: the fan-out, and a line saying why (logged under `-v`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Advice {
    pub fanout: usize,
    pub why: String,
}

pub type Advisor = fn(&Shape) -> Option<Advice>;

static ADVISOR: OnceLock<Advisor> = OnceLock::new();

/// Install the model (once; a second call changes nothing).
pub fn set_advisor(advisor: Advisor) {
    let _ = ADVISOR.set(advisor);
}

/// The model's fan-out for `shape`, if one is installed and answers.
pub fn advise(shape: &Shape) -> Option<Advice> {
    ADVISOR.get().and_then(|f| f(shape))
}

/// `dpm run`'s fan-out: the user's if given, else the model's (its reason
/// logged under `-v`), else `default`.
pub fn fanout(given: bool, default: usize, shape: impl FnOnce() -> Option<Shape>) -> usize {
    if given {
        return default;
    }
    match shape().as_ref().and_then(advise) {
        Some(a) => {
            tracing::debug!("{}", a.why);
            a.fanout
        }
        None => default,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_fanout_is_kept_and_no_model_keeps_the_default() {
        let asked = std::cell::Cell::new(false);
        let shape = || {
            asked.set(true);
            Some(Shape { nodes: 4, ppn: 1, bootstrap: "fork", fanout: 32 })
        };
        assert_eq!(fanout(true, 7, shape), 7);
        assert!(!asked.get(), "a fan-out the user gave is not questioned");
        // No advisor is installed in this crate's tests: the default stays.
        assert_eq!(fanout(false, 32, || Some(Shape { nodes: 4, ppn: 1, bootstrap: "fork", fanout: 32 })), 32);
        assert_eq!(fanout(false, 32, || None), 32);
    }
}
