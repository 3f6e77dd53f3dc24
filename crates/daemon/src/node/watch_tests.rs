//! The PMIx watch on a node (`crate::pmix_watch`), driven with a recorder:
//! a watched PMI-1/2 launch opens one listener and names it in its ranks'
//! environments, the owner's first connection is reported up once, others
//! are held or closed, and the job's end closes it.

use dpm_proto::{LaunchJob, PmiMode, ToDaemon, ToLauncher};

use super::recorder::{Recorded, RecordingEffects};
use super::tests::{launch, node, J};
use super::NodeReactor;
use crate::pmix_watch::{MAX_HELD, URI_VARS};

fn watched(size: u32, local: u32, mode: PmiMode) -> LaunchJob {
    LaunchJob { pmix_watch: true, ..launch(size, local, mode) }
}

fn opened(fx: &RecordingEffects) -> Vec<u16> {
    fx.log.iter().filter_map(|r| if let Recorded::OpenWatch(j, port) = r { Some(*port).filter(|_| *j == J) } else { None }).collect()
}

fn trips(fx: &mut RecordingEffects) -> usize {
    fx.take_up().iter().filter(|m| matches!(m, ToLauncher::WatchTripped { job } if *job == J)).count()
}

fn launched_watched(size: u32) -> (NodeReactor, RecordingEffects) {
    let (mut r, mut fx) = node();
    r.on_message(&mut fx, ToDaemon::Launch(watched(size, size, PmiMode::Fd)));
    fx.settle(&mut r);
    (r, fx)
}

#[test]
fn a_watched_launch_opens_one_listener_and_names_it_in_every_ranks_environment() {
    let (_, fx) = launched_watched(3);
    let ports = opened(&fx);
    assert_eq!(ports.len(), 1, "one listener per job and node: {:?}", fx.log);
    let uri = format!("dpm-watch.0;tcp4://127.0.0.1:{}", ports[0]);
    let starts = fx.starts();
    assert_eq!(starts.len(), 3);
    for s in starts {
        for var in URI_VARS {
            assert_eq!(s.var(var), Some(uri.as_str()), "{var} of rank {}", s.rank.0);
        }
        assert_eq!(s.var("PMIX_NAMESPACE"), None, "a namespace beside PMI_SIZE makes MPICH refuse the job");
        assert_eq!(s.var("PMI_SIZE"), Some("3"), "still served PMI-1/2");
    }
}

#[test]
fn no_listener_for_a_job_not_watched_or_served_pmix() {
    for spec in [launch(2, 2, PmiMode::Fd), watched(2, 0, PmiMode::Fd)] {
        let (mut r, mut fx) = node();
        r.on_message(&mut fx, ToDaemon::Launch(spec));
        fx.settle(&mut r);
        assert!(opened(&fx).is_empty(), "nothing listening that a job does not need: {:?}", fx.log);
        assert!(fx.starts().iter().all(|s| URI_VARS.iter().all(|v| s.var(v).is_none())));
        assert!(!r.on_watch_connection(&mut fx, J, None), "a connection for a job without a watch is closed");
        assert_eq!(trips(&mut fx), 0);
    }
    let (mut r, mut fx) = node();
    fx.serve_pmix = true;
    r.on_message(&mut fx, ToDaemon::Launch(watched(1, 1, PmiMode::Pmix)));
    fx.settle(&mut r);
    assert!(opened(&fx).is_empty(), "a PMIx job needs no watch");
}

#[test]
fn a_server_the_user_named_is_kept() {
    let (mut r, mut fx) = node();
    let mut spec = watched(1, 1, PmiMode::Fd);
    spec.apps[0].env.push(("PMIX_SERVER_URI41".into(), "mine".into()));
    r.on_message(&mut fx, ToDaemon::Launch(spec));
    fx.settle(&mut r);
    assert!(fx.starts().iter().all(|s| URI_VARS.iter().all(|v| s.var(v).is_none())), "{:?}", fx.starts());
}

#[test]
fn the_owners_first_connection_is_reported_once_and_held_others_are_closed() {
    let (mut r, mut fx) = launched_watched(2);
    fx.take();
    assert!(!r.on_watch_connection(&mut fx, J, Some("uid 65534".into())), "another user's is closed");
    assert_eq!(trips(&mut fx), 0, "another user's connection never trips the watch");
    assert!(r.on_watch_connection(&mut fx, J, None), "the owner's is held (its client waits)");
    assert_eq!(trips(&mut fx), 1);
    assert!(r.on_watch_connection(&mut fx, J, None));
    assert_eq!(trips(&mut fx), 0, "reported once per job and node");
    for _ in 2..MAX_HELD {
        assert!(r.on_watch_connection(&mut fx, J, None));
    }
    assert!(!r.on_watch_connection(&mut fx, J, None), "at most MAX_HELD held");
}

#[test]
fn the_jobs_end_closes_its_watch() {
    let (mut r, mut fx) = launched_watched(1);
    fx.take();
    r.on_message(&mut fx, ToDaemon::Forget { job: J });
    assert_eq!(fx.log.iter().filter(|e| matches!(e, Recorded::CloseWatch(j) if *j == J)).count(), 1, "{:?}", fx.log);
    fx.take();
    assert!(!r.on_watch_connection(&mut fx, J, None), "a connection that comes after the job's end is closed");
    assert_eq!(trips(&mut fx), 0);
    // A shutdown closes the watches of the jobs still running.
    let (mut r, mut fx) = launched_watched(1);
    r.shutdown(&mut fx);
    assert!(fx.log.iter().any(|e| matches!(e, Recorded::CloseWatch(j) if *j == J)));
}

#[test]
fn a_watch_that_cannot_listen_leaves_the_job_running_unwatched() {
    let (mut r, mut fx) = node();
    fx.fail_port = Some(libc::EMFILE);
    r.on_message(&mut fx, ToDaemon::Launch(watched(2, 2, PmiMode::Fd)));
    fx.settle(&mut r);
    assert_eq!(fx.starts().len(), 2, "the ranks start");
    assert!(fx.starts().iter().all(|s| URI_VARS.iter().all(|v| s.var(v).is_none())));
    assert!(!fx.take_up().iter().any(|m| matches!(m, ToLauncher::LaunchFailed { .. })));
}
