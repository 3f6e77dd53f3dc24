//! The node's output path: whole lines (held partial lines, `\r`, the quiet
//! timer, the hold bound) and the credit window (pause at the window, resume
//! on acknowledgement, a reaped process drained regardless).

use dpm_kvs::Rank;
use dpm_proto::{ExitStatus, Stream, ToDaemon, ToLauncher, OUTPUT_WINDOW};

use super::recorder::{Recorded, RecordingEffects};
use super::tests::{running, J};
use super::*;

const OUT: Stream = Stream::Stdout;

/// The output sent up so far, as (rank, bytes), taken out of the log.
fn sent(fx: &mut RecordingEffects) -> Vec<(u32, Vec<u8>)> {
    fx.take_up().into_iter().filter_map(|m| if let ToLauncher::Output { rank, data, .. } = m { Some((rank.0, data)) } else { None }).collect()
}

fn pauses(fx: &RecordingEffects) -> Vec<(u32, bool)> {
    fx.log.iter().filter_map(|e| if let Recorded::PauseOutput { rank, paused, .. } = e { Some((rank.0, *paused)) } else { None }).collect()
}

#[test]
fn a_partial_line_is_held_until_its_end_comes() {
    let (mut r, mut fx) = running(2);
    r.on_output(&mut fx, J, Rank(0), OUT, b"one\ntw".to_vec());
    r.on_output(&mut fx, J, Rank(1), OUT, b"other".to_vec());
    assert_eq!(sent(&mut fx), vec![(0, b"one\n".to_vec())]);
    r.on_output(&mut fx, J, Rank(0), OUT, b"o\nthr".to_vec());
    assert_eq!(sent(&mut fx), vec![(0, b"two\n".to_vec())], "a whole line, never a piece of one");
    // A carriage return ends a piece too (progress bars show at once).
    r.on_output(&mut fx, J, Rank(1), OUT, b" 50%\r".to_vec());
    assert_eq!(sent(&mut fx), vec![(1, b"other 50%\r".to_vec())]);
}

#[test]
fn a_quiet_partial_line_goes_up_after_the_quiet_time() {
    let (mut r, mut fx) = running(1);
    r.on_output(&mut fx, J, Rank(0), OUT, b"abc".to_vec());
    let timer = Timer::OutputQuiet { job: J, rank: Rank(0), stream: OUT };
    assert!(fx.log.iter().any(|e| matches!(e, Recorded::SetTimer(QUIET, t) if *t == timer)));
    fx.take();
    // More came before the timer fired: it is set again, nothing goes up.
    r.on_output(&mut fx, J, Rank(0), OUT, b"def".to_vec());
    r.on_timer(&mut fx, timer);
    assert!(sent(&mut fx).is_empty());
    assert!(matches!(&fx.take()[..], [Recorded::SetTimer(QUIET, t)] if *t == timer));
    r.on_timer(&mut fx, timer);
    assert_eq!(sent(&mut fx), vec![(0, b"abcdef".to_vec())]);
}

#[test]
fn a_line_that_keeps_growing_goes_up_after_the_last_wait() {
    let (mut r, mut fx) = running(1);
    let timer = Timer::OutputQuiet { job: J, rank: Rank(0), stream: OUT };
    r.on_output(&mut fx, J, Rank(0), OUT, b".".to_vec());
    for _ in 0..MAX_WAITS {
        r.on_output(&mut fx, J, Rank(0), OUT, b".".to_vec());
        r.on_timer(&mut fx, timer);
        assert!(sent(&mut fx).is_empty());
    }
    r.on_output(&mut fx, J, Rank(0), OUT, b".".to_vec());
    r.on_timer(&mut fx, timer);
    assert_eq!(sent(&mut fx), vec![(0, vec![b'.'; MAX_WAITS as usize + 2])]);
}

#[test]
fn a_full_hold_goes_up_and_bytes_are_never_changed() {
    let (mut r, mut fx) = running(1);
    let binary: Vec<u8> = (0..HOLD_MAX + 100).map(|i| (i % 251) as u8 | 0x80).collect();
    r.on_output(&mut fx, J, Rank(0), OUT, binary[..HOLD_MAX - 1].to_vec());
    assert!(sent(&mut fx).is_empty());
    r.on_output(&mut fx, J, Rank(0), OUT, binary[HOLD_MAX - 1..].to_vec());
    assert_eq!(sent(&mut fx), vec![(0, binary)]);
}

