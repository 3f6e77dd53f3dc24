//! Launching a job's processes on this node: its registration with the PMI
//! engine, each rank's `PMI_*` environment, the starts (all asked for at
//! once, each answered by [`NodeReactor::on_started`]), a launch's failure
//! and what starts for a job that ended meanwhile, and adopting a process
//! that is already running (an MPICH singleton).
//!
//! A warm spawn's claim ([`dpm_proto::ToDaemon::Claim`]) ends a pooled
//! job's launch: the spawn's preputs go to the job's ranks here, unless one
//! of them has already ended, and the launcher hears which it was
//! ([`ToLauncher::Claimed`]). It answers the spawning parent only once every
//! node of the job said `alive`. A rank that ended before the claim reached
//! its node — its exit reported, read but not yet reported (output still
//! draining), or not even read yet (only the kernel knows:
//! [`NodeEffects::has_exited`]) — makes the claim fail: the launcher drops
//! the job and spawns again, so a child that crashed while it waited in the
//! pool is never handed to a parent.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use dpm_kvs::{JobId, NodeId, Rank};
use dpm_pmi::JobSetup;
use dpm_proto::{LaunchJob, PmiMode, ToLauncher};

use super::{topology, watch, Frontend, JobProcs, Launching, NodeReactor, Proc};
use crate::node::{NodeEffects, PmiEnv, PreparedApp, ProcStart, ProcStarted, StartBy, StartError};

impl NodeReactor {
    pub(super) fn register_job(&mut self, spec: &LaunchJob) {
        let local_ranks = if spec.procs.is_empty() { (0..spec.size).map(Rank).collect() } else { spec.procs.iter().map(|p| p.rank).collect() };
        self.engine.add_job(JobSetup {
            job: spec.job,
            kvsname: spec.kvsname.clone(),
            size: spec.size,
            local_ranks,
            appnums: spec.appnums.clone(),
            universe_size: spec.universe_size,
            process_mapping: spec.process_mapping.clone(),
            spawner: spec.spawner.clone(),
            preput: spec.preput.clone(),
            kvs: spec.kvs,
            // A launch reaches only the daemons that host ranks of the job.
            node: spec.procs.first().and_then(|p| spec.node_of.get(p.rank.0 as usize)).copied().unwrap_or(NodeId(0)),
            node_of: spec.node_of.clone(),
        });
        if spec.awaiting_claim {
            self.engine.await_claim(spec.job);
        }
    }

