//! The PMIx watch: a job whose program the launcher's probe could not
//! classify (`sh -c "$PROG"`, a script that builds its command) is served
//! with PMI-1/2, and an Open MPI 5 program among its ranks would run as an
//! unrelated singleton ("rank 0 of 1", exit 0, a 16 MiB `/dev/shm` segment
//! each). So such a job is launched with `LaunchJob::pmix_watch`, and every
//! node that runs ranks of it listens on *its own* loopback for the job and
//! names that listener in those ranks' `PMIX_SERVER_URI*` ([`vars`]) — a
//! rank on another host than `dpm run`'s finds the watch of the daemon
//! beside it —, with no `PMIX_NAMESPACE` (MPICH refuses a job with both
//! `PMI_SIZE` and `PMIX_NAMESPACE`; it ignores the URI variables). An Open
//! MPI client without a namespace still tries the server the URI names
//! before it settles for being a singleton: the first connection of the
//! owner's trips the watch, and the node tells the launcher
//! (`ToLauncher::WatchTripped`), which ends the run with a message saying
//! to use `--pmi pmix`. The connections are held open, unanswered, so the
//! client waits in `PMIx_Init` until the run's SIGTERM reaches it: no
//! singleton runs.
//!
//! Only connections of the daemon's own uid count (the kernel says whose:
//! [`crate::peer`]); another user's are closed. Bounded: at most
//! [`MAX_HELD`] connections are held per job and node, later ones closed;
//! refusals are logged [`LOGGED_REFUSALS`] times. A node opens a listener
//! only for a watched job with ranks on it and closes it when it forgets
//! the job.
//!
//! This module is the policy ([`Watcher`]) and the variables, pure; the node
//! reactor owns one `Watcher` per watched job, the driver accepts and asks
//! the kernel.

/// The variables OpenPMIx clients (v2.1 to v5) read a server's URI from.
pub const URI_VARS: [&str; 5] = ["PMIX_SERVER_URI41", "PMIX_SERVER_URI4", "PMIX_SERVER_URI3", "PMIX_SERVER_URI21", "PMIX_SERVER_URI2"];
/// How a watch's URI starts: OpenPMIx's "nspace.rank" of the server, then `;`.
pub const URI_PREFIX: &str = "dpm-watch.0;";
/// Connections held open at most (per job and node); later ones are closed at once.
pub const MAX_HELD: usize = 1024;
/// Another user's connections logged one by one; later ones are counted.
pub const LOGGED_REFUSALS: u64 = 3;

/// What to do with one accepted connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The first of this user's: tell the launcher, hold the connection.
    Trip,
    /// Another of this user's: hold it (its client waits).
    Hold,
    /// Another user's, or one too many: close it; `log` says whether to say so.
    Close { log: bool },
}

impl Verdict {
    /// The connection is kept open.
    pub fn holds(self) -> bool {
        matches!(self, Verdict::Trip | Verdict::Hold)
    }
}

/// One watch's state: whether it has tripped, what it holds and refused.
#[derive(Debug, Default)]
pub struct Watcher {
    tripped: bool,
    held: usize,
    refused: u64,
}

impl Watcher {
    /// A connection came; `same_user` is the kernel's word on its owner.
    pub fn on_connection(&mut self, same_user: bool) -> Verdict {
        if !same_user {
            self.refused += 1;
            return Verdict::Close { log: self.refused <= LOGGED_REFUSALS };
        }
        if self.held >= MAX_HELD {
            return Verdict::Close { log: false };
        }
        self.held += 1;
        if std::mem::replace(&mut self.tripped, true) {
            Verdict::Hold
        } else {
            Verdict::Trip
        }
    }

    /// Another user's connections closed so far.
    pub fn refused(&self) -> u64 {
        self.refused
    }
}

/// The variables a rank gets from a watch listening on loopback port
/// `port`: every [`URI_VARS`] naming it.
pub fn vars(port: u16) -> Vec<(String, String)> {
    // OpenPMIx's URI: the server's "nspace.rank", then its address.
    let uri = format!("{URI_PREFIX}tcp4://127.0.0.1:{port}");
    URI_VARS.iter().map(|k| (k.to_string(), uri.clone())).collect()
}

/// `env` names a PMIx server itself (the user's `-genv PMIX_SERVER_URI…`):
/// its ranks are not pointed at the watch.
pub fn names_a_server(env: &[(String, String)]) -> bool {
    env.iter().any(|(k, _)| k.starts_with("PMIX_SERVER_URI"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_connection_of_this_user_trips_and_others_are_bounded() {
        let mut w = Watcher::default();
        assert_eq!(w.on_connection(false), Verdict::Close { log: true });
        assert_eq!(w.on_connection(true), Verdict::Trip);
        assert_eq!(w.on_connection(true), Verdict::Hold);
        for _ in 1..LOGGED_REFUSALS {
            assert_eq!(w.on_connection(false), Verdict::Close { log: true });
        }
        assert_eq!(w.on_connection(false), Verdict::Close { log: false }, "refusals are logged a bounded number of times");
        assert_eq!(w.refused(), LOGGED_REFUSALS + 1);
        for _ in 2..MAX_HELD {
            assert_eq!(w.on_connection(true), Verdict::Hold);
        }
        assert_eq!(w.on_connection(true), Verdict::Close { log: false }, "at most MAX_HELD are held");
    }

    #[test]
    fn another_users_connection_never_trips() {
        let mut w = Watcher::default();
        for _ in 0..2000 {
            assert!(!w.on_connection(false).holds());
        }
        assert_eq!(w.on_connection(true), Verdict::Trip, "the owner's first connection still trips after a flood");
    }

    #[test]
    fn the_variables_name_the_port_on_loopback_and_no_namespace() {
        let vars = vars(4242);
        let names: Vec<&str> = vars.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, URI_VARS);
        assert!(vars.iter().all(|(_, v)| v == "dpm-watch.0;tcp4://127.0.0.1:4242"), "{vars:?}");
        assert!(!names_a_server(&[("PATH".into(), "/bin".into())]));
        assert!(names_a_server(&[("PMIX_SERVER_URI41".into(), "mine".into())]));
    }
}
