//! Frames: how [`ToDaemon`] and [`ToLauncher`] travel between processes.
//!
//! A frame is a 4-byte big-endian length and that many bytes of one message.
//! Every link opens with a [`Hello`] each way, carrying the protocol version
//! and the sender's role, so a daemon of another dpm version or a stray
//! process on the pipe is refused at once with a clear error; then both sides
//! prove that they hold the run's secret ([`crate::auth`]). Until then frames
//! are limited to [`HANDSHAKE_MAX_FRAME`] bytes, so a stranger cannot make a
//! listening launcher allocate much.
//!
//! Two encodings: the handshake frames (Hello, authentication) are JSON, which
//! every dpm version since the first reads, so a peer of another version is
//! told so instead of failing to decode; every frame after the handshake is
//! `postcard` (a compact, stable binary serde format). Measured with
//! 400 MB of rank output over two virtual nodes: JSON wrote each output byte
//! as a decimal number and a comma (four bytes) and parsed it back, 5.6 s and
//! 360 MB of launcher memory; binary frames carry the bytes as they are.
//!
//! [`ToDaemon`]: crate::ToDaemon
//! [`ToLauncher`]: crate::ToLauncher

use std::sync::OnceLock;
use std::time::Duration;

use dpm_kvs::NodeId;
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

pub use crate::auth::authenticate;
use crate::auth::Secret;

/// Bumped whenever a message changes shape (3: the authentication exchange
/// after the Hellos; 4: binary frames after the handshake; 5: the `link`
/// envelopes `Down`/`Up` around the payloads; 6: `Down::Suspend`/`Resume`;
/// 7: `ToLauncher::Claimed`; 8: `NameRequest::LookupWait`, `ToLauncher::Connect`,
/// `ToDaemon::ConnectDone`; 9: `LaunchJob::report_parent_asks`,
/// `ToLauncher::ParentAsked`; 10: `CollectiveKind::Group`,
/// `ToLauncher::Connect::group`, `ToDaemon::ConnectDone::context_id`; 11:
/// `LaunchJob::pmix_watch`, `ToLauncher::WatchTripped`; 12: `AppSpec::node_env`;
/// 13: `ToDaemon::RanksDead`, `ToLauncher::FenceDoomed`; 14: `LaunchJob::hold`,
/// `ToDaemon::Report`, `ToLauncher::RankReport`; 15: `Down::Starved`,
/// `Up::Starved`; 16: no `LaunchJob::report_parent_asks`, no
/// `ToLauncher::ParentAsked`, `ToLauncher::Claimed::ready`; 17:
/// `ToDaemon::StartTool`, `ToLauncher::ToolOutput`; 18:
/// `ToLauncher::AwaitingClaim`; 19: `TreeSpec::rejoin`,
/// `ToLauncher::FenceCut`, a daemon re-attaching by TCP after its parent
/// daemon was lost); 20: `Down::Resync`; 21: `tree::Bootstrap::Slurm`
/// carries srun's extra words (`HYDRA_LAUNCHER_EXTRA_ARGS`); 22:
/// `TreeSpec::start_timeout`.
pub const PROTOCOL_VERSION: u32 = 22;

/// A heartbeat timer that fires this late says so (`Up::Starved`,
/// `Down::Starved`): the sender was starved of CPU, and its peer gives its
/// silence more time (`dpm_daemon::liveness`).
pub const STARVED_REPORT: Duration = Duration::from_millis(100);

/// The heartbeat to send after waiting `waited` for something else to
/// send: how late the timer fired past [`HEARTBEAT_EVERY`] (in ms), or
/// `None` for a timer on time (a plain heartbeat).
pub fn lateness(waited: Duration) -> Option<u32> {
    let late = waited.saturating_sub(HEARTBEAT_EVERY);
    (late >= STARVED_REPORT).then(|| late.as_millis().min(u32::MAX as u128) as u32)
}