    pub(super) fn launch(&mut self, fx: &mut (impl NodeEffects + ?Sized), spec: LaunchJob) {
        let job = spec.job;
        // PMI_hwloc_xmlfile is MPICH's: a PMIx job's ranks get the topology
        // from the PMIx library (PMIX_SERVER_SHARE_TOPOLOGY), and the export's
        // 20-45 ms of CPU would compete with the spawned child's start.
        if spec.spawner.is_some() && spec.pmi_mode != PmiMode::Pmix {
            topology::export_early(&mut self.engine, fx);
        }
        self.register_job(&spec);
        let mut entry = JobProcs { kvsname: spec.kvsname.clone(), front: Frontend::of(spec.pmi_mode), pooled: spec.awaiting_claim, ..JobProcs::default() };
        if spec.pmi_mode == PmiMode::Port {
            match fx.open_pmi_port(job) {
                Ok(port) => entry.port = Some(port),
                Err(err) => {
                    if let Some(p) = spec.procs.first() {
                        let errno = err.raw_os_error().unwrap_or(0);
                        self.launch_failed(fx, job, p.rank, format!("cannot open a PMI port: {err}"), errno);
                    }
                    return;
                }
            }
        }
        let watch = watch::open(fx, &spec).map(|(watcher, vars)| {
            entry.watch = Some(watcher);
            vars
        });
        self.jobs.insert(job, entry);
        fx.track_shm(job, &spec.kvsname);
        // Bound before a PMIx job's namespace is registered: it says where
        // each local rank runs (`PMIX_CPUSET`, `PMIX_LOCALITY_STRING`).
        let bound = match self.binding.bind_launch(fx, &self.host, &spec) {
            Ok(b) => b,
            Err(error) => {
                let rank = spec.procs.first().map_or(Rank(0), |p| p.rank);
                return self.launch_failed(fx, job, rank, error, libc::EINVAL);
            }
        };
        let mut pmix_envs = match spec.pmi_mode {
            PmiMode::Pmix => {
                let node = spec.procs.first().and_then(|p| spec.node_of.get(p.rank.0 as usize)).copied().unwrap_or(NodeId(0));
                let places = spec.procs.iter().zip(&bound).map(|(p, b)| (p.rank.0, b.place.clone())).collect();
                match self.pmix.register(fx, &spec, node, places) {
                    Ok(envs) => envs.into_iter(),
                    Err(error) => {
                        let rank = spec.procs.first().map_or(Rank(0), |p| p.rank);
                        return self.launch_failed(fx, job, rank, format!("cannot serve PMIx: {error}"), libc::ENOSYS);
                    }
                }
            }
            PmiMode::Fd | PmiMode::Port => Vec::new().into_iter(),
        };
        let local_n = spec.procs.len();
        let apps: Vec<Option<Arc<PreparedApp>>> = spec.apps.iter().map(|app| PreparedApp::new(app).ok().map(Arc::new)).collect();
        let mut bindings = bound.into_iter();
        let mut starts = Vec::with_capacity(local_n);
        let by = StartBy::for_launch(spec.spawner.is_some(), local_n);
        for (local_id, proc) in spec.procs.iter().enumerate() {
            let Some(Some(app)) = apps.get(proc.app) else {
                let exe = spec.apps.get(proc.app).map_or("?", |a| a.exe.as_str());
                let error = format!("cannot start '{exe}': bad program, argument or variable");
                return self.launch_failed(fx, job, proc.rank, error, libc::EINVAL);
            };
            let mut env = match pmix_envs.next() {
                Some(vars) => PmiEnv { socketpair: false, vars, affinity: None, hold: spec.hold },
                None => self.pmi_env(&spec, proc.rank, local_id, local_n),
            };
            if let Some(bound) = bindings.next() {
                env.vars.extend(bound.env);
                env.affinity = bound.affinity;
            }
            // A PMIx server the user named stays the rank's.
            if let Some(vars) = watch.as_ref().filter(|_| !crate::pmix_watch::names_a_server(&app.spec().env)) {
                env.vars.extend(vars.iter().cloned());
            }
            let pmi_conn = (spec.pmi_mode == PmiMode::Fd).then(|| self.new_conn());
            let with_stdin = spec.stdin_rank == Some(proc.rank);
            starts.push(ProcStart { job, rank: proc.rank, app: app.clone(), env, pgid: 0, with_stdin, pmi_conn, by });
        }
        // Every process founds its own session and group (pgid 0), as Hydra's
        // proxy does (setsid), all asked for at once (and, by the spawner
        // threads, started in parallel).
        // Not one group for the job: with the kernel's autogroup scheduling (on
        // by default) a session is one scheduling group, so a job's
        // busy-polling MPI ranks, a spawned child's start and other users' work
        // would share one CPU share; measured under load, a 1-child
        // MPI_Comm_spawn took 1.6-2x Hydra's (docs/benchmarks.md, "Sessions
        // and the autogroup scheduler").
        let ranks = spec.procs.iter().enumerate().map(|(i, p)| (p.rank, (i, spec.apps.get(p.app).map_or("?".into(), |a| a.exe.clone())))).collect();
        let pending = starts.len();
        if let Some(j) = self.jobs.get_mut(&job) {
            let stdin = spec.stdin_rank.filter(|r| spec.procs.iter().any(|p| p.rank == *r)).map(|_| Vec::new());
            j.launching = Some(Launching { pending, ranks, failure: None, stdin, signals: Vec::new() });
        }
        if pending == 0 {
            return self.launch_settled(fx, job);
        }
        fx.start(starts);
    }

    /// The result of a start asked through [`NodeEffects::start`].
    pub fn on_started(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: JobId, rank: Rank, result: Result<ProcStarted, StartError>) {
        self.start_result(fx, job, rank, result);
        self.checked();
    }

