//! The async driver of a real node: owns the PMI sockets, the spawner
//! threads, the per-process tasks ([`crate::tasks`]) and the timers,
//! implements [`NodeEffects`] for them, and feeds the [`NodeReactor`].
//!
//! Everything runs on one thread (a tokio `LocalSet`). The reactor and the
//! driver's I/O state sit together in one `Rc<RefCell<Node>>`: a PMI
//! connection's task hands the bytes it read straight to the reactor, which
//! writes the replies through [`NodeEffects::pmi_write`] before returning — a
//! request costs one read and one write, with no hop through other tasks.
//! Per-process tasks report output and exits through an event channel; the
//! spawner threads answer the starts on their socket, read by this loop
//! itself, the answers there taken together ([`crate::spawner::SpawnAnswers`];
//! [`NodeEffects::start`] returns at once). A small spawn's processes are
//! started by this thread itself ([`super::StartBy::NodeThread`]), their
//! answers sent as events for the loop's next turn (the reactor is never
//! called back from inside its own effect). A `dpm daemon` runs all this
//! on a thread of its own ([`serve_apart`]), apart from its link.
//!
//! A PMI connection's socket, its read task and its outbox are `conn`'s.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::{self, ErrorKind};
use std::os::fd::OwnedFd;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tracing::Instrument;

use dpm_kvs::{JobId, Rank};
use dpm_pmi::ConnId;
use dpm_proto::link::Down;
use dpm_proto::{Stream, ToLauncher};

mod conn;

use super::pmix_host::PmixHost;
use super::upward::UpSender;
use super::{NodeEffects, NodeReactor, PmixAnswer, PmixRequest, ProcStart, ProcStarted, StartBy, Timer};
use crate::spawn;
use crate::spawner::{self, SpawnTask, Spawner};
use crate::tasks::{self, Event};
use crate::{cleaner, mpich_shm, ucx_shm, DaemonConfig};
use conn::{nonblocking, registered, shut, Conn};

/// Serve until [`Down::Shutdown`] or until the launcher goes away, as
/// node 0 (the launcher's in-process daemon; `dpm daemon` goes through
/// [`crate::serve_link`]). Must run inside a tokio `LocalSet`, on a thread
/// that lives as long as the daemon: ranks are started from it, and
/// `PR_SET_PDEATHSIG` fires when the thread that started them exits.
/// `up`: the launcher's channel of `Up`s, or one of plain messages.
pub async fn run(config: DaemonConfig, down: mpsc::UnboundedReceiver<Down>, up: impl Into<UpSender>) {
    let span = crate::node_span(dpm_kvs::NodeId(0), &config.host);
    serve(config, down, up.into()).instrument(span).await
}

/// [`serve`] on a thread of its own with its own event loop, so that nothing
/// the node does — a burst of starts, a huge PMI request — can hold up the
/// caller's loop, which carries the link's frames and heartbeats. Returns
/// when the node has stopped. The thread lives as long as the node; ranks
/// are started from it (a small spawn's) and from its spawner threads.
pub(crate) async fn serve_apart(config: DaemonConfig, down: mpsc::UnboundedReceiver<Down>, up: mpsc::UnboundedSender<ToLauncher>) {
    let span = tracing::Span::current();
    let (done, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new().name("dpm-node".into()).spawn(move || {
        match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(runtime) => runtime.block_on(tokio::task::LocalSet::new().run_until(serve(config, down, up.into()).instrument(span))),
            Err(e) => tracing::error!(parent: &span, "cannot start the node's event loop: {e}"),
        }
        // Its tasks (and their fds) are gone with the runtime.
        drop(done);
    });
    match thread {
        Ok(_) => {
            let _ = stopped.await;
        }
        Err(e) => tracing::error!("cannot start the node's thread: {e}"),
    }
}