/// A link with nothing to say sends a heartbeat this often…
pub const HEARTBEAT_EVERY: Duration = Duration::from_millis(250);
/// …and a link silent for [`heartbeat_timeout`] is taken as lost (a host
/// down or cut off sends no FIN, so only silence shows it; a closed link is
/// seen at once, whatever the timeout). The default is short enough that a
/// hung or cut-off node ends its jobs within 2 s, and holds on a busy node
/// because nothing long runs where heartbeats are sent: a `dpm daemon`'s node
/// works on a thread of its own, apart from its link, and starts never block
/// a loop. Before that, on 2 cores, `--virtual-nodes 2 -n 6000 /bin/true`,
/// 256 CPU-bound ranks on 4 virtual nodes and one spawn of 55,000 arguments
/// each failed 3 of 3 at 1.5 s (the daemon's only thread inside 3000 clones,
/// or parsing). After, measured with the same runs on the same machine
/// shared with other builds (load average up to 145), the longest silence
/// on any link was 414 ms (launcher to daemon; logged at debug level as "the
/// link to … was silent for"): 3.6 times under the default.
pub const DEFAULT_HEARTBEAT_TIMEOUT: Duration = Duration::from_millis(1500);
/// The variable that sets the timeout, in seconds (`dpm run` reads it and
/// passes it to every daemon of the tree with `--heartbeat-timeout`).
pub const HEARTBEAT_TIMEOUT_ENV: &str = "DPM_HEARTBEAT_TIMEOUT";
/// At least two heartbeat periods, so that one late heartbeat is no loss…
pub const MIN_HEARTBEAT_TIMEOUT: Duration = Duration::from_millis(500);
/// …and at most a day.
pub const MAX_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(86_400);

/// A heartbeat timeout that is not a number of seconds in range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid heartbeat timeout {value:?}: expected seconds from {} to {}", MIN_HEARTBEAT_TIMEOUT.as_secs_f64(), MAX_HEARTBEAT_TIMEOUT.as_secs_f64())]
pub struct HeartbeatTimeoutError {
    pub value: String,
}

/// Parse a heartbeat timeout in seconds (`1.5`, `10`).
pub fn parse_heartbeat_timeout(value: &str) -> Result<Duration, HeartbeatTimeoutError> {
    let bad = || HeartbeatTimeoutError { value: value.to_string() };
    let secs: f64 = value.trim().parse().map_err(|_| bad())?;
    if !secs.is_finite() || secs < MIN_HEARTBEAT_TIMEOUT.as_secs_f64() || secs > MAX_HEARTBEAT_TIMEOUT.as_secs_f64() {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(secs))
}

static HEARTBEAT_TIMEOUT: OnceLock<Duration> = OnceLock::new();

/// This process's heartbeat timeout: the one set by
/// [`set_heartbeat_timeout`] or [`configure_heartbeat_timeout`], else
/// [`HEARTBEAT_TIMEOUT_ENV`] if valid, else the default.
pub fn heartbeat_timeout() -> Duration {
    *HEARTBEAT_TIMEOUT.get_or_init(|| from_env().unwrap_or(DEFAULT_HEARTBEAT_TIMEOUT))
}

/// Fix this process's heartbeat timeout (a daemon's `--heartbeat-timeout`),
/// before any link uses it; false if it was fixed already (to another value).
pub fn set_heartbeat_timeout(timeout: Duration) -> bool {
    *HEARTBEAT_TIMEOUT.get_or_init(|| timeout) == timeout
}

/// The timeout in effect, fixing it from [`HEARTBEAT_TIMEOUT_ENV`] if not
/// yet fixed; an invalid value is an error (a launcher refuses to start).
pub fn configure_heartbeat_timeout() -> Result<Duration, HeartbeatTimeoutError> {
    if let Some(t) = HEARTBEAT_TIMEOUT.get() {
        return Ok(*t);
    }
    let timeout = from_env()?;
    set_heartbeat_timeout(timeout);
    Ok(heartbeat_timeout())
}

