//! The node's side of the output path, as plain state: whole lines and the
//! credit window (back-pressure), per job on this node.
//!
//! - **Whole lines**: a process's stdout/stderr goes up in whole lines where
//!   possible. The bytes after the last `\n` or `\r` of a read are held back
//!   until the rest of their line comes, so two ranks' lines never
//!   interleave inside a line. A `\r` (progress bars) passes at once; a held
//!   partial line goes up after [`QUIET`] or when [`HOLD_MAX`] bytes are
//!   held, and when its stream closes or its exit is reported. Bytes are
//!   never changed, only where the chunks end (binary output is byte-exact).
//!   A process is quiet only if it could have written: not while its job's
//!   window holds its pipes unread (it is blocked in `write(2)`, maybe
//!   mid-line), nor while it is runnable — preempted on a loaded machine —
//!   (up to [`BUSY_HOLD`]).
//! - **Credit window**: the bytes of a job sent up and not yet acknowledged
//!   by the launcher ([`ToDaemon::OutputAck`](dpm_proto::ToDaemon), sent once
//!   they are written to their destination) are counted; at
//!   [`OUTPUT_WINDOW`] the job's processes' pipes stop being read (they block
//!   in `write(2)`, as with a pipe to a slow reader) until acknowledgements
//!   bring the count below it. A reaped process's pipes are drained
//!   regardless (what is left in them is bounded by the pipe's size, plus what
//!   a grandchild writes within the drain grace), so its exit is never held up.

use std::collections::HashMap;
use std::time::Duration;

use dpm_kvs::{JobId, Rank};
use dpm_proto::{Stream, ToLauncher, OUTPUT_WINDOW};

use super::{NodeEffects, Timer};

/// A held partial line goes up after this long without more bytes for it.
/// The pieces of one line written by separate calls (`printf` per field,
/// unbuffered) come microseconds apart — but a rank preempted mid-line on a
/// loaded machine pauses for whole scheduler slices. Measured with 4 ranks
/// of `tests/programs/lines` on 2 cores under a load average of ~30: a fixed
/// 20 ms deadline broke ~80 of 80,000 lines per run, a 20 ms quiet time a
/// few in 10,000 while tests ran beside it; 50 ms, none seen. At most
/// `(1 + MAX_WAITS) × QUIET` = 250 ms in all: progress output without `\r`
/// still shows within a quarter of a second.
pub const QUIET: Duration = Duration::from_millis(50);

/// A partial line that keeps growing without its end (dots of a progress
/// bar) still goes up after `(1 + MAX_WAITS) × QUIET` at the latest.
pub const MAX_WAITS: u32 = 4;

/// A partial line whose process is runnable (preempted mid-line, not
/// waiting for anything) is held up to this long in all before it goes up
/// as it is; while the window holds its pipes unread, for as long as that
/// lasts. Issue 26: 3–10 lines in 4 million from 4 ranks of
/// `tests/programs/lines` were broken: a read ended mid-line, the window
/// filled (the ranks block in `write(2)` mid-line, so nothing more came),
/// and the quiet timer sent the piece up before the rest; or a rank was
/// preempted longer than the quiet time at a load of ~40. A program that
/// computes for seconds after a partial line (`printf("working... ")`) shows
/// it after this long instead of [`QUIET`].
pub const BUSY_HOLD: Duration = Duration::from_secs(2);

/// At most this many bytes of a partial line are held per stream (one pipe
/// read's worth); more go up at once.
pub const HOLD_MAX: usize = 16 * 1024;

/// One stream's held partial line.
#[derive(Default)]
struct Held {
    bytes: Vec<u8>,
    /// A [`Timer::OutputQuiet`] is set for it.
    timer: bool,
    /// Bytes came since that timer was set: when it fires, it is set again
    /// (at most [`MAX_WAITS`] times in a row).
    fresh: bool,
    waits: u32,
    /// Timers in a row at which its process was runnable ([`BUSY_HOLD`]).
    busy_waits: u32,
    /// Its pipes were just resumed (the window had room again): the rest of
    /// the line is there to read, and gets a quiet time of its own.
    resumed: bool,
}