/// [`run`] inside the caller's span.
pub(crate) async fn serve(config: DaemonConfig, mut down: mpsc::UnboundedReceiver<Down>, up: UpSender) {
    let (events, mut events_rx) = mpsc::unbounded_channel();
    let mut reactor = NodeReactor::new(&config);
    reactor.serve_topology(crate::topology::TopologySource::Export);
    let (spawner, answers) = match Spawner::new() {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("cannot start the spawner threads: {e}");
            return;
        }
    };
    let node = Rc::new_cyclic(|me| {
        let pmix = PmixHost::new(events.clone());
        let io = Io {
            me: me.clone(),
            spawner,
            starting: HashMap::new(),
            next_start: 0,
            up,
            events,
            conns: HashMap::new(),
            stdin: HashMap::new(),
            ports: HashMap::new(),
            watches: HashMap::new(),
            pmix,
            pause: HashMap::new(),
            pause_swept: 64,
            cleaner: cleaner::process::Link::start(),
            shm_jobs: HashMap::new(),
            tools: HashMap::new(),
        };
        RefCell::new(Node { reactor, io })
    });
    loop {
        tokio::select! {
            msg = down.recv() => match msg {
                Some(Down::To { msg, .. }) => node.borrow_mut().with(|r, io| r.on_message(io, msg)),
                Some(Down::Shutdown) | None => break,
                Some(Down::Resync) => node.borrow_mut().with(|r, io| r.resync(io)),
                Some(Down::Tree(_) | Down::Heartbeat | Down::Starved { .. } | Down::Suspend | Down::Resume) => {} // the link's business
            },
            Some(event) = events_rx.recv() => node.borrow_mut().on_event(event),
            // The starts answered so far: the loop never holds for a whole launch.
            answered = answers.take() => node.borrow_mut().on_spawned(answered),
        }
    }
    node.borrow_mut().with(|r, io| r.shutdown(io));
    node.borrow_mut().io.pmix.shutdown();
    // Every job was ended above: the cleaner has nothing left to do.
    let cleaner = node.borrow_mut().io.cleaner.take();
    if let Some(cleaner) = cleaner {
        cleaner.finish();
    }
}

/// The reactor and the I/O it acts through.
struct Node {
    reactor: NodeReactor,
    io: Io,
}

impl Node {
    fn with<T>(&mut self, f: impl FnOnce(&mut NodeReactor, &mut Io) -> T) -> T {
        f(&mut self.reactor, &mut self.io)
    }

    /// The spawner threads' answers: take over each process, tell the reactor.
    fn on_spawned(&mut self, answered: Vec<(u64, std::io::Result<spawn::Started>)>) {
        let Node { reactor, io } = self;
        // The cleaner's notes of these processes' groups in one write: one
        // wakeup of the cleaner per batch of answers, not per process.
        if let Some(cleaner) = io.cleaner.as_mut() {
            cleaner.hold();
        }
        for (token, result) in answered {
            let Some(p) = io.starting.remove(&token) else { continue };
            let result = result.map(|s| io.adopt(&p, s)).map_err(spawn::start_error);
            reactor.on_started(io, p.job, p.rank, result);
        }
        if let Some(cleaner) = io.cleaner.as_mut() {
            cleaner.release();
        }
    }

    fn on_event(&mut self, event: Event) {
        let Node { reactor, io } = self;
        match event {
            Event::PortConn { job, fd } => {
                let Some(stream) = nonblocking(job, fd) else { return };
                if let Some(conn) = reactor.on_port_connection(job) {
                    io.serve(conn, stream);
                }
            }
            Event::WatchConn { job, stream, refused } => {
                if reactor.on_watch_connection(io, job, refused) {
                    if let Some(watch) = io.watches.get_mut(&job) {
                        watch.hold(stream);
                    }
                }
            }
            Event::Output { job, rank, stream, data } => {
                if let Some((_, probe)) = io.pause.get(&(job, rank)) {
                    probe.handled(stream);
                }
                reactor.on_output(io, job, rank, stream, data)
            }
            Event::OutputClosed { job, rank, stream } => reactor.on_output_closed(io, job, rank, stream),
            Event::Exited { job, rank, status, at } => reactor.on_exited(io, job, rank, status, at),
            Event::Timer(timer) => reactor.on_timer(io, timer),
            Event::Topology(path) => reactor.on_topology(io, path),
            Event::Pmix(upcall) => {
                if let Some(event) = io.pmix.accept(upcall) {
                    reactor.on_pmix(io, event);
                }
            }
            Event::Started { token, result } => self.on_spawned(vec![(token, result)]),
        }
    }
}

