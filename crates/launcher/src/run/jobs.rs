//! The run's job table ([`Jobs`]): its jobs rank by rank — starts, launch
//! failures, exits, aborts, lost nodes, fences — the output credit owed to
//! each node, and the job that reads stdin. How a failure is judged and
//! what it does to the run is [`Verdict`]'s, passed in by the run; what a
//! job's end does beyond the table (the KVS root, warm spawn, collectives)
//! is the run's ([`super::Run`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use dpm_kvs::{JobId, NodeId, Rank};
use dpm_proto::control::{ProcInfo, RankStatus};
use dpm_proto::{ExitStatus, JobMap, PmiProgress, RankExit, ToDaemon, OUTPUT_ACK_STEP};

use super::job::{serve_fence, Job, RankEnd};
use super::{signal_name, FailurePolicy, RunEffects, Verdict};
use crate::kvs_root::KvsRoot;

/// A rank's end as `dpm status` lists it.
fn listed_end(end: &RankEnd) -> String {
    match end {
        RankEnd::Ok => "exited 0".into(),
        RankEnd::Failed { why, .. } => format!("failed: {why}"),
        RankEnd::Terminated => "terminated".into(),
    }
}

/// The jobs of one run, each owned here from its launch (or its claim) to
/// its end. See the module documentation.
#[derive(Default)]
pub(super) struct Jobs {
    map: BTreeMap<JobId, Job>,
    /// Output written and not yet acknowledged, per node and job (below
    /// [`OUTPUT_ACK_STEP`]).
    written: HashMap<(NodeId, JobId), u64>,
    /// The job whose rank reads dpm's stdin.
    stdin: Option<JobId>,
    /// The nodes a debugger's tool daemon was started on (`start_tools`).
    tool_nodes: BTreeSet<NodeId>,
}

impl Jobs {
    pub(super) fn get(&self, job: JobId) -> Option<&Job> {
        self.map.get(&job)
    }

    pub(super) fn get_mut(&mut self, job: JobId) -> Option<&mut Job> {
        self.map.get_mut(&job)
    }

