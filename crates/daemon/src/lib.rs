//! # dpm-daemon: the node daemon
//!
//! One daemon runs per node. It takes [`ToDaemon`] messages from the launcher
//! and answers with [`ToLauncher`] messages. It owns everything local:
//! - forking ranks ([`spawn`]): PMI socketpair, stdio pipes, the job's process
//!   group, `PR_SET_PDEATHSIG` so ranks die with it;
//! - serving their PMI connections through the sans-IO [`dpm_pmi::Engine`];
//! - forwarding their stdout/stderr up, and the launcher's stdin to one rank;
//! - reaping them through pidfds, and reporting each exit once its output and
//!   PMI traffic have been forwarded (so a finalize sent just before `exit()`
//!   is never missed).
//!
//! Layout: [`run`] is the event loop. All state lives in one `Daemon` behind
//! an `Rc<RefCell>` on a single thread (a tokio `LocalSet`): a PMI connection's
//! task feeds the engine and writes the replies itself, so a request costs one
//! read and one write, with no hop through other tasks. Per-process tasks
//! ([`tasks`]) forward output and exits through an event channel. On the
//! link to its parent ([`serve_link`]) a daemon also does its subtree's share
//! of the KVS designs and the ring (`kvs_node`).

mod kvs_node;
pub mod links;
pub mod mpich_shm;
pub mod peer;
pub mod spawn;
pub mod stdio;
mod tasks;

pub use tasks::now_micros;

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::ErrorKind;
use std::os::fd::OwnedFd;
use std::rc::{Rc, Weak};

use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot, Notify};

use dpm_kvs::{JobId, Rank};
use dpm_pmi::{ConnId, Effect, Engine, JobSetup, PmiState};
use dpm_proto::{ExitStatus, LaunchJob, NameRequest, PmiMode, PmiProgress, RequestId, SpawnCommand, ToDaemon, ToLauncher};

use tasks::Event;

/// How the daemon introduces itself.
#[derive(Clone, Debug)]
pub struct DaemonConfig {
    /// The node's name, reported in `PMI_HOSTNAME` and failure messages.
    pub host: String,
    /// Emit `--pmi-trace` lines.
    pub trace: bool,
}

struct ConnEntry {
    job: JobId,
    stream: Rc<UnixStream>,
    /// Reply bytes the socket would not take yet; the connection task flushes them.
    outbox: Vec<u8>,
    /// Set while the connection task is writing out the outbox.
    flushing: bool,
    flush: Rc<Notify>,
}

struct Proc {
    pid: i32,
    /// Its open PMI connection, if any.
    conn: Option<ConnId>,
    /// How far it got with PMI when its connection closed.
    pmi: PmiState,
    /// Fired when the PMI connection has closed and all its traffic is handled.
    pmi_closed: Option<oneshot::Sender<()>>,
}

#[derive(Default)]
struct JobProcs {
    /// Names the job's MPICH shared-memory segments (see [`mpich_shm`]).
    kvsname: String,
    pgids: Vec<i32>,
    /// Group leaders left as zombies until the job's final kill, so that
    /// `kill(-pgid)` can never reach a group that reused the id.
    leaders: Vec<i32>,
    stdin: Option<mpsc::UnboundedSender<Vec<u8>>>,
    listener: Option<tokio::task::AbortHandle>,
    port: Option<String>,
}

struct Daemon {
    /// Handed to connection tasks, which call back into the daemon.
    me: Weak<RefCell<Daemon>>,
    spawner: spawn::Spawner,
    config: DaemonConfig,
    engine: Engine,
    up: mpsc::UnboundedSender<ToLauncher>,
    events: mpsc::UnboundedSender<Event>,
    conns: HashMap<ConnId, ConnEntry>,
    procs: HashMap<(JobId, Rank), Proc>,
    jobs: HashMap<JobId, JobProcs>,
    requests: HashMap<RequestId, ConnId>,
    next_conn: u64,
    next_request: u64,
}

