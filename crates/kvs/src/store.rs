//! One job's keys on one node, under every KVS design: a pure state machine.
//!
//! [`NodeStore`] owns what a node daemon knows of a job's KVS:
//! - `fenced`: keys delivered by fences (allgather, and dense/unhinted keys
//!   under `Auto`) and the spawn preputs;
//! - a [`Holder`]: this node's own puts, and the copies it keeps as a key's
//!   owner (`Dkvs`, sparse keys under `Auto`), with the remote waiting gets
//!   queued until their key is put;
//! - `cache`: answers fetched from elsewhere, each with the last fence epoch
//!   it is known current in ([`Cached`]);
//! - the batch of puts that ride the next fence;
//! - local gets waiting for a remote answer (identical ones coalesced into
//!   one request) or for a local put or fence (parked).
//!
//! Inputs are the node's own operations (put, get, fence done) and
//! [`KvsMsg`]s from other daemons; outputs are [`Action`]s: answer a local
//! waiter, or send a message to another daemon (or up the tree).
//!
//! Consistency (paper 004 §3.4): the node counts completed fences (its
//! epoch); a copy is used only while current (`valid_through >= epoch`), so a
//! get after a later fence asks again and a later put of the same key wins.
//! Holders answer at once, from whatever they have: every put made before a
//! fence is at its holder by the time that fence completes (owner puts are
//! acknowledged before the node enters the fence; the source node and the
//! launcher have theirs), so a miss there means the key does not exist.

use crate::design::{owner, Hint, KvsDesign};
use crate::fnv::{FnvMap, FnvSet};
use crate::limits::MAX_NODE_KEYS;
use crate::remote::{GetReply, GetRequest, KvsDest, KvsMsg, OwnerPut};
use crate::{Full, JobId, KeyValues, NodeId};

/// A value this node holds for others.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    pub value: String,
    /// Fence epoch of the put.
    pub epoch: u64,
    /// Put by a rank of this node (else: sent here as the key's owner).
    pub local: bool,
}

/// Values held for others, and the waiting gets queued until their key comes.
/// Used by node daemons (own puts, owner copies) and by the launcher (every
/// put that rode a fence up, under `Tree` and `Direct`).
#[derive(Debug, Default)]
pub struct Holder {
    values: FnvMap<String, Held>,
    queued: FnvMap<String, Vec<GetRequest>>,
}

impl Holder {
    /// Store a put (a later epoch wins; within one epoch, the last to arrive)
    /// and answer the gets that waited for it, as (origin node, reply).
    pub fn insert(&mut self, key: String, value: String, epoch: u64, local: bool) -> Vec<(NodeId, KvsMsg)> {
        let woken = self.queued.remove(&key).unwrap_or_default();
        let value = match self.values.get_mut(&key) {
            Some(old) if old.epoch > epoch => old.value.clone(),
            Some(old) => {
                *old = Held { value: value.clone(), epoch, local };
                value
            }
            None => {
                self.values.insert(key, Held { value: value.clone(), epoch, local });
                value
            }
        };
        woken.into_iter().map(|r| (r.origin, reply_to(&r, Some(value.clone())))).collect()
    }

    pub fn get(&self, key: &str) -> Option<&Held> {
        self.values.get(key)
    }

    /// A put seen passing by, not kept: answer the gets that waited for it.
    pub fn wake(&mut self, key: &str, value: &str) -> Vec<(NodeId, KvsMsg)> {
        let woken = self.queued.remove(key).unwrap_or_default();
        woken.into_iter().map(|r| (r.origin, reply_to(&r, Some(value.to_string())))).collect()
    }

    /// A get from elsewhere: the answer now, or `None` if it waits (queued).
    pub fn request(&mut self, req: GetRequest) -> Option<(NodeId, KvsMsg)> {
        match self.values.get(&req.key) {
            Some(h) => Some((req.origin, reply_to(&req, Some(h.value.clone())))),
            None if req.wait => {
                self.queued.entry(req.key.clone()).or_default().push(req);
                None
            }
            None => Some((req.origin, reply_to(&req, None))),
        }
    }

