//! The scripted processes' side of the [`Cluster`]: a process takes its next
//! step ([`crate::process::Action`]), gets its replies, is signalled, ends.

use std::time::Duration;

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
        match p.proc.next_action() {
            Action::Request(bytes) => {
                p.waiting = true;
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
            Action::IgnoreTerm => {
                self.procs[proc].ignores_term = true;
                self.schedule(Duration::ZERO, Event::Wake { proc });
            }
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

    /// The process is gone: its PMI connection and pipes close, it is reaped.
    pub(super) fn end(&mut self, proc: usize, status: ExitStatus) {
        let p = &mut self.procs[proc];
        p.end = Some(status);
        p.ended_at = Some(self.now);
        let (node, job, rank, conn) = (p.node, p.job, p.rank, p.conn.take());
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
