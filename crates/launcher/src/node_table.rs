//! The nodes of a daemon tree and where processes go on them.
//!
//! One [`NodeTable`] per tree (one per `dpm run`, one per `dpm boot` shared
//! by all its runs): each node's host, slots, state (up, draining, lost) and
//! place in the fan-out tree, and the load — processes placed there and not
//! yet ended, over every run.
//!
//! One placer, three uses, all through the table:
//! - a run's first job: [`NodeTable::place_first`] (fill each node's slots in
//!   turn, `-ppn`, `--map-by node`; beyond every slot, wrap around);
//! - a booted run's first job: [`NodeTable::place_booted`] (into the slots
//!   other runs left free, with the default placement; else as a first job);
//! - a spawn: [`NodeTable::place_spawn`] (each process to the allowed node
//!   with the most free slots; `host`/`hosts` info narrows the nodes;
//!   refused when full and oversubscription is off); a `soft` spawn:
//!   [`NodeTable::place_spawn_soft`] (as many as fit, among the counts
//!   its `soft` key allows).
//!
//! Each computes a placement (the node of each rank) and holds nothing; the
//! slots are taken by [`NodeTable::reserve`], which hands out a
//! [`Reservation`] (plain data: the node of each rank and whether it still
//! holds its slot), and given back rank by rank as ranks end
//! ([`NodeTable::release`]) or all at once ([`NodeTable::release_all`]).
//! The load is a plain field of the table, changed only by those calls —
//! by the tree level's runs and pool, in its events; its invariants check
//! that the load is exactly what the live reservations hold.

use dpm_kvs::NodeId;

/// Whether a node takes new processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeState {
    Up,
    /// Running what it has, taking nothing new.
    Draining,
    /// Its link broke: its processes are gone.
    Lost,
    /// Drained and empty: its daemon left the tree; its slots are no
    /// longer the tree's.
    Released,
    /// Joining the running tree: its daemon is starting, it takes nothing yet.
    Joining,
    /// Its parent daemon was lost: its ranks run on, it takes nothing new
    /// until its daemon re-attaches straight below the launcher
    /// ([`NodeTable::reattach`]), or is lost if it does not.
    Detached,
}

#[derive(Clone, Debug)]
struct NodeEntry {
    host: String,
    slots: u32,
    state: NodeState,
    /// Why it was lost (`dpm status`).
    lost: Option<String>,
}

/// See the module documentation.
#[derive(Debug)]
pub struct NodeTable {
    nodes: Vec<NodeEntry>,
    fanout: usize,
    /// Slots held on each node: what the live reservations hold there.
    load: Vec<i64>,
    /// The nodes the tree started with: the heap of [`dpm_proto::tree`];
    /// those after them joined the running tree ([`NodeTable::join`]),
    /// linked straight to the launcher.
    first: usize,
    /// How many nodes the table may ever hold: those it was made with and
    /// [`JOIN_ROOM`] more.
    room: usize,
    /// The tree re-forms around a lost interior node (`node_table::reform`).
    reform: reform::Reform,
}

/// Why processes could not be placed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlaceError {
    #[error("no node to place the spawned processes on")]
    NoNode,
    #[error("every allowed node's slots are in use and oversubscription is off")]
    Full,
    #[error("spawning {size} processes would exceed the {slots} slots ({live} in use) and oversubscription is off")]
    OverUniverse { size: u32, slots: i64, live: i64 },
    #[error("rank {rank} is placed on {node}, but the tree has {nodes} nodes")]
    NoSuchNode { rank: usize, node: NodeId, nodes: usize },
}

impl PlaceError {
    /// Refused only because the slots are taken now (another spawn or run
    /// may free them): not a mistake in the request.
    pub fn is_no_room(&self) -> bool {
        matches!(self, PlaceError::Full | PlaceError::OverUniverse { .. })
    }
}

impl NodeTable {
    /// `nodes`: each node's host and slots, in node order; `fanout`: the tree's.
    pub fn new(nodes: impl IntoIterator<Item = (String, u32)>, fanout: usize) -> Self {
        let nodes: Vec<NodeEntry> = nodes.into_iter().map(|(host, slots)| NodeEntry { host, slots, state: NodeState::Up, lost: None }).collect();
        let load = vec![0; nodes.len()];
        NodeTable { first: nodes.len(), room: nodes.len() + JOIN_ROOM, nodes, fanout: fanout.max(1), load, reform: Default::default() }
    }