/// Serve until [`ToDaemon::Shutdown`] or until the launcher goes away.
/// Must run inside a tokio `LocalSet`, on a thread that lives as long as the
/// daemon: ranks are started from it, and `PR_SET_PDEATHSIG` fires when the
/// thread that started them exits.
pub async fn run(config: DaemonConfig, mut down: mpsc::UnboundedReceiver<ToDaemon>, up: mpsc::UnboundedSender<ToLauncher>) {
    let (events_tx, mut events_rx) = mpsc::unbounded_channel();
    let _ = up.send(ToLauncher::Ready { host: config.host.clone() });
    let spawner = match spawn::Spawner::new() {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("cannot start the spawner threads: {e}");
            return;
        }
    };
    let d = Rc::new_cyclic(|me| RefCell::new(Daemon {
        me: me.clone(),
        spawner,
        engine: Engine::new(config.trace),
        config,
        up,
        events: events_tx,
        conns: HashMap::new(),
        procs: HashMap::new(),
        jobs: HashMap::new(),
        requests: HashMap::new(),
        next_conn: 0,
        next_request: 0,
    }));
    loop {
        tokio::select! {
            msg = down.recv() => match msg {
                Some(ToDaemon::Shutdown) | None => break,
                Some(msg) => d.borrow_mut().on_down(msg),
            },
            Some(event) = events_rx.recv() => d.borrow_mut().on_event(event),
        }
        d.borrow_mut().apply_effects();
    }
    d.borrow_mut().kill_everything();
}

/// Serve one PMI connection: read, run the engine, let it write the replies.
fn serve_conn(me: Weak<RefCell<Daemon>>, conn: ConnId, stream: Rc<UnixStream>, flush: Rc<Notify>) {
    tokio::task::spawn_local(async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            tokio::select! {
                ready = stream.readable() => {
                    if ready.is_err() {
                        break;
                    }
                    match stream.try_read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => {
                            let Some(d) = me.upgrade() else { return };
                            let mut d = d.borrow_mut();
                            d.engine.on_bytes(conn, &buf[..n]);
                            d.apply_effects();
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                        Err(_) => break,
                    }
                }
                _ = flush.notified() => flush_outbox(&me, conn, &stream).await,
            }
        }
        if let Some(d) = me.upgrade() {
            let mut d = d.borrow_mut();
            d.pmi_closed(conn);
            d.apply_effects();
        }
    });
}

/// Write out what the socket would not take at once (a client slow to read).
async fn flush_outbox(me: &Weak<RefCell<Daemon>>, conn: ConnId, stream: &UnixStream) {
    loop {
        let data = {
            let Some(d) = me.upgrade() else { return };
            let mut d = d.borrow_mut();
            let Some(c) = d.conns.get_mut(&conn) else { return };
            c.flushing = !c.outbox.is_empty();
            std::mem::take(&mut c.outbox)
        };
        if data.is_empty() {
            return;
        }
        let mut sent = 0;
        while sent < data.len() {
            if stream.writable().await.is_err() {
                return;
            }
            match stream.try_write(&data[sent..]) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(_) => return, // the client is gone; its replies with it
            }
        }
    }
}

impl Daemon {
    fn on_down(&mut self, msg: ToDaemon) {
        match msg {
            ToDaemon::Launch(job) => self.launch(job),
            ToDaemon::FenceDone { job, epoch, delta } => self.engine.fence_done(job, epoch, delta),
            ToDaemon::RingOut { job, seq, slot } => self.engine.ring_out(job, seq, &slot),
            ToDaemon::Kvs(msg) => self.engine.kvs_msg(msg),
            ToDaemon::NameDone { request, result } => {
                if let Some(conn) = self.requests.remove(&request) {
                    self.engine.name_done(conn, result);
                }
            }
            ToDaemon::SpawnDone { request, result } => {
                if let Some(conn) = self.requests.remove(&request) {
                    self.engine.spawn_done(conn, result);
                }
            }
            ToDaemon::Signal { job, signal } => self.signal_job(job, signal),
            ToDaemon::Stdin { job, data } => {
                let Some(j) = self.jobs.get_mut(&job) else { return };
                if data.is_empty() {
                    j.stdin = None; // dropping the sender closes the pipe
                } else if let Some(tx) = &j.stdin {
                    let _ = tx.send(data);
                }
            }
            ToDaemon::Forget { job } => self.forget(job),
            ToDaemon::Routed { msg, .. } => self.on_down(*msg),
            // Links and the tree are handled by `serve_link`.
            ToDaemon::Heartbeat | ToDaemon::Tree(_) => {}
            ToDaemon::Adopt { launch, rank, pid, pmi_fd } => self.adopt_foreign(launch, rank, pid, pmi_fd),
            ToDaemon::Shutdown => {}
        }
    }

