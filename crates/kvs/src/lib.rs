//! # dpm-kvs: job identity and the key-value state behind PMI
//!
//! Pure data structures, no I/O, shared by the node daemon and the launcher:
//! - [`JobId`], [`Rank`], [`NodeId`]: newtype ids, so a rank is never passed as a job or a node.
//! - [`design`]: the KVS designs (`dpm run --kvs`), put hints, the key → owner hash.
//! - [`store`]: one job's keys on one node under every design ([`NodeStore`]),
//!   and the [`Holder`] of values kept for other nodes (also the launcher's).
//! - [`remote`]: the messages daemons exchange for on-demand gets and owner puts.
//! - [`ring`]: the ring exchange as a prefix scan over the daemon tree.
//! - [`FenceTally`]: the launcher's side of a fence (= PMI barrier): counts the
//!   ranks each node reports and merges their puts; when the whole job has
//!   arrived it yields the delta to send down once to every node.
//! - [`NodeAttrs`]: PMI-2 node attributes, with waiters for `wait=TRUE` gets.
//! - [`NameService`]: published service names, owned by the job that published.
//! - [`limits`]: how many keys, node attributes and names the state may hold.
//!
//! Consistency rule: a put is visible to gets no later than the fence that
//! follows it completes (PMI semantics); a later put of the same key wins.

pub mod design;
pub mod fnv;
pub mod limits;
pub mod remote;
pub mod ring;
pub mod store;

pub use design::{Hint, KvsDesign};
pub use store::{Holder, NodeStore};

use std::collections::HashMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// A job: the initial `dpm run` job is 0, each spawn makes the next one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct JobId(pub u32);

/// A process's rank within its job (its `MPI_COMM_WORLD` rank).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Rank(pub u32);

/// A node of a daemon tree: its position in the run's (or boot's) node list,
/// 0 being the launcher's first child. Used end to end: the wire (where it
/// is serialised as the bare index), the tree's shape, the links, the node
/// reactor and the launcher.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NodeId(pub usize);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {}", self.0)
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "job {}", self.0)
    }
}

impl fmt::Display for Rank {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rank {}", self.0)
    }
}

pub type KeyValues = Vec<(String, String)>;

/// The launcher's view of one job's fences.
#[derive(Debug)]
pub struct FenceTally {
    size: u32,
    arrived: u32,
    epoch: u64,
    delta: KeyValues,
}

/// A fence that every rank of the job has entered.
#[derive(Debug, PartialEq, Eq)]
pub struct FenceDone {
    pub epoch: u64,
    pub delta: KeyValues,
}

#[derive(Debug, PartialEq, Eq)]
pub enum FenceError {
    /// A node reported for a fence that is not the current one.
    WrongEpoch { expected: u64, got: u64 },
    /// More ranks arrived than the job has.
    TooMany { size: u32, arrived: u32 },
}

impl fmt::Display for FenceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FenceError::WrongEpoch { expected, got } => write!(f, "fence epoch {got} reported during epoch {expected}"),
            FenceError::TooMany { size, arrived } => write!(f, "{arrived} ranks entered a fence of a {size}-rank job"),
        }
    }
}

