//! After a re-attach (`Down::Resync`): the node says its ranks' exits again
//! and its jobs' output windows reopen.

use dpm_kvs::Rank;
use dpm_proto::{ExitStatus, RankExit, Stream, ToDaemon, ToLauncher, OUTPUT_WINDOW};

use super::recorder::{Recorded, RecordingEffects};
use super::tests::{running, J};
use super::*;

/// Rank `rank` ends with `status` and its exit is reported (its output
/// closed, the drain grace over).
fn end(r: &mut NodeReactor, fx: &mut RecordingEffects, rank: u32, status: ExitStatus) {
    r.on_exited(fx, J, Rank(rank), status, 7);
    r.on_output_closed(fx, J, Rank(rank), Stream::Stdout);
    r.on_output_closed(fx, J, Rank(rank), Stream::Stderr);
    r.on_timer(fx, Timer::DrainGrace { job: J, rank: Rank(rank) });
}

fn exits(ups: &[ToLauncher]) -> Vec<(u32, ExitStatus)> {
    ups.iter().filter_map(|m| if let ToLauncher::Exited(RankExit { rank, status, .. }) = m { Some((rank.0, *status)) } else { None }).collect()
}

fn pauses(fx: &RecordingEffects) -> Vec<(u32, bool)> {
    let mut p: Vec<_> = fx.log.iter().filter_map(|e| if let Recorded::PauseOutput { rank, paused, .. } = e { Some((rank.0, *paused)) } else { None }).collect();
    p.sort();
    p
}

#[test]
fn a_resync_says_the_exits_again_and_only_the_exits() {
    let (mut r, mut fx) = running(3);
    end(&mut r, &mut fx, 0, ExitStatus::Code(0));
    end(&mut r, &mut fx, 2, ExitStatus::Signal(9));
    assert_eq!(exits(&fx.take_up()), vec![(0, ExitStatus::Code(0)), (2, ExitStatus::Signal(9))], "reported once each");
    r.resync(&mut fx);
    let ups = fx.take_up();
    assert_eq!(exits(&ups), vec![(0, ExitStatus::Code(0)), (2, ExitStatus::Signal(9))], "said again, rank 1 still runs: {ups:?}");
    assert_eq!(ups.len(), 2, "nothing else goes up: {ups:?}");
    // Each resync says them again (one per re-attach); a forgotten job's are no one's.
    r.resync(&mut fx);
    assert_eq!(exits(&fx.take_up()).len(), 2);
    r.on_message(&mut fx, ToDaemon::Forget { job: J });
    fx.take();
    r.resync(&mut fx);
    assert!(exits(&fx.take_up()).is_empty());
}

#[test]
fn a_resync_reopens_a_full_output_window_and_late_acks_do_not_underflow() {
    let (mut r, mut fx) = running(2);
    r.on_output(&mut fx, J, Rank(0), Stream::Stdout, vec![b'\n'; OUTPUT_WINDOW as usize]);
    assert_eq!(pauses(&fx), vec![(0, true), (1, true)], "the window is full");
    fx.take();
    // Its acknowledgement was lost with the daemon above: the resync reopens it.
    r.resync(&mut fx);
    assert_eq!(pauses(&fx), vec![(0, false), (1, false)]);
    fx.take();
    // An acknowledgement of bytes that did arrive still comes: the count stays at zero.
    r.on_message(&mut fx, ToDaemon::OutputAck { job: J, bytes: OUTPUT_WINDOW });
    assert!(pauses(&fx).is_empty());
    // A whole window more may go up before the pipes pause again, not less.
    r.on_output(&mut fx, J, Rank(1), Stream::Stdout, vec![b'\n'; OUTPUT_WINDOW as usize - 1]);
    assert!(pauses(&fx).is_empty(), "the count was not driven below zero nor left above it");
    r.on_output(&mut fx, J, Rank(1), Stream::Stdout, b"\n".to_vec());
    assert_eq!(pauses(&fx), vec![(0, true), (1, true)]);
}