    fn register_job(&mut self, spec: &LaunchJob) {
        let local_ranks = if spec.procs.is_empty() { (0..spec.size).map(Rank).collect() } else { spec.procs.iter().map(|p| p.rank).collect() };
        self.engine.add_job(JobSetup {
            job: spec.job,
            kvsname: spec.kvsname.clone(),
            size: spec.size,
            local_ranks,
            appnums: spec.appnums.clone(),
            universe_size: spec.universe_size,
            process_mapping: spec.process_mapping.clone(),
            spawner: spec.spawner.clone(),
            preput: spec.preput.clone(),
            kvs: spec.kvs,
            // A launch reaches only the daemons that host ranks of the job.
            node: spec.procs.first().and_then(|p| spec.node_of.get(p.rank.0 as usize)).copied().unwrap_or(0),
            node_of: spec.node_of.clone(),
        });
    }

    fn launch(&mut self, spec: LaunchJob) {
        let job = spec.job;
        self.register_job(&spec);
        let mut entry = JobProcs { kvsname: spec.kvsname.clone(), ..JobProcs::default() };
        if spec.pmi_mode == PmiMode::Port {
            match tasks::listen_pmi_port(job, self.events.clone()) {
                Ok((port, handle)) => {
                    entry.port = Some(port);
                    entry.listener = Some(handle);
                }
                Err(err) => {
                    if let Some(p) = spec.procs.first() {
                        self.launch_failed(job, p.rank, format!("cannot open a PMI port: {err}"), &err);
                    }
                    return;
                }
            }
        }
        self.jobs.insert(job, entry);
        let local_n = spec.procs.len();
        let mut tasks = Vec::with_capacity(local_n);
        let mut apps: Vec<Option<std::sync::Arc<spawn::PreparedApp>>> = Vec::with_capacity(spec.apps.len());
        for app in &spec.apps {
            apps.push(spawn::PreparedApp::new(app).ok().map(std::sync::Arc::new));
        }
        for (local_id, proc) in spec.procs.iter().enumerate() {
            let Some(Some(app)) = apps.get(proc.app) else {
                let exe = spec.apps.get(proc.app).map_or("?", |a| a.exe.as_str());
                let err = std::io::Error::from_raw_os_error(libc::EINVAL);
                return self.launch_failed(job, proc.rank, format!("cannot start '{exe}': bad program, argument or variable"), &err);
            };
            let with_stdin = spec.stdin_rank == Some(proc.rank);
            tasks.push(spawn::SpawnTask { app: app.clone(), env: self.pmi_env(&spec, proc.rank, local_id, local_n), pgid: 0, with_stdin });
        }
        // The first process founds the job's process group; the others join it,
        // started in parallel by the spawner threads.
        let rest = if tasks.is_empty() { Vec::new() } else { tasks.split_off(1) };
        let mut results = self.spawner.start_all(tasks);
        let pgid = results.first().and_then(|r| r.as_ref().ok()).map(|s| s.pgid);
        if let Some(pgid) = pgid {
            let rest = rest.into_iter().map(|mut t| {
                t.pgid = pgid;
                t
            });
            results.extend(self.spawner.start_all(rest.collect()));
        }
        let mut failure = None;
        for (proc, started) in spec.procs.iter().zip(results) {
            match started {
                Ok(s) => self.adopt(job, proc.rank, s),
                Err(err) if failure.is_none() => failure = Some((proc, err)),
                Err(_) => {}
            }
        }
        if let Some((proc, err)) = failure {
            // The launcher ends the job; the ranks that did start get killed.
            let exe = spec.apps.get(proc.app).map_or("?", |a| a.exe.as_str());
            return self.launch_failed(job, proc.rank, format!("cannot start '{exe}': {err}"), &err);
        }
        tracing::debug!(%job, ranks = local_n, "launched")
    }

    fn launch_failed(&self, job: JobId, rank: Rank, error: String, err: &std::io::Error) {
        tracing::error!(%job, rank = rank.0, "{error}");
        let errno = err.raw_os_error().unwrap_or(0);
        let _ = self.up.send(ToLauncher::LaunchFailed { job, rank, error, errno });
    }

