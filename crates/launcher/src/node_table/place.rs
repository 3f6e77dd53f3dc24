//! The placer: where a run's first job, a booted run's first job and a
//! spawn put their processes (see `crate::node_table`), computed from the
//! table's slots, states and load; it holds nothing (the slots are taken
//! by [`NodeTable::reserve`]).

use dpm_kvs::NodeId;

use super::{fill, in_free, NodeState, NodeTable, PlaceError};

impl NodeTable {
    /// A run's first job of `n` ranks (see [`fill`]).
    pub fn place_first(&self, n: usize, ppn: Option<u32>, map_by_node: bool) -> Vec<NodeId> {
        fill(n, &self.all_slots(), ppn, map_by_node).into_iter().map(NodeId).collect()
    }

    /// The nodes that take new processes (neither lost nor draining).
    fn up(&self) -> Vec<usize> {
        (0..self.len()).filter(|&n| self.nodes[n].state == NodeState::Up).collect()
    }

    /// Whether `n` processes fit in the free slots of the nodes that are up.
    pub fn fits_free(&self, n: usize) -> bool {
        let up = self.up();
        in_free(n, &up.iter().map(|&i| self.nodes[i].slots).collect::<Vec<_>>(), &up.iter().map(|&i| self.load(NodeId(i))).collect::<Vec<_>>()).is_some()
    }

    /// A booted run's first job, on the nodes that are up (a boot's lost or
    /// draining nodes take nothing): other runs' processes hold slots, so
    /// a job that fits in the free slots goes there (the default placement
    /// only); else it is placed as a first job on those nodes. Reserves
    /// nothing: the run reserves the placement when it launches the job.
    pub fn plan_booted(&self, n: usize, ppn: Option<u32>, map_by_node: bool) -> Vec<NodeId> {
        let up = self.up();
        if up.is_empty() {
            return self.place_first(n, ppn, map_by_node);
        }
        let slots: Vec<u32> = up.iter().map(|&i| self.nodes[i].slots).collect();
        let load: Vec<i64> = up.iter().map(|&i| self.load(NodeId(i))).collect();
        let default_placement = ppn.is_none() && !map_by_node;
        let picked = match in_free(n, &slots, &load) {
            Some(node_of) if default_placement => node_of,
            _ => fill(n, &slots, ppn, map_by_node),
        };
        picked.into_iter().map(|k| NodeId(up[k])).collect()
    }

    /// The slots of the nodes that take new processes (neither lost nor
    /// draining): what a booted run's universe may count.
    pub fn usable_slots(&self) -> i64 {
        self.up().iter().map(|&i| i64::from(self.nodes[i].slots)).sum()
    }

    /// Spawned processes, one per entry of `apps` (the app index of each):
    /// each goes to the allowed node (`allowed[app]`, `None`: any) with the
    /// most free slots, counting the ones already placed — never everything
    /// on the first node; when all are full, the least loaded, if
    /// `oversubscribe`. `universe`: the run's universe size (negative:
    /// unlimited), which the whole tree's live processes may not exceed
    /// without oversubscription. Lost and draining nodes take nothing.
    pub fn place_spawn(&self, apps: &[usize], allowed: &[Option<Vec<usize>>], oversubscribe: bool, universe: i64) -> Result<Vec<NodeId>, PlaceError> {
        let size = u32::try_from(apps.len()).unwrap_or(u32::MAX);
        let live = self.live();
        if !oversubscribe && universe >= 0 && live + i64::from(size) > universe {
            return Err(PlaceError::OverUniverse { size, slots: universe, live });
        }
        let mut load = self.loads();
        let mut out = Vec::with_capacity(apps.len());
        for &app in apps {
            let node = self.pick(allowed.get(app).and_then(|a| a.as_deref()), &load, oversubscribe)?;
            load[node] += 1;
            out.push(NodeId(node));
        }
        Ok(out)
    }

    /// A `soft` spawn: app `a` may start any count of `counts[a]` (largest
    /// first). Apps in order, each takes the largest allowed count that
    /// fits the slots (and the universe) left after the ones before it,
    /// placed as [`NodeTable::place_spawn`] places; with oversubscription
    /// allowed that is always the largest. Returns the placement (each
    /// app's processes in turn) and the count of each app; refused, holding
    /// nothing, when some app fits none of its counts.
    pub fn place_spawn_soft(
        &self,
        counts: &[Vec<u32>],
        allowed: &[Option<Vec<usize>>],
        oversubscribe: bool,
        universe: i64,
    ) -> Result<(Vec<NodeId>, Vec<u32>), PlaceError> {
        let live = self.live();
        let limited = !oversubscribe && universe >= 0;
        let mut load = self.loads();
        let mut out = Vec::new();
        let mut started = Vec::with_capacity(counts.len());
        for (app, choices) in counts.iter().enumerate() {
            let want = choices.first().copied().unwrap_or(0) as usize;
            let nodes = allowed.get(app).and_then(|a| a.as_deref());
            // Place greedily until the most wanted or the first refusal: the
            // first k of these are where any k would go.
            let mut placed = Vec::new();
            let mut refusal = None;
            while placed.len() < want {
                let in_use = live + (out.len() + placed.len()) as i64;
                if limited && in_use >= universe {
                    refusal =
                        Some(PlaceError::OverUniverse { size: choices.last().copied().unwrap_or(1), slots: universe, live: in_use - placed.len() as i64 });
                    break;
                }
                match self.pick(nodes, &load, oversubscribe) {
                    Ok(node) => {
                        load[node] += 1;
                        placed.push(node);
                    }
                    Err(e) => {
                        refusal = Some(e);
                        break;
                    }
                }
            }
            let Some(&n) = choices.iter().find(|&&n| n as usize <= placed.len()) else {
                return Err(refusal.unwrap_or(PlaceError::NoNode));
            };
            for node in placed.drain(n as usize..) {
                load[node] -= 1;
            }
            out.extend(placed.into_iter().map(NodeId));
            started.push(n);
        }
        Ok((out, started))
    }

    /// The node for one more spawned process: the allowed (`None`: any) up
    /// node with the most free slots given `load`; the lowest-numbered of
    /// equals. A full node only with `oversubscribe`.
    fn pick(&self, allowed: Option<&[usize]>, load: &[i64], oversubscribe: bool) -> Result<usize, PlaceError> {
        let up = |n: &usize| self.state(NodeId(*n)) == Some(NodeState::Up);
        let candidates: Vec<usize> = match allowed {
            Some(list) => list.iter().copied().filter(up).collect(),
            None => (0..self.len()).filter(up).collect(),
        };
        let free = |n: usize| i64::from(self.slots(NodeId(n))) - load[n];
        let best = candidates.iter().copied().max_by_key(|&n| (free(n), std::cmp::Reverse(n)));
        let Some(node) = best else { return Err(PlaceError::NoNode) };
        if free(node) <= 0 && !oversubscribe {
            return Err(PlaceError::Full);
        }
        Ok(node)
    }
}
