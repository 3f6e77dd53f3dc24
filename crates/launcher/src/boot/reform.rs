//! A boot re-forms its tree around a lost interior node: the daemons below
//! it re-attach here, straight below the boot server.
//!
//! The server listens on a TCP port of its own ([`Reattach::bind`]) and
//! gives its address to every daemon below the top level
//! (`TreeSpec::rejoin`). A daemon whose parent daemon's link closes or
//! falls silent connects here, says its hello and proves the boot's secret
//! (as a daemon started by hand does, `manual`); it is admitted only while
//! its node is detached ([`crate::tree::Tree::reattach`]: the parent was
//! lost, the node's ranks run on). Its link is bridged as a top-level
//! daemon's and its subtree's messages go down it from then on. A detached
//! node whose daemon does not come within [`reattach_wait`] is lost as any
//! node is (`controller::shared`'s driver arms that wait).
//!
//! Each connection must say hello within [`HELLO_TIMEOUT`] and finish the
//! proof within [`HANDSHAKE_TIMEOUT`]; at most [`MAX_PENDING`] handshake at
//! once (more are closed at once): strangers cannot exhaust the server.
//!
//! Only the boot's owner gets that far. The listener is bound to the one
//! address the daemons are given (loopback when every node is this
//! machine), and a connection from a socket on this machine (the kernel
//! knows it: `sock_diag`) is closed unanswered unless that socket is the
//! owner's — another local user cannot even say hello. A connection from
//! another machine must prove the boot's secret. Refusals are logged in
//! summary ([`RefusalLog`]: a line a second at most).

use std::cell::{Cell, RefCell};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::rc::Rc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Notify};

use dpm_daemon::links;
use dpm_daemon::peer::PeerError;
use dpm_daemon::refusals::RefusalLog;
use dpm_kvs::NodeId;
use dpm_proto::auth::Secret;
use dpm_proto::frame::{answer_hello, authenticate, Hello, Role, PROTOCOL_VERSION};
use dpm_proto::link::Up;

use super::rendezvous::Rendezvous;
use crate::controller::SharedRef;
use crate::node_table::NodeState;
use crate::nodes::Node;

pub use crate::controller::reattach_wait;

/// How long a connection may stay silent before its hello.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one connection may take to say hello and prove the secret.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections handshaking at once; more are closed.
pub const MAX_PENDING: usize = 64;

/// The re-attach listener and the address the daemons are given.
pub struct Reattach {
    listener: TcpListener,
    /// `HOST:PORT` for `TreeSpec::rejoin`.
    pub addr: String,
}

impl Reattach {
    /// Listen on the address the daemons are given, a port the system
    /// picks (one of `MPIEXEC_PORT_RANGE`'s when set:
    /// [`crate::ports::port_range`]): this machine's loopback address when every node is this
    /// machine (forked: virtual nodes), else the address this machine
    /// reaches the first other host from (the route their ssh took; every
    /// address when that route is not known).
    pub async fn bind(nodes: &[Node], bootstrap: &dpm_proto::tree::Bootstrap) -> std::io::Result<Reattach> {
        let range = crate::ports::port_range(&|k| std::env::var(k).ok()).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.0))?;
        let elsewhere = nodes.iter().find(|n| !links::is_this_machine(&n.host));
        let ip = match elsewhere {
            _ if *bootstrap == dpm_proto::tree::Bootstrap::Fork => Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            None => Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            Some(other) => source_ip(&other.host),
        };
        let listener = crate::ports::bind_in_range(ip.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)), 0, range.as_ref()).await?;
        let port = listener.local_addr()?.port();
        let addr = match ip {
            Some(IpAddr::V6(v6)) => format!("[{v6}]:{port}"),
            Some(IpAddr::V4(v4)) => format!("{v4}:{port}"),
            None => format!("{}:{port}", crate::machine::this_host()),
        };
        Ok(Reattach { listener, addr })
    }

    /// Admit re-attaching daemons for the boot's life; the rendezvous file
    /// is rewritten as each one does (in the same event: a `dpm status`
    /// that shows the node back finds the file saying so too).
    pub(super) async fn serve(self, shared: SharedRef, secret: Secret, up: mpsc::WeakUnboundedSender<Up>, rendezvous: Rc<Rendezvous>) {
        let pending = Rc::new(Cell::new(0usize));
        let secret = Rc::new(secret);
        let refusals = Rc::new(Refusals::default());
        loop {
            let due = refusals.due();
            let (stream, from) = tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        tracing::warn!("accepting a re-attaching daemon's connection: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                _ = tokio::time::sleep_until(due.unwrap_or_else(tokio::time::Instant::now)), if due.is_some() => {
                    refusals.flush();
                    continue;
                }
                // A handshake refused: its summary may be due.
                _ = refusals.changed.notified() => continue,
            };
            if let Err(why) = owner_or_elsewhere(&stream, from) {
                refusals.refused(format!("{from}: {why}"));
                continue;
            }
            if pending.get() >= MAX_PENDING {
                refusals.refused(format!("{from}: {MAX_PENDING} are handshaking already"));
                continue;
            }
            pending.set(pending.get() + 1);
            let (shared, secret, up, pending, refusals, rendezvous) =
                (shared.clone(), secret.clone(), up.clone(), pending.clone(), refusals.clone(), rendezvous.clone());
            tokio::task::spawn_local(async move {
                let admitted = tokio::time::timeout(HANDSHAKE_TIMEOUT, admit(stream, &secret, &shared)).await;
                pending.set(pending.get() - 1);
                let (node, stream) = match admitted {
                    Ok(Ok(admitted)) => admitted,
                    Ok(Err(why)) => return refusals.refused(format!("{from}: {why}")),
                    Err(_) => return refusals.refused(format!("{from}: no hello and proof within {} s", HANDSHAKE_TIMEOUT.as_secs())),
                };
                let Some(up) = up.upgrade() else { return };
                let (r, w) = stream.into_split();
                let (down, _reader) = links::bridge_link(node, r, w, None, || {}, up);
                let mut s = shared.borrow_mut();
                match s.reattach(node, down) {
                    Ok(back) => {
                        let host = s.tree.shared().nodes.host(node).to_string();
                        let back: Vec<String> = back.iter().map(|n| n.0.to_string()).collect();
                        tracing::warn!(
                            "{node} ({host}) re-attached from {from} below the boot server (nodes {} take ranks again); its runs go on",
                            back.join(", ")
                        );
                        rendezvous.write(&s.tree.shared().nodes);
                    }
                    // Lost meanwhile (its wait ran out): the link closes, the daemon ends.
                    Err(e) => tracing::warn!("refused the re-attaching daemon from {from}: {e}"),
                }
            });
        }
    }
}

