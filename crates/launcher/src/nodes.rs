//! Where the nodes come from, and how a daemon starts on each.
//!
//! Two separate questions, answered separately (as Hydra does):
//! - the node list: `-hosts a,b:4`, `-f hostfile`, `--virtual-nodes N`, or this
//!   machine alone ([`crate::cli`] resolves flag → environment → default);
//! - the bootstrap: `InProcess` (one node: the daemon is a task of the
//!   launcher), `Fork` (a `dpm daemon` child process per node on this machine
//!   — virtual nodes), `Ssh` (`ssh HOST dpm daemon`), `Slurm` (an `srun` step
//!   per daemon), `Agent` (a batch system's launch agent: `blaunch`,
//!   `qrsh -inherit -V`, `pbs_tmrsh`; see [`crate::agent`]), `Manual`
//!   (daemons started by hand connect by TCP; see [`crate::manual`]).
//!
//! A fork, ssh or srun daemon speaks the framed protocol on its stdin/stdout,
//! so the link is a pipe the launcher owns or a channel ssh or Slurm set up;
//! only the manual bootstrap listens on the network, until its daemons are
//! in. Every link, whatever carries it, opens with the hellos and a mutual
//! proof of the run's [`Secret`] ([`dpm_proto::auth`]). Each link is bridged
//! here to the controller's channels; a link that breaks becomes
//! [`ToLauncher::Lost`].

use std::str::FromStr;
use std::time::Duration;

use tokio::process::Child;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use dpm_daemon::links;
use dpm_kvs::NodeId;
use dpm_proto::auth::Secret;
use dpm_proto::link::Up;
use dpm_proto::tree::{self, TreeSpec};

use crate::controller::DaemonLink;
use crate::error::{Error, UsageError};
use crate::machine::this_host;
pub use crate::machine::Node;
use crate::manual::{self, Manual};

/// How daemons start (`-launcher`, `DPM_LAUNCHER`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launcher {
    Fork,
    Ssh,
    Slurm,
    Manual,
    /// LSF's `blaunch` ([`crate::agent`]).
    Lsf,
    /// Grid Engine's `qrsh -inherit -V`.
    Sge,
    /// PBS's `pbs_tmrsh` where it is found, else ssh.
    Pbs,
}

impl FromStr for Launcher {
    type Err = UsageError;
    fn from_str(s: &str) -> Result<Self, UsageError> {
        match s {
            "fork" => Ok(Launcher::Fork),
            "ssh" => Ok(Launcher::Ssh),
            "slurm" => Ok(Launcher::Slurm),
            "manual" => Ok(Launcher::Manual),
            "lsf" => Ok(Launcher::Lsf),
            "sge" => Ok(Launcher::Sge),
            "pbs" => Ok(Launcher::Pbs),
            other => Err(UsageError(format!("unknown launcher '{other}' ({LAUNCHERS})"))),
        }
    }
}

/// The launchers `-launcher` takes, for messages.
pub const LAUNCHERS: &str = "fork, ssh, slurm, manual, lsf, sge or pbs";

/// How the launcher gets its daemons: the tree's own ways (fork, ssh, srun:
/// [`tree::Bootstrap`], which daemons use for their children too), or the
/// two only the launcher has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bootstrap {
    /// One node: the daemon is a task of the launcher.
    InProcess,
    /// A tree started by fork, ssh or srun.
    Tree(tree::Bootstrap),
    /// Daemons started by hand, connecting by TCP.
    Manual(Manual),
}

impl Bootstrap {
    /// The tree's fan-out for `nodes` nodes when `requested` was asked for:
    /// daemons started by hand have no children, so that tree is flat.
    pub fn effective_fanout(&self, requested: usize, nodes: usize) -> usize {
        match self {
            Bootstrap::Manual(_) => nodes.max(1),
            _ => requested.max(1),
        }
    }
}

/// How long the whole tree may take to come up (ssh connections included).
const TREE_TIMEOUT: Duration = Duration::from_secs(60);

/// The running daemons of a run.
pub struct Daemons {
    pub links: Vec<DaemonLink>,
    pub up: mpsc::UnboundedReceiver<Up>,
    children: Vec<Child>,
    in_process: Option<tokio::task::JoinHandle<()>>,
    /// The reading ends of TCP links (manual bootstrap): done when the daemon hangs up.
    tcp_links: Vec<JoinHandle<()>>,
    /// The stream's sender, for daemons that join later (a boot's
    /// `--add`); weak, so the stream still ends when every link is gone.
    joins: mpsc::WeakUnboundedSender<Up>,
}