struct Io {
    /// Handed to connection tasks, which call back into the reactor.
    me: Weak<RefCell<Node>>,
    spawner: Spawner,
    /// Starts submitted, by token, until their answer.
    starting: HashMap<u64, ProcStart>,
    next_start: u64,
    up: UpSender,
    events: mpsc::UnboundedSender<Event>,
    conns: HashMap<ConnId, Conn>,
    stdin: HashMap<JobId, mpsc::UnboundedSender<Vec<u8>>>,
    ports: HashMap<JobId, tokio::task::AbortHandle>,
    /// Each watched job's PMIx watch ([`crate::pmix_watch`]).
    watches: HashMap<JobId, tasks::Watch>,
    /// The node's PMIx server, once a PMIx job came.
    pmix: PmixHost,
    /// Each watched process's output switch (`true`: do not read its pipes).
    /// Entries whose task has ended are dropped as new ones come.
    /// Each process's output switch and probe (`tasks::OutputProbe`).
    pause: HashMap<(JobId, Rank), (watch::Sender<bool>, Arc<tasks::OutputProbe>)>,
    /// `pause`'s size after its last sweep.
    pause_swept: usize,
    /// This process's cleaner, told each job and process group, if it runs.
    cleaner: Option<cleaner::process::Link>,
    /// The jobs with ranks here ([`NodeEffects::track_shm`]) until they end.
    shm_jobs: HashMap<JobId, ShmJob>,
    /// Debuggers' tool daemons, by the job they were started for.
    tools: HashMap<JobId, crate::tool::Running>,
}

/// A job whose shared memory is to go when it ends.
struct ShmJob {
    kvsname: String,
    /// When it arrived: UCX files written since then may be its.
    arrived: std::time::SystemTime,
}

impl Io {
    /// Take over a started process's fds: its PMI socket, stdin, and the
    /// task that forwards its output and reaps it.
    fn adopt(&mut self, p: &ProcStart, s: spawn::Started) -> ProcStarted {
        let pmi = match (p.pmi_conn, s.pmi) {
            (Some(conn), Some(fd)) => registered(p.job, fd.into()).map(|stream| {
                self.serve(conn, stream);
                conn
            }),
            _ => None,
        };
        let stdin = s.stdin.map(|fd| self.stdin.insert(p.job, tasks::feed_stdin(fd))).is_some();
        let leader = s.pgid == s.pid;
        if let (Some(cleaner), Some(j)) = (self.cleaner.as_mut(), self.shm_jobs.get(&p.job)) {
            cleaner.note(&cleaner::Note::Group { kvsname: j.kvsname.clone(), pgid: s.pgid });
        }
        if self.pause.len() >= 2 * self.pause_swept {
            // Amortised: a sweep per doubling, not per start.
            self.pause.retain(|_, (tx, _)| !tx.is_closed());
            self.pause_swept = self.pause.len().max(64);
        }
        let (pause, paused) = watch::channel(false);
        let probe = Arc::new(tasks::OutputProbe::default());
        self.pause.insert((p.job, p.rank), (pause, probe.clone()));
        let pipes = tasks::Pipes { stdout: Some(s.stdout), stderr: Some(s.stderr), paused: Some(paused), probe: Some(probe) };
        tasks::watch_proc(p.job, p.rank, s.pidfd, leader, pipes, self.events.clone());
        ProcStarted { pid: s.pid, pgid: s.pgid, pmi, stdin }
    }
}

impl NodeEffects for Io {
    fn send_up(&mut self, msg: ToLauncher) {
        self.up.send(msg);
    }

