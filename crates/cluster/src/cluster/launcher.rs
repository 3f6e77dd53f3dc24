//! The launcher's side of the [`Cluster`]: the run reactor and the tree's
//! pool of unclaimed pooled jobs ([`dpm_launcher::run::Pool`]), a message from
//! the tree going where the tree's one rule says
//! ([`dpm_launcher::run::TreeShared::destination`], which
//! `controller::dispatch` asks too), and their effects carried out. Every
//! event ends with the run's, the pool's and the tree's invariant checks
//! ([`Run::check_invariants`], `TreeShared::check_invariants`: routes = the
//! live jobs, one slot ledger). A booted tree's later runs are
//! [`Cluster::next_run`].

use std::time::Duration;

use dpm_kvs::{JobId, NodeId, Rank};
use dpm_launcher::run::{Destination, Effect, PoolEffects, PoolOutbox, Recorder, Run, Settings};
use dpm_launcher::spawn::SpawnContext;
use dpm_proto::{tree, LaunchJob, PmiMode, ToDaemon, ToLauncher};

use super::{Cluster, Event, EPOCH_MICROS};
use crate::layout::Layout;

/// The settings of the run of `owner` on `layout`'s nodes `n0`, `n1`…,
/// pooling `warm_spawn` jobs per spawn shape.
pub(super) fn run_settings(layout: &Layout, owner: u32, warm_spawn: usize) -> Settings {
    let hosts: Vec<String> = (0..layout.nodes).map(|i| format!("n{i}")).collect();
    Settings {
        label: false,
        kill_grace: layout.kill_grace,
        universe_size: i64::from(layout.slots) * layout.nodes as i64,
        pmi_mode: PmiMode::Fd,
        no_oversubscribe: layout.no_oversubscribe,
        report_placement: false,
        spawn: SpawnContext { base_env: Vec::new(), cwd: "/".into(), host: hosts[0].clone(), nodes: hosts, node_env: false },
        node_slots: vec![layout.slots; layout.nodes],
        fanout: layout.fanout,
        owner,
        warm_spawn,
        warm_verbose: true,
        binding: Default::default(),
        on_timeout: Default::default(),
    }
}

impl Cluster {
    /// Warm spawn: the run pools `n` jobs per spawn shape (before its first job).
    pub fn set_warm_spawn(&mut self, n: usize) {
        self.run = Run::new(run_settings(&self.layout, 1, n));
    }

    /// The tree keeps a run's unclaimed pooled jobs for later runs (a boot's
    /// `--warm-spawn=N`): `limit` per shape, for `idle`.
    pub fn keep_pooled(&mut self, limit: usize, idle: Duration) {
        self.run_fx.shared.pool.set_policy(limit, idle);
    }

    /// The run is over: the next run of the same tree (a boot's), its owner
    /// the next number, pooling `warm_spawn` jobs per shape; launch its first
    /// job with [`Cluster::launch`].
    pub fn next_run(&mut self, warm_spawn: usize) {
        assert!(self.exit.is_some(), "the run before is over");
        let owner = self.run.owner() + 1;
        self.run = Run::new(run_settings(&self.layout, owner, warm_spawn));
        (self.exit, self.finished_at) = (None, None);
        self.timers.clear();
    }

    /// The tree goes down (`dpm down`): the pool kills every job it keeps.
    pub fn end_tree(&mut self) {
        self.with_pool(|pool, fx| pool.drop_all(fx));
    }

    /// Whether the tree's pool holds `job` (pooled, or killed and not yet forgotten).
    pub fn pool_holds(&self, job: JobId) -> bool {
        self.run_fx.shared.pool.holds(job)
    }

    /// Whether the messages about `job` go to the run (a claim moved it there).
    pub fn routed_to_run(&self, job: JobId) -> bool {
        matches!(self.run_fx.shared.destination(Some(job)), Destination::Run(_))
    }

    /// Kill rank `rank` of `job` at virtual time `at`, from outside.
    pub fn kill_at(&mut self, at: Duration, job: JobId, rank: Rank) {
        self.schedule_at(at, Event::Kill { job, rank });
    }

    /// A message from the tree for the launcher: where the tree's rule says
    /// (the run if its job is routed there, or it names no job; the pool if
    /// it holds it). A forgotten job's goes to the run too, which drops it.
    pub(super) fn up_to_launcher(&mut self, origin: NodeId, msg: ToLauncher) {
        match self.run_fx.shared.destination(msg.job()) {
            Destination::Pool => self.with_pool(|pool, fx| pool.on_message(fx, origin, msg)),
            Destination::Run(_) | Destination::Every | Destination::Nowhere => self.with_run(|run, fx| run.on_message(fx, origin, msg)),
        }
    }