/// What remains of [`Daemons`] once the controller took the links.
pub struct DaemonsWaiter {
    children: Vec<Child>,
    in_process: Option<tokio::task::JoinHandle<()>>,
    tcp_links: Vec<JoinHandle<()>>,
}

impl Daemons {
    /// The links and message stream for the controller; the rest waits for the end.
    /// Where daemons that join the running tree send their messages.
    pub fn joins(&self) -> mpsc::WeakUnboundedSender<Up> {
        self.joins.clone()
    }

    pub fn split(self) -> (Vec<DaemonLink>, mpsc::UnboundedReceiver<Up>, DaemonsWaiter) {
        (self.links, self.up, DaemonsWaiter { children: self.children, in_process: self.in_process, tcp_links: self.tcp_links })
    }
}

impl DaemonsWaiter {
    /// After `Shutdown` was sent: wait for the daemons to exit (they kill
    /// what is left of their jobs first); kill any that hang.
    pub async fn wait(mut self) {
        if let Some(h) = self.in_process.take() {
            let _ = h.await;
        }
        // Healthy daemons kill their ranks and exit within milliseconds; what
        // is still running after a second is an ssh to a host that is gone.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
        for child in &mut self.children {
            if tokio::time::timeout_at(deadline, child.wait()).await.is_err() {
                let _ = child.kill().await;
            }
        }
        // A daemon started by hand is not ours to kill: it has been told to
        // shut down, and hangs up when its ranks are gone.
        for link in self.tcp_links {
            if tokio::time::timeout_at(deadline, link).await.is_err() {
                tracing::warn!("a daemon started by hand did not hang up within a second of the shutdown");
            }
        }
    }
}

/// Start one daemon per node, in a tree of fan-out `fanout` (the launcher
/// starts its children, each daemon its own), every link authenticated with a
/// fresh secret. Returns once every node has reported ready. On any failure
/// nothing is left running.
pub async fn start(nodes: &[Node], bootstrap: &Bootstrap, fanout: usize, trace: bool, verbose: u8) -> Result<Daemons, Error> {
    let secret = Secret::generate().map_err(|e| Error::failed(e.to_string()))?;
    start_with_secret(nodes, bootstrap, fanout, trace, verbose, &secret, Reach::default()).await
}

/// What the daemons of a tree are told beyond their place in it.
#[derive(Clone, Debug, Default)]
pub struct Reach {
    /// Where the daemons below the top level re-attach if their parent
    /// daemon is lost (`TreeSpec::rejoin`; a boot's `boot::reform` listener).
    pub rejoin: Option<String>,
    /// Seconds each daemon may take to start (`TreeSpec::start_timeout`).
    pub start_timeout: Option<u64>,
}

/// [`start`] with a given secret (a persistent boot keeps one) and what
/// the daemons are told beyond their place ([`Reach`]).
pub async fn start_with_secret(
    nodes: &[Node],
    bootstrap: &Bootstrap,
    fanout: usize,
    trace: bool,
    verbose: u8,
    secret: &Secret,
    reach: Reach,
) -> Result<Daemons, Error> {
    let (up_tx, up_rx) = mpsc::unbounded_channel();
    if *bootstrap == Bootstrap::InProcess {
        let (down_tx, down_rx) = mpsc::unbounded_channel();
        let config = dpm_daemon::DaemonConfig { host: nodes[0].host.clone(), trace };
        let joins = up_tx.downgrade();
        let _ = up_tx.send(Up::Ready { node: NodeId(0), host: nodes[0].host.clone() });
        // The node sends into the controller's channel itself, as node 0's.
        let handle = tokio::task::spawn_local(dpm_daemon::run(config, down_rx, up_tx));
        let links = vec![DaemonLink { via: down_tx, node: NodeId(0), host: nodes[0].host.clone() }];
        return Ok(Daemons { links, up: up_rx, children: Vec::new(), in_process: Some(handle), tcp_links: Vec::new(), joins });
    }
    if let Bootstrap::Manual(_) = bootstrap {
        // The manual bootstrap answers signals itself while it waits.
        return start_tree(nodes, bootstrap, fanout, trace, verbose, secret, up_tx, up_rx, reach).await;
    }
    // A signal while ssh or srun clients start must end them (they are in
    // process groups of their own: a terminal's Ctrl-C does not reach
    // them) rather than leave them running behind a dead dpm: the start
    // is dropped, and with it the clients (killed on drop).
    use tokio::signal::unix::{signal, SignalKind};
    let mut signals = Vec::new();
    for kind in [SignalKind::interrupt(), SignalKind::terminate(), SignalKind::hangup()] {
        signals.push(signal(kind).map_err(|e| Error::failed(format!("cannot handle signals: {e}")))?);
    }
    let [sigint, sigterm, sighup] = signals.as_mut_slice() else { unreachable!("three signals registered") };
    let interrupted = |what, signal: i32| Err(Error::Interrupted { what, signal });
    tokio::select! {
        started = start_tree(nodes, bootstrap, fanout, trace, verbose, secret, up_tx, up_rx, reach) => started,
        _ = sigint.recv() => interrupted("interrupted (SIGINT)", libc::SIGINT),
        _ = sigterm.recv() => interrupted("terminated (SIGTERM)", libc::SIGTERM),
        _ = sighup.recv() => interrupted("hung up (SIGHUP)", libc::SIGHUP),
    }
}

