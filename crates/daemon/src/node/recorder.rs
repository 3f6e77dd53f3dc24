//! [`RecordingEffects`]: a [`NodeEffects`] that records what the reactor
//! asks and answers like a healthy node (every start succeeds, with made-up
//! pids), unless told to fail. Starts are asynchronous as on a real node:
//! their results wait in [`RecordingEffects::started`] until
//! [`RecordingEffects::settle`] (or the test) hands them to the reactor.
//! Enough to test a node without a socket, and the base of an in-process
//! cluster and `dpm model`'s startup simulator (`dpm-cluster`).

use std::collections::HashMap;
use std::io;
use std::time::Duration;

use dpm_kvs::{JobId, Rank};
use dpm_pmi::ConnId;
use dpm_proto::{Stream, ToLauncher};

use super::{NodeEffects, NodeReactor, PmiEnv, ProcStart, ProcStarted, StartBy, StartError, Timer};

/// The first pid handed out; each start takes the next.
pub const FIRST_PID: i32 = 1000;

/// A process start as asked ([`ProcStart`] without the prepared app).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartRecord {
    pub job: JobId,
    pub rank: Rank,
    pub exe: String,
    pub argv: Vec<String>,
    pub env: PmiEnv,
    pub pgid: i32,
    pub with_stdin: bool,
    pub pmi_conn: Option<ConnId>,
    pub by: StartBy,
    /// What the start answered (a made-up pid, or the error it was told to fail with).
    pub result: Result<ProcStarted, StartError>,
}

