//! The node-side PMI protocol engine: bytes in, [`Effect`]s out, no sockets.
//!
//! A node daemon owns one [`Engine`]. It registers each job with ranks on this
//! node ([`JobSetup`]), attaches each rank's PMI connection, feeds the bytes it
//! reads, and carries out the effects: write a reply, send a fence or an
//! abort up to the launcher, ask for a name-service or spawn operation.
//! Answers that come back from the launcher re-enter through
//! [`Engine::fence_done`], [`Engine::name_done`], [`Engine::spawn_done`].
//!
//! What is answered here, without a round trip: init, maxes, appnum, kvsname,
//! universe size, `PMI_*` keys and job attributes, gets (from the node's cache
//! of the job's KVS), node attributes (with real `wait=TRUE` blocking),
//! finalize. A fence (PMI-1 `barrier_in`, PMI-2 `kvs-fence`) is counted here and
//! goes up once, with all local puts, when every local rank of the job has
//! entered it; the replies go out when the merged delta comes back.
//!
//! Every request gets exactly one reply, in order, except abort (none).
//! Malformed or unknown input gets an error reply and a warning, never a panic.

use std::collections::HashMap;

use dpm_kvs::{JobId, KeyValues, NodeAttrs, NodeKvs, Rank};

use crate::reply::{encode, Reply};
use crate::request::{Request, SpawnRequest};
use crate::wire::{trace_text, Decoder, Frame, Version};

/// A PMI connection, as numbered by the daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

/// How far a process got with PMI, which decides how its exit is judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PmiState {
    /// Never spoke PMI (a non-MPI program): any clean exit is fine.
    Silent,
    /// Initialised PMI and has not finalised: exiting now is a failure.
    Active,
    /// Sent finalize.
    Finalized,
}

/// Everything the engine needs to know about a job with ranks on this node.
#[derive(Clone, Debug)]
pub struct JobSetup {
    pub job: JobId,
    pub kvsname: String,
    pub size: u32,
    /// The ranks of the job that run on this node.
    pub local_ranks: Vec<Rank>,
    /// appnum of each rank of the job (index = rank).
    pub appnums: Vec<i64>,
    pub universe_size: i64,
    /// `PMI_process_mapping` for this job.
    pub process_mapping: String,
    /// kvsname of the job that spawned this one.
    pub spawner: Option<String>,
    /// Keys visible before any fence (spawn preputs).
    pub preput: KeyValues,
}

/// Name-service operations, answered by the launcher.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NameOp {
    Publish { service: String, port: String },
    Unpublish { service: String },
    Lookup { service: String },
}

/// What the daemon must do on the engine's behalf.
#[derive(Debug, PartialEq, Eq)]
pub enum Effect {
    /// Write these bytes to the connection.
    Send(ConnId, Vec<u8>),
    /// A `--pmi-trace` line: `C` for client→server, `S` for server→client.
    Trace { job: JobId, rank: Option<Rank>, dir: char, text: String },
    /// Every local rank of `job` entered fence `epoch`; here are their puts.
    FenceIn { job: JobId, epoch: u64, count: u32, puts: KeyValues },
    /// A rank asked for the job to be aborted.
    Abort { job: JobId, rank: Rank, code: i32, message: String },
    /// Answer with [`Engine::name_done`].
    Name { conn: ConnId, job: JobId, op: NameOp },
    /// Answer with [`Engine::spawn_done`].
    Spawn { conn: ConnId, job: JobId, rank: Rank, request: SpawnRequest },
}

/// A reply the engine owes and will send later.
#[derive(Clone, Debug)]
struct Deferred {
    version: Version,
    request: String,
}

#[derive(Debug)]
struct Conn {
    job: JobId,
    /// Known from the start in `PMI_FD` mode; learnt from `initack`/`fullinit` in `PMI_PORT` mode.
    rank: Option<Rank>,
    decoder: Decoder,
    state: PmiState,
    /// A reply held back (fence, name service, spawn, waiting get).
    waiting: Option<Deferred>,
}

#[derive(Debug)]
struct NodeJob {
    setup: JobSetup,
    kvs: NodeKvs,
    epoch: u64,
    in_fence: Vec<ConnId>,
    attrs: NodeAttrs<ConnId>,
}

/// See the module documentation.
#[derive(Default)]
pub struct Engine {
    trace: bool,
    conns: HashMap<ConnId, Conn>,
    jobs: HashMap<JobId, NodeJob>,
    effects: Vec<Effect>,
}

impl Engine {
    pub fn new(trace: bool) -> Self {
        Engine { trace, ..Default::default() }
    }

