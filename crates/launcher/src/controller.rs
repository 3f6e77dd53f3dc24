//! The async driver of a run: the root of the daemon tree.
//!
//! A [`Controller`] feeds one [`Run`] reactor (`crate::run`: the run's
//! jobs, fences, failures and exit status, as a plain state machine) with the
//! daemons' messages, dpm's signals and stdin ([`Input`]) and its timers, and
//! carries out what the run asks through [`RunEffects`]: messages down the
//! [`DaemonLink`]s, output to the [`Console`], deadlines, job routes.
//!
//! What all runs of a daemon tree share is in [`Shared`]: the plain
//! [`TreeShared`] (names, job ids, node table and load, jobs for `dpm
//! status`, the [`crate::run::Pool`] of unclaimed pooled jobs, and the
//! route of each live job to the run owning it) and each run's channel —
//! one run per tree for a plain `dpm run`, many for a booted tree (`dpm
//! boot`). [`dispatch`] hands each daemon message where the tree's one rule
//! ([`TreeShared::destination`]) says: the run owning its job, or the pool.

use std::cell::{RefCell, RefMut};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;
use tokio::time::Instant;

use dpm_kvs::{JobId, NodeId, Rank};
use dpm_proto::control::ProcInfo;
use dpm_proto::link::{Down, InProcessFd, Up};
use dpm_proto::{LaunchJob, Stream, ToDaemon, ToLauncher};

use crate::node_table::NodeTable;
use crate::output::{Console, Output, Sink, Written};
use crate::run::{Destination, FailurePolicy, Pool, PoolEffects, Run, RunEffects, Timer, TreeShared};

pub use crate::run::{kvsname, signal_name, Settings};

/// The launcher's handle on one node daemon: the link to the top of the
/// subtree holding it (the daemon itself for a top-level node), over which
/// its messages go addressed (`Down::To`).
#[derive(Clone)]
pub struct DaemonLink {
    pub via: mpsc::UnboundedSender<Down>,
    pub node: NodeId,
    pub host: String,
}

impl DaemonLink {
    /// A message for this node's daemon; false if the link is gone.
    pub fn send(&self, msg: ToDaemon) -> bool {
        self.via.send(Down::To { node: self.node, msg }).is_ok()
    }

    /// Stop the daemons (this one's subtree goes with the top of it).
    pub fn shutdown(&self) {
        let _ = self.via.send(Down::Shutdown);
    }
}

/// What a run receives from outside: the signals and stdin of `dpm run`.
pub enum Input {
    Signal(i32),
    /// End the run, saying why, without a signal of its own to report: the
    /// boot this run belongs to ends (a node of its tree was lost).
    End(String),
    /// Empty: end of input.
    Stdin(Vec<u8>),
    /// A held job may go on: the client's debugger let it (MPIR launch
    /// mode through a boot, `ToServer::Continue`), after the tool daemon
    /// its debugger asked for, if any, is on its way.
    Continue(JobId, Option<dpm_proto::ToolDaemon>),
}

/// A job whose every rank has started: its ranks in rank order, and
/// whether they are held for a debugger (MPIR).
pub struct Announced {
    pub job: JobId,
    pub procs: Vec<ProcInfo>,
    pub held: bool,
}

/// Where a run's process tables go: this process's MPIR symbols (a plain
/// `dpm run`), or the client of a boot's run, whose MPIR symbols a debugger
/// reads (it answers [`Input::Continue`] for a held job).
enum Tools {
    Here,
    Client(mpsc::UnboundedSender<Announced>),
}

/// A run's stream of what comes up the tree for it: payloads and losses.
type Route = mpsc::UnboundedSender<Up>;

/// State shared by every run of one daemon tree.
pub struct Shared {
    pub tree: TreeShared,
    /// Each live run's stream, by owner (the tree's routes name the owner).
    runs: HashMap<u32, Route>,
    /// The links to the tree's nodes, for what the pool sends.
    links: Vec<DaemonLink>,
    /// When the pool asked to be woken ([`Pool::on_timer`]), µs since the
    /// epoch; [`Shared::pool_woken`] is notified when it is armed.
    pool_wake: Option<u64>,
    pool_woken: Rc<tokio::sync::Notify>,
    /// Each run's console, by owner: the pool's lines about the jobs it
    /// made for a run go there.
    consoles: HashMap<u32, Console>,
}

