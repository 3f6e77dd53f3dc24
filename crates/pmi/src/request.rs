//! Requests: a decoded [`Frame`] turned into one typed [`Request`].
//!
//! PMI-1 and PMI-2 say the same things with different words (`put` vs
//! `kvs-put`, `barrier_in` vs `kvs-fence`, 1-based `argN` vs 0-based `argvN`);
//! both map onto one enum so the engine handles each operation once.
//!
//! Bounds checked here, before anything is allocated for them: keys, values
//! and kvsnames within what `get_maxes` advertises ([`KEYLEN_MAX`],
//! [`VALLEN_MAX`], [`KVSNAME_MAX`]), put values and names non-empty; a spawn's
//! process count ([`MAX_SPAWN_PROCS`], no wrapping), argument count
//! ([`MAX_SPAWN_ARGS`]) and info/preput counts ([`MAX_SPAWN_PAIRS`]). A spawn
//! is read through a map of each segment's keys, so its cost is linear in
//! its size.

use std::collections::HashMap;

use crate::limits::{MAX_SPAWN_ARGS, MAX_SPAWN_PAIRS, MAX_SPAWN_PROCS};
use crate::reply::{KEYLEN_MAX, KVSNAME_MAX, VALLEN_MAX};
use crate::sanitize::quote;
use crate::wire::{Frame, Version};

/// How the client expects a put to be read back (PMI extension `hint=`).
pub use dpm_kvs::Hint;

/// One command of a (possibly multi-command) spawn request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpawnCommand {
    pub exe: String,
    pub args: Vec<String>,
    pub maxprocs: u32,
    pub info: Vec<(String, String)>,
}

/// `MPI_Comm_spawn[_multiple]` as the PM sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpawnRequest {
    pub commands: Vec<SpawnCommand>,
    /// Keys placed in the new job's KVS before any child can read it.
    pub preput: Vec<(String, String)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// `cmd=init` (both versions use PMI-1 framing for it).
    Init {
        version: u32,
        subversion: u32,
    },
    /// PMI-1 `initack` (PMI_PORT + PMI_ID mode): the connection names its process.
    InitAck {
        pmiid: i64,
    },
    /// PMI-2 `fullinit`.
    FullInit {
        pmirank: Option<i64>,
    },
    GetMaxes,
    GetAppnum,
    /// PMI-1 `get_my_kvsname`, PMI-2 `job-getid`.
    GetKvsname,
    GetUniverseSize,
    Put {
        kvsname: Option<String>,
        key: String,
        value: String,
        hint: Option<Hint>,
    },
    /// `srcid`: the rank that put the key, a routing hint (PMI-2 only);
    /// `wait`: answer once the key exists (PMI extension `wait=TRUE`).
    Get {
        kvsname: Option<String>,
        key: String,
        srcid: Option<i64>,
        wait: bool,
    },
    /// PMI-2 extension `ring` (Slurm's `PMIX_Ring`): this process's value.
    Ring {
        value: String,
    },
    /// PMI-2 `info-getjobattr`.
    GetJobAttr {
        key: String,
    },
    /// PMI-1 `barrier_in`, PMI-2 `kvs-fence`.
    Barrier,
    PutNodeAttr {
        key: String,
        value: String,
    },
    GetNodeAttr {
        key: String,
        wait: bool,
    },
    Publish {
        service: String,
        port: String,
    },
    Unpublish {
        service: String,
    },
    Lookup {
        service: String,
    },
    Spawn(SpawnRequest),
    Finalize,
    Abort {
        code: i32,
        message: Option<String>,
    },
    /// A command this server knows of but does not implement (PMI-2 job-connect…).
    Unsupported,
    /// Anything else.
    Unknown,
}

/// A request that could be framed but not understood.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{cmd}: {reason}")]
pub struct RequestError {
    pub cmd: String,
    pub reason: String,
}

fn need<'a>(frame: &'a Frame, key: &str) -> Result<&'a str, RequestError> {
    frame.get(key).ok_or_else(|| RequestError { cmd: frame.name.clone(), reason: format!("missing attribute `{key}`") })
}

/// A key, value or name that must be non-empty and at most `max` bytes.
fn word(frame: &Frame, key: &str, max: usize) -> Result<String, RequestError> {
    let v = need(frame, key)?;
    let bad = |reason: String| RequestError { cmd: frame.name.clone(), reason };
    if v.is_empty() {
        return Err(bad(format!("`{key}` is empty")));
    }
    if v.len() > max {
        return Err(bad(format!("`{key}` of {} bytes exceeds {max}", v.len())));
    }
    Ok(v.to_string())
}