/// The listener's refused connections, logged in summary.
struct Refusals {
    log: RefCell<RefusalLog>,
    origin: tokio::time::Instant,
    /// Told when a handshake's task refused one (a summary may be due).
    changed: Notify,
}

impl Default for Refusals {
    fn default() -> Refusals {
        Refusals { log: RefCell::default(), origin: tokio::time::Instant::now(), changed: Notify::new() }
    }
}

impl Refusals {
    fn refused(&self, why: String) {
        if let Some(line) = self.log.borrow_mut().refused(self.origin.elapsed(), why) {
            tracing::warn!("refused a re-attaching connection from {line}");
        }
        self.changed.notify_one();
    }
    fn due(&self) -> Option<tokio::time::Instant> {
        self.log.borrow().due().map(|d| self.origin + d)
    }
    fn flush(&self) {
        if let Some(line) = self.log.borrow_mut().flush(self.origin.elapsed()) {
            tracing::warn!("re-attaching connections: {line}");
        }
    }
}

/// A connection from a socket on this machine must be the owner's (the
/// kernel says whose it is); one the kernel does not know comes from
/// another machine, and must prove the secret.
fn owner_or_elsewhere(stream: &TcpStream, from: SocketAddr) -> Result<(), PeerError> {
    let local = stream.local_addr()?;
    match dpm_daemon::peer::check_same_user(local, from) {
        Err(PeerError::Kernel(nix::errno::Errno::ENOENT)) if !from.ip().is_loopback() && from.ip() != local.ip() => Ok(()),
        checked => checked,
    }
}

/// Greet one connection: its hello must name a detached node, then it must
/// prove the secret (and the server proves it back).
async fn admit(stream: TcpStream, secret: &Secret, shared: &SharedRef) -> Result<(NodeId, TcpStream), String> {
    let _ = stream.set_nodelay(true);
    let (mut r, mut w) = stream.into_split();
    let ours = Hello { protocol: PROTOCOL_VERSION, role: Role::Launcher, node: NodeId(0), host: crate::machine::this_host() };
    let hello = tokio::time::timeout(HELLO_TIMEOUT, answer_hello(&mut r, &mut w, ours, Role::Daemon))
        .await
        .map_err(|_| format!("no hello within {} s", HELLO_TIMEOUT.as_secs()))?
        .map_err(|e| e.to_string())?;
    let node = hello.node;
    let state = shared.borrow().tree.shared().nodes.state(node);
    if state != Some(NodeState::Detached) {
        return Err(format!("{node} (host {}) is not waiting to re-attach ({state:?})", hello.host));
    }
    authenticate(&mut r, &mut w, secret, Role::Launcher, node).await.map_err(|e| format!("{node} (host {}): {e}", hello.host))?;
    let stream = r.reunite(w).map_err(|e| e.to_string())?;
    Ok((node, stream))
}

/// This machine's address on the route to `host` (no packet is sent: a
/// UDP socket's connect only picks the route).
fn source_ip(host: &str) -> Option<IpAddr> {
    let to = (host, 9).to_socket_addrs().ok()?.next()?;
    let socket = UdpSocket::bind(if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }).ok()?;
    socket.connect(to).ok()?;
    Some(socket.local_addr().ok()?.ip())
}
