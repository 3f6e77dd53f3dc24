//! The spawner threads that start a node's processes, and the one socket on
//! which they answer: each answer (the started process's pid, group and fds,
//! or why it did not start) is one `SOCK_SEQPACKET` message, read by the
//! node's event loop straight off that socket.
//!
//! Why one socket and no channel: the answers once went through an mpsc
//! channel and a relay thread to the loop (a tokio loop is woken through its
//! eventfd, which is not in a spawner thread's private fd table). Each start
//! then cost three threads' wakeups (spawner, relay, loop) one after the
//! other, and under load each wakeup waits for a CPU: a 64-rank one-node PMI
//! start took 13-19 % longer than the synchronous starts before it, with the
//! same CPU time. Now a spawner thread's `sendmsg` itself wakes the loop
//! (epoll on the socket), and the loop takes every answer that is there at
//! once ([`SpawnAnswers::take`]).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};

use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};
use tokio::io::unix::AsyncFd;

use crate::spawn::{spawn_proc, Batch, PmiEnv, PreparedApp, Started};

/// One process to start: its app, its extra variables, its group, its stdin.
pub struct SpawnTask {
    pub app: Arc<PreparedApp>,
    pub env: PmiEnv,
    pub pgid: i32,
    pub with_stdin: bool,
}

struct Queued {
    task: SpawnTask,
    token: u64,
}

/// Answers taken in one turn of the loop at most, so that a burst of starts
/// still lets the loop's other work in between.
const ANSWERS_PER_TURN: usize = 64;

/// An answer's fixed part: token, pid, pgid, errno (0: started), flags; an
/// error's message follows.
const HEAD: usize = 8 + 4 + 4 + 4 + 1;
const HAS_PMI: u8 = 1;
const HAS_STDIN: u8 = 2;
/// Room for an error's message (longer ones are cut).
const MAX_ANSWER: usize = 1024;

/// Threads that start processes, up to one per CPU, so that several children
/// exec at once (with `CLONE_VFORK` the starting thread waits for its child's
/// exec); each starts when a start finds every thread there busy, so a node
/// that never starts more than one process at a time has one (a thread is a
/// stack, a malloc arena and a private fd table: about a tenth of the CPU
/// of a one-rank `dpm run`, issue 37). They live as long as the daemon: `PR_SET_PDEATHSIG` fires when the
/// *thread* that started a child exits, not the process.
///
/// Each thread works in a private, nearly empty fd table
/// (`unshare(CLONE_FILES)`): a clone copies the caller's fd table and an exec
/// then closes its close-on-exec fds, so starting from the daemon's table —
/// four fds per running rank — made starting N ranks cost O(N²) (1024 ranks:
/// +0.23 s). The thread creates a child's socket and pipes in its own table
/// and passes the parent's ends to the daemon with `SCM_RIGHTS`.
///
/// Submitting never waits; the answers come on [`SpawnAnswers`].
pub struct Spawner {
    queue: mpsc::Sender<Queued>,
    /// The threads' end of the answer socket, in the daemon's table: for
    /// answering a start no thread will take, and each new thread's copy.
    loopback: OwnedFd,
    /// Set when the daemon stops: the threads start nothing more.
    stopping: Arc<AtomicBool>,
    /// The queue's end the threads share.
    rx: Arc<Mutex<mpsc::Receiver<Queued>>>,
    /// Starts submitted and not yet answered.
    in_flight: Arc<AtomicUsize>,
    /// Threads started so far, at most one per CPU: one more whenever a
    /// start is submitted while every thread has one (a node that starts
    /// one process at a time has one thread; one that starts none, none).
    threads: AtomicUsize,
    /// The CPUs, learned when a second thread might start (std reads the
    /// cgroup's CPU quota for it).
    max_threads: std::sync::OnceLock<usize>,
    /// The span the threads log in (the node's).
    span: tracing::Span,
}

/// The daemon's end of the answer socket (kept out of the node's state, so
/// that the loop can wait on it while the node is borrowed elsewhere).
pub struct SpawnAnswers {
    socket: AsyncFd<OwnedFd>,
}

