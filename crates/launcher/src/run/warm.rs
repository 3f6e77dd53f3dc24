//! Warm spawn: a pool of spawned jobs started ahead of the spawn that will
//! want them, per spawn *shape*, claimed by a matching `MPI_Comm_spawn`.
//!
//! A spawned MPICH child spends most of its start (~40 ms of ~60 ms) in its
//! MPI library's constructors and `MPI_Init`, all of which depends only on
//! the spawn's commands, arguments, counts, info and placement — and asks for
//! the one thing that depends on the parent, `PARENT_ROOT_PORT_NAME`, at the
//! very end of `MPI_Init`. So a pooled job is launched exactly as a cold spawn
//! of that shape would be (`PMI_SPAWNED=1`, `spawner-jobid`, its own job id,
//! kvsname, mapping, appnums, universe size), but *awaiting its claim*: its
//! node parks a get of a key that is not there ([`dpm_proto::ToDaemon::Claim`]
//! ends the wait). A spawn that finds a pooled job of its shape claims it
//! (the parent's preputs go to the job's nodes; once they all confirm with
//! [`dpm_proto::ToLauncher::Claimed`] the parent is answered; a node where a
//! rank had already ended refuses, and the spawn is made again, claiming the
//! next pooled job or running cold); the replacements start
//! [`REFILL_DELAY`] after the last claim (each claim pushes them back), or as
//! soon as a spawned job ends and gives slots back; a spawn that finds none
//! runs cold and fills the pool for the next one — the first miss of a shape
//! once its own children are up ([`Priming`]), a later one at once.
//!
//! What a run keeps here is its *policy*: which shapes it pools, how many
//! jobs each wants, when to fill them, its claims in flight and its counts.
//! The unclaimed pooled jobs themselves are the tree's [`super::Pool`]'s
//! from their launch: it serves them (output held, at most
//! [`MAX_HELD_OUTPUT`] bytes; their end only drops them, never touching the
//! exit status) until a claim moves one here. A pooled job holds slots but
//! never takes one a cold placement needs: it is placed in free slots only
//! (without oversubscription, within the universe size), and a cold spawn
//! that does not fit in the free slots kills pooled jobs (oldest first) and
//! gets their slots back at once.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use dpm_kvs::{JobId, KvsDesign, NodeId, Rank};
use dpm_proto::{LaunchJob, PmiMode, SpawnCommand, Stream, ToDaemon};

use super::pool::{with_pool, Maker, Taken};
use super::spawn::SpawnAsk;
use super::{Run, RunEffects};
use crate::node_table::{PlaceError, Reservation};
use crate::plan::ProgramId;
use crate::spawn::{plan_spawn, SpawnPlan};

/// Pooled jobs per spawn shape of a bare `--warm-spawn` (and of a spawn
/// asking `dpm_warm=true` when warm spawn is off).
pub const DEFAULT_WARM_SPAWN: usize = 2;
/// The most pooled jobs per shape `--warm-spawn=N` and `DPM_WARM_SPAWN` accept.
pub const MAX_WARM_SPAWN: usize = 64;
/// The spawn info key that asks for (`true`) or refuses (`false`) warm spawn.
pub const WARM_INFO_KEY: &str = "dpm_warm";
/// What a pooled job may write before its claim, all ranks and streams
/// together. MPICH writes nothing before `MPI_Init` returns; a program that
/// prints that much before it is anybody's child is not a good pool member,
/// and holding more would let an unclaimed job grow the launcher without
/// bound. At the limit the job is dropped from the pool (killed), its held
/// output discarded: a claimed job's output is never lost.
pub const MAX_HELD_OUTPUT: usize = 64 * 1024;
/// How long after the last claim the replacements start (unless a spawned
/// job's end gave slots back sooner). Right after a claim, the claimed
/// children and their parent still connect to each other: a replacement
/// started then runs the MPI library's constructors (~40 ms of CPU) against
/// them (on the 2-core VM, refilling at the claim made a warm spawn's median
/// several times its best case). Each claim pushes the refill back by this
/// much, so a burst of spawns (one every ~2 ms) takes the whole pool before
/// any replacement competes with it for the CPU. Measured with 64 spawns
/// back to back from a full pool of 64 (bench/spawn/run's rate-burst): a
/// refill 10 ms after each claim gave 99 spawns/s; pushed back by 10 ms,
/// one spawn slower than that (a hiccup of the machine) let the refill in
/// mid-burst, and the replacements' start slowed every later spawn past
/// 10 ms too (70 spawns/s in one run of three, 380–470 in the others); 50 ms
/// is well above a claimed spawn's slowest (~8 ms). A spawn loop's claimed
/// child ends (and refills at once) long before.
pub const REFILL_DELAY: std::time::Duration = std::time::Duration::from_millis(50);

