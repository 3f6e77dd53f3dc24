//! How a run's jobs end: lost nodes and parents, a job's end
//! (`check_done`), signals to `dpm run`, its timers (the `--timeout`
//! with its reports, the kill grace, the listing, warm spawn's), and the
//! end of the run ([`Run::settle`], `finish`) — the exit and verdict side
//! of [`Run`]; its daemon messages are routed in `run/mod.rs`.

use dpm_kvs::{JobId, NodeId};
use dpm_proto::control::TimeoutReport;
use dpm_proto::ToDaemon;

use super::{effects, invariants, names, report, send_all, signal_name, warm, Run, RunEffects, RunView, Timer, TreeShared};
use crate::node_table::NodeState;

impl Run {
    /// The link to `node` broke (its daemon killed, its host lost, silent too
    /// long): that node and the subtree below it are gone.
    pub fn on_node_lost(&mut self, fx: &mut dyn RunEffects, node: NodeId, error: String) {
        self.node_lost(fx, node, error);
        self.settle(fx);
    }

    /// The daemon of `node` took its parent for lost (silent, or stopped)
    /// and ends its ranks. Its parent is the one at fault: the daemon above
    /// it — or, for a top-level daemon, this launcher itself (stopped with
    /// SIGSTOP, or starved of CPU): then no node is blamed.
    pub fn on_parent_lost(&mut self, fx: &mut dyn RunEffects, node: NodeId, error: String) {
        let nodes = &fx.shared().nodes;
        if !nodes.contains(node) {
            return;
        }
        match nodes.parent(node) {
            Some(parent) => {
                let host = nodes.host(node).to_string();
                self.node_lost(fx, parent, format!("node {} ({host}) below it {error}", node.0));
            }
            None => {
                let summary = format!(
                    "dpm itself went silent for longer than its daemons wait (stopped with SIGSTOP, or starved of CPU): node {} {error}; its ranks were ended",
                    node.0
                );
                self.node_lost_because(fx, node, summary);
            }
        }
        self.settle(fx);
    }

    /// The tree re-formed around a lost node: the KVS root's parts follow
    /// the new shape (`tops`: the nodes re-attached below the launcher).
    pub fn reformed(&mut self, tops: &std::collections::BTreeSet<NodeId>) {
        self.kvs.reformed(tops);
    }

    /// A fence of `job` was in flight through the daemon above `node` when
    /// it was lost (`node` re-attached and says so): the job cannot
    /// complete it, and the run ends as for a lost node, naming it.
    pub(super) fn fence_cut(&mut self, fx: &mut dyn RunEffects, node: NodeId, job: JobId, epoch: u64) {
        if !self.jobs.contains(job) || self.verdict.ending() {
            return;
        }
        let nodes = &fx.shared().nodes;
        let via = dpm_proto::tree::parent(node, nodes.fanout()).unwrap_or(node);
        let of_job = if job.0 == 0 { String::new() } else { format!(" of job {}", job.0) };
        let summary = format!(
            "node {} ({}) was lost while a PMI fence{of_job} (epoch {epoch}) from node {} ({}) passed through it: the fence cannot complete",
            via.0,
            nodes.host(via),
            node.0,
            nodes.host(node)
        );
        self.verdict.record_node_lost(summary);
        self.jobs.kill_all(fx, libc::SIGKILL);
    }

    /// A daemon's link broke: its processes are gone — and those of every
    /// node below it in the tree — and the jobs using them cannot go on.
    fn node_lost(&mut self, fx: &mut dyn RunEffects, node: NodeId, error: String) {
        let nodes = &fx.shared().nodes;
        // A drained node's daemon that left (`dpm boot --drain`) ran nothing.
        if !nodes.contains(node) || nodes.state(node) == Some(NodeState::Released) {
            return;
        }
        let host = nodes.host(node).to_string();
        self.node_lost_because(fx, node, format!("node {} ({host}) was lost: {error}", node.0));
    }

    /// `node` and its subtree are gone; `summary` says why (the run's
    /// failure, if it is the first).
    fn node_lost_because(&mut self, fx: &mut dyn RunEffects, node: NodeId, summary: String) {
        let nodes = &mut fx.shared().nodes;
        if !nodes.contains(node) {
            return;
        }
        // Nodes below it waiting to re-attach (`NodeTable::detach`) run on.
        let lost: Vec<NodeId> = nodes.subtree(node).into_iter().filter(|&n| nodes.state(n) != Some(NodeState::Detached)).collect();
        for &n in &lost {
            nodes.set_state(n, NodeState::Lost);
        }
        effects::with_pool(fx, |pool, nodes, pfx| pool.on_nodes_lost(pfx, nodes, &lost));
        let affected = self.jobs.lose_nodes(&mut fx.shared().nodes, &lost);
        if affected.is_empty() {
            // None of its ranks ran there: the run goes on (another run of
            // a boot, or one whose nodes there were idle); the node takes
            // nothing new. After the run, daemons going away is expected.
            return;
        }
        self.verdict.record_node_lost(summary);
        self.jobs.kill_all(fx, libc::SIGKILL);
        for job in affected {
            self.check_done(fx, job);
        }
    }

