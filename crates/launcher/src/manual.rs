//! The manual bootstrap (`-launcher manual`): the user starts each node's
//! daemon by hand, and the daemons connect to the launcher by TCP.
//!
//! The launcher listens (on `--bind ADDR[:PORT]`, default every address, a
//! port the system picks), writes the run's secret to a 0600 file in the
//! private runtime directory ([`crate::private_dir`]), and prints one command
//! per node:
//!
//! ```text
//! DPM_SECRET_FILE=/run/user/1000/dpm/manual-4242-1a2b3c4d.secret dpm daemon --connect HOST:PORT --node 2
//! ```
//!
//! The secret itself is never printed nor put on a command line. Each
//! connection must send its hello within [`HELLO_TIMEOUT`] and complete the
//! mutual proof of the secret within [`HANDSHAKE_TIMEOUT`]; a stranger, a
//! wrong secret or a second daemon for a node already connected is logged
//! and closed, and the launcher keeps waiting for the real one. At most
//! [`MAX_PENDING`] connections handshake at once (a flood cannot exhaust the
//! launcher's descriptors); when they are all taken, a new connection evicts
//! the oldest one still silent (a real daemon says hello as soon as it is
//! accepted), so idle strangers cannot crowd the real daemons out. A daemon
//! closed before the launcher's hello was refused for being one too many, and
//! tries again (see [`crate::daemon_cmd`]). Once every node is in, the
//! listener is closed and the secret file removed (also on any failure, and
//! on SIGINT/SIGTERM/SIGHUP while waiting: the run then ends with 128 + the
//! signal). The daemons form a flat tree: each is a direct child of the
//! launcher, whatever `--tree-fanout` says.
//!
//! `dpm boot --add -launcher manual` joins hosts to a running boot the same
//! way ([`join`]): the boot server listens and waits, the commands (each
//! with the node's id in the tree) go to the `dpm boot --add` that asked.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinHandle, JoinSet};

use dpm_daemon::links;
use dpm_proto::link::{Down, Up};

use dpm_kvs::NodeId;
use dpm_proto::auth::{Secret, SECRET_FILE_ENV};
use dpm_proto::frame::{answer_hello, authenticate, FrameError, Hello, Role, PROTOCOL_VERSION};

use crate::error::Error;
use crate::machine::Node;
use crate::output::Console;
use crate::private_dir::{self, PrivateFile};

/// How long one connection may take to say hello and prove the secret.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection may stay silent before its hello: a real daemon
/// sends it as it connects, so this only bounds strangers.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(2);
/// Connections handshaking at once; beyond, the oldest silent one is evicted
/// (or, if none is silent, the new one closed).
pub const MAX_PENDING: usize = 64;

/// How the manual bootstrap listens and waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manual {
    /// Where to listen (default: every IPv4 address, any port).
    pub bind: Option<SocketAddr>,
    /// How long to wait for every daemon to connect.
    pub timeout: Duration,
    /// The name daemons connect back to when dpm listens on every address
    /// (`-localhost`; default this machine's host name).
    pub connect_host: Option<String>,
    /// `MPIEXEC_PORT_RANGE`: the ports to listen on when [`Manual::bind`]
    /// names none.
    pub port_range: Option<std::ops::RangeInclusive<u16>>,
}

/// Default for [`Manual::timeout`]: people type the commands.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// A daemon's authenticated connection, bridged.
pub struct Connected {
    pub node: NodeId,
    /// Messages for the daemon.
    pub down: mpsc::UnboundedSender<Down>,
    /// The task reading the link: ends when the daemon hangs up.
    pub reader: JoinHandle<()>,
}

/// Listen, tell the user what to run, and wait until every node's daemon has
/// connected and authenticated. Each link is bridged to `up` as soon as it is
/// in (heartbeats keep it alive while the others come), and returned, by node.
pub async fn connect_all(nodes: &[Node], opts: &Manual, secret: &Secret, me: &str, up: &mpsc::UnboundedSender<Up>) -> Result<Vec<Connected>, Error> {
    // Signals first: from the moment the secret file exists, an interrupted
    // launcher must still remove it.
    let mut signals = Vec::new();
    for kind in [SignalKind::interrupt(), SignalKind::terminate(), SignalKind::hangup()] {
        signals.push(signal(kind).map_err(|e| Error::failed(format!("cannot handle signals: {e}")))?);
    }
    let waited: Vec<(NodeId, String)> = nodes.iter().enumerate().map(|(i, n)| (NodeId(i), n.host.clone())).collect();
    wait_for(&waited, opts, secret, me, up, Some(&mut signals), &mut |line| Console::Local.say(line)).await
}