    /// Only the first `n` nodes form the heap-shaped tree; the rest join it
    /// later, straight below the launcher (a run's listed nodes whose
    /// daemons start when first needed).
    pub fn with_first(mut self, n: usize) -> Self {
        self.first = n.min(self.nodes.len());
        self
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn ids(&self) -> impl Iterator<Item = NodeId> {
        (0..self.nodes.len()).map(NodeId)
    }

    pub fn contains(&self, node: NodeId) -> bool {
        node.0 < self.nodes.len()
    }

    /// The node's host name; `?` for a node not in the table.
    pub fn host(&self, node: NodeId) -> &str {
        self.nodes.get(node.0).map_or("?", |n| n.host.as_str())
    }

    pub fn slots(&self, node: NodeId) -> u32 {
        self.nodes.get(node.0).map_or(1, |n| n.slots)
    }

    pub fn all_slots(&self) -> Vec<u32> {
        self.nodes.iter().map(|n| n.slots).collect()
    }

    pub fn state(&self, node: NodeId) -> Option<NodeState> {
        self.nodes.get(node.0).map(|n| n.state)
    }

    pub fn set_state(&mut self, node: NodeId, state: NodeState) {
        if let Some(n) = self.nodes.get_mut(node.0) {
            n.state = state;
        }
    }

    /// `node` and the nodes below it are gone (`why`: the node's own
    /// loss): they take nothing new. The nodes newly lost.
    pub fn lose(&mut self, node: NodeId, why: &str) -> Vec<NodeId> {
        // A released node's link closing is its daemon leaving, as asked.
        if !self.contains(node) || self.state(node) == Some(NodeState::Released) {
            return Vec::new();
        }
        let host = self.host(node).to_string();
        let mut newly = Vec::new();
        for n in self.subtree(node) {
            let e = &mut self.nodes[n.0];
            if e.state == NodeState::Released {
                continue;
            }
            if e.lost.is_none() {
                e.lost = Some(if n == node { why.to_string() } else { format!("below node {} ({host}), which was lost", node.0) });
                newly.push(n);
            }
            e.state = NodeState::Lost;
        }
        newly
    }

    /// Why `node` was lost, if it was.
    pub fn lost_reason(&self, node: NodeId) -> Option<&str> {
        self.nodes.get(node.0).and_then(|n| n.lost.as_deref())
    }

    /// Processes placed on `node` and not yet ended, over every run.
    pub fn load(&self, node: NodeId) -> i64 {
        self.load.get(node.0).copied().unwrap_or(0)
    }

    pub fn loads(&self) -> Vec<i64> {
        self.load.clone()
    }

    /// Processes not yet ended on every node.
    pub fn live(&self) -> i64 {
        self.load.iter().sum()
    }

    /// The nodes the tree started with (its heap); the rest joined later.
    pub fn first(&self) -> usize {
        self.first
    }

    pub fn fanout(&self) -> usize {
        self.fanout
    }

    /// The node's parent in the tree (`None`: the launcher; so for every
    /// node that joined later).
    pub fn parent(&self, node: NodeId) -> Option<NodeId> {
        if node.0 >= self.first || self.reform.is_top(node) {
            return None;
        }
        dpm_proto::tree::parent(node, self.fanout)
    }

    pub fn children(&self, node: NodeId) -> Vec<NodeId> {
        if node.0 >= self.first {
            return Vec::new();
        }
        let mut children = dpm_proto::tree::children(Some(node), self.first, self.fanout);
        children.retain(|&c| !self.reform.is_top(c));
        children
    }

    /// The node and every node below it: what is lost with its link.
    pub fn subtree(&self, node: NodeId) -> Vec<NodeId> {
        let mut out = vec![node];
        let mut next = 0;
        while next < out.len() {
            let below = self.children(out[next]);
            out.extend(below);
            next += 1;
        }
        out
    }

    /// Take the slots of a placement (rank `r` on `node_of[r]`): held
    /// until released ([`NodeTable::release`], [`NodeTable::release_all`]).
    pub fn reserve(&mut self, node_of: &[NodeId]) -> Result<Reservation, PlaceError> {
        if let Some((rank, &node)) = node_of.iter().enumerate().find(|(_, n)| n.0 >= self.len()) {
            return Err(PlaceError::NoSuchNode { rank, node, nodes: self.len() });
        }
        for n in node_of {
            self.load[n.0] += 1;
        }
        Ok(Reservation { node_of: node_of.to_vec(), held: vec![true; node_of.len()] })
    }

    /// Rank `rank` of `r` ended: its slot is free again (once; out of range: nothing).
    pub fn release(&mut self, r: &mut Reservation, rank: usize) {
        if let Some(h) = r.held.get_mut(rank).filter(|h| **h) {
            *h = false;
            self.load[r.node_of[rank].0] -= 1;
        }
    }

    /// Every slot `r` still holds is free again.
    pub fn release_all(&mut self, r: &mut Reservation) {
        for rank in 0..r.node_of.len() {
            self.release(r, rank);
        }
    }
}

/// Slots held by one job's ranks (see the module documentation): plain
/// data, given back only through [`NodeTable::release`].
#[derive(Debug)]
pub struct Reservation {
    node_of: Vec<NodeId>,
    /// Ranks whose slot is still held.
    held: Vec<bool>,
}

impl Reservation {
    /// The node of each rank.
    pub fn node_of(&self) -> &[NodeId] {
        &self.node_of
    }