    /// A job whose every rank has ended is over: its daemons forget it, its
    /// names are withdrawn, its collectives fail, its slots were given back
    /// (each as its rank ended: `NodeTable::release`), and warm spawn hears of it.
    pub(super) fn check_done(&mut self, fx: &mut dyn RunEffects, job: JobId) {
        let Some(mut j) = self.jobs.remove_done(job) else { return };
        self.kvs.remove_job(job);
        tracing::debug!(%job, "job ended");
        if let Some((node, request)) = j.take_spawn_request() {
            fx.send(node, ToDaemon::SpawnDone { request, result: Err(format!("{job} ended before all its processes started")), errcodes: Vec::new() });
        }
        for &d in j.daemons() {
            fx.send(d, ToDaemon::Forget { job });
        }
        fx.shared().route(job, None);
        fx.shared().jobs.remove(&job);
        fx.shared().ranks.remove(&job);
        names::job_ended(fx, job, j.kvsname());
        // The claims its spawns were making go, then the pool made for them.
        for orphan in self.warm.claims_of(job) {
            self.warm_drop(fx, orphan, None);
        }
        let (warm, cx) = self.warm_parts();
        warm.parent_ended(&cx, fx, job);
        let out = fx.shared().connects_job_ended(job);
        send_all(fx, out);
        send_all(fx, self.connects.job_ended(job));
        if j.spawned() && !j.pool() {
            let (warm, cx) = self.warm_parts();
            warm.job_ended(&cx, fx);
        }
        if j.alone_since().is_some() || j.pool() {
            return; // its failure was its own (or a pooled job's); its ranks are nobody's business
        }
        let terminated = j.terminated(job, self.verdict.failed_rank());
        if terminated > 0 {
            self.verdict.terminated.push((job, terminated));
        }
    }

    /// The tree this run uses is going away (`why`: a node of the boot was
    /// lost): the run ends as after a lost node — `why` is its failure if
    /// it has none yet, every process gets SIGTERM, SIGKILL after the grace —
    /// without claiming that dpm got a signal (issue 26: a booted run whose
    /// node was lost first said "got SIGTERM; forwarding it").
    pub fn on_end(&mut self, fx: &mut dyn RunEffects, why: String) {
        self.end_with(fx, why);
        self.settle(fx);
    }

    pub(super) fn end_with(&mut self, fx: &mut dyn RunEffects, why: String) {
        self.verdict.record_node_lost(why);
        self.jobs.kill_all(fx, libc::SIGTERM);
        fx.arm(Timer::KillGrace, self.settings.kill_grace);
    }

    /// dpm itself got `sig`: forward it to every process; a second signal
    /// kills at once, else SIGKILL follows after the grace.
    pub fn on_signal(&mut self, fx: &mut dyn RunEffects, sig: i32) {
        if sig == libc::SIGQUIT {
            return self.report_now(fx);
        }
        if sig == crate::run_table::states_signal() {
            return self.list_states(fx);
        }
        let name = signal_name(sig);
        if self.verdict.interrupted.is_some() {
            fx.say(&format!("dpm: got {name} again; killing every process now"));
            self.jobs.kill_all(fx, libc::SIGKILL);
        } else {
            self.verdict.interrupted = Some(sig);
            fx.say(&format!("dpm: got {name}; forwarding it to every process"));
            self.jobs.kill_all(fx, sig);
            fx.arm(Timer::KillGrace, self.settings.kill_grace);
        }
        self.settle(fx);
    }

    /// `dpm run` is stopping (Ctrl-Z: `stop`) or has been continued (`fg`):
    /// every process of the run gets SIGSTOP or SIGCONT; the jobs go on.
    pub fn on_stop(&mut self, fx: &mut dyn RunEffects, stop: bool) {
        let signal = if stop { libc::SIGSTOP } else { libc::SIGCONT };
        self.jobs.signal_all(fx, signal);
        // And the pooled jobs made for it (the tree's pool holds them).
        let owner = self.settings.owner;
        effects::with_pool(fx, |pool, _, pfx| pool.signal_made_for(pfx, owner, signal));
    }

    /// A deadline armed with [`RunEffects::arm`] has come.
    pub fn on_timer(&mut self, fx: &mut dyn RunEffects, timer: Timer) {
        match timer {
            Timer::Timeout if !self.verdict.timed_out => {
                let Some(timeout) = self.timeout else { return };
                self.verdict.timed_out = true;
                // A SIGQUIT's reports still awaited: the timeout's are asked anew.
                self.reports = None;
                let stacks = match self.settings.on_timeout {
                    TimeoutReport::Nothing => None,
                    TimeoutReport::State => Some(false),
                    TimeoutReport::Stacks => Some(true),
                };
                self.reports = stacks.and_then(|stacks| report::Reports::ask(&self.jobs, fx, stacks));
                if self.reports.is_some() {
                    fx.say(&format!("dpm: job timed out after {} s; its ranks, before they are killed:", timeout.as_secs_f64()));
                    fx.arm(Timer::Reports, report::REPORT_WAIT);
                } else {
                    fx.say(&format!("dpm: job timed out after {} s; killing it", timeout.as_secs_f64()));
                    self.kill_at_timeout(fx);
                }
            }
            Timer::Reports => {
                if let Some(reports) = self.reports.take() {
                    reports.give_up(fx, &self.jobs);
                    self.reports_done(fx);
                }
            }
            Timer::Listing => self.listed_if_done(fx, true),
            Timer::Timeout => {}
            Timer::KillGrace => self.jobs.kill_all(fx, libc::SIGKILL),
            Timer::WarmRefill => {
                let (warm, cx) = self.warm_parts();
                warm.on_refill_timer(&cx, fx);
            }
            Timer::WarmLearn => {
                let (warm, cx) = self.warm_parts();
                warm.on_learn_timer(&cx, fx);
            }
            Timer::WarmNext => {
                let (warm, cx) = self.warm_parts();
                warm.on_next_timer(&cx, fx);
            }
        }
        self.settle(fx);
    }

