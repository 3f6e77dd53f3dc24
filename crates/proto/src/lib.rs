//! # dpm-proto: the internal protocol between the launcher and node daemons
//!
//! One payload enum per direction: [`ToDaemon`] is what the launcher says to
//! a node, [`ToLauncher`] what a node says to the launcher. How they travel —
//! addressed down the daemon tree, tagged with their origin on the way up,
//! with heartbeats, the tree's set-up and link loss beside them — is the
//! envelope in [`link`] (`Down`, `Up`), carried over typed frame halves so a
//! message sent the wrong way does not compile. On one machine the launcher
//! and its one daemon exchange the envelopes over in-process channels; across
//! machines they travel as length-delimited frames (hence `serde`). Every
//! message names its job, so one daemon serves many jobs at once.
//!
//! The launcher owns job-wide decisions (fence completion, name service, where
//! spawned processes go, when a job has failed); a daemon owns its node
//! (forking ranks, serving their PMI connections, forwarding their stdio,
//! reaping them).

pub mod auth;
pub mod control;
pub mod frame;
pub mod link;
pub mod tree;

use dpm_kvs::remote::{KvsDest, KvsMsg};
use dpm_kvs::ring::{RingSegment, RingSlot};
use dpm_kvs::{JobId, KeyValues, KvsDesign, NodeId, Rank};
use serde::{Deserialize, Serialize};

/// Output flow control: a node stops reading a job's processes' pipes while
/// this many bytes of the job's output are sent up and not acknowledged
/// ([`ToDaemon::OutputAck`]). Per job and node, so a slow consumer blocks
/// only its own run's ranks. 256 KiB: four pipe buffers' worth in flight,
/// enough that the acknowledgements' round trip (µs in one process, a
/// link hop across nodes) never starves a fast consumer.
pub const OUTPUT_WINDOW: u64 = 256 * 1024;

/// The launcher acknowledges a node's output of a job in steps of at least
/// this many written bytes (a quarter of the window: few messages, and the
/// window never waits on a step that cannot complete, as it is ≤ the window).
pub const OUTPUT_ACK_STEP: u64 = OUTPUT_WINDOW / 4;

/// Identifies a request a daemon made on behalf of a PMI connection, so the
/// launcher's answer finds its way back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RequestId(pub u64);

/// One program of a job (an MPMD segment, or one command of a spawn):
/// described once, shared by all its ranks.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AppSpec {
    /// Resolved path of the program.
    pub exe: String,
    /// `argv`, including `argv[0]` as the user wrote it.
    pub argv: Vec<String>,
    /// The complete environment, before dpm adds its `PMI_*` variables
    /// (with `node_env`: what is set over the node's own).
    pub env: Vec<(String, String)>,
    pub wdir: String,
    /// The node's own environment (its daemon's) is the base, `env` set over
    /// it: Hydra's `-genvnone`/`-genvlist`/`-envnone`/`-envlist`, which stop
    /// the launcher's environment from travelling, not the node's.
    #[serde(default)]
    pub node_env: bool,
}

/// One process to start: which rank, running which app (index into `LaunchJob::apps`).
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct ProcSpec {
    pub rank: Rank,
    pub app: usize,
}

/// How ranks reach their PMI server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PmiMode {
    /// An inherited socketpair (`PMI_FD`); the default.
    Fd,
    /// A TCP port on the daemon (`PMI_PORT` + `PMI_ID`), only when asked.
    Port,
    /// PMIx (Open MPI 5): the node's PMIx server (`PMIX_*` variables from
    /// `PMIx_server_setup_fork`), no `PMI_*` variables at all.
    Pmix,
}

