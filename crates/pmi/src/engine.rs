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
//! universe size, `PMI_*` keys and job attributes, gets of keys the node has
//! (its [`NodeStore`]: fenced keys, its own puts, copies it owns or fetched),
//! node attributes (with real `wait=TRUE` blocking), finalize. A get that
//! misses goes where the job's KVS design says ([`Effect::Kvs`]; the answer
//! comes back through [`Engine::kvs_msg`]); a waiting get (`wait=TRUE`) is
//! answered when its key is put.
//!
//! Collectives are counted here and go up once per node: a fence (PMI-1
//! `barrier_in`, PMI-2 `kvs-fence`) when every local rank of the job has
//! entered it and every put sent to an owner is acknowledged, with the puts
//! that ride it; the replies go out when it completes. A ring (`cmd=ring`)
//! goes up as one [`RingSegment`] of the node's ranks in rank order; the
//! node's [`RingSlot`] comes back ([`Engine::ring_out`]) and is split among them.
//!
//! Every request gets exactly one reply, in order, except abort (none).
//! Malformed or unknown input gets an error reply and a warning, never a panic.
//! A request sent while an earlier one is pending is answered with an error
//! that goes out after the pending reply ([`MAX_QUEUED_REPLIES`](crate::limits::MAX_QUEUED_REPLIES)
//! at most). Warnings are rate-limited per connection and every
//! client-supplied text in them, and in trace lines, is escaped
//! ([`crate::sanitize`]).
//!
//! A `PMI_PORT` connection (attached without a rank) is served nothing but
//! `init`, `initack` and `fullinit` until it names a rank of the job on this
//! node that no live connection holds; a connection never changes its rank.
//! (Who may connect at all is the daemon's check: the peer's uid.)

use std::collections::HashMap;

use dpm_kvs::remote::{KvsDest, KvsMsg};
use dpm_kvs::ring::{combine, RingSegment};
use dpm_kvs::store::Lookup;
use dpm_kvs::{JobId, KeyValues, KvsDesign, NodeAttrs, NodeId, NodeStore, Rank};

use crate::conn::{bind_refusal, Conn, Deferred, Queued};

mod claim;
mod dead;
mod deferred;
pub use claim::PARENT_PORT_KEY;
pub use dead::DEAD_KEY;
mod kvs;
mod topology;
use crate::reply::{encode, Reply};
use crate::request::{Request, SpawnRequest};
use crate::sanitize::quote;
use crate::wire::{trace_frame, trace_text, Frame, Version};
use kvs::EarlyKvs;
use topology::Topology;
pub use topology::TOPOLOGY_KEY;

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
    /// Where the job's puts live and how gets find them.
    pub kvs: KvsDesign,
    /// This node's index in the daemon tree.
    pub node: NodeId,
    /// The node of each rank of the job (index = rank; empty: all here).
    pub node_of: Vec<NodeId>,
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
    /// Close the connection once what was sent on it is written: its input
    /// cannot be read in step any more (a bad PMI-2 length header,
    /// [`WireError::is_fatal`](crate::wire::WireError::is_fatal)). The
    /// engine reads nothing more from it.
    Close(ConnId),
    /// A `--pmi-trace` line: `C` for client→server, `S` for server→client.
    Trace { job: JobId, rank: Option<Rank>, dir: char, text: String },
    /// Every local rank of `job` entered fence `epoch`; here are the puts
    /// that ride it.
    FenceIn { job: JobId, epoch: u64, count: u32, puts: KeyValues },
    /// Every local rank of `job` entered ring `seq`: the node's stretch of
    /// the ring. Answer with [`Engine::ring_out`].
    RingIn { job: JobId, seq: u64, segment: RingSegment },
    /// A message for another daemon's KVS (or up the tree); answers come
    /// back through [`Engine::kvs_msg`].
    Kvs { to: KvsDest, msg: KvsMsg },
    /// A rank asked for the job to be aborted.
    Abort { job: JobId, rank: Rank, code: i32, message: String },
    /// Answer with [`Engine::name_done`].
    Name { conn: ConnId, job: JobId, op: NameOp },
    /// Answer with [`Engine::spawn_done`].
    Spawn { conn: ConnId, job: JobId, rank: Rank, request: SpawnRequest },
    /// Export the node's topology: a rank asks for it ([`topology`]).
    /// Answer with [`Engine::set_topology_file`] or [`Engine::topology_unavailable`].
    ExportTopology,
    /// Local ranks of `job` (`waiting`) are in a fence that a dead rank can
    /// never join ([`Engine::ranks_dead`]); a rank may be reported again
    /// (at each death that comes while it waits).
    FenceDoomed { job: JobId, waiting: Vec<Rank> },
    /// Every local rank of `job`, started ahead of its spawn
    /// ([`Engine::await_claim`]), now waits for the claim: its start is done
    /// here (said once, when the last one parks; for a job claimed while
    /// still starting, when its last rank asks for [`PARENT_PORT_KEY`]).
    AwaitingClaim { job: JobId },
}