/// What a pooled job must match to be claimed: the spawn's commands
/// (program, arguments, `maxprocs`, info — `host`/`hosts`, `wdir`, `path`,
/// `env` among it — without [`WARM_INFO_KEY`]) and everything else the
/// children's start depends on ([`Context`]). Not the spawning job: an MPICH
/// child learns nothing of its parent before the parked
/// `PARENT_ROOT_PORT_NAME` get (PMI-1: `PMI_SPAWNED=1`; PMI-2: MPICH's,
/// Slurm's and dpm's clients only test `spawner-jobid` for presence and
/// keep no copy of it), so any job of any run may claim it (`pool`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Shape {
    commands: Vec<SpawnCommand>,
    /// What each command's program is now (`spawn::program_ids`, in the
    /// driver's [`RunEffects::files`]):
    /// the same path rebuilt is another shape (issue 26: a kept pool ran
    /// the old binary). Libraries found through `LD_LIBRARY_PATH` and the
    /// like are covered by the environment in the [`Context`]; a shared
    /// library rebuilt in place is not (see `docs/warm-spawn.md`).
    programs: Vec<Option<ProgramId>>,
    context: Arc<Context>,
}

/// What a spawned child's start depends on besides the spawn's commands:
/// the environment and directory its spawn is planned in (the run's
/// environment after `-genv`/`-genvlist`/`-genvnone`, its working
/// directory, its host and nodes), the PMI flavour, the universe size and
/// the KVS design the job inherits. Two runs whose children would start
/// differently never share a shape.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Context {
    env: Vec<(String, String)>,
    cwd: std::path::PathBuf,
    host: String,
    nodes: Vec<String>,
    pmi_mode: PmiMode,
    universe_size: i64,
    design: KvsDesign,
}

impl Shape {
    /// The shape of a spawn in `context`, and its [`WARM_INFO_KEY`] choice (`None`: not said).
    pub(super) fn of(context: Arc<Context>, commands: &[SpawnCommand], programs: Vec<Option<ProgramId>>) -> (Shape, Option<bool>) {
        let mut choice = None;
        let commands = commands
            .iter()
            .map(|c| {
                let mut c = c.clone();
                c.info.retain(|(k, v)| {
                    if k != WARM_INFO_KEY {
                        return true;
                    }
                    match v.trim().to_ascii_lowercase().as_str() {
                        "true" | "1" | "yes" => choice = Some(choice.unwrap_or(true)),
                        _ => choice = Some(false),
                    }
                    false
                });
                c
            })
            .collect();
        (Shape { commands, programs, context }, choice)
    }

    /// Under PMIx a child's namespace is registered with its parent's: only
    /// the simple PMI flavours' jobs may change parents between runs.
    pub(super) fn movable(&self) -> bool {
        self.context.pmi_mode != PmiMode::Pmix
    }

    pub(super) fn describe(&self, parent: JobId) -> String {
        let exes: Vec<&str> = self.commands.iter().map(|c| c.exe.as_str()).collect();
        let n: u64 = self.commands.iter().map(|c| u64::from(c.maxprocs)).sum();
        format!("'{}' x{n} from {parent}", dpm_pmi::sanitize::escape(&exes.join(",")))
    }
}