/// `dpm boot --add -launcher manual`: wait (within `opts.timeout`) for the
/// daemons of `nodes` (their ids in the running tree, their hosts), whose
/// commands are given to `say`, one line each.
pub async fn join(
    nodes: &[(NodeId, String)],
    opts: &Manual,
    secret: &Secret,
    me: &str,
    up: &mpsc::UnboundedSender<Up>,
    say: &mut dyn FnMut(&str),
) -> Result<Vec<Connected>, Error> {
    wait_for(nodes, opts, secret, me, up, None, say).await
}

async fn wait_for(
    nodes: &[(NodeId, String)],
    opts: &Manual,
    secret: &Secret,
    me: &str,
    up: &mpsc::UnboundedSender<Up>,
    signals: Option<&mut [tokio::signal::unix::Signal]>,
    say: &mut dyn FnMut(&str),
) -> Result<Vec<Connected>, Error> {
    let failed = |e: &dyn std::fmt::Display| Error::failed(format!("-launcher manual: {e}"));
    let bind = opts.bind.unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
    let listener =
        crate::ports::bind_in_range(bind.ip(), bind.port(), opts.port_range.as_ref()).await.map_err(|e| failed(&format!("cannot listen on {bind}: {e}")))?;
    let local = listener.local_addr().map_err(|e| failed(&e))?;
    let dir = private_dir::runtime_dir().map_err(|e| failed(&e))?;
    let name = format!("manual-{}-{}.secret", std::process::id(), &Secret::generate().map_err(|e| failed(&e))?.to_hex()[..8]);
    let file = PrivateFile::create(&dir, &name, format!("{}\n", secret.to_hex()).as_bytes()).map_err(|e| failed(&e))?;

    let exe = std::env::current_exe().map_err(|e| Error::failed(format!("cannot find the dpm executable: {e}")))?;
    // Daemons connect to the address we listen on, or to this host's name
    // when we listen on all of them.
    let target = if local.ip().is_unspecified() { format!("{me}:{}", local.port()) } else { local.to_string() };
    say(&format!(
        "dpm: -launcher manual: listening on {local}; waiting up to {} s for {} daemon{}. Run on each node \
         (the secret file must be there too, mode 0600):",
        opts.timeout.as_secs(),
        nodes.len(),
        if nodes.len() == 1 { "" } else { "s" }
    ));
    // The run's -iface: each daemon's PMI ports on that interface of its host.
    let iface = dpm_daemon::iface::chosen().map(|i| format!(" {} {}", dpm_daemon::iface::IFACE_FLAG, shell_quote(&i.name))).unwrap_or_default();
    for (node, host) in nodes {
        say(&format!(
            "dpm:   node {} ({host}): {SECRET_FILE_ENV}={} {} daemon --connect {target} --node {}{iface}",
            node.0,
            shell_quote(&file.path().display().to_string()),
            shell_quote(&exe.display().to_string()),
            node.0
        ));
    }

    let result = accept(listener, nodes, opts.timeout, secret, me, up, signals).await;
    // Every node is in (or the run is over): nobody needs the file any more.
    drop(file);
    result
}

/// A connection still handshaking, in accept order.
struct Pending {
    handle: AbortHandle,
    /// Its hello has come: a would-be daemon, no longer evictable.
    spoke: Rc<Cell<bool>>,
}

