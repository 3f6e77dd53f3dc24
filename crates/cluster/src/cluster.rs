//! [`Cluster`]: N real node reactors, each with its real [`TreeNode`], under
//! one real run reactor, wired the way dpm's links wire them — every message
//! to a node addressed (`Down::To`) and passed down by next hop, everything
//! up tagged with its origin (`Up::From`) and merged on the way — under a
//! virtual clock (charged by [`crate::layout::Costs`], with contention per
//! host in [`crate::resources`]), with
//! scripted processes ([`crate::process`]) in place of MPI programs.
//!
//! Each delivery is an event at a virtual time (now plus the costs of
//! the hop), taken in time order and, at equal times, in the order it was
//! made: a run is deterministic.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::time::Duration;

use dpm_daemon::node::recorder::RecordingEffects;
use dpm_daemon::node::{NodeReactor, ProcStarted, StartError, Timer as NodeTimer};
use dpm_daemon::tree::TreeNode;
use dpm_daemon::DaemonConfig;
use dpm_kvs::{JobId, NodeId, Rank};
use dpm_launcher::node_table::{fill, NodeTable};
use dpm_launcher::plan::PlannedJob;
use dpm_launcher::run::{FailurePolicy, Run, Timer as RunTimer};
use dpm_launcher::tree::{RunInput, Tree, TreeRecorder};
use dpm_pmi::ConnId;
use dpm_proto::link::Up;
use dpm_proto::{tree, AppSpec, ExitStatus, LaunchJob, PmiMode, ToDaemon, ToLauncher};

use crate::layout::Layout;
use crate::process::{Proc, Script};
use crate::resources::{DaemonThread, NodeResources};

mod launcher;
mod membership;
mod nodes;
mod reform;
mod scripted;

use launcher::run_settings;

/// The virtual epoch: the daemons' `at` and the run's clock are µs since the
/// Unix epoch; virtual time 0 is this.
const EPOCH_MICROS: u64 = 1_700_000_000_000_000;

#[derive(Debug)]
enum Event {
    /// A payload for node `to` arriving at `node` from its parent (`Down::To`).
    Down {
        node: usize,
        to: NodeId,
        msg: ToDaemon,
    },
    /// A payload from `origin` (`Up::From`) arriving at `to` (`None`: the
    /// launcher) from a child link.
    Up {
        to: Option<usize>,
        origin: NodeId,
        msg: ToLauncher,
    },
    /// The daemon of `node`, below a lost one, re-attaches to the launcher.
    Reattach(usize),
    /// The loss of `node`'s link (`Up::Lost`), reaching the launcher.
    Lost {
        node: usize,
        error: String,
    },
    /// A rank's request reaching its node.
    Pmi {
        node: usize,
        conn: ConnId,
        bytes: Vec<u8>,
    },
    /// The node's reply reaching a rank.
    Reply {
        proc: usize,
        bytes: Vec<u8>,
    },
    /// A rank goes on with its script.
    Wake {
        proc: usize,
    },
    NodeTimer {
        node: usize,
        timer: NodeTimer,
    },
    /// The receiver's CPU is done with this event: handle it now.
    Ready(Box<Event>),
    /// This event's fixed delay is over: charge its CPU, then handle it.
    Delayed(Box<Event>),
    /// A start the node asked for has happened.
    Started {
        node: usize,
        job: JobId,
        rank: Rank,
        result: Result<ProcStarted, StartError>,
    },
    RunTimer {
        owner: u32,
        timer: RunTimer,
        generation: u64,
    },
    /// The deadline the tree's pool asked for (µs since the epoch).
    PoolTimer(u64),
    /// A process is killed from outside (`kill -9`, the OOM killer).
    Kill {
        job: JobId,
        rank: Rank,
    },
    /// A signal for the run of `owner` (its `dpm run` got it).
    Signal {
        owner: u32,
        sig: i32,
    },
    LoseNode(usize),
}

