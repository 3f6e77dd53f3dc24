//! Requests: a decoded [`Frame`] turned into one typed [`Request`].
//!
//! PMI-1 and PMI-2 say the same things with different words (`put` vs
//! `kvs-put`, `barrier_in` vs `kvs-fence`, 1-based `argN` vs 0-based `argvN`);
//! both map onto one enum so the engine handles each operation once.

use crate::reply::VALLEN_MAX;
use crate::wire::{lookup, Frame, Version};

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
    Init { version: u32, subversion: u32 },
    /// PMI-1 `initack` (PMI_PORT + PMI_ID mode): the connection names its process.
    InitAck { pmiid: i64 },
    /// PMI-2 `fullinit`.
    FullInit { pmirank: Option<i64> },
    GetMaxes,
    GetAppnum,
    /// PMI-1 `get_my_kvsname`, PMI-2 `job-getid`.
    GetKvsname,
    GetUniverseSize,
    Put { kvsname: Option<String>, key: String, value: String, hint: Option<Hint> },
    /// `srcid`: the rank that put the key, a routing hint (PMI-2 only);
    /// `wait`: answer once the key exists (PMI extension `wait=TRUE`).
    Get { kvsname: Option<String>, key: String, srcid: Option<i64>, wait: bool },
    /// PMI-2 extension `ring` (Slurm's `PMIX_Ring`): this process's value.
    Ring { value: String },
    /// PMI-2 `info-getjobattr`.
    GetJobAttr { key: String },
    /// PMI-1 `barrier_in`, PMI-2 `kvs-fence`.
    Barrier,
    PutNodeAttr { key: String, value: String },
    GetNodeAttr { key: String, wait: bool },
    Publish { service: String, port: String },
    Unpublish { service: String },
    Lookup { service: String },
    Spawn(SpawnRequest),
    Finalize,
    Abort { code: i32, message: Option<String> },
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