    fn start_result(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: JobId, rank: Rank, result: Result<ProcStarted, StartError>) {
        if result.is_err() {
            self.binding.release(job, rank);
        }
        let Some(launching) = self.jobs.get_mut(&job).and_then(|j| j.launching.as_mut()) else {
            // The job ended while it was starting: the process goes at once.
            if let Ok(s) = result {
                self.stray(fx, job, rank, s);
            }
            return;
        };
        launching.pending = launching.pending.saturating_sub(1);
        match result {
            Ok(s) => self.started(fx, job, rank, s),
            Err(err) => {
                // The first failure in the launch's order is the one reported.
                let index = launching.ranks.get(&rank).map_or(usize::MAX, |(i, _)| *i);
                if launching.failure.as_ref().is_none_or(|(i, _, _)| index < *i) {
                    launching.failure = Some((index, rank, err));
                }
            }
        }
        if self.jobs.get(&job).and_then(|j| j.launching.as_ref()).is_some_and(|l| l.pending == 0) {
            self.launch_settled(fx, job);
        }
    }

    /// Every start of a launch has its result: report the launch's failure, if any.
    pub(super) fn launch_settled(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: JobId) {
        let Some(launching) = self.jobs.get_mut(&job).and_then(|j| j.launching.take()) else { return };
        match launching.failure {
            // The launcher ends the job; the ranks that did start get killed.
            Some((_, rank, err)) => {
                let exe = launching.ranks.get(&rank).map_or("?", |(_, exe)| exe.as_str());
                self.launch_failed(fx, job, rank, format!("cannot start '{exe}': {err}"), err.errno)
            }
            None => tracing::debug!(%job, ranks = launching.ranks.len(), "launched"),
        }
    }

    /// A process started for a job that has ended meanwhile: kill it; a group
    /// leader is kept until its exit is seen, then released.
    pub(super) fn stray(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: JobId, rank: Rank, s: ProcStarted) {
        tracing::debug!(%job, rank = rank.0, pid = s.pid, "started after its job ended: killed");
        // Only its own group: the ended job's group id may be free by now.
        if s.pgid == s.pid {
            fx.kill_group(s.pgid, libc::SIGKILL);
        }
        fx.kill_process(s.pid, libc::SIGKILL);
        if let Some(conn) = s.pmi {
            fx.pmi_drop(conn);
        }
        if s.stdin {
            fx.stdin_close(job);
        }
        if s.pgid == s.pid {
            self.strays.insert((job, rank), s.pid);
        }
    }

    pub(super) fn launch_failed(&self, fx: &mut (impl NodeEffects + ?Sized), job: JobId, rank: Rank, error: String, errno: i32) {
        // The launcher tells the user (once): the run's closing line, or
        // the failed spawn's warning.
        tracing::debug!(%job, rank = rank.0, "{error}");
        fx.send_up(ToLauncher::LaunchFailed { job, rank, error, errno });
    }

    /// The variables dpm adds to one rank's environment.
    pub(super) fn pmi_env(&self, spec: &LaunchJob, rank: Rank, local_id: usize, local_n: usize) -> PmiEnv {
        let mut vars = vec![
            ("PMI_RANK".to_string(), rank.0.to_string()),
            ("PMI_SIZE".to_string(), spec.size.to_string()),
            // Slurm's libpmi2 needs it; MPICH ignores it.
            ("PMI_JOBID".to_string(), spec.kvsname.clone()),
            ("PMI_HOSTNAME".to_string(), self.host.clone()),
            ("MPI_LOCALNRANKS".to_string(), local_n.to_string()),
            ("MPI_LOCALRANKID".to_string(), local_id.to_string()),
        ];
        if spec.spawner.is_some() {
            vars.push(("PMI_SPAWNED".into(), "1".into()));
        }
        if let Some(port) = self.jobs.get(&spec.job).and_then(|j| j.port.clone()) {
            vars.push(("PMI_PORT".into(), port));
            vars.push(("PMI_ID".into(), rank.0.to_string()));
        }
        PmiEnv { socketpair: spec.pmi_mode == PmiMode::Fd, vars, affinity: None, hold: spec.hold }
    }

