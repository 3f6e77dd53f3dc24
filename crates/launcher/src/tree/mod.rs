//! The tree level as one plain state machine: the [`Tree`].
//!
//! A daemon tree (one per plain `dpm run`, one per `dpm boot` serving many
//! runs) has one `Tree`: it owns the runs ([`Run`], keyed by their owner,
//! the pid of their `dpm run`) and what they share ([`TreeShared`]: the
//! routes of live jobs, the [`crate::run::Pool`] of unclaimed pooled jobs,
//! the [`crate::node_table::NodeTable`] and its ledger, the name, connect
//! and status directories). It reacts to one event at a time — a run begins
//! ([`Tree::submit`]), a message comes up from the daemons
//! ([`Tree::on_up`]: to the run its job is routed to, else to the pool
//! holding it — the one place that rule is applied), an input of one run
//! ([`Tree::on_run`]: its signals, stdin, timers, written output), the
//! pool's timer ([`Tree::on_pool_timer`]), a node lost — and acts only
//! through [`TreeEffects`]: messages to daemons, each run's output, lines
//! and timers, the pool's wake-up, losses for the driver to report.
//!
//! The drivers move bytes: `controller` (a plain run, and each run of a
//! boot, over one shared `Tree`), `boot::server` (submissions, status) and
//! the in-process cluster of `dpm-cluster` (a virtual clock). Tests drive
//! it with [`TreeRecorder`]. After every event the unit and cluster tests
//! check [`Tree::check_invariants`]: each run's parts, routes = the runs'
//! live jobs, pool ∩ runs = ∅, one slot ledger.

mod effects;
mod loss;
mod membership;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::time::Duration;

use dpm_kvs::{JobId, NodeId};
use dpm_proto::link::{InProcessFd, Up};
use dpm_proto::{LaunchJob, ToLauncher};

use crate::node_table::NodeTable;
use crate::run::{Destination, LaunchError, Run, Timer, TreeShared};

use effects::{PoolFx, RunFx};
pub use effects::{TreeEffect, TreeEffects, TreeRecorder};

/// One input of one run, from its driver.
#[derive(Debug)]
pub enum RunInput {
    /// A signal for the run (SIGTERM, SIGINT, SIGQUIT…; not TSTP/CONT).
    Signal(i32),
    /// Ctrl-Z (`true`) or `fg` (`false`): stop or continue its processes.
    Stop(bool),
    /// Stdin for the run's stdin rank; empty: end of input.
    Stdin(Vec<u8>),
    /// End the run, saying why (its boot goes down for a lost node).
    End(String),
    /// A job held for a debugger may go on.
    Continue(JobId),
    /// Start the tool daemon a debugger asked for (MPIR) on each node of the job.
    StartTools(JobId, dpm_proto::ToolDaemon),
    /// A timer the run armed ([`TreeEffects::arm`]) is due.
    Timer(Timer),
    /// `bytes` of a job's output from `node` were written where they go.
    Written { node: NodeId, job: JobId, bytes: u64 },
    /// `--timeout`: the run is killed after this long.
    Timeout(Duration),
    /// The run's first jobs are launched: it ends now if it has none.
    Settle,
    /// The daemons' stream had ended before the run began.
    DaemonsGone,
}

/// See the module documentation.
pub struct Tree {
    parts: TreeShared,
    runs: BTreeMap<u32, Run>,
    /// When the pool asked to be woken (µs since the epoch); a stale timer
    /// is ignored ([`Tree::on_pool_timer`]).
    pool_wake: Option<u64>,
    /// A node drains and may leave once empty ([`Tree::drain`]): the events
    /// that free slots look whether it may go now.
    draining: bool,
}

impl Tree {
    /// A tree over `nodes`; `run_tag`: the random part of its kvsnames.
    pub fn new(nodes: NodeTable, run_tag: u128) -> Self {
        Tree { parts: TreeShared::new(nodes, run_tag), runs: BTreeMap::new(), pool_wake: None, draining: false }
    }

