//! What a run reactor does to the world: the [`RunEffects`] trait, and
//! [`Recorder`], an implementation that records everything under a virtual
//! clock (for tests, and for an in-process cluster that forwards the
//! recorded messages to node reactors).

use std::time::Duration;

use dpm_kvs::{JobId, NodeId, Rank};
use dpm_proto::control::ProcInfo;
use dpm_proto::{Stream, ToDaemon};

use super::pool::{Pool, PoolEffects, PoolOutbox};
use super::TreeShared;
use crate::node_table::NodeTable;
use crate::plan::{FileTable, Files};

/// A deadline a run asks its driver for; arming one again moves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Timer {
    /// `--timeout`: the run is killed (SIGTERM, then the grace).
    Timeout,
    /// The grace after SIGTERM (or a forwarded signal): then SIGKILL.
    KillGrace,
    /// Warm spawn: fill the pools again, a moment after a claim.
    WarmRefill,
    /// Warm spawn: pool the shapes missed once, a moment after a spawned
    /// job's end (if their parent is still there).
    WarmLearn,
    /// Warm spawn: a pooled job of the run is ready for its claim; the
    /// next one held back for it may start ([`crate::run::Pool::starting`]).
    WarmNext,
    /// The ranks' reports asked for at the timeout are due (`report`).
    Reports,
    /// The ranks' states listed for a tool are due (`report::Listing`).
    Listing,
}

/// Everything a [`super::Run`] does besides changing its own state.
pub trait RunEffects {
    /// A message for the daemon of `node`.
    fn send(&mut self, node: NodeId, msg: ToDaemon);
    /// Output of a rank from `node`'s daemon, to pass on (raw or labelled).
    /// Once it is written to its destination, the driver calls
    /// [`super::Run::on_output_written`] with its length.
    fn output(&mut self, node: NodeId, job: JobId, rank: Rank, stream: Stream, data: &[u8]);
    /// A rank ended: write what is left of its unfinished lines.
    fn flush_output(&mut self, job: JobId, rank: Rank);
    /// One line of dpm's own on stderr (the summary line among them).
    fn say(&mut self, line: &str);
    /// Output of a debugger's tool daemon (whole lines), for the run's
    /// stdout or stderr as it is.
    fn tool_output(&mut self, stream: Stream, data: &[u8]);
    /// Now, in µs since the Unix epoch (the clock of the daemons' `at`).
    fn now_micros(&self) -> u64;
    /// Call [`super::Run::on_timer`] with `timer` after `after`; again: moved.
    fn arm(&mut self, timer: Timer, after: Duration);
    /// What the runs of one tree share: names, job ids, nodes and their load.
    fn shared(&mut self) -> &mut TreeShared;
    /// The run is over; dpm's exit status is `code`.
    fn finished(&mut self, code: i32);
    /// The tree's pool ([`super::Pool`]) asked to be woken at `at` (µs since
    /// the epoch): the driver calls [`super::Pool::on_timer`] then; again: moved.
    fn wake_pool(&mut self, at: u64);
    /// The file system a spawn's programs, directories and host files are
    /// resolved in (this machine's, for a live run).
    fn files(&self) -> &dyn Files;
    /// Every rank of `job` has started (once per job): its ranks in rank
    /// order, for MPIR's process table. `held`: launched held for a
    /// debugger; the driver calls [`super::Run::continue_job`] once the
    /// debugger let the starter go on.
    fn procs_started(&mut self, job: JobId, procs: Vec<ProcInfo>, held: bool);
}

/// One recorded effect.
// A launch message is large, but boxing it would only add noise to every
// test that matches on what was sent.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum Effect {
    Send(NodeId, ToDaemon),
    Output(NodeId, JobId, Rank, Stream, Vec<u8>),
    Flush(JobId, Rank),
    Say(String),
    ToolOutput(Stream, Vec<u8>),
    Arm(Timer, Duration),
    Finished(i32),
    WakePool(u64),
    ProcsStarted(JobId, Vec<ProcInfo>, bool),
}

/// A [`RunEffects`] that records every effect, with a virtual clock
/// (`now`, µs since the epoch, moved by the caller).
pub struct Recorder {
    pub effects: Vec<Effect>,
    pub now: u64,
    pub shared: TreeShared,
    /// The file system spawns are resolved in: a table, not this machine's.
    pub files: FileTable,
}

impl Recorder {
    pub fn new(shared: TreeShared) -> Self {
        Recorder { effects: Vec::new(), now: 1_000_000, shared, files: FileTable::small() }
    }

    /// Take what was recorded so far.
    pub fn take(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.effects)
    }

    /// The messages sent so far (without taking them).
    pub fn sent(&self) -> Vec<(NodeId, &ToDaemon)> {
        self.effects.iter().filter_map(|e| if let Effect::Send(n, m) = e { Some((*n, m)) } else { None }).collect()
    }

    /// dpm's own lines so far.
    pub fn said(&self) -> Vec<&str> {
        self.effects.iter().filter_map(|e| if let Effect::Say(l) = e { Some(l.as_str()) } else { None }).collect()
    }

    /// The exit status, once the run said it is finished.
    pub fn exit_code(&self) -> Option<i32> {
        self.effects.iter().find_map(|e| if let Effect::Finished(c) = e { Some(*c) } else { None })
    }
}

impl RunEffects for Recorder {
    fn send(&mut self, node: NodeId, msg: ToDaemon) {
        self.effects.push(Effect::Send(node, msg));
    }
    fn output(&mut self, node: NodeId, job: JobId, rank: Rank, stream: Stream, data: &[u8]) {
        self.effects.push(Effect::Output(node, job, rank, stream, data.to_vec()));
    }
    fn flush_output(&mut self, job: JobId, rank: Rank) {
        self.effects.push(Effect::Flush(job, rank));
    }
    fn say(&mut self, line: &str) {
        self.effects.push(Effect::Say(line.to_string()));
    }
    fn tool_output(&mut self, stream: Stream, data: &[u8]) {
        self.effects.push(Effect::ToolOutput(stream, data.to_vec()));
    }
    fn now_micros(&self) -> u64 {
        self.now
    }
    fn arm(&mut self, timer: Timer, after: Duration) {
        self.effects.push(Effect::Arm(timer, after));
    }
    fn shared(&mut self) -> &mut TreeShared {
        &mut self.shared
    }
    fn finished(&mut self, code: i32) {
        self.effects.push(Effect::Finished(code));
    }
    fn wake_pool(&mut self, at: u64) {
        self.effects.push(Effect::WakePool(at));
    }

    fn procs_started(&mut self, job: JobId, procs: Vec<ProcInfo>, held: bool) {
        self.effects.push(Effect::ProcsStarted(job, procs, held));
    }

    fn files(&self) -> &dyn Files {
        &self.files
    }
}

/// Carry out what the pool did in a run's event through the run's effects.
pub(super) fn with_pool<T>(fx: &mut dyn RunEffects, event: impl FnOnce(&mut Pool, &mut NodeTable, &mut dyn PoolEffects) -> T) -> T {
    let mut out = PoolOutbox::default();
    let shared = fx.shared();
    let t = event(&mut shared.pool, &mut shared.nodes, &mut out);
    for (node, msg) in out.sent {
        fx.send(node, msg);
    }
    if let Some(at) = out.wake {
        fx.wake_pool(at);
    }
    // In a run's event the pool speaks only of that run's jobs.
    for (_, line) in out.said {
        fx.say(&line);
    }
    if !out.ready.is_empty() {
        fx.arm(Timer::WarmNext, Duration::ZERO);
    }
    t
}