    /// A process of a launch started.
    pub(super) fn started(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: JobId, rank: Rank, s: ProcStarted) {
        let Some(j) = self.jobs.get_mut(&job) else { return };
        // The group we asked for, never one read back: a process that has not
        // yet moved would report dpm's own group, and the job's end kills it.
        if s.pgid > 0 && !j.pgids.contains(&s.pgid) {
            j.pgids.push(s.pgid);
        }
        if s.pgid == s.pid {
            j.leaders.push(s.pid);
        }
        let nice = fx.pooled_nice();
        if j.pooled && nice > 0 {
            fx.session_nice(s.pid, nice);
        }
        j.stdin |= s.stdin;
        if s.stdin {
            for data in j.launching.as_mut().and_then(|l| l.stdin.take()).unwrap_or_default() {
                j.feed_stdin(fx, job, data);
            }
        }
        for &signal in j.launching.as_ref().map_or(&[][..], |l| &l.signals[..]) {
            fx.kill_process(s.pid, signal);
        }
        if let Some(conn) = s.pmi {
            self.attach(conn, job, Some(rank));
        }
        let mut proc = Proc::new(s.pid, s.pmi, true);
        // A PMIx rank has no connection here: its progress comes as upcalls.
        proc.pmi_closed = self.front(job) == Frontend::Pmix;
        if let Some(state) = self.pmix.take_early(job, rank.0) {
            proc.pmi = state;
        }
        self.procs.insert((job, rank), proc);
        self.output.started(fx, job, rank);
        fx.send_up(ToLauncher::Started { job, rank, pid: s.pid as u32 });
    }

    /// Serve an already running process (an MPICH singleton).
    pub(super) fn adopt_foreign(&mut self, fx: &mut (impl NodeEffects + ?Sized), launch: LaunchJob, rank: Rank, pid: u32, pmi: Option<&OwnedFd>) {
        let job = launch.job;
        self.register_job(&launch);
        self.jobs.insert(job, JobProcs { kvsname: launch.kvsname.clone(), ..JobProcs::default() });
        fx.track_shm(job, &launch.kvsname);
        let conn = self.new_conn();
        // The descriptor exists only in the launcher's own process.
        if !pmi.is_some_and(|fd| fx.pmi_serve_fd(job, conn, fd)) {
            return self.launch_failed(fx, job, rank, format!("cannot serve process {pid}"), libc::EBADF);
        }
        self.attach(conn, job, Some(rank));
        if let Err(e) = fx.watch_pid(job, rank, pid) {
            let errno = e.raw_os_error().unwrap_or(0);
            return self.launch_failed(fx, job, rank, format!("cannot watch process {pid}: {e}"), errno);
        }
        self.procs.insert((job, rank), Proc::new(pid as i32, Some(conn), false));
        fx.send_up(ToLauncher::Started { job, rank, pid });
    }

    pub(super) fn claim(&mut self, fx: &mut (impl NodeEffects + ?Sized), job: JobId, preput: &[(String, String)]) {
        // A rank whose exit was reported has left `procs`: `rank_ended` says so.
        let reported = self.jobs.get(&job).is_some_and(|j| j.rank_ended);
        let alive = !reported && !self.procs.iter().any(|((j, _), p)| *j == job && (p.exit.is_some() || fx.has_exited(p.pid)));
        let mut ready = false;
        if alive {
            // Moved before its ranks hear of the claim (and long before
            // their parent is answered, which waits for `Claimed`).
            let procs = &self.procs;
            self.binding.rebind_claimed(fx, &self.host, job, |rank| procs.get(&(job, rank)).map(|p| p.pid));
            // Out of the background before its ranks hear of the claim.
            if let Some(j) = self.jobs.get_mut(&job).filter(|j| j.pooled) {
                j.pooled = false;
                if fx.pooled_nice() > 0 {
                    for ((_, _), p) in procs.iter().filter(|((j, _), _)| *j == job) {
                        fx.session_nice(p.pid, 0);
                    }
                }
            }
            ready = self.engine.claim(job, preput);
        } else {
            tracing::debug!(%job, "claim of a pooled job with an ended rank: not delivered");
        }
        fx.send_up(ToLauncher::Claimed { job, alive, ready });
    }
}
