//! A debugger's tool daemon on this node (the MPIR tool-daemon extension,
//! `dpm_launcher::mpir`): started by the node's driver for
//! [`crate::node::NodeEffects::start_tool`] in a process group of its own,
//! its stdout and stderr sent up whole line by whole line
//! ([`ToLauncher::ToolOutput`]), killed with its job ([`Running::end`]; the
//! cleaner ends it if the node's process dies first).
//!
//! Bounded: a line is cut at [`LINE_LIMIT`] bytes, and after
//! [`OUTPUT_LIMIT`] bytes of a stream the rest is read and dropped, said
//! once. A program that cannot be started is said in one line
//! ([`ToLauncher::Note`]); the job runs on without it.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, Stdio};

use dpm_kvs::JobId;
use dpm_proto::{Stream, ToLauncher};

use crate::node::{ToolStart, UpSender};

/// The most of one stream of a tool daemon passed up (the rest is dropped).
pub const OUTPUT_LIMIT: u64 = 16 << 20;
/// The longest line passed up whole (a longer one is cut there).
pub const LINE_LIMIT: usize = 64 << 10;

/// A started tool daemon: its process group.
#[derive(Debug)]
pub struct Running {
    pgid: i32,
}

/// Start `start`'s tool daemon; its output and end go up through `up`
/// (threads of their own: the node's loop never waits for it). `None` if
/// it could not be started, said up in one line.
pub fn start(start: &ToolStart, up: &UpSender) -> Option<Running> {
    let mut cmd = Command::new(&start.tool.path);
    cmd.args(&start.tool.args).envs(start.env.iter().map(|(k, v)| (k, v))).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    // Its own group, so that its end reaches what it started.
    cmd.process_group(0);
    let (job, host) = (start.job, start.host.as_str());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            up.send(ToLauncher::Note {
                job,
                line: format!("dpm: error: {host}: cannot start the tool daemon {}: {e}; the job runs on without it", start.tool.path),
            });
            return None;
        }
    };
    let pgid = child.id() as i32;
    let streams =
        [(Stream::Stdout, child.stdout.take().map(|s| Box::new(s) as Box<dyn Read + Send>)), (Stream::Stderr, child.stderr.take().map(|s| Box::new(s) as _))];
    let mut readers = Vec::new();
    for (stream, pipe) in streams {
        let Some(pipe) = pipe else { continue };
        let up = up.clone();
        let host = host.to_string();
        readers.push(std::thread::Builder::new().name("dpm-tool-out".into()).spawn(move || forward(job, stream, pipe, &host, &up)));
    }
    let (up, host, path) = (up.clone(), host.to_string(), start.tool.path.clone());
    let waited = std::thread::Builder::new().name("dpm-tool".into()).spawn(move || {
        // Its output first (the pipes close when it and its children are
        // done with them), then its end.
        for r in readers.into_iter().flatten() {
            let _ = r.join();
        }
        reap(job, &mut child, &host, &path, &up);
    });
    if let Err(e) = waited {
        tracing::warn!(%job, "no thread to watch the tool daemon: {e}");
    }
    Some(Running { pgid })
}

/// Pass `pipe`'s lines up until its end, within the bounds.
fn forward(job: JobId, stream: Stream, pipe: Box<dyn Read + Send>, host: &str, up: &UpSender) {
    let mut pipe = BufReader::new(pipe);
    let mut sent: u64 = 0;
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut pipe).take(LINE_LIMIT as u64).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if !line.ends_with(b"\n") {
            line.push(b'\n');
        }
        if sent >= OUTPUT_LIMIT {
            continue; // read on, so that it never blocks on a full pipe
        }
        sent += line.len() as u64;
        if sent >= OUTPUT_LIMIT {
            let name = if stream == Stream::Stdout { "stdout" } else { "stderr" };
            let line = format!("dpm: warning: {host}: the tool daemon's {name} is cut after {} MiB", OUTPUT_LIMIT >> 20);
            up.send(ToLauncher::Note { job, line });
            continue;
        }
        if !up.send(ToLauncher::ToolOutput { job, stream, data: line.clone() }) {
            return;
        }
    }
}

/// Wait for the tool daemon's end; one that failed is said.
fn reap(job: JobId, child: &mut Child, host: &str, path: &str, up: &UpSender) {
    let Ok(status) = child.wait() else { return };
    let how = match (status.code(), status.signal()) {
        (Some(0), _) => return,
        (Some(code), _) => format!("exited with status {code}"),
        // Ended by dpm at the job's end: no news.
        (None, Some(libc::SIGTERM | libc::SIGKILL)) => return,
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        (None, None) => return,
    };
    up.send(ToLauncher::Note { job, line: format!("dpm: {host}: the tool daemon {path} {how}") });
}

impl Running {
    /// The job ended: its group is killed (SIGKILL, as the job's ranks
    /// are: a grace would outlive a `dpm run` that exits now).
    pub fn end(self) {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(self.pgid), nix::sys::signal::Signal::SIGKILL);
    }

    /// Its process group (for the cleaner).
    pub fn pgid(&self) -> i32 {
        self.pgid
    }
}