impl StartRecord {
    /// The value of one variable dpm added.
    pub fn var(&self, name: &str) -> Option<&str> {
        self.env.vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// One effect, as recorded.
#[derive(Clone, Debug)]
pub enum Recorded {
    Up(ToLauncher),
    PmiWrite(ConnId, Vec<u8>),
    PmiDrop(ConnId),
    PmiClose(ConnId),
    PmiServeFd {
        job: JobId,
        conn: ConnId,
        fd: i32,
    },
    OpenPort(JobId),
    ClosePort(JobId),
    /// A PMIx watch opened (on the port recorded) or closed.
    OpenWatch(JobId, u16),
    CloseWatch(JobId),
    /// One call of [`NodeEffects::start`] (a batch).
    Start(Vec<StartRecord>),
    WatchPid {
        job: JobId,
        rank: Rank,
        pid: u32,
    },
    StdinWrite(JobId, Vec<u8>),
    StdinClose(JobId),
    KillGroup {
        pgid: i32,
        signal: i32,
    },
    ReportStack {
        pid: i32,
        report: ToLauncher,
    },
    KillProcess {
        pid: i32,
        signal: i32,
    },
    /// A tool daemon started for a job ([`NodeEffects::start_tool`]).
    StartTool(crate::node::ToolStart),
    EndTool(JobId),
    ReleaseLeader(i32),
    TrackShm {
        job: JobId,
        kvsname: String,
    },
    RemoveShm {
        job: JobId,
        kvsname: String,
        killed: bool,
    },
    SetTimer(Duration, Timer),
    ExportTopology,
    PauseOutput {
        job: JobId,
        rank: Rank,
        paused: bool,
    },
    /// A PMIx namespace registered (with local clients, or without: a
    /// connected job's), when [`RecordingEffects::serve_pmix`] is set.
    PmixRegister(dpm_pmix::JobSpec),
    PmixAnswer(super::PmixRequest, super::PmixAnswer),
    PmixForget(String),
    /// The session led by `pid` put at `nice` (a pooled rank's background).
    SessionNice {
        pid: i32,
        nice: u8,
    },
}

/// See the module documentation.
#[derive(Default)]
pub struct RecordingEffects {
    /// Everything asked, in order.
    pub log: Vec<Recorded>,
    /// Starts of these ranks fail with this error.
    pub fail_start: HashMap<(JobId, Rank), StartError>,
    /// Opening a PMI port or a PMIx watch fails with this errno.
    pub fail_port: Option<i32>,
    /// Serving a handed-over fd fails.
    pub fail_serve_fd: bool,
    /// Serve PMIx: registrations succeed (no variables) and are recorded;
    /// otherwise they are refused as on a node without PMIx.
    pub serve_pmix: bool,
    /// Processes that ended before the reactor heard of it ([`NodeEffects::has_exited`]).
    pub exited: std::collections::HashSet<i32>,
    /// Processes running or waiting for a CPU ([`NodeEffects::is_runnable`]).
    pub runnable: std::collections::HashSet<i32>,
    /// Streams with output unread or on its way ([`NodeEffects::output_pending`]).
    pub pending_output: std::collections::HashSet<(JobId, Rank, Stream)>,
    /// The clock ([`NodeEffects::now_micros`]), moved by the test.
    pub now: u64,
    /// Results of the starts asked so far, not yet handed to the reactor.
    pub started: Vec<(JobId, Rank, Result<ProcStarted, StartError>)>,
    /// The node's hwloc topology (XML) that binding works on; `None`: the
    /// host's ([`NodeEffects::binder`]'s default).
    pub topology: Option<String>,
    /// [`NodeEffects::pooled_nice`] (default 0: pooled ranks stay in the foreground).
    pub pooled_nice: u8,
    next_pid: i32,
    next_port: u16,
}

impl RecordingEffects {
    pub fn new() -> Self {
        RecordingEffects { next_pid: FIRST_PID, next_port: 40000, ..Default::default() }
    }

    /// The log so far, emptied.
    pub fn take(&mut self) -> Vec<Recorded> {
        std::mem::take(&mut self.log)
    }

    /// The messages sent up so far, taken out of the log.
    pub fn take_up(&mut self) -> Vec<ToLauncher> {
        let (up, rest): (Vec<Recorded>, Vec<Recorded>) = self.take().into_iter().partition(|r| matches!(r, Recorded::Up(_)));
        self.log = rest;
        up.into_iter().filter_map(|r| if let Recorded::Up(m) = r { Some(m) } else { None }).collect()
    }

    /// The text written to `conn` so far, taken out of the log.
    pub fn take_written(&mut self, conn: ConnId) -> String {
        let mut text = String::new();
        self.log.retain(|r| match r {
            Recorded::PmiWrite(c, bytes) if *c == conn => {
                text.push_str(&String::from_utf8_lossy(bytes));
                false
            }
            _ => true,
        });
        text
    }

    /// Hand every start result to the reactor (and those of the starts that
    /// asks for meanwhile), in the order asked.
    pub fn settle(&mut self, reactor: &mut NodeReactor) {
        while !self.started.is_empty() {
            for (job, rank, result) in std::mem::take(&mut self.started) {
                reactor.on_started(self, job, rank, result);
            }
        }
    }

    /// Every process start asked so far, batches flattened.
    pub fn starts(&self) -> Vec<&StartRecord> {
        self.log.iter().filter_map(|r| if let Recorded::Start(b) = r { Some(b) } else { None }).flatten().collect()
    }
}

impl NodeEffects for RecordingEffects {
    fn send_up(&mut self, msg: ToLauncher) {
        self.log.push(Recorded::Up(msg));
    }

    fn pooled_nice(&mut self) -> u8 {
        self.pooled_nice
    }

    fn session_nice(&mut self, pid: i32, nice: u8) {
        self.log.push(Recorded::SessionNice { pid, nice });
    }

    fn pmi_write(&mut self, conn: ConnId, bytes: &[u8]) {
        self.log.push(Recorded::PmiWrite(conn, bytes.to_vec()));
    }

    fn pmi_drop(&mut self, conn: ConnId) {
        self.log.push(Recorded::PmiDrop(conn));
    }

    fn pmi_close(&mut self, conn: ConnId) {
        self.log.push(Recorded::PmiClose(conn));
    }

    fn pmi_serve_fd(&mut self, job: JobId, conn: ConnId, fd: &std::os::fd::OwnedFd) -> bool {
        self.log.push(Recorded::PmiServeFd { job, conn, fd: std::os::fd::AsRawFd::as_raw_fd(fd) });
        !self.fail_serve_fd
    }

    fn open_pmi_port(&mut self, job: JobId) -> io::Result<String> {
        self.log.push(Recorded::OpenPort(job));
        if let Some(errno) = self.fail_port {
            return Err(io::Error::from_raw_os_error(errno));
        }
        self.next_port += 1;
        Ok(format!("127.0.0.1:{}", self.next_port))
    }

    fn close_pmi_port(&mut self, job: JobId) {
        self.log.push(Recorded::ClosePort(job));
    }

    fn open_pmix_watch(&mut self, job: JobId) -> io::Result<u16> {
        if let Some(errno) = self.fail_port {
            return Err(io::Error::from_raw_os_error(errno));
        }
        self.next_port += 1;
        self.log.push(Recorded::OpenWatch(job, self.next_port));
        Ok(self.next_port)
    }

    fn close_pmix_watch(&mut self, job: JobId) {
        self.log.push(Recorded::CloseWatch(job));
    }

    fn start(&mut self, procs: Vec<ProcStart>) {
        let mut batch = Vec::with_capacity(procs.len());
        for p in procs {
            let result = match self.fail_start.get(&(p.job, p.rank)) {
                Some(err) => Err(err.clone()),
                None => {
                    let pid = self.next_pid;
                    self.next_pid += 1;
                    let pgid = if p.pgid == 0 { pid } else { p.pgid };
                    Ok(ProcStarted { pid, pgid, pmi: p.pmi_conn, stdin: p.with_stdin })
                }
            };
            let spec = p.app.spec();
            batch.push(StartRecord {
                job: p.job,
                rank: p.rank,
                exe: spec.exe.clone(),
                argv: spec.argv.clone(),
                env: p.env.clone(),
                pgid: p.pgid,
                with_stdin: p.with_stdin,
                pmi_conn: p.pmi_conn,
                by: p.by,
                result: result.clone(),
            });
            self.started.push((p.job, p.rank, result));
        }
        self.log.push(Recorded::Start(batch));
    }

    fn watch_pid(&mut self, job: JobId, rank: Rank, pid: u32) -> io::Result<()> {
        self.log.push(Recorded::WatchPid { job, rank, pid });
        Ok(())
    }

    fn stdin_write(&mut self, job: JobId, data: Vec<u8>) {
        self.log.push(Recorded::StdinWrite(job, data));
    }

    fn stdin_close(&mut self, job: JobId) {
        self.log.push(Recorded::StdinClose(job));
    }

    fn kill_group(&mut self, pgid: i32, signal: i32) {
        self.log.push(Recorded::KillGroup { pgid, signal });
    }

    fn report_stack(&mut self, pid: i32, report: ToLauncher) {
        self.log.push(Recorded::ReportStack { pid, report });
    }

    fn kill_process(&mut self, pid: i32, signal: i32) {
        self.log.push(Recorded::KillProcess { pid, signal });
    }

    fn now_micros(&mut self) -> u64 {
        self.now
    }

    fn start_tool(&mut self, start: crate::node::ToolStart) {
        self.log.push(Recorded::StartTool(start));
    }

    fn end_tool(&mut self, job: JobId) {
        self.log.push(Recorded::EndTool(job));
    }

    fn release_leader(&mut self, pid: i32) {
        self.log.push(Recorded::ReleaseLeader(pid));
    }

    fn has_exited(&mut self, pid: i32) -> bool {
        self.exited.contains(&pid)
    }

    fn is_runnable(&mut self, pid: i32) -> bool {
        self.runnable.contains(&pid)
    }

    fn output_pending(&mut self, job: JobId, rank: Rank, stream: Stream) -> bool {
        self.pending_output.contains(&(job, rank, stream))
    }

    fn track_shm(&mut self, job: JobId, kvsname: &str) {
        self.log.push(Recorded::TrackShm { job, kvsname: kvsname.to_string() });
    }

    fn remove_shm(&mut self, job: JobId, kvsname: &str, killed: bool) {
        self.log.push(Recorded::RemoveShm { job, kvsname: kvsname.to_string(), killed });
    }

    fn pause_output(&mut self, job: JobId, rank: Rank, paused: bool) {
        self.log.push(Recorded::PauseOutput { job, rank, paused });
    }

    fn set_timer(&mut self, after: Duration, timer: Timer) {
        self.log.push(Recorded::SetTimer(after, timer));
    }

    fn export_topology(&mut self) {
        self.log.push(Recorded::ExportTopology);
    }

    fn pmix_register(&mut self, job: dpm_pmix::JobSpec, _app: &dpm_proto::AppSpec) -> Result<Vec<Vec<(String, String)>>, String> {
        if !self.serve_pmix {
            return Err("this node serves no PMIx".into());
        }
        let envs = vec![Vec::new(); job.local_ranks().len()];
        self.log.push(Recorded::PmixRegister(job));
        Ok(envs)
    }

    fn pmix_register_remote(&mut self, job: dpm_pmix::JobSpec) -> Result<(), String> {
        if !self.serve_pmix {
            return Err("this node serves no PMIx".into());
        }
        self.log.push(Recorded::PmixRegister(job));
        Ok(())
    }

    fn pmix_answer(&mut self, req: super::PmixRequest, answer: super::PmixAnswer) {
        self.log.push(Recorded::PmixAnswer(req, answer));
    }

    fn pmix_forget(&mut self, nspace: &str, _ranks: &[u32]) {
        self.log.push(Recorded::PmixForget(nspace.to_string()));
    }

    fn binder(&mut self) -> Result<dpm_binding::Binder, String> {
        let Some(xml) = &self.topology else { return crate::binding::node_binder() };
        let topology = dpm_binding::Topology::from_xml(xml).map_err(|e| e.to_string())?;
        let pus = topology.pus();
        dpm_binding::Binder::new(topology, &pus, None).map_err(|e| e.to_string())
    }
}