/// An optional kvsname, at most [`KVSNAME_MAX`] bytes.
fn kvsname(frame: &Frame, key: &str) -> Result<Option<String>, RequestError> {
    match frame.get(key) {
        Some(_) => word(frame, key, KVSNAME_MAX).map(Some),
        None => Ok(None),
    }
}

fn need_int<T: std::str::FromStr>(frame: &Frame, key: &str) -> Result<T, RequestError> {
    need(frame, key)?.trim().parse().map_err(|_| RequestError { cmd: frame.name.clone(), reason: format!("attribute `{key}` is not a number") })
}

fn opt_int(frame: &Frame, key: &str) -> Option<i64> {
    frame.get(key).and_then(|v| v.trim().parse().ok())
}

fn flag(frame: &Frame, key: &str) -> bool {
    frame.get(key).is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// `hint=sparse|dense` on a put; absent means unknown, anything else is an error.
fn hint(frame: &Frame) -> Result<Option<Hint>, RequestError> {
    match frame.get("hint").map(str::to_ascii_lowercase).as_deref() {
        None => Ok(None),
        Some("sparse") => Ok(Some(Hint::Sparse)),
        Some("dense") => Ok(Some(Hint::Dense)),
        Some(other) => Err(RequestError { cmd: frame.name.clone(), reason: format!("hint '{other}' is not sparse or dense") }),
    }
}

/// `cmd=ring;ring-count=1;ring-left=V;ring-right=V;` — what Slurm's
/// `PMIX_Ring` sends: a process enters the ring as a stretch of one, whose
/// first and last value are its own.
fn ring(frame: &Frame) -> Result<Request, RequestError> {
    let bad = |reason: String| RequestError { cmd: frame.name.clone(), reason };
    let count: i64 = need_int(frame, "ring-count")?;
    if count != 1 {
        return Err(bad(format!("ring-count={count}: a process enters the ring with ring-count=1")));
    }
    let left = need(frame, "ring-left")?;
    let right = need(frame, "ring-right")?;
    if left != right {
        return Err(bad("ring-left and ring-right must both be the caller's value".into()));
    }
    if left.is_empty() {
        return Err(bad("the ring value is empty (replies never carry an empty value)".into()));
    }
    if left.len() > VALLEN_MAX {
        return Err(bad(format!("ring value of {} bytes exceeds {VALLEN_MAX}", left.len())));
    }
    Ok(Request::Ring { value: left.to_string() })
}

impl Request {
    pub fn parse(frame: &Frame) -> Result<Request, RequestError> {
        let text = |key: &str| need(frame, key).map(str::to_string);
        let req = match (frame.version, frame.name.as_str()) {
            (_, "init") => Request::Init { version: need_int(frame, "pmi_version")?, subversion: need_int(frame, "pmi_subversion")? },
            (Version::V1, "initack") => Request::InitAck { pmiid: need_int(frame, "pmiid")? },
            (Version::V1, "get_maxes") => Request::GetMaxes,
            (Version::V1, "get_appnum") => Request::GetAppnum,
            (Version::V1, "get_my_kvsname") | (Version::V2, "job-getid") => Request::GetKvsname,
            (Version::V1, "get_universe_size") => Request::GetUniverseSize,
            (Version::V1, "put") => Request::Put {
                kvsname: kvsname(frame, "kvsname")?,
                key: word(frame, "key", KEYLEN_MAX)?,
                value: word(frame, "value", VALLEN_MAX)?,
                hint: hint(frame)?,
            },
            (Version::V1, "get") => Request::Get {
                kvsname: kvsname(frame, "kvsname")?,
                key: word(frame, "key", KEYLEN_MAX)?,
                srcid: opt_int(frame, "srcid"),
                wait: flag(frame, "wait"),
            },
            (Version::V1, "barrier_in") => Request::Barrier,
            (Version::V1, "finalize") | (Version::V2, "finalize") => Request::Finalize,
            (Version::V1, "abort") => {
                Request::Abort { code: opt_int(frame, "exitcode").unwrap_or(1) as i32, message: frame.get("message").map(str::to_string) }
            }
            (Version::V1, "publish_name") => Request::Publish { service: word(frame, "service", VALLEN_MAX)?, port: word(frame, "port", VALLEN_MAX)? },
            (Version::V1, "unpublish_name") => Request::Unpublish { service: word(frame, "service", VALLEN_MAX)? },
            (Version::V1, "lookup_name") => Request::Lookup { service: word(frame, "service", VALLEN_MAX)? },
            (Version::V1, "spawn") => Request::Spawn(parse_v1_spawn(frame)?),
            // MPICH sends `pmirank`; Slurm's libpmi2 sends `srcid` (from PMI_ID) in port mode.
            (Version::V2, "fullinit") => Request::FullInit { pmirank: opt_int(frame, "pmirank").or_else(|| opt_int(frame, "srcid")) },
            (Version::V2, "info-getjobattr") => Request::GetJobAttr { key: text("key")? },
            (Version::V2, "kvs-put") => {
                Request::Put { kvsname: None, key: word(frame, "key", KEYLEN_MAX)?, value: word(frame, "value", VALLEN_MAX)?, hint: hint(frame)? }
            }
            (Version::V2, "kvs-get") => Request::Get {
                kvsname: kvsname(frame, "jobid")?,
                key: word(frame, "key", KEYLEN_MAX)?,
                srcid: opt_int(frame, "srcid").filter(|&s| s >= 0),
                wait: flag(frame, "wait"),
            },
            (Version::V2, "kvs-fence") => Request::Barrier,
            (Version::V2, "ring") => ring(frame)?,
            (Version::V2, "info-putnodeattr") => Request::PutNodeAttr { key: word(frame, "key", KEYLEN_MAX)?, value: word(frame, "value", VALLEN_MAX)? },
            (Version::V2, "info-getnodeattr") => Request::GetNodeAttr { key: word(frame, "key", KEYLEN_MAX)?, wait: flag(frame, "wait") },
            (Version::V2, "name-publish") => Request::Publish { service: word(frame, "name", VALLEN_MAX)?, port: word(frame, "port", VALLEN_MAX)? },
            (Version::V2, "name-unpublish") => Request::Unpublish { service: word(frame, "name", VALLEN_MAX)? },
            (Version::V2, "name-lookup") => Request::Lookup { service: word(frame, "name", VALLEN_MAX)? },
            (Version::V2, "spawn") => Request::Spawn(parse_v2_spawn(frame)?),
            // MPICH: `exitcode=-1;message=…`; Slurm's libpmi2: `isworld=…;msg=…`.
            (Version::V2, "abort") => Request::Abort {
                code: opt_int(frame, "exitcode").unwrap_or(1) as i32,
                message: frame.get("message").or_else(|| frame.get("msg")).map(str::to_string),
            },
            (Version::V2, "job-connect" | "job-disconnect") => Request::Unsupported,
            _ => Request::Unknown,
        };
        Ok(req)
    }
}

/// One spawn segment's (or PMI-2 command's) attributes by key, the first
/// occurrence winning as in [`lookup`]: reading N arguments costs N hash
/// lookups, not N scans (55 k arguments took 2.7 s that way).
struct Segment<'a> {
    map: HashMap<&'a str, &'a str>,
    /// "segment 2: " or "" — where an error is.
    at: String,
}