/// One scripted process.
pub struct Process {
    pub node: usize,
    pub job: JobId,
    pub rank: Rank,
    pub pid: i32,
    pub pgid: i32,
    conn: Option<ConnId>,
    pub proc: Proc,
    /// How it ended, once it did.
    pub end: Option<ExitStatus>,
    /// When it was started, and when each reply reached it (requests: below).
    pub started_at: Duration,
    /// When it had been forked and exec'd, and when its library had started (its first step).
    pub forked_at: Duration,
    pub ready_at: Duration,
    /// When it ended.
    pub ended_at: Option<Duration>,
    pub reply_times: Vec<Duration>,
    /// When each request was sent.
    pub request_times: Vec<Duration>,
    waiting: bool,
    /// Only SIGKILL ends it.
    ignores_term: bool,
}

struct Node {
    reactor: NodeReactor,
    /// The reactor's effects, recorded and carried out after each call.
    fx: RecordingEffects,
    tree: TreeNode,
    alive: bool,
}

/// See the module documentation.
pub struct Cluster {
    layout: Layout,
    now: Duration,
    seq: u64,
    queue: BinaryHeap<Reverse<(Duration, u64)>>,
    events: HashMap<u64, Event>,
    nodes: Vec<Node>,
    /// The tree level: its runs, routes, pool and node table.
    tree: Tree,
    /// The tree's effects, recorded and carried out after each call.
    tree_fx: TreeRecorder,
    reform: reform::Reform,
    /// The run [`Cluster::launch`], signals and timeouts are for (the
    /// latest begun): its end is [`Cluster::exit`].
    owner: u32,
    /// Each node's cores and NIC, then the launcher's host's (one host: only the first).
    res: Vec<NodeResources>,
    /// Each node's daemon thread, then the launcher's (apart even on one host).
    threads: Vec<DaemonThread>,
    scripts: HashMap<String, Script>,
    /// Each spawned job's parent kvsname and size, from its `Launch`s.
    spawned_by: HashMap<JobId, (String, u32)>,
    /// The jobs spawns were answered with, in order: each spawned job at its
    /// `Launch`, a warm spawn's pooled job at its `Claim` instead.
    spawn_answers: Vec<JobId>,
    /// Parents in their accept ([`crate::Step::Accept`]), and the job each waits for.
    accepting: Vec<(usize, JobId)>,
    pub procs: Vec<Process>,
    conns: HashMap<(usize, ConnId), usize>,
    timers: HashMap<(u32, RunTimer), u64>,
    /// dpm's own lines (the summary line among them), every run's.
    pub said: Vec<String>,
    /// The same, each with the owner of the run it was said to.
    pub said_to: Vec<(u32, String)>,
    /// Each run's exit status and when it finished, by owner.
    pub exits: BTreeMap<u32, (i32, Duration)>,
    /// Every rank's output, per job and rank.
    pub output: BTreeMap<(JobId, Rank), Vec<u8>>,
    /// Jobs whose shared memory the nodes removed, per node.
    pub shm_removed: Vec<(usize, JobId)>,
    /// The PMIx watches the nodes listen with: (node, port) → job.
    watches: HashMap<(usize, u16), JobId>,
    pub exit: Option<i32>,
    /// When the run finished.
    pub finished_at: Option<Duration>,
    /// Check each node reactor's invariants after every event it handles
    /// (a broken one panics); on unless a caller turns it off (the startup
    /// model, sized for thousands of ranks: the check walks a node's ranks).
    pub check_nodes: bool,
    /// Drained nodes whose daemon left, in order ([`Cluster::drain`]).
    pub left: Vec<usize>,
}

