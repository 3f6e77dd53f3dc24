//! The tree's membership events: nodes that join a running tree
//! (`dpm boot --add`), drain and leave it (`dpm boot --drain`). The driver
//! starts and links the daemons (`boot::grow`); the table, the pool and the
//! runs change here, through [`TreeEffects`] only. A drained node leaves in
//! the event that empties it (a rank's end, a run's, a pooled job's
//! eviction): [`TreeEffects::node_left`], its link for the driver to shut.

use dpm_kvs::NodeId;

use super::{Tree, TreeEffects};
use crate::node_table::{JoinError, NodeState};

impl Tree {
    /// `nodes` (host, slots) enter the table as joining (taking nothing
    /// until [`Tree::joined`]); refused whole, the table as before.
    pub fn join(&mut self, nodes: &[(String, u32)]) -> Result<Vec<NodeId>, JoinError> {
        let table = &mut self.parts.nodes;
        let mut ids = Vec::new();
        for (host, slots) in nodes {
            match table.join(host, *slots) {
                Ok(id) => ids.push(id),
                Err(e) => {
                    for &id in ids.iter().rev() {
                        table.unjoin(id);
                    }
                    return Err(e);
                }
            }
        }
        Ok(ids)
    }

    /// The joining nodes' daemons are linked: they take processes from now.
    /// A line for each.
    pub fn joined(&mut self, ids: &[NodeId]) -> Vec<String> {
        let table = &mut self.parts.nodes;
        ids.iter()
            .map(|&id| {
                table.joined(id);
                format!("{id} ({}) joined with {} slot(s)", table.host(id), table.slots(id))
            })
            .collect()
    }

    /// The joining nodes' daemons did not come: out of the table again.
    pub fn unjoin(&mut self, ids: &[NodeId]) {
        for &id in ids.iter().rev() {
            self.parts.nodes.unjoin(id);
        }
    }

    /// Mark `hosts` draining. With `force`, each run with ranks there hears
    /// why and its jobs there are killed (the run ends as for a killed
    /// rank). Pooled jobs there (warm spawn) are dropped either way, so the
    /// node empties. The lines to answer; an unknown host, or draining the
    /// last node that takes ranks, refuses the whole request.
    pub fn drain(&mut self, fx: &mut dyn TreeEffects, hosts: &[String], force: bool) -> Result<Vec<String>, String> {
        let mut targets = Vec::new();
        for host in hosts {
            let found = self.parts.nodes.of_host(host);
            if found.is_empty() {
                return Err(format!("{host} is not a node of this boot that is up"));
            }
            targets.extend(found);
        }
        let nodes = &self.parts.nodes;
        if !nodes.ids().any(|n| nodes.state(n) == Some(NodeState::Up) && !targets.contains(&n)) {
            return Err(format!("draining {} would leave the boot no node to run on (`dpm down` ends it)", hosts.join(", ")));
        }
        let mut said = Vec::new();
        for &node in &targets {
            let host = self.parts.nodes.host(node).to_string();
            let newly = self.parts.nodes.drain(node);
            self.with_pool(fx, |pool, table, pfx| pool.drop_on(pfx, table, &[node]));
            let load = self.parts.nodes.load(node);
            said.push(match (newly, load) {
                (false, _) => format!("{node} ({host}) was draining already ({load} rank(s) there)"),
                (true, 0) => format!("{node} ({host}) draining: no ranks there"),
                (true, _) if force => format!("{node} ({host}) draining: its {load} rank(s) are killed now (--force)"),
                (true, _) => format!("{node} ({host}) draining: it takes no new ranks; its daemon leaves once its {load} rank(s) ended"),
            });
            if force && load > 0 {
                self.force_off(fx, node, &host);
            }
        }
        self.draining = true;
        said.extend(self.release_drained(fx));
        Ok(said)
    }

    /// `--force`: the runs with ranks on `node` hear why first (their
    /// ranks' table names each one's host); then that node's daemon kills
    /// every job's ranks there.
    fn force_off(&mut self, fx: &mut dyn TreeEffects, node: NodeId, host: &str) {
        let why = format!("dpm: node {} ({host}) is drained with --force: its ranks are killed", node.0);
        let jobs: Vec<dpm_kvs::JobId> = self.parts.jobs.keys().copied().collect();
        let mut owners: Vec<u32> = jobs
            .iter()
            .filter(|j| self.parts.ranks.get(j).is_some_and(|r| r.iter().any(|r| r.host == host)))
            .filter_map(|j| self.parts.jobs.get(j).map(|(owner, ..)| *owner))
            .collect();
        owners.sort_unstable();
        owners.dedup();
        for owner in owners {
            fx.say(owner, &why);
        }
        for job in jobs {
            fx.send(node, dpm_proto::ToDaemon::Signal { job, signal: libc::SIGKILL });
        }
    }

    /// After an event, while a node drains: the drained nodes that may
    /// leave now (empty, nothing below them, linked straight to the
    /// driver) are released in the table, each told the driver
    /// ([`TreeEffects::node_left`]). Their lines.
    pub(super) fn release_drained(&mut self, fx: &mut dyn TreeEffects) -> Vec<String> {
        if !self.draining {
            return Vec::new();
        }
        let nodes = &mut self.parts.nodes;
        let leaving: Vec<NodeId> = nodes.ids().filter(|&n| nodes.may_leave(n) && nodes.parent(n).is_none()).collect();
        let lines = leaving
            .into_iter()
            .map(|node| {
                nodes.release_node(node);
                let line = format!("{node} ({}) drained: its daemon left, its {} slot(s) released", nodes.host(node), nodes.slots(node));
                fx.node_left(node, &line);
                line
            })
            .collect();
        self.draining = self.any_draining();
        lines
    }

    /// Whether a node drains and waits to leave (checked again as ranks end).
    pub fn any_draining(&self) -> bool {
        let nodes = &self.parts.nodes;
        nodes.ids().any(|n| nodes.state(n) == Some(NodeState::Draining) && nodes.parent(n).is_none())
    }
}
