//! The nodes' side of the cluster: a tree node's actions passed on by next
//! hop, a frame's arrival time on the links, each host's resources, and a
//! node reactor called with its recorded effects, each effect carried out
//! (the scripted processes' side is `scripted`, the launcher's `launcher`).

use dpm_daemon::node::recorder::Recorded;
use dpm_daemon::tree::TreeAction;

use super::*;

impl Cluster {
    pub(super) fn tree_actions(&mut self, node: usize, actions: Vec<TreeAction>) {
        for action in actions {
            match action {
                TreeAction::Own(msg) => self.with_node(node, |r, fx| r.on_message(fx, msg)),
                TreeAction::Child { hop: child, node: to, msg } => {
                    let at = self.frame_arrival(Some(node), &msg);
                    self.schedule_at(at, Event::Down { node: child.0, to, msg });
                }
                TreeAction::Parent { origin, msg } => {
                    let to = self.parent_of(node);
                    let at = self.frame_arrival(Some(node), &msg);
                    self.schedule_at(at, Event::Up { to, origin, msg });
                }
            }
        }
    }

    /// When a frame sent now by `from` (`None`: the launcher) arrives: after
    /// its bytes have left the sender's NIC, and one hop.
    pub(super) fn frame_arrival(&mut self, from: Option<usize>, msg: &impl serde::Serialize) -> Duration {
        let costs = self.layout.costs;
        if costs.link_byte_ns <= 0.0 {
            return self.now + costs.link_hop;
        }
        // As `dpm_proto::frame` sends it: a 4-byte length, then postcard.
        let bytes = 4 + postcard::to_allocvec(msg).map_or(0, |v| v.len());
        let wire = Duration::from_nanos((bytes as f64 * costs.link_byte_ns).round() as u64);
        let now = self.now;
        self.res(from).send(now, wire) + costs.link_hop
    }

    /// The cores and NIC of node `at`'s host (`None`: the launcher's).
    pub(super) fn res(&mut self, at: Option<usize>) -> &mut NodeResources {
        let i = if self.layout.costs.one_host { 0 } else { at.unwrap_or(self.nodes.len()) };
        &mut self.res[i]
    }

    /// Call the node's reactor and carry out its effects. Starts are
    /// asynchronous, as on a real node: each is answered (`Event::Started`)
    /// once its fork and exec are done on the node's cores.
    pub(super) fn with_node(&mut self, node: usize, call: impl FnOnce(&mut NodeReactor, &mut RecordingEffects)) {
        let n = &mut self.nodes[node];
        call(&mut n.reactor, &mut n.fx);
        // Each node's parts agree after every event it handles.
        if self.check_nodes {
            if let Err(broken) = n.reactor.check_invariants() {
                panic!("node {node}: a node reactor invariant is broken: {broken}");
            }
        }
        let now = self.now;
        n.fx.started.clear(); // answered by Event::Started, in simulated time
        for effect in n.fx.take() {
            self.node_effect(node, effect);
        }
        self.now = now;
    }

    /// Carry out what a node's reactor asked for (pids are per node, as on
    /// real nodes; what a cluster has no use for is dropped).
    pub(super) fn node_effect(&mut self, node: usize, effect: Recorded) {
        match effect {
            Recorded::Up(msg) => {
                let actions = self.nodes[node].tree.from_below(NodeId(node), msg);
                self.tree_actions(node, actions);
            }
            Recorded::PmiWrite(conn, bytes) => {
                if let Some(&proc) = self.conns.get(&(node, conn)) {
                    self.schedule(self.layout.costs.pmi_io, Event::Reply { proc, bytes });
                }
            }
            Recorded::PmiDrop(conn) => {
                self.conns.remove(&(node, conn));
            }
            Recorded::Start(batch) => {
                for start in batch {
                    // The start's answer comes back to the reactor as an event,
                    // as from a real node's spawner threads, never from here.
                    // It comes once the fork and exec are done (below); a
                    // start that failed comes back at once.
                    let event = Event::Started { node, job: start.job, rank: start.rank, result: start.result.clone() };
                    let Ok(started) = start.result else {
                        self.schedule(Duration::ZERO, event);
                        continue;
                    };
                    let script = start.argv.get(1).and_then(|name| self.scripts.get(name)).cloned().unwrap_or_default();
                    let proc = self.procs.len();
                    if let Some(conn) = start.pmi_conn {
                        self.conns.insert((node, conn), proc);
                    }
                    self.procs.push(Process {
                        node,
                        job: start.job,
                        rank: start.rank,
                        pid: started.pid,
                        pgid: started.pgid,
                        conn: start.pmi_conn,
                        proc: Proc::new(&script, &start.env.vars),
                        end: None,
                        started_at: self.now,
                        forked_at: Duration::ZERO,
                        ready_at: Duration::ZERO,
                        ended_at: None,
                        reply_times: Vec::new(),
                        request_times: Vec::new(),
                        waiting: false,
                        ignores_term: false,
                    });
                    // The fork and exec on the node, then the rank's own library start.
                    let costs = self.layout.costs;
                    let now = self.now;
                    let res = self.res(Some(node));
                    let forked = res.cpu(now, costs.fork_exec);
                    let ready = res.cpu(forked, costs.lib_cpu) + costs.lib_wait + costs.proc_start;
                    self.procs[proc].forked_at = forked;
                    self.procs[proc].ready_at = ready;
                    self.schedule_at(forked, event);
                    self.schedule_at(ready, Event::Wake { proc });
                }
            }
            Recorded::KillGroup { pgid, signal } => {
                let victims: Vec<usize> = (0..self.procs.len()).filter(|&i| self.procs[i].node == node && self.procs[i].pgid == pgid).collect();
                for v in victims {
                    self.kill(v, signal);
                }
            }
            Recorded::KillProcess { pid, signal } => {
                if let Some(v) = self.procs.iter().position(|p| p.node == node && p.pid == pid) {
                    self.kill(v, signal);
                }
            }
            Recorded::SetTimer(after, timer) => self.schedule(after, Event::NodeTimer { node, timer }),
            Recorded::RemoveShm { job, .. } => self.shm_removed.push((node, job)),
            Recorded::OpenWatch(job, port) => {
                self.watches.insert((node, port), job);
            }
            Recorded::CloseWatch(job) => self.watches.retain(|&(n, _), j| n != node || *j != job),
            _ => {} // ports, adopted processes, stdin, leaders: nothing to do here
        }
    }
}