/// Make room for one more handshake: forget the finished ones, then evict the
/// oldest still silent. `false` if all [`MAX_PENDING`] are past their hello.
fn make_room(pending: &mut VecDeque<Pending>) -> bool {
    pending.retain(|p| !p.handle.is_finished());
    if pending.len() < MAX_PENDING {
        return true;
    }
    match pending.iter().position(|p| !p.spoke.get()) {
        Some(i) => {
            if let Some(p) = pending.remove(i) {
                p.handle.abort();
                tracing::warn!("{MAX_PENDING} connections are handshaking: closed the oldest that has not said hello");
            }
            true
        }
        None => false,
    }
}

/// A caller's handshake: its place among the nodes waited for, stream and
/// hello, or why it was refused.
type Handshake = Result<(usize, TcpStream, Hello), Refusal>;
async fn accept(
    listener: TcpListener,
    nodes: &[(NodeId, String)],
    timeout: Duration,
    secret: &Secret,
    me: &str,
    up: &mpsc::UnboundedSender<Up>,
    mut signals: Option<&mut [tokio::signal::unix::Signal]>,
) -> Result<Vec<Connected>, Error> {
    let n = nodes.len();
    let deadline = tokio::time::Instant::now() + timeout;
    let secret = Rc::new(secret.clone());
    // Nodes whose daemon is in (by their place in `nodes`): a second one
    // for them is refused at its hello.
    let taken = Rc::new(RefCell::new(Waited { ids: nodes.iter().map(|n| n.0).collect(), taken: vec![false; n] }));
    let mut links: Vec<Option<Connected>> = (0..n).map(|_| None).collect();
    let mut handshakes: JoinSet<(SocketAddr, Handshake)> = JoinSet::new();
    let mut pending: VecDeque<Pending> = VecDeque::new();
    while links.iter().any(Option::is_none) {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, addr)) if make_room(&mut pending) => {
                    let (secret, taken, me) = (secret.clone(), taken.clone(), me.to_string());
                    let spoke = Rc::new(Cell::new(false));
                    let said = spoke.clone();
                    let handle = handshakes.spawn_local(async move {
                        let admitted = tokio::time::timeout(HANDSHAKE_TIMEOUT, admit(stream, &secret, &taken, &me, &said)).await;
                        (addr, admitted.unwrap_or(Err(Refusal::Slow)))
                    });
                    pending.push_back(Pending { handle, spoke });
                }
                Ok((_, addr)) => tracing::warn!("refused a connection from {addr}: {MAX_PENDING} connections are already past their hello"),
                // Out of descriptors, or a connection reset before accept: keep listening.
                Err(e) => {
                    tracing::warn!("accepting a daemon's connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(done) = handshakes.join_next() => match done {
                Ok((_, Ok((at, stream, hello)))) if links[at].is_none() => {
                    let (node, host) = (&nodes[at].0, &nodes[at].1);
                    let from = stream.peer_addr().map_or_else(|_| "?".into(), |a| a.to_string());
                    tracing::info!("{node} ({host}) connected from {from} (host {})", hello.host);
                    if signals.is_some() {
                        Console::Local.say(&format!("dpm: {node} ({host}) connected from {from} (host {})", hello.host));
                    }
                    let (r, w) = stream.into_split();
                    let (down, reader) = links::bridge_link(*node, r, w, None, || {}, up.clone());
                    links[at] = Some(Connected { node: *node, down, reader });
                }
                Ok((_, Ok((at, stream, _)))) => {
                    let from = stream.peer_addr().map_or_else(|_| "?".into(), |a| a.to_string());
                    tracing::warn!("refused a connection from {from}: {} is already connected", nodes[at].0);
                }
                Ok((addr, Err(e))) => tracing::warn!("refused a connection from {addr}: {e}"),
                // An evicted connection's task ends cancelled: said when evicted.
                Err(e) if e.is_cancelled() => {}
                Err(e) => tracing::warn!("a connection's handshake failed: {e}"),
            },
            _ = tokio::time::sleep_until(deadline) => {
                let missing: Vec<String> = (0..n).filter(|&i| links[i].is_none()).map(|i| format!("{} ({})", nodes[i].0.0, nodes[i].1)).collect();
                return Err(Error::failed(format!(
                    "-launcher manual: node{} {} did not connect within {} s (start them with the commands above; --connect-timeout sets the wait)",
                    if missing.len() == 1 { "" } else { "s" },
                    missing.join(", "),
                    timeout.as_secs()
                )));
            }
            signal = next_signal(&mut signals) => {
                let what = match signal {
                    nix::sys::signal::Signal::SIGINT => "interrupted (SIGINT)",
                    nix::sys::signal::Signal::SIGTERM => "terminated (SIGTERM)",
                    _ => "hung up (SIGHUP)",
                };
                return Err(Error::Interrupted { what, signal: signal as i32 });
            }
        }
    }
    // Dropping the listener and the handshakes still going on: nothing else
    // listens from now on.
    drop(listener);
    handshakes.abort_all();
    Ok(links.into_iter().flatten().collect())
}