    /// SIGQUIT (Ctrl-\) to `dpm run`: every live rank's state and stack,
    /// as at a `--timeout` with `--get-stack-traces`; the run goes on.
    fn report_now(&mut self, fx: &mut dyn RunEffects) {
        if self.reports.is_some() || self.verdict.ending() {
            return;
        }
        self.reports = report::Reports::ask(&self.jobs, fx, true);
        if self.reports.is_some() {
            fx.say("dpm: got SIGQUIT; the run's ranks (the run goes on):");
            fx.arm(Timer::Reports, report::REPORT_WAIT);
        }
    }

    /// A tool asks for the ranks' PMI states in the run's table
    /// (`report::Listing`); one listing at a time.
    fn list_states(&mut self, fx: &mut dyn RunEffects) {
        if self.listing.is_none() {
            self.listing = Some(report::Listing::ask(&self.jobs, fx));
            fx.arm(Timer::Listing, report::LIST_WAIT);
            self.listed_if_done(fx, false);
        }
    }

    /// The listing is over once every state is in, or (`waited`) at its bound.
    pub(super) fn listed_if_done(&mut self, fx: &mut dyn RunEffects, waited: bool) {
        if waited || self.listing.as_ref().is_some_and(report::Listing::done) {
            if let Some(listing) = self.listing.take() {
                listing.finish(fx, &self.jobs, self.settings.owner);
            }
        }
    }

    /// The reports are all in or their wait is over: at the timeout, the kill.
    pub(super) fn reports_done(&mut self, fx: &mut dyn RunEffects) {
        if self.verdict.timed_out {
            self.kill_at_timeout(fx);
        }
    }

    /// `--timeout`: SIGTERM to every job, SIGKILL after the grace.
    fn kill_at_timeout(&mut self, fx: &mut dyn RunEffects) {
        self.jobs.kill_all(fx, libc::SIGTERM);
        fx.arm(Timer::KillGrace, self.settings.kill_grace);
    }

    /// The daemons' stream ended: nothing more will be heard of any job.
    pub fn on_daemons_gone(&mut self, fx: &mut dyn RunEffects) {
        self.verdict.record(1, "dpm: the node daemon went away".into(), None);
        self.finish(fx);
    }

    /// Finish the run if no job is left (after its first launch, or an
    /// event): the driver calls this once its jobs are launched.
    pub fn settle(&mut self, fx: &mut dyn RunEffects) {
        if self.jobs.is_empty() && self.exit.is_none() {
            self.finish(fx);
        }
        #[cfg(test)]
        self.check_invariants(fx.shared());
    }

    /// Panics if the run's parts do not hold together, nor with the tree's
    /// (`shared`): see `invariants::check`.
    pub fn check_invariants(&self, shared: &TreeShared) {
        let parts = invariants::Parts {
            jobs: &self.jobs,
            warm: &self.warm,
            connects: &self.connects,
            kvs: &self.kvs,
            owner: self.settings.owner,
            over: self.exit.is_some(),
        };
        invariants::check(&parts, shared);
    }

    /// This run as the tree's invariants see it ([`TreeShared::check_invariants`]).
    pub fn view(&self) -> RunView {
        let held = self.jobs.iter().flat_map(|(_, j)| j.slots().held_nodes().collect::<Vec<_>>()).collect();
        RunView { owner: self.settings.owner, jobs: self.jobs.ids(), held }
    }

    /// The exit status, after the final word on stderr. Jobs the daemons
    /// never reported the end of (they went away) give back their slots here.
    fn finish(&mut self, fx: &mut dyn RunEffects) {
        warm::release(&self.settings, fx, self.verdict.ending());
        for id in self.jobs.take_all(&mut fx.shared().nodes) {
            fx.shared().route(id, None);
            fx.shared().jobs.remove(&id);
            fx.shared().ranks.remove(&id);
            let out = fx.shared().connects_job_ended(id);
            send_all(fx, out);
        }
        self.warm.summary(&self.settings, fx);
        let (code, line) = self.verdict.conclude();
        if let Some(line) = line {
            fx.say(&line);
        }
        self.exit = Some(code);
        fx.finished(code);
    }
}
