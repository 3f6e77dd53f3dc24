//! How deep a shape's warm-spawn pool is kept ([`Depth`]).

use super::MAX_WARM_SPAWN;

/// How far a shape's pool may grow past the N jobs asked for when its
/// spawns come faster than it is refilled ([`Depth`]): at most this many
/// times N (and [`MAX_WARM_SPAWN`], and the free slots).
pub const DEPTH_GROWTH: usize = 4;

/// A shape's pool depth, following the rate of its spawns: a pool is
/// refilled as spawned jobs end (or a moment after a claim), and a pooled
/// MPICH child needs tens of ms of CPU to reach its claim, so a pool of N
/// keeps up only with N spawns per start time (Little's law). A claim that
/// finds the job still starting (`ToLauncher::Claimed::ready` false), or a
/// miss of a shape pooled before, says the spawns come faster: the depth
/// grows by one, up to [`DEPTH_GROWTH`] times N. `depth` claims in a row
/// that each found their job waiting say it is more than enough: it shrinks
/// by one, never below N (the jobs beyond it are not killed, only not
/// refilled). A loop of spawns that each wait for a start reaches the depth
/// where the pool's starts overlap enough to keep the CPU busy (bench/spawn
/// `loop-msg`: a pool of 2 took 0.55× Hydra's time, one of 8 0.26×).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Depth {
    depth: usize,
    /// Claims in a row that found their job waiting.
    ready_run: usize,
}

impl Depth {
    pub(super) fn new(want: usize) -> Self {
        Depth { depth: want, ready_run: 0 }
    }

    /// The jobs the pool is kept at, for spawns asking for `want`.
    pub(super) fn get(&self, want: usize) -> usize {
        self.depth.clamp(want, Self::most(want))
    }

    fn most(want: usize) -> usize {
        want.saturating_mul(DEPTH_GROWTH).clamp(want, MAX_WARM_SPAWN.max(want))
    }

    /// The spawns came faster than the pool was refilled.
    pub(super) fn behind(&mut self, want: usize) {
        self.depth = (self.get(want) + 1).min(Self::most(want));
        self.ready_run = 0;
    }

    /// A claim found its job waiting.
    pub(super) fn ahead(&mut self, want: usize) {
        let depth = self.get(want);
        self.ready_run += 1;
        if self.ready_run >= depth {
            (self.depth, self.ready_run) = (depth.saturating_sub(1).max(want), 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_grows_to_its_bound_and_shrinks_back_to_n() {
        let mut d = Depth::new(2);
        for want in 3..=8 {
            d.behind(2);
            assert_eq!(d.get(2), want);
        }
        d.behind(2);
        assert_eq!(d.get(2), 8, "at most 4 × N");
        for _ in 0..7 {
            d.ahead(2);
        }
        assert_eq!(d.get(2), 8, "not before as many ready claims as the depth");
        d.ahead(2);
        assert_eq!(d.get(2), 7);
        d.behind(2);
        d.ahead(2);
        assert_eq!(d.get(2), 8, "a claim still starting restarts the count");
        for _ in 0..200 {
            d.ahead(2);
        }
        assert_eq!(d.get(2), 2, "never below N");
    }

    #[test]
    fn its_bounds_follow_n() {
        let mut d = Depth::new(40);
        for _ in 0..100 {
            d.behind(40);
        }
        assert_eq!(d.get(40), MAX_WARM_SPAWN, "never past the most a shape may pool");
        assert_eq!(d.get(64), 64, "N asked for now: at least that");
        assert_eq!(Depth::new(0).get(0), 0, "no pool stays none");
        let mut d = Depth::new(0);
        d.behind(0);
        assert_eq!(d.get(0), 0);
    }
}