impl Spawner {
    /// The spawner, with no thread yet (they start with the starts that
    /// need them). Needs a tokio reactor (for [`SpawnAnswers`]).
    pub fn new() -> io::Result<(Spawner, SpawnAnswers)> {
        use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
        let (ours, theirs) = socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK)?;
        // Only our end reads without blocking: a thread waits when the
        // socket is full (the loop is behind), which bounds what is in flight.
        nix::fcntl::fcntl(theirs.as_raw_fd(), nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty()))?;
        let (queue, rx) = mpsc::channel::<Queued>();
        // SAFETY: the OwnedFd is moved into the AsyncFd and stays open while it lives.
        let socket = unsafe { AsyncFd::register_with_interest(ours, tokio::io::Interest::READABLE) }?;
        let spawner = Spawner {
            queue,
            loopback: theirs,
            stopping: Arc::new(AtomicBool::new(false)),
            rx: Arc::new(Mutex::new(rx)),
            in_flight: Arc::new(AtomicUsize::new(0)),
            threads: AtomicUsize::new(0),
            max_threads: std::sync::OnceLock::new(),
            // The threads log in the node's span.
            span: tracing::Span::current(),
        };
        Ok((spawner, SpawnAnswers { socket }))
    }

    /// Queue a start; its answer (with `token`) comes on [`SpawnAnswers`].
    pub fn submit(&self, token: u64, task: SpawnTask) {
        let busy = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        let threads = self.threads.load(Ordering::SeqCst);
        let max_threads = || *self.max_threads.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 8));
        if busy > threads && (threads == 0 || threads < max_threads()) {
            match self.start_thread(threads) {
                Ok(()) => {
                    self.threads.fetch_add(1, Ordering::SeqCst);
                }
                Err(e) if threads == 0 => {
                    self.in_flight.fetch_sub(1, Ordering::SeqCst);
                    let e = io::Error::new(e.kind(), format!("cannot start a spawner thread: {e}"));
                    send_answer(&self.loopback, token, Err(e), MsgFlags::MSG_DONTWAIT);
                    return;
                }
                // The threads there are take it in turn.
                Err(e) => tracing::warn!("cannot start spawner thread {threads}: {e}"),
            }
        }
        if let Err(mpsc::SendError(q)) = self.queue.send(Queued { task, token }) {
            // Never waits: the loop that would empty the socket is this one.
            send_answer(&self.loopback, q.token, Err(io::Error::other("the spawner threads are gone")), MsgFlags::MSG_DONTWAIT);
        }
    }

    fn start_thread(&self, index: usize) -> io::Result<()> {
        let socket = self.loopback.try_clone()?;
        let (rx, span, stopping, in_flight) = (self.rx.clone(), self.span.clone(), self.stopping.clone(), self.in_flight.clone());
        std::thread::Builder::new()
            .name(format!("dpm-spawn-{index}"))
            .spawn(move || span.in_scope(|| spawner_thread(index, socket, rx, &stopping, &in_flight)))?;
        Ok(())
    }
}

impl Drop for Spawner {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
    }
}

impl SpawnAnswers {
    /// Wait for answers, then take those there are (up to
    /// [`ANSWERS_PER_TURN`]): each start's token and process, its fds taken
    /// over, or why it could not start.
    pub async fn take(&self) -> Vec<(u64, io::Result<Started>)> {
        let mut out = Vec::new();
        loop {
            let Ok(mut guard) = self.socket.readable().await else { return out };
            while out.len() < ANSWERS_PER_TURN {
                match guard.try_io(|s| receive(s.get_ref())) {
                    Ok(Ok(answer)) => out.push(answer),
                    Ok(Err(e)) => {
                        tracing::error!("the spawner threads' socket failed: {e}");
                        return out;
                    }
                    Err(_would_block) => break,
                }
            }
            if !out.is_empty() {
                return out;
            }
        }
    }
}

