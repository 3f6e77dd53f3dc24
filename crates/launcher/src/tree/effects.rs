//! What the [`super::Tree`] does to the world: [`TreeEffects`], the one
//! effects trait of the tree level; the adapters through which its runs
//! ([`RunFx`]: a run's effects, tagged with its owner) and its pool
//! ([`PoolFx`]) act through it; and [`TreeRecorder`], which records every
//! effect under a virtual clock (unit tests, the in-process cluster).

use std::time::Duration;

use dpm_kvs::{JobId, NodeId, Rank};
use dpm_proto::control::ProcInfo;
use dpm_proto::{Stream, ToDaemon, ToLauncher};

use crate::plan::{FileTable, Files};
use crate::run::{PoolEffects, RunEffects, Timer, TreeShared};

/// Everything a [`super::Tree`] does besides changing its own state. A
/// run's effects are tagged with its `owner`.
pub trait TreeEffects {
    /// A message for the daemon of `node`.
    fn send(&mut self, node: NodeId, msg: ToDaemon);
    /// Output of a rank of the run of `owner`, to pass on; once written,
    /// the driver gives [`super::RunInput::Written`] to that run.
    fn output(&mut self, owner: u32, node: NodeId, job: JobId, rank: Rank, stream: Stream, data: &[u8]);
    /// A rank of the run of `owner` ended: write what is left of its lines.
    fn flush_output(&mut self, owner: u32, job: JobId, rank: Rank);
    /// One line of dpm's own for the run of `owner` (its stderr).
    fn say(&mut self, owner: u32, line: &str);
    /// Whole lines of a tool daemon's output (MPIR), for the run of `owner`.
    fn tool_output(&mut self, owner: u32, stream: Stream, data: &[u8]);
    /// Now, in µs since the Unix epoch.
    fn now_micros(&self) -> u64;
    /// Give [`super::RunInput::Timer`] to the run of `owner` after `after`; again: moved.
    fn arm(&mut self, owner: u32, timer: Timer, after: Duration);
    /// The run of `owner` is over with exit status `code`.
    fn finished(&mut self, owner: u32, code: i32);
    /// Call [`super::Tree::on_pool_timer`] with `at` (µs since the epoch) then; again: moved.
    fn wake_pool(&mut self, at: u64);
    /// The file system spawns are resolved in.
    fn files(&self) -> &dyn Files;
    /// Every rank of `job` of the run of `owner` has started (MPIR).
    fn procs_started(&mut self, owner: u32, job: JobId, procs: Vec<ProcInfo>, held: bool);
    /// `node` was lost (`why`), taking `lost` (it and its subtree, those
    /// not lost before) with it; every run has heard it.
    fn nodes_lost(&mut self, _node: NodeId, _why: &str, _lost: &[NodeId]) {}
    /// `node` was lost and `detached` (the nodes below it) wait for their
    /// daemons to re-attach ([`super::Tree::reattach`]); the driver gives
    /// each one still detached after its wait to [`super::Tree::on_up`] as lost.
    fn nodes_detached(&mut self, _node: NodeId, _detached: &[NodeId]) {}
    /// A drained node is empty and released in the table (`line` says so):
    /// shut its daemon's link.
    fn node_left(&mut self, _node: NodeId, _line: &str) {}
    /// A message up about a job of the run of `owner`, before that run
    /// handles it (what the driver records: `-print-all-exitcodes`).
    fn up_for_run(&mut self, _owner: u32, _node: NodeId, _msg: &ToLauncher) {}
    /// Whether the driver wants to know where `node` stands in `job` (the file patterns).
    fn wants_place(&self, _owner: u32, _job: JobId, _node: NodeId) -> bool {
        false
    }
    /// Where `node` stands in `job` (its index among the job's nodes) and its host.
    fn place(&mut self, _owner: u32, _job: JobId, _node: NodeId, _index: usize, _host: &str) {}
}

/// A run's effects inside the tree: its owner's, through the tree's.
pub(super) struct RunFx<'a> {
    pub(super) owner: u32,
    pub(super) parts: &'a mut TreeShared,
    pub(super) pool_wake: &'a mut Option<u64>,
    pub(super) fx: &'a mut dyn TreeEffects,
}

impl RunEffects for RunFx<'_> {
    fn send(&mut self, node: NodeId, msg: ToDaemon) {
        self.fx.send(node, msg);
    }
    fn output(&mut self, node: NodeId, job: JobId, rank: Rank, stream: Stream, data: &[u8]) {
        self.fx.output(self.owner, node, job, rank, stream, data);
    }
    fn flush_output(&mut self, job: JobId, rank: Rank) {
        self.fx.flush_output(self.owner, job, rank);
    }
    fn say(&mut self, line: &str) {
        self.fx.say(self.owner, line);
    }
    fn tool_output(&mut self, stream: Stream, data: &[u8]) {
        self.fx.tool_output(self.owner, stream, data);
    }
    fn now_micros(&self) -> u64 {
        self.fx.now_micros()
    }
    fn arm(&mut self, timer: Timer, after: Duration) {
        self.fx.arm(self.owner, timer, after);
    }
    fn shared(&mut self) -> &mut TreeShared {
        self.parts
    }
    fn finished(&mut self, code: i32) {
        self.fx.finished(self.owner, code);
    }
    fn wake_pool(&mut self, at: u64) {
        *self.pool_wake = Some(at);
        self.fx.wake_pool(at);
    }
    fn files(&self) -> &dyn Files {
        self.fx.files()
    }
    fn procs_started(&mut self, job: JobId, procs: Vec<ProcInfo>, held: bool) {
        self.fx.procs_started(self.owner, job, procs, held);
    }
}

