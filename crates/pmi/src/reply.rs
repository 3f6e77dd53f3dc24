//! Replies: what the engine answers, encoded in the framing of the request.
//!
//! Rules that MPICH's client enforces (see `pmi-wire.md` §2.1, §3.1, §7):
//! the reply name must be the exact one expected, values are never empty,
//! PMI-1 values cannot hold a bare space (the parser splits on it), PMI-2
//! values cannot hold `;`.
//!
//! A PMI-1 error text (`msg=`) holds no space at all, escaped or not:
//! MPICH's parser reads `\ ` as a space, but Intel MPI's rejects the line
//! (`PMIU_parse_keyvals: unexpected key delimiter`) and then takes the failed
//! lookup/publish/unpublish for a success. Intel's own Hydra writes
//! `msg=service_not_found`; dpm writes `_` for every run of white space,
//! which both parsers read.

use crate::wire::{Encoder, Version};

/// Limits announced by `get_maxes` (Hydra's values; MPICH sizes its buffers
/// and splits long values with them).
pub const KVSNAME_MAX: usize = 256;
pub const KEYLEN_MAX: usize = 64;
pub const VALLEN_MAX: usize = 1024;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Init {
        version: u32,
        subversion: u32,
    },
    /// PMI-1 `initack`: four lines, the rank and size repeated as `cmd=set`.
    InitAck {
        rank: u32,
        size: u32,
        appnum: i64,
        spawner: Option<String>,
    },
    FullInit {
        rank: u32,
        size: u32,
        appnum: i64,
        spawner: Option<String>,
    },
    Maxes,
    Appnum(i64),
    Kvsname(String),
    UniverseSize(i64),
    /// Success with nothing to say (put, putnodeattr, publish, unpublish, spawn, finalize).
    Ok,
    /// A found value (get, getjobattr, getnodeattr, lookup).
    Value(String),
    /// A jobattr or nodeattr that does not exist (`rc=0;found=FALSE;` in PMI-2).
    Absent,
    BarrierOut,
    /// The ring exchange's answer: the caller's ring rank, the ring's size,
    /// its neighbours' values.
    Ring {
        rank: u32,
        size: u32,
        left: String,
        right: String,
    },
    /// A spawn started; the new job's id (PMI-2 clients such as Slurm's
    /// read it) and, after a partial `soft` start, each process's code.
    Spawned(Spawned),
    Error(String),
}

/// A started spawn, as the launcher answers it (see [`Reply::Spawned`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spawned {
    /// The new job's id (its kvsname).
    pub jobid: String,
    /// Empty when every requested process started; else one code per
    /// requested process, 0 for the started ones.
    pub errcodes: Vec<i32>,
}

impl From<&str> for Spawned {
    /// Every requested process started.
    fn from(jobid: &str) -> Self {
        Spawned { jobid: jobid.to_string(), errcodes: Vec::new() }
    }
}

/// The reply's command name for a request named `request` (as on the wire).
fn reply_name(version: Version, request: &str) -> String {
    match version {
        Version::V2 if request == "init" => "response_to_init".into(),
        Version::V2 => format!("{request}-response"),
        Version::V1 => match request {
            "init" => "response_to_init",
            "initack" => "initack",
            "get_maxes" => "maxes",
            "get_appnum" => "appnum",
            "get_my_kvsname" => "my_kvsname",
            "get_universe_size" => "universe_size",
            "put" => "put_result",
            "get" => "get_result",
            "barrier_in" => "barrier_out",
            "finalize" => "finalize_ack",
            "publish_name" => "publish_result",
            "unpublish_name" => "unpublish_result",
            "lookup_name" => "lookup_result",
            "spawn" => "spawn_result",
            _ => "error",
        }
        .into(),
    }
}

/// Make a free text safe as a value in the given framing (never empty).
fn safe_text(version: Version, text: &str) -> String {
    let text = match version {
        Version::V1 => {
            let words = text.split(|c: char| c.is_whitespace() || c.is_control()).filter(|w| !w.is_empty());
            words.collect::<Vec<_>>().join("_").replace('\\', "/")
        }
        Version::V2 => text.replace(';', ","),
    };
    if text.is_empty() {
        "error".into()
    } else {
        text
    }
}

/// Whether `value` fits in a reply of this framing unchanged.
fn carries(version: Version, value: &str) -> bool {
    match version {
        Version::V1 => !value.contains(['\n', '\r', ' ']),
        Version::V2 => !value.contains(';'),
    }
}