impl FenceTally {
    pub fn new(size: u32) -> Self {
        FenceTally { size, arrived: 0, epoch: 0, delta: Vec::new() }
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The fences completed and the ranks counted in the next one: it
    /// changes whenever a rank of the job enters a fence.
    pub fn progress(&self) -> (u64, u32) {
        (self.epoch, self.arrived)
    }

    /// A node reports `count` of its ranks in fence `epoch`, with their puts.
    pub fn arrive(&mut self, epoch: u64, count: u32, puts: KeyValues) -> Result<Option<FenceDone>, FenceError> {
        if epoch != self.epoch {
            return Err(FenceError::WrongEpoch { expected: self.epoch, got: epoch });
        }
        self.arrived += count;
        if self.arrived > self.size {
            return Err(FenceError::TooMany { size: self.size, arrived: self.arrived });
        }
        self.delta.extend(puts);
        if self.arrived < self.size {
            return Ok(None);
        }
        let done = FenceDone { epoch: self.epoch, delta: dedup_last_wins(std::mem::take(&mut self.delta)) };
        self.arrived = 0;
        self.epoch += 1;
        Ok(Some(done))
    }
}

/// Keep only the last value of each key, in first-appearance order.
fn dedup_last_wins(kvs: KeyValues) -> KeyValues {
    let mut index: HashMap<String, usize> = HashMap::with_capacity(kvs.len());
    let mut out: KeyValues = Vec::with_capacity(kvs.len());
    for (k, v) in kvs {
        match index.get(&k) {
            Some(&i) => out[i].1 = v,
            None => {
                index.insert(k.clone(), out.len());
                out.push((k, v));
            }
        }
    }
    out
}

/// PMI-2 node attributes of one job on one node; `W` identifies a waiter.
#[derive(Debug)]
pub struct NodeAttrs<W> {
    values: HashMap<String, String>,
    waiters: HashMap<String, Vec<W>>,
}

impl<W> Default for NodeAttrs<W> {
    fn default() -> Self {
        NodeAttrs { values: HashMap::new(), waiters: HashMap::new() }
    }
}

impl<W> NodeAttrs<W> {
    /// Store a value; returns the waiters to answer with it. A new key
    /// beyond [`limits::MAX_NODE_ATTRS`] is refused (the store is unchanged).
    pub fn put(&mut self, key: String, value: String) -> Result<Vec<W>, Full> {
        if self.values.len() >= limits::MAX_NODE_ATTRS && !self.values.contains_key(&key) {
            return Err(Full { what: "node attributes", limit: limits::MAX_NODE_ATTRS });
        }
        let woken = self.waiters.remove(&key).unwrap_or_default();
        self.values.insert(key, value);
        Ok(woken)
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    /// Queue `waiter` until `key` is put.
    pub fn wait(&mut self, key: String, waiter: W) {
        self.waiters.entry(key).or_default().push(waiter);
    }

    /// Forget a waiter that went away.
    pub fn cancel(&mut self, mut gone: impl FnMut(&W) -> bool) {
        for list in self.waiters.values_mut() {
            list.retain(|w| !gone(w));
        }
        self.waiters.retain(|_, list| !list.is_empty());
    }
}

/// A put or publish refused because a bound of [`limits`] was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full {
    pub what: &'static str,
    pub limit: usize,
}

impl fmt::Display for Full {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "too many {}: at most {} (dpm's limit)", self.what, self.limit)
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum NameError {
    AlreadyPublished(String),
    NotPublished(String),
    Full(Full),
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameError::AlreadyPublished(s) => write!(f, "service name '{s}' is already published"),
            NameError::NotPublished(s) => write!(f, "service name '{s}' is not published"),
            NameError::Full(full) => write!(f, "{full}"),
        }
    }
}

/// `MPI_Publish_name` / `MPI_Lookup_name` registry, with lookups that wait
/// (PMIx's `PMIX_WAIT`): parked under their service until it is published,
/// answered not-found when their job ends. `W` is how the caller finds a
/// parked lookup again (the launcher: the node and request to answer).
#[derive(Debug)]
pub struct NameService<W = ()> {
    names: HashMap<String, (String, JobId)>,
    /// Parked lookups by service: the waiter and the asking job.
    parked: HashMap<String, Vec<(W, JobId)>>,
    parked_count: usize,
}

impl<W> Default for NameService<W> {
    fn default() -> Self {
        NameService { names: HashMap::new(), parked: HashMap::new(), parked_count: 0 }
    }
}

impl<W> NameService<W> {
    /// Publishes `service`; the lookups parked for it are returned, to be
    /// answered with `port`.
    pub fn publish(&mut self, service: String, port: String, owner: JobId) -> Result<Vec<W>, NameError> {
        if self.names.contains_key(&service) {
            return Err(NameError::AlreadyPublished(service));
        }
        if self.names.len() >= limits::MAX_NAMES {
            return Err(NameError::Full(Full { what: "published service names", limit: limits::MAX_NAMES }));
        }
        let woken: Vec<W> = self.parked.remove(&service).unwrap_or_default().into_iter().map(|(w, _)| w).collect();
        self.parked_count -= woken.len();
        self.names.insert(service, (port, owner));
        Ok(woken)
    }

    pub fn unpublish(&mut self, service: &str) -> Result<(), NameError> {
        self.names.remove(service).map(|_| ()).ok_or_else(|| NameError::NotPublished(service.to_string()))
    }

    pub fn lookup(&self, service: &str) -> Result<&str, NameError> {
        self.names.get(service).map(|(p, _)| p.as_str()).ok_or_else(|| NameError::NotPublished(service.to_string()))
    }