    /// How many ranks still hold their slot.
    pub fn held(&self) -> usize {
        self.held.iter().filter(|&&h| h).count()
    }

    pub fn node(&self, rank: usize) -> Option<NodeId> {
        self.node_of.get(rank).copied()
    }

    /// The node of each rank still holding its slot (the tree's ledger).
    pub fn held_nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.node_of.iter().zip(&self.held).filter(|(_, h)| **h).map(|(n, _)| *n)
    }
}

/// The node of each of `n` ranks. By default each node is filled to its
/// slots in turn (`ppn` sets a fixed count per node instead); with
/// `map_by_node` ranks are dealt round-robin. Ranks beyond all slots wrap
/// around (oversubscription), keeping the same pattern.
pub fn fill(n: usize, slots: &[u32], ppn: Option<u32>, map_by_node: bool) -> Vec<usize> {
    let nodes = slots.len().max(1);
    if map_by_node {
        return (0..n).map(|r| r % nodes).collect();
    }
    let per_node: Vec<usize> = (0..nodes).map(|k| ppn.unwrap_or_else(|| slots.get(k).copied().unwrap_or(1)).max(1) as usize).collect();
    let mut out = Vec::with_capacity(n);
    let mut node = 0;
    let mut used = 0;
    while out.len() < n {
        if used == per_node[node] {
            node = (node + 1) % nodes;
            used = 0;
        }
        out.push(node);
        used += 1;
    }
    out
}

/// `n` ranks into the slots other jobs leave free (`load` per node), filling
/// nodes in order; `None` if they do not fit.
pub fn in_free(n: usize, slots: &[u32], load: &[i64]) -> Option<Vec<usize>> {
    let mut out = Vec::with_capacity(n.min(slots.iter().map(|&s| s as usize).sum()));
    for (node, &s) in slots.iter().enumerate() {
        let free = (i64::from(s) - load.get(node).copied().unwrap_or(0)).max(0) as usize;
        out.extend(std::iter::repeat_n(node, free.min(n - out.len())));
    }
    (out.len() == n).then_some(out)
}

mod growth;
pub use growth::{JoinError, JOIN_ROOM};
mod place;
mod reform;
pub use reform::ReattachError;