    /// Waiting gets queued here.
    pub fn queued(&self) -> usize {
        self.queued.values().map(Vec::len).sum()
    }
}

fn reply_to(req: &GetRequest, value: Option<String>) -> KvsMsg {
    KvsMsg::Reply(GetReply { job: req.job, key: req.key.clone(), id: req.id, value, valid_through: req.epoch })
}

/// A copy of a value fetched from (or passing through from) its holder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cached {
    pub value: String,
    /// The last fence epoch in which it is known current.
    pub valid_through: u64,
}

impl Cached {
    pub fn fresh(&self, epoch: u64) -> bool {
        self.valid_through >= epoch
    }
}

/// The outcome of a local get.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    Found(String),
    NotFound,
    /// Answered later by an [`Action::Answer`].
    Pending,
}

/// What the node daemon must do for the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action<W> {
    /// Answer a local get that was [`Lookup::Pending`]: the value, or not found.
    Answer(W, Option<String>),
    Send(KvsDest, KvsMsg),
}

/// Counters for `-v` logs and tests: how gets were served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KvsStats {
    /// Local gets answered from this node's state.
    pub local_hits: u64,
    /// Requests sent to other daemons.
    pub remote_gets: u64,
    /// Local gets that joined an identical outstanding request.
    pub coalesced: u64,
    /// Puts sent to their owner.
    pub owner_puts: u64,
    /// Requests from other daemons answered or queued here.
    pub served: u64,
}

/// The coalescing key of an outstanding request: identical gets (same key,
/// waiting or not, same fence epoch, same destination) share one request.
type Coalesce = (String, bool, u64, KvsDest);

#[derive(Debug)]
struct Outstanding<W> {
    key: Coalesce,
    waiters: Vec<W>,
}

/// See the module documentation. `W` names a local waiter (a connection).
#[derive(Debug)]
pub struct NodeStore<W> {
    job: JobId,
    design: KvsDesign,
    me: NodeId,
    /// The node of each rank (for `srcid`).
    node_of: Vec<NodeId>,
    /// The job's nodes, sorted (for the owner hash).
    nodes: Vec<NodeId>,
    epoch: u64,
    fenced: FnvMap<String, String>,
    holder: Holder,
    cache: FnvMap<String, Cached>,
    batch: KeyValues,
    /// Where each key of `batch` is, so a repeated put replaces its value.
    batch_index: FnvMap<String, usize>,
    /// Distinct keys put by this node's ranks (bounded by `MAX_NODE_KEYS`).
    own_keys: usize,
    unacked: FnvSet<u64>,
    parked: FnvMap<String, Vec<W>>,
    outstanding: FnvMap<u64, Outstanding<W>>,
    coalesce: FnvMap<Coalesce, u64>,
    next_id: u64,
    actions: Vec<Action<W>>,
    stats: KvsStats,
}

/// Where a get that missed locally goes.
enum Route {
    NotFound,
    To(KvsDest),
}

impl<W: Clone> NodeStore<W> {
    /// A store for `job` on node `me`; `node_of[r]` is rank r's node (empty:
    /// every rank is here). `preput` keys are visible at once (spawn's
    /// `PARENT_ROOT_PORT_NAME` must be readable before any fence).
    pub fn new(job: JobId, design: KvsDesign, me: NodeId, node_of: Vec<NodeId>, preput: &[(String, String)]) -> Self {
        let mut nodes: Vec<NodeId> = node_of.clone();
        nodes.push(me);
        nodes.sort_unstable();
        nodes.dedup();
        NodeStore {
            job,
            design,
            me,
            node_of,
            nodes,
            epoch: 0,
            fenced: preput.iter().cloned().collect(),
            holder: Holder::default(),
            cache: FnvMap::default(),
            batch: Vec::new(),
            batch_index: FnvMap::default(),
            own_keys: 0,
            unacked: FnvSet::default(),
            parked: FnvMap::default(),
            outstanding: FnvMap::default(),
            coalesce: FnvMap::default(),
            next_id: 0,
            actions: Vec::new(),
            stats: KvsStats::default(),
        }
    }