    /// A lookup that waits: the port if `service` is published, else `None`
    /// and `waiter` parked until it is (or `job` ends). Refused beyond
    /// [`limits::MAX_PARKED_LOOKUPS`].
    pub fn lookup_or_park(&mut self, service: &str, waiter: W, job: JobId) -> Result<Option<String>, NameError> {
        if let Some((port, _)) = self.names.get(service) {
            return Ok(Some(port.clone()));
        }
        if self.parked_count >= limits::MAX_PARKED_LOOKUPS {
            return Err(NameError::Full(Full { what: "lookups waiting for a name", limit: limits::MAX_PARKED_LOOKUPS }));
        }
        self.parked.entry(service.to_string()).or_default().push((waiter, job));
        self.parked_count += 1;
        Ok(None)
    }

    /// Withdraw every name a finished job left published.
    pub fn withdraw_job(&mut self, job: JobId) -> usize {
        let before = self.names.len();
        self.names.retain(|_, (_, owner)| *owner != job);
        before - self.names.len()
    }

    /// The lookups parked for the services `gone` picks (whose publisher
    /// can no longer exist), to be answered not-found.
    pub fn cancel_services(&mut self, gone: impl Fn(&str) -> bool) -> Vec<W> {
        let services: Vec<String> = self.parked.keys().filter(|s| gone(s)).cloned().collect();
        let mut cancelled = Vec::new();
        for service in services {
            cancelled.extend(self.parked.remove(&service).unwrap_or_default().into_iter().map(|(w, _)| w));
        }
        self.parked_count -= cancelled.len();
        cancelled
    }