#[derive(Debug)]
struct NodeJob {
    setup: JobSetup,
    store: NodeStore<ConnId>,
    in_fence: Vec<ConnId>,
    /// This node's `FenceIn` for the current epoch went up.
    fence_sent: bool,
    /// The ring in progress: its number, and each local entrant (in arrival order).
    ring_seq: u64,
    in_ring: Vec<(Rank, ConnId, String)>,
    attrs: NodeAttrs<ConnId>,
    /// A warm-spawned job not yet claimed ([`Engine::await_claim`]): the
    /// connections whose get of a missing key is parked until the claim.
    /// At most one per connection (one request in flight each); they end
    /// with the claim ([`Engine::claim`]) or with the job.
    claim: Option<Vec<ConnId>>,
    /// Claimed while local ranks were still starting: how many of them have
    /// not asked for [`PARENT_PORT_KEY`] yet (the last one's ask says the
    /// job's start is done here, [`Effect::AwaitingClaim`]).
    late: usize,
    /// Ranks that died without finalizing while the others run on.
    dead: dead::Dead,
}

/// See the module documentation.
#[derive(Default)]
pub struct Engine {
    trace: bool,
    /// `PMI_hwloc_xmlfile`: the node's topology as hwloc XML ([`topology`]).
    topology: Topology,
    conns: HashMap<ConnId, Conn>,
    jobs: HashMap<JobId, NodeJob>,
    /// KVS messages that came before their job (see [`kvs`]).
    early: EarlyKvs,
    effects: Vec<Effect>,
}

impl Engine {
    pub fn new(trace: bool) -> Self {
        Engine { trace, ..Default::default() }
    }

    pub fn add_job(&mut self, setup: JobSetup) {
        let store = NodeStore::new(setup.job, setup.kvs, setup.node, setup.node_of.clone(), &setup.preput);
        let job = NodeJob {
            setup,
            store,
            in_fence: Vec::new(),
            fence_sent: false,
            ring_seq: 0,
            in_ring: Vec::new(),
            attrs: NodeAttrs::default(),
            claim: None,
            late: 0,
            dead: dead::Dead::default(),
        };
        let id = job.setup.job;
        self.jobs.insert(id, job);
        for msg in self.early.take(id) {
            self.kvs_msg(msg);
        }
    }

    pub fn remove_job(&mut self, job: JobId) {
        self.early.ended(job);
        if let Some(j) = self.jobs.remove(&job) {
            let s = j.store.stats();
            tracing::debug!(
                %job,
                design = %j.store.design(),
                local_hits = s.local_hits,
                remote_gets = s.remote_gets,
                coalesced = s.coalesced,
                owner_puts = s.owner_puts,
                served = s.served,
                "kvs stats"
            );
        }
        self.conns.retain(|_, c| c.job != job);
    }

    /// A new PMI connection of `job`; `rank` is `None` until the client names itself.
    pub fn attach(&mut self, conn: ConnId, job: JobId, rank: Option<Rank>) {
        self.conns.insert(conn, Conn::new(job, rank));
    }