/// A pooled job claimed by a spawn of this run, its claim sent to the
/// job's nodes and not yet confirmed by all of them
/// ([`dpm_proto::ToLauncher::Claimed`]). The job is the run's from the claim on.
pub(super) struct Claim {
    shape: Shape,
    pub(super) job: JobId,
    /// Taken from the jobs the tree kept ([`super::Pool`]), not made for this run.
    kept: bool,
    /// Its output so far, in order, and how many bytes that is.
    held: Vec<(NodeId, Rank, Stream, Vec<u8>)>,
    held_bytes: usize,
    /// The spawn that claimed it: answered at the confirmation, or made
    /// again if the claim fails.
    ask: SpawnAsk,
    /// The job's nodes that have not confirmed yet.
    waiting: Vec<NodeId>,
    /// Pooled jobs the spawn's shape wants.
    want: usize,
}

/// New shapes pooled in a row with no claim in between, after which a new
/// shape is pooled only from its second miss: a run whose spawns never
/// repeat (a task loop passing each task its number) would otherwise start a
/// pool at every spawn and kill it at the next (MPICH's taskmaster loop took
/// 1.5× as long with `--warm-spawn`, docs/warm-spawn.md).
pub const UNCLAIMED_SHAPES_MAX: u32 = 2;
/// Shapes missed once and not pooled, remembered for their second miss
/// (the oldest forgotten first).
pub const SEEN_SHAPES_MAX: usize = 64;

/// What a missed spawn does for its shape's pool ([`Run::warm_miss`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Miss {
    /// A new shape: its pool is filled once the cold children are up.
    Prime,
    /// A shape pooled before: refilled at once.
    Refill,
    /// A new shape in a run whose new shapes go unclaimed: remembered, and
    /// pooled if it misses again.
    Remember,
}

/// The run's warm-spawn policy and its counts (see the module documentation).
#[derive(Default)]
pub(super) struct WarmPool {
    /// Claims in flight, oldest first.
    pub(super) claims: Vec<Claim>,
    /// Every shape pooled so far, how many jobs it wants and the job whose
    /// spawns it is filled for: filled again when a spawned job ends and
    /// gives its slots back.
    shapes: Vec<(Shape, usize, JobId)>,
    /// Missed spawns whose pool is filled once their own children are up.
    priming: Vec<Priming>,
    /// New shapes pooled since the last claim ([`UNCLAIMED_SHAPES_MAX`]).
    unclaimed_shapes: u32,
    /// New shapes missed once and not pooled ([`SEEN_SHAPES_MAX`]).
    seen: VecDeque<Shape>,
    pub(super) claimed: u64,
    missed: u64,
    refilled: u64,
}

/// The first miss of a shape: its pool is filled once each rank of the cold
/// job asked for its parent's port (the end of its `MPI_Init`,
/// [`dpm_proto::ToLauncher::ParentAsked`]) or when the job ends — not at the
/// miss, where the pooled children's start took the cores the cold children
/// needed (`MPIPoolExecutor`'s first result: 662 → 469 ms, docs/warm-spawn.md).
/// A later miss of a shape already pooled (a spawn loop that outran its
/// pool) refills at once: waiting there cost the sustained rate a third
/// (47 → 33 spawns/s).
/// How many it wants and for whom are its shape's (`WarmPool::shapes`).
struct Priming {
    job: JobId,
    size: u32,
    asked: HashSet<Rank>,
    shape: Shape,
}

impl WarmPool {
    fn take(&mut self, job: JobId) -> Option<Claim> {
        let i = self.claims.iter().position(|c| c.job == job)?;
        Some(self.claims.remove(i))
    }
}

impl Run {
    /// Pooled jobs wanted for a spawn whose [`WARM_INFO_KEY`] said `choice`.
    pub(super) fn warm_wanted(&self, choice: Option<bool>) -> usize {
        match choice {
            // A PMIx child's namespace names its parent (`PMIX_PARENT_ID`)
            // and is registered at launch, before any spawn asks: a pooled
            // job cannot know its parent, so PMIx spawns are always cold.
            _ if self.settings.pmi_mode == dpm_proto::PmiMode::Pmix => 0,
            Some(false) => 0,
            Some(true) if self.settings.warm_spawn == 0 => DEFAULT_WARM_SPAWN,
            _ => self.settings.warm_spawn,
        }
    }

