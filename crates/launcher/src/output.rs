//! Writing the ranks' output: raw bytes by default (so `\r` progress bars and
//! binary output survive), or line by line behind a `[rank] ` label.

use std::collections::HashMap;
use std::io::Write;

use dpm_kvs::{JobId, Rank};
use dpm_proto::Stream;

#[derive(Default)]
pub struct Output {
    label: bool,
    /// Unfinished lines per (job, rank, stream), held until their newline.
    partial: HashMap<(JobId, Rank, bool), Vec<u8>>,
}

impl Output {
    pub fn new(label: bool) -> Self {
        Output { label, partial: HashMap::new() }
    }

    pub fn write(&mut self, job: JobId, rank: Rank, stream: Stream, data: &[u8]) {
        let is_err = stream == Stream::Stderr;
        if !self.label {
            return emit(is_err, data);
        }
        let buf = self.partial.entry((job, rank, is_err)).or_default();
        buf.extend_from_slice(data);
        let Some(last_nl) = buf.iter().rposition(|&b| b == b'\n') else { return };
        let complete: Vec<u8> = buf.drain(..=last_nl).collect();
        let out = labelled(job, rank, &complete);
        emit(is_err, &out);
    }

    /// Write what is left of a rank's unfinished lines.
    pub fn flush_rank(&mut self, job: JobId, rank: Rank) {
        for is_err in [false, true] {
            if let Some(mut rest) = self.partial.remove(&(job, rank, is_err)) {
                if !rest.is_empty() {
                    rest.push(b'\n');
                    emit(is_err, &labelled(job, rank, &rest));
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

fn emit(is_err: bool, data: &[u8]) {
    // A closed stdout (`dpm run ... | head`) must not take the job down.
    let _ = if is_err {
        std::io::stderr().lock().write_all(data)
    } else {
        let mut out = std::io::stdout().lock();
        out.write_all(data).and_then(|()| out.flush())
    };
}