    pub fn add_job(&mut self, setup: JobSetup) {
        let kvs = NodeKvs::with_preput(&setup.preput);
        self.jobs.insert(setup.job, NodeJob { setup, kvs, epoch: 0, in_fence: Vec::new(), attrs: NodeAttrs::default() });
    }

    pub fn remove_job(&mut self, job: JobId) {
        self.jobs.remove(&job);
        self.conns.retain(|_, c| c.job != job);
    }

    /// A new PMI connection of `job`; `rank` is `None` until the client names itself.
    pub fn attach(&mut self, conn: ConnId, job: JobId, rank: Option<Rank>) {
        self.conns.insert(conn, Conn { job, rank, decoder: Decoder::new(), state: PmiState::Silent, waiting: None });
    }

    /// The connection closed; returns how far its process got with PMI.
    pub fn detach(&mut self, conn: ConnId) -> PmiState {
        let Some(c) = self.conns.remove(&conn) else { return PmiState::Silent };
        if let Some(job) = self.jobs.get_mut(&c.job) {
            job.in_fence.retain(|&x| x != conn);
            job.attrs.cancel(|&w| w == conn);
        }
        c.state
    }

    /// The rank a connection belongs to, once known.
    pub fn rank(&self, conn: ConnId) -> Option<Rank> {
        self.conns.get(&conn).and_then(|c| c.rank)
    }

    pub fn pmi_state(&self, conn: ConnId) -> PmiState {
        self.conns.get(&conn).map_or(PmiState::Silent, |c| c.state)
    }