    /// The connection closed; returns how far its process got with PMI.
    pub fn detach(&mut self, conn: ConnId) -> PmiState {
        let Some(c) = self.conns.remove(&conn) else { return PmiState::Silent };
        c.closing_summary(conn);
        if let Some(job) = self.jobs.get_mut(&c.job) {
            job.in_fence.retain(|&x| x != conn);
            job.in_ring.retain(|&(_, x, _)| x != conn);
            job.attrs.cancel(|&w| w == conn);
            job.store.cancel(|&w| w == conn);
            if let Some(parked) = &mut job.claim {
                parked.retain(|&w| w != conn);
            }
        }
        self.forget_topology_wait(conn);
        c.state
    }

    /// The rank a connection belongs to, once known.
    pub fn rank(&self, conn: ConnId) -> Option<Rank> {
        self.conns.get(&conn).and_then(|c| c.rank)
    }

    /// The request a connection waits for the answer to (a fence, a get
    /// that waits, a spawn, the name service), as the wire named it, with
    /// the key of a get.
    /// Whether the connection waits in a call (as [`Engine::waiting_in`], without its text).
    pub fn is_waiting(&self, conn: ConnId) -> bool {
        self.conns.get(&conn).is_some_and(|c| c.waiting.is_some())
    }

    pub fn waiting_in(&self, conn: ConnId) -> Option<String> {
        let waiting = self.conns.get(&conn)?.waiting.as_ref()?;
        Some(match &waiting.key {
            Some(key) => format!("{} key={}", waiting.request, crate::sanitize::escape(key)),
            None => waiting.request.clone(),
        })
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
                    c.warn(conn, &format!("bad PMI input: {err}"));
                    // Answer in the framing the input shows, else the one the
                    // connection spoke last; a client whose framing we never
                    // read is most likely speaking PMI-1 lines.
                    let version = err.version().or(c.version).unwrap_or(Version::V1);
                    self.answer(conn, version, err.request(), err.to_string());
                    if err.is_fatal() {
                        self.effects.push(Effect::Close(conn));
                        return;
                    }
                }
            }
        }
    }

    fn on_frame(&mut self, conn: ConnId, frame: Frame) {
        let Some(c) = self.conns.get_mut(&conn) else { return };
        c.version = Some(match (frame.version, frame.name.as_str(), frame.get("pmi_version")) {
            (Version::V1, "init", Some(v)) if v.trim() == "2" => Version::V2,
            (Version::V1, "init", _) => c.version.unwrap_or(Version::V1),
            (v, _, _) => v,
        });
        if self.trace {
            let text = trace_frame(&frame);
            self.effects.push(Effect::Trace { job: c.job, rank: c.rank, dir: 'C', text });
        }
        let version = frame.version;
        let name = frame.name.clone();
        match Request::parse(&frame) {
            Ok(request) => self.on_request(conn, version, &name, request),
            Err(err) => {
                c.warn(conn, &format!("bad PMI request: {err}"));
                self.answer(conn, version, &name, err.to_string());
            }
        }
    }

    fn on_request(&mut self, conn: ConnId, version: Version, name: &str, request: Request) {
        let c = self.conns.get_mut(&conn).expect("caller checked");
        if c.waiting.is_some() {
            // One outstanding request per process is the protocol; a second one
            // while the first waits is a client bug: refused, and the refusal
            // goes out after the reply it waits behind.
            let message = format!("'{}' sent while an earlier request is still pending", quote(name));
            c.warn(conn, &message);
            c.queue(Queued { version, request: name.to_string(), message });
            return;
        }
        if c.port && c.rank.is_none() && !matches!(request, Request::Init { .. } | Request::InitAck { .. } | Request::FullInit { .. }) {
            let message = format!("'{}' before initack: a PMI_PORT connection names its rank first", quote(name));
            c.warn(conn, &message);
            return self.answer(conn, version, name, message);
        }
        if let Some(refusal) = self.claim_refusal(conn, &request) {
            let c = self.conns.get_mut(&conn).expect("caller checked");
            c.warn(conn, &refusal);
            return self.answer(conn, version, name, refusal);
        }
        let c = self.conns.get_mut(&conn).expect("caller checked");
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
            Request::InitAck { pmiid } => match u32::try_from(pmiid).ok().filter(|&r| r < setup.size && setup.local_ranks.contains(&Rank(r))) {
                Some(r) => {
                    c.rank = Some(Rank(r));
                    Reply::InitAck { rank: r, size: setup.size, appnum: setup.appnums[r as usize], spawner: setup.spawner.clone() }
                }
                None => Reply::Error(format!("pmiid {pmiid} is not a rank of this job on this node")),
            },
            Request::FullInit { pmirank } => {
                if c.rank.is_none() {
                    c.rank = pmirank.and_then(|r| u32::try_from(r).ok()).map(Rank).filter(|r| setup.local_ranks.contains(r));
                }
                match c.rank {
                    Some(Rank(r)) => Reply::FullInit { rank: r, size: setup.size, appnum: setup.appnums[r as usize], spawner: setup.spawner.clone() },
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
            Request::Put { kvsname, key, value, hint } => {
                if let Some(bad) = kvsname.filter(|k| *k != setup.kvsname) {
                    Reply::Error(format!("put to kvsname '{bad}', but this process belongs to '{}'", setup.kvsname))
                } else if key.starts_with("PMI_") {
                    Reply::Error(format!("key '{key}': keys with the PMI_ prefix are reserved"))
                } else if let Err(full) = job.store.put(key, value, hint) {
                    Reply::Error(full.to_string())
                } else {
                    // Answer the putter first, then whoever waited for the key.
                    self.send(conn, version, name, &Reply::Ok);
                    return self.flush_store(job_id);
                }
            }
            Request::Get { kvsname, key, srcid, wait } => {
                if let Some(bad) = kvsname.filter(|k| *k != setup.kvsname) {
                    Reply::Error(format!("get from kvsname '{bad}', but this process belongs to '{}'", setup.kvsname))
                } else if key == TOPOLOGY_KEY && self.topology.must_wait() {
                    c.waiting = Some(Deferred { version, request: name.to_string(), key: Some(key) });
                    return self.topology.wait(conn, false, &mut self.effects);
                } else if key == DEAD_KEY && !job.dead.value().is_empty() {
                    // While none died: not found below (Hydra answers an
                    // empty value; replies here never carry one).
                    Reply::Value(job.dead.value())
                } else if let Some(value) = pm_key(setup, self.topology.file(), &key) {
                    Reply::Value(value)
                } else if key.starts_with("PMI_") {
                    Reply::Error(format!("key '{key}' is not provided"))
                } else {
                    // srcid is a hint: one that names no rank of the job is ignored.
                    let srcid = srcid.and_then(|s| u32::try_from(s).ok()).filter(|&s| s < setup.size);
                    match job.store.get(conn, &key, srcid, wait) {
                        Lookup::Found(v) if !v.is_empty() && job.late > 0 && key == PARENT_PORT_KEY => {
                            job.late -= 1;
                            if job.late == 0 {
                                self.effects.push(Effect::AwaitingClaim { job: job_id });
                            }
                            Reply::Value(v)
                        }
                        Lookup::Found(v) if !v.is_empty() => Reply::Value(v),
                        Lookup::Found(_) | Lookup::NotFound if job.claim.is_some() => {
                            c.waiting = Some(Deferred { version, request: name.to_string(), key: Some(key) });
                            job.claim.get_or_insert_with(Vec::new).push(conn);
                            return self.parked(job_id);
                        }
                        Lookup::Found(_) | Lookup::NotFound => Reply::Error(format!("key '{key}' not found")),
                        Lookup::Pending => {
                            c.waiting = Some(Deferred { version, request: name.to_string(), key: Some(key) });
                            return self.flush_store(job_id);
                        }
                    }
                }
            }
            Request::Ring { value } => match c.rank {
                Some(rank) => {
                    c.waiting = Some(Deferred { version, request: name.to_string(), key: None });
                    job.in_ring.push((rank, conn, value));
                    if job.in_ring.len() == job.setup.local_ranks.len() {
                        // The node's stretch of the ring: its ranks in rank order.
                        job.in_ring.sort_by_key(|&(r, _, _)| r);
                        let ones: Vec<RingSegment> = job.in_ring.iter().map(|(_, _, v)| RingSegment::one(v.as_str())).collect();
                        let segment = combine(&ones).expect("at least the caller");
                        self.effects.push(Effect::RingIn { job: job_id, seq: job.ring_seq, segment });
                    }
                    return;
                }
                None => Reply::Error("rank unknown: send fullinit first".into()),
            },
            Request::GetJobAttr { key } if key == TOPOLOGY_KEY && self.topology.must_wait() => {
                c.waiting = Some(Deferred { version, request: name.to_string(), key: Some(key) });
                return self.topology.wait(conn, true, &mut self.effects);
            }
            Request::GetJobAttr { key } if key == DEAD_KEY => match job.dead.value() {
                v if v.is_empty() => Reply::Absent,
                v => Reply::Value(v),
            },
            Request::GetJobAttr { key } => match pm_key(setup, self.topology.file(), &key).or_else(|| job.store.peek(&key)) {
                Some(v) if !v.is_empty() => Reply::Value(v),
                _ => Reply::Absent,
            },
            Request::Barrier => {
                if job.in_fence.contains(&conn) {
                    Reply::Error("already waiting in this fence".into())
                } else {
                    c.waiting = Some(Deferred { version, request: name.to_string(), key: None });
                    job.in_fence.push(conn);
                    self.check_doomed(job_id, Some(conn));
                    return self.maybe_enter_fence(job_id);
                }
            }
            Request::PutNodeAttr { key, value } => {
                if key.starts_with("PMI_") {
                    Reply::Error(format!("key '{key}': keys with the PMI_ prefix are reserved"))
                } else {
                    match job.attrs.put(key, value.clone()) {
                        Err(full) => Reply::Error(full.to_string()),
                        Ok(woken) => {
                            self.send(conn, version, name, &Reply::Ok);
                            for w in woken {
                                self.finish_deferred(w, &Reply::Value(value.clone()));
                            }
                            return;
                        }
                    }
                }
            }
            Request::GetNodeAttr { key, wait } => match job.attrs.get(&key) {
                Some(v) => Reply::Value(v.to_string()),
                None if wait => {
                    c.waiting = Some(Deferred { version, request: name.to_string(), key: None });
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
                    c.waiting = Some(Deferred { version, request: name.to_string(), key: None });
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
                let message = format!("'{}' is not supported by dpm", quote(name));
                c.warn(conn, &message);
                Reply::Error(message)
            }
            Request::Unknown => {
                let message = format!("unknown command '{}'", quote(name));
                c.warn(conn, &message);
                Reply::Error(message)
            }
        };
        self.send(conn, version, name, &reply);
    }

    /// Why an `initack`/`fullinit` may not bind its connection to the rank
    /// it names ([`bind_refusal`]), if it may not.
    fn claim_refusal(&self, conn: ConnId, request: &Request) -> Option<String> {
        let c = self.conns.get(&conn)?;
        let claim = match *request {
            Request::InitAck { pmiid } => pmiid,
            Request::FullInit { pmirank: Some(r) } if c.rank.is_none() => r,
            _ => return None,
        };
        bind_refusal(&self.conns, conn, c.job, c.rank, Rank(u32::try_from(claim).ok()?))
    }

    /// An error reply to a request.
    fn answer(&mut self, conn: ConnId, version: Version, request: &str, message: String) {
        self.send(conn, version, request, &Reply::Error(message));
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
fn pm_key(setup: &JobSetup, topology_file: Option<&str>, key: &str) -> Option<String> {
    match key {
        "PMI_process_mapping" => Some(setup.process_mapping.clone()),
        "PMI_hwloc_xmlfile" => topology_file.map(str::to_string),
        "universeSize" => Some(setup.universe_size.to_string()),
        _ => None,
    }
}