    pub(super) fn contains(&self, job: JobId) -> bool {
        self.map.contains_key(&job)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub(super) fn ids(&self) -> Vec<JobId> {
        self.map.keys().copied().collect()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (JobId, &Job)> {
        self.map.iter().map(|(id, j)| (*id, j))
    }

    /// Take `job` on (`stdin`: its rank reads dpm's stdin).
    pub(super) fn insert(&mut self, job: JobId, j: Job, stdin: bool) {
        if stdin {
            self.stdin = Some(job);
        }
        self.map.insert(job, j);
    }

    /// Every job, taken out (the run is over): the slots of ranks whose
    /// end was never heard (the daemons went away) are free again in `nodes`.
    pub(super) fn take_all(&mut self, nodes: &mut crate::node_table::NodeTable) -> Vec<JobId> {
        self.written.clear();
        let all = std::mem::take(&mut self.map);
        all.into_iter()
            .map(|(id, mut j)| {
                j.release_slots(nodes);
                id
            })
            .collect()
    }

    /// `job`, taken out if every rank of it has ended.
    pub(super) fn remove_done(&mut self, job: JobId) -> Option<Job> {
        if !self.map.get(&job).is_some_and(Job::done) {
            return None;
        }
        self.written.retain(|(_, j), _| *j != job);
        self.map.remove(&job)
    }

    /// The live job named `ns`, or why not.
    pub(super) fn named(&self, ns: &str) -> Result<JobId, String> {
        match self.map.iter().find(|(_, j)| j.kvsname() == ns) {
            Some((&id, _)) => Ok(id),
            None => Err(format!("namespace '{}' is not a live job of this run", dpm_pmi::sanitize::escape(ns))),
        }
    }

    /// Where `job`'s ranks run (it is live).
    pub(super) fn job_map(&self, job: JobId, universe_size: i64) -> JobMap {
        let j = &self.map[&job];
        JobMap { job, kvsname: j.kvsname().to_string(), node_of: j.node_of().to_vec(), appnums: j.appnums().to_vec(), universe_size }
    }

    /// `node`'s index among `job`'s nodes, numbered from 0 in rank order.
    pub(super) fn node_index(&self, job: JobId, node: NodeId) -> Option<usize> {
        let node_of = self.map.get(&job)?.node_of();
        let at = node_of.iter().position(|&n| n == node)?;
        crate::plan::job_node_numbers(node_of).get(at).map(|&i| i as usize)
    }

    /// `--report-placement`: where the ranks of `job` run.
    pub(super) fn report_placement(&self, fx: &mut dyn RunEffects, job: JobId) {
        let Some(j) = self.map.get(&job) else { return };
        let size = j.size() as u32;
        for &d in j.daemons() {
            let ranks: Vec<u32> = (0..size).filter(|&r| j.node(Rank(r)) == Some(d)).collect();
            let host = fx.shared().nodes.host(d).to_string();
            fx.say(&format!("dpm: {job} ({}, {size} ranks): ranks {} on {host}", j.kvsname(), rank_ranges(&ranks)));
        }
    }

    /// `bytes` of `job`'s output from `node` were written: the credit to
    /// send back to the node, once it reaches [`OUTPUT_ACK_STEP`].
    pub(super) fn output_written(&mut self, node: NodeId, job: JobId, bytes: u64) -> Option<u64> {
        if !self.map.contains_key(&job) {
            return None; // over: its nodes forgot it
        }
        let step = self.written.entry((node, job)).or_default();
        *step += bytes;
        (*step >= OUTPUT_ACK_STEP).then(|| std::mem::take(step))
    }

    /// The job reading stdin and the node of its rank 0.
    pub(super) fn stdin_target(&self) -> Option<(JobId, NodeId)> {
        let job = self.stdin?;
        Some((job, self.map.get(&job)?.node(Rank(0))?))
    }

    /// `node`'s watch tripped for `job`: the program of the job's first
    /// rank there, once (`None`: the job is not watched, or it tripped).
    pub(super) fn watch_tripped(&mut self, node: NodeId, job: JobId) -> Option<String> {
        let j = self.map.get_mut(&job)?;
        let programs = j.take_watched()?;
        let first = (0..j.size()).find(|&r| j.node(Rank(r as u32)) == Some(node)).unwrap_or(0);
        let app = j.appnums().get(first).and_then(|&a| usize::try_from(a).ok()).unwrap_or(0);
        Some(programs.get(app).or(programs.first()).map_or("?", String::as_str).to_string())
    }

    /// Every process of every job gets `signal`; the jobs go on.
    pub(super) fn signal_all(&self, fx: &mut dyn RunEffects, signal: i32) {
        for (&job, j) in &self.map {
            j.signal(job, signal, &mut |d, m| fx.send(d, m));
        }
    }

    pub(super) fn kill_all(&mut self, fx: &mut dyn RunEffects, sig: i32) {
        for job in self.ids() {
            self.kill_job(fx, job, sig);
        }
    }

    pub(super) fn kill_job(&mut self, fx: &mut dyn RunEffects, job: JobId, sig: i32) {
        if let Some(j) = self.map.get_mut(&job) {
            j.kill(job, sig, &mut |d, m| fx.send(d, m));
        }
    }

    /// `job`'s slots are free at once in `nodes` (a claimed job dropped).
    pub(super) fn release_slots(&mut self, nodes: &mut crate::node_table::NodeTable, job: JobId) {
        if let Some(j) = self.map.get_mut(&job) {
            j.release_slots(nodes);
        }
    }

    /// The host a rank runs on.
    pub(super) fn host(&self, fx: &mut dyn RunEffects, job: JobId, rank: Rank) -> String {
        let node = self.map.get(&job).and_then(|j| j.node(rank));
        node.map_or_else(|| "?".to_string(), |n| fx.shared().nodes.host(n).to_string())
    }

    /// A rank has a pid; a spawn answered late (`spawn::answers_before_start`)
    /// is answered once every child has one.
    pub(super) fn started(&mut self, fx: &mut dyn RunEffects, job: JobId, rank: Rank, pid: u32) {
        let Some(j) = self.map.get_mut(&job) else { return };
        if let Some(((node, request), errcodes)) = j.started(rank, pid) {
            fx.send(node, ToDaemon::SpawnDone { request, result: Ok(j.kvsname().to_string()), errcodes });
        }
        self.announce(fx, job);
    }

    /// Every rank of `job` has started: its process table to the driver
    /// (MPIR, tools), once.
    fn announce(&mut self, fx: &mut dyn RunEffects, job: JobId) {
        let Some(j) = self.map.get_mut(&job) else { return };
        let Some(held) = j.announce() else { return };
        let j = &self.map[&job];
        let procs = (0..j.size())
            .map(|r| {
                let host = j.node(Rank(r as u32)).map_or_else(|| "?".to_string(), |n| fx.shared().nodes.host(n).to_string());
                ProcInfo { rank: r as u32, host, exe: j.program(r).to_string(), pid: j.pid(Rank(r as u32)).unwrap_or(0) }
            })
            .collect::<Vec<ProcInfo>>();
        let state = if held { "held" } else { "running" };
        // A rank may have ended before the last one started.
        let listed = procs
            .iter()
            .map(|p| RankStatus {
                rank: p.rank,
                host: p.host.clone(),
                pid: p.pid,
                state: j.rank_end(p.rank as usize).map_or_else(|| state.into(), listed_end),
                pmi: None,
            })
            .collect();
        fx.shared().ranks.insert(job, listed);
        fx.procs_started(job, procs, held);
    }

    /// Continue a job launched held for a debugger (MPIR launch mode): its
    /// ranks, stopped at their first instruction, get SIGCONT.
    /// Start `tool` on each node of `job` that has no tool daemon yet
    /// (each node once per run: a spawned job's new nodes get theirs).
    pub(super) fn start_tools(&mut self, fx: &mut dyn RunEffects, job: JobId, tool: &dpm_proto::ToolDaemon) {
        let Some(j) = self.map.get(&job) else { return };
        for &node in j.daemons() {
            if self.tool_nodes.insert(node) {
                let host = fx.shared().nodes.host(node).to_string();
                fx.send(node, ToDaemon::StartTool { job, tool: tool.clone(), host });
            }
        }
    }

    pub(super) fn continue_held(&mut self, fx: &mut dyn RunEffects, job: JobId) {
        if let Some(j) = self.map.get_mut(&job) {
            if j.unhold() {
                j.signal(job, libc::SIGCONT, &mut |node, msg| fx.send(node, msg));
                for r in fx.shared().ranks.get_mut(&job).into_iter().flatten() {
                    r.state = "running".into();
                }
            }
        }
    }

    /// Rank `rank` of `job` (not a claimed pooled job) could not be started.
    pub(super) fn launch_failed(&mut self, fx: &mut dyn RunEffects, verdict: &mut Verdict, job: JobId, rank: Rank, error: String, errno: i32) {
        let who = describe_rank(job, rank, None, &self.host(fx, job, rank));
        if let Some((node, request)) = self.map.get_mut(&job).and_then(Job::take_spawn_request) {
            // A spawn that cannot start all its processes fails as a whole:
            // MPI_Comm_spawn returns an error in the parent, the run goes on.
            tracing::warn!("{who} could not be started: {error}; the spawn fails");
            fx.send(node, ToDaemon::SpawnDone { request, result: Err(format!("{who} could not be started: {error}")), errcodes: Vec::new() });
            // Its children that did start are killed with it; their deaths
            // are not failures of the run.
            let now = fx.now_micros();
            if let Some(j) = self.map.get_mut(&job) {
                j.fail_alone_at(now);
            }
            self.end_unstarted(&mut fx.shared().nodes, job);
            self.kill_job(fx, job, libc::SIGKILL);
        } else {
            let code = match errno {
                libc::ENOENT => 127,
                libc::EACCES | libc::ENOEXEC | libc::EISDIR | libc::EPERM => 126,
                // A request the node cannot meet (a binding beyond its CPUs
                // or GPUs, a program, argument or variable it cannot pass):
                // a usage error, as prterun refuses such a map.
                libc::EINVAL => 2,
                _ => 1,
            };
            verdict.record(code, format!("{who} could not be started: {error}"), Some((job, rank)));
            self.end_unstarted(&mut fx.shared().nodes, job);
            // A spawned job answered before its start (`spawn::answers_before_start`)
            // has a parent waiting in its accept: like a failed rank, this ends
            // every job of the run.
            self.kill_all(fx, libc::SIGKILL);
        }
    }

    /// A rank of a job (not a claimed pooled job) ended: judged under
    /// `policy`, a failure recorded in `verdict`.
    pub(super) fn exited(&mut self, fx: &mut dyn RunEffects, verdict: &mut Verdict, policy: FailurePolicy, exit: RankExit) {
        let RankExit { job, rank, pid, status, pmi, at } = exit;
        let host = self.host(fx, job, rank);
        let interrupted = verdict.interrupted.is_some() || verdict.timed_out;
        let Some(j) = self.map.get_mut(&job) else { return };
        // A process that ended before the teardown began was not ended by it,
        // even if its exit is read afterwards (the reads of several nodes and
        // connections race): judge it as a failure of its own.
        let before_teardown = verdict.teardown_at.or(j.alone_since()).is_none_or(|t| at < t);
        let killing = j.killing() && !before_teardown;
        let who = describe_rank(job, rank, Some(pid), &host);
        let end = match status {
            ExitStatus::Code(0) if pmi == PmiProgress::Active && !killing => {
                RankEnd::Failed { why: format!("{who} exited with code 0 without calling MPI_Finalize (PMI finalize)"), code: 1 }
            }
            ExitStatus::Code(0) => RankEnd::Ok,
            _ if killing || interrupted => RankEnd::Terminated,
            ExitStatus::Code(c) => RankEnd::Failed { why: format!("{who} exited with code {c}"), code: c },
            ExitStatus::Signal(s) => RankEnd::Failed { why: format!("{who} was killed by signal {s} ({})", signal_name(s)), code: 128 + s },
        };
        j.end_rank(&mut fx.shared().nodes, rank.0 as usize, end.clone());
        if let Some(listed) = fx.shared().ranks.get_mut(&job).and_then(|l| l.get_mut(rank.0 as usize)) {
            listed.pmi = None;
            listed.state = match (&end, status) {
                (RankEnd::Terminated, ExitStatus::Code(c)) => format!("terminated: exited {c}"),
                (RankEnd::Terminated, ExitStatus::Signal(s)) => format!("terminated: signal {s} ({})", signal_name(s)),
                _ => listed_end(&end),
            };
        }
        let spawned = j.spawned();
        if let RankEnd::Failed { why, code } = end {
            if policy == FailurePolicy::KeepOthers {
                tracing::warn!("{why}; the other ranks run on (-disable-auto-cleanup)");
                verdict.record_exit(code, why, (job, rank), at, fx.now_micros());
                if pmi == PmiProgress::Active {
                    // It will never join a fence: the survivors learn it
                    // (`PMI_dead_processes`), and one waiting in a fence ends the run.
                    for &d in j.daemons() {
                        fx.send(d, ToDaemon::RanksDead { job, ranks: vec![rank] });
                    }
                }
            } else if pmi == PmiProgress::Finalized && matches!(status, ExitStatus::Code(_)) {
                // Past MPI_Finalize nobody waits for it: the others run to
                // their ends (as under Hydra), its code still decides.
                verdict.record_exit(code, why, (job, rank), at, fx.now_micros());
            } else if policy.ends_run(spawned) {
                verdict.record_exit(code, why, (job, rank), at, fx.now_micros());
                // Jobs of one run are connected (spawn, connect/accept): a failure
                // in any of them would leave the others waiting, so all end.
                self.kill_all(fx, libc::SIGKILL);
            } else {
                self.fail_alone(fx, job, &why);
            }
        }
        // The last rank not stuck in a doomed fence may have ended.
        self.fence_doomed(fx, verdict, job, &[]);
    }

    /// Rank `rank` of `job` (not a claimed pooled job) called `MPI_Abort`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn abort(&mut self, fx: &mut dyn RunEffects, verdict: &mut Verdict, policy: FailurePolicy, job: JobId, rank: Rank, code: i32, message: String) {
        let host = self.host(fx, job, rank);
        let j = self.map.get(&job);
        let pid = j.and_then(|j| j.pid(rank));
        let spawned = j.is_some_and(Job::spawned);
        let who = describe_rank(job, rank, pid, &host);
        // PMI-2 always says -1; an exit status is 0..255.
        let status = code & 0xff;
        let detail = if message.is_empty() || message == "abort" { String::new() } else { format!(": {message}") };
        let why = format!("{who} called MPI_Abort with exit code {code}{detail}");
        if !policy.ends_run(spawned) {
            return self.fail_alone(fx, job, &why);
        }
        verdict.record_abort(status, why, (job, rank), fx.now_micros());
        // MPI_Abort ends the run: the aborting job's communicators may span
        // spawned and connected jobs.
        self.kill_all(fx, libc::SIGKILL);
    }

    /// Ranks of `job` wait in a fence that its dead ranks can never join
    /// (`-disable-auto-cleanup`): once every live rank of the job waits so,
    /// nobody can finish and the run ends; the first failure (a dead
    /// rank's) decides its status. Until then the others run on (to print
    /// what they print before their `MPI_Finalize`).
    pub(super) fn fence_doomed(&mut self, fx: &mut dyn RunEffects, verdict: &mut Verdict, job: JobId, waiting: &[Rank]) {
        let Some(j) = self.map.get_mut(&job) else { return };
        if !j.stuck(waiting) || j.killing() || verdict.interrupted.is_some() || verdict.timed_out {
            return;
        }
        let of_job = if job.0 == 0 { String::new() } else { format!(" of job {}", job.0) };
        tracing::warn!("the live ranks{of_job} wait in a PMI fence that a dead rank can never join: the run ends");
        verdict.begin_teardown(fx.now_micros());
        self.kill_all(fx, libc::SIGKILL);
    }

    /// The failure policy keeps the run going: this job alone ends.
    fn fail_alone(&mut self, fx: &mut dyn RunEffects, job: JobId, why: &str) {
        let now = fx.now_micros();
        let Some(j) = self.map.get_mut(&job) else { return };
        if j.fail_alone_at(now) {
            tracing::warn!(%job, "{why}; the job is ended, the run goes on (failure policy)");
        }
        self.kill_job(fx, job, libc::SIGKILL);
    }

    /// Ranks that were never started will never report: end them here.
    pub(super) fn end_unstarted(&mut self, nodes: &mut crate::node_table::NodeTable, job: JobId) {
        if let Some(j) = self.map.get_mut(&job) {
            j.end_unstarted(nodes);
        }
    }

    /// The nodes `lost` are gone: the ranks there have ended; the jobs that
    /// had ranks there come back.
    pub(super) fn lose_nodes(&mut self, nodes: &mut crate::node_table::NodeTable, lost: &[NodeId]) -> Vec<JobId> {
        self.map.iter_mut().filter_map(|(id, j)| j.lose_nodes(nodes, lost).then_some(*id)).collect()
    }

    /// A fence arrival of `job` (its KVS root state in `kvs`).
    pub(super) fn fence_in(&mut self, fx: &mut dyn RunEffects, kvs: &mut KvsRoot, job: JobId, epoch: u64, count: u32, puts: Vec<(String, String)>) {
        let Some(j) = self.map.get_mut(&job) else {
            // Under tree and direct the puts stay at the root even so.
            let (_, out) = kvs.fence_puts(job, epoch, puts);
            return super::send_all(fx, out);
        };
        serve_fence(kvs, j, job, epoch, count, puts, &mut |node, msg| fx.send(node, msg));
    }

    /// Panics unless each job holds a slot per live rank (fewer only once
    /// it is being killed: a dropped claimed job gives its slots back at once).
    pub(super) fn check_invariants(&self) {
        for (job, j) in &self.map {
            let (live, held) = j.live_and_held();
            assert!(held <= live, "{job}: {held} slots held for {live} live ranks");
            assert!(j.killing() || held == live, "{job}: {held} slots held for {live} live ranks, not being killed");
        }
        for (node, job) in self.written.keys() {
            assert!(self.map.contains_key(job), "output credit of {job} from node {} outlives the job", node.0);
        }
    }
}

pub(super) fn describe_rank(job: JobId, rank: Rank, pid: Option<u32>, host: &str) -> String {
    let job_part = if job.0 == 0 { String::new() } else { format!(" of job {}", job.0) };
    match pid {
        Some(pid) => format!("rank {}{job_part} (pid {pid} on {host})", rank.0),
        None => format!("rank {}{job_part} (on {host})", rank.0),
    }
}

/// `0,1,2,5,7,8` → `0-2,5,7-8`.
pub(super) fn rank_ranges(ranks: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        parts.push(if i == j { ranks[i].to_string() } else { format!("{}-{}", ranks[i], ranks[j]) });
        i = j + 1;
    }
    parts.join(",")
}