impl<'a> Segment<'a> {
    fn new(attrs: &'a [(String, String)], at: String) -> Self {
        let mut map = HashMap::with_capacity(attrs.len());
        for (k, v) in attrs {
            map.entry(k.as_str()).or_insert(v.as_str());
        }
        Segment { map, at }
    }

    fn bad(&self, reason: String) -> RequestError {
        RequestError { cmd: "spawn".into(), reason: format!("{}{reason}", self.at) }
    }

    fn get(&self, key: &str) -> Result<&'a str, RequestError> {
        self.map.get(key).copied().ok_or_else(|| self.bad(format!("missing `{key}`")))
    }

    /// A count no larger than `max` (`what` names the limit); absent is 0
    /// unless `required`.
    fn count(&self, key: &str, required: bool, max: usize, what: &str) -> Result<usize, RequestError> {
        let Some(v) = self.map.get(key) else {
            return if required { Err(self.bad(format!("missing `{key}`"))) } else { Ok(0) };
        };
        // u64 first: a count past usize (or u32) is refused, never wrapped.
        let n: u64 = v.trim().parse().map_err(|_| self.bad(format!("`{key}={}` is not a count", quote(v))))?;
        match usize::try_from(n) {
            Ok(n) if n <= max => Ok(n),
            _ => Err(self.bad(format!("`{key}={n}` exceeds the limit of {max} {what}"))),
        }
    }

    /// A name (program, info or preput key): a raw newline in one is no
    /// MPI library's doing, and would reach the launcher's log lines as is.
    fn name(&self, key: &str) -> Result<String, RequestError> {
        let v = self.get(key)?;
        if v.is_empty() || v.chars().any(char::is_control) {
            return Err(self.bad(format!("`{key}={}` is empty or holds control characters", quote(v))));
        }
        Ok(v.to_string())
    }

    /// `count` numbered pairs `{key}{i}`/`{val}{i}` (values may hold newlines:
    /// Open MPI's `env` info is `A=1\nB=2`).
    fn pairs(&self, count: usize, key: &str, val: &str) -> Result<Vec<(String, String)>, RequestError> {
        (0..count).map(|i| Ok((self.name(&format!("{key}{i}"))?, self.get(&format!("{val}{i}"))?.to_string()))).collect()
    }
}