    /// The effects produced since the last call.
    pub fn take_effects(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.effects)
    }

    /// Bytes read from a connection.
    pub fn on_bytes(&mut self, conn: ConnId, data: &[u8]) {
        let Some(c) = self.conns.get_mut(&conn) else {
            tracing::warn!(?conn, "PMI bytes on an unknown connection dropped");
            return;
        };
        c.decoder.feed(data);
        loop {
            let Some(c) = self.conns.get_mut(&conn) else { return };
            match c.decoder.next_frame() {
                Ok(Some(frame)) => self.on_frame(conn, frame),
                Ok(None) => return,
                Err(err) => {
                    let (job, rank) = (c.job, c.rank);
                    tracing::warn!(%job, rank = rank.map(|r| r.0), "bad PMI input: {err}");
                    // Answer in PMI-1 form: a client whose framing we could not
                    // read at all is most likely speaking PMI-1 lines.
                    let version = if matches!(err, crate::wire::WireError::BadMessage(_)) { Version::V2 } else { Version::V1 };
                    self.send(conn, version, "error", &Reply::Error(err.to_string()));
                }
            }
        }
    }

    fn on_frame(&mut self, conn: ConnId, frame: Frame) {
        let Some(c) = self.conns.get(&conn) else { return };
        if self.trace {
            let text = trace_frame(&frame);
            self.effects.push(Effect::Trace { job: c.job, rank: c.rank, dir: 'C', text });
        }
        let version = frame.version;
        let name = frame.name.clone();
        match Request::parse(&frame) {
            Ok(request) => self.on_request(conn, version, &name, request),
            Err(err) => {
                tracing::warn!(job = %c.job, rank = c.rank.map(|r| r.0), "bad PMI request: {err}");
                self.send(conn, version, &name, &Reply::Error(err.to_string()));
            }
        }
    }

    fn on_request(&mut self, conn: ConnId, version: Version, name: &str, request: Request) {
        let c = self.conns.get_mut(&conn).expect("caller checked");
        if c.waiting.is_some() {
            // One outstanding request per process is the protocol; a second one
            // while the first waits is a client bug, answered rather than queued.
            let msg = format!("'{name}' sent while an earlier request is still pending");
            tracing::warn!(job = %c.job, rank = c.rank.map(|r| r.0), "{msg}");
            return self.send(conn, version, name, &Reply::Error(msg));
        }
        if !matches!(request, Request::Unknown | Request::Unsupported) && c.state == PmiState::Silent {
            c.state = PmiState::Active;
        }
        let job_id = c.job;
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return self.send(conn, version, name, &Reply::Error(format!("{job_id} is gone")));
        };
        let setup = &job.setup;
        let reply = match request {
            Request::Init { version: v, subversion } => match v {
                1 => Reply::Init { version: 1, subversion: subversion.min(1) },
                2 => Reply::Init { version: 2, subversion: 0 },
                _ => Reply::Error(format!("PMI version {v}.{subversion} is not supported; use 1.1 or 2.0")),
            },
            Request::InitAck { pmiid } => {
                match u32::try_from(pmiid).ok().filter(|&r| r < setup.size && setup.local_ranks.contains(&Rank(r))) {
                    Some(r) => {
                        c.rank = Some(Rank(r));
                        Reply::InitAck {
                            rank: r,
                            size: setup.size,
                            appnum: setup.appnums[r as usize],
                            spawner: setup.spawner.clone(),
                        }
                    }
                    None => Reply::Error(format!("pmiid {pmiid} is not a rank of this job on this node")),
                }
            }
            Request::FullInit { pmirank } => {
                if c.rank.is_none() {
                    c.rank = pmirank
                        .and_then(|r| u32::try_from(r).ok())
                        .map(Rank)
                        .filter(|r| setup.local_ranks.contains(r));
                }
                match c.rank {
                    Some(Rank(r)) => Reply::FullInit {
                        rank: r,
                        size: setup.size,
                        appnum: setup.appnums[r as usize],
                        spawner: setup.spawner.clone(),
                    },
                    None => Reply::Error(format!("pmirank {pmirank:?} is not a rank of this job on this node")),
                }
            }
            Request::GetMaxes => Reply::Maxes,
            Request::GetAppnum => match c.rank {
                Some(r) => Reply::Appnum(setup.appnums[r.0 as usize]),
                None => Reply::Error("rank unknown: send initack first".into()),
            },
            Request::GetKvsname => Reply::Kvsname(setup.kvsname.clone()),
            Request::GetUniverseSize => Reply::UniverseSize(setup.universe_size),
            Request::Put { kvsname, key, value, hint: _ } => {
                if let Some(bad) = kvsname.filter(|k| *k != setup.kvsname) {
                    Reply::Error(format!("put to kvsname '{bad}', but this process belongs to '{}'", setup.kvsname))
                } else if key.starts_with("PMI_") {
                    Reply::Error(format!("key '{key}': keys with the PMI_ prefix are reserved"))
                } else {
                    job.kvs.put(key, value);
                    Reply::Ok
                }
            }
            Request::Get { kvsname, key, srcid: _, wait: _ } => {
                if let Some(bad) = kvsname.filter(|k| *k != setup.kvsname) {
                    Reply::Error(format!("get from kvsname '{bad}', but this process belongs to '{}'", setup.kvsname))
                } else if let Some(value) = pm_key(setup, &key) {
                    Reply::Value(value)
                } else if key.starts_with("PMI_") {
                    Reply::Error(format!("key '{key}' is not provided"))
                } else {
                    match job.kvs.get(&key) {
                        Some(v) if !v.is_empty() => Reply::Value(v.to_string()),
                        _ => Reply::Error(format!("key '{key}' not found")),
                    }
                }
            }
            Request::GetJobAttr { key } => match pm_key(setup, &key).or_else(|| job.kvs.get(&key).map(str::to_string)) {
                Some(v) if !v.is_empty() => Reply::Value(v),
                _ => Reply::Absent,
            },
            Request::Barrier => {
                if job.in_fence.contains(&conn) {
                    Reply::Error("already waiting in this fence".into())
                } else {
                    c.waiting = Some(Deferred { version, request: name.to_string() });
                    job.in_fence.push(conn);
                    if job.in_fence.len() == job.setup.local_ranks.len() {
                        self.effects.push(Effect::FenceIn {
                            job: job_id,
                            epoch: job.epoch,
                            count: job.in_fence.len() as u32,
                            puts: job.kvs.take_batch(),
                        });
                    }
                    return;
                }
            }
            Request::PutNodeAttr { key, value } => {
                if key.starts_with("PMI_") {
                    Reply::Error(format!("key '{key}': keys with the PMI_ prefix are reserved"))
                } else {
                    let woken = job.attrs.put(key, value.clone());
                    self.send(conn, version, name, &Reply::Ok);
                    for w in woken {
                        self.finish_deferred(w, &Reply::Value(value.clone()));
                    }
                    return;
                }
            }
            Request::GetNodeAttr { key, wait } => match job.attrs.get(&key) {
                Some(v) => Reply::Value(v.to_string()),
                None if wait => {
                    c.waiting = Some(Deferred { version, request: name.to_string() });
                    job.attrs.wait(key, conn);
                    return;
                }
                None => Reply::Absent,
            },
            Request::Publish { service, port } => return self.defer_name(conn, version, name, NameOp::Publish { service, port }),
            Request::Unpublish { service } => return self.defer_name(conn, version, name, NameOp::Unpublish { service }),
            Request::Lookup { service } => return self.defer_name(conn, version, name, NameOp::Lookup { service }),
            Request::Spawn(request) => match c.rank {
                Some(rank) => {
                    c.waiting = Some(Deferred { version, request: name.to_string() });
                    self.effects.push(Effect::Spawn { conn, job: job_id, rank, request });
                    return;
                }
                None => Reply::Error("rank unknown: initialise first".into()),
            },
            Request::Finalize => {
                c.state = PmiState::Finalized;
                Reply::Ok
            }
            Request::Abort { code, message } => {
                let rank = c.rank.unwrap_or(Rank(0));
                let message = message.unwrap_or_default();
                self.effects.push(Effect::Abort { job: job_id, rank, code, message });
                return; // no reply: the client exits
            }
            Request::Unsupported => {
                tracing::warn!(job = %job_id, rank = c.rank.map(|r| r.0), "PMI command '{name}' is not supported");
                Reply::Error(format!("'{name}' is not supported by dpm"))
            }
            Request::Unknown => {
                tracing::warn!(job = %job_id, rank = c.rank.map(|r| r.0), "unknown PMI command '{name}'");
                Reply::Error(format!("unknown command '{name}'"))
            }
        };
        self.send(conn, version, name, &reply);
    }

    fn defer_name(&mut self, conn: ConnId, version: Version, name: &str, op: NameOp) {
        let c = self.conns.get_mut(&conn).expect("caller checked");
        c.waiting = Some(Deferred { version, request: name.to_string() });
        self.effects.push(Effect::Name { conn, job: c.job, op });
    }

    /// The launcher completed fence `epoch` of `job` with this merged delta.
    pub fn fence_done(&mut self, job_id: JobId, epoch: u64, delta: &[(String, String)]) {
        let Some(job) = self.jobs.get_mut(&job_id) else { return };
        if epoch != job.epoch {
            tracing::warn!(%job_id, epoch, expected = job.epoch, "fence completion for the wrong epoch ignored");
            return;
        }
        job.kvs.apply(delta);
        job.epoch += 1;
        for conn in std::mem::take(&mut job.in_fence) {
            self.finish_deferred(conn, &Reply::BarrierOut);
        }
    }

    /// The launcher's answer to an [`Effect::Name`]: `Ok(Some(port))` for a lookup.
    pub fn name_done(&mut self, conn: ConnId, result: Result<Option<String>, String>) {
        let reply = match result {
            Ok(Some(port)) => Reply::Value(port),
            Ok(None) => Reply::Ok,
            Err(msg) => Reply::Error(msg),
        };
        self.finish_deferred(conn, &reply);
    }

    /// The launcher's answer to an [`Effect::Spawn`].
    /// `Ok(jobid)`: the new job's kvsname.
    pub fn spawn_done(&mut self, conn: ConnId, result: Result<String, String>) {
        let reply = result.map_or_else(Reply::Error, Reply::Spawned);
        self.finish_deferred(conn, &reply);
    }

    fn finish_deferred(&mut self, conn: ConnId, reply: &Reply) {
        let Some(d) = self.conns.get_mut(&conn).and_then(|c| c.waiting.take()) else { return };
        self.send(conn, d.version, &d.request, reply);
    }

    fn send(&mut self, conn: ConnId, version: Version, request: &str, reply: &Reply) {
        let bytes = encode(version, request, reply);
        if self.trace {
            if let Some(c) = self.conns.get(&conn) {
                let text = trace_text(&bytes);
                self.effects.push(Effect::Trace { job: c.job, rank: c.rank, dir: 'S', text });
            }
        }
        self.effects.push(Effect::Send(conn, bytes));
    }
}

/// Keys the process manager answers itself.
fn pm_key(setup: &JobSetup, key: &str) -> Option<String> {
    match key {
        "PMI_process_mapping" => Some(setup.process_mapping.clone()),
        "universeSize" => Some(setup.universe_size.to_string()),
        _ => None,
    }
}

fn trace_frame(frame: &Frame) -> String {
    let sep = if frame.version == Version::V1 { " " } else { ";" };
    let mut text = format!("cmd={}", frame.name);
    if !frame.segments.is_empty() {
        text = "mcmd=spawn".into();
        for (i, seg) in frame.segments.iter().enumerate() {
            if i > 0 {
                text.push_str(" | mcmd=spawn");
            }
            for (k, v) in seg {
                text.push_str(&format!(" {k}={v}"));
            }
        }
        return text;
    }
    for (k, v) in &frame.attrs {
        text.push_str(sep);
        text.push_str(&format!("{k}={v}"));
    }
    text
}