/// Read one answer; `WouldBlock` when there is none.
fn receive(socket: &OwnedFd) -> io::Result<(u64, io::Result<Started>)> {
    let mut buf = [0u8; MAX_ANSWER];
    let mut iov = [std::io::IoSliceMut::new(&mut buf)];
    let mut space = nix::cmsg_space!([RawFd; 5]);
    let msg = recvmsg::<()>(socket.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC | MsgFlags::MSG_DONTWAIT)?;
    let len = msg.bytes;
    let mut fds: Vec<OwnedFd> = Vec::new();
    // The kernel truncates the control message (MSG_CTRUNC, which nix
    // reports as ENOBUFS) when the daemon's fd table is full: say so.
    let cmsgs = msg.cmsgs().map_err(|e| if e == nix::errno::Errno::ENOBUFS { io::Error::from_raw_os_error(libc::EMFILE) } else { e.into() });
    let truncated = match cmsgs {
        Ok(cmsgs) => {
            for c in cmsgs {
                if let ControlMessageOwned::ScmRights(list) = c {
                    // SAFETY: the kernel just installed these fds for us.
                    fds.extend(list.into_iter().map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }));
                }
            }
            None
        }
        Err(e) => Some(e),
    };
    if len < HEAD {
        return Err(io::Error::other(format!("a spawner thread's answer of {len} bytes")));
    }
    let token = u64::from_le_bytes(buf[0..8].try_into().expect("8 bytes"));
    let int = |at: usize| i32::from_le_bytes(buf[at..at + 4].try_into().expect("4 bytes"));
    let (pid, pgid, errno, flags) = (int(8), int(12), int(16), buf[20]);
    if errno != 0 || len > HEAD {
        let message = String::from_utf8_lossy(&buf[HEAD..len]).into_owned();
        let error = if message.is_empty() { io::Error::from_raw_os_error(errno) } else { io::Error::other(message) };
        return Ok((token, Err(error)));
    }
    if let Some(e) = truncated {
        return Ok((token, Err(e)));
    }
    let (pmi, stdin) = (flags & HAS_PMI != 0, flags & HAS_STDIN != 0);
    let expected = 3 + usize::from(pmi) + usize::from(stdin);
    if fds.len() != expected {
        return Ok((token, Err(io::Error::other(format!("spawner thread passed {} fds, expected {expected}", fds.len())))));
    }
    // pidfd, stdout, stderr, then the PMI socket and stdin when there are.
    let mut fds = fds.into_iter();
    let mut next = || fds.next().expect("counted");
    let (pidfd, stdout, stderr) = (next(), next(), next());
    let pmi = pmi.then(&mut next);
    let stdin = stdin.then(&mut next);
    Ok((token, Ok(Started { pid, pgid, pidfd, pmi, stdin, stdout, stderr })))
}

/// Send one answer: a started process's fds go with it (our copies close
/// here). An error without an errno travels as its message.
fn send_answer(socket: &OwnedFd, token: u64, result: io::Result<Started>, flags: MsgFlags) {
    let mut head = [0u8; MAX_ANSWER];
    head[0..8].copy_from_slice(&token.to_le_bytes());
    let (len, fds) = match &result {
        Ok(s) => {
            head[8..12].copy_from_slice(&s.pid.to_le_bytes());
            head[12..16].copy_from_slice(&s.pgid.to_le_bytes());
            head[20] = if s.pmi.is_some() { HAS_PMI } else { 0 } | if s.stdin.is_some() { HAS_STDIN } else { 0 };
            let mut fds = vec![s.pidfd.as_raw_fd(), s.stdout.as_raw_fd(), s.stderr.as_raw_fd()];
            fds.extend(s.pmi.as_ref().map(|f| f.as_raw_fd()));
            fds.extend(s.stdin.as_ref().map(|f| f.as_raw_fd()));
            (HEAD, fds)
        }
        Err(e) => {
            let errno = e.raw_os_error().unwrap_or(0);
            head[16..20].copy_from_slice(&errno.to_le_bytes());
            let message = match errno {
                0 => Some(e.to_string()).filter(|m| !m.is_empty()).unwrap_or_else(|| "the start failed".into()),
                _ => String::new(),
            };
            let message = &message.as_bytes()[..message.len().min(MAX_ANSWER - HEAD)];
            head[HEAD..HEAD + message.len()].copy_from_slice(message);
            (HEAD + message.len(), Vec::new())
        }
    };
    let iov = [std::io::IoSlice::new(&head[..len])];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &[ControlMessage::ScmRights(&fds)] };
    match sendmsg::<()>(socket.as_raw_fd(), &iov, cmsgs, flags, None) {
        Ok(_) => {}
        // The fds could not go (say, too many in flight): answer without them.
        Err(e) if !fds.is_empty() => {
            let pid = result.as_ref().map_or(0, |s| s.pid);
            tracing::warn!(pid, "cannot pass a started process's fds to the daemon: {e}");
            send_answer(socket, token, Err(e.into()), flags);
        }
        Err(e) => tracing::error!("cannot answer a start: {e}"), // the daemon is gone
    }
}