    /// The lookups a finished job left parked, to be answered not-found.
    pub fn cancel_waits(&mut self, job: JobId) -> Vec<W> {
        let mut gone = Vec::new();
        for waiters in self.parked.values_mut() {
            let (mine, others): (Vec<_>, Vec<_>) = std::mem::take(waiters).into_iter().partition(|(_, j)| *j == job);
            *waiters = others;
            gone.extend(mine.into_iter().map(|(w, _)| w));
        }
        self.parked.retain(|_, w| !w.is_empty());
        self.parked_count -= gone.len();
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(k: &str, v: &str) -> (String, String) {
        (k.to_string(), v.to_string())
    }

    #[test]
    fn puts_are_invisible_until_the_fence_completes() {
        let mut node: NodeStore<u32> = NodeStore::new(JobId(0), KvsDesign::Allgather, NodeId(0), vec![], &[]);
        node.put("a".into(), "1".into(), None).unwrap();
        assert_eq!(node.peek("a"), None);
        let mut tally = FenceTally::new(2);
        assert_eq!(tally.arrive(0, 1, node.take_fence_puts()), Ok(None));
        let done = tally.arrive(0, 1, vec![kv("b", "2")]).unwrap().unwrap();
        node.fence_done(done.delta);
        assert_eq!(node.peek("a").as_deref(), Some("1"));
        assert_eq!(node.peek("b").as_deref(), Some("2"));
        assert_eq!(tally.epoch(), 1);
    }

    #[test]
    fn a_later_put_of_the_same_key_wins() {
        let mut tally = FenceTally::new(2);
        tally.arrive(0, 1, vec![kv("k", "old"), kv("x", "1")]).unwrap();
        let done = tally.arrive(0, 1, vec![kv("k", "new")]).unwrap().unwrap();
        assert_eq!(done.delta, vec![kv("k", "new"), kv("x", "1")]);
    }

    #[test]
    fn fence_rejects_wrong_epoch_and_overflow() {
        let mut tally = FenceTally::new(1);
        assert_eq!(tally.arrive(3, 1, vec![]), Err(FenceError::WrongEpoch { expected: 0, got: 3 }));
        assert_eq!(tally.arrive(0, 2, vec![]), Err(FenceError::TooMany { size: 1, arrived: 2 }));
    }

    #[test]
    fn preput_keys_are_visible_at_once() {
        let node: NodeStore<u32> = NodeStore::new(JobId(1), KvsDesign::Dkvs, NodeId(0), vec![], &[kv("PARENT_ROOT_PORT_NAME", "tag#0$")]);
        assert_eq!(node.peek("PARENT_ROOT_PORT_NAME").as_deref(), Some("tag#0$"));
    }

    #[test]
    fn node_attr_waiters_are_woken_by_the_put() {
        let mut attrs: NodeAttrs<u32> = NodeAttrs::default();
        attrs.wait("shm".into(), 7);
        attrs.wait("shm".into(), 8);
        assert_eq!(attrs.put("shm".into(), "h".into()), Ok(vec![7, 8]));
        assert_eq!(attrs.get("shm"), Some("h"));
        assert_eq!(attrs.put("shm".into(), "h2".into()), Ok(vec![]));
    }

    #[test]
    fn names_are_unique_and_withdrawn_with_their_job() {
        let mut ns: NameService = NameService::default();
        ns.publish("svc".into(), "p1".into(), JobId(1)).unwrap();
        assert_eq!(ns.publish("svc".into(), "p2".into(), JobId(2)), Err(NameError::AlreadyPublished("svc".into())));
        assert_eq!(ns.lookup("svc"), Ok("p1"));
        assert_eq!(ns.unpublish("nope"), Err(NameError::NotPublished("nope".into())));
        assert_eq!(ns.withdraw_job(JobId(1)), 1);
        assert!(ns.lookup("svc").is_err());
    }

    #[test]
    fn node_attributes_and_names_are_bounded() {
        let mut attrs: NodeAttrs<u32> = NodeAttrs::default();
        for i in 0..limits::MAX_NODE_ATTRS {
            attrs.put(format!("k{i}"), "v".into()).unwrap();
        }
        let full = Full { what: "node attributes", limit: limits::MAX_NODE_ATTRS };
        assert_eq!(attrs.put("one-more".into(), "v".into()), Err(full));
        assert_eq!(attrs.put("k0".into(), "replaced".into()), Ok(vec![]), "replacing an existing key is always allowed");
        assert_eq!(attrs.get("k0"), Some("replaced"));

        let mut ns: NameService = NameService::default();
        for i in 0..limits::MAX_NAMES {
            ns.publish(format!("s{i}"), "p".into(), JobId(1)).unwrap();
        }
        assert!(matches!(ns.publish("more".into(), "p".into(), JobId(1)), Err(NameError::Full(_))));
        assert_eq!(ns.lookup("more"), Err(NameError::NotPublished("more".into())));
        ns.unpublish("s0").unwrap();
        ns.publish("more".into(), "p".into(), JobId(1)).expect("room again after an unpublish");
    }

    #[test]
    fn a_waiting_lookup_is_woken_by_the_publish_or_dropped_with_its_job() {
        let mut ns: NameService<u32> = NameService::default();
        assert_eq!(ns.lookup_or_park("svc", 7, JobId(1)), Ok(None));
        assert_eq!(ns.lookup_or_park("svc", 8, JobId(2)), Ok(None));
        assert_eq!(ns.lookup_or_park("other", 9, JobId(1)), Ok(None));
        assert_eq!(ns.publish("svc".into(), "port".into(), JobId(3)), Ok(vec![7, 8]));
        assert_eq!(ns.lookup_or_park("svc", 10, JobId(1)), Ok(Some("port".into())), "published: answered at once");
        assert_eq!(ns.cancel_waits(JobId(2)), Vec::<u32>::new(), "job 2's lookup was answered");
        assert_eq!(ns.cancel_waits(JobId(1)), vec![9]);
        assert_eq!(ns.publish("other".into(), "p".into(), JobId(3)), Ok(vec![]), "a cancelled lookup is not woken");
        for i in 0..limits::MAX_PARKED_LOOKUPS as u32 {
            ns.lookup_or_park("never", i, JobId(4)).unwrap();
        }
        assert!(matches!(ns.lookup_or_park("never", 0, JobId(5)), Err(NameError::Full(_))));
        assert_eq!(ns.cancel_waits(JobId(4)).len(), limits::MAX_PARKED_LOOKUPS);
        assert_eq!(ns.lookup_or_park("never", 0, JobId(5)), Ok(None), "room again once the job ended");
    }

    #[test]
    fn lookups_parked_for_a_service_that_can_no_longer_appear_are_cancelled() {
        let mut ns: NameService<u32> = NameService::default();
        assert_eq!(ns.lookup_or_park("a:1", 1, JobId(1)), Ok(None));
        assert_eq!(ns.lookup_or_park("a:1", 2, JobId(2)), Ok(None));
        assert_eq!(ns.lookup_or_park("b:1", 3, JobId(1)), Ok(None));
        let mut gone = ns.cancel_services(|s| s.starts_with("a:"));
        gone.sort_unstable();
        assert_eq!(gone, vec![1, 2]);
        assert!(ns.cancel_waits(JobId(2)).is_empty(), "no longer parked");
        assert_eq!(ns.cancel_waits(JobId(1)), vec![3], "the other service still waits");
    }
}