#[test]
fn held_lines_go_up_when_the_stream_closes_and_before_the_exit() {
    let (mut r, mut fx) = running(1);
    r.on_output(&mut fx, J, Rank(0), OUT, b"out".to_vec());
    r.on_output(&mut fx, J, Rank(0), Stream::Stderr, b"err".to_vec());
    r.on_output_closed(&mut fx, J, Rank(0), OUT);
    assert_eq!(sent(&mut fx), vec![(0, b"out".to_vec())]);
    // The stderr pipe is held open (a grandchild): the exit, after the
    // grace, comes behind the held bytes.
    r.on_exited(&mut fx, J, Rank(0), ExitStatus::Code(0), 1);
    r.on_timer(&mut fx, Timer::DrainGrace { job: J, rank: Rank(0) });
    let ups = fx.take_up();
    assert!(matches!(&ups[..], [ToLauncher::Output { data, stream: Stream::Stderr, .. }, ToLauncher::Exited(_)] if data == b"err"), "{ups:?}");
}

#[test]
fn a_full_window_pauses_the_jobs_readers_until_the_launcher_acknowledges() {
    let (mut r, mut fx) = running(2);
    let chunk = vec![b'x'; 64 * 1024 - 1];
    let line = |mut c: Vec<u8>| {
        c.push(b'\n');
        c
    };
    for _ in 0..3 {
        r.on_output(&mut fx, J, Rank(0), OUT, line(chunk.clone()));
    }
    assert!(pauses(&fx).is_empty(), "below the window");
    r.on_output(&mut fx, J, Rank(1), OUT, line(chunk.clone()));
    let mut p = pauses(&fx);
    p.sort();
    assert_eq!(p, vec![(0, true), (1, true)], "at the window: every reader of the job");
    assert_eq!(sent(&mut fx).len(), 4, "what was read still goes up");
    fx.take();
    // Not enough credit: still paused.
    r.on_message(&mut fx, ToDaemon::OutputAck { job: J, bytes: 0 });
    assert!(pauses(&fx).is_empty());
    r.on_message(&mut fx, ToDaemon::OutputAck { job: J, bytes: 64 * 1024 });
    let mut p = pauses(&fx);
    p.sort();
    assert_eq!(p, vec![(0, false), (1, false)]);
    assert_eq!(OUTPUT_WINDOW, 4 * 64 * 1024, "the test's arithmetic");
}

#[test]
fn a_reaped_process_is_drained_whatever_the_window() {
    let (mut r, mut fx) = running(2);
    r.on_output(&mut fx, J, Rank(0), OUT, vec![b'\n'; OUTPUT_WINDOW as usize]);
    assert_eq!(pauses(&fx).len(), 2);
    fx.take();
    r.on_exited(&mut fx, J, Rank(1), ExitStatus::Code(0), 1);
    assert_eq!(pauses(&fx), vec![(1, false)], "its exit must not wait on the window");
    fx.take();
    // Paused readers of the job stay paused; the reaped one is not paused again.
    r.on_output(&mut fx, J, Rank(1), OUT, b"last\n".to_vec());
    assert!(pauses(&fx).is_empty());
    r.on_message(&mut fx, ToDaemon::Forget { job: J });
    r.on_message(&mut fx, ToDaemon::OutputAck { job: J, bytes: 1 });
    assert!(pauses(&fx).is_empty(), "a forgotten job has no readers");
}