    pub fn design(&self) -> KvsDesign {
        self.design
    }

    /// Fences completed on this node.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn stats(&self) -> KvsStats {
        self.stats
    }

    /// The actions produced since the last call.
    pub fn take_actions(&mut self) -> Vec<Action<W>> {
        std::mem::take(&mut self.actions)
    }

    fn owner_of(&self, key: &str) -> NodeId {
        owner(key, &self.nodes).unwrap_or(self.me)
    }

    fn new_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn send(&mut self, dest: KvsDest, msg: KvsMsg) {
        self.actions.push(Action::Send(dest, msg));
    }

    /// A put by a rank of this node. A new key beyond
    /// [`MAX_NODE_KEYS`](crate::limits::MAX_NODE_KEYS) is refused and nothing
    /// changes; a key already put here is replaced (in the fence batch too,
    /// so a rank putting one key in a loop never grows the batch).
    pub fn put(&mut self, key: String, value: String, hint: Option<Hint>) -> Result<(), Full> {
        if self.holder.get(&key).is_none_or(|held| !held.local) {
            if self.own_keys >= MAX_NODE_KEYS {
                return Err(Full { what: "keys put on this node by the job's ranks", limit: MAX_NODE_KEYS });
            }
            self.own_keys += 1;
        }
        for (origin, reply) in self.holder.insert(key.clone(), value.clone(), self.epoch, true) {
            self.send(KvsDest::Node(origin), reply);
        }
        self.wake(&key, &value);
        let to_owner = match self.design {
            KvsDesign::Dkvs => true,
            KvsDesign::Auto => hint == Some(Hint::Sparse),
            KvsDesign::Allgather | KvsDesign::Tree | KvsDesign::Direct => false,
        };
        if !to_owner {
            match self.batch_index.get(&key) {
                Some(&i) => self.batch[i].1 = value,
                None => {
                    self.batch_index.insert(key.clone(), self.batch.len());
                    self.batch.push((key, value));
                }
            }
            return Ok(());
        }
        let owner = self.owner_of(&key);
        if owner != self.me {
            let id = self.new_id();
            self.unacked.insert(id);
            self.stats.owner_puts += 1;
            let put = OwnerPut { job: self.job, key, value, epoch: self.epoch, origin: self.me, id };
            self.send(KvsDest::Node(owner), KvsMsg::Put(put));
        }
        Ok(())
    }

    /// Whether every owner put has been acknowledged, so the node may enter
    /// the fence (a completed fence then implies every put is at its owner).
    pub fn fence_ready(&self) -> bool {
        self.unacked.is_empty()
    }

    /// The puts that ride this fence up, leaving the batch empty.
    pub fn take_fence_puts(&mut self) -> KeyValues {
        self.batch_index.clear();
        std::mem::take(&mut self.batch)
    }

    /// The fence completed; `delta` is what it broadcast (allgather keys),
    /// taken whole: its keys and values move into the store.
    pub fn fence_done(&mut self, delta: KeyValues) {
        let waiters = !self.parked.is_empty() || !self.outstanding.is_empty();
        self.fenced.reserve(delta.len());
        for (k, v) in delta {
            if waiters {
                self.wake(&k, &v);
            }
            self.fenced.insert(k, v);
        }
        self.epoch += 1;
    }

    /// Spawn preputs that arrive after the job started (a warm-spawned job
    /// claimed by a spawn): visible at once, like those given to [`NodeStore::new`];
    /// local gets waiting for them are answered.
    pub fn preput(&mut self, keys: &[(String, String)]) {
        for (k, v) in keys {
            self.wake(k, v);
            self.fenced.insert(k.clone(), v.clone());
        }
    }

    /// What a local get can be answered with, without asking anyone.
    fn lookup(&self, key: &str, wait: bool) -> Option<String> {
        if let Some(c) = self.cache.get(key).filter(|c| c.fresh(self.epoch)) {
            return Some(c.value.clone());
        }
        if let Some(v) = self.fenced.get(key) {
            return Some(v.clone());
        }
        let h = self.holder.get(key)?;
        // A copy sent here as owner is the key's latest value; so is any put
        // under Dkvs when this node owns the key, and any put of a job that
        // runs on this node alone (but Allgather keeps PMI's rule that plain
        // gets see puts only after the fence).
        let alone = self.nodes.len() == 1 && self.design != KvsDesign::Allgather;
        let authoritative = !h.local || alone || (self.design == KvsDesign::Dkvs && self.owner_of(key) == self.me);
        // This node's own put is current until the fence after the one that
        // followed it (a put elsewhere may overwrite it then). Allgather keeps
        // PMI's rule that plain gets see puts only after the fence.
        let own_fresh = h.epoch + 1 >= self.epoch && (self.design != KvsDesign::Allgather || wait);
        (authoritative || own_fresh).then(|| h.value.clone())
    }

    /// What a local non-waiting get would find without leaving the node
    /// (PMI-2 `info-getjobattr` reads the KVS this way).
    pub fn peek(&self, key: &str) -> Option<String> {
        self.lookup(key, false)
    }

    fn route(&self, key: &str, source: Option<NodeId>, wait: bool) -> Route {
        match (self.design, source) {
            // The source node holds its own puts from the moment they are
            // made, under every design: a waiting get naming it needs no fence.
            (_, Some(node)) if wait => Route::To(KvsDest::Node(node)),
            // Without a source, a waiting get for a key that rides the fence
            // walks up and waits at each ancestor (and the launcher) for the
            // put to come up; under Auto the launcher also asks the owner,
            // where a sparse put would be.
            (KvsDesign::Allgather | KvsDesign::Auto, None) if wait => Route::To(KvsDest::Up),
            (KvsDesign::Allgather, _) => Route::NotFound,
            (KvsDesign::Tree, _) | (KvsDesign::Direct, None) => Route::To(KvsDest::Up),
            (KvsDesign::Dkvs, _) | (KvsDesign::Auto, None) => Route::To(KvsDest::Node(self.owner_of(key))),
            (KvsDesign::Direct | KvsDesign::Auto, Some(node)) => Route::To(KvsDest::Node(node)),
        }
    }

    /// A get by a local rank: `srcid` is the rank that put the key, if the
    /// client said; `wait` answers only once the key exists.
    pub fn get(&mut self, waiter: W, key: &str, srcid: Option<u32>, wait: bool) -> Lookup {
        if let Some(v) = self.lookup(key, wait) {
            self.stats.local_hits += 1;
            return Lookup::Found(v);
        }
        if self.nodes.len() == 1 {
            // The job runs here alone: every put of it is made on this node.
            return if wait { self.park(waiter, key) } else { Lookup::NotFound };
        }
        let source = srcid.and_then(|r| self.node_of.get(r as usize).copied());
        let dest = match self.route(key, source, wait) {
            Route::NotFound => return Lookup::NotFound,
            Route::To(dest) => dest,
        };
        if dest == KvsDest::Node(self.me) {
            // This node is the holder: what it has is the answer.
            return match self.holder.get(key) {
                Some(h) => Lookup::Found(h.value.clone()),
                None if wait => self.park(waiter, key),
                None => Lookup::NotFound,
            };
        }
        let ckey: Coalesce = (key.to_string(), wait, self.epoch, dest);
        if let Some(id) = self.coalesce.get(&ckey) {
            if let Some(out) = self.outstanding.get_mut(id) {
                out.waiters.push(waiter);
                self.stats.coalesced += 1;
                return Lookup::Pending;
            }
        }
        let id = self.new_id();
        self.coalesce.insert(ckey.clone(), id);
        self.outstanding.insert(id, Outstanding { key: ckey, waiters: vec![waiter] });
        self.stats.remote_gets += 1;
        let req = GetRequest { job: self.job, key: key.to_string(), origin: self.me, id, epoch: self.epoch, wait };
        self.send(dest, KvsMsg::Get(req));
        Lookup::Pending
    }

    fn park(&mut self, waiter: W, key: &str) -> Lookup {
        self.parked.entry(key.to_string()).or_default().push(waiter);
        Lookup::Pending
    }

    /// `key` now has `value` here: answer the local gets waiting for it.
    fn wake(&mut self, key: &str, value: &str) {
        if let Some(waiters) = self.parked.remove(key) {
            for w in waiters {
                self.actions.push(Action::Answer(w, Some(value.to_string())));
            }
        }
        let ids: Vec<u64> = self.outstanding.iter().filter(|(_, o)| o.key.0 == key).map(|(id, _)| *id).collect();
        for id in ids {
            // A reply that comes later finds no request and is dropped.
            let out = self.outstanding.remove(&id).expect("listed");
            self.coalesce.remove(&out.key);
            for w in out.waiters {
                self.actions.push(Action::Answer(w, Some(value.to_string())));
            }
        }
    }

    /// A message from another daemon.
    pub fn on_msg(&mut self, msg: KvsMsg) {
        match msg {
            KvsMsg::Get(req) => {
                self.stats.served += 1;
                if let Some((origin, reply)) = self.holder.request(req) {
                    self.send(KvsDest::Node(origin), reply);
                }
            }
            KvsMsg::Reply(reply) => self.on_reply(reply),
            KvsMsg::Put(put) => {
                let ack = KvsMsg::PutAck { job: self.job, id: put.id };
                for (origin, reply) in self.holder.insert(put.key.clone(), put.value.clone(), put.epoch, false) {
                    self.send(KvsDest::Node(origin), reply);
                }
                self.wake(&put.key, &put.value);
                self.send(KvsDest::Node(put.origin), ack);
            }
            KvsMsg::PutAck { id, .. } => {
                self.unacked.remove(&id);
            }
        }
    }

    fn on_reply(&mut self, reply: GetReply) {
        let Some(out) = self.outstanding.remove(&reply.id) else { return };
        self.coalesce.remove(&out.key);
        if let Some(v) = &reply.value {
            self.cache.insert(reply.key.clone(), Cached { value: v.clone(), valid_through: reply.valid_through });
        }
        for w in out.waiters {
            self.actions.push(Action::Answer(w, reply.value.clone()));
        }
        if let Some(v) = reply.value {
            if let Some(waiters) = self.parked.remove(&reply.key) {
                for w in waiters {
                    self.actions.push(Action::Answer(w, Some(v.clone())));
                }
            }
        }
    }

    /// Forget the waiters that went away (their connection closed).
    pub fn cancel(&mut self, gone: impl Fn(&W) -> bool) {
        for list in self.parked.values_mut() {
            list.retain(|w| !gone(w));
        }
        self.parked.retain(|_, list| !list.is_empty());
        for out in self.outstanding.values_mut() {
            out.waiters.retain(|w| !gone(w));
        }
        let empty: Vec<u64> = self.outstanding.iter().filter(|(_, o)| o.waiters.is_empty()).map(|(id, _)| *id).collect();
        for id in empty {
            if let Some(out) = self.outstanding.remove(&id) {
                self.coalesce.remove(&out.key);
            }
        }
    }
}

#[cfg(test)]
mod tests;
