//! Per-process tasks of the node driver. They own file descriptors and move
//! bytes; all decisions are taken by the node reactor, which they feed
//! through [`Event`]s.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::unix::AsyncFd;
use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, watch, Notify};

use dpm_kvs::{JobId, Rank};
use dpm_proto::{ExitStatus, Stream};

use crate::node::Timer;
use crate::readbuf;
use crate::spawn::reap;
use crate::spawn_here;

pub enum Event {
    /// A TCP connection on a job's PMI port (`PMI_PORT` mode).
    PortConn {
        job: JobId,
        fd: OwnedFd,
    },
    /// A connection on a job's PMIx watch ([`crate::pmix_watch`]);
    /// `refused`: why its owner (the kernel's word) may not count.
    WatchConn {
        job: JobId,
        stream: std::net::TcpStream,
        refused: Option<String>,
    },
    Output {
        job: JobId,
        rank: Rank,
        stream: Stream,
        data: Vec<u8>,
    },
    /// The stream reached end of file (every holder closed it).
    OutputClosed {
        job: JobId,
        rank: Rank,
        stream: Stream,
    },
    /// Reaped (or could not be watched any more).
    Exited {
        job: JobId,
        rank: Rank,
        status: ExitStatus,
        at: u64,
    },
    Timer(Timer),
    /// The topology export ended: the file's path, or `None`.
    Topology(Option<&'static str>),
    /// An upcall of the node's PMIx server (`node::pmix_host`).
    Pmix(dpm_pmix::Upcall),
    /// A start the node's thread made itself (`node::StartBy::NodeThread`),
    /// answered on the loop's next turn as a spawner thread's would be.
    Started {
        token: u64,
        result: std::io::Result<crate::spawn::Started>,
    },
}

/// A listener on a free port of `ip` on this host (loopback: the PMI port, a
/// PMIx watch; `-iface`'s address: the PMI port), for this thread's event
/// loop: its port and itself.
fn bind_loopback() -> std::io::Result<(u16, tokio::net::TcpListener)> {
    bind_on(std::net::Ipv4Addr::LOCALHOST.into())
}

fn bind_on(ip: std::net::IpAddr) -> std::io::Result<(u16, tokio::net::TcpListener)> {
    let listener = std::net::TcpListener::bind((ip, 0))?;
    listener.set_nonblocking(true)?;
    let port = listener.local_addr()?.port();
    Ok((port, tokio::net::TcpListener::from_std(listener)?))
}

/// Why an accepted loopback connection may not count: its owner is not this
/// daemon's user, by the kernel's word ([`crate::peer`]); `None` if it is.
fn refusal(stream: &tokio::net::TcpStream, peer: std::net::SocketAddr) -> Option<String> {
    let local = stream.local_addr().map_err(crate::peer::PeerError::from);
    local.and_then(|local| crate::peer::check_same_user(local, peer)).err().map(|why| format!("{peer}: {why}"))
}

/// Accept PMI connections for one job on a TCP port of loopback, or of the
/// `-iface` interface's address ([`crate::iface::listen_ip`]).
pub fn listen_pmi_port(job: JobId, events: mpsc::UnboundedSender<Event>) -> std::io::Result<(String, tokio::task::AbortHandle)> {
    let ip = crate::iface::listen_ip();
    let (port, listener) = bind_on(ip)?;
    let port = std::net::SocketAddr::new(ip, port).to_string();
    let handle = spawn_here(async move {
        // Another user may connect as often as they like: a line a second.
        let origin = tokio::time::Instant::now();
        let mut refusals = crate::refusals::RefusalLog::default();
        loop {
            let summary = refusals.due().map(|d| origin + d);
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = tokio::time::sleep_until(summary.unwrap_or(origin)), if summary.is_some() => {
                    if let Some(line) = refusals.flush(origin.elapsed()) {
                        tracing::warn!(%job, "PMI port connections: {line}");
                    }
                    continue;
                }
            };
            let Ok((stream, peer)) = accepted else { break };
            // Another local user must not reach the job's PMI server (they
            // could spawn programs as its owner): the peer's uid, or nothing.
            if let Some(why) = refusal(&stream, peer) {
                if let Some(line) = refusals.refused(origin.elapsed(), why) {
                    tracing::warn!(%job, "refused a PMI port connection: {line}");
                }
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

/// A job's PMIx watch on this node ([`crate::pmix_watch`]): its accept
/// task and the connections it holds open, unanswered. Dropping it stops
/// the task and closes them all.
pub struct Watch {
    listener: tokio::task::AbortHandle,
    held: Vec<std::net::TcpStream>,
}

impl Watch {
    /// Keep a connection open (its client waits in `PMIx_Init`).
    pub fn hold(&mut self, stream: std::net::TcpStream) {
        self.held.push(stream);
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

/// Listen for a job's PMIx watch on a free loopback port of this host:
/// each connection goes to the reactor with the kernel's word on its owner
/// (what to do with it is the job's `Watcher`'s decision).
pub fn listen_pmix_watch(job: JobId, events: mpsc::UnboundedSender<Event>) -> std::io::Result<(u16, Watch)> {
    let (port, listener) = bind_loopback()?;
    let handle = spawn_here(async move {
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                // Out of descriptors, say: try again shortly, never spin.
                Err(_) => {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let refused = refusal(&stream, peer);
            let Ok(stream) = stream.into_std() else { continue };
            if events.send(Event::WatchConn { job, stream, refused }).is_err() {
                break;
            }
        }
    });
    Ok((port, Watch { listener: handle.abort_handle(), held: Vec::new() }))
}

/// Write what the launcher sends to a rank's stdin; dropping the sender closes it.
pub fn feed_stdin(fd: OwnedFd) -> mpsc::UnboundedSender<Vec<u8>> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
    spawn_here(async move {
        let Ok(mut pipe) = pipe::Sender::from_owned_fd(fd) else { return };
        while let Some(data) = rx.recv().await {
            if pipe.write_all(&data).await.is_err() {
                break; // the rank closed its stdin: drop the rest
            }
        }
    });
    tx
}

/// A process's output pipes (read ends, non-blocking: [`crate::spawn::Started`]'s),
/// the reactor's switch that stops reading
/// them (`true`) while its job's output window is full, and the probe that
/// tells the driver whether bytes of theirs are still on the way.
#[derive(Default)]
pub struct Pipes {
    pub stdout: Option<OwnedFd>,
    pub stderr: Option<OwnedFd>,
    pub paused: Option<watch::Receiver<bool>>,
    pub probe: Option<Arc<OutputProbe>>,
}

/// Whether a process's output is on its way to the reactor: bytes unread in
/// a pipe, or read and sent ([`Event::Output`]) but not handled yet. A held
/// partial line's rest may be there: its quiet timer must not send the
/// piece up alone (on a loaded machine the reading task runs late).
///
/// It also bounds what is on the way: a stream with [`MAX_IN_FLIGHT`]
/// reads unhandled is not read again until the reactor takes one. Without
/// the bound, a reading task that runs while the reactor is starved (a
/// loaded machine) reads a fast writer's pipe far past the job's output
/// window before the reactor can pause it, and all of that travelled up
/// to the launcher (a boot server grew by 48 MB behind a stalled client).
#[derive(Debug)]
pub struct OutputProbe {
    /// Each stream's read end while its task holds it open (-1 after).
    fds: [AtomicI32; 2],
    /// Each stream's [`Event::Output`]s sent and not yet handled.
    in_flight: [AtomicUsize; 2],
    /// Woken when the reactor takes one.
    room: Notify,
}

/// Reads of one stream sent to the reactor and not yet handled, at most:
/// with [`readbuf::READ_SIZE`] 16 KiB, 128 KiB per stream past the window.
pub const MAX_IN_FLIGHT: usize = 8;

impl Default for OutputProbe {
    fn default() -> Self {
        OutputProbe { fds: [AtomicI32::new(-1), AtomicI32::new(-1)], in_flight: [AtomicUsize::new(0), AtomicUsize::new(0)], room: Notify::new() }
    }
}

fn index(stream: Stream) -> usize {
    match stream {
        Stream::Stdout => 0,
        Stream::Stderr => 1,
    }
}

impl OutputProbe {
    /// Bytes of `stream` wait in its pipe or on their way to the reactor.
    pub fn pending(&self, stream: Stream) -> bool {
        let i = index(stream);
        if self.in_flight[i].load(Ordering::Acquire) > 0 {
            return true;
        }
        let fd = self.fds[i].load(Ordering::Acquire);
        let mut unread: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int through the pointer, which points
        // at a live local; a descriptor closed meanwhile fails with EBADF
        // (or, reused, answers for another file: one quiet time more at worst).
        fd >= 0 && unsafe { libc::ioctl(fd, libc::FIONREAD, &mut unread) } == 0 && unread > 0
    }

    /// The reactor took one [`Event::Output`] of `stream`.
    pub fn handled(&self, stream: Stream) {
        let _ = self.in_flight[index(stream)].fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        // A permit is kept when nobody waits: the reading task's next wait
        // returns at once and it looks again (never a lost wake-up).
        self.room.notify_one();
    }

    /// `stream` has [`MAX_IN_FLIGHT`] reads on their way: read no more.
    pub fn full(&self, stream: Stream) -> bool {
        self.in_flight[index(stream)].load(Ordering::Acquire) >= MAX_IN_FLIGHT
    }

    fn open(&self, stream: Stream, fd: i32) {
        self.fds[index(stream)].store(fd, Ordering::Release);
    }

    fn sent(&self, stream: Stream) {
        self.in_flight[index(stream)].fetch_add(1, Ordering::AcqRel);
    }
}

/// Watch one process: forward its stdout/stderr until end of file (not
/// reading them while paused), reap it through its pidfd (a group leader is
/// left a zombie: `keep_zombie`, see [`reap`]). When its exit may be
/// reported, and when reading pauses, is the reactor's decision.
pub fn watch_proc(job: JobId, rank: Rank, pidfd: OwnedFd, keep_zombie: bool, pipes: Pipes, events: mpsc::UnboundedSender<Event>) {
    let Pipes { stdout, stderr, paused: mut pause, probe } = pipes;
    let probe = probe.unwrap_or_default();
    spawn_here(async move {
        // SAFETY: the OwnedFd is moved into the AsyncFd and stays open while it lives.
        let pidfd = unsafe { AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE) }.ok();
        let piped = [stdout.is_some(), stderr.is_some()];
        // Unchecked: the spawner made them pipes and non-blocking.
        let mut out = stdout.and_then(|fd| pipe::Receiver::from_owned_fd_unchecked(fd).ok());
        let mut err = stderr.and_then(|fd| pipe::Receiver::from_owned_fd_unchecked(fd).ok());
        for (stream, p) in [(Stream::Stdout, &out), (Stream::Stderr, &err)] {
            if let Some(p) = p {
                probe.open(stream, p.as_raw_fd());
            }
        }
        // A pipe that cannot be read counts as closed.
        for (piped, stream, open) in [(piped[0], Stream::Stdout, out.is_some()), (piped[1], Stream::Stderr, err.is_some())] {
            if piped && !open {
                let _ = events.send(Event::OutputClosed { job, rank, stream });
            }
        }
        // Without a pidfd its exit is never known: only its output is forwarded.
        let mut reaped = pidfd.is_none();
        if pidfd.is_none() {
            tracing::error!(%job, rank = rank.0, "cannot watch the process: pidfd unavailable");
        }
        while !(reaped && out.is_none() && err.is_none()) {
            let paused = pause.as_ref().is_some_and(|p| *p.borrow());
            let full = [probe.full(Stream::Stdout), probe.full(Stream::Stderr)];
            tokio::select! {
                () = probe.room.notified(), if full[0] || full[1] => {}
                changed = async { pause.as_mut().expect("paused").changed().await }, if pause.is_some() => {
                    if changed.is_err() {
                        pause = None; // the reactor is gone: never paused again
                    }
                }
                ready = async { pidfd.as_ref().expect("watched").readable().await }, if !reaped => {
                    let Ok(mut guard) = ready else { continue };
                    match reap(guard.get_inner(), keep_zombie) {
                        Ok(Some(status)) => {
                            reaped = true;
                            let _ = events.send(Event::Exited { job, rank, status, at: now_micros() });
                        }
                        Ok(None) => guard.clear_ready(),
                        Err(e) => {
                            tracing::error!(%job, rank = rank.0, "waitid failed: {e}");
                            reaped = true;
                            // Reported at once, whatever is still open.
                            let _ = events.send(Event::Exited { job, rank, status: ExitStatus::Code(255), at: 0 });
                            let _ = events.send(Event::Timer(Timer::DrainGrace { job, rank }));
                        }
                    }
                }
                ready = readable(&out), if !paused && !full[0] => forward(&events, &probe, job, rank, Stream::Stdout, &mut out, ready),
                ready = readable(&err), if !paused && !full[1] => forward(&events, &probe, job, rank, Stream::Stderr, &mut err, ready),
            }
        }
    });
}

/// Wall-clock µs since the Unix epoch.
pub fn now_micros() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// A pipe's readiness to be read (never, once it is closed).
async fn readable(pipe: &Option<pipe::Receiver>) -> std::io::Result<()> {
    match pipe {
        Some(p) => p.readable().await,
        None => std::future::pending().await,
    }
}

/// Read a ready pipe once into the thread's buffer ([`readbuf`]) and pass
/// on what came; end of file or an error closes it.
fn forward(
    events: &mpsc::UnboundedSender<Event>,
    probe: &OutputProbe,
    job: JobId,
    rank: Rank,
    stream: Stream,
    pipe: &mut Option<pipe::Receiver>,
    ready: std::io::Result<()>,
) {
    let Some(p) = pipe.as_ref() else { return };
    let read = ready.and_then(|()| {
        readbuf::with_buffer(|buf| {
            let mut short = None;
            let read = p.try_io(|| readbuf::read_drained(p.as_raw_fd(), buf, &mut short));
            readbuf::outcome(read, short).map(|n| buf[..n].to_vec())
        })
    });
    match read {
        Ok(data) if !data.is_empty() => {
            probe.sent(stream);
            let _ = events.send(Event::Output { job, rank, stream, data });
        }
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        Ok(_) | Err(_) => {
            // End of file, or an error: closed (the probe forgets it first).
            probe.open(stream, -1);
            *pipe = None;
            let _ = events.send(Event::OutputClosed { job, rank, stream });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::Duration;

    /// A reactor that takes nothing (a starved one) gets at most
    /// [`MAX_IN_FLIGHT`] reads of a fast writer's pipe; each one it takes
    /// lets exactly one more read through, and in the end every byte comes.
    #[tokio::test]
    async fn a_starved_reactor_gets_no_more_than_the_reads_in_flight() {
        let (rd, mut wr) = std::io::pipe().expect("pipe");
        let rd: OwnedFd = rd.into();
        nix::fcntl::fcntl(rd.as_raw_fd(), nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK)).expect("non-blocking");
        let mut child = std::process::Command::new("sleep").arg("30").spawn().expect("sleep");
        let pidfd = crate::spawn::pidfd_open(child.id() as i32).expect("pidfd");
        const TOTAL: usize = 4 << 20;
        let writer = std::thread::spawn(move || wr.write_all(&vec![b'x'; TOTAL]));
        let probe = Arc::new(OutputProbe::default());
        let (tx, mut rx) = mpsc::unbounded_channel();
        let pipes = Pipes { stdout: Some(rd), stderr: None, paused: None, probe: Some(probe.clone()) };
        watch_proc(JobId(1), Rank(0), pidfd, false, pipes, tx);

        let mut got = 0;
        let next = |rx: &mut mpsc::UnboundedReceiver<Event>| {
            let ev = rx.try_recv();
            match ev {
                Ok(Event::Output { data, .. }) => Some(data.len()),
                Ok(_) => panic!("only output expected"),
                Err(_) => None,
            }
        };
        // Wait (bounded) for the reading task to fill its allowance.
        let mut unhandled = 0;
        for _ in 0..500 {
            while let Some(n) = next(&mut rx) {
                got += n;
                unhandled += 1;
            }
            if unhandled >= MAX_IN_FLIGHT {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(unhandled, MAX_IN_FLIGHT, "the reads on their way");
        // Nothing more while none is handled (a starved reactor).
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(next(&mut rx).is_none(), "read past the reads allowed on their way");
        // The reactor takes them all, one at a time: every byte arrives.
        while got < TOTAL {
            if unhandled > 0 {
                probe.handled(Stream::Stdout);
                unhandled -= 1;
            }
            match tokio::time::timeout(Duration::from_secs(30), rx.recv()).await.expect("output flows again") {
                Some(Event::Output { data, .. }) => {
                    got += data.len();
                    unhandled += 1;
                }
                _ => panic!("only output expected"),
            }
            assert!(unhandled <= MAX_IN_FLIGHT, "{unhandled} reads on their way");
        }
        assert_eq!(got, TOTAL);
        writer.join().expect("writer").expect("write");
        let _ = child.kill();
        let _ = child.wait();
    }
}