impl Cluster {
    pub fn new(layout: Layout) -> Self {
        let hosts: Vec<String> = (0..layout.nodes).map(|i| format!("n{i}")).collect();
        let table = NodeTable::new(hosts.iter().map(|h| (h.clone(), layout.slots)), layout.fanout);
        let nodes = (0..layout.nodes)
            .map(|i| {
                let mut tree = TreeNode::new(NodeId(i));
                tree.set_shape(layout.fanout, layout.nodes);
                for c in tree::children(Some(NodeId(i)), layout.nodes, layout.fanout) {
                    tree.child_linked(c);
                }
                Node { reactor: NodeReactor::new(&DaemonConfig { host: hosts[i].clone(), trace: false }), fx: RecordingEffects::new(), tree, alive: true }
            })
            .collect();
        Cluster {
            now: Duration::ZERO,
            seq: 0,
            queue: BinaryHeap::new(),
            events: HashMap::new(),
            nodes,
            tree: {
                let mut tree = Tree::new(table, 0x5eed);
                assert!(tree.add_run(Run::new(run_settings(&layout, 1, 0))).is_ok());
                tree
            },
            tree_fx: TreeRecorder::default(),
            reform: Default::default(),
            owner: 1,
            res: vec![NodeResources::new(layout.costs.cores); layout.nodes + 1],
            threads: vec![DaemonThread::default(); layout.nodes + 1],
            scripts: HashMap::new(),
            spawned_by: HashMap::new(),
            spawn_answers: Vec::new(),
            accepting: Vec::new(),
            procs: Vec::new(),
            conns: HashMap::new(),
            timers: HashMap::new(),
            said: Vec::new(),
            said_to: Vec::new(),
            exits: BTreeMap::new(),
            output: BTreeMap::new(),
            shm_removed: Vec::new(),
            watches: HashMap::new(),
            exit: None,
            finished_at: None,
            layout,
            check_nodes: true,
            left: Vec::new(),
        }
    }

    /// Name a script: processes started as `/bin/true NAME` run it.
    pub fn script(&mut self, name: &str, script: Script) -> &mut Self {
        self.scripts.insert(name.to_string(), script);
        self
    }

    pub fn set_failure_policy(&mut self, policy: FailurePolicy) {
        self.tree.set_failure_policy(self.owner, policy);
    }

    /// The run's first job: `n` ranks of script `name`, placed like
    /// `dpm run -n N` (slots filled in node order, `ppn` per node if given).
    pub fn launch(&mut self, name: &str, n: u32, ppn: Option<u32>) -> JobId {
        self.launch_apps(&[(name, n)], ppn, false)
    }

    /// An MPMD first job (`dpm run -n A a : -n B b`): the apps' ranks in
    /// order, each app running its script (zero counts are skipped).
    pub fn launch_mixed(&mut self, apps: &[(&str, u32)]) -> JobId {
        self.launch_apps(apps, None, false)
    }

    /// [`Cluster::launch_mixed`] for programs `--pmi auto` could not
    /// classify: served PMI-1/2 and watched by their nodes
    /// (`LaunchJob::pmix_watch`), `ppn` per node if given.
    pub fn launch_watched(&mut self, apps: &[(&str, u32)], ppn: Option<u32>) -> JobId {
        self.launch_apps(apps, ppn, true)
    }

    fn launch_apps(&mut self, apps: &[(&str, u32)], ppn: Option<u32>, pmix_watch: bool) -> JobId {
        let n: u32 = apps.iter().map(|a| a.1).sum();
        let slots = vec![self.layout.slots; self.layout.nodes];
        let node_of = fill(n as usize, &slots, ppn, false).into_iter().map(NodeId).collect();
        let mut planned = PlannedJob::new();
        for &(name, count) in apps.iter().filter(|a| a.1 > 0) {
            let app = AppSpec { exe: "/bin/true".into(), argv: vec!["/bin/true".into(), name.into()], env: Vec::new(), wdir: "/".into(), node_env: false };
            planned.push_app(app, count);
        }
        let (job, kvsname) = self.tree.new_job_id();
        let universe = i64::from(self.layout.slots) * self.layout.nodes as i64;
        let launch = planned.into_launch(job, kvsname, universe, node_of, PmiMode::Fd, self.layout.kvs);
        let owner = self.owner;
        self.with_tree(|tree, fx| {
            tree.launch(fx, owner, LaunchJob { stdin_rank: Some(Rank(0)), pmix_watch, ..launch }).expect("a valid job");
            tree.on_run(fx, owner, RunInput::Settle);
        });
        job
    }

