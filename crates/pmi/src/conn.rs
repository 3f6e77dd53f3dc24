//! One PMI connection as the engine sees it: whose it is, its decoder, the
//! reply it is owed, the error replies queued behind that reply (bounded by
//! [`MAX_QUEUED_REPLIES`]), the framing it speaks, and its warning budget.

use std::collections::HashMap;

use dpm_kvs::{JobId, Rank};

use crate::engine::{ConnId, PmiState};
use crate::limits::MAX_QUEUED_REPLIES;
use crate::sanitize::{escape, WarnLimiter};
use crate::wire::decode::Decoder;
use crate::wire::Version;

/// A reply the engine owes and will send later.
#[derive(Clone, Debug)]
pub(crate) struct Deferred {
    pub version: Version,
    pub request: String,
    /// For a get: the key, to say which one was not found.
    pub key: Option<String>,
}

/// An error reply to a request sent while another was pending: it goes out
/// after the reply it waits behind, never before.
#[derive(Debug)]
pub(crate) struct Queued {
    pub version: Version,
    pub request: String,
    pub message: String,
}

#[derive(Debug)]
pub(crate) struct Conn {
    pub job: JobId,
    /// Known from the start in `PMI_FD` mode; learnt from `initack`/`fullinit` in `PMI_PORT` mode.
    pub rank: Option<Rank>,
    /// Attached without a rank (`PMI_PORT` mode): nothing but `init`,
    /// `initack` and `fullinit` is served until it names a free rank.
    pub port: bool,
    pub decoder: Decoder,
    pub state: PmiState,
    /// A reply held back (fence, name service, spawn, waiting get).
    pub waiting: Option<Deferred>,
    /// The framing of the last good frame (`init` with `pmi_version=2`
    /// counts as PMI-2): undecodable input is answered in it.
    pub version: Option<Version>,
    queued: Vec<Queued>,
    /// Requests dropped unanswered because the queue was full.
    dropped: u64,
    warns: WarnLimiter,
}

impl Conn {
    pub fn new(job: JobId, rank: Option<Rank>) -> Self {
        Conn {
            job,
            rank,
            port: rank.is_none(),
            decoder: Decoder::new(),
            state: PmiState::Silent,
            waiting: None,
            version: None,
            queued: Vec::new(),
            dropped: 0,
            warns: WarnLimiter::default(),
        }
    }

    /// Log a warning about this connection's input, within its budget
    /// ([`WarnLimiter`]); `msg` is escaped whatever it quotes.
    pub fn warn(&mut self, conn: ConnId, msg: &str) {
        let (job, rank) = (self.job, self.rank.map(|r| r.0));
        match self.warns.allow() {
            Some(n) if n <= crate::limits::WARNINGS_LOGGED => tracing::warn!(%job, rank, conn = conn.0, "{}", escape(msg)),
            Some(n) => tracing::warn!(%job, rank, conn = conn.0, "{n} bad PMI requests so far on this connection; the latest: {}", escape(msg)),
            None => {}
        }
    }

    /// Hold an error reply until the pending reply went out; false (and
    /// counted) if [`MAX_QUEUED_REPLIES`] are already held.
    pub fn queue(&mut self, reply: Queued) -> bool {
        if self.queued.len() >= MAX_QUEUED_REPLIES {
            self.dropped += 1;
            return false;
        }
        self.queued.push(reply);
        true
    }

    pub fn take_queued(&mut self) -> Vec<Queued> {
        std::mem::take(&mut self.queued)
    }

    /// One closing line if warnings were held back or requests dropped.
    pub fn closing_summary(&self, conn: ConnId) {
        let suppressed = self.warns.suppressed();
        if suppressed > 0 || self.dropped > 0 {
            tracing::warn!(
                job = %self.job,
                rank = self.rank.map(|r| r.0),
                conn = conn.0,
                "PMI connection closed: {suppressed} more bad requests not logged, {} dropped unanswered behind a pending reply",
                self.dropped
            );
        }
    }
}

/// Why `conn` may not become `rank` of `job`, if it may not: a connection
/// never changes its rank, and a rank held by a live connection is not
/// handed to a second one (`PMI_PORT` mode lets anyone who can connect
/// claim any id).
pub(crate) fn bind_refusal(conns: &HashMap<ConnId, Conn>, conn: ConnId, job: JobId, current: Option<Rank>, rank: Rank) -> Option<String> {
    match current {
        Some(r) if r == rank => None,
        Some(r) => Some(format!("this connection is rank {}; it cannot become rank {}", r.0, rank.0)),
        None if conns.iter().any(|(&other, c)| other != conn && c.job == job && c.rank == Some(rank)) => Some(format!("rank {} is already connected", rank.0)),
        None => None,
    }
}
