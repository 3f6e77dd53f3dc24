//! The node's PMIx server library's own log lines (`PMIx_Log` from its own
//! namespace, `pmix-server.<pid>`, or from a job already forgotten): each
//! goes to the runs of the PMIx jobs on this node as a line of dpm's own
//! (`ToLauncher::Note`, "dpm: PMIx server on HOST: …"), escaped and cut to
//! [`MAX_SERVER_LINE`] bytes, at most [`MAX_SERVER_LINES`] per job, then one
//! line saying the rest go to dpm's log only. Every line is also logged
//! (a warning when no job took it).

use dpm_kvs::JobId;
use dpm_proto::{Stream, ToLauncher};

use super::PmixFront;
use crate::node::NodeEffects;

/// Server lines passed to one job's run; the rest go to dpm's log only.
pub const MAX_SERVER_LINES: u32 = 20;

/// Bytes of one server line passed on (a longer one is cut, `…` marking it).
pub const MAX_SERVER_LINE: usize = 1024;

impl PmixFront {
    /// `output` logged by `nspace` (no job's) `rank`.
    pub(super) fn server_log(&mut self, fx: &mut (impl NodeEffects + ?Sized), host: &str, nspace: &str, rank: u32, output: Vec<(Stream, Vec<u8>)>) {
        let mut jobs: Vec<JobId> = self.jobs.keys().copied().collect();
        jobs.sort_unstable();
        for (_, text) in output {
            for line in String::from_utf8_lossy(&text).lines().filter(|l| !l.trim().is_empty()) {
                let line = cut(&dpm_pmi::sanitize::escape(line));
                let mut told = false;
                for &job in &jobs {
                    let Some(j) = self.jobs.get_mut(&job) else { continue };
                    j.server_lines += 1;
                    let note = match j.server_lines {
                        n if n <= MAX_SERVER_LINES => format!("dpm: PMIx server on {host}: {line}"),
                        n if n == MAX_SERVER_LINES + 1 => format!("dpm: PMIx server on {host}: further lines in dpm's log only"),
                        _ => continue,
                    };
                    told = true;
                    fx.send_up(ToLauncher::Note { job, line: note });
                }
                if told {
                    tracing::debug!(nspace = %dpm_pmi::sanitize::quote(nspace), rank, "PMIx server: {line}");
                } else {
                    tracing::warn!(nspace = %dpm_pmi::sanitize::quote(nspace), rank, "PMIx server: {line}");
                }
            }
        }
    }
}

/// `line` cut to [`MAX_SERVER_LINE`] bytes at a character boundary.
fn cut(line: &str) -> String {
    if line.len() <= MAX_SERVER_LINE {
        return line.to_string();
    }
    let mut end = MAX_SERVER_LINE;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &line[..end])
}
