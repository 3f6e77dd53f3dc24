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

use std::time::Duration;

use tokio::io::AsyncRead;

use dpm_daemon::{serve_link, DaemonConfig, Uplink};
use dpm_proto::auth::{Secret, SecretError, SECRET_ENV, SECRET_FILE_ENV};
use dpm_proto::frame::{read_frame_limited, FrameError};

use crate::{block_on_local, init_logging, raise_fd_limit, this_host};

/// How long `--connect` tries to reach the launcher.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The `dpm daemon` command line.
#[derive(Clone, Debug, Default)]
pub struct DaemonArgs {
    /// The node index the launcher assigned.
    pub node: usize,
    /// The node's name as the launcher knows it (unused: the daemon reports
    /// this host's real name, which the ranks can use).
    pub host: Option<String>,
    pub pmi_trace: bool,
    pub verbose: u8,
    /// The secret is the first frame on stdin (ssh, srun).
    pub secret_stdin: bool,
    /// Connect to the launcher at HOST:PORT instead of serving stdin/stdout.
    pub connect: Option<String>,
}

/// `dpm daemon`: returns the process exit status.
pub fn daemon_command(args: DaemonArgs) -> i32 {
    // First: while this is the only thread, take the secret out of the environment.
    let from_env = Secret::take_from_env();
    init_logging(args.verbose);
    raise_fd_limit();
    let node = args.node;
    let config = DaemonConfig { host: this_host(), trace: args.pmi_trace };
    block_on_local("dpm daemon", async move {
        let served = match &args.connect {
            Some(addr) => serve_tcp(config, node, addr, from_env).await,
            None => serve_stdio(config, node, args.secret_stdin, from_env).await,
        };
        match served {
            Ok(()) => 0,
            Err(e) => {
                tracing::error!(node, "{e}");
                1
            }
        }
    })
}

async fn serve_stdio(config: DaemonConfig, node: usize, secret_stdin: bool, from_env: Result<Option<Secret>, SecretError>) -> Result<(), String> {
    let (mut stdin, stdout) = dpm_daemon::stdio::link();
    let secret = if secret_stdin {
        read_secret_frame(&mut stdin).await.map_err(|e| format!("cannot read the secret on stdin: {e}"))?
    } else {
        from_env.map_err(|e| e.to_string())?.ok_or_else(|| {
            format!("no secret: dpm daemon is started by dpm run (the secret comes in {SECRET_ENV} or on stdin)")
        })?
    };
    let uplink = Uplink { node, secret, peer: "the parent on stdin".into() };
    serve_link(config, uplink, stdin, stdout).await.map_err(|e| e.to_string())
}

async fn serve_tcp(config: DaemonConfig, node: usize, addr: &str, from_env: Result<Option<Secret>, SecretError>) -> Result<(), String> {
    let secret = from_env.map_err(|e| e.to_string())?.ok_or_else(|| {
        format!(
            "no secret: set {SECRET_FILE_ENV} to the file dpm run printed (copied here with mode 0600), or {SECRET_ENV} to its contents"
        )
    })?;
    let stream = match tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(format!("cannot connect to the launcher at {addr}: {e}")),
        Err(_) => return Err(format!("cannot connect to the launcher at {addr}: no answer within {} s", CONNECT_TIMEOUT.as_secs())),
    };
    let _ = stream.set_nodelay(true);
    let (r, w) = stream.into_split();
    let uplink = Uplink { node, secret, peer: format!("the launcher at {addr}") };
    match serve_link(config, uplink, r, w).await {
        Ok(()) => Ok(()),
        // The launcher hangs up without a word on a connection it refuses
        // before the proofs (see its log for why).
        Err(e) if matches!(e.source, FrameError::Closed) => Err(format!(
            "the launcher at {addr} closed the connection during the handshake: is node {node} already connected, or not a node of the run? (its log says)"
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// The secret as the first frame on the link (hex, as a JSON string).
async fn read_secret_frame<R: AsyncRead + Unpin>(r: &mut R) -> Result<Secret, String> {
    let hex: String = read_frame_limited(r, 256).await.map_err(|e| e.to_string())?;
    Secret::from_hex(&hex).map_err(|e| e.to_string())
}