    /// What the runs share, for reading (status, placement, hosts).
    pub fn shared(&self) -> &TreeShared {
        &self.parts
    }

    /// What the runs share, for a driver's setup (the pool's policy).
    pub fn shared_mut(&mut self) -> &mut TreeShared {
        &mut self.parts
    }

    /// The run of `owner`, while the tree holds it.
    pub fn run(&self, owner: u32) -> Option<&Run> {
        self.runs.get(&owner)
    }

    /// The owners of the runs the tree holds.
    pub fn owners(&self) -> impl Iterator<Item = u32> + '_ {
        self.runs.keys().copied()
    }

    /// When the pool's timer is due, if armed.
    pub fn pool_wake(&self) -> Option<u64> {
        self.pool_wake
    }

    /// A new job id and its kvsname (unique in the tree).
    pub fn new_job_id(&mut self) -> (JobId, String) {
        self.parts.new_job_id()
    }

    /// A run begins: the tree holds it from now on, keyed by its owner (a
    /// second run of the same owner is refused).
    pub fn add_run(&mut self, run: Run) -> Result<(), LaunchError> {
        let owner = run.owner();
        if self.runs.contains_key(&owner) {
            return Err(LaunchError::NoRun { owner, why: "one is going already" });
        }
        let mut run = run;
        run.reformed(self.parts.nodes.tops());
        self.runs.insert(owner, run);
        Ok(())
    }

    /// What a failure in a job of the run of `owner` does to it.
    pub fn set_failure_policy(&mut self, owner: u32, policy: crate::run::FailurePolicy) {
        if let Some(run) = self.runs.get_mut(&owner) {
            run.set_failure_policy(policy);
        }
    }

    /// A submission to a booted tree: the run of `owner` (just added)
    /// starts its first job of `procs` processes, made by `first` from a
    /// fresh job id and the nodes as they are, once kept pooled jobs gave
    /// up the slots it needs (oldest first). A job that does not hold
    /// together fails the run, saying why.
    pub fn submit(
        &mut self,
        fx: &mut dyn TreeEffects,
        owner: u32,
        procs: usize,
        first: impl FnOnce(JobId, String, &NodeTable) -> LaunchJob,
    ) -> Result<(), LaunchError> {
        if !self.runs.contains_key(&owner) {
            return Err(LaunchError::NoRun { owner, why: "no such run" });
        }
        self.make_room(fx, procs);
        let (job, kvsname) = self.parts.new_job_id();
        let launch = first(job, kvsname, &self.parts.nodes);
        let launched = self.launch(fx, owner, launch);
        self.release_drained(fx);
        launched
    }

    /// Kept pooled jobs give their slots up to a first job of `procs`
    /// processes that does not fit in the free slots (oldest first).
    pub fn make_room(&mut self, fx: &mut dyn TreeEffects, procs: usize) {
        while !self.parts.nodes.fits_free(procs) && self.with_pool(fx, |pool, nodes, pfx| pool.drop_oldest(pfx, nodes, None)) {}
    }

    /// Start a job of the run of `owner` (see [`Run::launch`]).
    pub fn launch(&mut self, fx: &mut dyn TreeEffects, owner: u32, launch: LaunchJob) -> Result<(), LaunchError> {
        self.with_run(fx, owner, |run, rfx| run.launch(rfx, launch)).unwrap_or(Err(LaunchError::NoRun { owner, why: "no such run" }))
    }

    /// Take on a process dpm did not start as rank 0 of a job of the run of `owner`.
    pub fn adopt(&mut self, fx: &mut dyn TreeEffects, owner: u32, launch: LaunchJob, pid: u32, pmi: InProcessFd) -> Result<(), LaunchError> {
        self.with_run(fx, owner, |run, rfx| run.adopt(rfx, launch, pid, pmi)).unwrap_or(Err(LaunchError::NoRun { owner, why: "no such run" }))
    }

    /// One input of the run of `owner` (none: nothing).
    pub fn on_run(&mut self, fx: &mut dyn TreeEffects, owner: u32, input: RunInput) {
        self.with_run(fx, owner, |run, rfx| match input {
            RunInput::Signal(sig) => run.on_signal(rfx, sig),
            RunInput::Stop(stop) => run.on_stop(rfx, stop),
            RunInput::Stdin(data) => run.on_stdin(rfx, data),
            RunInput::End(why) => run.on_end(rfx, why),
            RunInput::Continue(job) => run.continue_job(rfx, job),
            RunInput::StartTools(job, tool) => run.start_tools(rfx, job, &tool),
            RunInput::Timer(timer) => run.on_timer(rfx, timer),
            RunInput::Written { node, job, bytes } => run.on_output_written(rfx, node, job, bytes),
            RunInput::Timeout(after) => run.set_timeout(rfx, after),
            RunInput::Settle => run.settle(rfx),
            RunInput::DaemonsGone => run.on_daemons_gone(rfx),
        });
        self.release_drained(fx);
    }

    /// The run of `owner` is over and its driver is done with it: the tree
    /// lets it go (its jobs were forgotten when it finished).
    pub fn end_run(&mut self, owner: u32) -> Option<Run> {
        self.runs.remove(&owner)
    }

    /// What came up the tree: a message about a job goes to the run it is
    /// routed to, else to the pool holding it (at once, in order: a run
    /// may claim it next); a message about no job to every run. A lost
    /// node is recorded in the node table (it and its subtree take
    /// nothing new, the pool's jobs there are dropped) before every run
    /// hears of it; the driver hears it last ([`TreeEffects::nodes_lost`]).
    pub fn on_up(&mut self, fx: &mut dyn TreeEffects, envelope: Up) {
        let message = matches!(envelope, Up::From { .. });
        self.on_up_inner(fx, envelope);
        // (A message's own handler looked already.)
        if !message {
            self.release_drained(fx);
        }
    }

    fn on_up_inner(&mut self, fx: &mut dyn TreeEffects, envelope: Up) {
        match envelope {
            Up::From { node, msg } => self.on_message(fx, node, msg),
            Up::Lost { node, error } => {
                let lost = self.lose(fx, node, &error);
                self.each_run(fx, |run, rfx| run.on_node_lost(rfx, node, error.clone()));
                if !lost.is_empty() {
                    fx.nodes_lost(node, &error, &lost);
                }
            }
            // The daemon's parent is the one at fault (the launcher, for a
            // top-level daemon: then the daemon's subtree is what is gone).
            Up::ParentLost { node, error } => {
                let (gone, why) = match self.parts.nodes.parent(node) {
                    Some(p) => (p, format!("node {} below it {error}", node.0)),
                    None => (node, error.clone()),
                };
                let lost = if self.parts.nodes.contains(node) { self.lose(fx, gone, &why) } else { Vec::new() };
                self.each_run(fx, |run, rfx| run.on_parent_lost(rfx, node, error.clone()));
                if !lost.is_empty() {
                    fx.nodes_lost(gone, &why, &lost);
                }
            }
            Up::Ready { .. } | Up::Heartbeat | Up::Starved { .. } => {}
        }
    }

    /// A message from the daemon of `node` (see [`Tree::on_up`]).
    pub fn on_message(&mut self, fx: &mut dyn TreeEffects, node: NodeId, msg: ToLauncher) {
        match self.parts.destination(msg.job()) {
            Destination::Run(owner) => {
                if let ToLauncher::Output { job, .. } = &msg {
                    self.tell_place(fx, owner, *job, node);
                }
                fx.up_for_run(owner, node, &msg);
                self.with_run(fx, owner, |run, rfx| run.on_message(rfx, node, msg));
            }
            Destination::Pool => {
                self.with_pool(fx, |pool, nodes, pfx| pool.on_message(pfx, nodes, node, msg));
            }
            Destination::Every => self.each_run(fx, |run, rfx| run.on_message(rfx, node, msg.clone())),
            Destination::Nowhere => tracing::trace!("message about a forgotten job from {node}: dropped"),
        }
        // A rank's end may have emptied a drained node.
        self.release_drained(fx);
    }

    /// The daemons' stream ended: every run hears so.
    pub fn on_daemons_gone(&mut self, fx: &mut dyn TreeEffects) {
        self.each_run(fx, |run, rfx| run.on_daemons_gone(rfx));
    }

    /// The pool's timer at `at` (ignored unless it is the one last asked for).
    pub fn on_pool_timer(&mut self, fx: &mut dyn TreeEffects, at: u64) {
        if self.pool_wake == Some(at) {
            self.pool_wake = None;
            let now = fx.now_micros();
            self.with_pool(fx, |pool, nodes, pfx| pool.on_timer(pfx, nodes, now));
            self.release_drained(fx);
        }
    }

    /// The tree goes down: the pool kills every job it holds.
    pub fn drop_pooled(&mut self, fx: &mut dyn TreeEffects) {
        self.with_pool(fx, |pool, nodes, pfx| pool.drop_all(pfx, nodes));
    }

    /// `node` and its subtree are gone (`why`): the nodes newly lost.
    fn lose(&mut self, fx: &mut dyn TreeEffects, node: NodeId, why: &str) -> Vec<NodeId> {
        let lost = self.lose_or_detach(fx, node, why);
        if !lost.is_empty() {
            self.with_pool(fx, |pool, nodes, pfx| pool.on_nodes_lost(pfx, nodes, &lost));
        }
        lost
    }

    /// For `-outfile-pattern`'s `%p`/`%h`: where `node` stands in `job`, if the driver wants it.
    fn tell_place(&mut self, fx: &mut dyn TreeEffects, owner: u32, job: JobId, node: NodeId) {
        if !fx.wants_place(owner, job, node) {
            return;
        }
        if let Some(index) = self.runs.get(&owner).and_then(|r| r.job_node_index(job, node)) {
            fx.place(owner, job, node, index, self.parts.nodes.host(node));
        }
    }

    /// One event of the run of `owner` with its effects; `None`: no such run.
    fn with_run<T>(&mut self, fx: &mut dyn TreeEffects, owner: u32, event: impl FnOnce(&mut Run, &mut RunFx<'_>) -> T) -> Option<T> {
        let run = self.runs.get_mut(&owner)?;
        let mut rfx = RunFx { owner, parts: &mut self.parts, pool_wake: &mut self.pool_wake, fx };
        Some(event(run, &mut rfx))
    }

    /// The same event for every run (a loss, a trace line).
    fn each_run(&mut self, fx: &mut dyn TreeEffects, mut event: impl FnMut(&mut Run, &mut RunFx<'_>)) {
        for (&owner, run) in &mut self.runs {
            let mut rfx = RunFx { owner, parts: &mut self.parts, pool_wake: &mut self.pool_wake, fx };
            event(run, &mut rfx);
        }
    }

    /// One event of the pool with its effects.
    fn with_pool<T>(&mut self, fx: &mut dyn TreeEffects, event: impl FnOnce(&mut crate::run::Pool, &mut NodeTable, &mut PoolFx<'_>) -> T) -> T {
        let mut pfx = PoolFx { pool_wake: &mut self.pool_wake, fx };
        event(&mut self.parts.pool, &mut self.parts.nodes, &mut pfx)
    }

    /// Panics unless the tree holds together: each run's parts with the
    /// tree's, and the tree's own invariants over every run (routes = the
    /// runs' live jobs, pool ∩ runs = ∅, one slot ledger). The unit and
    /// cluster tests call it after every event.
    pub fn check_invariants(&self) {
        for run in self.runs.values() {
            run.check_invariants(&self.parts);
        }
        self.parts.check_invariants(&self.runs.values().map(Run::view).collect::<Vec<_>>());
    }
}
