//! `dpm daemon`: serve one node for a launcher (or a parent daemon).
//!
//! Two ways to reach the parent:
//! - over stdin/stdout (started by fork, ssh or srun): the secret is in the
//!   environment (`DPM_SECRET`, fork) or the first frame on stdin
//!   (`--secret-stdin`, ssh and srun);
//! - `--connect HOST:PORT` (started by hand, `-launcher manual`): a TCP
//!   connection to the launcher; the secret comes from `DPM_SECRET_FILE` (a
//!   private file) or `DPM_SECRET`.
//!
//! Either way the secret variables leave the environment before anything
//! else happens (no thread has started yet), so nothing the daemon starts
//! inherits them.

use std::cell::Cell;
use std::io::ErrorKind;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, ReadBuf};

use dpm_daemon::{serve_link, DaemonConfig, Uplink};
use dpm_kvs::NodeId;
use dpm_proto::auth::{Secret, SecretError};
use dpm_proto::frame::{read_frame_limited, FrameError};

use crate::error::{DaemonError, Error};
use crate::machine::this_host;
use crate::runtime::{block_on_local, raise_fd_limit};

/// How long `--connect` tries to reach the launcher (and to get a
/// handshake slot at a busy one).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The `dpm daemon` command line.
#[derive(Clone, Debug)]
pub struct DaemonArgs {
    /// The node index the launcher assigned.
    pub node: NodeId,
    /// The node's name as the launcher knows it (unused: the daemon reports
    /// this host's real name, which the ranks can use).
    pub host: Option<String>,
    pub pmi_trace: bool,
    pub verbose: u8,
    /// The secret is the first frame on stdin (ssh, srun).
    pub secret_stdin: bool,
    /// Connect to the launcher at HOST:PORT instead of serving stdin/stdout.
    pub connect: Option<String>,
    /// Where to re-attach if the parent daemon is lost (`TreeSpec::rejoin`).
    pub rejoin: Option<String>,
    /// `--iface IF`: the run's network interface, resolved on this host.
    pub iface: Option<String>,
}

/// `dpm daemon`: 0 once the launcher let it go, or why it could not serve.
///
/// The binary sets up logging first; that starts no thread, so the secret
/// variables still leave the environment of a single-threaded process.
pub fn daemon_command(args: DaemonArgs) -> Result<i32, Error> {
    // First: while this is the only thread, take the secret out of the environment.
    let from_env = Secret::take_from_env();
    if let Some(name) = &args.iface {
        dpm_daemon::iface::choose(dpm_daemon::iface::resolve(name).map_err(|e| Error::failed(format!("--iface {name}: {e}")))?);
    }
    raise_fd_limit();
    // Still the only thread, and the secret gone from the environment: the
    // node's cleaner is forked now rather than exec'd later (issue 37).
    dpm_daemon::cleaner::prefork();
    let node = args.node;
    let config = DaemonConfig { host: this_host(), trace: args.pmi_trace };
    block_on_local(async move {
        let served = match &args.connect {
            Some(addr) => serve_tcp(config, node, addr, from_env).await,
            None => serve_stdio(config, node, args.secret_stdin, args.rejoin, from_env).await,
        };
        served.map(|()| 0).map_err(|source| Error::Daemon { node, source })
    })
}

async fn serve_stdio(
    config: DaemonConfig,
    node: NodeId,
    secret_stdin: bool,
    rejoin: Option<String>,
    from_env: Result<Option<Secret>, SecretError>,
) -> Result<(), DaemonError> {
    let (mut stdin, stdout) = dpm_daemon::stdio::link();
    let secret = if secret_stdin { read_secret_frame(&mut stdin).await? } else { from_env?.ok_or(DaemonError::NoSecret)? };
    // Forked (the secret in the environment): the parent is this host's
    // process that started it. Through ssh or srun, the parent is elsewhere.
    let parent_pid = (!secret_stdin).then(|| nix::unistd::getppid().as_raw() as u32);
    let uplink = Uplink { node, secret, peer: "the parent on stdin".into(), parent_pid, rejoin };
    Ok(serve_link(config, uplink, stdin, stdout).await?)
}

/// Connect to a manual launcher and serve it. A launcher with all its
/// handshake slots taken closes a new connection before saying its hello;
/// such a daemon tries again (backing off) until [`CONNECT_TIMEOUT`] is up.
/// A close after the launcher's hello is a real refusal (wrong node, node
/// already in), said at once.
async fn serve_tcp(config: DaemonConfig, node: NodeId, addr: &str, from_env: Result<Option<Secret>, SecretError>) -> Result<(), DaemonError> {
    let secret = from_env?.ok_or(DaemonError::NoSecretFile)?;
    let deadline = tokio::time::Instant::now() + CONNECT_TIMEOUT;
    let mut pause = Duration::from_millis(50);
    loop {
        let stream = match tokio::time::timeout_at(deadline, tokio::net::TcpStream::connect(addr)).await {
            Ok(Ok(s)) => s,
            Ok(Err(source)) => return Err(DaemonError::Connect { addr: addr.to_string(), source }),
            Err(_) => return Err(DaemonError::NoAnswer { addr: addr.to_string(), secs: CONNECT_TIMEOUT.as_secs() }),
        };
        let _ = stream.set_nodelay(true);
        let (r, w) = stream.into_split();
        let heard = Rc::new(Cell::new(false));
        let r = Heard { inner: r, heard: heard.clone() };
        let uplink = Uplink { node, secret: secret.clone(), peer: format!("the launcher at {addr}"), parent_pid: None, rejoin: None };
        let error = match serve_link(config.clone(), uplink, r, w).await {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        let closed = match &error.source {
            FrameError::Closed => true,
            FrameError::Io(e) => matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe | ErrorKind::ConnectionAborted),
            _ => false,
        };
        if closed && !heard.get() && tokio::time::Instant::now() + pause < deadline {
            tracing::info!(node = node.0, "the launcher at {addr} closed the connection before its hello (busy); trying again");
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
            continue;
        }
        return Err(if closed { DaemonError::Refused { addr: addr.to_string(), node } } else { error.into() });
    }
}

/// A reader that notes whether anything at all came from the peer.
struct Heard<R> {
    inner: R,
    heard: Rc<Cell<bool>>,
}

impl<R: AsyncRead + Unpin> AsyncRead for Heard<R> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.heard.set(true);
        }
        polled
    }
}

/// The secret as the first frame on the link (hex, as a JSON string).
async fn read_secret_frame<R: AsyncRead + Unpin>(r: &mut R) -> Result<Secret, DaemonError> {
    let hex: String = read_frame_limited(r, 256).await?;
    Ok(Secret::from_hex(&hex)?)
}