    /// The variables dpm adds to one rank's environment.
    fn pmi_env(&self, spec: &LaunchJob, rank: Rank, local_id: usize, local_n: usize) -> spawn::PmiEnv {
        let mut vars = vec![
            ("PMI_RANK".to_string(), rank.0.to_string()),
            ("PMI_SIZE".to_string(), spec.size.to_string()),
            // Slurm's libpmi2 needs it; MPICH ignores it.
            ("PMI_JOBID".to_string(), spec.kvsname.clone()),
            ("PMI_HOSTNAME".to_string(), self.config.host.clone()),
            ("MPI_LOCALNRANKS".to_string(), local_n.to_string()),
            ("MPI_LOCALRANKID".to_string(), local_id.to_string()),
        ];
        if spec.spawner.is_some() {
            vars.push(("PMI_SPAWNED".into(), "1".into()));
        }
        if let Some(port) = self.jobs.get(&spec.job).and_then(|j| j.port.clone()) {
            vars.push(("PMI_PORT".into(), port));
            vars.push(("PMI_ID".into(), rank.0.to_string()));
        }
        spawn::PmiEnv { socketpair: spec.pmi_mode == PmiMode::Fd, vars }
    }

    /// Take ownership of a started process's fds and start its tasks.
    fn adopt(&mut self, job: JobId, rank: Rank, s: spawn::Started) {
        let j = self.jobs.get_mut(&job).expect("launch registered the job");
        // The group we asked for, never one read back: a process that has not
        // yet moved would report dpm's own group, and the job's end kills it.
        if s.pgid > 0 && !j.pgids.contains(&s.pgid) {
            j.pgids.push(s.pgid);
        }
        let leader = s.pgid == s.pid;
        if leader {
            j.leaders.push(s.pid);
        }
        if let Some(stdin) = s.stdin {
            j.stdin = Some(tasks::feed_stdin(stdin));
        }
        let conn = s.pmi.and_then(|fd| self.open_conn(job, Some(rank), fd));
        let (closed_tx, closed_rx) = oneshot::channel();
        tasks::watch_proc(job, rank, s.pidfd, leader, Some(s.stdout), Some(s.stderr), closed_rx, self.events.clone());
        let proc = Proc { pid: s.pid, conn, pmi: PmiState::Silent, pmi_closed: Some(closed_tx) };
        self.procs.insert((job, rank), proc);
        let _ = self.up.send(ToLauncher::Started { job, rank, pid: s.pid as u32 });
    }

