//! The security part of the PMIx guard: who may connect to the PMIx
//! server library inside this process — only sockets of this process's own
//! effective uid, by the kernel's word.
//!
//! OpenPMIx's server listens on a loopback TCP port any local user can
//! reach, and its `native` security believes the uid a client *writes*
//! into its connect message (docs/pmix.md, "Security"). So a connection is
//! judged before the library reads a byte of it: libpmix's `accept` calls
//! are bound to [`accept`] ([`super::install`] writes its address into the
//! library's GOT slots for `accept`; the rest of the process keeps libc's).
//! It accepts through the `accept4` system call, asks the kernel who owns
//! the connecting socket ([`crate::peer`]: `NETLINK_SOCK_DIAG` for TCP,
//! `SO_PEERCRED` for a Unix socket), and closes a connection of any other
//! uid (or whose owner the kernel cannot name: a remote or already closed
//! socket) there; the library sees only the connections of the job's owner.
//!
//! The canary: while [`expect_canary`] has armed it, a connection from one
//! of the given ports is dpm's own proof that the library's
//! listener calls this function; it is counted ([`canary_seen`]) and closed
//! here, never handed to the library.
//!
//! Bounds: a call refuses at most [`MAX_REFUSED_PER_CALL`] connections,
//! then answers `EAGAIN` (the library's listener is non-blocking and
//! level-triggered: it calls again), so a flood cannot hold the library's
//! thread; the first [`LOGGED_ONE_BY_ONE`] refusals are logged one by one,
//! then one summary line at every power of ten.

use std::net::SocketAddr;
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use libc::{c_int, sockaddr, socklen_t};

use super::quick_ack;
use crate::peer::PeerError;

/// Connections one call closes before it answers `EAGAIN`.
pub const MAX_REFUSED_PER_CALL: usize = 64;
/// Refusals logged one by one; later ones are counted.
pub const LOGGED_ONE_BY_ONE: u64 = 3;

static REFUSED: AtomicU64 = AtomicU64::new(0);

/// How many connections were refused so far in this process.
pub fn refused() -> u64 {
    REFUSED.load(Ordering::Relaxed)
}

/// Whether refusal number `n` (1-based) is logged, and how: one by one
/// first, then a summary at each power of ten.
#[derive(Debug, PartialEq, Eq)]
pub enum Logged {
    Each,
    Summary,
    Quiet,
}

pub fn logged(n: u64) -> Logged {
    if n <= LOGGED_ONE_BY_ONE {
        Logged::Each
    } else if is_power_of_ten(n) {
        Logged::Summary
    } else {
        Logged::Quiet
    }
}

fn is_power_of_ten(mut n: u64) -> bool {
    while n >= 10 && n.is_multiple_of(10) {
        n /= 10;
    }
    n == 1
}

/// Why a connection is refused.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error(transparent)]
    Peer(#[from] PeerError),
    #[error("a Unix-socket connection from uid {0}, not this process's uid {1}")]
    UnixUser(u32, u32),
    #[error("cannot read the connection's credentials: {0}")]
    Credentials(nix::Error),
    #[error("not a TCP or Unix connection")]
    Family,
}

/// The kernel's word on the connection `sd`: `Ok` only for our own uid.
pub fn check(sd: RawFd) -> Result<(), Refusal> {
    use nix::sys::socket::{getpeername, getsockname, getsockopt, sockopt, AddressFamily, SockaddrLike, SockaddrStorage};
    let local: SockaddrStorage = getsockname(sd).map_err(Refusal::Credentials)?;
    match local.family() {
        Some(AddressFamily::Unix) => {
            // SAFETY: sd is the open socket accept just returned, alive for this call.
            let fd = unsafe { BorrowedFd::borrow_raw(sd) };
            let cred = getsockopt(&fd, sockopt::PeerCredentials).map_err(Refusal::Credentials)?;
            let me = nix::unistd::geteuid().as_raw();
            if cred.uid() == me {
                Ok(())
            } else {
                Err(Refusal::UnixUser(cred.uid(), me))
            }
        }
        Some(AddressFamily::Inet | AddressFamily::Inet6) => {
            let peer: SockaddrStorage = getpeername(sd).map_err(Refusal::Credentials)?;
            let (Some(local), Some(peer)) = (socket_addr(&local), socket_addr(&peer)) else { return Err(Refusal::Family) };
            crate::peer::check_same_user(local, peer)?;
            Ok(())
        }
        _ => Err(Refusal::Family),
    }
}

fn socket_addr(a: &nix::sys::socket::SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = a.as_sockaddr_in() {
        return Some(SocketAddr::from((v4.ip(), v4.port())));
    }
    a.as_sockaddr_in6().map(|v6| SocketAddr::from((v6.ip(), v6.port())))
}