    /// The shape of a spawn by `parent`, and its [`WARM_INFO_KEY`] choice.
    pub(super) fn shape(&self, fx: &mut dyn RunEffects, parent: JobId, commands: &[SpawnCommand]) -> (Shape, Option<bool>) {
        let spawn = &self.settings.spawn;
        let context = Context {
            env: spawn.base_env.clone(),
            cwd: spawn.cwd.clone(),
            host: spawn.host.clone(),
            nodes: spawn.nodes.clone(),
            pmi_mode: self.settings.pmi_mode,
            universe_size: self.settings.universe_size,
            design: self.kvs.design(parent).unwrap_or_default(),
        };
        let programs = crate::spawn::program_ids(spawn, fx.files(), commands);
        Shape::of(Arc::new(context), commands, programs)
    }

    pub(super) fn warm_say(&self, fx: &mut dyn RunEffects, line: &str) {
        if self.settings.warm_verbose {
            fx.say(&format!("dpm: warm spawn: {line}"));
        } else {
            tracing::debug!("warm spawn: {line}");
        }
    }

    /// A spawn of `shape`: claim a pooled job of it from the tree's pool,
    /// if there is one (this run's oldest, else the oldest kept): it moves
    /// here in this one event — its state as the pool served it, its KVS
    /// root state, its held output — and its route is this run's now. Its
    /// nodes get the preputs, and the spawn waits for them to confirm
    /// (`warm_claimed`). The spawn comes back if there is nothing to claim
    /// (a miss, counted here).
    pub(super) fn warm_claim(&mut self, fx: &mut dyn RunEffects, shape: &Shape, ask: SpawnAsk, want: usize) -> Option<SpawnAsk> {
        let Some(Taken { job, mut state, root, held, held_bytes, kept }) = fx.shared().pool.take(shape, self.settings.owner) else {
            self.warm.missed += 1;
            self.warm_say(fx, &format!("miss for {}: started cold", shape.describe(ask.parent)));
            return Some(ask);
        };
        if let Some(root) = root {
            self.kvs.put_job(job, root);
        }
        fx.route(job, true);
        let listed = (self.settings.owner, state.kvsname.clone(), state.ranks.len() as u32);
        fx.shared().jobs.insert(job, listed);
        state.pool = true;
        for &d in &state.daemons {
            fx.send(d, ToDaemon::Claim { job, preput: ask.preput.clone() });
        }
        let waiting = state.daemons.clone();
        self.jobs.insert(job, state);
        self.warm.claims.push(Claim { shape: shape.clone(), job, kept, held, held_bytes, ask, waiting, want });
        None
    }

    /// `node` confirmed the claim of `job` (`alive`) or refused it (a rank
    /// there had ended). Once every node has confirmed, the parent gets its
    /// answer (or, for a job still starting, once the last child has
    /// started), the held output goes out, and the pool is filled again a
    /// moment later.
    pub(super) fn warm_claimed(&mut self, fx: &mut dyn RunEffects, node: NodeId, job: JobId, alive: bool) {
        let Some(claim) = self.warm.claims.iter_mut().find(|c| c.job == job) else { return };
        if !alive {
            let host = fx.shared().nodes.host(node).to_string();
            return self.warm_drop(fx, job, Some(&format!("a rank on {host} ended before a claim reached it; the spawn is made again")));
        }
        claim.waiting.retain(|&d| d != node);
        if !claim.waiting.is_empty() {
            return;
        }
        let Some(Claim { shape, held, kept, ask, want, .. }) = self.warm.take(job) else { return };
        if self.jobs.contains_key(&job) {
            // Reachable by other runs' connects from now on, as a cold spawn is.
            let map = self.job_map(job);
            fx.shared().connects.register(map);
        }
        let Some(j) = self.jobs.get_mut(&job) else { return };
        j.pool = false;
        if j.ranks.iter().all(|r| r.pid.is_some()) {
            fx.send(ask.node, ToDaemon::SpawnDone { request: ask.request, result: Ok(j.kvsname.clone()), errcodes: Vec::new() });
        } else {
            j.spawn_request = Some((ask.node, ask.request));
        }
        for (node, rank, stream, data) in held {
            fx.output(node, job, rank, stream, &data);
        }
        self.warm.claimed += 1;
        self.warm.unclaimed_shapes = 0;
        let kept = if kept { " (kept from an earlier run)" } else { "" };
        self.warm_say(fx, &format!("claimed {job} for {}{kept}", shape.describe(ask.parent)));
        self.report_placement(fx, job);
        self.warm_want(&shape, want, ask.parent);
        // Every claim pushes the refill back: a burst of claims is served
        // from the pool before any replacement competes with it for the CPU.
        fx.arm(super::Timer::WarmRefill, REFILL_DELAY);
    }