fn spawner_thread(index: usize, socket: OwnedFd, rx: Arc<Mutex<mpsc::Receiver<Queued>>>, stopping: &AtomicBool, in_flight: &AtomicUsize) {
    // No signal is handled here: the process's handlers (tokio's) write to
    // an fd of the daemon's table, which this thread's private table lacks.
    // A Ctrl-Z or Ctrl-C delivered to this thread was lost (a one-node `dpm
    // run`, whose node runs in the launcher, ignored SIGTSTP about half the
    // time); blocked here, the kernel gives it to another thread.
    if let Err(e) = crate::spawn::block_signals_here() {
        tracing::warn!("spawner thread {index}: cannot block signals: {e}");
    }
    // A private fd table holding only the standard streams and our socket.
    match nix::sched::unshare(nix::sched::CloneFlags::CLONE_FILES) {
        Ok(()) => {
            let keep = socket.as_raw_fd() as libc::c_uint;
            // SAFETY: close_range (which nix does not wrap) closes fds of this
            // thread's own, just unshared table; nothing on this thread holds
            // any of them (the OwnedFds they belong to live in the daemon's table).
            unsafe {
                if keep > 3 {
                    libc::syscall(libc::SYS_close_range, 3u32, keep - 1, 0u32);
                }
                libc::syscall(libc::SYS_close_range, keep + 1, u32::MAX, 0u32);
            }
        }
        Err(e) => tracing::warn!("spawner thread {index}: cannot use a private fd table: {e}"),
    }
    // What a batch of starts shares (the signals the daemon ignores, its
    // pid), learned again for each: when this thread finds the queue
    // empty, the batch is over.
    let mut batch = None;
    loop {
        let next = rx.lock().map(|r| {
            r.try_recv().or_else(|_| {
                batch = None;
                r.recv()
            })
        });
        let Ok(Ok(q)) = next else { return }; // the daemon is gone
        if stopping.load(Ordering::SeqCst) {
            return; // nobody would watch what starts now
        }
        let batch = *batch.get_or_insert_with(Batch::now);
        let answer = start_with(&q.task, batch);
        in_flight.fetch_sub(1, Ordering::SeqCst);
        send_answer(&socket, q.token, answer, MsgFlags::empty());
    }
}

/// Start one process on the calling thread (a spawner thread, or the node's
/// own for a small spawn: [`crate::node::StartBy`]), which sleeps until the
/// child has exec'd or failed.
pub fn start(t: &SpawnTask) -> io::Result<Started> {
    start_with(t, Batch::now())
}

/// [`start`], with what its batch of starts learned once ([`Batch::now`]).
pub fn start_with(t: &SpawnTask, batch: Batch) -> io::Result<Started> {
    match spawn_proc(&t.app, &t.env, t.pgid, t.with_stdin, batch) {
        // The job's group vanishes when its leader exits early: start a new one.
        Err(e) if t.pgid != 0 && e.raw_os_error() == Some(libc::EPERM) => spawn_proc(&t.app, &t.env, 0, t.with_stdin, batch),
        other => other,
    }
}
