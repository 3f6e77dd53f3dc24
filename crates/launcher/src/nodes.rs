//! Where the nodes come from, and how a daemon starts on each.
//!
//! Two separate questions, answered separately (as Hydra does):
//! - the node list: `-hosts a,b:4`, `-f hostfile`, `--virtual-nodes N`, or this
//!   machine alone ([`crate::cli`] resolves flag → environment → default);
//! - the bootstrap: `InProcess` (one node: the daemon is a task of the
//!   launcher), `Fork` (a `dpm daemon` child process per node on this machine
//!   — virtual nodes), `Ssh` (`ssh HOST dpm daemon`).
//!
//! A fork or ssh daemon speaks the framed protocol on its stdin/stdout, so the
//! link is a pipe the launcher owns or an ssh channel ssh authenticated:
//! nothing listens on the network. Each link is bridged here to the
//! controller's channels; a link that breaks becomes [`ToLauncher::Lost`].

use std::time::Duration;

use tokio::process::Child;
use tokio::sync::mpsc;

use dpm_daemon::links;
use dpm_proto::tree::{self, TreeSpec};
use dpm_proto::{ToDaemon, ToLauncher};

use crate::controller::DaemonLink;

/// One node of the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// Where to start the daemon (ssh target), and the node's name in messages.
    pub host: String,
    pub slots: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bootstrap {
    InProcess,
    Fork,
    /// The ssh command and its options, e.g. `["ssh", "-o", "BatchMode=yes"]`.
    Ssh(Vec<String>),
    /// `srun` steps inside the Slurm allocation.
    Slurm,
}

/// How long the whole tree may take to come up (ssh connections included).
const TREE_TIMEOUT: Duration = Duration::from_secs(60);

/// The running daemons of a run.
pub struct Daemons {
    pub links: Vec<DaemonLink>,
    pub up: mpsc::UnboundedReceiver<(usize, ToLauncher)>,
    children: Vec<Child>,
    in_process: Option<tokio::task::JoinHandle<()>>,
}

/// What remains of [`Daemons`] once the controller took the links.
pub struct DaemonsWaiter {
    children: Vec<Child>,
    in_process: Option<tokio::task::JoinHandle<()>>,
}

impl Daemons {
    /// The links and message stream for the controller; the rest waits for the end.
    pub fn split(self) -> (Vec<DaemonLink>, mpsc::UnboundedReceiver<(usize, ToLauncher)>, DaemonsWaiter) {
        (self.links, self.up, DaemonsWaiter { children: self.children, in_process: self.in_process })
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
    }
}

/// Start one daemon per node, in a tree of fan-out `fanout` (the launcher
/// starts its children, each daemon its own). Returns once every node has
/// reported ready. On any failure nothing is left running.
pub async fn start(nodes: &[Node], bootstrap: &Bootstrap, fanout: usize, trace: bool, verbose: u8) -> Result<Daemons, String> {
    let (up_tx, mut up_rx) = mpsc::unbounded_channel();
    if *bootstrap == Bootstrap::InProcess {
        let (down_tx, down_rx) = mpsc::unbounded_channel();
        let (daemon_up_tx, mut daemon_up_rx) = mpsc::unbounded_channel();
        let config = dpm_daemon::DaemonConfig { host: nodes[0].host.clone(), trace };
        let handle = tokio::task::spawn_local(dpm_daemon::run(config, down_rx, daemon_up_tx));
        tokio::task::spawn_local(async move {
            while let Some(msg) = daemon_up_rx.recv().await {
                if up_tx.send((0, msg)).is_err() {
                    return;
                }
            }
        });
        let links = vec![DaemonLink { tx: down_tx, host: nodes[0].host.clone() }];
        return Ok(Daemons { links, up: up_rx, children: Vec::new(), in_process: Some(handle) });
    }
    let spec = TreeSpec {
        hosts: nodes.iter().map(|n| n.host.clone()).collect(),
        fanout: fanout.max(1),
        bootstrap: match bootstrap {
            Bootstrap::Ssh(cmd) => tree::Bootstrap::Ssh(cmd.clone()),
            Bootstrap::Slurm => tree::Bootstrap::Slurm,
            _ => tree::Bootstrap::Fork,
        },
        trace,
        verbose,
    };
    let n = nodes.len();
    let top = tree::children(None, n, spec.fanout);
    let started = links::start_children(&top, &spec, &crate::this_host()).await?;
    let mut children = Vec::new();
    let mut top_links = std::collections::HashMap::new();
    for child in started {
        let node = child.node;
        let (tx, process) = child.bridge(up_tx.clone());
        children.push(process);
        top_links.insert(node, tx);
    }
    // Every node is up when its Ready has come through the tree.
    let mut ready = vec![false; n];
    let mut early = Vec::new();
    let deadline = tokio::time::Instant::now() + TREE_TIMEOUT;
    while ready.iter().any(|r| !r) {
        match tokio::time::timeout_at(deadline, up_rx.recv()).await {
            Ok(Some((node, ToLauncher::Ready { .. }))) if node < n => ready[node] = true,
            Ok(Some((node, ToLauncher::Lost { error }))) => {
                let host = nodes.get(node).map_or("?", |h| h.host.as_str());
                return Err(format!("node {node} ({host}): {error}"));
            }
            Ok(Some(other)) => early.push(other),
            Ok(None) => return Err("the daemon links closed while starting".into()),
            Err(_) => {
                let missing: Vec<String> = (0..n).filter(|&i| !ready[i]).map(|i| format!("{i} ({})", nodes[i].host)).collect();
                return Err(format!("nodes {} did not come up within {} s", missing.join(", "), TREE_TIMEOUT.as_secs()));
            }
        }
    }
    for msg in early {
        let _ = up_tx.send(msg);
    }
    // One addressed link per node: messages for node d go to the top-level
    // child whose subtree holds d, wrapped so the daemons on the way pass it on.
    let mut node_links = Vec::with_capacity(n);
    for (d, node) in nodes.iter().enumerate() {
        let hop = tree::next_hop(None, d, spec.fanout).expect("every node is below the launcher");
        let via = top_links[&hop].clone();
        let (tx, mut rx) = mpsc::unbounded_channel::<ToDaemon>();
        tokio::task::spawn_local(async move {
            while let Some(msg) = rx.recv().await {
                if via.send(ToDaemon::Routed { node: d, msg: Box::new(msg) }).is_err() {
                    return;
                }
            }
        });
        node_links.push(DaemonLink { tx, host: node.host.clone() });
    }
    Ok(Daemons { links: node_links, up: up_rx, children, in_process: None })
}
