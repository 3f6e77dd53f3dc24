//! Pooled jobs start a few at a time: a job that would start beside
//! pooled ranks still starting, beyond [`Settings::warm_starting`], waits
//! until one of them waits for its claim on every node
//! ([`dpm_proto::ToLauncher::AwaitingClaim`]), and no pooled job starts
//! while a job claimed still starting has not started (a refill never
//! delays a claimed job's start). Started side by side, pooled jobs share
//! the cores and each reaches its claim later.

use dpm_kvs::{JobId, NodeId};

use super::{Settings, Shape, WarmCx, WarmPool};
use crate::run::{RunEffects, Timer};

/// The run's bound on pooled ranks starting at once
/// ([`Settings::warm_starting`]): the CPUs of the launcher's host.
/// Started side by side, pooled jobs share the cores and each reaches its
/// claim later: 5 `MPIPoolExecutor(2)` pools 0.3 s apart on the 2-core VM
/// claimed their second pool's job (one of two, 4 Python workers started
/// together) still starting, 264–426 ms for its first result; one at a
/// time (2 workers), 192–236 ms.
pub fn warm_starting_default() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// Starting `size` more pooled ranks would go beyond the run's bound
/// (none if nothing is starting: a job larger than the bound starts alone).
pub(super) fn too_many_starting(settings: &Settings, fx: &mut dyn RunEffects, size: usize) -> bool {
    let starting = fx.shared().pool.starting(settings.owner);
    settings.warm_starting > 0 && starting > 0 && starting + size > settings.warm_starting
}

impl WarmPool {
    pub(super) fn hold_back(&mut self, shape: &Shape, held_back: bool) {
        if let Some(w) = self.shapes.iter_mut().find(|w| w.shape == *shape) {
            w.held_back = held_back;
        }
    }

    /// A job claimed while still starting has not said it started (the
    /// ended ones are forgotten here).
    pub(super) fn claimed_starting(&mut self, cx: &WarmCx<'_>) -> bool {
        self.late.retain(|&(j, _)| cx.jobs.get(j).is_some_and(|j| !j.done()));
        !self.late.is_empty()
    }

    /// `node` says the ranks of `job` there wait for their claim, or, for a
    /// job claimed while still starting, have started: once every late
    /// node of such a job said so, the pools held back for it are filled
    /// ([`WarmPool::on_next_timer`]).
    pub(in crate::run) fn awaiting(&mut self, fx: &mut dyn RunEffects, job: JobId, node: NodeId) {
        let Some(i) = self.late.iter().position(|(j, _)| *j == job) else { return };
        self.late[i].1.retain(|&n| n != node);
        if self.late[i].1.is_empty() {
            self.late.remove(i);
            fx.arm(Timer::WarmNext, std::time::Duration::ZERO);
        }
    }

    /// A pooled job of the run is ready for its claim: the pools whose jobs
    /// were held back for it are filled (as far as
    /// [`Settings::warm_starting`] lets them).
    pub(in crate::run) fn on_next_timer(&mut self, cx: &WarmCx<'_>, fx: &mut dyn RunEffects) {
        if cx.ending {
            return;
        }
        self.shapes.retain(|w| cx.jobs.contains(w.parent));
        let due: Vec<(Shape, usize, JobId)> = self.shapes.iter().filter(|w| w.held_back).map(|w| (w.shape.clone(), w.want, w.parent)).collect();
        for (shape, want, parent) in due {
            self.fill(cx, fx, &shape, want, parent);
        }
    }
}