/// [`HEARTBEAT_TIMEOUT_ENV`], or the default when unset or empty.
fn from_env() -> Result<Duration, HeartbeatTimeoutError> {
    match std::env::var(HEARTBEAT_TIMEOUT_ENV) {
        Ok(v) if !v.trim().is_empty() => parse_heartbeat_timeout(&v),
        Ok(_) | Err(std::env::VarError::NotPresent) => Ok(DEFAULT_HEARTBEAT_TIMEOUT),
        Err(std::env::VarError::NotUnicode(v)) => Err(HeartbeatTimeoutError { value: v.to_string_lossy().into_owned() }),
    }
}

/// Largest frame accepted (a fence delta of a large job is the biggest message).
pub const MAX_FRAME: usize = 256 * 1024 * 1024;
/// Largest frame accepted before the peer is authenticated.
pub const HANDSHAKE_MAX_FRAME: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    Launcher,
    Daemon,
}

/// The first frame on a link, each way.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub protocol: u32,
    pub role: Role,
    /// The node index the launcher gave the daemon (echoed back by the daemon).
    pub node: NodeId,
    /// The sender's host name.
    pub host: String,
}

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("link closed")]
    Closed,
    #[error("I/O error on the link: {0}")]
    Io(#[from] std::io::Error),
    #[error("frame of {0} bytes exceeds the {1}-byte limit")]
    TooLong(usize, usize),
    #[error("undecodable handshake frame: {0}")]
    DecodeHandshake(#[from] serde_json::Error),
    #[error("undecodable frame: {0}")]
    Decode(#[from] postcard::Error),
    #[error("peer speaks protocol {theirs} as {role:?}, expected protocol {PROTOCOL_VERSION} as {expected:?}")]
    Handshake { theirs: u32, role: Role, expected: Role },
    #[error("protocol error during the handshake: expected {0}")]
    Unexpected(&'static str),
    #[error("authentication failed: the peer's proof does not match our secret (a stranger, or a launcher or daemon of another run)")]
    PeerNotAuthenticated,
    #[error("authentication failed: the peer refused our proof (the two sides hold different secrets)")]
    RefusedByPeer,
}

/// Send one message as a binary frame.
pub async fn write_frame<W: AsyncWrite + Unpin, T: Serialize>(w: &mut W, msg: &T) -> Result<(), FrameError> {
    let buf = postcard::to_extend(msg, vec![0u8; 4])?;
    send_body(w, buf).await
}

/// Read one binary frame of at most [`MAX_FRAME`] bytes.
pub async fn read_frame<R: AsyncRead + Unpin, T: DeserializeOwned>(r: &mut R) -> Result<T, FrameError> {
    read_frame_limited(r, MAX_FRAME).await
}

/// [`read_frame`], refusing frames longer than `max` bytes.
pub async fn read_frame_limited<R: AsyncRead + Unpin, T: DeserializeOwned>(r: &mut R, max: usize) -> Result<T, FrameError> {
    let body = read_body(r, max).await?;
    Ok(postcard::from_bytes(&body)?)
}

/// Send one handshake message (a [`Hello`] or an authentication frame) as JSON.
pub async fn write_handshake_frame<W: AsyncWrite + Unpin, T: Serialize>(w: &mut W, msg: &T) -> Result<(), FrameError> {
    let mut buf = vec![0u8; 4];
    serde_json::to_writer(&mut buf, msg)?;
    send_body(w, buf).await
}

/// Read one JSON handshake frame of at most [`HANDSHAKE_MAX_FRAME`] bytes.
pub async fn read_handshake_frame<R: AsyncRead + Unpin, T: DeserializeOwned>(r: &mut R) -> Result<T, FrameError> {
    let body = read_body(r, HANDSHAKE_MAX_FRAME).await?;
    Ok(serde_json::from_slice(&body)?)
}

/// `buf` is 4 placeholder bytes and the body: fill in the length and send.
async fn send_body<W: AsyncWrite + Unpin>(w: &mut W, mut buf: Vec<u8>) -> Result<(), FrameError> {
    let len = buf.len() - 4;
    if len > MAX_FRAME {
        return Err(FrameError::TooLong(len, MAX_FRAME));
    }
    buf[..4].copy_from_slice(&(len as u32).to_be_bytes());
    w.write_all(&buf).await?;
    w.flush().await?;
    Ok(())
}

async fn read_body<R: AsyncRead + Unpin>(r: &mut R, max: usize) -> Result<Vec<u8>, FrameError> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > max {
        return Err(FrameError::TooLong(len, max));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await.map_err(|e| if e.kind() == std::io::ErrorKind::UnexpectedEof { FrameError::Closed } else { e.into() })?;
    Ok(body)
}

/// Open a link: send our hello, read theirs and check it, then authenticate
/// both ways with `secret` ([`crate::auth`]). Returns the peer's hello.
pub async fn handshake<R, W>(r: &mut R, w: &mut W, ours: Hello, expect: Role, secret: &Secret) -> Result<Hello, FrameError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (role, node) = (ours.role, ours.node);
    write_handshake_frame(w, &ours).await?;
    let theirs: Hello = read_handshake_frame(r).await?;
    check_hello(&theirs, expect)?;
    authenticate(r, w, secret, role, node).await?;
    Ok(theirs)
}

/// The first half of a handshake for a launcher that does not know which
/// node is calling (a daemon connecting by TCP): read the peer's hello, answer
/// with ours for the node it names, check it. The caller then decides whether
/// to admit that node and runs [`authenticate`] for it.
pub async fn answer_hello<R, W>(r: &mut R, w: &mut W, mut ours: Hello, expect: Role) -> Result<Hello, FrameError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let theirs: Hello = read_handshake_frame(r).await?;
    ours.node = theirs.node;
    write_handshake_frame(w, &ours).await?;
    check_hello(&theirs, expect)?;
    Ok(theirs)
}

fn check_hello(theirs: &Hello, expect: Role) -> Result<(), FrameError> {
    if theirs.protocol != PROTOCOL_VERSION || theirs.role != expect {
        return Err(FrameError::Handshake { theirs: theirs.protocol, role: theirs.role, expected: expect });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ToDaemon, ToLauncher};
    use dpm_kvs::JobId;

    #[test]
    fn heartbeat_timeouts_are_seconds_in_range() {
        assert_eq!(parse_heartbeat_timeout("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_heartbeat_timeout(" 10 "), Ok(Duration::from_secs(10)));
        for bad in ["", "abc", "0", "0.1", "-3", "nan", "inf", "1e9", "1.5s"] {
            let err = parse_heartbeat_timeout(bad).unwrap_err();
            assert!(err.to_string().contains("expected seconds from 0.5 to 86400"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn a_heartbeat_timer_late_by_a_tenth_of_a_second_or_more_says_by_how_much() {
        let ms = Duration::from_millis;
        assert_eq!(lateness(HEARTBEAT_EVERY), None);
        assert_eq!(lateness(HEARTBEAT_EVERY + ms(99)), None, "timer slack is no starvation");
        assert_eq!(lateness(HEARTBEAT_EVERY + ms(100)), Some(100));
        assert_eq!(lateness(HEARTBEAT_EVERY + Duration::from_secs(7)), Some(7000));
        assert_eq!(lateness(Duration::from_secs(u64::MAX / 2)), Some(u32::MAX), "saturates");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn messages_round_trip_through_frames() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        let msg = ToDaemon::FenceDone { job: JobId(3), epoch: 7, delta: vec![("k".into(), "v=1 2".into())] };
        write_frame(&mut a, &msg).await.unwrap();
        let got: ToDaemon = read_frame(&mut b).await.unwrap();
        assert!(matches!(got, ToDaemon::FenceDone { job: JobId(3), epoch: 7, ref delta } if delta[0].1 == "v=1 2"));
        drop(a);
        assert!(matches!(read_frame::<_, ToLauncher>(&mut b).await, Err(FrameError::Closed)));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn output_bytes_travel_as_bytes() {
        let (mut a, mut b) = tokio::io::duplex(1 << 20);
        let data = vec![b'x'; 100_000];
        let msg = ToLauncher::Output { job: JobId(0), rank: dpm_kvs::Rank(1), stream: crate::Stream::Stdout, data: data.clone() };
        write_frame(&mut a, &msg).await.unwrap();
        drop(a);
        let mut len = [0u8; 4];
        b.read_exact(&mut len).await.unwrap();
        let len = u32::from_be_bytes(len) as usize;
        assert!(len < data.len() + 32, "a {}-byte output took a {len}-byte frame", data.len());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_peer_of_another_version_is_told_so() {
        // Protocol 3 and earlier sent every frame as JSON; the Hello still is.
        let (a, mut b) = tokio::io::duplex(1 << 16);
        let (mut ar, mut aw) = tokio::io::split(a);
        let old = br#"{"protocol":3,"role":"Daemon","node":2,"host":"old"}"#;
        b.write_all(&(old.len() as u32).to_be_bytes()).await.unwrap();
        b.write_all(old).await.unwrap();
        let ours = Hello { protocol: PROTOCOL_VERSION, role: Role::Launcher, node: NodeId(0), host: "l".into() };
        let r = answer_hello(&mut ar, &mut aw, ours, Role::Daemon).await;
        assert!(matches!(r, Err(FrameError::Handshake { theirs: 3, role: Role::Daemon, .. })), "{r:?}");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn handshake_refuses_a_wrong_role_or_version() {
        let (a, b) = tokio::io::duplex(1 << 16);
        let (mut ar, mut aw) = tokio::io::split(a);
        let (mut br, mut bw) = tokio::io::split(b);
        let hello = |role, protocol| Hello { protocol, role, node: NodeId(0), host: "h".into() };
        let secret = &Secret::from_bytes([1; 32]);
        // Each side owns its ends, so a side that gives up closes the link.
        let (left, right) =
            tokio::join!(async move { handshake(&mut ar, &mut aw, hello(Role::Launcher, PROTOCOL_VERSION), Role::Daemon, secret,).await }, async move {
                handshake(&mut br, &mut bw, hello(Role::Launcher, PROTOCOL_VERSION + 1), Role::Launcher, secret).await
            },);
        // Left expected a daemon and got a launcher of another version.
        assert!(matches!(left, Err(FrameError::Handshake { theirs, role: Role::Launcher, .. }) if theirs == PROTOCOL_VERSION + 1));
        // Right expected (and got) a launcher of the current version, which
        // then hung up instead of authenticating.
        assert!(matches!(right, Err(FrameError::Closed)), "{right:?}");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_daemon_calling_in_is_answered_for_its_node_and_authenticated() {
        let (a, b) = tokio::io::duplex(1 << 16);
        let (mut ar, mut aw) = tokio::io::split(a);
        let (mut br, mut bw) = tokio::io::split(b);
        let secret = Secret::generate().unwrap();
        let launcher = async {
            let ours = Hello { protocol: PROTOCOL_VERSION, role: Role::Launcher, node: NodeId(usize::MAX), host: "l".into() };
            let theirs = answer_hello(&mut ar, &mut aw, ours, Role::Daemon).await?;
            authenticate(&mut ar, &mut aw, &secret, Role::Launcher, theirs.node).await?;
            Ok::<_, FrameError>(theirs.node)
        };
        let ours = Hello { protocol: PROTOCOL_VERSION, role: Role::Daemon, node: NodeId(5), host: "d".into() };
        let (l, d) = tokio::join!(launcher, handshake(&mut br, &mut bw, ours, Role::Launcher, &secret));
        assert_eq!(l.unwrap(), NodeId(5));
        assert_eq!(d.unwrap().node, NodeId(5), "the launcher's hello names the caller's node");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_huge_frame_is_refused_before_authentication() {
        let (a, mut b) = tokio::io::duplex(1 << 16);
        let (mut ar, mut aw) = tokio::io::split(a);
        b.write_all(&(100_000_000u32).to_be_bytes()).await.unwrap();
        let ours = Hello { protocol: PROTOCOL_VERSION, role: Role::Launcher, node: NodeId(0), host: "l".into() };
        let r = answer_hello(&mut ar, &mut aw, ours, Role::Daemon).await;
        assert!(matches!(r, Err(FrameError::TooLong(100_000_000, HANDSHAKE_MAX_FRAME))), "{r:?}");
    }
}