    /// The pool's deadline has come (if it is still the one asked for).
    pub(super) fn pool_timer(&mut self, at: u64) {
        if self.pool_wake == Some(at) {
            self.pool_wake = None;
            let now = self.clock();
            self.with_pool(|pool, fx| pool.on_timer(fx, now));
        }
    }

    fn clock(&self) -> u64 {
        EPOCH_MICROS + self.now.as_micros() as u64
    }

    fn with_pool(&mut self, call: impl FnOnce(&mut dpm_launcher::run::Pool, &mut dyn PoolEffects)) {
        let mut out = PoolOutbox::default();
        call(&mut self.run_fx.shared.pool, &mut out);
        for (node, msg) in out.sent {
            self.send_down(node, msg);
        }
        if let Some(at) = out.wake {
            self.wake_pool(at);
        }
        // One run at a time: every line is for its console.
        self.said.extend(out.said.into_iter().map(|(_, line)| line));
        self.check_tree();
    }

    /// The run's invariants and the tree's, the run its only one.
    fn check_tree(&self) {
        self.run.check_invariants(&self.run_fx.shared);
        self.run_fx.shared.check_invariants(&[self.run.view()]);
    }

    fn wake_pool(&mut self, at: u64) {
        self.pool_wake = Some(at);
        let after = Duration::from_micros(at.saturating_sub(self.clock()));
        self.schedule(after, Event::PoolTimer(at));
    }

    /// As the launcher's links send: addressed (`Down::To`), to the
    /// top-level child whose subtree holds the node.
    fn send_down(&mut self, node: NodeId, msg: ToDaemon) {
        // Known from the moment the run launches it, before the spawn's
        // answer (sent first) reaches the parent.
        let answer = match &msg {
            ToDaemon::Launch(LaunchJob { job, size, spawner: Some(parent), awaiting_claim, .. }) => {
                self.spawned_by.entry(*job).or_insert_with(|| (parent.clone(), *size));
                (!awaiting_claim).then_some(*job)
            }
            ToDaemon::Claim { job, .. } => Some(*job),
            _ => None,
        };
        if let Some(job) = answer.filter(|j| !self.spawn_answers.contains(j)) {
            self.spawn_answers.push(job);
        }
        let Some(top) = tree::next_hop(None, node, self.layout.fanout) else { return };
        let at = self.frame_arrival(None, &msg);
        self.schedule_at(at, Event::Down { node: top.0, to: node, msg });
    }

    pub(super) fn with_run(&mut self, call: impl FnOnce(&mut Run, &mut Recorder)) {
        self.run_fx.now = self.clock();
        call(&mut self.run, &mut self.run_fx);
        while self.apply_run_effects() {}
        self.check_tree();
    }

    /// Carry out what the run asked; true if it wrote output, whose credit
    /// was handed back and may have asked for more.
    fn apply_run_effects(&mut self) -> bool {
        let (mut written, mut held) = (Vec::new(), Vec::new());
        for effect in self.run_fx.take() {
            match effect {
                Effect::Send(node, msg) => self.send_down(node, msg),
                // Written at once: its credit goes back as a real console's would.
                Effect::Output(node, job, rank, _, data) => {
                    written.push((node, job, data.len() as u64));
                    self.output.entry((job, rank)).or_default().extend(data);
                }
                Effect::Say(line) => self.said.push(line),
                Effect::Arm(timer, after) => {
                    self.seq += 1;
                    let generation = self.seq;
                    self.timers.insert(timer, generation);
                    self.schedule(after, Event::RunTimer { timer, generation });
                }
                Effect::Finished(code) => {
                    self.exit = Some(code);
                    self.finished_at = Some(self.now);
                }
                Effect::WakePool(at) => self.wake_pool(at),
                // No debugger here: a held job goes on at once.
                Effect::ProcsStarted(job, _, true) => held.push(job),
                Effect::Flush(..) | Effect::ProcsStarted(..) | Effect::ToolOutput(..) => {}
            }
        }
        for job in held {
            self.run.continue_job(&mut self.run_fx, job);
        }
        for &(node, job, bytes) in &written {
            self.run.on_output_written(&mut self.run_fx, node, job, bytes);
        }
        !written.is_empty()
    }
}