/// The first of SIGINT, SIGTERM, SIGHUP (registered in that order); never,
/// without them (a boot server's join: the server handles its signals).
async fn next_signal(signals: &mut Option<&mut [tokio::signal::unix::Signal]>) -> nix::sys::signal::Signal {
    use nix::sys::signal::Signal;
    let Some([sigint, sigterm, sighup]) = signals.as_deref_mut() else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = sigint.recv() => Signal::SIGINT,
        _ = sigterm.recv() => Signal::SIGTERM,
        _ = sighup.recv() => Signal::SIGHUP,
    }
}

/// The nodes a launcher waits for and which of them are in.
struct Waited {
    ids: Vec<NodeId>,
    taken: Vec<bool>,
}

/// Greet one connection: its hello must name a node of this run not yet
/// connected, then it must prove the secret (and we prove it to it).
/// Why a connection was not admitted (logged; the launcher keeps waiting).
#[derive(Debug, thiserror::Error)]
enum Refusal {
    #[error("no hello within {} s", HELLO_TIMEOUT.as_secs())]
    Silent,
    #[error("no hello and proof within {} s", HANDSHAKE_TIMEOUT.as_secs())]
    Slow,
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("it claims {node}, but nodes {waited} are the ones waited for")]
    NoSuchNode { node: NodeId, waited: String },
    #[error("{0} is already connected")]
    Taken(NodeId),
    #[error("{node} (host {host}): {source}")]
    Proof { node: NodeId, host: String, source: FrameError },
    #[error(transparent)]
    Reunite(#[from] tokio::net::tcp::ReuniteError),
}

/// The caller's place in the nodes waited for, its stream and hello.
async fn admit(stream: TcpStream, secret: &Secret, taken: &RefCell<Waited>, me: &str, spoke: &Cell<bool>) -> Result<(usize, TcpStream, Hello), Refusal> {
    let _ = stream.set_nodelay(true);
    let (mut r, mut w) = stream.into_split();
    let ours = Hello { protocol: PROTOCOL_VERSION, role: Role::Launcher, node: NodeId(0), host: me.to_string() };
    // A silent peer is dropped early; one that says a valid hello gets the
    // full handshake time and is no longer evicted for newcomers.
    let hello = tokio::time::timeout(HELLO_TIMEOUT, answer_hello(&mut r, &mut w, ours, Role::Daemon)).await.map_err(|_| Refusal::Silent)??;
    spoke.set(true);
    let node = hello.node;
    let Some(at) = taken.borrow().ids.iter().position(|&n| n == node) else {
        let ids: Vec<String> = taken.borrow().ids.iter().map(|n| n.0.to_string()).collect();
        return Err(Refusal::NoSuchNode { node, waited: ids.join(", ") });
    };
    if taken.borrow().taken[at] {
        return Err(Refusal::Taken(node));
    }
    authenticate(&mut r, &mut w, secret, Role::Launcher, node).await.map_err(|source| Refusal::Proof { node, host: hello.host.clone(), source })?;
    taken.borrow_mut().taken[at] = true;
    let stream = r.reunite(w)?;
    Ok((at, stream, hello))
}

/// `text` as one shell word.
fn shell_quote(text: &str) -> String {
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._-+:=@%,".contains(&b)) {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn shell_words() {
        assert_eq!(super::shell_quote("/tmp/dpm-0/manual-1.secret"), "/tmp/dpm-0/manual-1.secret");
        assert_eq!(super::shell_quote("/a b/it's"), r"'/a b/it'\''s'");
    }
}
