//! What a simulated cluster is: its [`Layout`] (nodes, slots, fan-out, KVS
//! design) and the [`Costs`] each kind of event is charged in virtual time.

use std::time::Duration;

use dpm_kvs::KvsDesign;

/// What each kind of event costs in virtual time. The defaults are plain
/// latencies with no contention (the protocol tests); the simulator
/// ([`crate::sim`]) sets the calibrated CPU costs and `cores`.
#[derive(Clone, Copy, Debug)]
pub struct Costs {
    /// One hop on a daemon link (launcher ↔ daemon, daemon ↔ daemon).
    pub link_hop: Duration,
    /// Each byte of a frame on the sender's NIC (ns; frames queue there).
    pub link_byte_ns: f64,
    /// A PMI request or reply crossing a rank's socket.
    pub pmi_io: Duration,
    /// From a start to the process's first step, beyond its CPU work.
    pub proc_start: Duration,
    /// CPU on the node to fork and exec a rank.
    pub fork_exec: Duration,
    /// CPU of the rank itself before its first step (its MPI library's
    /// start), and its waiting beyond that CPU (loading, not contending).
    pub lib_cpu: Duration,
    pub lib_wait: Duration,
    /// The daemon's CPU to serve one PMI request.
    pub pmi_serve: Duration,
    /// The rank's own CPU to make one PMI request and take its reply.
    pub pmi_client: Duration,
    /// The daemon's (or launcher's) CPU to handle one link frame.
    pub frame_cpu: Duration,
    /// The same for a frame that arrives while its receiver's thread is
    /// still busy: read with the frames before it, it needs no wake-up of
    /// its own (`None`: `frame_cpu` too).
    pub frame_queued: Option<Duration>,
    /// A spawn's fixed cost before the launcher takes it (not CPU: it
    /// delays the request, the launcher serves others meanwhile).
    pub spawn_delay: Duration,
    /// Cores per node (0: unlimited, nothing contends).
    pub cores: usize,
    /// All nodes (and the launcher) are virtual nodes of one host: they
    /// share its `cores` and its network.
    pub one_host: bool,
}

impl Default for Costs {
    fn default() -> Self {
        Costs {
            link_hop: Duration::from_micros(50),
            link_byte_ns: 0.0,
            pmi_io: Duration::from_micros(5),
            proc_start: Duration::from_millis(1),
            fork_exec: Duration::ZERO,
            lib_cpu: Duration::ZERO,
            lib_wait: Duration::ZERO,
            pmi_serve: Duration::ZERO,
            pmi_client: Duration::ZERO,
            frame_cpu: Duration::ZERO,
            frame_queued: None,
            spawn_delay: Duration::ZERO,
            cores: 0,
            one_host: false,
        }
    }
}

/// How a cluster is laid out and what its run is told.
#[derive(Clone, Debug)]
pub struct Layout {
    pub nodes: usize,
    pub slots: u32,
    pub fanout: usize,
    pub kvs: KvsDesign,
    pub no_oversubscribe: bool,
    pub kill_grace: Duration,
    pub costs: Costs,
}

impl Layout {
    pub fn nodes(nodes: usize) -> Self {
        Layout { nodes, slots: 2, fanout: 32, kvs: KvsDesign::default(), no_oversubscribe: false, kill_grace: Duration::from_secs(3), costs: Costs::default() }
    }
}
