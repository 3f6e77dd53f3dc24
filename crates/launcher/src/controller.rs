//! The async drivers of a daemon tree and its runs.
//!
//! A tree's [`Tree`](crate::tree::Tree) (its runs, routes, pool and node
//! table, as one plain state machine) is held by [`Shared`] with the links
//! to its daemons and each run's I/O; [`dispatch`] feeds it what comes up
//! from the daemons, [`drive_pool_timer`] the pool's deadlines
//! (`controller::shared`). Each run has a [`Controller`]: one task feeding
//! the tree that run's inputs — dpm's signals and stdin, or a boot
//! client's ([`Input`]) —, its timers and the credit of its written
//! output, and telling its tools (MPIR) of started jobs. One run per tree
//! for a plain `dpm run`, many for a booted tree (`dpm boot`).

mod inputs;
pub mod lazy;
mod shared;

use std::rc::Rc;
use std::time::Duration;

use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use dpm_kvs::{JobId, NodeId};
use dpm_proto::control::ProcInfo;
use dpm_proto::link::{Down, InProcessFd};
use dpm_proto::{LaunchJob, ToDaemon};

use crate::output::{Output, Sink, Written};
use crate::run::{FailurePolicy, Run};
use crate::tree::RunInput;

pub use crate::run::{kvsname, signal_name, Settings};
pub use inputs::local_inputs;
pub(crate) use inputs::stdin_is_dev_null;
use shared::RunIo;
pub use shared::{dispatch, drain_pool, drive_pool_timer, reattach_wait, Shared, SharedRef};

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
    owner: u32,
    shared: SharedRef,
    /// The credit of output written by the console's writer.
    written: mpsc::UnboundedReceiver<Written>,
    /// Notified when the run's timers, tools or end change.
    changed: Rc<Notify>,
    /// Whether Ctrl-Z stops this process (a plain `dpm run`) and its links'
    /// judging of silence with it, or only the run's processes (a run of a
    /// boot, whose client stops itself).
    stops_itself: bool,
    tools: Tools,
    /// The tree holds another run of this owner: this one never began.
    refused: bool,
    /// A plain run's table for tools (`run_table`): when it was last
    /// written, and whether ranks ended since.
    table_written: Option<Instant>,
    table_stale: bool,
    /// The run's count of state listings its table was last marked stale at.
    table_listed: u64,
}

/// After Ctrl-Z, how long the loop runs on before the process stops, for
/// the links to write the stop and suspend frames queued.
const FLUSH_BEFORE_STOP: Duration = Duration::from_millis(20);

impl Controller {
    /// A run of `settings` begins on the tree of `shared`, writing its
    /// output to `sink` (off this loop: see `crate::output`).
    pub fn new(settings: Settings, shared: SharedRef, sink: Sink) -> Self {
        let (owner, label) = (settings.owner, settings.label);
        let changed = Rc::new(Notify::new());
        let refused = {
            let mut s = shared.borrow_mut();
            let refused = s.tree.add_run(Run::new(settings)).is_err();
            if refused {
                // The tree is keyed by owner: a second run of one owner is refused.
                sink.console.say(&format!("dpm: error: a run of client {owner} is going already on this tree"));
            } else {
                let output = Output::new(label, sink.console);
                s.io.insert(
                    owner,
                    RunIo { output, timers: Default::default(), announced: Vec::new(), exit_codes: None, ranks_ended: false, changed: changed.clone() },
                );
            }
            refused
        };
        Controller {
            owner,
            shared,
            written: sink.written,
            changed,
            stops_itself: false,
            tools: Tools::Here,
            refused,
            table_written: None,
            table_stale: false,
            table_listed: 0,
        }
    }

    /// `msg` down every link of the tree — those of daemons started or
    /// joined since the run began too (Ctrl-Z, a debugger's stop).
    fn tell_links(&self, msg: Down) {
        for link in self.shared.borrow().links() {
            let _ = link.via.send(msg.clone());
        }
    }

    /// The run's process tables go to its client (a boot's run), not to
    /// this process's MPIR symbols.
    pub fn tell_client(&mut self, tx: mpsc::UnboundedSender<Announced>) {
        self.tools = Tools::Client(tx);
    }

    /// One input of this run, given to the tree.
    fn input(&mut self, input: RunInput) {
        let owner = self.owner;
        self.shared.borrow_mut().event(|tree, fx| tree.on_run(fx, owner, input));
    }