    /// Serve an already running process (an MPICH singleton).
    fn adopt_foreign(&mut self, launch: LaunchJob, rank: Rank, pid: u32, pmi_fd: i32) {
        let job = launch.job;
        self.register_job(&launch);
        self.jobs.insert(job, JobProcs { kvsname: launch.kvsname.clone(), ..JobProcs::default() });
        // SAFETY: the launcher hands over an fd it opened and no longer uses.
        let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(pmi_fd) };
        let Some(conn) = self.open_conn(job, Some(rank), fd) else {
            let err = std::io::Error::from_raw_os_error(libc::EBADF);
            return self.launch_failed(job, rank, format!("cannot serve process {pid}"), &err);
        };
        let pidfd = match spawn::pidfd_open(pid as i32) {
            Ok(p) => p,
            Err(e) => {
                self.launch_failed(job, rank, format!("cannot watch process {pid}: {e}"), &e);
                return;
            }
        };
        let (closed_tx, closed_rx) = oneshot::channel();
        tasks::watch_proc(job, rank, pidfd, false, None, None, closed_rx, self.events.clone());
        self.procs.insert((job, rank), Proc { pid: pid as i32, conn: Some(conn), pmi: PmiState::Silent, pmi_closed: Some(closed_tx) });
        let _ = self.up.send(ToLauncher::Started { job, rank, pid });
    }

    fn open_conn(&mut self, job: JobId, rank: Option<Rank>, fd: OwnedFd) -> Option<ConnId> {
        let conn = ConnId(self.next_conn);
        self.next_conn += 1;
        // (A TCP socket in PMI_PORT mode works the same through this wrapper:
        // only read and write are used.)
        let stream = std::os::unix::net::UnixStream::from(fd);
        let stream = match stream.set_nonblocking(true).and_then(|()| UnixStream::from_std(stream)) {
            Ok(s) => Rc::new(s),
            Err(e) => {
                tracing::error!(%job, "cannot serve a PMI connection: {e}");
                return None;
            }
        };
        let flush = Rc::new(Notify::new());
        serve_conn(self.me.clone(), conn, stream.clone(), flush.clone());
        self.engine.attach(conn, job, rank);
        self.conns.insert(conn, ConnEntry { job, stream, outbox: Vec::new(), flushing: false, flush });
        Some(conn)
    }

    /// A PMI connection closed: its process's PMI state is final.
    fn pmi_closed(&mut self, conn: ConnId) {
        let Some(entry) = self.conns.remove(&conn) else { return };
        let rank = self.engine.rank(conn);
        let state = self.engine.detach(conn);
        if let Some(p) = rank.and_then(|r| self.procs.get_mut(&(entry.job, r))) {
            p.conn = None;
            p.pmi = state;
            if let Some(tx) = p.pmi_closed.take() {
                let _ = tx.send(());
            }
        }
    }

    /// Write a reply now if the socket takes it; otherwise queue it, in order.
    fn send(&mut self, conn: ConnId, bytes: &[u8]) {
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

    fn on_event(&mut self, event: Event) {
        match event {
            Event::PortConn { job, fd } => {
                if self.jobs.contains_key(&job) {
                    self.open_conn(job, None, fd);
                }
            }
            Event::Output { job, rank, stream, data } => {
                let _ = self.up.send(ToLauncher::Output { job, rank, stream, data });
            }
            Event::Exited { job, rank, status, at } => self.exited(job, rank, status, at),
        }
    }

    fn exited(&mut self, job: JobId, rank: Rank, status: ExitStatus, at: u64) {
        let Some(proc) = self.procs.remove(&(job, rank)) else { return };
        // A connection still open (a grandchild holds it, or the grace period
        // ran out): judge by what it has said so far.
        let live_conn = proc.conn.or_else(|| {
            self.conns.iter().find(|(c, e)| e.job == job && self.engine.rank(**c) == Some(rank)).map(|(c, _)| *c)
        });
        let state = live_conn.map_or(proc.pmi, |c| self.engine.pmi_state(c));
        let pmi = match state {
            PmiState::Silent => PmiProgress::Silent,
            PmiState::Active => PmiProgress::Active,
            PmiState::Finalized => PmiProgress::Finalized,
        };
        let _ = self.up.send(ToLauncher::Exited { job, rank, pid: proc.pid as u32, status, pmi, at });
    }

    fn signal_job(&mut self, job: JobId, signal: i32) {
        let Some(j) = self.jobs.get(&job) else { return };
        for &pgid in &j.pgids {
            // SAFETY: plain kill(2) on a process group this daemon created.
            unsafe { libc::kill(-pgid, signal) };
        }
        for ((_, _), p) in self.procs.iter().filter(|((j, _), _)| *j == job) {
            // A rank that left the group (setsid) still gets it.
            unsafe { libc::kill(p.pid, signal) };
        }
    }

    fn forget(&mut self, job: JobId) {
        // Whatever is left of the job (grandchildren in its groups) goes now.
        self.signal_job(job, libc::SIGKILL);
        if let Some(j) = self.jobs.remove(&job) {
            if let Some(l) = j.listener {
                l.abort();
            }
            // Now the group ids may go. A leader still running (a shutdown
            // mid-job) is reaped by init once this daemon is gone.
            for pid in j.leaders {
                // SAFETY: waitpid on our own child.
                unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
            }
            let removed = mpich_shm::remove_segments(std::path::Path::new("/dev/shm"), &j.kvsname);
            if removed > 0 {
                tracing::debug!(%job, removed, "removed the job's MPICH shared-memory segments");
            }
        }
        self.engine.remove_job(job);
        self.conns.retain(|_, e| e.job != job);
    }

    fn kill_everything(&mut self) {
        let jobs: Vec<JobId> = self.jobs.keys().copied().collect();
        for job in jobs {
            self.forget(job);
        }
    }

    fn apply_effects(&mut self) {
        for effect in self.engine.take_effects() {
            match effect {
                Effect::Send(conn, bytes) => self.send(conn, &bytes),
                Effect::Trace { job, rank, dir, text } => {
                    let who = rank.map_or_else(|| "?".to_string(), |r| r.0.to_string());
                    let tag = if job.0 == 0 { String::new() } else { format!("{}:", job.0) };
                    let _ = self.up.send(ToLauncher::Trace { line: format!("{dir}[{tag}{who}]: {text}") });
                }
                Effect::FenceIn { job, epoch, count, puts } => {
                    let _ = self.up.send(ToLauncher::FenceIn { job, epoch, count, puts });
                }
                Effect::RingIn { job, seq, segment } => {
                    let _ = self.up.send(ToLauncher::RingIn { job, seq, segment });
                }
                Effect::Kvs { to, msg } => {
                    let _ = self.up.send(ToLauncher::Kvs { to, msg });
                }
                Effect::Abort { job, rank, code, message } => {
                    let _ = self.up.send(ToLauncher::Abort { job, rank, code, message });
                }
                Effect::Name { conn, job, op } => {
                    let request = self.new_request(conn);
                    let op = match op {
                        dpm_pmi::NameOp::Publish { service, port } => NameRequest::Publish { service, port },
                        dpm_pmi::NameOp::Unpublish { service } => NameRequest::Unpublish { service },
                        dpm_pmi::NameOp::Lookup { service } => NameRequest::Lookup { service },
                    };
                    let _ = self.up.send(ToLauncher::Name { request, job, op });
                }
                Effect::Spawn { conn, job, rank, request: spawn } => {
                    let request = self.new_request(conn);
                    let commands = spawn
                        .commands
                        .into_iter()
                        .map(|c| SpawnCommand { exe: c.exe, args: c.args, maxprocs: c.maxprocs, info: c.info })
                        .collect();
                    let _ = self.up.send(ToLauncher::Spawn { request, job, rank, preput: spawn.preput, commands });
                }
            }
        }
    }

    fn new_request(&mut self, conn: ConnId) -> RequestId {
        let id = RequestId(self.next_request);
        self.next_request += 1;
        self.requests.insert(id, conn);
        id
    }
}

