//! The launcher's side of the [`Cluster`]: the tree level
//! ([`dpm_launcher::tree::Tree`]: the runs of a booted tree, the pool of
//! unclaimed pooled jobs, routes and the node table), each message from the
//! daemons handed to it ([`Tree::on_message`] says where it goes — the same
//! handler `controller::dispatch` calls), and its effects carried out under
//! the virtual clock. Every event ends with the tree's invariant checks
//! ([`Tree::check_invariants`]: each run's parts, routes = the live jobs,
//! pool ∩ runs = ∅, one slot ledger). A booted tree's later runs are
//! [`Cluster::next_run`]; concurrent ones [`Cluster::begin_run`].

use std::time::Duration;

use dpm_kvs::{JobId, NodeId};
use dpm_launcher::run::{Destination, Run, Settings};
use dpm_launcher::spawn::SpawnContext;
use dpm_launcher::tree::{RunInput, Tree, TreeEffect, TreeEffects};
use dpm_proto::{LaunchJob, PmiMode, ToDaemon, ToLauncher};

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
        universe_follows: None,
        pmi_mode: PmiMode::Fd,
        no_oversubscribe: layout.no_oversubscribe,
        report_placement: false,
        spawn: SpawnContext { base_env: Vec::new(), cwd: "/".into(), host: hosts[0].clone(), nodes: hosts, node_env: false },
        node_slots: vec![layout.slots; layout.nodes],
        fanout: layout.fanout,
        heap_nodes: usize::MAX,
        owner,
        warm_spawn,
        warm_verbose: true,
        warm_starting: 0,
        binding: Default::default(),
        on_timeout: Default::default(),
    }
}

impl Cluster {
    /// Warm spawn: the run pools `n` jobs per spawn shape (before its first job).
    pub fn set_warm_spawn(&mut self, n: usize) {
        self.tree.end_run(self.owner);
        assert!(self.tree.add_run(Run::new(run_settings(&self.layout, self.owner, n))).is_ok());
    }

    /// The tree keeps a run's unclaimed pooled jobs for later runs (a boot's
    /// `--warm-spawn=N`): `limit` per shape, for `idle`.
    pub fn keep_pooled(&mut self, limit: usize, idle: Duration) {
        self.tree.shared_mut().pool.set_policy(limit, idle);
    }

    /// The run is over: the next run of the same tree (a boot's), its owner
    /// the next number, pooling `warm_spawn` jobs per shape; launch its first
    /// job with [`Cluster::launch`].
    pub fn next_run(&mut self, warm_spawn: usize) {
        assert!(self.exit.is_some(), "the run before is over");
        let old = self.owner;
        self.tree.end_run(old);
        self.timers.retain(|(owner, _), _| *owner != old);
        self.begin_run(warm_spawn);
    }

    /// Another run of the tree begins beside those going (a boot's next
    /// client), its owner the next number, pooling `warm_spawn` jobs per
    /// shape: from now on [`Cluster::launch`], signals and the timeout are
    /// its, and [`Cluster::exit`] is its end. Its owner.
    pub fn begin_run(&mut self, warm_spawn: usize) -> u32 {
        self.owner = self.tree.owners().chain(self.exits.keys().copied()).max().unwrap_or(0).max(self.owner) + 1;
        assert!(self.tree.add_run(Run::new(run_settings(&self.layout, self.owner, warm_spawn))).is_ok());
        (self.exit, self.finished_at) = (None, None);
        self.owner
    }

    /// A booted run's first job: `n` ranks of script `name` placed by the
    /// tree as a boot places a submission (into the slots other runs left
    /// free, kept pooled jobs giving theirs up).
    pub fn submit(&mut self, name: &str, n: u32) -> JobId {
        let owner = self.owner;
        let universe = i64::from(self.layout.slots) * self.layout.nodes as i64;
        let kvs = self.layout.kvs;
        let mut made = None;
        self.with_tree(|tree, fx| {
            let first = |job: JobId, kvsname: String, nodes: &dpm_launcher::node_table::NodeTable| {
                made = Some(job);
                let node_of = nodes.plan_booted(n as usize, None, false);
                let mut planned = dpm_launcher::plan::PlannedJob::new();
                let app = dpm_proto::AppSpec {
                    exe: "/bin/true".into(),
                    argv: vec!["/bin/true".into(), name.into()],
                    env: Vec::new(),
                    wdir: "/".into(),
                    node_env: false,
                };
                planned.push_app(app, n);
                let launch = planned.into_launch(job, kvsname, universe, node_of, PmiMode::Fd, kvs);
                LaunchJob { stdin_rank: Some(dpm_kvs::Rank(0)), ..launch }
            };
            tree.submit(fx, owner, n as usize, first).expect("a valid job");
            tree.on_run(fx, owner, RunInput::Settle);
        });
        made.expect("a job made")
    }

