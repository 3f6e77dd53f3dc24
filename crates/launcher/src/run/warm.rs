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
//! runs cold, exactly as without warm spawn, and starts nothing else
//! ([`Miss`]): the first miss of a shape only *learns* it, and its pool is
//! filled once the missed job has ended and its parent is still there
//! [`LEARN_DELAY`] later (a one-shot run — `MPIPoolExecutor` used once —
//! ends first and never starts a pooled process), or at the shape's second
//! miss. So a pool starts when the job leaves CPU to it — between its
//! spawns, not beside the children a miss started — at the job's priority
//! (`DPM_WARM_NICE` puts pooled ranks in the background until their claim:
//! `dpm_daemon::pool_priority`, which says why that is not the default).
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

use std::collections::VecDeque;

use dpm_kvs::{JobId, NodeId, Rank};
use dpm_proto::{LaunchJob, PmiMode, Stream, ToDaemon};

use super::effects::with_pool;
use super::job::{Job, RankEnd};
use super::jobs::Jobs;
use super::pool::{Maker, Taken};
use super::shape::{Shape, MAX_HELD_OUTPUT};
use super::spawn::SpawnAsk;
use super::{RunEffects, Settings, Timer};
use crate::kvs_root::KvsRoot;
use crate::spawn::plan_spawn;

mod depth;
mod stagger;
use depth::Depth;
#[cfg(test)]
pub(super) use depth::DEPTH_GROWTH;
use stagger::too_many_starting;
pub use stagger::warm_starting_default;

/// Pooled jobs per spawn shape of a bare `--warm-spawn` (and of a spawn
/// asking `dpm_warm=true` when warm spawn is off).
pub const DEFAULT_WARM_SPAWN: usize = 2;
/// The most pooled jobs per shape `--warm-spawn=N` and `DPM_WARM_SPAWN` accept.
pub const MAX_WARM_SPAWN: usize = 64;
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
/// How long after a spawned job's end a shape missed only once is pooled,
/// if the spawning job is still there and has entered no fence since its
/// spawn ([`Miss::Learn`]). A one-shot run's parent (one `MPIPoolExecutor`,
/// one spawn) ends right after its children — its pool would never be
/// claimed, and starting it would only take CPU and memory at the run's
/// end; MPICH's `MPI_Finalize` enters a fence, which in such runs reached
/// the launcher 12–203 ms before the children's job ended (14 of 14
/// `pool_first.py` runs on the loaded 2-core VM, `-v`). A parent that lives on (a workflow's
/// next pool, a loop's next spawn) gets its pool while it does other work:
/// the sooner, the more of the gap before its next spawn the pooled job
/// has for its start (a Python worker needs ~200 ms on the loaded 2-core
/// VM; at 100 ms, the series' pool 2 claimed its job still starting).
pub const LEARN_DELAY: std::time::Duration = std::time::Duration::from_millis(20);

/// A pooled job claimed by a spawn of this run, its claim sent to the
/// job's nodes and not yet confirmed by all of them
/// ([`dpm_proto::ToLauncher::Claimed`]). The job is the run's from the claim on.
pub(super) struct Claim {
    shape: Shape,
    job: JobId,
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
    /// Every node that confirmed found its ranks waiting for the claim.
    ready: bool,
    /// The nodes that found a rank still starting.
    late: Vec<NodeId>,
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

/// What a missed spawn does for its shape's pool ([`WarmPool::miss`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Miss {
    /// A new shape: learned; pooled once a spawned job has ended and its
    /// parent lives on ([`LEARN_DELAY`]), or at its next miss.
    Learn,
    /// A shape learned or pooled before: filled at once.
    Refill,
    /// A new shape in a run whose new shapes go unclaimed: remembered, and
    /// pooled if it misses again.
    Remember,
}

