//! Frames: how [`ToDaemon`] and [`ToLauncher`] travel between processes.
//!
//! A frame is a 4-byte big-endian length and that many bytes of JSON (one
//! message). Every link opens with a [`Hello`] each way, carrying the protocol
//! version and the sender's role, so a daemon of another dpm version or a
//! stray process on the pipe is refused at once with a clear error; then both
//! sides prove that they hold the run's secret ([`crate::auth`]). Until then
//! frames are limited to [`HANDSHAKE_MAX_FRAME`] bytes, so a stranger cannot
//! make a listening launcher allocate much.
//!
//! [`ToDaemon`]: crate::ToDaemon
//! [`ToLauncher`]: crate::ToLauncher

use serde::{de::DeserializeOwned, Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

pub use crate::auth::authenticate;
use crate::auth::Secret;

/// Bumped whenever a message changes shape (3: the authentication exchange
/// after the Hellos).
pub const PROTOCOL_VERSION: u32 = 3;

/// A link with nothing to say sends a heartbeat this often…
pub const HEARTBEAT_EVERY: std::time::Duration = std::time::Duration::from_millis(250);
/// …and a link silent for this long is taken as lost (a host down or cut off
/// sends no FIN, so only silence shows it). Short enough that a lost node ends
/// its jobs within 2 s.
pub const HEARTBEAT_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(1500);

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
    pub node: usize,
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
    #[error("undecodable frame: {0}")]
    Decode(#[from] serde_json::Error),
    #[error("peer speaks protocol {theirs} as {role:?}, expected protocol {PROTOCOL_VERSION} as {expected:?}")]
    Handshake { theirs: u32, role: Role, expected: Role },
    #[error("protocol error during the handshake: expected {0}")]
    Unexpected(&'static str),
    #[error("authentication failed: the peer's proof does not match our secret (a stranger, or a launcher or daemon of another run)")]
    PeerNotAuthenticated,
    #[error("authentication failed: the peer refused our proof (the two sides hold different secrets)")]
    RefusedByPeer,
}

pub async fn write_frame<W: AsyncWrite + Unpin, T: Serialize>(w: &mut W, msg: &T) -> Result<(), FrameError> {
    let body = serde_json::to_vec(msg)?;
    if body.len() > MAX_FRAME {
        return Err(FrameError::TooLong(body.len(), MAX_FRAME));
    }
    let mut buf = Vec::with_capacity(4 + body.len());
    buf.extend_from_slice(&(body.len() as u32).to_be_bytes());
    buf.extend_from_slice(&body);
    w.write_all(&buf).await?;
    w.flush().await?;
    Ok(())
}

pub async fn read_frame<R: AsyncRead + Unpin, T: DeserializeOwned>(r: &mut R) -> Result<T, FrameError> {
    read_frame_limited(r, MAX_FRAME).await
}

/// [`read_frame`], refusing frames longer than `max` bytes.
pub async fn read_frame_limited<R: AsyncRead + Unpin, T: DeserializeOwned>(r: &mut R, max: usize) -> Result<T, FrameError> {
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
    Ok(serde_json::from_slice(&body)?)
}

/// Open a link: send our hello, read theirs and check it, then authenticate
/// both ways with `secret` ([`crate::auth`]). Returns the peer's hello.
pub async fn handshake<R, W>(r: &mut R, w: &mut W, ours: Hello, expect: Role, secret: &Secret) -> Result<Hello, FrameError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (role, node) = (ours.role, ours.node);
    write_frame(w, &ours).await?;
    let theirs: Hello = read_frame_limited(r, HANDSHAKE_MAX_FRAME).await?;
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
    let theirs: Hello = read_frame_limited(r, HANDSHAKE_MAX_FRAME).await?;
    ours.node = theirs.node;
    write_frame(w, &ours).await?;
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
    async fn handshake_refuses_a_wrong_role_or_version() {
        let (a, b) = tokio::io::duplex(1 << 16);
        let (mut ar, mut aw) = tokio::io::split(a);
        let (mut br, mut bw) = tokio::io::split(b);
        let hello = |role, protocol| Hello { protocol, role, node: 0, host: "h".into() };
        let secret = &Secret::from_bytes([1; 32]);
        // Each side owns its ends, so a side that gives up closes the link.
        let (left, right) = tokio::join!(
            async move { handshake(&mut ar, &mut aw, hello(Role::Launcher, PROTOCOL_VERSION), Role::Daemon, secret).await },
            async move { handshake(&mut br, &mut bw, hello(Role::Launcher, PROTOCOL_VERSION + 1), Role::Launcher, secret).await },
        );
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
            let ours = Hello { protocol: PROTOCOL_VERSION, role: Role::Launcher, node: usize::MAX, host: "l".into() };
            let theirs = answer_hello(&mut ar, &mut aw, ours, Role::Daemon).await?;
            authenticate(&mut ar, &mut aw, &secret, Role::Launcher, theirs.node).await?;
            Ok::<_, FrameError>(theirs.node)
        };
        let ours = Hello { protocol: PROTOCOL_VERSION, role: Role::Daemon, node: 5, host: "d".into() };
        let (l, d) = tokio::join!(launcher, handshake(&mut br, &mut bw, ours, Role::Launcher, &secret));
        assert_eq!(l.unwrap(), 5);
        assert_eq!(d.unwrap().node, 5, "the launcher's hello names the caller's node");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_huge_frame_is_refused_before_authentication() {
        let (a, mut b) = tokio::io::duplex(1 << 16);
        let (mut ar, mut aw) = tokio::io::split(a);
        b.write_all(&(100_000_000u32).to_be_bytes()).await.unwrap();
        let ours = Hello { protocol: PROTOCOL_VERSION, role: Role::Launcher, node: 0, host: "l".into() };
        let r = answer_hello(&mut ar, &mut aw, ours, Role::Daemon).await;
        assert!(matches!(r, Err(FrameError::TooLong(100_000_000, HANDSHAKE_MAX_FRAME))), "{r:?}");
    }
}
