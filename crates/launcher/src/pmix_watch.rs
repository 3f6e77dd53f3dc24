//! The PMIx watch: a job whose program the probe could not classify
//! ([`crate::mpi_probe`]: `sh -c "$PROG"`, a script that builds its
//! command) is served with PMI-1/2 (`--pmi auto` or `simple`), and an Open
//! MPI 5 program among its ranks would run as an unrelated singleton
//! ("rank 0 of 1", exit 0). So
//! such a job's ranks also get `PMIX_SERVER_URI*` naming a loopback port of
//! this process, and no `PMIX_NAMESPACE` (MPICH refuses a job with both
//! `PMI_SIZE` and `PMIX_NAMESPACE`; it ignores the URI variables). An Open
//! MPI client without a namespace still tries the server the URI names
//! before it settles for being a singleton: the first connection of this
//! user's ends the run with a message saying to use `--pmi pmix`. The
//! connections are held open, unanswered, so the client waits in
//! `PMIx_Init` until the run's SIGTERM reaches it: no singleton runs.
//!
//! Only connections of this process's uid count (the kernel says whose,
//! [`dpm_daemon::peer`]); another user's are closed. Bounded: at most
//! [`MAX_HELD`] connections are held, later ones closed; refusals are
//! logged [`LOGGED_REFUSALS`] times. The listener lives as long as the run,
//! one per run in the process of `dpm run` (also a run through a boot,
//! whose client then ends the run with SIGTERM and exits 1); ranks on
//! another host cannot reach it.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};

use tokio::sync::mpsc;

use crate::controller::Input;

/// The variables OpenPMIx clients (v2.1 to v5) read a server's URI from.
pub const URI_VARS: [&str; 5] = ["PMIX_SERVER_URI41", "PMIX_SERVER_URI4", "PMIX_SERVER_URI3", "PMIX_SERVER_URI21", "PMIX_SERVER_URI2"];
/// How a watch's URI starts: OpenPMIx's "nspace.rank" of the server, then `;`.
const URI_PREFIX: &str = "dpm-watch.0;";
/// Connections held open at most; later ones are closed at once.
pub const MAX_HELD: usize = 1024;
/// Another user's connections logged one by one; later ones are counted.
pub const LOGGED_REFUSALS: u64 = 3;

/// What to do with one accepted connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The first of this user's: end the run, hold the connection.
    Trip,
    /// Another of this user's: hold it (its client waits).
    Hold,
    /// Another user's, or one too many: close it; `log` says whether to say so.
    Close { log: bool },
}

/// The watch's state: whether it has tripped, what it holds and refused.
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
}

/// A watch's listener, bound before the job is planned into daemons.
pub struct Watch {
    listener: TcpListener,
    uri: String,
}

impl Watch {
    /// Listen on a free loopback port.
    pub fn open() -> std::io::Result<Watch> {
        let listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        // OpenPMIx's URI: the server's "nspace.rank", then its address.
        let uri = format!("{URI_PREFIX}tcp4://127.0.0.1:{port}");
        Ok(Watch { listener, uri })
    }

    /// The variables a rank gets: every [`URI_VARS`] naming this listener.
    pub fn vars(&self) -> impl Iterator<Item = (String, String)> + '_ {
        URI_VARS.iter().map(|k| (k.to_string(), self.uri.clone()))
    }

    /// Add [`Watch::vars`] to `env`, unless it names a PMIx server itself.
    pub fn arm(&self, env: &mut Vec<(String, String)>) {
        if env.iter().any(|(k, _)| k.starts_with("PMIX_SERVER_URI")) {
            return;
        }
        env.extend(self.vars());
    }

    /// Accept until the run ends; the first connection of this user's sends
    /// `Input::End(why)` to the run.
    pub async fn serve(self, run: mpsc::UnboundedSender<Input>, why: String) {
        let listener = match tokio::net::TcpListener::from_std(self.listener) {
            Ok(l) => l,
            Err(e) => return tracing::warn!("the PMIx watch cannot listen: {e}"),
        };
        let mut watcher = Watcher::default();
        let mut held = Vec::new();
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(c) => c,
                // Out of descriptors, say: try again shortly, never spin.
                Err(_) => {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let same = stream.local_addr().map_err(dpm_daemon::peer::PeerError::from).and_then(|local| dpm_daemon::peer::check_same_user(local, peer));
            match watcher.on_connection(same.is_ok()) {
                Verdict::Trip => {
                    held.push(stream);
                    let _ = run.send(Input::End(why.clone()));
                }
                Verdict::Hold => held.push(stream),
                Verdict::Close { log } => {
                    if log {
                        if let Err(e) = same {
                            tracing::warn!("the PMIx watch closed a connection from {peer}: {e}");
                        }
                    }
                }
            }
        }
    }
}

/// Remove a watch's variables from `env` (a boot's own `--pmi` replaced
/// the client's auto choice); a PMIx server the user named stays.
pub fn disarm(env: &mut Vec<(String, String)>) {
    env.retain(|(k, v)| !(URI_VARS.contains(&k.as_str()) && v.starts_with(URI_PREFIX)));
}

/// The run's message when the watch trips.
pub fn tripped_message(exe: &str) -> String {
    format!(
        "a rank of '{exe}' runs Open MPI, which needs PMIx: dpm could not tell which MPI the program runs and served PMI-1/2, \
         so it would have run as a singleton. Run it with --pmi pmix (or DPM_PMI=pmix), and for an Open MPI outside the system's \
         libraries say where it is: -genv OPAL_PREFIX <its prefix> (or DPM_PMIX_LIBRARY=<its libpmix.so>)"
    )
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
        for _ in 2..MAX_HELD {
            assert_eq!(w.on_connection(true), Verdict::Hold);
        }
        assert_eq!(w.on_connection(true), Verdict::Close { log: false }, "at most MAX_HELD are held");
    }

    #[test]
    fn arming_adds_every_uri_variable_unless_one_is_set() {
        let watch = Watch::open().unwrap();
        let mut env = vec![("PATH".to_string(), "/bin".to_string())];
        watch.arm(&mut env);
        for var in URI_VARS {
            let (_, uri) = env.iter().find(|(k, _)| k == var).unwrap_or_else(|| panic!("{var} missing"));
            assert!(uri.starts_with("dpm-watch.0;tcp4://127.0.0.1:"), "{uri}");
        }
        assert!(!env.iter().any(|(k, _)| k == "PMIX_NAMESPACE"), "a namespace beside PMI_SIZE makes MPICH refuse the job");
        let mut own = vec![("PMIX_SERVER_URI41".to_string(), "mine".to_string())];
        watch.arm(&mut own);
        assert_eq!(own.len(), 1, "a URI the user set is kept alone");
        disarm(&mut env);
        disarm(&mut own);
        assert_eq!(env, vec![("PATH".to_string(), "/bin".to_string())]);
        assert_eq!(own.len(), 1, "disarming keeps a URI the user set");
    }
}