/// The run's warm-spawn policy and its counts (see the module documentation).
#[derive(Default)]
pub(super) struct WarmPool {
    /// Claims in flight, oldest first.
    claims: Vec<Claim>,
    /// Claimed jobs still starting, and their nodes that have not said
    /// their start is done ([`dpm_proto::ToLauncher::AwaitingClaim`]): no
    /// pooled job starts beside them (a refill never delays a claimed
    /// job's start).
    late: Vec<(JobId, Vec<NodeId>)>,
    /// Every shape spawned so far, how many jobs it wants and the job whose
    /// spawns it is filled for: filled again when a spawned job ends and
    /// gives its slots back.
    shapes: Vec<Wanted>,
    /// New shapes pooled since the last claim ([`UNCLAIMED_SHAPES_MAX`]).
    unclaimed_shapes: u32,
    /// New shapes missed once and not pooled ([`SEEN_SHAPES_MAX`]).
    seen: VecDeque<Shape>,
    claimed: u64,
    missed: u64,
    refilled: u64,
}

/// A shape's pool: how many jobs it wants and for whose spawns. `proven`:
/// spawned again (claimed, or missed a second time) — its pool is filled
/// at once from then on; a shape seen once ([`Miss::Learn`]) is filled only
/// [`LEARN_DELAY`] after a spawned job's end (a miss never costs more than
/// a cold spawn: MPIPoolExecutor's first result was 2.2× Hydra's when the
/// pool started 4 processes while the missed children computed it).
struct Wanted {
    shape: Shape,
    want: usize,
    /// How many jobs its pool is kept at (`want` or more).
    depth: Depth,
    parent: JobId,
    /// The parent's kvsname, a pooled job's `spawner` (also once it ended:
    /// [`WarmPool::parent_ended`]).
    parent_kvs: String,
    proven: bool,
    /// A shape seen once: how far its parent was in its fences at the spawn
    /// ([`super::job::Job::fence_progress`]). A parent that entered a fence
    /// since (MPICH's `MPI_Finalize` does) is ending: its learned shape is
    /// not pooled at [`LEARN_DELAY`].
    parent_fence: Option<(u64, u32)>,
    /// Its pool lacks jobs held back for those still starting
    /// ([`Settings::warm_starting`]): filled once one is ready.
    held_back: bool,
}

/// What warm spawn reads and changes of the run besides its own state: the
/// settings, the job table (a claimed job joins it), the KVS root (a claimed
/// job's state moves there), and whether the run is ending (then no pool
/// is filled).
pub(super) struct WarmCx<'a> {
    pub(super) settings: &'a Settings,
    pub(super) jobs: &'a mut Jobs,
    pub(super) kvs: &'a mut KvsRoot,
    pub(super) ending: bool,
}

/// What becomes of a claimed job's output ([`WarmPool::output`]).
pub(super) enum Output {
    /// Not a claimed job's: it goes out.
    Pass(Vec<u8>),
    /// Held for the claim's confirmation (or dropped: the claim failed).
    Held,
    /// Beyond [`MAX_HELD_OUTPUT`]: the job is dropped.
    TooMuch,
}

/// What a rank's end (or abort) does to a claimed job ([`WarmPool::ended`]).
pub(super) enum Ended {
    /// Not a claimed job: the run judges it.
    NotClaimed,
    /// Its claim had failed already: its other ranks are killed.
    Orphan,
    /// Its claim fails: the job is dropped, saying `why` (if anything).
    Drop(Option<String>),
}

/// Pooled jobs wanted for a spawn whose [`WARM_INFO_KEY`] said `choice`.
pub(super) fn wanted(settings: &Settings, choice: Option<bool>) -> usize {
    match choice {
        // A PMIx child's namespace names its parent (`PMIX_PARENT_ID`)
        // and is registered at launch, before any spawn asks: a pooled
        // job cannot know its parent, so PMIx spawns are always cold.
        _ if settings.pmi_mode == PmiMode::Pmix => 0,
        Some(false) => 0,
        Some(true) if settings.warm_spawn == 0 => DEFAULT_WARM_SPAWN,
        _ => settings.warm_spawn,
    }
}

fn say(settings: &Settings, fx: &mut dyn RunEffects, line: &str) {
    if settings.warm_verbose {
        fx.say(&format!("dpm: warm spawn: {line}"));
    } else {
        tracing::debug!("warm spawn: {line}");
    }
}

