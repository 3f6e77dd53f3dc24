//! The launcher's part of each job's KVS design: the root of the daemon tree.
//!
//! - **Fence puts**: under `allgather` and `auto` the puts a fence gathers go
//!   down to every node with its completion; under `tree` and `direct` they
//!   stay here, in a [`Holder`] that answers the gets walking up the tree.
//!   Waiting gets that walk up (any design without a `srcid`) are queued here
//!   until their key comes up with a fence; under `auto` they are also sent
//!   on to the key's owner, where a sparse put would be.
//! - **Ring**: one part per top-level subtree hosting the job; when all are
//!   in, the ring is closed and each subtree gets its [`RingSlot`].
//! - **Routing**: KVS messages between daemons of different top-level
//!   subtrees pass through here, down to their node.
//!
//! The controller owns the job's lifecycle and the fence tally; it hands the
//! KVS traffic here and sends what comes back.

use std::collections::{BTreeSet, HashMap};

use dpm_kvs::design::owner;
use dpm_kvs::remote::{KvsDest, KvsMsg};
use dpm_kvs::ring::{combine, root_slot, split, RingGather, RingSegment};
use dpm_kvs::{Holder, JobId, KeyValues, KvsDesign, NodeId};
use dpm_proto::tree::top_in;
use dpm_proto::ToDaemon;

/// Messages for daemons, by node index.
pub type Outbox = Vec<(NodeId, ToDaemon)>;

/// One job's state at the root (moved between runs with a kept job: `run::pool`).
pub struct RootJob {
    design: KvsDesign,
    /// The job's daemons, sorted (for the owner hash).
    nodes: Vec<NodeId>,
    /// The top-level subtrees (by their root node) hosting ranks of the job.
    parts: BTreeSet<NodeId>,
    /// Every put that rode a fence up (`tree`, `direct`).
    store: Holder,
    rings: HashMap<u64, RingGather>,
}

/// See the module documentation.
pub struct KvsRoot {
    fanout: usize,
    /// The nodes of the heap-shaped tree ([`KvsRoot::with_first`]).
    first: usize,
    /// Heap nodes re-attached straight below the launcher after their
    /// parent was lost ([`KvsRoot::reformed`]).
    tops: BTreeSet<NodeId>,
    jobs: HashMap<JobId, RootJob>,
}

impl KvsRoot {
    pub fn new(fanout: usize) -> Self {
        KvsRoot { fanout: fanout.max(1), first: usize::MAX, tops: BTreeSet::new(), jobs: HashMap::new() }
    }

    /// Only the first `first` nodes form the heap; the rest joined the
    /// running tree, each its own part (`dpm boot --add`, lazy daemons).
    pub fn with_first(mut self, first: usize) -> Self {
        self.first = first;
        self
    }

    /// The tree re-formed: `tops` (the node table's) are re-attached
    /// straight below the launcher. Each job's parts follow the new shape:
    /// its fences complete at, and its rings gather from, the new tops.
    pub fn reformed(&mut self, tops: &BTreeSet<NodeId>) {
        if self.tops == *tops {
            return;
        }
        self.tops = tops.clone();
        for j in self.jobs.values_mut() {
            j.parts = j.nodes.iter().filter_map(|&d| top_in(d, self.fanout, self.first, &self.tops)).collect();
        }
    }

    fn top(&self, node: NodeId) -> Option<NodeId> {
        top_in(node, self.fanout, self.first, &self.tops)
    }

    /// A job starts on `daemons` (the nodes hosting its ranks).
    pub fn add_job(&mut self, job: JobId, design: KvsDesign, daemons: &[NodeId]) {
        let parts = daemons.iter().filter_map(|&d| self.top(d)).collect();
        let nodes = daemons.to_vec();
        self.jobs.insert(job, RootJob { design, nodes, parts, store: Holder::default(), rings: HashMap::new() });
    }

    pub fn remove_job(&mut self, job: JobId) {
        if let Some(j) = self.jobs.remove(&job) {
            if j.store.queued() > 0 {
                tracing::debug!(%job, queued = j.store.queued(), "waiting gets dropped with their job");
            }
        }
    }

