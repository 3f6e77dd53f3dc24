//! The PMIx front end's inputs and outputs as plain data: a library upcall
//! ([`PmixEvent`]) under its [`PmixRequest`] id, and the answer to it
//! ([`PmixAnswer`]), which the driver turns into the library's completion.

use dpm_proto::Stream;

use super::{GroupAnswer, GroupDirectives, PmixApp};

/// One library upcall awaiting the reactor's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PmixRequest(pub u64);

/// A PMIx upcall as plain data (the driver keeps its completion handle).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PmixEvent {
    /// A rank called `PMIx_Init`.
    Connected { nspace: String, rank: u32, req: PmixRequest },
    /// A rank called `PMIx_Finalize`.
    Finalized { nspace: String, rank: u32, req: PmixRequest },
    /// `PMIx_Abort` (`MPI_Abort`).
    Abort { nspace: String, rank: u32, status: i32, message: String, req: PmixRequest },
    /// `PMIx_Log` to stderr or stdout (Open MPI's help and error messages):
    /// printed as the rank's own output. Already answered.
    Log { nspace: String, rank: u32, output: Vec<(Stream, Vec<u8>)> },
    /// A fence across nodes: the participants (rank [`RANK_WILDCARD`](dpm_pmix::RANK_WILDCARD): the
    /// whole namespace) and this node's blob. `timeout` (here and below):
    /// the client's `PMIX_TIMEOUT` in seconds, answered `PMIX_ERR_TIMEOUT`
    /// when it expires first (`pmix_front/timeout.rs`).
    Fence { procs: Vec<(String, u32)>, data: Vec<u8>, timeout: Option<u32>, req: PmixRequest },
    /// A local client wants a rank's data that another node holds.
    DirectModex { nspace: String, rank: u32, req: PmixRequest },
    /// The local library's answer to [`NodeEffects::pmix_dmodex`](crate::node::NodeEffects::pmix_dmodex) `token`.
    DmodexAnswer { token: u64, status: i32, data: Vec<u8> },
    /// `PMIx_Publish` (`MPI_Publish_name`): the (key, string value) pairs.
    Publish { nspace: String, pairs: Vec<(String, String)>, req: PmixRequest },
    /// `PMIx_Lookup` (`MPI_Lookup_name`); `wait`: `PMIX_WAIT`, answered
    /// once the name is published.
    Lookup { nspace: String, keys: Vec<String>, wait: bool, timeout: Option<u32>, req: PmixRequest },
    /// `PMIx_Connect` (or `PMIx_Disconnect`) over `procs`' namespaces: every
    /// local participant has called.
    Connect { procs: Vec<(String, u32)>, disconnect: bool, timeout: Option<u32>, req: PmixRequest },
    /// `PMIx_Spawn` (`MPI_Comm_spawn`) by `rank` of `nspace`.
    Spawn { nspace: String, rank: u32, job_info: Vec<(String, String)>, apps: Vec<PmixApp>, timeout: Option<u32>, req: PmixRequest },
    /// `PMIx_Unpublish` (`MPI_Unpublish_name`).
    Unpublish { nspace: String, keys: Vec<String>, req: PmixRequest },
    /// `PMIx_Group_construct` (or destruct: `construct` false) of group
    /// `id`: every local member has called; `data`: this node's
    /// `PMIX_GROUP_ENDPT_DATA` (`pmix_front/group.rs`).
    Group { construct: bool, id: String, members: Vec<(String, u32)>, directives: GroupDirectives, data: Vec<u8>, timeout: Option<u32>, req: PmixRequest },
}

/// The answer to a [`PmixRequest`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PmixAnswer {
    Status(i32),
    /// A fence's or modex's status and bytes.
    Data(i32, Vec<u8>),
    /// A lookup's status and the (key, value) pairs found.
    Found(i32, Vec<(String, String)>),
    /// A spawn's status and the new namespace (empty on failure).
    Spawned(i32, String),
    /// A group operation's status and result.
    Group(i32, GroupAnswer),
}

impl PmixAnswer {
    /// The answer's status.
    pub fn status(&self) -> i32 {
        match self {
            PmixAnswer::Status(s) | PmixAnswer::Data(s, _) | PmixAnswer::Found(s, _) | PmixAnswer::Spawned(s, _) | PmixAnswer::Group(s, _) => *s,
        }
    }
}