#[cfg(test)]
mod growth_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn table(slots: &[u32]) -> NodeTable {
        NodeTable::new(slots.iter().enumerate().map(|(i, &s)| (format!("h{i}"), s)), 2)
    }

    /// A placement as bare node indices.
    fn idx(node_of: &[NodeId]) -> Vec<usize> {
        node_of.iter().map(|n| n.0).collect()
    }

    #[test]
    fn a_booted_run_never_goes_to_a_lost_or_draining_node() {
        let mut t = table(&[2, 2, 2]);
        t.set_state(NodeId(0), NodeState::Lost);
        t.set_state(NodeId(2), NodeState::Draining);
        assert!(t.fits_free(2) && !t.fits_free(3), "only node 1's slots count");
        assert_eq!(t.usable_slots(), 2, "only node 1's slots count");
        assert_eq!(idx(&t.plan_booted(2, None, false)), vec![1, 1]);
        assert_eq!(idx(&t.plan_booted(3, None, false)), vec![1, 1, 1], "wrapped on the nodes up");
        assert_eq!(idx(&t.plan_booted(2, Some(1), false)), vec![1, 1]);
        // A lost interior node takes its subtree with it, each said once.
        let mut t = NodeTable::new((0..5).map(|i| (format!("h{i}"), 1)), 2);
        assert_eq!(t.lose(NodeId(0), "its daemon exited"), vec![NodeId(0), NodeId(2), NodeId(3)]);
        assert_eq!(t.lose(NodeId(2), "again"), vec![], "known already");
        assert_eq!(t.lost_reason(NodeId(0)), Some("its daemon exited"));
        assert_eq!(t.lost_reason(NodeId(3)), Some("below node 0 (h0), which was lost"));
        assert_eq!(idx(&t.plan_booted(2, None, false)), vec![1, 4]);
    }

    #[test]
    fn placement_in_free_slots_skips_busy_nodes() {
        assert_eq!(in_free(3, &[2, 2, 2], &[2, 1, 0]), Some(vec![1, 2, 2]));
        assert_eq!(in_free(2, &[2, 2], &[0, 0]), Some(vec![0, 0]));
        assert_eq!(in_free(4, &[2, 2], &[1, 0]), None);
        assert_eq!(in_free(1, &[2], &[5]), None);
    }

    #[test]
    fn placement_fills_slots_or_deals_round_robin() {
        assert_eq!(fill(5, &[2, 2], None, false), vec![0, 0, 1, 1, 0]);
        assert_eq!(fill(4, &[4], None, false), vec![0, 0, 0, 0]);
        assert_eq!(fill(5, &[8, 8, 8], Some(2), false), vec![0, 0, 1, 1, 2]);
        assert_eq!(fill(5, &[8, 8], None, true), vec![0, 1, 0, 1, 0]);
        assert_eq!(fill(3, &[1, 2], None, false), vec![0, 1, 1]);
    }

    #[test]
    fn a_reservation_gives_its_slots_back_rank_by_rank_or_all_at_once() {
        let mut t = table(&[2, 2]);
        let placed = t.place_first(3, None, false);
        assert_eq!(idx(&placed), vec![0, 0, 1]);
        assert_eq!(t.loads(), vec![0, 0], "a placement holds nothing");
        let mut r = t.reserve(&placed).unwrap();
        assert_eq!(t.loads(), vec![2, 1]);
        t.release(&mut r, 0);
        t.release(&mut r, 0); // once only
        t.release(&mut r, 9); // out of range: nothing
        assert_eq!((t.loads(), r.held()), (vec![1, 1], 2));
        t.release_all(&mut r);
        assert_eq!((t.loads(), r.held()), (vec![0, 0], 0));
        // A placement that cannot be reserved takes nothing.
        assert_eq!(t.reserve(&[0, 5].map(NodeId)).unwrap_err(), PlaceError::NoSuchNode { rank: 1, node: NodeId(5), nodes: 2 });
        assert_eq!(t.live(), 0);
    }

    #[test]
    fn a_booted_run_goes_into_free_slots_with_the_default_placement_only() {
        let mut t = table(&[2, 2, 2]);
        let _busy = t.reserve(&[0, 0, 1].map(NodeId)).unwrap();
        assert_eq!(idx(&t.plan_booted(3, None, false)), vec![1, 2, 2]);
        assert_eq!(idx(&t.plan_booted(3, Some(1), false)), vec![0, 1, 2], "-ppn places as always");
        assert_eq!(idx(&t.plan_booted(4, None, false)), vec![0, 0, 1, 1], "does not fit: as a first job");
    }

    #[test]
    fn spawns_go_to_the_most_free_allowed_node() {
        let mut t = table(&[2, 2, 2]);
        let _busy = t.reserve(&[0, 0].map(NodeId)).unwrap();
        assert_eq!(idx(&t.place_spawn(&[0, 0, 0], &[None], true, -1).unwrap()), vec![1, 2, 1]);
        // `host` info: only the named nodes, oversubscribed when allowed.
        assert_eq!(idx(&t.place_spawn(&[0, 1, 1], &[Some(vec![2]), Some(vec![0])], true, -1).unwrap()), vec![2, 0, 0]);
    }

    #[test]
    fn no_oversubscribe_refuses_full_nodes_and_the_universe() {
        let mut t = table(&[1, 1]);
        let _busy = t.reserve(&[0].map(NodeId)).unwrap();
        assert_eq!(t.place_spawn(&[0], &[Some(vec![0])], false, -1).unwrap_err(), PlaceError::Full);
        assert_eq!(t.place_spawn(&[0, 0], &[None], false, 2).unwrap_err(), PlaceError::OverUniverse { size: 2, slots: 2, live: 1 });
        assert_eq!(t.live(), 1, "a refused spawn holds nothing");
        assert_eq!(idx(&t.place_spawn(&[0], &[None], false, 2).unwrap()), vec![1]);
    }

    #[test]
    fn a_soft_spawn_takes_the_largest_allowed_count_that_fits() {
        let mut t = table(&[2, 2]);
        let _busy = t.reserve(&[0].map(NodeId)).unwrap();
        // 3 slots free: of 1..=5 it starts 3, spread as a spawn of 3 would be.
        let (r, n) = t.place_spawn_soft(&[vec![5, 4, 3, 2, 1]], &[None], false, 4).unwrap();
        assert_eq!((idx(&r), n), (vec![1, 0, 1], vec![3]));
        // Only even counts allowed: 2 of the 3 free slots.
        let (r, n) = t.place_spawn_soft(&[vec![4, 2]], &[None], false, 4).unwrap();
        assert_eq!((idx(&r), n), (vec![1, 0], vec![2]));
        let mut held = t.reserve(&r).unwrap();
        assert_eq!(t.live(), 3, "the reservation holds only what started");
        t.release_all(&mut held);
        // The universe limits as much as the nodes do.
        let (_r, n) = t.place_spawn_soft(&[vec![3, 2, 1]], &[None], false, 2).unwrap();
        assert_eq!(n, vec![1]);
    }

    #[test]
    fn a_soft_spawn_fills_its_apps_in_order_and_fails_as_a_whole() {
        let mut t = table(&[2, 2]);
        let (r, n) = t.place_spawn_soft(&[vec![3, 2, 1], vec![2, 1]], &[None, None], false, 4).unwrap();
        assert_eq!((idx(&r), n), (vec![0, 1, 0, 1], vec![3, 1]));
        let mut r = t.reserve(&r).unwrap();
        let err = t.place_spawn_soft(&[vec![2]], &[None], false, 4).unwrap_err();
        assert_eq!(err, PlaceError::OverUniverse { size: 2, slots: 4, live: 4 });
        // Node 1 named alone by `host`: its 2 slots are full, no universe.
        let err = t.place_spawn_soft(&[vec![1]], &[Some(vec![1])], false, -1).unwrap_err();
        assert_eq!(err, PlaceError::Full);
        assert_eq!(t.live(), 4, "a refused soft spawn holds nothing");
        assert!(err.is_no_room(), "{err}");
        assert!(!PlaceError::NoNode.is_no_room(), "no node to place on is no passing state");
        t.release_all(&mut r);
        // An app that fits none of its counts refuses the whole spawn.
        let err = t.place_spawn_soft(&[vec![1], vec![4]], &[None, None], false, 4).unwrap_err();
        assert_eq!(err, PlaceError::OverUniverse { size: 4, slots: 4, live: 1 });
        assert_eq!(t.live(), 0);
        // Oversubscription allowed: always the largest count.
        let (_r, n) = t.place_spawn_soft(&[vec![9, 1]], &[None], true, 4).unwrap();
        assert_eq!(n, vec![9]);
    }

    #[test]
    fn lost_nodes_take_no_spawns() {
        let mut t = table(&[4, 4]);
        t.set_state(NodeId(1), NodeState::Lost);
        assert_eq!(idx(&t.place_spawn(&[0, 0], &[None], true, -1).unwrap()), vec![0, 0]);
        assert_eq!(t.place_spawn(&[0], &[Some(vec![1])], true, -1).unwrap_err(), PlaceError::NoNode);
    }

    #[test]
    fn the_table_knows_the_tree() {
        let t = NodeTable::new((0..7).map(|i| (format!("h{i}"), 1)), 2);
        assert_eq!(t.parent(NodeId(0)), None);
        assert_eq!(t.parent(NodeId(2)), Some(NodeId(0)));
        assert_eq!(t.children(NodeId(0)), vec![NodeId(2), NodeId(3)]);
        assert_eq!(t.subtree(NodeId(0)), vec![NodeId(0), NodeId(2), NodeId(3), NodeId(6)]);
        assert_eq!(t.host(NodeId(3)), "h3");
        assert_eq!(t.host(NodeId(9)), "?");
    }
}
