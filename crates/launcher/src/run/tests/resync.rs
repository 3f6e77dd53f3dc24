//! A rank's exit said again (its node re-attached after a daemon above it
//! was lost: `Down::Resync`, the exit may or may not have come the first
//! time): nothing new happens — no second verdict, kill, or slot given back.

use super::*;

#[test]
fn an_exit_said_again_is_a_no_op() {
    let (mut run, mut rec) = fixture(&[2, 2]);
    run.set_failure_policy(FailurePolicy::KeepOthers);
    let j = started(&mut run, &mut rec, &[0, 0, 1, 1]);
    exit(&mut run, &mut rec, 0, j, 0, ExitStatus::Code(0), DONE, 10);
    exit(&mut run, &mut rec, 1, j, 2, ExitStatus::Signal(libc::SIGSEGV), PmiProgress::Active, 11);
    let (sent, said, live) = (rec.sent().len(), rec.said().len(), rec.shared.nodes.live());
    assert_eq!(live, 2, "two ranks still run");
    let dead = |rec: &Recorder| rec.sent().iter().filter(|(_, m)| matches!(m, ToDaemon::RanksDead { .. })).count();
    assert_eq!(dead(&rec), 2, "both nodes told of the dead rank");
    for _ in 0..2 {
        exit(&mut run, &mut rec, 0, j, 0, ExitStatus::Code(0), DONE, 10);
        exit(&mut run, &mut rec, 1, j, 2, ExitStatus::Signal(libc::SIGSEGV), PmiProgress::Active, 11);
    }
    assert_eq!(dead(&rec), 2, "no second RanksDead");
    assert_eq!(rec.sent().len(), sent, "nothing sent: {:?}", &rec.sent()[sent..]);
    assert_eq!(rec.said().len(), said, "no second failure said: {:?}", rec.said());
    assert_eq!(rec.shared.nodes.live(), live, "no slot given back twice");
    assert_eq!(run.exit_code(), None);
    // The others end; the first failure decides, once.
    exit(&mut run, &mut rec, 0, j, 1, ExitStatus::Code(0), DONE, 12);
    exit(&mut run, &mut rec, 1, j, 3, ExitStatus::Code(0), DONE, 13);
    assert_eq!(run.exit_code(), Some(128 + libc::SIGSEGV));
    // Said again after the job is forgotten: still nothing.
    let sent = rec.sent().len();
    exit(&mut run, &mut rec, 1, j, 3, ExitStatus::Code(0), DONE, 13);
    exit(&mut run, &mut rec, 1, j, 2, ExitStatus::Code(7), DONE, 13);
    assert_eq!(run.exit_code(), Some(128 + libc::SIGSEGV));
    assert_eq!(rec.sent().len(), sent);
    assert_eq!(rec.shared.nodes.live(), 0);
}

#[test]
fn a_first_exit_heard_only_in_a_resync_still_ends_the_run() {
    let (mut run, mut rec) = fixture(&[2, 2]);
    let j = started(&mut run, &mut rec, &[0, 1]);
    exit(&mut run, &mut rec, 0, j, 0, ExitStatus::Code(0), DONE, 10);
    // Rank 1's first report was lost with the daemon above node 1; the
    // resync brings it (with rank 0's, which arrived, again).
    exit(&mut run, &mut rec, 0, j, 0, ExitStatus::Code(0), DONE, 10);
    exit(&mut run, &mut rec, 1, j, 1, ExitStatus::Code(4), DONE, 11);
    assert_eq!(run.exit_code(), Some(4));
    assert_eq!(rec.shared.nodes.live(), 0);
}
