//! `dpm daemon`'s link to its parent: the driver of its [`TreeNode`] and of
//! its node ([`crate::node::driver`]).
//!
//! It opens the link (hellos, the mutual proof of the run's secret), starts
//! the children when the tree description comes, and then moves frames:
//! from the parent into the tree node (and on to the node's reactor or a
//! child), from the node's reactor and the children into the tree node (and
//! on to the parent), heartbeats when idle. A closed or silent parent reads
//! as `Shutdown`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use tokio::sync::mpsc;
use tracing::Instrument;

use dpm_proto::frame::{handshake, read_frame, write_frame, FrameError, Hello, Role, heartbeat_timeout, HEARTBEAT_EVERY, PROTOCOL_VERSION};
use dpm_proto::{ToDaemon, ToLauncher};

use crate::tree::{TreeAction, TreeNode};
use crate::{links, node, DaemonConfig};

/// The daemon's side of its link to the launcher (or parent daemon).
pub struct Uplink {
    /// The node index the launcher assigned.
    pub node: usize,
    /// The run's secret, proved to the parent and passed on to the children.
    pub secret: dpm_proto::auth::Secret,
    /// Who is at the other end, for messages: "the parent on stdin", an address.
    pub peer: String,
}

/// The parent could not be greeted or authenticated.
#[derive(Debug, thiserror::Error)]
#[error("link to {peer} refused: {source}")]
pub struct LinkError {
    pub peer: String,
    #[source]
    pub source: FrameError,
}

/// The tree node and the links to the direct children.
struct Tree {
    node: TreeNode,
    children: HashMap<usize, mpsc::UnboundedSender<ToDaemon>>,
}

impl Tree {
    /// Carry out `actions`: to this node's reactor through `own` (false if
    /// it is gone), to the children; frames for the parent into `parent`.
    fn apply(&self, actions: Vec<TreeAction>, own: Option<&mpsc::UnboundedSender<ToDaemon>>, parent: &mut Vec<ToLauncher>) -> bool {
        let mut alive = true;
        for action in actions {
            match action {
                TreeAction::Parent(msg) => parent.push(msg),
                TreeAction::Child(node, msg) => {
                    if let Some(tx) = self.children.get(&node) {
                        let _ = tx.send(msg);
                    }
                }
                TreeAction::Own(msg) => match own {
                    Some(own) => alive &= own.send(msg).is_ok(),
                    None => tracing::debug!("the daemon is stopping: a message for it was dropped"),
                },
            }
        }
        alive
    }
}

/// `dpm daemon`: serve a launcher (or a parent daemon) over a byte stream —
/// the daemon's stdin and stdout (piped directly, or through ssh or srun), or
/// a TCP connection the daemon made to the launcher (manual bootstrap). The
/// link opens with the hellos and the mutual proof of the run's secret
/// ([`dpm_proto::auth`]); a parent that fails it is refused. A daemon with
/// children in the tree starts them, passes messages down to them (`Routed`)
/// and theirs up (`FromNode`), and merges its subtree's fence arrivals into
/// one. Returns when the parent says `Shutdown` or the stream closes or falls
/// silent. Every log line carries the node (a `node` span).
pub async fn serve_link<R, W>(config: DaemonConfig, uplink: Uplink, reader: R, writer: W) -> Result<(), LinkError>
where
    R: tokio::io::AsyncRead + Unpin + 'static,
    W: tokio::io::AsyncWrite + Unpin + 'static,
{
    let span = crate::node_span(uplink.node, &config.host);
    drive(config, uplink, reader, writer).instrument(span).await
}