    /// Take `job`'s state out (it moves to another run: [`KvsRoot::put_job`]).
    pub fn take_job(&mut self, job: JobId) -> Option<RootJob> {
        self.jobs.remove(&job)
    }

    /// A job's state taken from another run's root (same tree, same fan-out).
    pub fn put_job(&mut self, job: JobId, state: RootJob) {
        self.jobs.insert(job, state);
    }

    /// The jobs held here.
    pub fn jobs(&self) -> impl Iterator<Item = JobId> + '_ {
        self.jobs.keys().copied()
    }

    /// The job's design (spawned jobs inherit their parent's).
    pub fn design(&self, job: JobId) -> Option<KvsDesign> {
        self.jobs.get(&job).map(|j| j.design)
    }

    /// The puts of a fence arrival: those to broadcast when the fence
    /// completes, and answers to gets that waited here for them.
    pub fn fence_puts(&mut self, job: JobId, epoch: u64, puts: KeyValues) -> (KeyValues, Outbox) {
        let Some(j) = self.jobs.get_mut(&job) else { return (puts, Vec::new()) };
        let mut out = Vec::new();
        if j.design.fence_broadcasts() {
            if j.store.queued() > 0 {
                for (k, v) in &puts {
                    out.extend(j.store.wake(k, v).into_iter().map(|(origin, reply)| (origin, ToDaemon::Kvs(reply))));
                }
            }
            return (puts, out);
        }
        for (k, v) in puts {
            for (origin, reply) in j.store.insert(k, v, epoch, false) {
                out.push((origin, ToDaemon::Kvs(reply)));
            }
        }
        (Vec::new(), out)
    }

    /// Where a completed fence of `job` is sent: the root of each top-level
    /// subtree hosting the job, which passes it down its subtree (each
    /// daemon to its children whose subtrees run the job, `kvs_node`), so
    /// the delta is written once per link instead of once per node and
    /// travels down the tree in parallel. `None` for a job not known here.
    pub fn fence_targets(&self, job: JobId) -> Option<Vec<NodeId>> {
        self.jobs.get(&job).map(|j| j.parts.iter().copied().collect())
    }

    /// A subtree's stretch of ring `seq`; `from` is the node it came from.
    pub fn ring_in(&mut self, job: JobId, from: NodeId, seq: u64, segment: RingSegment) -> Outbox {
        let Some(part) = self.top(from) else { return Vec::new() };
        let Some(j) = self.jobs.get_mut(&job) else { return Vec::new() };
        let gather = j.rings.entry(seq).or_default();
        if !gather.add(part, segment) {
            tracing::warn!(%job, seq, %part, "a second ring entry from the same subtree ignored");
        }
        if !gather.complete(&j.parts) {
            return Vec::new();
        }
        let parts = j.rings.remove(&seq).expect("present").parts();
        let stretches: Vec<RingSegment> = parts.iter().map(|(_, s)| s.clone()).collect();
        let whole = combine(&stretches).expect("at least one part");
        tracing::debug!(%job, seq, size = whole.count, "ring complete");
        let slots = split(&root_slot(&whole), &stretches);
        parts.into_iter().zip(slots).map(|((node, _), slot)| (node, ToDaemon::RingOut { job, seq, slot })).collect()
    }

    /// A KVS message that reached the root: pass it down to its node, or
    /// answer a get that walked all the way up.
    pub fn route(&mut self, to: KvsDest, msg: KvsMsg) -> Outbox {
        match (to, msg) {
            (KvsDest::Node(node), msg) => vec![(node, ToDaemon::Kvs(msg))],
            (KvsDest::Up, KvsMsg::Get(req)) => {
                let Some(j) = self.jobs.get_mut(&req.job) else { return Vec::new() };
                let ask_owner = (j.design == KvsDesign::Auto && req.wait).then(|| owner(&req.key, &j.nodes)).flatten();
                match j.store.request(req.clone()) {
                    Some((origin, reply)) => vec![(origin, ToDaemon::Kvs(reply))],
                    // Whichever answers first wins; the node drops the other.
                    None => ask_owner.map(|o| (o, ToDaemon::Kvs(KvsMsg::Get(req)))).into_iter().collect(),
                }
            }
            (KvsDest::Up, msg) => {
                tracing::warn!(job = %msg.job(), "a KVS message other than a get came up the tree; dropped");
                Vec::new()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dpm_kvs::remote::GetRequest;

    fn ids(nodes: &[usize]) -> Vec<NodeId> {
        nodes.iter().copied().map(NodeId).collect()
    }

    #[test]
    fn tree_puts_stay_at_the_root_and_answer_waiting_gets() {
        let mut root = KvsRoot::new(2);
        root.add_job(JobId(0), KvsDesign::Tree, &ids(&[0, 1, 2]));
        let req = GetRequest { job: JobId(0), key: "k".into(), origin: NodeId(2), id: 7, epoch: 0, wait: true };
        assert!(root.route(KvsDest::Up, KvsMsg::Get(req)).is_empty(), "queued");
        let (broadcast, out) = root.fence_puts(JobId(0), 0, vec![("k".into(), "v".into())]);
        assert!(broadcast.is_empty());
        assert!(matches!(&out[..], [(NodeId(2), ToDaemon::Kvs(KvsMsg::Reply(r)))] if r.id == 7 && r.value.as_deref() == Some("v")));
        // Allgather broadcasts instead, answering what waited for the put.
        root.add_job(JobId(1), KvsDesign::Allgather, &ids(&[0, 1]));
        let req = GetRequest { job: JobId(1), key: "a".into(), origin: NodeId(1), id: 3, epoch: 0, wait: true };
        assert!(root.route(KvsDest::Up, KvsMsg::Get(req)).is_empty(), "queued");
        let (broadcast, out) = root.fence_puts(JobId(1), 0, vec![("a".into(), "1".into())]);
        assert_eq!(broadcast.len(), 1);
        assert!(matches!(&out[..], [(NodeId(1), ToDaemon::Kvs(KvsMsg::Reply(r)))] if r.id == 3));
        // Auto also asks the owner, where a sparse put would be.
        root.add_job(JobId(2), KvsDesign::Auto, &ids(&[0, 1]));
        let req = GetRequest { job: JobId(2), key: "s".into(), origin: NodeId(1), id: 4, epoch: 0, wait: true };
        let out = root.route(KvsDest::Up, KvsMsg::Get(req));
        assert!(matches!(&out[..], [(n, ToDaemon::Kvs(KvsMsg::Get(r)))] if Some(*n) == owner("s", &ids(&[0, 1])) && r.id == 4));
    }

    #[test]
    fn a_fence_completion_goes_to_the_top_of_each_subtree_running_the_job() {
        // Fan-out 2 over 4 nodes: subtrees {0, 2, 3} and {1}.
        let mut root = KvsRoot::new(2);
        root.add_job(JobId(0), KvsDesign::Allgather, &ids(&[1, 2, 3]));
        assert_eq!(root.fence_targets(JobId(0)), Some(ids(&[0, 1])), "node 0 passes it on to 2 and 3");
        root.add_job(JobId(1), KvsDesign::Allgather, &ids(&[3]));
        assert_eq!(root.fence_targets(JobId(1)), Some(ids(&[0])));
        assert_eq!(root.fence_targets(JobId(9)), None);
    }

    #[test]
    fn the_ring_closes_over_the_top_level_subtrees() {
        // Fan-out 2 over 4 nodes: subtrees {0, 2, 3} and {1}.
        let mut root = KvsRoot::new(2);
        root.add_job(JobId(0), KvsDesign::Auto, &ids(&[0, 1, 2, 3]));
        let seg = |c: u32, f: &str, l: &str| RingSegment { count: c, first: f.into(), last: l.into() };
        assert!(root.ring_in(JobId(0), NodeId(1), 0, seg(2, "e", "f")).is_empty());
        let out = root.ring_in(JobId(0), NodeId(0), 0, seg(4, "a", "d"));
        let slots: Vec<(usize, u32, String, String)> = out
            .into_iter()
            .map(|(n, m)| match m {
                ToDaemon::RingOut { slot, .. } => (n.0, slot.offset, slot.left, slot.right),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(slots, vec![(0, 0, "f".into(), "e".into()), (1, 4, "d".into(), "a".into())]);
    }
}
