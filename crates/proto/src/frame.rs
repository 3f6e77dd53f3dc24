//! Frames: how [`ToDaemon`] and [`ToLauncher`] travel between processes.
//!
//! A frame is a 4-byte big-endian length and that many bytes of JSON (one
//! message). Every link opens with a [`Hello`] each way, carrying the protocol
//! version and the sender's role, so a daemon of another dpm version or a
//! stray process on the pipe is refused at once with a clear error.
//!
//! [`ToDaemon`]: crate::ToDaemon
//! [`ToLauncher`]: crate::ToLauncher

use serde::{de::DeserializeOwned, Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Bumped whenever a message changes shape.
pub const PROTOCOL_VERSION: u32 = 2;

/// A link with nothing to say sends a heartbeat this often…
pub const HEARTBEAT_EVERY: std::time::Duration = std::time::Duration::from_millis(250);
/// …and a link silent for this long is taken as lost (a host down or cut off
/// sends no FIN, so only silence shows it). Short enough that a lost node ends
/// its jobs within 2 s.
pub const HEARTBEAT_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(1500);

/// Largest frame accepted (a fence delta of a large job is the biggest message).
pub const MAX_FRAME: usize = 256 * 1024 * 1024;

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
    #[error("frame of {0} bytes exceeds the {MAX_FRAME}-byte limit")]
    TooLong(usize),
    #[error("undecodable frame: {0}")]
    Decode(#[from] serde_json::Error),
    #[error("peer speaks protocol {theirs} as {role:?}, expected protocol {PROTOCOL_VERSION} as {expected:?}")]
    Handshake { theirs: u32, role: Role, expected: Role },
}

pub async fn write_frame<W: AsyncWrite + Unpin, T: Serialize>(w: &mut W, msg: &T) -> Result<(), FrameError> {
    let body = serde_json::to_vec(msg)?;
    if body.len() > MAX_FRAME {
        return Err(FrameError::TooLong(body.len()));
    }
    let mut buf = Vec::with_capacity(4 + body.len());
    buf.extend_from_slice(&(body.len() as u32).to_be_bytes());
    buf.extend_from_slice(&body);
    w.write_all(&buf).await?;
    w.flush().await?;
    Ok(())
}

pub async fn read_frame<R: AsyncRead + Unpin, T: DeserializeOwned>(r: &mut R) -> Result<T, FrameError> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(FrameError::TooLong(len));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await.map_err(|e| if e.kind() == std::io::ErrorKind::UnexpectedEof { FrameError::Closed } else { e.into() })?;
    Ok(serde_json::from_slice(&body)?)
}

/// Send our hello, read theirs, and check it.
pub async fn handshake<R, W>(r: &mut R, w: &mut W, ours: Hello, expect: Role) -> Result<Hello, FrameError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    write_frame(w, &ours).await?;
    let theirs: Hello = read_frame(r).await?;
    if theirs.protocol != PROTOCOL_VERSION || theirs.role != expect {
        return Err(FrameError::Handshake { theirs: theirs.protocol, role: theirs.role, expected: expect });
    }
    Ok(theirs)
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
        let (left, right) = tokio::join!(
            handshake(&mut ar, &mut aw, hello(Role::Launcher, PROTOCOL_VERSION), Role::Daemon),
            handshake(&mut br, &mut bw, hello(Role::Launcher, PROTOCOL_VERSION + 1), Role::Launcher),
        );
        // Left expected a daemon and got a launcher of another version.
        assert!(matches!(left, Err(FrameError::Handshake { theirs, role: Role::Launcher, .. }) if theirs == PROTOCOL_VERSION + 1));
        // Right expected (and got) a launcher of the current version.
        assert_eq!(right.unwrap().protocol, PROTOCOL_VERSION);
    }
}