/// The pool's effects inside the tree.
pub(super) struct PoolFx<'a> {
    pub(super) pool_wake: &'a mut Option<u64>,
    pub(super) fx: &'a mut dyn TreeEffects,
}

impl PoolEffects for PoolFx<'_> {
    fn send(&mut self, node: NodeId, msg: ToDaemon) {
        self.fx.send(node, msg);
    }
    fn wake_at(&mut self, at: u64) {
        *self.pool_wake = Some(at);
        self.fx.wake_pool(at);
    }
    fn say(&mut self, owner: u32, line: &str) {
        self.fx.say(owner, line);
    }
    fn ready(&mut self, owner: u32) {
        self.fx.arm(owner, Timer::WarmNext, Duration::ZERO);
    }
}

/// One recorded effect of the tree.
// A launch message is large, but boxing it would only add noise to every
// test that matches on what was sent.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum TreeEffect {
    Send(NodeId, ToDaemon),
    Output(u32, NodeId, JobId, Rank, Stream, Vec<u8>),
    Flush(u32, JobId, Rank),
    Say(u32, String),
    ToolOutput(u32, Stream, Vec<u8>),
    Arm(u32, Timer, Duration),
    Finished(u32, i32),
    WakePool(u64),
    ProcsStarted(u32, JobId, Vec<ProcInfo>, bool),
    NodesLost(NodeId, String, Vec<NodeId>),
    NodeLeft(NodeId, String),
}

/// A [`TreeEffects`] that records every effect, with a virtual clock
/// (`now`, µs since the epoch, moved by the caller).
pub struct TreeRecorder {
    pub effects: Vec<TreeEffect>,
    pub now: u64,
    /// The file system spawns are resolved in: a table, not this machine's.
    pub files: FileTable,
}

impl Default for TreeRecorder {
    fn default() -> Self {
        TreeRecorder { effects: Vec::new(), now: 1_000_000, files: FileTable::small() }
    }
}

impl TreeRecorder {
    /// Take what was recorded so far.
    pub fn take(&mut self) -> Vec<TreeEffect> {
        std::mem::take(&mut self.effects)
    }

    /// The messages sent so far (without taking them).
    pub fn sent(&self) -> Vec<(NodeId, &ToDaemon)> {
        self.effects.iter().filter_map(|e| if let TreeEffect::Send(n, m) = e { Some((*n, m)) } else { None }).collect()
    }

    /// The lines said to the run of `owner` so far.
    pub fn said(&self, owner: u32) -> Vec<&str> {
        self.effects.iter().filter_map(|e| if let TreeEffect::Say(o, l) = e { (*o == owner).then_some(l.as_str()) } else { None }).collect()
    }

    /// The exit status of the run of `owner`, once it finished.
    pub fn exit_code(&self, owner: u32) -> Option<i32> {
        self.effects.iter().find_map(|e| if let TreeEffect::Finished(o, c) = e { (*o == owner).then_some(*c) } else { None })
    }
}

impl TreeEffects for TreeRecorder {
    fn send(&mut self, node: NodeId, msg: ToDaemon) {
        self.effects.push(TreeEffect::Send(node, msg));
    }
    fn output(&mut self, owner: u32, node: NodeId, job: JobId, rank: Rank, stream: Stream, data: &[u8]) {
        self.effects.push(TreeEffect::Output(owner, node, job, rank, stream, data.to_vec()));
    }
    fn flush_output(&mut self, owner: u32, job: JobId, rank: Rank) {
        self.effects.push(TreeEffect::Flush(owner, job, rank));
    }
    fn say(&mut self, owner: u32, line: &str) {
        self.effects.push(TreeEffect::Say(owner, line.to_string()));
    }
    fn tool_output(&mut self, owner: u32, stream: Stream, data: &[u8]) {
        self.effects.push(TreeEffect::ToolOutput(owner, stream, data.to_vec()));
    }
    fn now_micros(&self) -> u64 {
        self.now
    }
    fn arm(&mut self, owner: u32, timer: Timer, after: Duration) {
        self.effects.push(TreeEffect::Arm(owner, timer, after));
    }
    fn finished(&mut self, owner: u32, code: i32) {
        self.effects.push(TreeEffect::Finished(owner, code));
    }
    fn wake_pool(&mut self, at: u64) {
        self.effects.push(TreeEffect::WakePool(at));
    }
    fn files(&self) -> &dyn Files {
        &self.files
    }
    fn procs_started(&mut self, owner: u32, job: JobId, procs: Vec<ProcInfo>, held: bool) {
        self.effects.push(TreeEffect::ProcsStarted(owner, job, procs, held));
    }
    fn nodes_lost(&mut self, node: NodeId, why: &str, lost: &[NodeId]) {
        self.effects.push(TreeEffect::NodesLost(node, why.to_string(), lost.to_vec()));
    }
    fn node_left(&mut self, node: NodeId, line: &str) {
        self.effects.push(TreeEffect::NodeLeft(node, line.to_string()));
    }
}