    /// Have the tree's pool hold `want` jobs of `shape` made for this run's
    /// spawns by `parent` (as many as fit in the free slots): each planned
    /// and placed as a cold spawn of the shape would be, then launched and
    /// owned by the pool.
    pub(super) fn warm_fill(&mut self, fx: &mut dyn RunEffects, shape: &Shape, want: usize, parent: JobId) {
        self.warm_want(shape, want, parent);
        let Some(parent_kvs) = self.jobs.get(&parent).map(|j| j.kvsname.clone()) else { return };
        let have = fx.shared().pool.count(shape, self.settings.owner);
        let maker = Maker { owner: self.settings.owner, origin: parent, verbose: self.settings.warm_verbose };
        for _ in have..want.min(MAX_WARM_SPAWN) {
            // The same plan a cold spawn of this shape gets (the files it
            // names may have changed since: then no pooled job).
            let plan = match plan_spawn(&self.settings.spawn, fx.files(), &shape.commands) {
                Ok(p) => p,
                Err(e) => return tracing::debug!("warm spawn: no pooled job for {}: {e}", shape.describe(parent)),
            };
            let apps: Vec<usize> = plan.job.procs.iter().map(|p| p.app).collect();
            let universe = self.settings.universe_size;
            let slots = match fx.shared().nodes.place_spawn(&apps, &plan.nodes, false, universe) {
                Ok(s) => s,
                Err(e) => return self.warm_say(fx, &format!("no free slots for another pooled job of {}: {e}", shape.describe(parent))),
            };
            let launch = self.spawn_launch(fx, plan.job, &slots, parent, parent_kvs.clone(), Vec::new());
            let (job, kvsname) = (launch.job, launch.kvsname.clone());
            let launch = LaunchJob { awaiting_claim: true, ..launch };
            let state = super::Job::new(&launch, slots, None);
            with_pool(fx, |pool, pfx| pool.launch(pfx, maker, shape.clone(), launch, state));
            self.warm.refilled += 1;
            self.warm_say(fx, &format!("refilled {job} ({kvsname}) for {}", shape.describe(parent)));
        }
    }

    /// Place a spawn with the node table's placer: `oversubscribe` as the run
    /// and the spawn's info allow. Pooled jobs never take a slot a spawn
    /// needs: while it does not fit in the free slots, the oldest pooled job
    /// is killed and its slots given back at once.
    /// A `soft` spawn is placed with as many processes as fit (the counts
    /// started per command come back with the reservation), after pooled jobs
    /// made room for all it asked for.
    pub(super) fn place(&mut self, fx: &mut dyn RunEffects, plan: &SpawnPlan, oversubscribe: bool) -> Result<(Reservation, Option<Vec<u32>>), PlaceError> {
        let apps: Vec<usize> = plan.job.procs.iter().map(|p| p.app).collect();
        let universe = self.settings.universe_size;
        // The pool's jobs made for this run first, then those kept for
        // later runs (a job being claimed is the run's: its spawn holds it).
        let owner = Some(self.settings.owner);
        while fx.shared().nodes.place_spawn(&apps, &plan.nodes, false, universe).is_err() {
            if !with_pool(fx, |pool, pfx| pool.drop_oldest(pfx, owner)) {
                break;
            }
        }
        let nodes = &fx.shared().nodes;
        if plan.is_soft() {
            nodes.place_spawn_soft(&plan.counts, &plan.nodes, oversubscribe, universe).map(|(slots, started)| (slots, Some(started)))
        } else {
            nodes.place_spawn(&apps, &plan.nodes, oversubscribe, universe).map(|slots| (slots, None))
        }
    }

    /// Remember that `shape` wants `want` pooled jobs, for spawns by `parent`.
    fn warm_want(&mut self, shape: &Shape, want: usize, parent: JobId) {
        match self.warm.shapes.iter_mut().find(|(s, _, _)| s == shape) {
            Some((_, n, p)) => (*n, *p) = (want, parent),
            None => self.warm.shapes.push((shape.clone(), want, parent)),
        }
    }