/// Running totals over a spawn's commands, checked against the limits.
#[derive(Default)]
struct Totals {
    args: usize,
    procs: u32,
}

impl Totals {
    /// Read one command's process and argument counts within what is left.
    /// (Both are required in a PMI-1 segment, optional in a PMI-2 command.)
    fn take(&mut self, seg: &Segment, procs_key: &str, argc_key: &str, required: bool) -> Result<(u32, usize), RequestError> {
        let left = MAX_SPAWN_PROCS - self.procs;
        let procs = seg.count(procs_key, required, left as usize, "processes per spawn (MAX_SPAWN_PROCS)")? as u32;
        let argc = seg.count(argc_key, required, MAX_SPAWN_ARGS - self.args, "arguments per spawn (MAX_SPAWN_ARGS)")?;
        self.procs += procs;
        self.args += argc;
        Ok((procs, argc))
    }
}

/// PMI-1 `mcmd=spawn` segments: 1-based `argN`, preputs in the first segment only.
fn parse_v1_spawn(frame: &Frame) -> Result<SpawnRequest, RequestError> {
    let mut request = SpawnRequest::default();
    let mut totals = Totals::default();
    for (index, attrs) in frame.segments.iter().enumerate() {
        let seg = Segment::new(attrs, format!("segment {}: ", index + 1));
        let (maxprocs, argc) = totals.take(&seg, "nprocs", "argcnt", true)?;
        let args = (1..=argc).map(|i| seg.get(&format!("arg{i}")).map(str::to_string)).collect::<Result<_, _>>()?;
        let npre = seg.count("preput_num", false, MAX_SPAWN_PAIRS, "preput pairs (MAX_SPAWN_PAIRS)")?;
        request.preput.extend(seg.pairs(npre, "preput_key_", "preput_val_")?);
        let ninfo = seg.count("info_num", false, MAX_SPAWN_PAIRS, "info pairs (MAX_SPAWN_PAIRS)")?;
        let info = seg.pairs(ninfo, "info_key_", "info_val_")?;
        request.commands.push(SpawnCommand { exe: seg.name("execname")?, args, maxprocs, info });
    }
    if request.commands.is_empty() {
        return Err(RequestError { cmd: "spawn".into(), reason: "no commands".into() });
    }
    Ok(request)
}

/// PMI-2 `spawn`: one flat message; each command starts at `subcmd`, 0-based `argvN`.
fn parse_v2_spawn(frame: &Frame) -> Result<SpawnRequest, RequestError> {
    let bad = |reason: String| RequestError { cmd: "spawn".into(), reason };
    let mut request = SpawnRequest::default();
    // Attributes before the first `subcmd` are the header (ncmds, preputs).
    let first = frame.attrs.iter().position(|(k, _)| k == "subcmd").ok_or_else(|| bad("no `subcmd`".into()))?;
    let (header, rest) = frame.attrs.split_at(first);
    let header = Segment::new(header, String::new());
    let npre = header.count("preputcount", false, MAX_SPAWN_PAIRS, "preput pairs (MAX_SPAWN_PAIRS)")?;
    request.preput = header.pairs(npre, "ppkey", "ppval")?;
    let mut starts: Vec<usize> = rest.iter().enumerate().filter(|(_, (k, _))| k == "subcmd").map(|(i, _)| i).collect();
    starts.push(rest.len());
    let mut totals = Totals::default();
    for (index, w) in starts.windows(2).enumerate() {
        let seg = Segment::new(&rest[w[0]..w[1]], format!("command {}: ", index + 1));
        let (maxprocs, argc) = totals.take(&seg, "maxprocs", "argc", false)?;
        let ninfo = seg.count("infokeycount", false, MAX_SPAWN_PAIRS, "info pairs (MAX_SPAWN_PAIRS)")?;
        request.commands.push(SpawnCommand {
            exe: seg.name("subcmd")?,
            args: (0..argc).map(|i| seg.get(&format!("argv{i}")).map(str::to_string)).collect::<Result<_, _>>()?,
            maxprocs,
            info: seg.pairs(ninfo, "infokey", "infoval")?,
        });
    }
    Ok(request)
}