/// [`start_with_secret`] for a tree (fork, ssh, srun) or the manual bootstrap.
#[allow(clippy::too_many_arguments)]
async fn start_tree(
    nodes: &[Node],
    bootstrap: &Bootstrap,
    fanout: usize,
    trace: bool,
    verbose: u8,
    secret: &Secret,
    up_tx: mpsc::UnboundedSender<Up>,
    mut up_rx: mpsc::UnboundedReceiver<Up>,
    reach: Reach,
) -> Result<Daemons, Error> {
    let n = nodes.len();
    let joins = up_tx.downgrade();
    let spec = TreeSpec {
        hosts: nodes.iter().map(|n| n.host.clone()).collect(),
        fanout: bootstrap.effective_fanout(fanout, n),
        bootstrap: match bootstrap {
            Bootstrap::Tree(b) => b.clone(),
            _ => tree::Bootstrap::Fork,
        },
        trace,
        verbose,
        rejoin: reach.rejoin,
        start_timeout: reach.start_timeout,
    };
    let me = match bootstrap {
        Bootstrap::Manual(Manual { connect_host: Some(name), .. }) => name.clone(),
        _ => this_host(),
    };
    let mut children = Vec::new();
    let mut tcp_links = Vec::new();
    let mut top_links = std::collections::HashMap::new();
    if let Bootstrap::Manual(opts) = bootstrap {
        for link in manual::connect_all(nodes, opts, secret, &me, &up_tx).await? {
            tcp_links.push(link.reader);
            top_links.insert(link.node, link.down);
        }
    } else {
        let top = tree::children(None, n, spec.fanout);
        for child in links::start_children(&top, &spec, &me, secret, &up_tx).await.map_err(Error::failed)? {
            children.push(child.process);
            top_links.insert(child.node, child.down);
        }
    }
    // Every node is up when its Ready has come through the tree.
    let mut ready = vec![false; n];
    let mut early = Vec::new();
    let deadline = tokio::time::Instant::now() + TREE_TIMEOUT;
    while ready.iter().any(|r| !r) {
        match tokio::time::timeout_at(deadline, up_rx.recv()).await {
            Ok(Some(Up::Ready { node, .. })) if node.0 < n => ready[node.0] = true,
            Ok(Some(Up::Lost { node, error } | Up::ParentLost { node, error })) => {
                let host = nodes.get(node.0).map_or("?", |h| h.host.as_str());
                return Err(Error::failed(format!("{node} ({host}): {error}")));
            }
            Ok(Some(other)) => early.push(other),
            Ok(None) => return Err(Error::failed("the daemon links closed while starting")),
            Err(_) => {
                let missing: Vec<String> = (0..n).filter(|&i| !ready[i]).map(|i| format!("{i} ({})", nodes[i].host)).collect();
                return Err(Error::failed(format!("nodes {} did not come up within {} s", missing.join(", "), TREE_TIMEOUT.as_secs())));
            }
        }
    }
    for msg in early {
        let _ = up_tx.send(msg);
    }
    // One addressed link per node: messages for node d go, as `Down::To{d}`,
    // to the top-level child whose subtree holds d; the daemons on the way
    // pass them on.
    let mut node_links = Vec::with_capacity(n);
    for (d, node) in nodes.iter().enumerate().map(|(d, node)| (NodeId(d), node)) {
        let hop = tree::next_hop(None, d, spec.fanout).expect("every node is below the launcher");
        node_links.push(DaemonLink { via: top_links[&hop].clone(), node: d, host: node.host.clone() });
    }
    Ok(Daemons { links: node_links, up: up_rx, children, in_process: None, tcp_links, joins })
}