    /// A spawned job ended and gave its slots back: fill the pools that
    /// lacked the room (never after a pooled job's own end, so a shape whose
    /// jobs crash is not restarted in a loop; never while the run ends).
    pub(super) fn warm_topup(&mut self, fx: &mut dyn RunEffects) {
        if self.verdict.ending() || self.warm.shapes.is_empty() {
            return;
        }
        self.warm.shapes.retain(|(_, _, p)| self.jobs.contains_key(p));
        for (shape, want, parent) in self.warm.shapes.clone() {
            if !self.warm.priming.iter().any(|p| p.shape == shape) {
                self.warm_fill(fx, &shape, want, parent);
            }
        }
    }

    /// Whether `shape` has been pooled already (a miss of it refills at once).
    pub(super) fn warm_known(&self, shape: &Shape) -> bool {
        self.warm.shapes.iter().any(|(s, _, _)| s == shape)
    }

    /// A spawn of `shape` by `parent` missed: what it does for the pool
    /// ([`Miss`]; a shape missed once while new shapes go unclaimed is only
    /// remembered, [`UNCLAIMED_SHAPES_MAX`]).
    pub(super) fn warm_miss(&mut self, fx: &mut dyn RunEffects, shape: &Shape, parent: JobId) -> Miss {
        if self.warm_known(shape) {
            return Miss::Refill;
        }
        if self.warm.unclaimed_shapes >= UNCLAIMED_SHAPES_MAX {
            match self.warm.seen.iter().position(|s| s == shape) {
                Some(i) => drop(self.warm.seen.remove(i)),
                None => {
                    if self.warm.seen.len() >= SEEN_SHAPES_MAX {
                        self.warm.seen.pop_front();
                    }
                    self.warm.seen.push_back(shape.clone());
                    let n = self.warm.unclaimed_shapes;
                    self.warm_say(
                        fx,
                        &format!("not pooled: {} (the last {n} new shapes were never claimed; pooled if it comes again)", shape.describe(parent)),
                    );
                    return Miss::Remember;
                }
            }
        }
        self.warm.unclaimed_shapes = self.warm.unclaimed_shapes.saturating_add(1);
        Miss::Prime
    }

    /// A spawn of `shape` missed and runs cold as `job` of `size` ranks: its
    /// pool is filled once they are up ([`Priming`]).
    pub(super) fn warm_prime_after(&mut self, job: JobId, size: u32, shape: Shape, want: usize, parent: JobId) {
        self.warm_want(&shape, want, parent);
        self.warm.priming.push(Priming { job, size, asked: HashSet::new(), shape });
    }

    /// `rank` of `job` asked for its parent's port: once all have, the
    /// pool its spawn missed is filled.
    pub(super) fn warm_parent_asked(&mut self, fx: &mut dyn RunEffects, job: JobId, rank: Rank) {
        let Some(i) = self.warm.priming.iter().position(|p| p.job == job) else { return };
        let p = &mut self.warm.priming[i];
        if rank.0 < p.size {
            p.asked.insert(rank);
        }
        if p.asked.len() < p.size as usize {
            return;
        }
        let shape = self.warm.priming.remove(i).shape;
        let wanted = self.warm.shapes.iter().find(|(s, _, _)| *s == shape).map(|&(_, want, parent)| (want, parent));
        if let Some((want, parent)) = wanted.filter(|_| !self.verdict.ending()) {
            self.warm_fill(fx, &shape, want, parent);
        }
    }

    /// `job` ended: the pooled jobs made for its spawns are kept for later
    /// runs if the tree keeps them (`pool`), else killed, quietly (as at
    /// the end of the run); a claim its spawn was making goes too.
    pub(super) fn warm_parent_ended(&mut self, fx: &mut dyn RunEffects, job: JobId) {
        let orphans: Vec<JobId> = self.warm.claims.iter().filter(|c| c.ask.parent == job).map(|c| c.job).collect();
        for orphan in orphans {
            self.warm_drop(fx, orphan, None);
        }
        let (now, owner, keep) = (fx.now_micros(), self.settings.owner, !self.verdict.ending());
        with_pool(fx, |pool, pfx| pool.release(pfx, now, owner, Some(job), keep));
        self.warm.shapes.retain(|(_, _, p)| *p != job);
        // A priming job that ended without every rank asking: its shape is
        // filled by the top-up at its end, as after any spawned job's end.
        // (A priming for an ended parent's shape, gone just above, is dropped
        // with its job or when its ranks have asked: it then fills nothing.)
        self.warm.priming.retain(|p| p.job != job);
    }