/// A process whose output the node reads.
#[derive(Default)]
struct Reader {
    paused: bool,
    /// Reaped: its pipes are drained whatever the window.
    reaped: bool,
}

/// One job's output on this node.
#[derive(Default)]
struct JobOutput {
    /// Bytes sent up and not yet acknowledged.
    unacked: u64,
    held: HashMap<(Rank, Stream), Held>,
    readers: HashMap<Rank, Reader>,
}

/// Every job's output state on this node.
#[derive(Default)]
pub(super) struct OutputFlow {
    jobs: HashMap<JobId, JobOutput>,
}

impl OutputFlow {
    /// A started process with pipes: its output is held in lines and paused
    /// with its job's window.
    pub fn started(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: JobId, rank: Rank) {
        let j = self.jobs.entry(job).or_default();
        let paused = j.unacked >= OUTPUT_WINDOW;
        j.readers.insert(rank, Reader { paused, reaped: false });
        if paused {
            fx.pause_output(job, rank, true);
        }
    }

    /// Output read from a process's pipe. `live`: its exit is not reported
    /// yet (after that, nothing would flush a held line: it passes as is).
    pub fn on_output(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: JobId, rank: Rank, stream: Stream, data: Vec<u8>, live: bool) {
        let j = self.jobs.entry(job).or_default();
        let out = if live {
            let held = j.held.entry((rank, stream)).or_default();
            let out = hold_partial(held, data);
            if !out.is_empty() {
                held.busy_waits = 0; // a line ended: a new one starts afresh
            }
            if !held.bytes.is_empty() {
                if held.timer {
                    held.fresh = true;
                } else {
                    held.timer = true;
                    fx.set_timer(QUIET, Timer::OutputQuiet { job, rank, stream });
                }
            }
            out
        } else {
            data
        };
        self.send(fx, job, rank, stream, out);
    }

    /// A held line's timer fired: if nothing came for it since the timer
    /// was set (a quiet time of [`QUIET`] to twice that), it goes up as it
    /// is — unless more of its stream is on the way (`pending`: unread in
    /// the pipe, or read and not handled yet), its process could not write
    /// (its pipes paused by the window) or was preempted (`busy`:
    /// runnable), see [`BUSY_HOLD`].
    pub fn on_quiet(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: JobId, rank: Rank, stream: Stream, busy: bool, pending: bool) {
        let Some(j) = self.jobs.get_mut(&job) else { return };
        let paused = j.readers.get(&rank).is_some_and(|r| r.paused);
        let Some(held) = j.held.get_mut(&(rank, stream)) else { return };
        if held.bytes.is_empty() {
            *held = Held::default();
            return;
        }
        let rearm = if std::mem::take(&mut held.resumed) {
            true
        } else if std::mem::take(&mut held.fresh) && held.waits < MAX_WAITS {
            held.waits += 1;
            true
        } else if paused || pending {
            // The rest of the line may be in a pipe the window keeps
            // unread, or on its way: the reading task ran late (issue 36:
            // 2 lines in 4 million torn under load).
            true
        } else if busy && held.busy_waits < busy_limit() {
            held.busy_waits += 1;
            true
        } else {
            false
        };
        if rearm {
            return fx.set_timer(QUIET, Timer::OutputQuiet { job, rank, stream });
        }
        held.timer = false;
        held.waits = 0;
        held.busy_waits = 0;
        let out = std::mem::take(&mut held.bytes);
        self.send(fx, job, rank, stream, out);
    }

    /// Send up whatever is held for one stream (it closed, or the process's
    /// exit is about to be reported: its output goes first).
    pub fn flush(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: JobId, rank: Rank, stream: Stream) {
        let Some(j) = self.jobs.get_mut(&job) else { return };
        let out = j.held.remove(&(rank, stream)).map(|h| h.bytes).unwrap_or_default();
        self.send(fx, job, rank, stream, out);
    }

