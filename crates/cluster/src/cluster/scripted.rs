//! The scripted processes' side of the [`Cluster`]: a process takes its next
//! step ([`crate::process::Action`]), gets its replies, is signalled, ends.

use std::time::Duration;

use dpm_kvs::JobId;
use dpm_proto::{ExitStatus, Stream};

use super::{Cluster, Event, EPOCH_MICROS};
use crate::process::Action;

impl Cluster {
    /// A scripted process takes its next step.
    pub(super) fn step(&mut self, proc: usize) {
        if self.procs[proc].end.is_some() {
            return;
        }
        let p = &mut self.procs[proc];
        let (node, job, rank, conn) = (p.node, p.job, p.rank, p.conn);
        let action = p.proc.next_action();
        self.check_accepts(job);
        match action {
            Action::Request(bytes) => {
                let now = self.now;
                let p = &mut self.procs[proc];
                p.waiting = true;
                p.request_times.push(now);
                let Some(conn) = conn else { return self.end(proc, ExitStatus::Code(1)) };
                // The rank's own CPU for the request, on its node's cores.
                let (now, costs) = (self.now, self.layout.costs);
                let sent = self.res(Some(node)).cpu(now, costs.pmi_client);
                self.schedule_at(sent + costs.pmi_io, Event::Pmi { node, conn, bytes });
            }
            Action::Send(bytes) => {
                if let Some(conn) = conn {
                    self.schedule(self.layout.costs.pmi_io, Event::Pmi { node, conn, bytes });
                }
                self.schedule(self.layout.costs.pmi_io, Event::Wake { proc });
            }
            Action::Print(text) => {
                let data = format!("{text}\n").into_bytes();
                self.with_node(node, |r, fx| r.on_output(fx, job, rank, Stream::Stdout, data));
                self.schedule(Duration::ZERO, Event::Wake { proc });
            }
            Action::Sleep(d) => {
                let now = self.now;
                let done = self.res(Some(node)).cpu(now, d);
                self.schedule_at(done, Event::Wake { proc });
            }
            Action::Exit(code) => self.end(proc, ExitStatus::Code(code)),
            Action::Die(sig) => self.end(proc, ExitStatus::Signal(sig)),
            Action::Wait => {}
            Action::Accept => self.accept(proc),
            Action::IgnoreTerm => {
                self.procs[proc].ignores_term = true;
                self.schedule(Duration::ZERO, Event::Wake { proc });
            }
            Action::PmixConnect(uri) => self.pmix_connect(proc, uri),
        }
    }

    /// An Open MPI rank's `PMIx_Init` ([`crate::Step::OpenMpiInit`]): the
    /// watch its URI names on its own node takes the connection (held: it
    /// waits until killed; closed: its init fails), or nothing listens
    /// there and it runs as a singleton.
    fn pmix_connect(&mut self, proc: usize, uri: Option<String>) {
        let (node, job, rank) = (self.procs[proc].node, self.procs[proc].job, self.procs[proc].rank);
        let port = uri.as_deref().and_then(|u| u.rsplit(':').next()).and_then(|p| p.parse::<u16>().ok());
        let watch = port.and_then(|p| self.watches.get(&(node, p)).copied());
        let Some(watched) = watch else {
            let data = b"rank 0 of 1\n".to_vec();
            self.with_node(node, |r, fx| r.on_output(fx, job, rank, Stream::Stdout, data));
            return self.end(proc, ExitStatus::Code(0));
        };
        let mut held = false;
        self.with_node(node, |r, fx| held = r.on_watch_connection(fx, watched, None));
        if !held {
            self.end(proc, ExitStatus::Code(1));
        }
    }

    pub(super) fn reply(&mut self, proc: usize, bytes: &[u8]) {
        if self.procs[proc].end.is_some() {
            return;
        }
        for line in self.procs[proc].proc.take_replies(bytes) {
            let p = &mut self.procs[proc];
            p.reply_times.push(self.now);
            p.proc.reply(&line);
            if std::mem::take(&mut p.waiting) {
                self.schedule(Duration::ZERO, Event::Wake { proc });
            }
        }
    }

    /// Signals end a scripted process, but for those it ignores.
    pub(super) fn kill(&mut self, proc: usize, sig: i32) {
        let p = &self.procs[proc];
        let ignored = sig == 0 || sig == libc::SIGCONT || (p.ignores_term && sig != libc::SIGKILL);
        if !ignored && p.end.is_none() {
            self.end(proc, ExitStatus::Signal(sig));
        }
    }

    /// A parent's accept: it waits for the job its last spawn started, if
    /// that spawn succeeded (an `rc≠0` answer returns at once, as
    /// `MPI_Comm_spawn` returns its error).
    fn accept(&mut self, proc: usize) {
        let p = &self.procs[proc].proc;
        let spawned = p.replies.last().is_some_and(|r| r.starts_with("cmd=spawn_result") && crate::process::parse(r).get("rc").is_none_or(|rc| rc == "0"));
        let child = self.spawn_answers.iter().rev().find(|j| self.spawned_by.get(j).is_some_and(|(parent, _)| *parent == p.kvsname)).copied();
        match child.filter(|_| spawned) {
            Some(child) => {
                self.accepting.push((proc, child));
                self.check_accepts(child);
            }
            None => self.schedule(Duration::ZERO, Event::Wake { proc }),
        }
    }

    /// Parents waiting for `job` go on once each of its ranks has come to
    /// its `Finalize` or ended.
    fn check_accepts(&mut self, job: JobId) {
        if !self.accepting.iter().any(|&(_, j)| j == job) {
            return;
        }
        let size = self.spawned_by.get(&job).map_or(0, |&(_, size)| size) as usize;
        let up = self.procs.iter().filter(|p| p.job == job && (p.proc.finalizing || p.end.is_some())).count();
        if up < size {
            return;
        }
        let (ready, waiting): (Vec<_>, Vec<_>) = self.accepting.drain(..).partition(|&(_, j)| j == job);
        self.accepting = waiting;
        for (proc, _) in ready {
            self.schedule(Duration::ZERO, Event::Wake { proc });
        }
    }

    /// The process is gone: its PMI connection and pipes close, it is reaped.
    pub(super) fn end(&mut self, proc: usize, status: ExitStatus) {
        let p = &mut self.procs[proc];
        p.end = Some(status);
        p.ended_at = Some(self.now);
        let (node, job, rank, conn) = (p.node, p.job, p.rank, p.conn.take());
        self.check_accepts(job);
        if !self.nodes[node].alive {
            return;
        }
        let at = EPOCH_MICROS + self.now.as_micros() as u64;
        self.with_node(node, |r, fx| {
            if let Some(conn) = conn {
                r.on_pmi_closed(fx, conn);
            }
            r.on_output_closed(fx, job, rank, Stream::Stdout);
            r.on_output_closed(fx, job, rank, Stream::Stderr);
            r.on_exited(fx, job, rank, status, at);
        });
    }
}