    /// Each job whose ranks have all started: into the MPIR table, the
    /// breakpoint called, then a held job continued — or to the client.
    /// With a debugger attached (`MPIR_being_debugged`), the daemons are
    /// told first that the silence while it holds us at the breakpoint is
    /// no loss (as for Ctrl-Z).
    async fn tell_tools(&mut self, announced: Vec<Announced>) {
        for Announced { job, procs, held } in announced {
            if let Tools::Client(tx) = &self.tools {
                if tx.send(Announced { job, procs, held }).is_err() && held {
                    self.input(RunInput::Continue(job));
                }
                continue;
            }
            let debugged = crate::mpir::being_debugged() && self.stops_itself;
            if debugged {
                self.tell_links(Down::Suspend);
                dpm_daemon::links::suspend_judging();
                tokio::time::sleep(FLUSH_BEFORE_STOP).await;
            }
            crate::mpir::publish(&procs);
            // The tool's daemons (asked for at the breakpoint) are on their
            // way to the nodes before the held ranks go on.
            if let Some(tool) = crate::mpir::tool_daemon() {
                self.input(RunInput::StartTools(job, tool));
            }
            if debugged {
                dpm_daemon::links::resume_judging();
                self.tell_links(Down::Resume);
            }
            if held {
                self.input(RunInput::Continue(job));
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
        let s = self.shared.borrow();
        let tree = s.tree.shared();
        let owner = self.owner;
        let mine: Vec<_> = tree.jobs.iter().filter(|(_, (o, ..))| *o == owner).collect();
        let jobs = mine.iter().map(|(job, (_, kvsname, size))| (job.0, kvsname.clone(), *size)).collect();
        let ranks = mine.iter().filter_map(|(job, _)| Some((job.0, tree.ranks.get(job)?.clone()))).collect();
        let states_listed = tree.states_listed.get(&owner).copied().unwrap_or(0);
        dpm_proto::control::RunStatus { client_pid: owner, jobs, ranks, states_signal: Some(crate::run_table::states_signal()), states_listed }
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
        self.input(RunInput::Stop(true));
        if !self.stops_itself {
            return;
        }
        self.tell_links(Down::Suspend);
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
            self.tell_links(Down::Resume);
        }
        self.input(RunInput::Stop(false));
    }

    /// What a failure in a job does to the run (default: it ends the run).
    pub fn set_failure_policy(&mut self, policy: FailurePolicy) {
        if self.refused {
            return;
        }
        self.shared.borrow_mut().tree.set_failure_policy(self.owner, policy);
    }

    /// A new job id and its kvsname (unique per daemon tree, short enough for MPICH).
    pub fn new_job_id(&mut self) -> (JobId, String) {
        self.shared.borrow_mut().tree.new_job_id()
    }

    /// Start a job whose rank `r` runs on node `node_of[r]`. A job that does
    /// not hold together fails the run, saying why (see [`Run::launch`]).
    pub fn launch(&mut self, launch: LaunchJob) {
        if self.refused {
            return;
        }
        let owner = self.owner;
        let mut s = self.shared.borrow_mut();
        if let Some((first @ None, _)) = s.io.get_mut(&owner).and_then(|io| io.exit_codes.as_mut()) {
            *first = Some(launch.job);
        }
        if let Err(e) = s.event(|tree, fx| tree.launch(fx, owner, launch)) {
            tracing::warn!("job refused: {e}");
        }
    }

    /// A submission to a booted tree: the run's first job of `procs`
    /// processes, made by `first` from a fresh job id and the nodes as they
    /// are, once kept pooled jobs gave up the slots it needs.
    pub fn submit(&mut self, procs: usize, first: impl FnOnce(JobId, String, &crate::node_table::NodeTable) -> LaunchJob) {
        if self.refused {
            return;
        }
        let owner = self.owner;
        let mut s = self.shared.borrow_mut();
        let mut first_job = None;
        let made = |job: JobId, kvsname: String, nodes: &crate::node_table::NodeTable| {
            first_job = Some(job);
            first(job, kvsname, nodes)
        };
        if let Err(e) = s.event(|tree, fx| tree.submit(fx, owner, procs, made)) {
            tracing::warn!("job refused: {e}");
        }
        if let (Some(job), Some((first @ None, _))) = (first_job, s.io.get_mut(&owner).and_then(|io| io.exit_codes.as_mut())) {
            *first = Some(job);
        }
    }

    /// Take on a process dpm did not start (singleton mode) as rank 0 of a job.
    pub fn adopt(&mut self, launch: LaunchJob, pid: u32, pmi: std::os::fd::OwnedFd) {
        if self.refused {
            return;
        }
        let owner = self.owner;
        if let Err(e) = self.shared.borrow_mut().event(|tree, fx| tree.adopt(fx, owner, launch, pid, InProcessFd::new(pmi))) {
            tracing::error!("adopting process {pid}: {e}");
        }
    }

    /// `-prepend-pattern` and `-print-all-exitcodes` of the run's settings.
    pub fn set_output_extras(&mut self, prepend: Option<String>, print_all_exitcodes: bool) {
        if let Some(io) = self.shared.borrow_mut().io.get_mut(&self.owner) {
            io.output.set_prepend(prepend);
            io.exit_codes = print_all_exitcodes.then(Default::default);
        }
    }

    /// `-outfile-pattern`/`-errfile-pattern`: those streams go to files.
    pub fn set_file_patterns(&mut self, patterns: crate::output::FilePatterns) {
        if let Some(io) = self.shared.borrow_mut().io.get_mut(&self.owner) {
            io.output.set_patterns(patterns);
        }
    }

    /// The run's exit status, once it is over.
    fn exit_code(&self) -> Option<i32> {
        self.shared.borrow().tree.run(self.owner).and_then(Run::exit_code)
    }

    /// What the run waits for next: its announced jobs, or its earliest
    /// timer. Ranks that ended since make a written table stale
    /// (rewritten at most every `run_table::REWRITE_EVERY`).
    fn next(&mut self) -> (Vec<Announced>, Option<(crate::run::Timer, Instant)>) {
        let mut s = self.shared.borrow_mut();
        // A listing of the ranks' states for a tool is over: its table is due.
        let listed = s.tree.shared().states_listed.get(&self.owner).copied().unwrap_or(0);
        if listed != self.table_listed && self.table_written.is_some() {
            self.table_listed = listed;
            self.table_stale = true;
        }
        let Some(io) = s.io.get_mut(&self.owner) else { return (Vec::new(), None) };
        if std::mem::take(&mut io.ranks_ended) && self.table_written.is_some() {
            self.table_stale = true;
        }

        (std::mem::take(&mut io.announced), io.timers.iter().min_by_key(|(_, at)| **at).map(|(t, at)| (*t, *at)))
    }

    /// Run until every job has ended and its output is written; returns
    /// dpm's exit status.
    pub async fn run(mut self, timeout: Option<Duration>, mut inputs: mpsc::UnboundedReceiver<Input>) -> i32 {
        if self.refused {
            while self.written.recv().await.is_some() {}
            return 1;
        }
        if let Some(t) = timeout {
            self.input(RunInput::Timeout(t));
        }
        let gone = self.shared.borrow().daemons_gone;
        self.input(if gone { RunInput::DaemonsGone } else { RunInput::Settle });
        let far = Instant::now() + Duration::from_secs(86400 * 365);
        while self.exit_code().is_none() {
            let (announced, timer) = self.next();
            if !announced.is_empty() {
                self.tell_tools(announced).await;
                continue;
            }
            let deadline = timer.map_or(far, |(_, at)| at);
            let changed = self.changed.clone();
            let table_due = self.table_written.map_or(far, |at| at + crate::run_table::REWRITE_EVERY);
            tokio::select! {
                () = changed.notified() => {}
                _ = tokio::time::sleep_until(table_due), if self.table_stale => self.write_table(),
                Some(input) = inputs.recv() => {
                    // Daemon messages queued before the input come first.
                    self.shared.borrow_mut().pump();
                    match input {
                        Input::Signal(libc::SIGTSTP) => self.suspend().await,
                        Input::Signal(libc::SIGCONT) => self.resume(),
                        Input::Signal(sig) => self.input(RunInput::Signal(sig)),
                        Input::End(why) => self.input(RunInput::End(why)),
                        Input::Stdin(data) => self.input(RunInput::Stdin(data)),
                        Input::Continue(job, tool) => {
                            if let Some(tool) = tool {
                                self.input(RunInput::StartTools(job, tool));
                            }
                            self.input(RunInput::Continue(job));
                        }
                    }
                },
                Some(w) = self.written.recv() => self.input(RunInput::Written { node: w.node, job: w.job, bytes: w.bytes }),
                _ = tokio::time::sleep_until(deadline), if timer.is_some() => {
                    if let Some((t, _)) = timer {
                        if let Some(io) = self.shared.borrow_mut().io.get_mut(&self.owner) {
                            io.timers.remove(&t);
                        }
                        self.input(RunInput::Timer(t));
                    }
                }
            }
        }
        let (code, io) = {
            let mut s = self.shared.borrow_mut();
            let code = s.tree.end_run(self.owner).and_then(|run| run.exit_code());
            (code.unwrap_or(1), s.io.remove(&self.owner))
        };
        if self.stops_itself {
            crate::run_table::remove();
        }
        if let Some(RunIo { output, exit_codes, .. }) = io {
            if let Some((_, codes)) = &exit_codes {
                let s = self.shared.borrow();
                let text = codes.render(&crate::machine::this_host(), |node| s.tree.shared().nodes.host(node).to_string());
                output.console().write(false, text.into_bytes(), None);
            }
            // Dropping the console lets the writer finish; its credit
            // stream ends once the last chunk is written.
            drop(output);
        }
        while self.written.recv().await.is_some() {}
        code
    }
}