    /// Write a reply now if the socket takes it; otherwise queue it, in order.
    fn pmi_write(&mut self, conn: ConnId, bytes: &[u8]) {
        let Some(c) = self.conns.get_mut(&conn) else { return };
        let mut rest = bytes;
        if c.outbox.is_empty() && !c.flushing {
            match c.stream.try_write(bytes) {
                Ok(n) => rest = &bytes[n..],
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(_) => return, // the client is gone
            }
        }
        if !rest.is_empty() {
            c.outbox.extend_from_slice(rest);
            c.flush.notify_one();
        }
    }

    fn pmi_drop(&mut self, conn: ConnId) {
        self.conns.remove(&conn);
    }

    fn pmi_close(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else { return };
        if c.outbox.is_empty() && !c.flushing {
            shut(&c.stream);
        } else {
            // The connection task shuts it once the outbox is out.
            c.closing = true;
        }
    }

    fn pmi_serve_fd(&mut self, job: JobId, conn: ConnId, fd: &OwnedFd) -> bool {
        let Ok(fd) = fd.try_clone() else { return false };
        let Some(stream) = nonblocking(job, fd) else { return false };
        self.serve(conn, stream);
        true
    }

    fn open_pmi_port(&mut self, job: JobId) -> io::Result<String> {
        let (port, handle) = tasks::listen_pmi_port(job, self.events.clone())?;
        self.ports.insert(job, handle);
        Ok(port)
    }

    fn close_pmi_port(&mut self, job: JobId) {
        if let Some(listener) = self.ports.remove(&job) {
            listener.abort();
        }
    }

    fn open_pmix_watch(&mut self, job: JobId) -> io::Result<u16> {
        let (port, watch) = tasks::listen_pmix_watch(job, self.events.clone())?;
        self.watches.insert(job, watch);
        Ok(port)
    }

    fn close_pmix_watch(&mut self, job: JobId) {
        self.watches.remove(&job);
    }

    fn start(&mut self, procs: Vec<ProcStart>) {
        // What the batch's starts share, learned once (for the ones the
        // node's thread starts itself).
        let mut batch = None;
        for p in procs {
            let token = self.next_start;
            self.next_start += 1;
            let task = SpawnTask { app: Arc::clone(&p.app), env: p.env.clone(), pgid: p.pgid, with_stdin: p.with_stdin };
            match p.by {
                StartBy::SpawnerThreads => self.spawner.submit(token, task),
                StartBy::NodeThread => {
                    let batch = *batch.get_or_insert_with(spawn::Batch::now);
                    let _ = self.events.send(Event::Started { token, result: spawner::start_with(&task, batch) });
                }
            }
            self.starting.insert(token, p);
        }
    }

    fn watch_pid(&mut self, job: JobId, rank: Rank, pid: u32) -> io::Result<()> {
        let pidfd = spawn::pidfd_open(pid as i32)?;
        tasks::watch_proc(job, rank, pidfd, false, tasks::Pipes::default(), self.events.clone());
        Ok(())
    }

    fn stdin_write(&mut self, job: JobId, data: Vec<u8>) {
        if let Some(tx) = self.stdin.get(&job) {
            let _ = tx.send(data);
        }
    }

    fn stdin_close(&mut self, job: JobId) {
        self.stdin.remove(&job); // dropping the sender closes the pipe
    }

    fn kill_group(&mut self, pgid: i32, signal: i32) {
        kill(-pgid, signal);
    }

    fn report_stack(&mut self, pid: i32, mut report: ToLauncher) {
        let up = self.up.clone();
        let traced = std::thread::Builder::new().name("dpm-stack".into()).spawn(move || {
            if let ToLauncher::RankReport { stack, .. } = &mut report {
                *stack = Some(crate::stack::trace(pid, crate::stack::TRACE_LIMIT));
            }
            up.send(report);
        });
        if let Err(e) = traced {
            tracing::warn!("no thread to trace process {pid}: {e}");
        }
    }

    fn kill_process(&mut self, pid: i32, signal: i32) {
        kill(pid, signal);
    }

    fn start_tool(&mut self, start: super::ToolStart) {
        let Some(running) = crate::tool::start(&start, &self.up) else { return };
        if let Some(cleaner) = self.cleaner.as_mut() {
            cleaner.note(&cleaner::Note::Group { kvsname: start.kvsname.clone(), pgid: running.pgid() });
        }
        if let Some(old) = self.tools.insert(start.job, running) {
            old.end();
        }
    }

