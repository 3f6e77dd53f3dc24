//! The startup simulator: one [`Scenario`] (nodes, ranks per node, KVS
//! design, fan-out, bootstrap, booted or cold, workload) run on the real
//! reactors of [`Cluster`] with the calibrated costs of a [`Calibration`].
//!
//! What is charged where (the calibration's names, as `bench/model`
//! measures them; optional fields in parentheses):
//! - the daemons coming up (cold only; [`boot_time`]): as `nodes.rs` and
//!   `links::start_children` do it, each parent (the launcher, then each
//!   daemon once its own link is up) starts its children one after another
//!   — `daemon_start_<bootstrap>` is that serial cost per added daemon —
//!   then greets and authenticates them all at once: the first child is up
//!   after the bootstrap's single-daemon latency (`latency_us`, else the
//!   median plus `link_auth`), each further one a serial cost later. The
//!   launcher launches once every node is up. One fork node is the
//!   launcher's own task (no start). Booted: the daemons are up; the run's
//!   client link costs `link_auth`.
//! - each frame on a link: `link_hop`, plus `link_byte` per byte queued on
//!   the sender's NIC, plus the receiver's thread ([`frame_cost`]: on
//!   dedicated nodes `frame_cpu`, the launcher thread's measured CPU per
//!   frame; on one host, and without it, `fence_per_node`: the per-node
//!   slope of a fence is the launcher taking one more frame, waking on
//!   shared cores); a frame arriving within `frame_cpu` of the one before
//!   it at the same thread (a burst sent back to back: a node's owner puts
//!   and their acks) is read with it and costs `frame_cpu` alone, no
//!   wake-up of its own. Each rank's start and end are one frame each to the
//!   launcher, unmerged: at scale the launcher's serial `frame_cpu` per
//!   rank is the exit phase;
//! - each PMI request: `pmi_local_request` of the daemon's CPU (a remote
//!   get is built from frames; `pmi_remote_get` stays for validation), and
//!   the rest of its `cpu_us` (the host's CPU per get) on a core for the
//!   rank that makes it;
//! - each rank: `rank_fork_exec` on a core of its node (the daemon waits
//!   for its starts), then its library, `cpu_us` on a core and the rest
//!   waiting, before its first PMI request: for MPI programs (`hello`,
//!   `spawn-loop`) `mpi_lib_start` and (`mpi_init`: MPICH's own work in
//!   MPI_Init beyond PMI); for the raw PMI clients of paper 004's patterns
//!   (`pmi_client_start`'s `cpu_us`, less the fork/exec and the PMI
//!   service it includes; none without it); with `mpi_rank_cpu` an MPI
//!   rank's CPU is that host curve's (b + c·n for n ranks on the host);
//! - each spawn: `spawn_base`, a delay before the launcher takes it;
//! - cold, each started daemon's own CPU (`daemon_start_fork`'s `cpu_us`
//!   less `rank_fork_exec`, plus its `cpu_unseen_us`: the daemon's cleaner,
//!   outside dpm's tree and so its rusage) on its node's (host's) cores
//!   from time 0; booted, each added node's per-run CPU (`booted_run`) as
//!   the launch arrives.

use std::str::FromStr;
use std::time::Duration;

use dpm_kvs::{JobId, KvsDesign};

use crate::calibration::{Calibration, CalibrationError};
use crate::process::{get, get_all, put, Script, Step};
use crate::{Cluster, Costs, Layout};

/// How the daemons are started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bootstrap {
    Fork,
    Ssh,
    Slurm,
}

impl Bootstrap {
    pub const ALL: [Bootstrap; 3] = [Bootstrap::Fork, Bootstrap::Ssh, Bootstrap::Slurm];

    pub fn name(self) -> &'static str {
        match self {
            Bootstrap::Fork => "fork",
            Bootstrap::Ssh => "ssh",
            Bootstrap::Slurm => "slurm",
        }
    }
}

/// What the ranks do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// MPICH's hello: init, put the business card, fence, get the
    /// neighbours' cards (as MPICH does, lazily, on first contact), finalize.
    Hello,
    /// Paper 004's all-to-all: put, fence, get every rank's key, fence.
    PmiAll,
    /// Paper 004's sparse pattern: put, fence, get both neighbours' keys, fence.
    PmiNeighbours,
    /// Hello, and rank 0 spawns [`SPAWNS`] jobs of one node's worth of ranks, one after another.
    SpawnLoop,
}