async fn drive<R, W>(config: DaemonConfig, uplink: Uplink, mut reader: R, mut writer: W) -> Result<(), LinkError>
where
    R: tokio::io::AsyncRead + Unpin + 'static,
    W: tokio::io::AsyncWrite + Unpin + 'static,
{
    let Uplink { node, secret, peer } = uplink;
    let ours = Hello { protocol: PROTOCOL_VERSION, role: Role::Daemon, node, host: config.host.clone() };
    if let Err(source) = handshake(&mut reader, &mut writer, ours, Role::Launcher, &secret).await {
        return Err(LinkError { peer, source });
    }
    tracing::debug!("link to {peer} authenticated");
    let secret = Rc::new(secret);
    let (down_tx, down_rx) = mpsc::unbounded_channel();
    let (up_tx, mut up_rx) = mpsc::unbounded_channel::<ToLauncher>();
    // Messages from this daemon and from the subtree below, as (origin, msg).
    let (tree_up_tx, mut tree_up_rx) = mpsc::unbounded_channel::<(usize, ToLauncher)>();
    let tree = Rc::new(RefCell::new(Tree { node: TreeNode::new(node), children: HashMap::new() }));
    let own_down = down_tx.downgrade();

    // Frames in → this daemon or down the tree; a closed or silent link reads
    // as Shutdown (the daemon then kills its ranks: a parent that is gone
    // cannot end them).
    let inbound = {
        let tree = tree.clone();
        let tree_up = tree_up_tx.clone();
        let host = config.host.clone();
        let secret = secret.clone();
        let silence = heartbeat_timeout();
        crate::spawn_local_here(async move {
            let mut meter = links::SilenceMeter::new();
            loop {
                let frame = tokio::time::timeout(silence, read_frame::<_, ToDaemon>(&mut reader)).await;
                meter.heard(|| "the parent".to_string());
                match frame {
                    Ok(Ok(ToDaemon::Heartbeat)) => {}
                    Ok(Ok(ToDaemon::Tree(spec))) => {
                        if let Err(e) = start_subtree(&tree, &spec, &host, &tree_up, &secret).await {
                            tracing::error!("cannot start the daemons below node {node}: {e}");
                            let _ = tree_up.send((node, ToLauncher::Lost { error: e }));
                        }
                    }
                    Ok(Ok(msg)) => {
                        let mut tree = tree.borrow_mut();
                        let actions = tree.node.from_parent(msg);
                        let mut parent = Vec::new();
                        let alive = tree.apply(actions, Some(&down_tx), &mut parent);
                        debug_assert!(parent.is_empty(), "nothing from the parent goes back up");
                        if !alive {
                            return;
                        }
                    }
                    Ok(Err(e)) => {
                        if !matches!(e, FrameError::Closed) {
                            tracing::error!("link to the parent failed: {e}");
                        }
                        let _ = down_tx.send(ToDaemon::Shutdown);
                        return;
                    }
                    Err(_) => {
                        tracing::error!("the parent has been silent for {:.1} s: taking it as lost", silence.as_secs_f64());
                        let _ = down_tx.send(ToDaemon::Shutdown);
                        return;
                    }
                }
            }
        })
    };
    // This daemon's own messages join the subtree's.
    let own = {
        let tree_up = tree_up_tx.clone();
        crate::spawn_local_here(async move {
            while let Some(msg) = up_rx.recv().await {
                if tree_up.send((node, msg)).is_err() {
                    return;
                }
            }
        })
    };
    drop(tree_up_tx);
    // Everything up → frames to the parent, fences merged, heartbeats when idle.
    let outbound = {
        let tree = tree.clone();
        crate::spawn_local_here(async move {
            let mut frames = Vec::new();
            loop {
                let (origin, msg) = match tokio::time::timeout(HEARTBEAT_EVERY, tree_up_rx.recv()).await {
                    Ok(Some(x)) => x,
                    Ok(None) => return,
                    Err(_) => {
                        if write_frame(&mut writer, &ToLauncher::Heartbeat).await.is_err() {
                            return;
                        }
                        continue;
                    }
                };
                {
                    let mut tree = tree.borrow_mut();
                    let actions = tree.node.from_below(origin, msg);
                    tree.apply(actions, own_down.upgrade().as_ref(), &mut frames);
                }
                for frame in frames.drain(..) {
                    if let Err(e) = write_frame(&mut writer, &frame).await {
                        // The parent went away (at shutdown, it may go first);
                        // the inbound side deals with a lost parent.
                        tracing::debug!("cannot write to the parent: {e}");
                        return;
                    }
                }
            }
        })
    };
    // The node on its own thread: however long its work, this loop keeps
    // reading and writing frames and heartbeats.
    node::driver::serve_apart(config, down_rx, up_tx).await;
    // Children go with us: closing their links makes them shut down too.
    {
        let mut tree = tree.borrow_mut();
        tree.children.clear();
        tree.node.children_gone();
    }
    let _ = own.await;
    inbound.abort();
    let _ = tokio::time::timeout(HEARTBEAT_EVERY, outbound).await;
    Ok(())
}

/// Start this daemon's children (and, through them, the rest of its subtree).
async fn start_subtree(
    tree: &RefCell<Tree>,
    spec: &dpm_proto::tree::TreeSpec,
    host: &str,
    up: &mpsc::UnboundedSender<(usize, ToLauncher)>,
    secret: &dpm_proto::auth::Secret,
) -> Result<(), String> {
    let me = {
        let mut tree = tree.borrow_mut();
        tree.node.set_fanout(spec.fanout);
        tree.node.me()
    };
    let nodes = dpm_proto::tree::children(Some(me), spec.hosts.len(), spec.fanout);
    for child in links::start_children(&nodes, spec, host, secret, up).await? {
        // The process handle lives as long as the link task that reaps it.
        let mut process = child.process;
        crate::spawn_local_here(async move {
            let _ = process.wait().await;
        });
        let mut tree = tree.borrow_mut();
        tree.node.child_linked(child.node);
        tree.children.insert(child.node, child.down);
    }
    Ok(())
}