pub type SharedRef = Rc<RefCell<Shared>>;

impl Shared {
    pub fn new(nodes: NodeTable) -> SharedRef {
        let (runs, pool_wake, pool_woken) = (HashMap::new(), None, Rc::default());
        let consoles = HashMap::new();
        Rc::new(RefCell::new(Shared { tree: TreeShared::new(nodes, random_tag()), runs, links: Vec::new(), pool_wake, pool_woken, consoles }))
    }

    /// The links to the tree's nodes (what the pool sends goes down them).
    pub fn set_links(&mut self, links: Vec<DaemonLink>) {
        self.links = links;
    }

    /// The tree of one plain run: its links' hosts, `settings.node_slots`.
    pub fn for_run(links: &[DaemonLink], settings: &Settings) -> SharedRef {
        let slots = |i: usize| settings.node_slots.get(i).copied().unwrap_or(1);
        let shared = Shared::new(NodeTable::new(links.iter().enumerate().map(|(i, l)| (l.host.clone(), slots(i))), settings.fanout));
        shared.borrow_mut().set_links(links.to_vec());
        shared
    }

    /// One event of the tree's pool, its effects carried out here.
    pub fn with_pool<T>(&mut self, event: impl FnOnce(&mut Pool, &mut dyn PoolEffects) -> T) -> T {
        let Shared { tree, links, pool_wake, pool_woken, consoles, .. } = self;
        event(&mut tree.pool, &mut LinkEffects { links, pool_wake, pool_woken, consoles })
    }

    /// `node` and its subtree are gone (a boot's lost node; `why`): they
    /// take nothing new, `dpm status` says why, and the pool's jobs there
    /// are dropped — all before any run hears of it (each run with ranks
    /// there ends them itself). The nodes newly lost.
    pub fn lose_node(&mut self, node: NodeId, why: &str) -> Vec<NodeId> {
        let lost = self.tree.nodes.lose(node, why);
        if !lost.is_empty() {
            self.with_pool(|pool, fx| pool.on_nodes_lost(fx, &lost));
        }
        lost
    }

    fn wake_pool(&mut self, at: u64) {
        self.pool_wake = Some(at);
        self.pool_woken.notify_one();
    }
}

/// The pool's effects in a live tree: down the links; its deadline kept
/// for [`drive_pool_timer`].
struct LinkEffects<'a> {
    links: &'a [DaemonLink],
    pool_wake: &'a mut Option<u64>,
    pool_woken: &'a tokio::sync::Notify,
    consoles: &'a HashMap<u32, Console>,
}

impl PoolEffects for LinkEffects<'_> {
    fn send(&mut self, node: NodeId, msg: ToDaemon) {
        if let Some(link) = self.links.get(node.0) {
            link.send(msg);
        }
    }
    fn wake_at(&mut self, at: u64) {
        *self.pool_wake = Some(at);
        self.pool_woken.notify_one();
    }
    fn say(&mut self, owner: u32, line: &str) {
        if let Some(console) = self.consoles.get(&owner) {
            console.say(line);
        }
    }
}