    /// A process was reaped: read the rest of its pipes at once.
    pub fn reaped(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: JobId, rank: Rank) {
        let Some(r) = self.jobs.get_mut(&job).and_then(|j| j.readers.get_mut(&rank)) else { return };
        r.reaped = true;
        if std::mem::take(&mut r.paused) {
            fx.pause_output(job, rank, false);
        }
    }

    /// Both of a process's pipes reached end of file.
    pub fn closed(&mut self, job: JobId, rank: Rank) {
        if let Some(j) = self.jobs.get_mut(&job) {
            j.readers.remove(&rank);
        }
    }

    /// The launcher wrote `bytes` of the job's output: resume reading when
    /// the count falls below the window.
    pub fn on_ack(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: JobId, bytes: u64) {
        let Some(j) = self.jobs.get_mut(&job) else { return };
        j.unacked = j.unacked.saturating_sub(bytes);
        if j.unacked < OUTPUT_WINDOW {
            for (rank, r) in j.readers.iter_mut().filter(|(_, r)| r.paused) {
                r.paused = false;
                fx.pause_output(job, *rank, false);
                // A timer due now must not send a held piece before its
                // rest, waiting in the pipe, is read.
                for ((_, _), held) in j.held.iter_mut().filter(|((r, _), h)| r == rank && !h.bytes.is_empty()) {
                    held.resumed = true;
                }
            }
        }
    }

    /// The path up changed (a re-attach): the bytes not yet acknowledged
    /// went up through the lost daemon, and their acknowledgements may
    /// never come. Every window reopens.
    pub fn resync(&mut self, fx: &mut (impl NodeEffects + ?Sized)) {
        let jobs: Vec<JobId> = self.jobs.keys().copied().collect();
        for job in jobs {
            self.on_ack(fx, job, u64::MAX);
        }
    }

    /// The job is over: drop what is held (the launcher no longer wants it).
    pub fn forget(&mut self, job: JobId) {
        self.jobs.remove(&job);
    }

    fn send(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: JobId, rank: Rank, stream: Stream, data: Vec<u8>) {
        if data.is_empty() {
            return;
        }
        let j = self.jobs.entry(job).or_default();
        j.unacked += data.len() as u64;
        fx.send_up(ToLauncher::Output { job, rank, stream, data });
        if j.unacked >= OUTPUT_WINDOW {
            for (rank, r) in j.readers.iter_mut().filter(|(_, r)| !r.paused && !r.reaped) {
                r.paused = true;
                fx.pause_output(job, *rank, true);
            }
        }
    }
}

/// Timers in a row a runnable process's partial line waits ([`BUSY_HOLD`]).
fn busy_limit() -> u32 {
    (BUSY_HOLD.as_millis() / QUIET.as_millis()) as u32
}

/// Append `data` to what is held and return what may go up now: everything
/// through the last `\n` or `\r`, or all of it once [`HOLD_MAX`] is reached.
fn hold_partial(held: &mut Held, data: Vec<u8>) -> Vec<u8> {
    let end = data.iter().rposition(|&b| b == b'\n' || b == b'\r').map(|i| i + 1);
    match end {
        // The common case, a read of whole lines with nothing held: no copy.
        Some(n) if n == data.len() && held.bytes.is_empty() => data,
        Some(n) => {
            let mut out = std::mem::take(&mut held.bytes);
            out.extend_from_slice(&data[..n]);
            held.bytes.extend_from_slice(&data[n..]);
            if held.bytes.len() >= HOLD_MAX {
                out.append(&mut held.bytes);
            }
            out
        }
        None => {
            held.bytes.extend_from_slice(&data);
            if held.bytes.len() >= HOLD_MAX {
                std::mem::take(&mut held.bytes)
            } else {
                Vec::new()
            }
        }
    }
}