fn note_refused(why: &Refusal) {
    let n = REFUSED.fetch_add(1, Ordering::Relaxed) + 1;
    match logged(n) {
        Logged::Each => tracing::warn!("refused a PMIx connection: {why}"),
        Logged::Summary => tracing::warn!("refused {n} PMIx connections from other users so far (the first {LOGGED_ONE_BY_ONE} logged)"),
        Logged::Quiet => {}
    }
}

/// Canary connections expected: their local (client-side) ports.
static CANARY: Mutex<Vec<u16>> = Mutex::new(Vec::new());
static CANARY_SEEN: Condvar = Condvar::new();
/// Whether [`CANARY`] is worth a look (a lock only while one is expected).
static CANARY_ARMED: AtomicBool = AtomicBool::new(false);

/// Arms the canary: connections from these loopback ports are dpm's own.
pub(super) fn expect_canary(ports: &[u16]) {
    let mut expected = CANARY.lock().unwrap_or_else(|e| e.into_inner());
    expected.extend_from_slice(ports);
    CANARY_ARMED.store(true, Ordering::SeqCst);
}

/// Waits until every armed canary connection came through [`accept`], at
/// most `limit`; returns the ports not seen (disarmed either way).
pub(super) fn canary_seen(limit: Duration) -> Vec<u16> {
    let deadline = Instant::now() + limit;
    let mut expected = CANARY.lock().unwrap_or_else(|e| e.into_inner());
    while !expected.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        expected = CANARY_SEEN.wait_timeout(expected, left).unwrap_or_else(|e| e.into_inner()).0;
    }
    CANARY_ARMED.store(false, Ordering::SeqCst);
    std::mem::take(&mut *expected)
}

/// Whether `sd` is an armed canary connection (then it is counted).
fn is_canary(sd: RawFd) -> bool {
    if !CANARY_ARMED.load(Ordering::SeqCst) {
        return false;
    }
    use nix::sys::socket::{getpeername, SockaddrStorage};
    // Only the port is compared: a stranger's connection from a port of
    // that number on another address is closed as a canary would be —
    // never handed to the library.
    let Some(peer) = getpeername::<SockaddrStorage>(sd).ok().as_ref().and_then(socket_addr) else { return false };
    let mut expected = CANARY.lock().unwrap_or_else(|e| e.into_inner());
    let Some(at) = expected.iter().position(|&p| p == peer.port()) else { return false };
    expected.swap_remove(at);
    CANARY_SEEN.notify_all();
    true
}