/// Encode `reply` to a request named `request` that arrived in `version` framing.
pub fn encode(version: Version, request: &str, reply: &Reply) -> Vec<u8> {
    // `init` always uses PMI-1 framing, whatever version it negotiates.
    let framing = if request == "init" { Version::V1 } else { version };
    let e = Encoder::new(framing, &reply_name(framing, request));
    let v1 = framing == Version::V1;
    match reply {
        Reply::Init { version, subversion } => e.attr("rc", 0).attr("pmi_version", version).attr("pmi_subversion", subversion).finish(),
        Reply::InitAck { rank, size, appnum, spawner } => {
            let mut e = e.attr("rc", 0).attr("rank", rank).attr("size", size).attr("appnum", appnum);
            if let Some(s) = spawner {
                e = e.attr("spawner-jobid", s);
            }
            let mut out = e.attr("debug", 0).finish();
            for (k, v) in [("size", *size), ("rank", *rank), ("debug", 0)] {
                out.extend(Encoder::new(Version::V1, "set").attr(k, v).finish());
            }
            out
        }
        Reply::FullInit { rank, size, appnum, spawner } => {
            // MPICH ignores the version keys; Slurm's libpmi2 requires them.
            let mut e = e.attr("rc", 0).attr("pmi-version", 2).attr("pmi-subversion", 0);
            e = e.attr("rank", rank).attr("size", size).attr("appnum", appnum);
            if let Some(s) = spawner {
                e = e.attr("spawner-jobid", s);
            }
            // `pmiverbose` is left out on purpose: MPICH 5 reads it as an int
            // with default 0, Slurm's and older MPICH-derived clients as a
            // TRUE/FALSE bool that fails on `0`. Absent suits both.
            e.finish()
        }
        Reply::Maxes => e.attr("rc", 0).attr("kvsname_max", KVSNAME_MAX).attr("keylen_max", KEYLEN_MAX).attr("vallen_max", VALLEN_MAX).finish(),
        Reply::Appnum(n) => e.attr("rc", 0).attr("appnum", n).finish(),
        Reply::Kvsname(name) if v1 => e.attr("rc", 0).attr("kvsname", name).finish(),
        Reply::Kvsname(name) => e.attr("rc", 0).attr("jobid", name).finish(),
        Reply::UniverseSize(n) => e.attr("rc", 0).attr("size", n).finish(),
        Reply::Ok => e.attr("rc", 0).finish(),
        // A value put in the other framing may hold what this one cannot
        // carry (a PMI-2 value with a newline read over PMI-1, a PMI-1 value
        // with `;` over PMI-2): refused rather than sent as a broken reply.
        Reply::Value(value) if !carries(framing, value) => {
            let msg = format!("the value holds a character PMI-{} cannot carry", if v1 { 1 } else { 2 });
            let key = if v1 { "msg" } else { "errmsg" };
            e.attr("rc", 1).attr(key, safe_text(framing, &msg)).finish()
        }
        // A name lookup answers `port` (what MPICH reads); PMI-2 also gets
        // `value`, which Slurm's libpmi2 reads instead.
        Reply::Value(value) if request.contains("lookup") => {
            let e = e.attr("rc", 0).attr("port", value);
            if v1 {
                e.finish()
            } else {
                e.attr("value", value).finish()
            }
        }
        Reply::Value(value) if v1 => e.attr("rc", 0).attr("value", value).finish(),
        Reply::Value(value) => e.attr("rc", 0).attr("found", "TRUE").attr("value", value).finish(),
        Reply::Absent if v1 => e.attr("rc", 1).attr("msg", safe_text(Version::V1, "not found")).finish(),
        Reply::Absent => e.attr("rc", 0).attr("found", "FALSE").finish(),
        Reply::BarrierOut => e.attr("rc", 0).finish(),
        // Slurm's PMIX_Ring reads the ring rank from `ring-count` (and the
        // size from its job size); dpm's library reads `ring-rank`/`ring-size`.
        Reply::Ring { rank, size, left, right } => {
            e.attr("rc", 0).attr("ring-count", rank).attr("ring-rank", rank).attr("ring-size", size).attr("ring-left", left).attr("ring-right", right).finish()
        }
        Reply::Spawned(s) => {
            let e = e.attr("rc", 0);
            let e = if v1 { e } else { e.attr("jobid", &s.jobid) };
            // MPICH's PMI-1 client reads `errcodes` (a comma list, one per
            // requested process) into MPI_Comm_spawn's array_of_errcodes;
            // without it, it takes every process as started.
            if s.errcodes.is_empty() {
                e.finish()
            } else {
                e.attr("errcodes", s.errcodes.iter().map(i32::to_string).collect::<Vec<_>>().join(",")).finish()
            }
        }
        Reply::Error(msg) => {
            let key = if v1 { "msg" } else { "errmsg" };
            e.attr("rc", 1).attr(key, safe_text(framing, msg)).finish()
        }
    }
}
