//! The cluster's implementation of the node reactor's effects: it records
//! what the reactor asked for, and [`crate::Cluster`] carries it out after the
//! call returns (delivery through the tree, to a scripted process, on a
//! timer), so no reactor is ever re-entered. The run reactor's effects are
//! recorded by its own [`dpm_launcher::run::Recorder`].

use std::io;
use std::time::Duration;

use dpm_daemon::node::{NodeEffects, ProcStart, ProcStarted, StartError, Timer as NodeTimer};
use dpm_kvs::{JobId, Rank};
use dpm_pmi::ConnId;
use dpm_proto::ToLauncher;

/// What a node reactor asked for during one call.
pub(crate) enum NodeOut {
    Up(ToLauncher),
    Write(ConnId, Vec<u8>),
    Drop(ConnId),
    Started(Box<ProcStart>, i32, i32),
    KillGroup(i32, i32),
    KillProcess(i32, i32),
    Timer(Duration, NodeTimer),
    Shm(JobId),
}

pub(crate) struct NodeFx<'a> {
    pub next_pid: &'a mut i32,
    pub out: Vec<NodeOut>,
}

impl NodeEffects for NodeFx<'_> {
    fn send_up(&mut self, msg: ToLauncher) {
        self.out.push(NodeOut::Up(msg));
    }
    fn pmi_write(&mut self, conn: ConnId, bytes: &[u8]) {
        self.out.push(NodeOut::Write(conn, bytes.to_vec()));
    }
    fn pmi_drop(&mut self, conn: ConnId) {
        self.out.push(NodeOut::Drop(conn));
    }
    fn pmi_serve_fd(&mut self, _job: JobId, _conn: ConnId, _fd: &std::os::fd::OwnedFd) -> bool {
        false // no file descriptors in an in-process cluster
    }
    fn open_pmi_port(&mut self, _job: JobId) -> io::Result<String> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "no PMI ports in an in-process cluster"))
    }
    fn close_pmi_port(&mut self, _job: JobId) {}
    fn start(&mut self, procs: Vec<ProcStart>) -> Vec<Result<ProcStarted, StartError>> {
        procs
            .into_iter()
            .map(|p| {
                *self.next_pid += 1;
                let pid = *self.next_pid;
                let pgid = if p.pgid == 0 { pid } else { p.pgid };
                let started = ProcStarted { pid, pgid, pmi: p.pmi_conn, stdin: p.with_stdin };
                self.out.push(NodeOut::Started(Box::new(p), pid, pgid));
                Ok(started)
            })
            .collect()
    }
    fn watch_pid(&mut self, _job: JobId, _rank: Rank, _pid: u32) -> io::Result<()> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "no foreign processes in an in-process cluster"))
    }
    fn stdin_write(&mut self, _job: JobId, _data: Vec<u8>) {}
    fn stdin_close(&mut self, _job: JobId) {}
    fn kill_group(&mut self, pgid: i32, signal: i32) {
        self.out.push(NodeOut::KillGroup(pgid, signal));
    }
    fn kill_process(&mut self, pid: i32, signal: i32) {
        self.out.push(NodeOut::KillProcess(pid, signal));
    }
    fn release_leader(&mut self, _pid: i32) {}
    fn remove_shm(&mut self, job: JobId, kvsname: &str) {
        let _ = kvsname;
        self.out.push(NodeOut::Shm(job));
    }
    fn set_timer(&mut self, after: Duration, timer: NodeTimer) {
        self.out.push(NodeOut::Timer(after, timer));
    }
}