/// `accept(2)` for libpmix (its GOT slots for `accept` point here; see the
/// module documentation): a connection is returned only when the kernel
/// says its socket is ours.
///
/// # Safety
/// The contract of `accept(2)`: `addr`/`len` are NULL or valid for writes
/// of `*len` bytes.
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    // SAFETY: len is NULL or valid (the caller's contract).
    let asked = if len.is_null() { 0 } else { unsafe { *len } };
    for _ in 0..MAX_REFUSED_PER_CALL {
        if !len.is_null() {
            // SAFETY: as above; restored for each new try.
            unsafe { *len = asked };
        }
        // SAFETY: the caller's arguments, passed on; accept4 with no flags is accept.
        let sd = unsafe { libc::syscall(libc::SYS_accept4, fd, addr, len, 0) } as c_int;
        if sd < 0 {
            return sd; // errno is the system call's
        }
        if is_canary(sd) {
            quick_ack::mark(sd, false);
            // SAFETY: sd is ours, just accepted, and handed to no one.
            unsafe { libc::close(sd) };
            continue;
        }
        match check(sd) {
            Ok(()) => {
                quick_ack::accepted(sd);
                return sd;
            }
            Err(why) => {
                quick_ack::mark(sd, false);
                // SAFETY: sd is ours, just accepted, and handed to no one.
                unsafe { libc::close(sd) };
                note_refused(&why);
            }
        }
    }
    nix::errno::Errno::EAGAIN.set();
    -1
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    #[test]
    fn refusals_are_logged_one_by_one_then_at_powers_of_ten() {
        let lines: Vec<u64> = (1..=1_000_000).filter(|&n| logged(n) != Logged::Quiet).collect();
        assert_eq!(lines, vec![1, 2, 3, 10, 100, 1_000, 10_000, 100_000, 1_000_000]);
        assert_eq!(logged(2), Logged::Each);
        assert_eq!(logged(100), Logged::Summary);
        assert_eq!(logged(20), Logged::Quiet);
    }

    #[test]
    fn our_own_connection_is_accepted_with_nodelay() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        // SAFETY: a listening socket; NULL address.
        let sd = unsafe { accept(listener.as_raw_fd(), std::ptr::null_mut(), std::ptr::null_mut()) };
        assert!(sd >= 0, "{}", std::io::Error::last_os_error());
        // SAFETY: sd is the socket just accepted, owned from here.
        let server = unsafe { <std::net::TcpStream as std::os::fd::FromRawFd>::from_raw_fd(sd) };
        assert_eq!(server.peer_addr().unwrap(), client.local_addr().unwrap());
        assert!(server.nodelay().unwrap(), "TCP_NODELAY on an accepted connection");
    }

    #[test]
    fn a_unix_connection_of_our_own_is_accepted() {
        let dir = std::env::temp_dir().join(format!("dpm-guard-test.{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let path = dir.join("s");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let _client = std::os::unix::net::UnixStream::connect(&path).unwrap();
        // SAFETY: a listening socket; NULL address.
        let sd = unsafe { accept(listener.as_raw_fd(), std::ptr::null_mut(), std::ptr::null_mut()) };
        assert!(sd >= 0, "{}", std::io::Error::last_os_error());
        // SAFETY: ours, closed once.
        unsafe { libc::close(sd) };
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// As user nobody (needs root): connects to 127.0.0.1:PORT, says it
    /// connected, then prints what the server sent before closing.
    const NOBODY: &str = "import socket,sys\ns=socket.create_connection(('127.0.0.1',int(sys.argv[1])))\nprint('connected',flush=True)\ns.settimeout(30)\nprint(repr(s.recv(64)))";

    #[test]
    fn another_users_connection_is_closed_unseen_and_counted() {
        use std::io::{BufRead, BufReader};
        if !dpm_test_support::root_to_act_as_another_user("another_users_connection_is_closed_unseen_and_counted") {
            return;
        }
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port().to_string();
        let mut nobody = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", NOBODY, &port])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("setpriv and python3");
        let mut lines = BufReader::new(nobody.stdout.take().unwrap()).lines();
        assert_eq!(lines.next().unwrap().unwrap(), "connected");
        let before = refused();
        // SAFETY: a listening socket; NULL address.
        let sd = unsafe { accept(listener.as_raw_fd(), std::ptr::null_mut(), std::ptr::null_mut()) };
        assert_eq!(sd, -1, "another user's connection was handed to the caller");
        assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::EAGAIN), "refused, then nothing else waiting");
        assert!(refused() > before);
        assert_eq!(lines.next().unwrap().unwrap(), "b''", "closed without a byte");
        assert!(nobody.wait().unwrap().success());
    }

    /// The canary is one per process: its tests take turns.
    pub(in crate::pmix_guard) static CANARY_TESTS: Mutex<()> = Mutex::new(());

    #[test]
    fn a_canary_connection_is_counted_and_closed_not_handed_on() {
        let _one = CANARY_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = socket.local_addr().unwrap().port();
        drop(socket);
        // A client socket bound to `port`, as the guard's canary makes one.
        let client =
            nix::sys::socket::socket(nix::sys::socket::AddressFamily::Inet, nix::sys::socket::SockType::Stream, nix::sys::socket::SockFlag::empty(), None)
                .unwrap();
        nix::sys::socket::bind(client.as_raw_fd(), &nix::sys::socket::SockaddrIn::new(127, 0, 0, 1, port)).unwrap();
        expect_canary(&[port]);
        let to = nix::sys::socket::SockaddrIn::from(match listener.local_addr().unwrap() {
            SocketAddr::V4(v4) => v4,
            SocketAddr::V6(_) => unreachable!(),
        });
        nix::sys::socket::connect(client.as_raw_fd(), &to).unwrap();
        // SAFETY: a listening socket; NULL address.
        let sd = unsafe { accept(listener.as_raw_fd(), std::ptr::null_mut(), std::ptr::null_mut()) };
        assert_eq!(sd, -1, "the canary is not handed to the caller");
        assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::EAGAIN));
        assert!(canary_seen(Duration::from_secs(5)).is_empty(), "seen");
        // Disarmed: an ordinary connection of ours is handed on again.
        // (A loopback connect returns once the connection is queued.)
        let _other = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        // SAFETY: as above.
        let sd = unsafe { accept(listener.as_raw_fd(), std::ptr::null_mut(), std::ptr::null_mut()) };
        assert!(sd >= 0, "{}", std::io::Error::last_os_error());
        // SAFETY: ours, closed once.
        unsafe { libc::close(sd) };
    }

    #[test]
    fn an_unseen_canary_is_reported_after_the_limit() {
        let _one = CANARY_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        expect_canary(&[1]);
        assert_eq!(canary_seen(Duration::from_millis(1)), vec![1]);
    }

    #[test]
    fn nothing_waiting_on_a_nonblocking_listener_is_eagain() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        // SAFETY: a listening socket; NULL address.
        let sd = unsafe { accept(listener.as_raw_fd(), std::ptr::null_mut(), std::ptr::null_mut()) };
        assert_eq!(sd, -1);
        assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::EAGAIN));
    }
}