    /// The exit status of the run of `owner`, once it finished.
    pub fn exit_of(&self, owner: u32) -> Option<i32> {
        self.exits.get(&owner).map(|(code, _)| *code)
    }

    /// The tree, for reading (its node table, pool, routes).
    pub fn tree(&self) -> &Tree {
        &self.tree
    }

    /// The tree goes down (`dpm down`): the pool kills every job it keeps.
    pub fn end_tree(&mut self) {
        self.with_tree(|tree, fx| tree.drop_pooled(fx));
    }

    /// Whether the tree's pool holds `job` (pooled, or killed and not yet forgotten).
    pub fn pool_holds(&self, job: JobId) -> bool {
        self.tree.shared().pool.holds(job)
    }

    /// Whether the messages about `job` go to a run (a claim moved it there).
    pub fn routed_to_run(&self, job: JobId) -> bool {
        matches!(self.tree.shared().destination(Some(job)), Destination::Run(_))
    }

    /// Kill rank `rank` of `job` at virtual time `at`, from outside.
    pub fn kill_at(&mut self, at: Duration, job: JobId, rank: dpm_kvs::Rank) {
        self.schedule_at(at, Event::Kill { job, rank });
    }

    /// A message from the tree for the launcher: the tree's one rule says
    /// where it goes (a run, the pool, every run, or no one).
    pub(super) fn up_to_launcher(&mut self, origin: NodeId, msg: ToLauncher) {
        self.with_tree(|tree, fx| tree.on_message(fx, origin, msg));
    }

    /// The pool's deadline has come (the tree ignores it unless it is the one asked for).
    pub(super) fn pool_timer(&mut self, at: u64) {
        self.with_tree(|tree, fx| tree.on_pool_timer(fx, at));
    }

    fn clock(&self) -> u64 {
        EPOCH_MICROS + self.now.as_micros() as u64
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
        let Some(top) = self.top_of(node.0) else { return };
        let at = self.frame_arrival(None, &msg);
        self.schedule_at(at, Event::Down { node: top, to: node, msg });
    }

    /// One event of the tree, its effects carried out; the tree's
    /// invariants checked after it.
    pub(super) fn with_tree<T>(&mut self, call: impl FnOnce(&mut Tree, &mut dyn TreeEffects) -> T) -> T {
        self.tree_fx.now = self.clock();
        let t = call(&mut self.tree, &mut self.tree_fx);
        while self.apply_tree_effects() {}
        self.tree.check_invariants();
        t
    }

    /// Carry out what the tree asked; true if it wrote output, whose credit
    /// was handed back and may have asked for more.
    fn apply_tree_effects(&mut self) -> bool {
        let (mut written, mut held, mut left) = (Vec::new(), Vec::new(), Vec::new());
        for effect in self.tree_fx.take() {
            match effect {
                TreeEffect::Send(node, msg) => self.send_down(node, msg),
                // Written at once: its credit goes back as a real console's would.
                TreeEffect::Output(owner, node, job, rank, _, data) => {
                    written.push((owner, node, job, data.len() as u64));
                    self.output.entry((job, rank)).or_default().extend(data);
                }
                TreeEffect::Say(owner, line) => {
                    self.said.push(line.clone());
                    self.said_to.push((owner, line));
                }
                TreeEffect::Arm(owner, timer, after) => {
                    self.seq += 1;
                    let generation = self.seq;
                    self.timers.insert((owner, timer), generation);
                    self.schedule(after, Event::RunTimer { owner, timer, generation });
                }
                TreeEffect::Finished(owner, code) => {
                    self.exits.insert(owner, (code, self.now));
                    if owner == self.owner {
                        self.exit = Some(code);
                        self.finished_at = Some(self.now);
                    }
                }
                TreeEffect::WakePool(at) => {
                    let after = Duration::from_micros(at.saturating_sub(self.clock()));
                    self.schedule(after, Event::PoolTimer(at));
                }
                // No debugger here: a held job goes on at once.
                TreeEffect::ProcsStarted(owner, job, _, true) => held.push((owner, job)),
                TreeEffect::NodeLeft(node, _) => left.push(node),
                TreeEffect::Flush(..) | TreeEffect::ProcsStarted(..) | TreeEffect::NodesLost(..) | TreeEffect::ToolOutput(..) => {}
            }
        }
        for node in left {
            self.node_left(node);
        }
        for (owner, job) in held {
            self.tree.on_run(&mut self.tree_fx, owner, RunInput::Continue(job));
        }
        for &(owner, node, job, bytes) in &written {
            self.tree.on_run(&mut self.tree_fx, owner, RunInput::Written { node, job, bytes });
        }
        !written.is_empty()
    }
}