impl Workload {
    pub const ALL: [Workload; 4] = [Workload::Hello, Workload::PmiAll, Workload::PmiNeighbours, Workload::SpawnLoop];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Hello => "hello",
            Workload::PmiAll => "pmi-all",
            Workload::PmiNeighbours => "pmi-neighbours",
            Workload::SpawnLoop => "spawn-loop",
        }
    }
}

macro_rules! from_name {
    ($t:ty, $what:literal) => {
        impl FromStr for $t {
            type Err = SimError;
            fn from_str(s: &str) -> Result<Self, SimError> {
                let names: Vec<&str> = <$t>::ALL.iter().map(|v| v.name()).collect();
                <$t>::ALL
                    .into_iter()
                    .find(|v| v.name() == s.trim())
                    .ok_or_else(|| SimError::Scenario(format!("unknown {} {s:?} (one of {})", $what, names.join(", "))))
            }
        }
    };
}
from_name!(Bootstrap, "bootstrap");
from_name!(Workload, "workload");

/// The PMI-1 requests of the client `pmi_client_start` is calibrated with
/// (`bench/startup/pmi1_client neighbours`: init, get_maxes,
/// get_my_kvsname, put, barrier, 2 gets, finalize).
const CLIENT_REQUESTS: u32 = 8;

/// The spawns of [`Workload::SpawnLoop`].
pub const SPAWNS: usize = 4;

/// A business card's size in MPICH (ch4 over TCP: host, port, interface).
const CARD: &str = "description#n{rank}$port#40000$ifname#10.0.0.1$shm_host#n{rank}$pad#0123456789";

/// Larger scenarios are refused: their events and memory grow with ranks
/// (and ranks² for `pmi-all`); [`crate::model`] extrapolates beyond.
pub const MAX_RANKS: usize = 1 << 16;
pub const MAX_RANKS_ALL: usize = 2048;
/// Nodes a scenario may have (the bootstrap is computed over every node).
pub const MAX_NODES: usize = 1 << 22;

/// One simulated configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    pub nodes: usize,
    pub ppn: u32,
    pub kvs: KvsDesign,
    pub fanout: usize,
    pub bootstrap: Bootstrap,
    pub booted: bool,
    pub workload: Workload,
    /// Cores per node (0: one per rank, plus one for the daemon).
    pub cores: usize,
    /// All nodes are virtual nodes of one host with `cores` cores.
    pub one_host: bool,
}

impl Scenario {
    pub fn ranks(&self) -> usize {
        self.nodes * self.ppn as usize
    }

    /// A fan-out of at least the node count is a flat tree: the same as the
    /// node count, which keeps the tree's arithmetic small.
    fn fanout(&self) -> usize {
        self.fanout.min(self.nodes.max(1))
    }

    fn check(&self) -> Result<(), SimError> {
        if self.nodes == 0 || self.ppn == 0 || self.fanout == 0 {
            return Err(SimError::Scenario("nodes, ranks per node and the fan-out must be at least 1".into()));
        }
        if self.nodes > MAX_NODES {
            return Err(SimError::Scenario(format!("{} nodes is beyond the model ({MAX_NODES})", self.nodes)));
        }
        Ok(())
    }

    fn cores(&self) -> usize {
        if self.cores == 0 {
            self.ppn as usize + 1
        } else {
            self.cores
        }
    }
}