    fn end_tool(&mut self, job: JobId) {
        if let Some(running) = self.tools.remove(&job) {
            running.end();
        }
    }

    fn release_leader(&mut self, pid: i32) {
        use nix::sys::wait::{waitpid, WaitPidFlag};
        let _ = waitpid(nix::unistd::Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
    }

    fn has_exited(&mut self, pid: i32) -> bool {
        crate::proc_stat::has_exited(pid)
    }

    fn is_runnable(&mut self, pid: i32) -> bool {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
        crate::proc_stat::parse(&stat).is_some_and(|s| s.runnable())
    }

    fn track_shm(&mut self, job: JobId, kvsname: &str) {
        if let Some(cleaner) = self.cleaner.as_mut() {
            cleaner.note(&cleaner::Note::Job { kvsname: kvsname.to_string() });
        }
        self.shm_jobs.insert(job, ShmJob { kvsname: kvsname.to_string(), arrived: std::time::SystemTime::now() });
    }

    fn remove_shm(&mut self, job: JobId, kvsname: &str, killed: bool) {
        let shm = std::path::Path::new("/dev/shm");
        let removed = mpich_shm::remove_segments(shm, kvsname);
        if removed > 0 {
            tracing::debug!(%job, removed, "removed the job's MPICH shared-memory segments");
        }
        if let Some(j) = self.shm_jobs.remove(&job).filter(|_| killed) {
            // Its ranks are reaped: a UCX segment one of them was creating
            // when killed is held by nobody now.
            let removed = ucx_shm::remove_orphans(shm, j.arrived);
            if removed > 0 {
                tracing::debug!(%job, removed, "removed UCX shared-memory segments left by the job's killed ranks");
            }
        }
        if let Some(cleaner) = self.cleaner.as_mut() {
            cleaner.note(&cleaner::Note::End { kvsname: kvsname.to_string() });
        }
    }

    fn pmix_register(&mut self, job: dpm_pmix::JobSpec, app: &dpm_proto::AppSpec) -> Result<Vec<Vec<(String, String)>>, String> {
        self.pmix.register(job, app)
    }

    fn pmix_register_remote(&mut self, job: dpm_pmix::JobSpec) -> Result<(), String> {
        self.pmix.register_remote(job)
    }

    fn pmix_answer(&mut self, req: PmixRequest, answer: PmixAnswer) {
        self.pmix.answer(req, answer)
    }

    fn pmix_dmodex(&mut self, nspace: &str, rank: u32, token: u64) -> Result<(), String> {
        self.pmix.dmodex(nspace, rank, token)
    }

    fn pmix_forget(&mut self, nspace: &str, ranks: &[u32]) {
        self.pmix.forget(nspace, ranks)
    }

    fn pause_output(&mut self, job: JobId, rank: Rank, paused: bool) {
        if let Some((tx, _)) = self.pause.get(&(job, rank)) {
            let _ = tx.send(paused);
        }
    }

    fn output_pending(&mut self, job: JobId, rank: Rank, stream: Stream) -> bool {
        self.pause.get(&(job, rank)).is_some_and(|(_, probe)| probe.pending(stream))
    }

    fn export_topology(&mut self) {
        let source = crate::topology::TopologySource::Export;
        source.start();
        let events = self.events.clone();
        tokio::task::spawn_local(async move {
            let _ = events.send(Event::Topology(source.finished().await));
        });
    }

    fn set_timer(&mut self, after: Duration, timer: Timer) {
        let events = self.events.clone();
        crate::spawn_local_here(async move {
            tokio::time::sleep(after).await;
            let _ = events.send(Event::Timer(timer));
        });
    }
}

/// `kill(2)`; `pid` < 0 names a process group.
fn kill(pid: i32, signal: i32) {
    use nix::sys::signal::Signal;
    match Signal::try_from(signal) {
        Ok(sig) => {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
        }
        Err(_) => tracing::warn!(pid, signal, "not a signal this daemon can send"),
    }
}
