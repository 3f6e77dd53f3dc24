//! Per-process tasks. They own file descriptors and move bytes; all decisions
//! are taken by the daemon's event loop, which they feed through [`Event`]s.

use std::os::fd::OwnedFd;
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, oneshot};

use dpm_kvs::{JobId, Rank};
use dpm_proto::{ExitStatus, Stream};

use crate::spawn::reap;

/// How long an exited process's PMI connection and pipes may stay open
/// (held by a grandchild) before its exit is reported anyway.
const DRAIN_GRACE: Duration = Duration::from_millis(250);

pub enum Event {
    /// A TCP connection on a job's PMI port (`PMI_PORT` mode).
    PortConn { job: JobId, fd: OwnedFd },
    Output { job: JobId, rank: Rank, stream: Stream, data: Vec<u8> },
    /// Reported after the PMI connection closed and the pipes reached EOF,
    /// or after [`DRAIN_GRACE`].
    Exited { job: JobId, rank: Rank, status: ExitStatus, at: u64 },
}

/// Accept PMI connections for one job on a loopback TCP port.
pub fn listen_pmi_port(
    job: JobId,
    events: mpsc::UnboundedSender<Event>,
) -> std::io::Result<(String, tokio::task::AbortHandle)> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    listener.set_nonblocking(true)?;
    let port = format!("127.0.0.1:{}", listener.local_addr()?.port());
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let handle = tokio::spawn(async move {
        while let Ok((stream, peer)) = listener.accept().await {
            // Another local user must not reach the job's PMI server (they
            // could spawn programs as its owner): the peer's uid, or nothing.
            let local = stream.local_addr().map_err(crate::peer::PeerError::from);
            if let Err(why) = local.and_then(|local| crate::peer::check_same_user(local, peer)) {
                tracing::warn!(%job, %peer, "refused a PMI port connection: {why}");
                continue; // dropping the stream closes it
            }
            let _ = stream.set_nodelay(true);
            let Ok(std) = stream.into_std() else { continue };
            let _ = std.set_nonblocking(false);
            let _ = events.send(Event::PortConn { job, fd: OwnedFd::from(std) });
        }
    });
    Ok((port, handle.abort_handle()))
}

/// Write what the launcher sends to a rank's stdin; dropping the sender closes it.
pub fn feed_stdin(fd: OwnedFd) -> mpsc::UnboundedSender<Vec<u8>> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
    tokio::spawn(async move {
        let Ok(mut pipe) = pipe::Sender::from_owned_fd(fd) else { return };
        while let Some(data) = rx.recv().await {
            if pipe.write_all(&data).await.is_err() {
                break; // the rank closed its stdin: drop the rest
            }
        }
    });
    tx
}

/// Watch one process: forward its stdout/stderr, reap it through its pidfd
/// (a group leader is left a zombie: `keep_zombie`, see [`reap`]), report
/// its exit once its PMI traffic and output are through.
#[allow(clippy::too_many_arguments)]
pub fn watch_proc(
    job: JobId,
    rank: Rank,
    pidfd: OwnedFd,
    keep_zombie: bool,
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
    mut pmi_closed: oneshot::Receiver<()>,
    events: mpsc::UnboundedSender<Event>,
) {
    tokio::spawn(async move {
        // SAFETY: the OwnedFd is moved into the AsyncFd and stays open while it lives.
        let pidfd = unsafe { AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE) }.ok();
        let mut out = stdout.and_then(|fd| pipe::Receiver::from_owned_fd(fd).ok());
        let mut err = stderr.and_then(|fd| pipe::Receiver::from_owned_fd(fd).ok());
        let mut out_buf = vec![0u8; 16 * 1024];
        let mut err_buf = vec![0u8; 16 * 1024];
        let mut status: Option<ExitStatus> = None;
        let mut reaped_at = 0u64;
        let mut pmi_done = false;
        let mut reported = false;
        let mut deadline = None::<tokio::time::Instant>;
        if pidfd.is_none() {
            tracing::error!(%job, rank = rank.0, "cannot watch the process: pidfd unavailable");
        }
        loop {
            if let Some(s) = status.filter(|_| !reported && ((pmi_done && out.is_none() && err.is_none()) || deadline_passed(deadline))) {
                let _ = events.send(Event::Exited { job, rank, status: s, at: reaped_at });
                reported = true;
            }
            if reported && out.is_none() && err.is_none() {
                break;
            }
            let sleep_until = deadline.unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(3600));
            tokio::select! {
                ready = async { pidfd.as_ref().unwrap().readable().await }, if status.is_none() && pidfd.is_some() => {
                    if let Ok(mut guard) = ready {
                        match reap(pidfd.as_ref().unwrap().get_ref(), keep_zombie) {
                            Ok(Some(s)) => {
                                status = Some(s);
                                reaped_at = now_micros();
                                deadline = Some(tokio::time::Instant::now() + DRAIN_GRACE);
                            }
                            Ok(None) => guard.clear_ready(),
                            Err(e) => {
                                tracing::error!(%job, rank = rank.0, "waitid failed: {e}");
                                status = Some(ExitStatus::Code(255));
                                deadline = Some(tokio::time::Instant::now());
                            }
                        }
                    }
                }
                _ = &mut pmi_closed, if !pmi_done => pmi_done = true,
                n = read_opt(&mut out, &mut out_buf) => forward(&events, job, rank, Stream::Stdout, &mut out, &out_buf, n),
                n = read_opt(&mut err, &mut err_buf) => forward(&events, job, rank, Stream::Stderr, &mut err, &err_buf, n),
                _ = tokio::time::sleep_until(sleep_until), if deadline.is_some() && !reported => {}
            }
        }
    });
}

/// Wall-clock µs since the Unix epoch.
pub fn now_micros() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

fn deadline_passed(deadline: Option<tokio::time::Instant>) -> bool {
    deadline.is_some_and(|d| tokio::time::Instant::now() >= d)
}

async fn read_opt(pipe: &mut Option<pipe::Receiver>, buf: &mut [u8]) -> std::io::Result<usize> {
    match pipe {
        Some(p) => p.read(buf).await,
        None => std::future::pending().await,
    }
}

fn forward(
    events: &mpsc::UnboundedSender<Event>,
    job: JobId,
    rank: Rank,
    stream: Stream,
    pipe: &mut Option<pipe::Receiver>,
    buf: &[u8],
    n: std::io::Result<usize>,
) {
    match n {
        Ok(0) | Err(_) => *pipe = None,
        Ok(n) => {
            let _ = events.send(Event::Output { job, rank, stream, data: buf[..n].to_vec() });
        }
    }
}
