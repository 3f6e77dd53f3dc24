//! Writing the ranks' output: raw bytes by default (so `\r` progress bars and
//! binary output survive), or line by line behind a `[rank] ` label — to this
//! process's stdout/stderr, or to the `dpm run` client of a booted tree.

use std::collections::HashMap;
use std::io::Write;

use tokio::sync::mpsc;

use dpm_kvs::{JobId, Rank};
use dpm_proto::control::ToClient;
use dpm_proto::Stream;

/// Where a run's output and dpm's messages about it go.
#[derive(Clone)]
pub enum Console {
    /// This process's stdout and stderr (`dpm run` without a boot).
    Local,
    /// The `dpm run` client connected to the boot server.
    Remote(mpsc::UnboundedSender<ToClient>),
}

impl Console {
    pub fn write(&self, is_err: bool, data: &[u8]) {
        match self {
            Console::Local => emit(is_err, data),
            Console::Remote(tx) => {
                let data = data.to_vec();
                let _ = tx.send(if is_err { ToClient::Stderr(data) } else { ToClient::Stdout(data) });
            }
        }
    }

    /// One line of dpm's own on stderr.
    pub fn say(&self, line: &str) {
        self.write(true, format!("{line}\n").as_bytes());
    }
}

pub struct Output {
    console: Console,
    label: bool,
    /// Unfinished lines per (job, rank, stream), held until their newline.
    partial: HashMap<(JobId, Rank, bool), Vec<u8>>,
}

impl Output {
    pub fn new(label: bool, console: Console) -> Self {
        Output { console, label, partial: HashMap::new() }
    }

    pub fn write(&mut self, job: JobId, rank: Rank, stream: Stream, data: &[u8]) {
        let is_err = stream == Stream::Stderr;
        if !self.label {
            return self.console.write(is_err, data);
        }
        let buf = self.partial.entry((job, rank, is_err)).or_default();
        buf.extend_from_slice(data);
        let Some(last_nl) = buf.iter().rposition(|&b| b == b'\n') else { return };
        let complete: Vec<u8> = buf.drain(..=last_nl).collect();
        let out = labelled(job, rank, &complete);
        self.console.write(is_err, &out);
    }

    /// Write what is left of a rank's unfinished lines.
    pub fn flush_rank(&mut self, job: JobId, rank: Rank) {
        for is_err in [false, true] {
            if let Some(mut rest) = self.partial.remove(&(job, rank, is_err)) {
                if !rest.is_empty() {
                    rest.push(b'\n');
                    self.console.write(is_err, &labelled(job, rank, &rest));
                }
            }
        }
    }
}

fn labelled(job: JobId, rank: Rank, lines: &[u8]) -> Vec<u8> {
    let prefix = if job.0 == 0 { format!("[{}] ", rank.0) } else { format!("[{}.{}] ", job.0, rank.0) };
    let mut out = Vec::with_capacity(lines.len() + prefix.len() * 2);
    for line in lines.split_inclusive(|&b| b == b'\n') {
        out.extend_from_slice(prefix.as_bytes());
        out.extend_from_slice(line);
    }
    out
}

pub fn emit(is_err: bool, data: &[u8]) {
    // A closed stdout (`dpm run ... | head`) must not take the job down.
    let _ = if is_err {
        std::io::stderr().lock().write_all(data)
    } else {
        let mut out = std::io::stdout().lock();
        out.write_all(data).and_then(|()| out.flush())
    };
}
