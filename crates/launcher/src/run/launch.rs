//! What a run starts from: its [`Settings`], and the checks a job must
//! pass before anything of it is sent ([`LaunchError`]).

use std::time::Duration;

use dpm_kvs::{JobId, NodeId};
use dpm_proto::{LaunchJob, PmiMode, ToDaemon};

use crate::node_table::PlaceError;
use crate::spawn::SpawnContext;

/// Job-independent settings the run needs to create jobs.
pub struct Settings {
    pub label: bool,
    pub kill_grace: Duration,
    /// The run's `MPI_UNIVERSE_SIZE` (negative: unset), fixed at its start
    /// for every job of it.
    pub universe_size: i64,
    /// A booted run given no `-usize` whose universe is the boot's slots:
    /// `Some(world)`. Its spawns are limited by the boot's usable slots as
    /// they are at the spawn (never below `world`), so a run that is going
    /// grows into hosts `dpm boot --add` adds ([`Settings::spawn_universe`]).
    pub universe_follows: Option<u32>,
    pub pmi_mode: PmiMode,
    /// Refuse spawns beyond the universe size instead of oversubscribing.
    pub no_oversubscribe: bool,
    pub report_placement: bool,
    pub spawn: SpawnContext,
    /// Slots of each node: the node table of a plain run's own tree is made
    /// of them ([`crate::controller::Shared::for_run`]); a booted run uses
    /// the boot's table.
    pub node_slots: Vec<u32>,
    /// The daemon tree's fan-out: losing a node loses its subtree.
    pub fanout: usize,
    /// The nodes the tree started with, its heap; those after joined later,
    /// each straight below the launcher (lazy daemons, `dpm boot --add`).
    pub heap_nodes: usize,
    /// The pid of the `dpm run` this run is for (shown by `dpm status`).
    pub owner: u32,
    /// Warm spawn: pooled jobs per spawn shape (0: off unless a spawn asks).
    pub warm_spawn: usize,
    /// Say each warm-spawn claim, miss and refill (`-v`, `--report-placement`).
    pub warm_verbose: bool,
    /// Warm spawn: the most ranks of the run's pooled jobs that start at
    /// once (0: no bound). A pooled job that would go beyond it waits until
    /// one still starting is ready for its claim (see `run::warm`).
    pub warm_starting: usize,
    /// Every job's binding (`-bind-to`…), applied by the daemons.
    pub binding: dpm_binding::BindPolicy,
    /// What the run reports of its ranks at `--timeout`.
    pub on_timeout: dpm_proto::control::TimeoutReport,
}

impl Settings {
    /// The universe a spawn is placed within now: the fixed universe size,
    /// or, where it follows the boot, the usable slots of `nodes` now
    /// (never below the run's world).
    pub fn spawn_universe(&self, nodes: &crate::node_table::NodeTable) -> i64 {
        match self.universe_follows {
            Some(world) if self.universe_size >= 0 => nodes.usable_slots().max(i64::from(world)),
            _ => self.universe_size,
        }
    }
}

/// A planned job that cannot be run as it is: refused before anything starts.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("{0} has no processes")]
    Empty(JobId),
    #[error("{job} has {size} ranks but {got} {what}")]
    Mismatch { job: JobId, size: u32, what: &'static str, got: usize },
    #[error("{job}: a process has rank {rank} (size {size}) or a rank twice")]
    BadRank { job: JobId, rank: u32, size: u32 },
    #[error("{job}: rank {rank} runs app {app}, but the job has {apps} apps")]
    BadApp { job: JobId, rank: u32, app: usize, apps: usize },
    #[error("{0}: {1}")]
    Placement(JobId, PlaceError),
    /// The tree holds no run of this owner, or holds one already (`crate::tree::Tree`).
    #[error("run of client {owner}: {why}")]
    NoRun { owner: u32, why: &'static str },
}

/// The checks a job must pass before anything of it is sent.
pub(super) fn check(launch: &LaunchJob) -> Result<(), LaunchError> {
    let (job, size) = (launch.job, launch.size);
    if size == 0 {
        return Err(LaunchError::Empty(job));
    }
    let mismatch = |what, got| LaunchError::Mismatch { job, size, what, got };
    if launch.node_of.len() != size as usize {
        return Err(mismatch("places", launch.node_of.len()));
    }
    if launch.appnums.len() != size as usize {
        return Err(mismatch("appnums", launch.appnums.len()));
    }
    let mut seen = vec![false; size as usize];
    for p in &launch.procs {
        let r = p.rank.0;
        match seen.get_mut(r as usize) {
            Some(s) if !*s => *s = true,
            _ => return Err(LaunchError::BadRank { job, rank: r, size }),
        }
        if p.app >= launch.apps.len() {
            return Err(LaunchError::BadApp { job, rank: r, app: p.app, apps: launch.apps.len() });
        }
    }
    if let Some(r) = launch.stdin_rank.filter(|r| r.0 >= size) {
        return Err(LaunchError::BadRank { job, rank: r.0, size });
    }
    Ok(())
}

/// Send each node in `daemons` its part of `launch` (rank `r` runs on `node_of[r]`).
pub(super) fn send_parts(launch: LaunchJob, node_of: &[NodeId], daemons: &[NodeId], send: &mut dyn FnMut(NodeId, ToDaemon)) {
    for &d in daemons {
        let mut part = launch.clone();
        part.procs.retain(|p| node_of.get(p.rank.0 as usize) == Some(&d));
        part.stdin_rank = launch.stdin_rank.filter(|r| node_of.get(r.0 as usize) == Some(&d));
        send(d, ToDaemon::Launch(part));
    }
}