    /// Deliver `sig` to dpm at virtual time `at`.
    pub fn signal_at(&mut self, at: Duration, sig: i32) {
        self.schedule_at(at, Event::Signal { owner: self.owner, sig });
    }

    /// The node's daemon (and its subtree) disappears at `at`.
    pub fn lose_node_at(&mut self, at: Duration, node: usize) {
        self.schedule_at(at, Event::LoseNode(node));
    }

    pub fn set_timeout(&mut self, timeout: Duration) {
        let owner = self.owner;
        self.with_tree(|tree, fx| tree.on_run(fx, owner, RunInput::Timeout(timeout)));
    }

    pub fn now(&self) -> Duration {
        self.now
    }

    /// CPU work on node `node`'s cores (its host's, on one host) from `at`,
    /// outside any event: a daemon's own start, whose CPU the ranks then
    /// queue behind.
    pub fn charge_cpu(&mut self, node: usize, at: Duration, work: Duration) {
        self.res(Some(node)).cpu(at, work);
    }

    /// Let virtual time pass before anything happens (the daemons coming up).
    pub fn advance_to(&mut self, at: Duration) {
        debug_assert!(self.queue.is_empty(), "time moves on only while nothing is pending");
        self.now = self.now.max(at);
    }

    /// Take events in time order until the run has finished and nothing is
    /// left, or until virtual time `limit`. The exit status, if the run ended.
    pub fn run_until(&mut self, limit: Duration) -> Option<i32> {
        while let Some(Reverse((at, seq))) = self.queue.peek().copied() {
            if at > limit {
                break;
            }
            self.queue.pop();
            self.now = at;
            let event = self.events.remove(&seq).expect("every queued event is stored");
            self.handle(event);
        }
        self.exit
    }

    /// The processes of `job`, by rank.
    pub fn ranks(&self, job: JobId) -> Vec<&Process> {
        let mut v: Vec<&Process> = self.procs.iter().filter(|p| p.job == job).collect();
        v.sort_by_key(|p| p.rank);
        v
    }

    /// Processes still running.
    pub fn live(&self) -> usize {
        self.procs.iter().filter(|p| p.end.is_none()).count()
    }

    /// Slots the node table holds for live processes, over all nodes.
    pub fn load(&self) -> i64 {
        self.tree.shared().nodes.live()
    }

    fn schedule(&mut self, after: Duration, event: Event) {
        self.schedule_at(self.now + after, event);
    }

    fn schedule_at(&mut self, at: Duration, event: Event) {
        self.seq += 1;
        self.events.insert(self.seq, event);
        self.queue.push(Reverse((at, self.seq)));
    }

    /// Charge the receiver's CPU for an event: handle it once that is done.
    fn handle(&mut self, event: Event) {
        let costs = self.layout.costs;
        let event = match event {
            Event::Delayed(event) => *event,
            spawn @ Event::Up { to: None, msg: ToLauncher::Spawn { .. }, .. } if !costs.spawn_delay.is_zero() => {
                return self.schedule(costs.spawn_delay, Event::Delayed(Box::new(spawn)));
            }
            event => event,
        };
        let (host, frame) = match &event {
            Event::Down { node, .. } | Event::Up { to: Some(node), .. } => (Some(*node), true),
            Event::Up { to: None, .. } => (None, true),
            Event::Pmi { node, .. } => (Some(*node), false),
            _ => return self.handle_now(event),
        };
        let now = self.now;
        let thread = host.unwrap_or(self.nodes.len());
        let mut daemon = self.threads[thread];
        // A frame sent back to back with the one before it (arriving
        // within a frame's CPU of it) is read with it: its own CPU, no
        // wake-up of its own.
        let work = match (frame, costs.frame_queued) {
            (false, _) => costs.pmi_serve,
            (true, Some(queued)) if daemon.arrives_with_previous(now, queued) => queued,
            (true, _) => costs.frame_cpu,
        };
        let done = daemon.run(self.res(host), now, work);
        self.threads[thread] = daemon;
        if done > self.now {
            self.schedule_at(done, Event::Ready(Box::new(event)));
        } else {
            self.handle_now(event);
        }
    }