/// The daemon's side of its link to the launcher (or parent daemon).
pub struct Uplink {
    /// The node index the launcher assigned.
    pub node: usize,
    /// The run's secret, proved to the parent and passed on to the children.
    pub secret: dpm_proto::auth::Secret,
    /// Who is at the other end, for messages: "the parent on stdin", an address.
    pub peer: String,
}

/// The parent could not be greeted or authenticated.
#[derive(Debug, thiserror::Error)]
#[error("link to {peer} refused: {source}")]
pub struct LinkError {
    pub peer: String,
    #[source]
    pub source: dpm_proto::frame::FrameError,
}

/// `dpm daemon`: serve a launcher (or a parent daemon) over a byte stream —
/// the daemon's stdin and stdout (piped directly, or through ssh or srun), or
/// a TCP connection the daemon made to the launcher (manual bootstrap). The
/// link opens with the hellos and the mutual proof of the run's secret
/// ([`dpm_proto::auth`]); a parent that fails it is refused. A daemon with
/// children in the tree starts them, passes messages down to them (`Routed`)
/// and theirs up (`FromNode`), and merges its subtree's fence arrivals into
/// one. Returns when the parent says `Shutdown` or the stream closes or falls
/// silent.
pub async fn serve_link<R, W>(config: DaemonConfig, uplink: Uplink, mut reader: R, mut writer: W) -> Result<(), LinkError>
where
    R: tokio::io::AsyncRead + Unpin + 'static,
    W: tokio::io::AsyncWrite + Unpin + 'static,
{
    use dpm_proto::frame::{handshake, read_frame, write_frame, Hello, Role, HEARTBEAT_EVERY, HEARTBEAT_TIMEOUT, PROTOCOL_VERSION};
    let Uplink { node, secret, peer } = uplink;
    let ours = Hello { protocol: PROTOCOL_VERSION, role: Role::Daemon, node, host: config.host.clone() };
    if let Err(source) = handshake(&mut reader, &mut writer, ours, Role::Launcher, &secret).await {
        return Err(LinkError { peer, source });
    }
    tracing::debug!(node, "link to {peer} authenticated");
    let secret = Rc::new(secret);
    let (down_tx, down_rx) = mpsc::unbounded_channel();
    let (up_tx, mut up_rx) = mpsc::unbounded_channel::<ToLauncher>();
    // Messages from this daemon and from the subtree below, as (origin, msg).
    let (tree_up_tx, mut tree_up_rx) = mpsc::unbounded_channel::<(usize, ToLauncher)>();
    let router = Rc::new(RefCell::new(Router { me: node, fanout: 1, children: HashMap::new(), job_nodes: HashMap::new() }));
    // Ring gathers, KVS routing and the tree cache of what passes through.
    let tree_kvs = Rc::new(RefCell::new(kvs_node::TreeKvs::new(node)));
    let own_down = down_tx.downgrade();

    // Frames in → this daemon or down the tree; a closed or silent link reads
    // as Shutdown (the daemon then kills its ranks: a parent that is gone
    // cannot end them).
    let inbound = {
        let router = router.clone();
        let tree_kvs = tree_kvs.clone();
        let tree_up = tree_up_tx.clone();
        let host = config.host.clone();
        let secret = secret.clone();
        tokio::task::spawn_local(async move {
            loop {
                match tokio::time::timeout(HEARTBEAT_TIMEOUT, read_frame::<_, ToDaemon>(&mut reader)).await {
                    Ok(Ok(ToDaemon::Heartbeat)) => {}
                    Ok(Ok(ToDaemon::Tree(spec))) => {
                        if let Err(e) = start_subtree(&router, &spec, &host, &tree_up, &secret).await {
                            tracing::error!("cannot start the daemons below node {node}: {e}");
                            let _ = tree_up.send((node, ToLauncher::Lost { error: e }));
                        }
                    }
                    Ok(Ok(ToDaemon::Routed { node: to, msg })) => {
                        router.borrow_mut().observe(to, &msg);
                        let Some(msg) = kvs_node::handle_down(&tree_kvs, &router, &down_tx, to, *msg) else { continue };
                        if to == node {
                            if down_tx.send(msg).is_err() {
                                return;
                            }
                        } else {
                            router.borrow().forward(to, ToDaemon::Routed { node: to, msg: Box::new(msg) });
                        }
                    }
                    Ok(Ok(msg)) => {
                        if down_tx.send(msg).is_err() {
                            return;
                        }
                    }
                    Ok(Err(e)) => {
                        if !matches!(e, dpm_proto::frame::FrameError::Closed) {
                            tracing::error!("link to the parent failed: {e}");
                        }
                        let _ = down_tx.send(ToDaemon::Shutdown);
                        return;
                    }
                    Err(_) => {
                        tracing::error!("the parent has been silent for {HEARTBEAT_TIMEOUT:?}: taking it as lost");
                        let _ = down_tx.send(ToDaemon::Shutdown);
                        return;
                    }
                }
            }
        })
    };
    // This daemon's own messages join the subtree's.
    let own = {
        let tree_up = tree_up_tx.clone();
        tokio::task::spawn_local(async move {
            while let Some(msg) = up_rx.recv().await {
                if tree_up.send((node, msg)).is_err() {
                    return;
                }
            }
        })
    };
    drop(tree_up_tx);
    // Everything up → frames to the parent, fences merged, heartbeats when idle.
    let outbound = {
        let router = router.clone();
        let tree_kvs = tree_kvs.clone();
        tokio::task::spawn_local(async move {
            let mut fences: HashMap<(JobId, u64), PartialFence> = HashMap::new();
            loop {
                let (origin, msg) = match tokio::time::timeout(HEARTBEAT_EVERY, tree_up_rx.recv()).await {
                    Ok(Some(x)) => x,
                    Ok(None) => return,
                    Err(_) => {
                        if write_frame(&mut writer, &ToLauncher::Heartbeat).await.is_err() {
                            return;
                        }
                        continue;
                    }
                };
                let (ups, rest) = kvs_node::handle_up(&tree_kvs, &router, &own_down, origin, msg);
                for m in ups {
                    if write_frame(&mut writer, &m).await.is_err() {
                        return;
                    }
                }
                let Some(msg) = rest else { continue };
                let out = match msg {
                    ToLauncher::FenceIn { job, epoch, count, puts } => {
                        // One arrival is due from each direct contributor:
                        // this daemon, and each child whose subtree runs the
                        // job (that child merged its own subtree's already).
                        let (expected, from) = {
                            let r = router.borrow();
                            let expected: std::collections::HashSet<usize> =
                                r.job_nodes.get(&job).map(|nodes| nodes.iter().map(|&n| r.hop(n)).collect()).unwrap_or_default();
                            (expected, r.hop(origin))
                        };
                        match expected.len() {
                            2.. => {
                                let f = fences.entry((job, epoch)).or_default();
                                f.count += count;
                                f.puts.extend(puts);
                                f.seen.insert(from);
                                if !expected.is_subset(&f.seen) {
                                    continue;
                                }
                                let f = fences.remove(&(job, epoch)).expect("present");
                                ToLauncher::FromNode {
                                    node,
                                    msg: Box::new(ToLauncher::FenceIn { job, epoch, count: f.count, puts: f.puts }),
                                }
                            }
                            _ => ToLauncher::FromNode { node: origin, msg: Box::new(ToLauncher::FenceIn { job, epoch, count, puts }) },
                        }
                    }
                    msg => ToLauncher::FromNode { node: origin, msg: Box::new(msg) },
                };
                if let Err(e) = write_frame(&mut writer, &out).await {
                    // The parent went away (at shutdown, it may go first);
                    // the inbound side deals with a lost parent.
                    tracing::debug!("cannot write to the parent: {e}");
                    return;
                }
            }
        })
    };
    run(config, down_rx, up_tx).await;
    // Children go with us: closing their links makes them shut down too.
    router.borrow_mut().children.clear();
    let _ = own.await;
    inbound.abort();
    let _ = tokio::time::timeout(HEARTBEAT_EVERY, outbound).await;
    Ok(())
}