/// Issue 26: a read ended mid-line, then the window filled: the rank
/// blocked in `write(2)` with the rest of its line unread, and the quiet
/// timer sent the piece up on its own — another rank's line could follow
/// it. While the window holds the pipes, a held piece waits.
#[test]
fn a_partial_line_waits_while_the_window_holds_its_pipes() {
    let (mut r, mut fx) = running(2);
    let timer = Timer::OutputQuiet { job: J, rank: Rank(1), stream: OUT };
    r.on_output(&mut fx, J, Rank(1), OUT, b"rank 1 li".to_vec());
    r.on_output(&mut fx, J, Rank(0), OUT, vec![b'\n'; OUTPUT_WINDOW as usize]);
    assert_eq!(pauses(&fx).len(), 2, "the window is full");
    sent(&mut fx);
    for _ in 0..3 * MAX_WAITS {
        r.on_timer(&mut fx, timer);
        assert!(sent(&mut fx).is_empty(), "a piece of a line went up while its pipe was held");
    }
    r.on_message(&mut fx, ToDaemon::OutputAck { job: J, bytes: OUTPUT_WINDOW });
    // A timer due right after the resume: the rest is in the pipe, unread.
    r.on_timer(&mut fx, timer);
    assert!(sent(&mut fx).is_empty(), "a piece went up before its pipe was read again");
    r.on_output(&mut fx, J, Rank(1), OUT, b"ne 7 end\n".to_vec());
    assert_eq!(sent(&mut fx), vec![(1, b"rank 1 line 7 end\n".to_vec())]);
}

/// A rank preempted mid-line (runnable) is not quiet: its piece waits up to
/// `BUSY_HOLD`, then goes up as it is; a sleeping one's goes after the quiet
/// time (`a_quiet_partial_line_goes_up_after_the_quiet_time`).
#[test]
fn a_partial_line_of_a_preempted_rank_waits_up_to_the_busy_hold() {
    let (mut r, mut fx) = running(1);
    let timer = Timer::OutputQuiet { job: J, rank: Rank(0), stream: OUT };
    fx.runnable.insert(super::recorder::FIRST_PID);
    r.on_output(&mut fx, J, Rank(0), OUT, b"rank 0 li".to_vec());
    let limit = (BUSY_HOLD.as_millis() / QUIET.as_millis()) as usize;
    for _ in 0..limit {
        r.on_timer(&mut fx, timer);
        assert!(sent(&mut fx).is_empty(), "a preempted rank's piece went up before the busy hold");
    }
    r.on_timer(&mut fx, timer);
    assert_eq!(sent(&mut fx), vec![(0, b"rank 0 li".to_vec())], "after the busy hold it goes up as it is");
    // A line that ends in time goes up whole.
    r.on_output(&mut fx, J, Rank(0), OUT, b"rank 0 li".to_vec());
    r.on_timer(&mut fx, timer);
    r.on_output(&mut fx, J, Rank(0), OUT, b"ne 1 end\n".to_vec());
    assert_eq!(sent(&mut fx), vec![(0, b"rank 0 line 1 end\n".to_vec())]);
}

/// The rest of a held line waits unread in the pipe (or read and not yet
/// handled: the reading task ran late on a loaded machine): the piece is
/// held for as long as that lasts, whatever the quiet time; then it joins
/// its rest (issue 36: a rank's piece went up alone and another's line
/// joined it).
#[test]
fn a_partial_line_whose_rest_is_on_its_way_is_held() {
    let (mut r, mut fx) = running(2);
    let timer = Timer::OutputQuiet { job: J, rank: Rank(0), stream: OUT };
    r.on_output(&mut fx, J, Rank(0), OUT, b"rank 0 line ".to_vec());
    fx.pending_output.insert((J, Rank(0), OUT));
    for _ in 0..3 * (MAX_WAITS + BUSY_HOLD.as_millis() as u32 / QUIET.as_millis() as u32) {
        r.on_timer(&mut fx, timer);
        assert!(sent(&mut fx).is_empty(), "a piece went up while its rest was on the way");
    }
    r.on_output(&mut fx, J, Rank(1), OUT, b"rank 1 line 7 end\n".to_vec());
    fx.pending_output.clear();
    r.on_output(&mut fx, J, Rank(0), OUT, b"7 end\n".to_vec());
    assert_eq!(sent(&mut fx), vec![(1, b"rank 1 line 7 end\n".to_vec()), (0, b"rank 0 line 7 end\n".to_vec())]);
    // Nothing on the way: a quiet piece goes up after the quiet time, as
    // ever (the timer still set came with fresh bytes: one more wait).
    r.on_output(&mut fx, J, Rank(0), OUT, b"prompt> ".to_vec());
    r.on_timer(&mut fx, timer);
    assert!(sent(&mut fx).is_empty());
    r.on_timer(&mut fx, timer);
    assert_eq!(sent(&mut fx), vec![(0, b"prompt> ".to_vec())]);
}