/// The run is over: the pooled jobs made for it are kept for later runs if
/// the tree keeps them (and the run did not fail), else killed.
pub(super) fn release(settings: &Settings, fx: &mut dyn RunEffects, ending: bool) {
    let (now, owner) = (fx.now_micros(), settings.owner);
    with_pool(fx, |pool, nodes, pfx| pool.release(pfx, nodes, now, owner, None, !ending));
}

impl WarmPool {
    fn take(&mut self, job: JobId) -> Option<Claim> {
        let i = self.claims.iter().position(|c| c.job == job)?;
        Some(self.claims.remove(i))
    }

    /// Whether a claim of `job` is in flight.
    pub(super) fn claiming(&self, job: JobId) -> bool {
        self.claims.iter().any(|c| c.job == job)
    }

    /// The jobs whose claims are in flight.
    pub(super) fn claimed_jobs(&self) -> impl Iterator<Item = JobId> + '_ {
        self.claims.iter().map(|c| c.job)
    }

    /// A spawn of `shape`: claim a pooled job of it from the tree's pool,
    /// if there is one (this run's oldest, else the oldest kept): it moves
    /// into the run's jobs in this one event — its state as the pool served
    /// it, its KVS root state, its held output — and its route is this
    /// run's now. Its nodes get the preputs, and the spawn waits for them
    /// to confirm ([`WarmPool::claimed`]). The spawn comes back if there is
    /// nothing to claim (a miss, counted here).
    pub(super) fn claim(&mut self, cx: &mut WarmCx<'_>, fx: &mut dyn RunEffects, shape: &Shape, ask: SpawnAsk, want: usize) -> Option<SpawnAsk> {
        let owner = cx.settings.owner;
        let Some(Taken { job, mut state, root, held, held_bytes, kept }) = fx.shared().pool.take(shape, owner) else {
            self.missed += 1;
            say(cx.settings, fx, &format!("miss for {}: started cold", shape.describe(ask.parent)));
            return Some(ask);
        };
        if let Some(root) = root {
            cx.kvs.put_job(job, root);
        }
        fx.shared().route(job, Some(cx.settings.owner));
        let listed = (owner, state.kvsname().to_string(), state.size() as u32);
        fx.shared().jobs.insert(job, listed);
        state.set_pool(true);
        for &d in state.daemons() {
            fx.send(d, ToDaemon::Claim { job, preput: ask.preput.clone() });
        }
        let waiting = state.daemons().to_vec();
        cx.jobs.insert(job, state, false);
        self.claims.push(Claim { shape: shape.clone(), job, kept, held, held_bytes, ask, waiting, ready: true, late: Vec::new(), want });
        None
    }

    /// `node` confirmed the claim of `job` (`alive`; `ready`: its ranks
    /// there were waiting for it) or refused it (a rank there had ended:
    /// `Some(why)`, the job is to be dropped). Once every node has
    /// confirmed, the parent gets its answer (or, for a job still starting,
    /// once the last child has started), the held output goes out, the
    /// shape's depth follows what the claim found ([`Depth`]), and the pool
    /// is filled again a moment later.
    pub(super) fn claimed(&mut self, cx: &mut WarmCx<'_>, fx: &mut dyn RunEffects, node: NodeId, job: JobId, alive: bool, ready: bool) -> Option<String> {
        let claim = self.claims.iter_mut().find(|c| c.job == job)?;
        if !alive {
            let host = fx.shared().nodes.host(node).to_string();
            return Some(format!("a rank on {host} ended before a claim reached it; the spawn is made again"));
        }
        claim.waiting.retain(|&d| d != node);
        claim.ready &= ready;
        if !ready {
            claim.late.push(node);
        }
        if !claim.waiting.is_empty() {
            return None;
        }
        let Claim { shape, held, kept, ask, want, ready, late, .. } = self.take(job)?;
        if !late.is_empty() {
            self.late.push((job, late));
        }
        if cx.jobs.contains(job) {
            // Reachable by other runs' connects from now on, as a cold spawn is.
            let map = cx.jobs.job_map(job, cx.settings.universe_size);
            fx.shared().connects.register(map);
        }
        let j = cx.jobs.get_mut(job)?;
        j.set_pool(false);
        if j.all_started() {
            fx.send(ask.node, ToDaemon::SpawnDone { request: ask.request, result: Ok(j.kvsname().to_string()), errcodes: Vec::new() });
        } else {
            j.answer_when_started((ask.node, ask.request), Vec::new());
        }
        for (node, rank, stream, data) in held {
            fx.output(node, job, rank, stream, &data);
        }
        self.claimed += 1;
        self.unclaimed_shapes = 0;
        let kept = if kept { " (kept from an earlier run)" } else { "" };
        let starting = if ready { "" } else { " (still starting)" };
        say(cx.settings, fx, &format!("claimed {job} for {}{kept}{starting}", shape.describe(ask.parent)));
        if cx.settings.report_placement {
            cx.jobs.report_placement(fx, job);
        }
        if let Some(kvs) = cx.jobs.get(ask.parent).map(|j| j.kvsname().to_string()) {
            self.want(&shape, want, (ask.parent, &kvs), true);
            self.follow(cx.settings, fx, &shape, want, ready);
        }
        // Every claim pushes the refill back: a burst of claims is served
        // from the pool before any replacement competes with it for the CPU.
        fx.arm(Timer::WarmRefill, REFILL_DELAY);
        None
    }

    /// Have the tree's pool hold `want` jobs of `shape` made for this run's
    /// spawns by `parent` (as many as fit in the free slots): each planned
    /// and placed as a cold spawn of the shape would be, then launched and
    /// owned by the pool.
    pub(super) fn fill(&mut self, cx: &WarmCx<'_>, fx: &mut dyn RunEffects, shape: &Shape, want: usize, parent: JobId) {
        let Some(parent_kvs) = cx.jobs.get(parent).map(|j| j.kvsname().to_string()) else { return };
        let depth = self.want(shape, want, (parent, &parent_kvs), true);
        // A pool grown deeper than asked serves spawns that outrun it: its
        // jobs start side by side, for the rate (staggered, MPICH's
        // taskmaster loop of claims took 1.4× as long on the loaded VM).
        self.launch_pooled(cx, fx, shape, depth, (parent, &parent_kvs), depth <= want);
    }

    /// Launch pooled jobs of `shape` made for this run's spawns by `parent`
    /// (its id and kvsname) until the pool holds `want` of them (or the free
    /// slots run out). `stagger`: a job that would start beside pooled ranks
    /// still starting, beyond [`Settings::warm_starting`], is held back
    /// until one of them is ready ([`WarmPool::on_next_timer`]).
    fn launch_pooled(&mut self, cx: &WarmCx<'_>, fx: &mut dyn RunEffects, shape: &Shape, want: usize, parent: (JobId, &str), stagger: bool) {
        let ((parent, parent_kvs), settings) = (parent, cx.settings);
        let have = fx.shared().pool.count(shape, settings.owner);
        let maker = Maker { owner: settings.owner, origin: parent, verbose: settings.warm_verbose };
        self.hold_back(shape, false);
        if have < want && self.claimed_starting(cx) {
            tracing::debug!("warm spawn: the pool of {} waits for a claimed job's start", shape.describe(parent));
            return self.hold_back(shape, true);
        }
        for _ in have..want.min(MAX_WARM_SPAWN) {
            // The same plan a cold spawn of this shape gets (the files it
            // names may have changed since: then no pooled job).
            let plan = match plan_spawn(&settings.spawn, fx.files(), shape.commands()) {
                Ok(p) => p,
                Err(e) => return tracing::debug!("warm spawn: no pooled job for {}: {e}", shape.describe(parent)),
            };
            if stagger && too_many_starting(settings, fx, plan.job.procs.len()) {
                tracing::debug!("warm spawn: the next pooled job of {} waits for one still starting", shape.describe(parent));
                return self.hold_back(shape, true);
            }
            let apps: Vec<usize> = plan.job.procs.iter().map(|p| p.app).collect();
            let nodes = &mut fx.shared().nodes;
            let universe = settings.spawn_universe(nodes);
            let slots = match nodes.place_spawn(&apps, &plan.nodes, false, universe).and_then(|node_of| nodes.reserve(&node_of)) {
                Ok(s) => s,
                Err(e) => return say(settings, fx, &format!("no free slots for another pooled job of {}: {e}", shape.describe(parent))),
            };
            let launch = super::spawn::launch_of(settings, cx.kvs, fx, plan.job, &slots, parent, parent_kvs.to_string(), Vec::new());
            let (job, kvsname) = (launch.job, launch.kvsname.clone());
            // The design the shape was spawned with (its parent may be gone).
            let launch = LaunchJob { awaiting_claim: true, kvs: shape.design(), ..launch };
            let state = Job::new(&launch, slots, None);
            with_pool(fx, |pool, _, pfx| pool.launch(pfx, maker, shape.clone(), launch, state));
            self.refilled += 1;
            say(settings, fx, &format!("refilled {job} ({kvsname}) for {}", shape.describe(parent)));
        }
    }

    /// Remember that `shape` wants `want` pooled jobs, for spawns by
    /// `parent` (`proven`: spawned more than once; never unlearned); its
    /// pool's depth now ([`Depth`]).
    fn want(&mut self, shape: &Shape, want: usize, parent: (JobId, &str), proven: bool) -> usize {
        let (parent, kvs) = parent;
        match self.shapes.iter_mut().find(|w| w.shape == *shape) {
            Some(w) => {
                (w.want, w.proven) = (want, w.proven || proven);
                if w.parent != parent {
                    (w.parent, w.parent_kvs) = (parent, kvs.to_string());
                }
                w.depth.get(want)
            }
            None => {
                self.shapes.push(Wanted {
                    shape: shape.clone(),
                    want,
                    depth: Depth::new(want),
                    parent,
                    parent_kvs: kvs.to_string(),
                    proven,
                    parent_fence: None,
                    held_back: false,
                });
                want
            }
        }
    }

    /// A claim of `shape` found its job waiting (`ready`) or still
    /// starting: its pool's depth follows ([`Depth`]).
    fn follow(&mut self, settings: &Settings, fx: &mut dyn RunEffects, shape: &Shape, want: usize, ready: bool) {
        let Some(w) = self.shapes.iter_mut().find(|w| w.shape == *shape) else { return };
        let before = w.depth.get(want);
        if ready {
            w.depth.ahead(want);
        } else {
            w.depth.behind(want);
        }
        let after = w.depth.get(want);
        if after != before {
            let why = if ready { "its claims find their jobs waiting" } else { "its spawns come faster than it is refilled" };
            let line = format!("pool of {} now {after} deep: {why}", shape.describe(w.parent));
            say(settings, fx, &line);
        }
    }

    /// Fill the pools that lack jobs (`all`: the learned shapes too, else
    /// only the proven ones); never while the run ends, and only for live
    /// parents.
    fn topup(&mut self, cx: &WarmCx<'_>, fx: &mut dyn RunEffects, all: bool) {
        if cx.ending || self.shapes.is_empty() {
            return;
        }
        self.shapes.retain(|w| cx.jobs.contains(w.parent));
        // A learned shape whose parent entered a fence since its spawn (is
        // finalizing: a one-shot run's end) waits for a second miss.
        let live = |w: &Wanted| w.proven || w.parent_fence.is_none_or(|f| cx.jobs.get(w.parent).map(Job::fence_progress) == Some(f));
        let due: Vec<(Shape, usize, JobId)> =
            self.shapes.iter().filter(|w| (all || w.proven) && live(w)).map(|w| (w.shape.clone(), w.want, w.parent)).collect();
        for (shape, want, parent) in due {
            self.fill(cx, fx, &shape, want, parent);
        }
    }

    /// A spawned job ended and gave its slots back: the proven shapes' pools
    /// are filled at once (never after a pooled job's own end, so a shape
    /// whose jobs crash is not restarted in a loop), the learned ones
    /// [`LEARN_DELAY`] later if their parent is still there
    /// ([`WarmPool::on_learn_timer`]).
    pub(super) fn job_ended(&mut self, cx: &WarmCx<'_>, fx: &mut dyn RunEffects) {
        self.topup(cx, fx, false);
        if !cx.ending && self.shapes.iter().any(|w| !w.proven) {
            fx.arm(Timer::WarmLearn, LEARN_DELAY);
        }
    }

    /// [`REFILL_DELAY`] after the last claim: the proven shapes' pools are filled.
    pub(super) fn on_refill_timer(&mut self, cx: &WarmCx<'_>, fx: &mut dyn RunEffects) {
        self.topup(cx, fx, false);
    }

    /// [`LEARN_DELAY`] after a spawned job's end: every pool is filled, the
    /// learned shapes' too (those whose parent ended meanwhile are gone).
    pub(super) fn on_learn_timer(&mut self, cx: &WarmCx<'_>, fx: &mut dyn RunEffects) {
        self.topup(cx, fx, true);
    }

    /// A spawn of `shape` by `parent` (wanting `want` pooled jobs) missed:
    /// what it does for the pool ([`Miss`]; a shape missed once while new
    /// shapes go unclaimed is only remembered, [`UNCLAIMED_SHAPES_MAX`]).
    /// `parent_fence`: how far the parent is in its fences now.
    pub(super) fn miss(
        &mut self,
        settings: &Settings,
        fx: &mut dyn RunEffects,
        shape: &Shape,
        want: usize,
        parent: (JobId, &str),
        parent_fence: Option<(u64, u32)>,
    ) -> Miss {
        if let Some(proven) = self.shapes.iter().find(|w| w.shape == *shape).map(|w| w.proven) {
            if proven {
                // Pooled before and empty now: the spawns outran the refills.
                self.follow(settings, fx, shape, want, false);
            }
            self.want(shape, want, parent, true);
            return Miss::Refill;
        }
        let (parent, parent_kvs) = parent;
        if self.unclaimed_shapes >= UNCLAIMED_SHAPES_MAX {
            match self.seen.iter().position(|s| s == shape) {
                Some(i) => drop(self.seen.remove(i)),
                None => {
                    if self.seen.len() >= SEEN_SHAPES_MAX {
                        self.seen.pop_front();
                    }
                    self.seen.push_back(shape.clone());
                    let n = self.unclaimed_shapes;
                    say(
                        settings,
                        fx,
                        &format!("not pooled: {} (the last {n} new shapes were never claimed; pooled if it comes again)", shape.describe(parent)),
                    );
                    return Miss::Remember;
                }
            }
        }
        self.unclaimed_shapes = self.unclaimed_shapes.saturating_add(1);
        self.want(shape, want, (parent, parent_kvs), false);
        if let Some(w) = self.shapes.iter_mut().find(|w| w.shape == *shape) {
            w.parent_fence = parent_fence;
        }
        Miss::Learn
    }

    /// The claims that spawns of `parent` are making (dropped when it ends).
    pub(super) fn claims_of(&self, parent: JobId) -> Vec<JobId> {
        self.claims.iter().filter(|c| c.ask.parent == parent).map(|c| c.job).collect()
    }

    /// `job` ended (its claims dropped already, [`WarmPool::claims_of`]):
    /// the pooled jobs made for its spawns are kept for later runs if the
    /// tree keeps them (a boot's), else killed, quietly (as at the end of
    /// the run). What the run learned is kept too: a shape `job` spawned
    /// that has no pooled job (a one-shot run's only spawn) gets one now,
    /// kept, so that the next run's first spawn of it is warm.
    pub(super) fn parent_ended(&mut self, cx: &WarmCx<'_>, fx: &mut dyn RunEffects, job: JobId) {
        let (now, owner, keep) = (fx.now_micros(), cx.settings.owner, !cx.ending);
        if keep && fx.shared().pool.keeps() {
            let learned: Vec<(Shape, usize, String)> = self
                .shapes
                .iter()
                .filter(|w| w.parent == job && w.shape.movable() && !fx.shared().pool.has(&w.shape))
                .map(|w| (w.shape.clone(), w.want, w.parent_kvs.clone()))
                .collect();
            for (shape, want, kvs) in learned {
                say(cx.settings, fx, &format!("learned {}: pooled for later runs", shape.describe(job)));
                let want = want.min(fx.shared().pool.keep_limit());
                self.launch_pooled(cx, fx, &shape, want, (job, &kvs), false);
            }
        }
        with_pool(fx, |pool, nodes, pfx| pool.release(pfx, nodes, now, owner, Some(job), keep));
        self.shapes.retain(|w| w.parent != job);
    }

    /// Take claimed `job` out of the claims, saying `why` (`None`: a quiet
    /// end): the spawn that was claiming it comes back, to be made again
    /// (the run kills the job and gives its slots back).
    pub(super) fn unclaim(&mut self, settings: &Settings, fx: &mut dyn RunEffects, job: JobId, why: Option<&str>) -> Option<SpawnAsk> {
        let claim = self.take(job)?;
        if let Some(why) = why {
            say(settings, fx, &format!("dropped {job}: {why}"));
        }
        Some(claim.ask)
    }

    /// Output of a claimed job is held until the claim is confirmed; that of
    /// an ordinary job comes back, to go out.
    pub(super) fn output(&mut self, jobs: &Jobs, node: NodeId, job: JobId, rank: Rank, stream: Stream, data: Vec<u8>) -> Output {
        if !jobs.get(job).is_some_and(Job::pool) {
            return Output::Pass(data);
        }
        let Some(e) = self.claims.iter_mut().find(|c| c.job == job) else { return Output::Held };
        if e.held_bytes + data.len() > MAX_HELD_OUTPUT {
            return Output::TooMuch;
        }
        e.held_bytes += data.len();
        e.held.push((node, rank, stream, data));
        Output::Held
    }

    /// A rank of a claimed job whose claim is not confirmed yet ended
    /// (crashed, aborted, could not start, or was killed by dpm): the job
    /// ends, quietly, and its spawn is made again; the run's verdict never
    /// hears of it. `ended`: the rank is gone (else it only asked to abort).
    pub(super) fn ended(&self, jobs: &mut Jobs, nodes: &mut crate::node_table::NodeTable, job: JobId, rank: Rank, why: &str, ended: bool) -> Ended {
        let Some(j) = jobs.get_mut(job).filter(|j| j.pool()) else { return Ended::NotClaimed };
        let killing = j.killing();
        if ended {
            j.end_rank(nodes, rank.0 as usize, RankEnd::Terminated);
        }
        if !self.claiming(job) {
            return Ended::Orphan;
        }
        if !killing {
            tracing::warn!(%job, rank = rank.0, "warm spawn: a pooled job {why} before its claim; dropped from the pool");
        }
        Ended::Drop((!killing).then(|| format!("rank {} {why} before a claim; the spawn is made again", rank.0)))
    }

    /// Panics unless every claim is of a job claimed once, for a spawn by a
    /// live job of the run (`live`), and the shapes it fills and the jobs
    /// it primes from are live jobs too (while the run goes).
    pub(super) fn check_invariants(&self, live: &dyn Fn(JobId) -> bool) {
        for (i, c) in self.claims.iter().enumerate() {
            assert!(!self.claims[..i].iter().any(|o| o.job == c.job), "{} claimed twice", c.job);
            assert!(live(c.ask.parent), "the claim of {} is for {}, not a live job", c.job, c.ask.parent);
            assert!(c.held_bytes <= MAX_HELD_OUTPUT && c.held_bytes == c.held.iter().map(|h| h.3.len()).sum::<usize>(), "{}: held output miscounted", c.job);
        }
        for w in &self.shapes {
            assert!(live(w.parent), "a shape is filled for {}, not a live job", w.parent);
        }
    }

    /// The summary line at the end of a run that used warm spawn.
    pub(super) fn summary(&self, settings: &Settings, fx: &mut dyn RunEffects) {
        if settings.warm_verbose && self.claimed + self.missed + self.refilled > 0 {
            fx.say(&format!("dpm: warm spawn: {} claimed, {} missed, {} refilled", self.claimed, self.missed, self.refilled));
        }
    }
}