/// What a simulation found.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// From the command to the run's end.
    pub total: Duration,
    /// Consecutive phases summing to `total`: `bootstrap` (daemons up),
    /// `launch` (last rank forked), `library` (last rank's MPI library
    /// started), `pmi` (last rank's last PMI reply), `exit` (the run ended).
    /// The launch phase ends when the last rank is forked and exec'd.
    pub phases: Vec<(&'static str, Duration)>,
    /// The mean time a spawn took, from request to reply (`spawn-loop`).
    pub spawn: Option<Duration>,
}

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("{0}")]
    Scenario(String),
    #[error(transparent)]
    Calibration(#[from] CalibrationError),
    #[error("the calibration has no cost {0:?} (needed for this bootstrap)")]
    NoCost(&'static str),
    #[error("the simulated run failed (exit {exit:?}): {said}")]
    Failed { exit: Option<i32>, said: String },
}

/// A cost's CPU (`cpu_us`, at most its median; else all of it) and the
/// rest; zero if absent.
fn split(cal: &Calibration, name: &str) -> (Duration, Duration) {
    match cal.get(name) {
        None => (Duration::ZERO, Duration::ZERO),
        Some(all) => {
            let cpu = cal.field(name, "cpu_us").unwrap_or(all).min(all);
            (cpu, all - cpu)
        }
    }
}

/// The calibrated costs of each effect, for an MPI program's ranks.
pub fn costs(cal: &Calibration, cores: usize, one_host: bool) -> Costs {
    let (lib_cpu, lib_wait) = split(cal, "mpi_lib_start");
    let (init_cpu, init_wait) = split(cal, "mpi_init");
    Costs {
        link_hop: cal.required("link_hop"),
        link_byte_ns: cal.costs.get("link_byte").map_or(0.0, |c| c.median_us * 1e3),
        pmi_io: Duration::ZERO,
        proc_start: Duration::ZERO,
        fork_exec: cal.required("rank_fork_exec"),
        lib_cpu: lib_cpu + init_cpu,
        lib_wait: lib_wait + init_wait,
        pmi_serve: cal.required("pmi_local_request"),
        // The host's CPU per get beyond the daemon's service: the client's.
        pmi_client: cal.field("pmi_local_request", "cpu_us").map_or(Duration::ZERO, |all| all.saturating_sub(cal.required("pmi_local_request"))),
        frame_cpu: frame_cost(cal, one_host),
        frame_queued: cal.get("frame_cpu"),
        spawn_delay: cal.required("spawn_base"),
        cores,
        one_host,
    }
}

/// What one frame costs its receiver (a daemon relaying it, the launcher
/// taking it). On one host, a wake-up on cores every other daemon and rank
/// takes: the fence's wall per node (`fence_per_node`) measures that. On a
/// dedicated node, the thread's CPU (`frame_cpu`: the launcher thread's
/// CPU per frame, `bench/model/frame_cpu`), the fence's slope without one.
pub fn frame_cost(cal: &Calibration, one_host: bool) -> Duration {
    match cal.get("frame_cpu") {
        Some(cpu) if !one_host => cpu,
        _ => cal.required("fence_per_node"),
    }
}

/// `dpm run`'s own start and end, beyond what the simulator charges: the
/// exec of its binary, its runtime and set-up before the first daemon or
/// rank, its teardown after the last. Measured as the calibration's whole
/// run of one raw PMI client (`pmi_client_start`'s `wall_one_us`) less the
/// same run simulated without it on the calibrating host; zero without
/// that field. (Without it every validation row was short by this much:
/// 2.5 ms of the committed calibration's 4.2 ms one-client run.)
pub fn run_fixed(cal: &Calibration) -> Duration {
    let Some(whole) = cal.field("pmi_client_start", "wall_one_us") else { return Duration::ZERO };
    let one = Scenario {
        nodes: 1,
        ppn: 1,
        kvs: KvsDesign::Auto,
        fanout: 1,
        bootstrap: Bootstrap::Fork,
        booted: false,
        workload: Workload::PmiNeighbours,
        cores: cal.machine.cpus.max(1) as usize,
        one_host: true,
    };
    run(cal, &one, Duration::ZERO).map_or(Duration::ZERO, |o| whole.saturating_sub(o.total))
}

/// When every daemon is up, from the command (see the module
/// documentation): `dpm run`'s own start ([`run_fixed`]) included.
pub fn boot_time(cal: &Calibration, sc: &Scenario) -> Result<Duration, SimError> {
    Ok(run_fixed(cal) + tree_up(cal, sc)?)
}

/// When every daemon is up, from `dpm run`'s start.
pub fn tree_up(cal: &Calibration, sc: &Scenario) -> Result<Duration, SimError> {
    sc.check()?;
    let auth = cal.required("link_auth");
    if sc.booted {
        return Ok(auth);
    }
    if sc.nodes == 1 && sc.bootstrap == Bootstrap::Fork {
        return Ok(Duration::ZERO);
    }
    let name = match sc.bootstrap {
        Bootstrap::Fork => "daemon_start_fork",
        Bootstrap::Ssh => "daemon_start_ssh",
        Bootstrap::Slurm => "daemon_start_slurm",
    };
    let serial = cal.get(name).ok_or(SimError::NoCost(name))?;
    let first = cal.field(name, "latency_us").unwrap_or(serial + auth).max(serial);
    let mut last = Duration::ZERO;
    // Parents before children: the tree's breadth-first order.
    let mut queue = std::collections::VecDeque::from([(None, Duration::ZERO)]);
    while let Some((parent, ready)) = queue.pop_front() {
        for (i, child) in dpm_proto::tree::children(parent, sc.nodes, sc.fanout()).into_iter().enumerate() {
            let up = ready + first + serial * i as u32;
            last = last.max(up);
            queue.push_back((Some(child), up));
        }
    }
    Ok(last)
}

fn scripts(sc: &Scenario) -> Vec<(&'static str, Script)> {
    let start = [Step::Init, put("bc-{rank}", CARD), Step::Barrier];
    let with = |mid: Vec<Step>| -> Script { start.iter().cloned().chain(mid).chain([Step::Finalize, Step::Exit(0)]).collect() };
    match sc.workload {
        Workload::Hello => vec![("main", with(vec![get("bc-{next}"), get("bc-{prev}")]))],
        Workload::PmiNeighbours => vec![("main", with(vec![get("bc-{next}"), get("bc-{prev}"), Step::Barrier]))],
        Workload::PmiAll => vec![("main", with(vec![get_all("bc-{i}"), Step::Barrier]))],
        Workload::SpawnLoop => {
            // MPI_Comm_spawn is collective over the parents: the others wait
            // in it (here: a fence after the spawns) rather than end meanwhile;
            // ending, their exits queued at the launcher before the spawns
            // and made a spawn grow with the job's nodes.
            let spawns = std::iter::repeat_n([Step::Spawn { n: sc.ppn, script: "child".into() }, Step::Accept], SPAWNS).flatten();
            let spawner = with(spawns.chain([Step::Barrier]).collect());
            vec![("spawner", spawner), ("main", with(vec![Step::Barrier])), ("child", with(vec![]))]
        }
    }
}

/// Run one scenario.
pub fn simulate(cal: &Calibration, sc: &Scenario) -> Result<Outcome, SimError> {
    run(cal, sc, run_fixed(cal))
}

/// [`simulate`] with `dpm run`'s own start and end taken as `fixed` (a
/// search computes [`run_fixed`] once).
pub fn run(cal: &Calibration, sc: &Scenario, fixed: Duration) -> Result<Outcome, SimError> {
    sc.check()?;
    let ranks = sc.ranks();
    let max = if sc.workload == Workload::PmiAll { MAX_RANKS_ALL } else { MAX_RANKS };
    if ranks > max {
        return Err(SimError::Scenario(format!("{ranks} ranks is beyond full simulation ({max} for {})", sc.workload.name())));
    }
    let boot = fixed + tree_up(cal, sc)?;
    let mut costs = costs(cal, sc.cores(), sc.one_host);
    if let (Some(per_rank), false) = (cal.get("mpi_rank_cpu"), matches!(sc.workload, Workload::PmiAll | Workload::PmiNeighbours)) {
        // An MPI rank's CPU grows with the ranks on its host (MPICH's
        // shared-memory set-up and its waiting ranks' polling):
        // `mpi_rank_cpu` is b of the host's a + b·n + c·n² (fork/exec, the
        // library and MPI_Init, dpm's share), `pair_us` c; a rank among n
        // costs b + c·n, its fork/exec charged apart.
        let pair = cal.field("mpi_rank_cpu", "pair_us").unwrap_or_default();
        let on_host = if sc.one_host { ranks } else { sc.ppn as usize };
        costs.lib_cpu = (per_rank + pair * on_host as u32).saturating_sub(costs.fork_exec);
    }
    if matches!(sc.workload, Workload::PmiAll | Workload::PmiNeighbours) {
        // A raw PMI client: its CPU per rank (`cpu_us`: the host's CPU per
        // added client, whole) includes the fork/exec and the daemon's
        // service of its requests, both charged apart. Its wall slope (the
        // median) is that CPU over the calibrating host's cores, not a wait:
        // taking the CPU as at most the wall (as for a library's start)
        // charged a client 545 µs of its 925 here.
        let whole = cal.field("pmi_client_start", "cpu_us").or_else(|| cal.get("pmi_client_start")).unwrap_or_default();
        let served = (costs.pmi_serve + costs.pmi_client) * CLIENT_REQUESTS;
        (costs.lib_cpu, costs.lib_wait) = (whole.saturating_sub(costs.fork_exec + served), Duration::ZERO);
    }
    let mut c = Cluster::new(Layout { slots: sc.ppn, fanout: sc.fanout(), kvs: sc.kvs, costs, ..Layout::nodes(sc.nodes) });
    // A model of thousands of ranks: the per-event walk of a node's ranks
    // would make it quadratic (the cluster tier's tests keep the check).
    c.check_nodes = false;
    for (name, script) in scripts(sc) {
        c.script(name, script);
    }
    if !sc.booted {
        // Each started daemon's own CPU (its forked start's CPU less its one
        // rank's) on its host's cores, from time 0: on one host of 2 cores,
        // 64 daemons' ~3 ms each outlast the tree's start (the ranks then
        // queue behind them: 64 × 1 ranks were 42 % short without it).
        // Its cleaner's CPU too, which no rusage of `dpm run` sees (it leaves
        // dpm's tree): `cpu_unseen_us`, by bench/model/unseen_cpu.
        let own = cal.field("daemon_start_fork", "cpu_us").unwrap_or_default().saturating_sub(cal.required("rank_fork_exec"))
            + cal.field("daemon_start_fork", "cpu_unseen_us").unwrap_or_default();
        let first = usize::from(sc.bootstrap == Bootstrap::Fork);
        for node in first..sc.nodes {
            c.charge_cpu(node, fixed, own);
        }
    } else if let Some(per_node) = cal.get("booted_run") {
        // Booted, each added node's daemon takes the run, sets its job up,
        // reports and ends it (`booted_run`, bench/model/booted_cpu: what a
        // cold daemon's start includes), on its host's cores as the launch
        // arrives.
        for node in 1..sc.nodes {
            c.charge_cpu(node, boot, per_node);
        }
    }
    c.advance_to(boot);
    let job = match sc.workload {
        Workload::SpawnLoop => c.launch_mixed(&[("spawner", 1), ("main", ranks as u32 - 1)]),
        _ => c.launch("main", ranks as u32, Some(sc.ppn)),
    };
    // Virtual time: far beyond any startup, so only a hang reaches it.
    let exit = c.run_until(Duration::from_secs(24 * 3600));
    let failed = c.procs.iter().find(|p| !p.proc.errors.is_empty()).map(|p| p.proc.errors.join("; "));
    let (Some(0), None, Some(total)) = (exit, &failed, c.finished_at) else {
        return Err(SimError::Failed { exit, said: failed.unwrap_or_else(|| c.said.join("; ")) });
    };
    Ok(Outcome { total, phases: phases(&c, job, boot, total), spawn: spawn_time(&c, job, sc) })
}

fn phases(c: &Cluster, job: JobId, boot: Duration, total: Duration) -> Vec<(&'static str, Duration)> {
    let ranks = c.ranks(job);
    let latest = |f: &dyn Fn(&crate::Process) -> Duration| ranks.iter().map(|p| f(p)).max().unwrap_or_default();
    let marks = [
        ("bootstrap", boot),
        ("launch", latest(&|p| p.forked_at)),
        ("library", latest(&|p| p.ready_at)),
        ("pmi", latest(&|p| p.reply_times.last().copied().unwrap_or_default())),
        ("exit", total),
    ];
    let mut at = Duration::ZERO;
    marks
        .into_iter()
        .map(|(name, mark)| {
            let end = mark.max(at);
            let phase = (name, end - at);
            at = end;
            phase
        })
        .collect()
}

/// The spawner's requests and replies: 4 of the start sequence, the put,
/// the fence, then one per spawn. A spawn as MPI_Comm_spawn sees it: from its request
/// until its reply and its children's MPI_Init (their fence, the reply
/// before their finalize) are both done: the reply alone comes before the
/// children start (`run::spawn::answers_before_start`); the parent's `Accept` waits
/// for them before the next spawn, as MPI_Comm_spawn's accept does.
fn spawn_time(c: &Cluster, job: JobId, sc: &Scenario) -> Option<Duration> {
    if sc.workload != Workload::SpawnLoop {
        return None;
    }
    let spawner = c.ranks(job).into_iter().next()?;
    let (requests, replies) = (&spawner.request_times, &spawner.reply_times);
    let mut children: Vec<JobId> = c.procs.iter().map(|p| p.job).filter(|&j| j != job).collect();
    children.sort_unstable();
    children.dedup();
    let spans: Vec<Duration> = (0..SPAWNS)
        .filter_map(|i| {
            let (asked, answered) = (*requests.get(6 + i)?, *replies.get(6 + i)?);
            let ready = c.ranks(*children.get(i)?).iter().filter_map(|p| p.reply_times.iter().rev().nth(1).copied()).max()?;
            Some(answered.max(ready) - asked)
        })
        .collect();
    (spans.len() == SPAWNS).then(|| spans.iter().sum::<Duration>() / SPAWNS as u32)
}