/// A job's processes on one node.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LaunchJob {
    pub job: JobId,
    pub kvsname: String,
    pub size: u32,
    pub appnums: Vec<i64>,
    pub universe_size: i64,
    pub process_mapping: String,
    pub spawner: Option<String>,
    pub preput: KeyValues,
    pub pmi_mode: PmiMode,
    /// Which rank, if any on this node, gets the launcher's stdin.
    pub stdin_rank: Option<Rank>,
    pub apps: Vec<AppSpec>,
    /// This node's processes.
    pub procs: Vec<ProcSpec>,
    /// The job's KVS design (`dpm run --kvs`); spawned jobs inherit it.
    #[serde(default)]
    pub kvs: KvsDesign,
    /// The node of each rank of the job (index = rank): where `srcid` points,
    /// and the job's daemons among which keys are hashed to owners.
    #[serde(default)]
    pub node_of: Vec<NodeId>,
    /// A warm spawn's pooled job, started before any spawn asked for it: a
    /// get of a key that is not there waits (instead of failing) until
    /// [`ToDaemon::Claim`] brings the spawn's preputs.
    #[serde(default)]
    pub awaiting_claim: bool,
    /// CPU, memory and GPU binding of the job's ranks (`-bind-to`,
    /// `-map-by`, `--gpus-per-rank`…), applied by each daemon to its own
    /// topology; spawned jobs inherit the run's. (Boxed: most launches
    /// carry the inactive default, and `ToDaemon` stays small.)
    #[serde(default)]
    pub binding: Box<dpm_binding::BindPolicy>,
    /// Watch the job's ranks for Open MPI (`PmiMode::Fd` or `Port` only: a
    /// program the launcher could not classify, served PMI-1/2): each node
    /// listens on its own loopback for the job and names that listener in
    /// its ranks' `PMIX_SERVER_URI*`; the first connection of the owner's
    /// there is an Open MPI rank that would run as a singleton, reported
    /// with [`ToLauncher::WatchTripped`] (`dpm_daemon::pmix_watch`).
    #[serde(default)]
    pub pmix_watch: bool,
    /// MPIR launch mode (a debugger started `dpm run`): each rank is left
    /// stopped (SIGSTOP) at its program's first instruction, reported
    /// [`ToLauncher::Started`] as usual; the launcher continues the job
    /// ([`ToDaemon::Signal`] SIGCONT) once the debugger let it go on.
    #[serde(default)]
    pub hold: bool,
}

/// A tool daemon to start on each node of a job ([`ToDaemon::StartTool`]):
/// what a debugger wrote into `MPIR_executable_path` and
/// `MPIR_server_arguments`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolDaemon {
    pub path: String,
    pub args: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// How a process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExitStatus {
    Code(i32),
    Signal(i32),
}

/// How far a process got with PMI when it ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PmiProgress {
    Silent,
    Active,
    Finalized,
}

/// Name-service requests carried up to the launcher.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NameRequest {
    Publish {
        service: String,
        port: String,
    },
    Unpublish {
        service: String,
    },
    Lookup {
        service: String,
    },
    /// A lookup that waits until the name is published (PMIx's `PMIX_WAIT`);
    /// answered not-found when the asking job ends first.
    LookupWait {
        service: String,
    },
}

/// One command of a spawn request, as the daemon received it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpawnCommand {
    pub exe: String,
    pub args: Vec<String>,
    pub maxprocs: u32,
    pub info: Vec<(String, String)>,
}

/// A PMIx collective over several jobs (`ToLauncher::Connect`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CollectiveKind {
    /// `PMIx_Connect`: every node learns every listed job.
    Connect,
    /// `PMIx_Disconnect`.
    Disconnect,
    /// `PMIx_Fence` over every rank of several jobs (Open MPI's
    /// `MPI_Comm_disconnect` of an intercommunicator): the nodes' blobs.
    Fence,
    /// `PMIx_Group_construct` (Open MPI's `MPI_Comm_create_from_group`,
    /// `MPI_Intercomm_create_from_groups`, sessions): the nodes' blobs, every
    /// node learns every listed job, and the group gets a context id unique
    /// in the tree when asked ([`GroupSpec`]).
    Group,
}

/// The group of a [`CollectiveKind::Group`] collective: its id (the
/// members' string) and whether a node's members asked for a context id
/// (`PMIX_GROUP_ASSIGN_CONTEXT_ID`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupSpec {
    pub id: String,
    pub context_id: bool,
}

/// Where a job's ranks run, for a node that hosts none of them and must
/// know the job (a PMIx connect: every participating node registers every
/// participating namespace).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobMap {
    pub job: JobId,
    pub kvsname: String,
    /// The node of each rank (index = rank).
    pub node_of: Vec<NodeId>,
    /// The app of each rank.
    pub appnums: Vec<i64>,
    pub universe_size: i64,
}

