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

use dpm_kvs::NodeId;
use dpm_proto::frame::{handshake, heartbeat_timeout, lateness, FrameError, Hello, Role, HEARTBEAT_EVERY, PROTOCOL_VERSION};
use dpm_proto::link::{Down, FrameReceiver, FrameSender, Up};
use dpm_proto::ToLauncher;

use crate::tree::{TreeAction, TreeNode};
use crate::{links, liveness, node, DaemonConfig};

/// The daemon's side of its link to the launcher (or parent daemon).
pub struct Uplink {
    /// The node index the launcher assigned.
    pub node: NodeId,
    /// The run's secret, proved to the parent and passed on to the children.
    pub secret: dpm_proto::auth::Secret,
    /// Who is at the other end, for messages: "the parent on stdin", an address.
    pub peer: String,
    /// The parent's pid when it runs on this host (it forked this daemon):
    /// its state speaks for it when the link falls silent (`liveness`).
    pub parent_pid: Option<u32>,
    /// Where to re-attach (`HOST:PORT` of the launcher) if the parent — a
    /// daemon — is lost: this daemon then goes on as a top-level one.
    pub rejoin: Option<String>,
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
    children: HashMap<NodeId, mpsc::UnboundedSender<Down>>,
}

impl Tree {
    /// Carry out `actions`: to this node's reactor through `own` (false if
    /// it is gone), to the children; frames for the parent into `parent`.
    fn apply(&self, actions: Vec<TreeAction>, own: Option<&mpsc::UnboundedSender<Down>>, parent: &mut Vec<Up>) -> bool {
        let mut alive = true;
        let me = self.node.me();
        for action in actions {
            match action {
                TreeAction::Parent { origin, msg } => parent.push(Up::From { node: origin, msg }),
                TreeAction::Child { hop, node, msg } => {
                    if let Some(tx) = self.children.get(&hop) {
                        let _ = tx.send(Down::To { node, msg });
                    }
                }
                TreeAction::Own(msg) => match own {
                    Some(own) => alive &= own.send(Down::To { node: me, msg }).is_ok(),
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
/// children in the tree starts them, passes messages down to them
/// (`Down::To`) and theirs up (`Up::From`), and merges its subtree's fence
/// arrivals into one. Returns when the parent says `Shutdown` or the stream
/// closes or falls silent — or, given where to re-attach, once it has
/// re-attached to the launcher and that link ends so. Every log line
/// carries the node (a `node` span).
pub async fn serve_link<R, W>(config: DaemonConfig, uplink: Uplink, reader: R, writer: W) -> Result<(), LinkError>
where
    R: tokio::io::AsyncRead + Unpin + 'static,
    W: tokio::io::AsyncWrite + Unpin + 'static,
{
    let span = crate::node_span(uplink.node, &config.host);
    drive(config, uplink, reader, writer).instrument(span).await
}

/// The link's reading end, boxed: the parent's stream, or the launcher's
/// TCP connection after a re-attach.
type LinkReader = FrameReceiver<Box<dyn tokio::io::AsyncRead + Unpin>, Down>;
/// The link's writing end, boxed likewise.
type LinkWriter = FrameSender<Box<dyn tokio::io::AsyncWrite + Unpin>, Up>;

async fn drive<R, W>(config: DaemonConfig, uplink: Uplink, mut reader: R, mut writer: W) -> Result<(), LinkError>
where
    R: tokio::io::AsyncRead + Unpin + 'static,
    W: tokio::io::AsyncWrite + Unpin + 'static,
{
    let Uplink { node, secret, peer, parent_pid, rejoin } = uplink;
    let ours = Hello { protocol: PROTOCOL_VERSION, role: Role::Daemon, node, host: config.host.clone() };
    if let Err(source) = handshake(&mut reader, &mut writer, ours, Role::Launcher, &secret).await {
        return Err(LinkError { peer, source });
    }
    tracing::debug!("link to {peer} authenticated");
    // From here on the link carries typed envelopes: `Down` in, `Up` out.
    let reader: LinkReader = FrameReceiver::new(Box::new(reader));
    let mut writer: LinkWriter = FrameSender::new(Box::new(writer));
    if writer.send(&Up::Ready { node, host: config.host.clone() }).await.is_err() {
        return Ok(()); // the parent went away; nothing was started
    }
    let secret = Rc::new(secret);
    let (down_tx, down_rx) = mpsc::unbounded_channel();
    let (up_tx, mut up_rx) = mpsc::unbounded_channel::<ToLauncher>();
    // Envelopes from this daemon and from the subtree below, on their way up.
    let (tree_up_tx, mut tree_up_rx) = mpsc::unbounded_channel::<Up>();
    // A new link up after a re-attach, for the outbound side.
    let (relinked_tx, relinked_rx) = mpsc::unbounded_channel::<LinkWriter>();
    let tree = Rc::new(RefCell::new(Tree { node: TreeNode::new(node), children: HashMap::new() }));
    let own_down = down_tx.downgrade();

    // Frames in → this daemon or down the tree; a closed or silent link reads
    // as Shutdown (the daemon then kills its ranks: a parent that is gone
    // cannot end them) — unless this daemon may re-attach to the launcher
    // (`rejoin`: its parent is a daemon), which it then does, once.
    let inbound = {
        let tree = tree.clone();
        let tree_up = tree_up_tx.clone();
        let host = config.host.clone();
        let secret = secret.clone();
        crate::spawn_local_here(async move {
            let (mut reader, mut parent_pid, mut rejoin) = (reader, parent_pid, rejoin);
            loop {
                let lost = read_parent(&mut reader, node, parent_pid, &tree, &tree_up, &down_tx, &host, &secret).await;
                let Some((error, silent)) = lost else { return };
                if let Some(addr) = rejoin.take() {
                    match reattach(&addr, node, &host, &secret).await {
                        Ok((new_reader, mut new_writer)) => {
                            tracing::warn!("the parent is lost ({error}); re-attached to the launcher at {addr}");
                            let cut = tree.borrow_mut().node.reattached();
                            for (job, epoch) in cut {
                                let msg = ToLauncher::FenceCut { job, epoch };
                                if new_writer.send(&Up::From { node, msg }).await.is_err() {
                                    break;
                                }
                            }
                            if relinked_tx.send(new_writer).is_ok() {
                                // What went up through the lost parent may be
                                // lost with it: this subtree says it again.
                                resync(&tree, &down_tx);
                                (reader, parent_pid) = (new_reader, None);
                                continue;
                            }
                        }
                        Err(e) => tracing::error!("the parent is lost ({error}) and re-attaching to the launcher at {addr} failed: {e}"),
                    }
                }
                if silent {
                    // Its last word up, read if the parent runs again.
                    let _ = tree_up.send(Up::ParentLost { node, error: format!("took its parent for lost: {error}") });
                }
                let _ = down_tx.send(Down::Shutdown);
                return;
            }
        })
    };
    // This daemon's own messages join the subtree's.
    let own = {
        let tree_up = tree_up_tx.clone();
        crate::spawn_local_here(async move {
            while let Some(msg) = up_rx.recv().await {
                if tree_up.send(Up::From { node, msg }).is_err() {
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
            let mut out = Outbound { writer: Some(writer), relinked: Some(relinked_rx), frames: std::collections::VecDeque::new() };
            loop {
                let waiting = tokio::time::Instant::now();
                // A new link first: what comes after it (a resync) must
                // not go to the lost parent.
                let next = tokio::select! {
                    biased;
                    relinked = recv_or_never(&mut out.relinked) => Next::Relinked(relinked),
                    up = tokio::time::timeout(HEARTBEAT_EVERY, tree_up_rx.recv()), if out.writer.is_some() => Next::Up(up),
                };
                match next {
                    Next::Relinked(writer) => out.relinked_to(writer),
                    // Payloads go through the tree node (merged, answered, passed on).
                    Next::Up(Ok(Some(Up::From { node: origin, msg }))) => {
                        let mut tree = tree.borrow_mut();
                        let actions = tree.node.from_below(origin, msg);
                        let mut frames = Vec::new();
                        tree.apply(actions, own_down.upgrade().as_ref(), &mut frames);
                        out.frames.extend(frames);
                    }
                    // A link below broke: that child's subtree no longer
                    // contributes here (it re-attaches, or is lost); up as it is.
                    Next::Up(Ok(Some(envelope @ Up::Lost { node: child, .. }))) => {
                        let mut tree = tree.borrow_mut();
                        if tree.node.is_child(child) {
                            let actions = tree.node.child_lost(child);
                            tree.children.remove(&child);
                            let mut frames = Vec::new();
                            tree.apply(actions, own_down.upgrade().as_ref(), &mut frames);
                            out.frames.extend(frames);
                        }
                        out.frames.push_back(envelope);
                    }
                    // A node below came up: up as it is.
                    Next::Up(Ok(Some(envelope))) => out.frames.push_back(envelope),
                    Next::Up(Ok(None)) => return,
                    Next::Up(Err(_)) => out.frames.push_back(match lateness(waiting.elapsed()) {
                        Some(late_ms) => Up::Starved { late_ms },
                        None => Up::Heartbeat,
                    }),
                }
                if !out.flush().await {
                    return;
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

/// What the outbound side waited for.
enum Next {
    Relinked(Option<LinkWriter>),
    Up(Result<Option<Up>, tokio::time::error::Elapsed>),
}

/// The outbound side's link up and the frames not yet written to it.
struct Outbound {
    /// `None` while the link is broken and a re-attach may bring a new one.
    writer: Option<LinkWriter>,
    /// New links after a re-attach (`None`: no more can come).
    relinked: Option<mpsc::UnboundedReceiver<LinkWriter>>,
    frames: std::collections::VecDeque<Up>,
}

impl Outbound {
    fn relinked_to(&mut self, writer: Option<LinkWriter>) {
        match writer {
            Some(w) => self.writer = Some(w),
            None => self.relinked = None,
        }
    }

    /// Write the frames held, in order. A frame that fails stays first, for
    /// the link a re-attach brings (a frame half-written to a dead parent is
    /// written whole to the new link). False once nothing can be written.
    async fn flush(&mut self) -> bool {
        loop {
            let Some(writer) = self.writer.as_mut() else {
                if self.relinked.is_none() {
                    return false;
                }
                // Wait for the new link (or for none to come).
                let next = recv_or_never(&mut self.relinked).await;
                self.relinked_to(next);
                continue;
            };
            let Some(frame) = self.frames.front() else { return true };
            let relinked = &mut self.relinked;
            let sent = tokio::select! {
                biased;
                next = recv_or_never(relinked) => Err(next),
                sent = writer.send(frame) => Ok(sent),
            };
            match sent {
                Ok(Ok(())) => {
                    self.frames.pop_front();
                }
                Ok(Err(e)) => {
                    // The parent went away (at shutdown, it may go first);
                    // the inbound side deals with a lost parent.
                    tracing::debug!("cannot write to the parent: {e}");
                    self.writer = None;
                }
                Err(next) => self.relinked_to(next),
            }
        }
    }
}

/// The next new link, or never if none can come.
async fn recv_or_never(rx: &mut Option<mpsc::UnboundedReceiver<LinkWriter>>) -> Option<LinkWriter> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Read the parent's frames until it says `Shutdown` (`None`), or its link
/// closes or falls silent (`Some(why, whether it was silence)`).
#[allow(clippy::too_many_arguments)]
async fn read_parent(
    reader: &mut LinkReader,
    node: NodeId,
    parent_pid: Option<u32>,
    tree: &Rc<RefCell<Tree>>,
    tree_up: &mpsc::UnboundedSender<Up>,
    down_tx: &mpsc::UnboundedSender<Down>,
    host: &str,
    secret: &dpm_proto::auth::Secret,
) -> Option<(String, bool)> {
    let mut meter = links::SilenceMeter::new();
    let origin = tokio::time::Instant::now();
    let mut detector = liveness::Detector::new(heartbeat_timeout(), origin.elapsed());
    let parent = || parent_pid.map_or(liveness::Peer::Remote, liveness::probe);
    // While the parent is stopped (Ctrl-Z), only a closed link is loss.
    let mut suspended = false;
    loop {
        let frame = match links::next_frame(reader.recv(), &mut detector, origin, || !suspended, parent).await {
            links::Heard::Frame(frame) => frame,
            links::Heard::Lost(loss) => {
                tracing::error!("the parent is taken for lost: {loss}");
                return Some((loss.to_string(), true));
            }
        };
        meter.heard(|| "the parent".to_string());
        let now = origin.elapsed();
        match frame {
            Ok(Down::Heartbeat) => detector.reported(std::time::Duration::ZERO),
            Ok(Down::Starved { late_ms }) => detector.reported(std::time::Duration::from_millis(late_ms.into())),
            Ok(Down::Suspend) => {
                tracing::debug!("the parent is stopping: its silence is no loss until it resumes");
                suspended = true;
            }
            // A fresh clock: the wait for the next frame starts now.
            Ok(Down::Resume) => {
                suspended = false;
                detector.restart(now);
            }
            Ok(Down::Tree(spec)) => {
                if let Err(error) = start_subtree(tree, &spec, host, tree_up, secret).await {
                    // Said once, by the launcher, as this node's loss.
                    tracing::debug!("cannot start the daemons below {node}: {error}");
                    let _ = tree_up.send(Up::Lost { node, error });
                }
            }
            Ok(Down::Shutdown) => {
                let _ = down_tx.send(Down::Shutdown);
                return None;
            }
            Ok(Down::Resync) => resync(tree, down_tx),
            Ok(Down::To { node: to, msg }) => {
                let mut tree = tree.borrow_mut();
                let actions = tree.node.from_parent(to, msg);
                let mut parent = Vec::new();
                let alive = tree.apply(actions, Some(down_tx), &mut parent);
                debug_assert!(parent.is_empty(), "nothing from the parent goes back up");
                if !alive {
                    return None;
                }
            }
            Err(e) => {
                if !matches!(e, FrameError::Closed) {
                    tracing::error!("link to the parent failed: {e}");
                }
                return Some((format!("its link closed: {e}"), false));
            }
        }
    }
}

/// The path up changed (a daemon above was lost): this node's reactor and
/// every daemon below re-send what may have been lost ([`Down::Resync`]).
fn resync(tree: &Rc<RefCell<Tree>>, down_tx: &mpsc::UnboundedSender<Down>) {
    for child in tree.borrow().children.values() {
        let _ = child.send(Down::Resync);
    }
    let _ = down_tx.send(Down::Resync);
}

/// Connect to the launcher's re-attach listener at `addr` and open the link
/// as this node's (hellos, the mutual proof of the secret). Tries again
/// (backing off) for [`crate::liveness::reattach_trying`]: the launcher
/// admits a node only once it has heard of its parent's loss.
async fn reattach(addr: &str, node: NodeId, host: &str, secret: &dpm_proto::auth::Secret) -> Result<(LinkReader, LinkWriter), String> {
    let deadline = tokio::time::Instant::now() + crate::liveness::reattach_trying();
    let mut pause = std::time::Duration::from_millis(50);
    loop {
        let error = match try_reattach(addr, node, host, secret, deadline).await {
            Ok(link) => return Ok(link),
            Err(e) => e,
        };
        if tokio::time::Instant::now() + pause >= deadline {
            return Err(error);
        }
        tracing::debug!("re-attaching to {addr}: {error}; trying again");
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(std::time::Duration::from_secs(1));
    }
}

/// One try, 10 s at most, and not past `deadline`.
async fn try_reattach(
    addr: &str,
    node: NodeId,
    host: &str,
    secret: &dpm_proto::auth::Secret,
    deadline: tokio::time::Instant,
) -> Result<(LinkReader, LinkWriter), String> {
    let attempt = async {
        let stream = tokio::net::TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let _ = stream.set_nodelay(true);
        let (mut r, mut w) = stream.into_split();
        let ours = Hello { protocol: PROTOCOL_VERSION, role: Role::Daemon, node, host: host.to_string() };
        handshake(&mut r, &mut w, ours, Role::Launcher, secret).await.map_err(|e| e.to_string())?;
        let reader: LinkReader = FrameReceiver::new(Box::new(r));
        let writer: LinkWriter = FrameSender::new(Box::new(w));
        Ok::<_, String>((reader, writer))
    };
    let until = deadline.min(tokio::time::Instant::now() + std::time::Duration::from_secs(10));
    tokio::time::timeout_at(until, attempt).await.map_err(|_| "no answer in time".to_string())?
}

/// Start this daemon's children (and, through them, the rest of its subtree).
async fn start_subtree(
    tree: &RefCell<Tree>,
    spec: &dpm_proto::tree::TreeSpec,
    host: &str,
    up: &mpsc::UnboundedSender<Up>,
    secret: &dpm_proto::auth::Secret,
) -> Result<(), String> {
    let me = {
        let mut tree = tree.borrow_mut();
        tree.node.set_shape(spec.fanout, spec.hosts.len());
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