    fn handle_now(&mut self, event: Event) {
        match event {
            Event::Ready(event) => self.handle_now(*event),
            Event::Down { node, to, msg } if self.nodes[node].alive => {
                let actions = self.nodes[node].tree.from_parent(to, msg);
                self.tree_actions(node, actions);
            }
            Event::Up { to: None, origin, msg } => self.up_to_launcher(origin, msg),
            Event::Up { to: Some(node), origin, msg } if self.nodes[node].alive => {
                let actions = self.nodes[node].tree.from_below(origin, msg);
                self.tree_actions(node, actions);
            }
            Event::Pmi { node, conn, bytes } if self.nodes[node].alive => {
                self.with_node(node, |r, fx| r.on_pmi_bytes(fx, conn, &bytes));
            }
            Event::Reply { proc, bytes } => self.reply(proc, &bytes),
            Event::Wake { proc } => self.step(proc),
            Event::NodeTimer { node, timer } if self.nodes[node].alive => self.with_node(node, |r, fx| r.on_timer(fx, timer)),
            Event::Started { node, job, rank, result } if self.nodes[node].alive => {
                self.with_node(node, |r, fx| r.on_started(fx, job, rank, result));
            }
            Event::RunTimer { owner, timer, generation } if self.timers.get(&(owner, timer)) == Some(&generation) => {
                self.with_tree(|tree, fx| tree.on_run(fx, owner, RunInput::Timer(timer)));
            }
            // The tree records the loss (the node table, the pool) before its runs hear it.
            Event::Lost { node, error } => self.with_tree(|tree, fx| tree.on_up(fx, Up::Lost { node: NodeId(node), error })),
            Event::Signal { owner, sig } => self.with_tree(|tree, fx| tree.on_run(fx, owner, RunInput::Signal(sig))),
            Event::LoseNode(node) => self.lose_node(node),
            Event::Reattach(node) if self.nodes[node].alive => self.reattach(node),
            Event::PoolTimer(at) => self.pool_timer(at),
            Event::Kill { job, rank } => {
                if let Some(v) = self.procs.iter().position(|p| p.job == job && p.rank == rank && p.end.is_none()) {
                    self.kill(v, libc::SIGKILL);
                }
            }
            _ => {} // for a lost node, or a timer armed again since
        }
    }

    /// A node and its subtree go: their ranks die with their daemons (no exit
    /// is reported), and the link above reports the loss.
    fn lose_node(&mut self, node: usize) {
        if self.reform.on {
            return self.lose_reforming(node);
        }
        let gone: HashSet<usize> = self.subtree_of(node).into_iter().collect();
        for &n in &gone {
            self.nodes[n].alive = false;
        }
        for p in self.procs.iter_mut().filter(|p| gone.contains(&p.node) && p.end.is_none()) {
            p.end = Some(ExitStatus::Signal(libc::SIGKILL));
        }
        // The parent's link sees it; daemons on the way up relay the `Up::Lost`.
        let hops = self.hops_up(node);
        let error = "link closed".to_string();
        self.schedule(self.layout.costs.link_hop * hops, Event::Lost { node, error });
    }
}