/// Launcher → daemon.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum ToDaemon {
    Launch(LaunchJob),
    /// Fence `epoch` of `job` completed; `delta` is every put made in it
    /// that the job's KVS design broadcasts (none under tree, dkvs, direct).
    FenceDone {
        job: JobId,
        epoch: u64,
        delta: KeyValues,
    },
    /// Ring `seq` of `job` completed: `slot` is the place in the ring of the
    /// receiving daemon's subtree (split further by a daemon with children).
    RingOut {
        job: JobId,
        seq: u64,
        slot: RingSlot,
    },
    /// A KVS message from another daemon or from the launcher (the answer to
    /// a get that walked up the tree).
    Kvs(KvsMsg),
    NameDone {
        request: RequestId,
        result: Result<Option<String>, String>,
    },
    /// The spawn's answer: the new job's kvsname, or why it failed.
    /// `errcodes`: empty when every requested process started; after a
    /// `soft` spawn that started fewer, one code per requested process
    /// (0: started), as PMI-1's `spawn_result` carries them.
    SpawnDone {
        request: RequestId,
        result: Result<String, String>,
        #[serde(default)]
        errcodes: Vec<i32>,
    },
    /// A [`ToLauncher::Connect`] collective completed on every node of its
    /// namespaces: the maps of the listed jobs that have no rank on the
    /// receiving node (to register before answering) and every node's data
    /// in node order, or why it failed.
    ConnectDone {
        request: RequestId,
        result: Result<(Vec<JobMap>, Vec<u8>), String>,
        /// A group's context id, when one was asked for.
        #[serde(default)]
        context_id: Option<u64>,
    },
    /// Send `signal` to every process of `job`.
    Signal {
        job: JobId,
        signal: i32,
    },
    /// Report each live rank of `job` on this node ([`ToLauncher::RankReport`]):
    /// its state and, with `stacks`, its stack (a hung job explains itself).
    Report {
        job: JobId,
        stacks: bool,
    },
    /// Bytes for the stdin of the job's stdin rank; empty means end of input.
    Stdin {
        job: JobId,
        data: Vec<u8>,
    },
    /// A spawn claimed `job`, a pooled warm-spawn job launched with
    /// `awaiting_claim`: its preputs become visible and the gets parked for
    /// them are answered.
    Claim {
        job: JobId,
        preput: KeyValues,
    },
    /// `bytes` more of the job's output from this node were written to
    /// their destination: credit for [`OUTPUT_WINDOW`] (flow control).
    OutputAck {
        job: JobId,
        bytes: u64,
    },
    /// The job is over on every node: forget it.
    Forget {
        job: JobId,
    },
    /// Ranks of `job` died without finalizing (a signal, or an exit without
    /// `PMI_Finalize`) while the others run on (`-disable-auto-cleanup`):
    /// they are `PMI_dead_processes` from now on, and a fence of the job is
    /// doomed ([`ToLauncher::FenceDoomed`]).
    RanksDead {
        job: JobId,
        ranks: Vec<Rank>,
    },
    /// Start a debugger's tool daemon (the MPIR tool-daemon extension:
    /// `MPIR_executable_path`, `MPIR_server_arguments`) once on this node,
    /// beside `job`'s ranks here; it ends with the job
    /// ([`ToLauncher::ToolOutput`] carries its output).
    StartTool {
        job: JobId,
        tool: ToolDaemon,
        /// The node's name as the job's table has it (`MPIR_proctable`).
        host: String,
    },
    /// Serve a process dpm did not start (an MPICH singleton that asked for a
    /// process manager): `pmi` is its PMI connection, already through the
    /// `singinit` handshake. An owned descriptor, meaningful only in the
    /// launcher's own process: over a link it arrives empty and the daemon
    /// refuses the adoption.
    Adopt {
        launch: LaunchJob,
        rank: Rank,
        pid: u32,
        pmi: link::InProcessFd,
    },
}

/// A rank's end, as its node saw it ([`ToLauncher::Exited`]). On the wire
/// exactly as the fields of a struct variant would be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankExit {
    pub job: JobId,
    pub rank: Rank,
    pub pid: u32,
    pub status: ExitStatus,
    pub pmi: PmiProgress,
    /// When it was reaped, in µs since the Unix epoch (the node's clock),
    /// so the launcher can tell which of several failures came first.
    pub at: u64,
}