/// Kill every job the tree's pool holds and wait (at most 5 s) until their
/// ends are heard and their nodes have forgotten them (their MPICH segments
/// go then): the end of a tree (`dpm down`, a plain run's end).
pub async fn drain_pool(shared: &SharedRef) {
    shared.borrow_mut().with_pool(|pool, fx| pool.drop_all(fx));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !shared.borrow().tree.pool.is_empty() {
        if tokio::time::Instant::now() >= deadline {
            tracing::warn!("warm-spawn pooled jobs still going after 5 s; shutting the daemons down under them");
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The pool's timer: sleeps until the deadline it asked for (re-read each
/// time one is armed), then calls [`Pool::on_timer`]. Runs for the tree's
/// life (a boot's; a plain run's pool keeps nothing, so never asks).
pub async fn drive_pool_timer(shared: SharedRef) {
    let woken = shared.borrow().pool_woken.clone();
    loop {
        let wake = shared.borrow().pool_wake;
        let Some(at) = wake else {
            woken.notified().await;
            continue;
        };
        let after = Duration::from_micros(at.saturating_sub(dpm_daemon::now_micros()));
        tokio::select! {
            () = tokio::time::sleep(after) => {
                let mut shared = shared.borrow_mut();
                if shared.pool_wake == Some(at) {
                    shared.pool_wake = None;
                    shared.with_pool(|pool, fx| pool.on_timer(fx, dpm_daemon::now_micros()));
                }
            }
            () = woken.notified() => {}
        }
    }
}

/// Hand each message from the daemons to the run owning its job. A lost node
/// concerns every run (and `on_lost`, the boot server); when the daemons'
/// stream ends, every run hears so.
pub async fn dispatch(mut up: mpsc::UnboundedReceiver<Up>, shared: SharedRef, on_lost: Option<mpsc::UnboundedSender<(NodeId, String)>>) {
    while let Some(envelope) = up.recv().await {
        let job = match &envelope {
            Up::From { msg, .. } => msg.job(),
            // A boot's tree records the loss before its runs hear it.
            Up::Lost { node, error } => {
                if let Some(tx) = &on_lost {
                    if !shared.borrow_mut().lose_node(*node, error).is_empty() {
                        let _ = tx.send((*node, error.clone()));
                    }
                }
                None
            }
            // The daemon's parent is the one at fault (the launcher, for a
            // top-level daemon: then the daemon's subtree is what is gone).
            Up::ParentLost { node, error } => {
                if let Some(tx) = &on_lost {
                    let parent = shared.borrow().tree.nodes.parent(*node);
                    let (gone, why) = match parent {
                        Some(p) => (p, format!("node {} below it {error}", node.0)),
                        None => (*node, error.clone()),
                    };
                    if !shared.borrow_mut().lose_node(gone, &why).is_empty() {
                        let _ = tx.send((gone, why));
                    }
                }
                None
            }
            Up::Ready { .. } | Up::Heartbeat => continue,
        };
        let mut shared = shared.borrow_mut();
        match (shared.tree.destination(job), envelope) {
            (Destination::Run(owner), envelope) => {
                if let Some(tx) = shared.runs.get(&owner) {
                    let _ = tx.send(envelope);
                }
            }
            // Served at once, in order: a run may claim it next.
            (Destination::Pool, Up::From { node, msg }) => shared.with_pool(|pool, fx| pool.on_message(fx, node, msg)),
            (Destination::Pool | Destination::Nowhere, _) => {}
            // Lost, trace lines: every run.
            (Destination::Every, envelope) => {
                for tx in shared.runs.values() {
                    let _ = tx.send(envelope.clone());
                }
            }
        }
    }
    // Dropping the runs' senders closes every run's stream.
    shared.borrow_mut().runs.clear();
}

/// The driver's side of the run's effects, for the length of one event.
struct Driver<'a> {
    links: &'a [DaemonLink],
    shared: RefMut<'a, Shared>,
    output: &'a mut Output,
    timers: &'a mut BTreeMap<Timer, Instant>,
    announced: &'a mut Vec<Announced>,
}

impl RunEffects for Driver<'_> {
    fn send(&mut self, node: NodeId, msg: ToDaemon) {
        if let Some(link) = self.links.get(node.0) {
            link.send(msg);
        }
    }
    fn output(&mut self, node: NodeId, job: JobId, rank: Rank, stream: Stream, data: &[u8]) {
        self.output.write(node, job, rank, stream, data);
    }
    fn flush_output(&mut self, job: JobId, rank: Rank) {
        self.output.flush_rank(job, rank);
    }
    fn say(&mut self, line: &str) {
        self.output.console().say(line);
    }
    fn tool_output(&mut self, stream: Stream, data: &[u8]) {
        self.output.console().write(stream == Stream::Stderr, data.to_vec(), None);
    }
    fn now_micros(&self) -> u64 {
        dpm_daemon::now_micros()
    }
    fn arm(&mut self, timer: Timer, after: Duration) {
        self.timers.insert(timer, Instant::now() + after);
    }
    fn shared(&mut self) -> &mut TreeShared {
        &mut self.shared.tree
    }
    fn finished(&mut self, _code: i32) {}
    fn wake_pool(&mut self, at: u64) {
        self.shared.wake_pool(at);
    }

    fn files(&self) -> &dyn crate::plan::Files {
        &crate::plan::HostFiles
    }
    fn procs_started(&mut self, job: JobId, procs: Vec<ProcInfo>, held: bool) {
        // Told after the event ([`Controller::tell_tools`]): the breakpoint
        // may hold this process for as long as a debugger likes.
        self.announced.push(Announced { job, procs, held });
    }
}

/// 128 random bits from the kernel for a tree's kvsnames; the run reactor
/// gets them as input ([`TreeShared::new`]). Without the kernel's (no
/// `getrandom(2)` nor `/dev/urandom`: a broken system) time, pid and a
/// counter are mixed, with a warning: the names are then guessable, and
/// the peer check, not the name, is what keeps other users out
/// (docs/pmix.md).
pub fn random_tag() -> u128 {
    let mut bytes = [0u8; 16];
    if getrandom::getrandom(&mut bytes).is_ok() {
        return u128::from_ne_bytes(bytes);
    }
    static WEAK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    tracing::warn!("no random bits from the kernel: job names are guessable");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    now ^ (u128::from(std::process::id()) << 64) ^ u128::from(WEAK.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
}

pub struct Controller {
    run: Run,
    links: Vec<DaemonLink>,
    /// Messages from the daemons about this run's jobs, tagged with the daemon's index.
    up: mpsc::UnboundedReceiver<Up>,
    shared: SharedRef,
    output: Output,
    /// The credit of output written by the console's writer.
    written: mpsc::UnboundedReceiver<Written>,
    timers: BTreeMap<Timer, Instant>,
    /// `-print-all-exitcodes`: the first job (once launched) and its ranks' statuses.
    exit_codes: Option<(Option<JobId>, crate::exitcodes::ExitCodes)>,
    /// Whether Ctrl-Z stops this process (a plain `dpm run`) and its links'
    /// judging of silence with it, or only the run's processes (a run of a
    /// boot, whose client stops itself).
    stops_itself: bool,
    /// Jobs whose ranks have all started, for [`Controller::tell_tools`].
    announced: Vec<Announced>,
    tools: Tools,
    /// A plain run's table for tools (`run_table`): when it was last
    /// written, and whether ranks ended since.
    table_written: Option<Instant>,
    table_stale: bool,
}

/// After Ctrl-Z, how long the loop runs on before the process stops, for
/// the links to write the stop and suspend frames queued.
const FLUSH_BEFORE_STOP: Duration = Duration::from_millis(20);

impl Controller {
    /// A run writing its output to `sink` (off this loop: see `crate::output`).
    pub fn new(settings: Settings, links: Vec<DaemonLink>, shared: SharedRef, sink: Sink) -> Self {
        let (up_tx, up) = mpsc::unbounded_channel();
        {
            let mut s = shared.borrow_mut();
            s.consoles.insert(settings.owner, sink.console.clone());
            // The tree routes this run's jobs to its owner: this stream.
            s.runs.insert(settings.owner, up_tx);
        }
        Controller {
            output: Output::new(settings.label, sink.console),
            written: sink.written,
            run: Run::new(settings),
            links,
            up,
            shared,
            timers: BTreeMap::new(),
            exit_codes: None,
            stops_itself: false,
            announced: Vec::new(),
            tools: Tools::Here,
            table_written: None,
            table_stale: false,
        }
    }

    /// The run's process tables go to its client (a boot's run), not to
    /// this process's MPIR symbols.
    pub fn tell_client(&mut self, tx: mpsc::UnboundedSender<Announced>) {
        self.tools = Tools::Client(tx);
    }

    /// Each job whose ranks have all started: into the MPIR table, the
    /// breakpoint called, then a held job continued — or to the client.
    /// With a debugger attached (`MPIR_being_debugged`), the daemons are
    /// told first that the silence while it holds us at the breakpoint is
    /// no loss (as for Ctrl-Z).
    async fn tell_tools(&mut self) {
        for Announced { job, procs, held } in std::mem::take(&mut self.announced) {
            if let Tools::Client(tx) = &self.tools {
                if tx.send(Announced { job, procs, held }).is_err() && held {
                    self.with_run(|run, fx| run.continue_job(fx, job));
                }
                continue;
            }
            let debugged = crate::mpir::being_debugged() && self.stops_itself;
            if debugged {
                for link in &self.links {
                    let _ = link.via.send(Down::Suspend);
                }
                dpm_daemon::links::suspend_judging();
                tokio::time::sleep(FLUSH_BEFORE_STOP).await;
            }
            crate::mpir::publish(&procs);
            // The tool's daemons (asked for at the breakpoint) are on their
            // way to the nodes before the held ranks go on.
            if let Some(tool) = crate::mpir::tool_daemon() {
                self.with_run(|run, fx| run.start_tools(fx, job, &tool));
            }
            if debugged {
                dpm_daemon::links::resume_judging();
                for link in &self.links {
                    let _ = link.via.send(Down::Resume);
                }
            }
            if held {
                self.with_run(|run, fx| run.continue_job(fx, job));
            }
            if self.stops_itself {
                self.write_table();
            }
        }
    }

    /// Write this plain run's table (the first time, after removing those
    /// of runs that are gone).
    fn write_table(&mut self) {
        if self.table_written.is_none() {
            crate::run_table::sweep();
        }
        crate::run_table::write(&self.table());
        self.table_written = Some(Instant::now());
        self.table_stale = false;
    }

    /// This run's jobs and their ranks, for tools.
    fn table(&self) -> dpm_proto::control::RunStatus {
        let shared = self.shared.borrow();
        let owner = self.run.owner();
        let mine: Vec<_> = shared.tree.jobs.iter().filter(|(_, (o, ..))| *o == owner).collect();
        let jobs = mine.iter().map(|(job, (_, kvsname, size))| (job.0, kvsname.clone(), *size)).collect();
        let ranks = mine.iter().filter_map(|(job, _)| Some((job.0, shared.tree.ranks.get(job)?.clone()))).collect();
        dpm_proto::control::RunStatus { client_pid: owner, jobs, ranks }
    }

    /// Ctrl-Z stops this process, not just the run's processes.
    pub fn stops_itself(&mut self) {
        self.stops_itself = true;
    }

    /// SIGTSTP: stop the run's processes, then (a plain `dpm run`) tell each
    /// daemon below that our silence is no loss, and stop as the terminal
    /// asked. `fg` continues us ([`Controller::resume`]).
    async fn suspend(&mut self) {
        tracing::debug!("SIGTSTP: stopping the run's processes");
        self.with_run(|run, fx| run.on_stop(fx, true));
        if !self.stops_itself {
            return;
        }
        for link in &self.links {
            let _ = link.via.send(Down::Suspend);
        }
        dpm_daemon::links::suspend_judging();
        // The links' tasks (and an in-process node) write what is queued.
        tokio::time::sleep(FLUSH_BEFORE_STOP).await;
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
    }

    /// SIGCONT: fresh clocks on both ends of every link, then the run's
    /// processes continue.
    fn resume(&mut self) {
        tracing::debug!("SIGCONT: continuing the run's processes");
        if self.stops_itself {
            dpm_daemon::links::resume_judging();
            for link in &self.links {
                let _ = link.via.send(Down::Resume);
            }
        }
        self.with_run(|run, fx| run.on_stop(fx, false));
    }

    /// What a failure in a job does to the run (default: it ends the run).
    pub fn set_failure_policy(&mut self, policy: FailurePolicy) {
        self.run.set_failure_policy(policy);
    }

    /// Hand one event to the run with this driver's effects.
    fn with_run<T>(&mut self, event: impl FnOnce(&mut Run, &mut dyn RunEffects) -> T) -> T {
        let mut fx =
            Driver { links: &self.links, shared: self.shared.borrow_mut(), output: &mut self.output, timers: &mut self.timers, announced: &mut self.announced };
        event(&mut self.run, &mut fx)
    }

    /// A new job id and its kvsname (unique per daemon tree, short enough for MPICH).
    pub fn new_job_id(&mut self) -> (JobId, String) {
        self.shared.borrow_mut().tree.new_job_id()
    }

    /// Start a job whose rank `r` runs on node `node_of[r]`. A job that does
    /// not hold together fails the run, saying why (see [`Run::launch`]).
    pub fn launch(&mut self, launch: LaunchJob) {
        if let Some((first @ None, _)) = &mut self.exit_codes {
            *first = Some(launch.job);
        }
        if let Err(e) = self.with_run(|run, fx| run.launch(fx, launch)) {
            tracing::warn!("job refused: {e}");
        }
    }

    /// Take on a process dpm did not start (singleton mode) as rank 0 of a job.
    pub fn adopt(&mut self, launch: LaunchJob, pid: u32, pmi: std::os::fd::OwnedFd) {
        if let Err(e) = self.with_run(|run, fx| run.adopt(fx, launch, pid, InProcessFd::new(pmi))) {
            tracing::error!("adopting process {pid}: {e}");
        }
    }

    /// `-prepend-pattern` and `-print-all-exitcodes` of the run's settings.
    pub fn set_output_extras(&mut self, prepend: Option<String>, print_all_exitcodes: bool) {
        self.output.set_prepend(prepend);
        self.exit_codes = print_all_exitcodes.then(Default::default);
    }

    /// `-outfile-pattern`/`-errfile-pattern`: those streams go to files.
    pub fn set_file_patterns(&mut self, patterns: crate::output::FilePatterns) {
        self.output.set_patterns(patterns);
    }

    /// For the file patterns: where `node` stands in `job` (`%p`, `%h`).
    fn learn_place(&mut self, job: JobId, node: NodeId) {
        if !self.output.wants_places() || self.output.knows_place(job, node) {
            return;
        }
        if let Some(index) = self.run.job_node_index(job, node) {
            let host = self.shared.borrow().tree.nodes.host(node).to_string();
            self.output.place(job, node, crate::output::NodePlace { index, host });
        }
    }

    /// What came up the tree for this run: a payload, or a lost node.
    fn deliver(&mut self, envelope: Up) {
        match envelope {
            Up::From { node, msg } => {
                match &msg {
                    ToLauncher::Output { job, .. } => self.learn_place(*job, node),
                    ToLauncher::Exited(exit) => {
                        // The table says so (`run_table::REWRITE_EVERY`).
                        self.table_stale = self.table_written.is_some();
                        if let Some((Some(first), codes)) = &mut self.exit_codes {
                            if exit.job == *first {
                                codes.record(node, exit.rank, &exit.status);
                            }
                        }
                    }
                    _ => {}
                }
                self.with_run(|run, fx| run.on_message(fx, node, msg))
            }
            Up::Lost { node, error } => self.with_run(|run, fx| run.on_node_lost(fx, node, error)),
            Up::ParentLost { node, error } => self.with_run(|run, fx| run.on_parent_lost(fx, node, error)),
            Up::Ready { .. } | Up::Heartbeat => {}
        }
    }

    /// Run until every job has ended and its output is written; returns
    /// dpm's exit status.
    pub async fn run(mut self, timeout: Option<Duration>, mut inputs: mpsc::UnboundedReceiver<Input>) -> i32 {
        if let Some(t) = timeout {
            self.with_run(|run, fx| run.set_timeout(fx, t));
        }
        self.with_run(|run, fx| run.settle(fx));
        let far = Instant::now() + Duration::from_secs(86400 * 365);
        while self.run.exit_code().is_none() {
            if !self.announced.is_empty() {
                self.tell_tools().await;
                continue;
            }
            let (timer, deadline) = self.timers.iter().min_by_key(|(_, at)| **at).map_or((None, far), |(t, at)| (Some(*t), *at));
            let table_due = self.table_written.map_or(far, |at| at + crate::run_table::REWRITE_EVERY);
            tokio::select! {
                _ = tokio::time::sleep_until(table_due), if self.table_stale => self.write_table(),
                envelope = self.up.recv() => match envelope {
                    Some(envelope) => self.deliver(envelope),
                    None => self.with_run(|run, fx| run.on_daemons_gone(fx)),
                },
                Some(input) = inputs.recv() => {
                    // Daemon messages queued before the input come first: a
                    // boot that loses a node queues the loss to its runs
                    // before it ends them with SIGTERM, and they must fail
                    // naming the node.
                    while let Ok(envelope) = self.up.try_recv() {
                        self.deliver(envelope);
                    }
                    match input {
                        Input::Signal(libc::SIGTSTP) => self.suspend().await,
                        Input::Signal(libc::SIGCONT) => self.resume(),
                        Input::Signal(sig) => self.with_run(|run, fx| run.on_signal(fx, sig)),
                        Input::End(why) => self.with_run(|run, fx| run.on_end(fx, why)),
                        Input::Stdin(data) => self.with_run(|run, fx| run.on_stdin(fx, data)),
                        Input::Continue(job, tool) => self.with_run(|run, fx| {
                            if let Some(tool) = &tool {
                                run.start_tools(fx, job, tool);
                            }
                            run.continue_job(fx, job);
                        }),
                    }
                },
                Some(w) = self.written.recv() => self.with_run(|run, fx| run.on_output_written(fx, w.node, w.job, w.bytes)),
                _ = tokio::time::sleep_until(deadline), if timer.is_some() => {
                    if let Some(t) = timer {
                        self.timers.remove(&t);
                        self.with_run(|run, fx| run.on_timer(fx, t));
                    }
                }
            }
        }
        {
            let mut s = self.shared.borrow_mut();
            s.consoles.remove(&self.run.owner());
            s.runs.remove(&self.run.owner());
        }
        if self.stops_itself {
            crate::run_table::remove();
        }
        let code = self.run.exit_code().unwrap_or(1);
        if let Some((_, codes)) = &self.exit_codes {
            let shared = self.shared.borrow();
            let text = codes.render(&crate::machine::this_host(), |node| shared.tree.nodes.host(node).to_string());
            self.output.console().write(false, text.into_bytes(), None);
        }
        // Dropping the console lets the writer finish; its credit stream
        // ends once the last chunk is written.
        let Controller { output, mut written, .. } = self;
        drop(output);
        while written.recv().await.is_some() {}
        code
    }
}

/// Whether this process's stdin is `/dev/null` (the same character device).
pub(crate) fn stdin_is_dev_null() -> bool {
    use nix::sys::stat::{fstat, stat, SFlag};
    let is_chr = |mode: u32| SFlag::from_bits_truncate(mode) & SFlag::S_IFMT == SFlag::S_IFCHR;
    match (fstat(libc::STDIN_FILENO), stat("/dev/null")) {
        (Ok(fd0), Ok(null)) => is_chr(fd0.st_mode) && is_chr(null.st_mode) && fd0.st_rdev == null.st_rdev,
        _ => false,
    }
}

/// This process's signals (INT, TERM, HUP; with `job_control` also TSTP and
/// CONT, Ctrl-Z and `fg`) and, if `stdin`, its stdin, read on a thread of its
/// own (a blocking read must not stall the event loop).
pub fn local_inputs(stdin: bool, job_control: bool) -> mpsc::UnboundedReceiver<Input> {
    let (tx, rx) = mpsc::unbounded_channel();
    // SIGQUIT (Ctrl-\): the ranks' states and stacks, the run goes on.
    let mut kinds = vec![SignalKind::interrupt(), SignalKind::terminate(), SignalKind::hangup(), SignalKind::quit()];
    if job_control {
        kinds.extend([SignalKind::from_raw(libc::SIGTSTP), SignalKind::from_raw(libc::SIGCONT)]);
    }
    for kind in kinds {
        let mut stream = signal(kind).expect("signal handler");
        let tx = tx.clone();
        tokio::task::spawn_local(async move {
            while stream.recv().await.is_some() {
                if tx.send(Input::Signal(kind.as_raw_value())).is_err() {
                    return;
                }
            }
        });
    }
    if stdin && stdin_is_dev_null() {
        // Nothing to read: the end of input now, without a thread.
        let _ = tx.send(Input::Stdin(Vec::new()));
    } else if stdin {
        std::thread::Builder::new()
            .name("dpm-stdin".into())
            .spawn(move || {
                use std::io::Read;
                let mut buf = vec![0u8; 64 * 1024];
                let mut stdin = std::io::stdin().lock();
                loop {
                    match stdin.read(&mut buf) {
                        Ok(0) | Err(_) => {
                            let _ = tx.send(Input::Stdin(Vec::new()));
                            return;
                        }
                        Ok(n) => {
                            if tx.send(Input::Stdin(buf[..n].to_vec())).is_err() {
                                return;
                            }
                        }
                    }
                }
            })
            .expect("stdin thread");
    }
    rx
}