    /// The run is over: the pooled jobs made for it are kept for later
    /// runs if the tree keeps them, else killed.
    pub(super) fn warm_release(&mut self, fx: &mut dyn RunEffects) {
        let (now, owner, keep) = (fx.now_micros(), self.settings.owner, !self.verdict.ending());
        with_pool(fx, |pool, pfx| pool.release(pfx, now, owner, None, keep));
    }

    /// Take claimed `job` out of the claims and kill it; its slots are free
    /// at once. `why` is said (`None`: a quiet end, nothing to report). The
    /// spawn that was claiming it is made again (if its parent is still there).
    pub(super) fn warm_drop(&mut self, fx: &mut dyn RunEffects, job: JobId, why: Option<&str>) {
        let Some(claim) = self.warm.take(job) else { return };
        if let Some(why) = why {
            self.warm_say(fx, &format!("dropped {job}: {why}"));
        }
        if let Some(j) = self.jobs.get_mut(&job) {
            for r in 0..j.ranks.len() {
                j.slots.release(r);
            }
        }
        self.kill_job(fx, job, libc::SIGKILL);
        self.check_done(fx, job);
        self.spawn(fx, claim.ask);
    }

    /// Output of a pooled (or discarded) job is held or dropped; that of an
    /// ordinary job comes back, to go out.
    pub(super) fn warm_output(&mut self, fx: &mut dyn RunEffects, node: NodeId, job: JobId, rank: Rank, stream: Stream, data: Vec<u8>) -> Option<Vec<u8>> {
        if !self.jobs.get(&job).is_some_and(|j| j.pool) {
            return Some(data);
        }
        let e = self.warm.claims.iter_mut().find(|c| c.job == job)?;
        if e.held_bytes + data.len() > MAX_HELD_OUTPUT {
            self.warm_drop(fx, job, Some(&format!("it wrote more than {MAX_HELD_OUTPUT} bytes before a claim")));
        } else {
            e.held_bytes += data.len();
            e.held.push((node, rank, stream, data));
        }
        None
    }

    /// A rank of a claimed job whose claim is not confirmed yet ended
    /// (crashed, aborted, could not start, or was killed by dpm): the job
    /// ends, quietly, and its spawn is made again; the run's verdict never
    /// hears of it. `false` if `job` is not such a job. `ended`: the rank
    /// is gone (else it only asked to abort).
    pub(super) fn warm_ended(&mut self, fx: &mut dyn RunEffects, job: JobId, rank: Rank, why: &str, ended: bool) -> bool {
        let Some(j) = self.jobs.get_mut(&job).filter(|j| j.pool) else { return false };
        let killing = j.killing;
        if ended {
            j.end_rank(rank.0 as usize, super::RankEnd::Terminated);
        }
        if !self.warm.claims.iter().any(|c| c.job == job) {
            // Its claim failed already: its other ranks go too.
            self.kill_job(fx, job, libc::SIGKILL);
            self.check_done(fx, job);
            return true;
        }
        let said = format!("rank {} {why} before a claim; the spawn is made again", rank.0);
        if !killing {
            tracing::warn!(%job, rank = rank.0, "warm spawn: a pooled job {why} before its claim; dropped from the pool");
        }
        self.warm_drop(fx, job, (!killing).then_some(said.as_str()));
        true
    }

    /// The summary line at the end of a run that used warm spawn.
    pub(super) fn warm_summary(&self, fx: &mut dyn RunEffects) {
        let w = &self.warm;
        if self.settings.warm_verbose && w.claimed + w.missed + w.refilled > 0 {
            fx.say(&format!("dpm: warm spawn: {} claimed, {} missed, {} refilled", w.claimed, w.missed, w.refilled));
        }
    }
}