fn need_int<T: std::str::FromStr>(frame: &Frame, key: &str) -> Result<T, RequestError> {
    need(frame, key)?
        .trim()
        .parse()
        .map_err(|_| RequestError { cmd: frame.name.clone(), reason: format!("attribute `{key}` is not a number") })
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
            (_, "init") => Request::Init {
                version: need_int(frame, "pmi_version")?,
                subversion: need_int(frame, "pmi_subversion")?,
            },
            (Version::V1, "initack") => Request::InitAck { pmiid: need_int(frame, "pmiid")? },
            (Version::V1, "get_maxes") => Request::GetMaxes,
            (Version::V1, "get_appnum") => Request::GetAppnum,
            (Version::V1, "get_my_kvsname") | (Version::V2, "job-getid") => Request::GetKvsname,
            (Version::V1, "get_universe_size") => Request::GetUniverseSize,
            (Version::V1, "put") => Request::Put {
                kvsname: frame.get("kvsname").map(str::to_string),
                key: text("key")?,
                value: text("value")?,
                hint: hint(frame)?,
            },
            (Version::V1, "get") => Request::Get {
                kvsname: frame.get("kvsname").map(str::to_string),
                key: text("key")?,
                srcid: opt_int(frame, "srcid"),
                wait: flag(frame, "wait"),
            },
            (Version::V1, "barrier_in") => Request::Barrier,
            (Version::V1, "finalize") | (Version::V2, "finalize") => Request::Finalize,
            (Version::V1, "abort") => Request::Abort {
                code: opt_int(frame, "exitcode").unwrap_or(1) as i32,
                message: frame.get("message").map(str::to_string),
            },
            (Version::V1, "publish_name") => Request::Publish { service: text("service")?, port: text("port")? },
            (Version::V1, "unpublish_name") => Request::Unpublish { service: text("service")? },
            (Version::V1, "lookup_name") => Request::Lookup { service: text("service")? },
            (Version::V1, "spawn") => Request::Spawn(parse_v1_spawn(frame)?),
            // MPICH sends `pmirank`; Slurm's libpmi2 sends `srcid` (from PMI_ID) in port mode.
            (Version::V2, "fullinit") => Request::FullInit { pmirank: opt_int(frame, "pmirank").or_else(|| opt_int(frame, "srcid")) },
            (Version::V2, "info-getjobattr") => Request::GetJobAttr { key: text("key")? },
            (Version::V2, "kvs-put") => Request::Put { kvsname: None, key: text("key")?, value: text("value")?, hint: hint(frame)? },
            (Version::V2, "kvs-get") => Request::Get {
                kvsname: frame.get("jobid").map(str::to_string),
                key: text("key")?,
                srcid: opt_int(frame, "srcid").filter(|&s| s >= 0),
                wait: flag(frame, "wait"),
            },
            (Version::V2, "kvs-fence") => Request::Barrier,
            (Version::V2, "ring") => ring(frame)?,
            (Version::V2, "info-putnodeattr") => Request::PutNodeAttr { key: text("key")?, value: text("value")? },
            (Version::V2, "info-getnodeattr") => Request::GetNodeAttr { key: text("key")?, wait: flag(frame, "wait") },
            (Version::V2, "name-publish") => Request::Publish { service: text("name")?, port: text("port")? },
            (Version::V2, "name-unpublish") => Request::Unpublish { service: text("name")? },
            (Version::V2, "name-lookup") => Request::Lookup { service: text("name")? },
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

/// PMI-1 `mcmd=spawn` segments: 1-based `argN`, preputs in the first segment only.
fn parse_v1_spawn(frame: &Frame) -> Result<SpawnRequest, RequestError> {
    let bad = |reason: String| RequestError { cmd: "spawn".into(), reason };
    let mut request = SpawnRequest::default();
    for (index, seg) in frame.segments.iter().enumerate() {
        let get = |key: &str| lookup(seg, key).ok_or_else(|| bad(format!("segment {}: missing `{key}`", index + 1)));
        let int = |key: &str| -> Result<usize, RequestError> {
            get(key)?.trim().parse().map_err(|_| bad(format!("segment {}: `{key}` is not a number", index + 1)))
        };
        let argc = int("argcnt")?;
        let args = (1..=argc).map(|i| get(&format!("arg{i}")).map(str::to_string)).collect::<Result<_, _>>()?;
        if let Some(n) = lookup(seg, "preput_num") {
            let n: usize = n.trim().parse().map_err(|_| bad("`preput_num` is not a number".into()))?;
            for i in 0..n {
                request.preput.push((get(&format!("preput_key_{i}"))?.to_string(), get(&format!("preput_val_{i}"))?.to_string()));
            }
        }
        let ninfo = lookup(seg, "info_num").map_or(Ok(0), |_| int("info_num"))?;
        let info = (0..ninfo)
            .map(|i| Ok((get(&format!("info_key_{i}"))?.to_string(), get(&format!("info_val_{i}"))?.to_string())))
            .collect::<Result<_, RequestError>>()?;
        request.commands.push(SpawnCommand {
            exe: get("execname")?.to_string(),
            args,
            maxprocs: int("nprocs")? as u32,
            info,
        });
    }
    if request.commands.is_empty() {
        return Err(bad("no commands".into()));
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
    let count = |attrs: &[(String, String)], key: &str| -> Result<usize, RequestError> {
        lookup(attrs, key).map_or(Ok(0), |v| v.trim().parse().map_err(|_| bad(format!("`{key}` is not a number"))))
    };
    let get = |attrs: &'_ [(String, String)], key: &str| -> Result<String, RequestError> {
        lookup(attrs, key).map(str::to_string).ok_or_else(|| bad(format!("missing `{key}`")))
    };
    for i in 0..count(header, "preputcount")? {
        request.preput.push((get(header, &format!("ppkey{i}"))?, get(header, &format!("ppval{i}"))?));
    }
    let mut starts: Vec<usize> = rest.iter().enumerate().filter(|(_, (k, _))| k == "subcmd").map(|(i, _)| i).collect();
    starts.push(rest.len());
    for w in starts.windows(2) {
        let block = &rest[w[0]..w[1]];
        let argc = count(block, "argc")?;
        let nprocs = count(block, "maxprocs")?;
        request.commands.push(SpawnCommand {
            exe: get(block, "subcmd")?,
            args: (0..argc).map(|i| get(block, &format!("argv{i}"))).collect::<Result<_, _>>()?,
            maxprocs: nprocs as u32,
            info: (0..count(block, "infokeycount")?)
                .map(|i| Ok((get(block, &format!("infokey{i}"))?, get(block, &format!("infoval{i}"))?)))
                .collect::<Result<_, RequestError>>()?,
        });
    }
    Ok(request)
}