/// A fence's arrivals from this subtree, not yet complete.
#[derive(Default)]
struct PartialFence {
    count: u32,
    puts: dpm_kvs::KeyValues,
    /// The contributors (this node, or a child) heard from.
    seen: std::collections::HashSet<usize>,
}

/// Routing state of a daemon with children in the tree.
struct Router {
    me: usize,
    fanout: usize,
    /// Links to the direct children, by node.
    children: HashMap<usize, mpsc::UnboundedSender<ToDaemon>>,
    /// For each job, the nodes of this subtree that run its ranks (learnt from
    /// the launches passing through), so fence arrivals can be merged here.
    job_nodes: HashMap<JobId, std::collections::HashSet<usize>>,
}

impl Router {
    fn observe(&mut self, to: usize, msg: &ToDaemon) {
        match msg {
            ToDaemon::Launch(l) if !l.procs.is_empty() => {
                self.job_nodes.entry(l.job).or_default().insert(to);
            }
            ToDaemon::Forget { job } if to == self.me => {
                self.job_nodes.remove(job);
            }
            _ => {}
        }
    }

    /// Who speaks for `node` here: this daemon itself, or the child whose subtree holds it.
    fn hop(&self, node: usize) -> usize {
        if node == self.me {
            return node;
        }
        dpm_proto::tree::next_hop(Some(self.me), node, self.fanout).unwrap_or(node)
    }

    fn forward(&self, to: usize, msg: ToDaemon) {
        let hop = dpm_proto::tree::next_hop(Some(self.me), to, self.fanout);
        match hop.and_then(|h| self.children.get(&h)) {
            Some(tx) => {
                let _ = tx.send(msg);
            }
            None => tracing::debug!(to, "a message for a node no longer linked below this one was dropped"),
        }
    }
}

/// Start this daemon's children (and, through them, the rest of its subtree).
async fn start_subtree(
    router: &Rc<RefCell<Router>>,
    spec: &dpm_proto::tree::TreeSpec,
    host: &str,
    up: &mpsc::UnboundedSender<(usize, ToLauncher)>,
    secret: &dpm_proto::auth::Secret,
) -> Result<(), String> {
    let me = router.borrow().me;
    router.borrow_mut().fanout = spec.fanout;
    let nodes = dpm_proto::tree::children(Some(me), spec.hosts.len(), spec.fanout);
    for child in links::start_children(&nodes, spec, host, secret, up).await? {
        // The process handle lives as long as the link task that reaps it.
        let mut process = child.process;
        tokio::task::spawn_local(async move {
            let _ = process.wait().await;
        });
        router.borrow_mut().children.insert(child.node, child.down);
    }
    Ok(())
}