/// Daemon → launcher.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum ToLauncher {
    Started {
        job: JobId,
        rank: Rank,
        pid: u32,
    },
    /// A process could not be started; `errno` explains why.
    LaunchFailed {
        job: JobId,
        rank: Rank,
        error: String,
        errno: i32,
    },
    Output {
        job: JobId,
        rank: Rank,
        stream: Stream,
        data: Vec<u8>,
    },
    /// A rank ended; its output and PMI traffic have been forwarded before this.
    Exited(RankExit),
    FenceIn {
        job: JobId,
        epoch: u64,
        count: u32,
        puts: KeyValues,
    },
    /// Every rank of `job` in the sender's subtree entered ring `seq`: their
    /// stretch of the ring (one message per subtree, merged on the way up).
    RingIn {
        job: JobId,
        seq: u64,
        segment: RingSegment,
    },
    /// A KVS message for another daemon (`KvsDest::Node`), passed on by the
    /// daemons on the way and by the launcher, or up the tree (`KvsDest::Up`:
    /// a `Tree` get that each ancestor may answer, the launcher at the latest).
    Kvs {
        to: KvsDest,
        msg: KvsMsg,
    },
    Abort {
        job: JobId,
        rank: Rank,
        code: i32,
        message: String,
    },
    Name {
        request: RequestId,
        job: JobId,
        op: NameRequest,
    },
    Spawn {
        request: RequestId,
        job: JobId,
        rank: Rank,
        preput: KeyValues,
        commands: Vec<SpawnCommand>,
    },
    /// This node's part of a PMIx collective over every rank of the jobs
    /// named by `nspaces` (kvsnames): every local participant called.
    /// `job`: the asking rank's job (the run it belongs to); `data`: the
    /// node's fence blob (empty for connect and disconnect). `ranks`: for a
    /// fence over part of some of the jobs, those jobs' participating ranks
    /// (kvsname, ranks); the jobs not listed take part whole.
    Connect {
        request: RequestId,
        job: JobId,
        nspaces: Vec<String>,
        kind: CollectiveKind,
        data: Vec<u8>,
        #[serde(default)]
        ranks: Vec<(String, Vec<u32>)>,
        /// The group of a [`CollectiveKind::Group`] collective.
        #[serde(default)]
        group: Option<GroupSpec>,
    },
    /// The node received [`ToDaemon::Claim`] for `job`: `alive` if every rank
    /// of the job there was still running (or not started yet), and the
    /// claim was delivered; otherwise a rank had already ended, and the
    /// claim was not delivered (the launcher drops the job and spawns anew).
    /// `ready`: every rank of the job there was already waiting for the
    /// claim (its `MPI_Init` at its end); a claim that finds a rank still
    /// starting tells the launcher that the pool is refilled too slowly for
    /// the spawns that come.
    Claimed {
        job: JobId,
        alive: bool,
        ready: bool,
    },
    /// A live rank as its node sees it ([`ToDaemon::Report`]): `state`, the
    /// PMI call it waits in (if any); `stack`, its threads' stacks or why
    /// there are none (no tracer installed, not traced within the bound).
    RankReport {
        job: JobId,
        rank: Rank,
        pid: u32,
        state: String,
        stack: Option<String>,
    },
    /// A `--pmi-trace` line.
    Trace {
        line: String,
    },
    /// A line of dpm's own about `job`, for its run's stderr: the node's
    /// PMIx server library's own log lines, while the job runs there.
    Note {
        job: JobId,
        line: String,
    },
    /// Output of the tool daemon started for `job` on the sender's node
    /// ([`ToDaemon::StartTool`]), whole lines: for the run's stdout or stderr.
    ToolOutput {
        job: JobId,
        stream: Stream,
        data: Vec<u8>,
    },
    /// A rank of `job` (launched with [`LaunchJob::pmix_watch`]) connected
    /// to the node's PMIx watch: it runs Open MPI, served PMI-1/2 it would be
    /// a singleton. Once per job and node; the launcher ends the run.
    WatchTripped {
        job: JobId,
    },
    /// Ranks of `job` on the sender's node (`waiting`) are in a fence that
    /// a dead rank ([`ToDaemon::RanksDead`]) can never join (a rank may be
    /// reported again). Once every live rank waits so, the launcher ends the run.
    FenceDoomed {
        job: JobId,
        waiting: Vec<Rank>,
    },
    /// Every rank of pooled `job` on the node (launched awaiting its claim,
    /// [`LaunchJob::awaiting_claim`]) now waits for the claim: its start is
    /// done there. The launcher starts a shape's next pooled job only once
    /// the one before is ready, so pooled jobs do not start side by side.
    AwaitingClaim {
        job: JobId,
    },
    /// A fence arrival of `job` from the sender's subtree went up through
    /// its parent daemon, lost before the fence's completion came back: the
    /// arrival or the completion is gone with it. Sent once the sender
    /// re-attached straight below the launcher; the job cannot finish that
    /// fence, and the launcher ends its run as for a lost node.
    FenceCut {
        job: JobId,
        epoch: u64,
    },
}

impl ToLauncher {
    /// The job a message is about (`None`: a trace line, about no job).
    pub fn job(&self) -> Option<JobId> {
        match self {
            ToLauncher::Started { job, .. }
            | ToLauncher::LaunchFailed { job, .. }
            | ToLauncher::Output { job, .. }
            | ToLauncher::Exited(RankExit { job, .. })
            | ToLauncher::FenceIn { job, .. }
            | ToLauncher::RingIn { job, .. }
            | ToLauncher::Abort { job, .. }
            | ToLauncher::Name { job, .. }
            | ToLauncher::Spawn { job, .. }
            | ToLauncher::Claimed { job, .. }
            | ToLauncher::Connect { job, .. }
            | ToLauncher::Note { job, .. }
            | ToLauncher::ToolOutput { job, .. }
            | ToLauncher::RankReport { job, .. }
            | ToLauncher::WatchTripped { job }
            | ToLauncher::FenceDoomed { job, .. }
            | ToLauncher::AwaitingClaim { job }
            | ToLauncher::FenceCut { job, .. } => Some(*job),
            ToLauncher::Kvs { msg, .. } => Some(msg.job()),
            ToLauncher::Trace { .. } => None,
        }
    }
}
