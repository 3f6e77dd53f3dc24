//! Who may connect to the PMIx server library inside this process: only
//! sockets of this process's own effective uid, by the kernel's word.
//!
//! OpenPMIx's server (`dlopen`ed by [`super::pmix_host`]) listens on a
//! loopback TCP port any local user can reach, and its `native` security
//! believes the uid a client *writes* into its connect message: a stranger
//! with an `LD_PRELOAD` that makes `geteuid()` return the owner's uid could
//! join a job and `PMIx_Spawn` programs as its owner, and a refused
//! connection could wedge the library's progress thread (docs/pmix.md).
//! So the connection is judged before the library reads a byte of it: dpm
//! exports its own `accept` (the binary is linked with
//! `--export-dynamic-symbol=accept`, crates/dpm/build.rs), which the loader
//! binds the library's `accept` call to before libc's (the executable comes
//! first in the global scope). It accepts through the `accept4` system call,
//! asks the kernel who owns the connecting socket ([`crate::peer`]:
//! `NETLINK_SOCK_DIAG` for TCP, `SO_PEERCRED` for a Unix socket), and
//! closes a connection of any other uid (or whose owner the kernel cannot
//! name: a remote or already closed socket) there; the library sees only
//! the connections of the job's owner.
//!
//! Every `accept` in the process comes through here: dpm's own Rust code
//! accepts with `accept4` (std, tokio), so only the C libraries it loads —
//! in practice OpenPMIx's listener, OpenPMIx 5.0.x
//! `ptl_base_listener.c: connection_event_handler` — call `accept`. There
//! is no window between the library's `listen` and a check being armed.
//!
//! Bounds: a call refuses at most [`MAX_REFUSED_PER_CALL`] connections,
//! then answers `EAGAIN` (the library's listener is non-blocking and
//! level-triggered: it calls again), so a flood cannot hold the library's
//! thread; the first [`LOGGED_ONE_BY_ONE`] refusals are logged one by one,
//! then one summary line at every power of ten.
//!
//! Speed: accepted TCP connections get `TCP_NODELAY`, and every read that
//! returns data on one of them re-arms `TCP_QUICKACK` (dpm exports its own
//! `read` for that: [`read`]). A client's one-way message (Open MPI's
//! `MPI_Finalize` sends an event notification the server does not answer)
//! was otherwise acknowledged only by the delayed-ACK timer, and the
//! client's next message (`PMIx_Finalize`) waited for that ACK behind
//! Nagle's algorithm on the client's socket: ~40 ms in every rank's
//! finalize (docs/pmix.md, "Speed").

use std::net::SocketAddr;
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

use libc::{c_int, sockaddr, socklen_t};

use crate::peer::PeerError;

/// Connections one call closes before it answers `EAGAIN`.
pub const MAX_REFUSED_PER_CALL: usize = 64;
/// Refusals logged one by one; later ones are counted.
pub const LOGGED_ONE_BY_ONE: u64 = 3;

static REFUSED: AtomicU64 = AtomicU64::new(0);

/// File descriptors below this are tracked for [`read`]'s quick ACK.
const TRACKED_FDS: usize = 65_536;
/// One bit per fd: a connection this module accepted for the library.
/// A bit outlives the library's `close` of its fd; a later socket of that
/// number then gets a harmless `TCP_QUICKACK` (an error on a non-TCP fd),
/// until the number is accepted again here.
static ACCEPTED: [AtomicU64; TRACKED_FDS / 64] = [const { AtomicU64::new(0) }; TRACKED_FDS / 64];

fn mark(fd: RawFd, accepted: bool) {
    let Ok(i) = usize::try_from(fd) else { return };
    if i >= TRACKED_FDS {
        return;
    }
    let bit = 1u64 << (i % 64);
    if accepted {
        ACCEPTED[i / 64].fetch_or(bit, Ordering::Relaxed);
    } else {
        ACCEPTED[i / 64].fetch_and(!bit, Ordering::Relaxed);
    }
}

fn marked(fd: c_int) -> bool {
    usize::try_from(fd).is_ok_and(|i| i < TRACKED_FDS && ACCEPTED[i / 64].load(Ordering::Relaxed) & (1 << (i % 64)) != 0)
}

/// How many connections were refused so far in this process.
pub fn refused() -> u64 {
    REFUSED.load(Ordering::Relaxed)
}

/// Keeps the exported `accept` in the binary (it is called only by
/// libraries loaded at run time): call before loading one.
pub fn keep() {
    std::hint::black_box(accept as unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int);
    std::hint::black_box(read as unsafe extern "C" fn(c_int, *mut libc::c_void, libc::size_t) -> libc::ssize_t);
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

fn set_nodelay(sd: RawFd) {
    // SAFETY: sd is the open socket accept just returned, alive for this call.
    let fd = unsafe { BorrowedFd::borrow_raw(sd) };
    // Not TCP (a Unix socket): nothing to do, the error is ignored.
    let _ = nix::sys::socket::setsockopt(&fd, nix::sys::socket::sockopt::TcpNoDelay, &true);
}

/// `TCP_QUICKACK` on `fd`: acknowledge what arrives at once. The kernel
/// falls back to delayed ACKs once the connection looks interactive, so
/// [`read`] sets it again after each read.
fn quick_ack(fd: c_int) {
    let on: c_int = 1;
    // SAFETY: a plain setsockopt with a c_int option of the right size; an
    // fd that is not a TCP socket (any more) only makes it fail.
    unsafe { libc::setsockopt(fd, libc::IPPROTO_TCP, libc::TCP_QUICKACK, (&on as *const c_int).cast(), std::mem::size_of::<c_int>() as socklen_t) };
}

/// `read(2)` for the whole process (see the module documentation): the
/// system call, then, when it returned data on a connection [`accept`]
/// handed to the library, `TCP_QUICKACK` again. Async-signal-safe (two
/// system calls and an atomic load).
///
/// # Safety
/// The contract of `read(2)`: `buf` is valid for writes of `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut libc::c_void, n: libc::size_t) -> libc::ssize_t {
    // SAFETY: the caller's arguments, passed on unchanged.
    let got = unsafe { libc::syscall(libc::SYS_read, fd, buf, n) } as libc::ssize_t;
    if got > 0 && marked(fd) {
        let errno = nix::errno::Errno::last_raw();
        quick_ack(fd);
        nix::errno::Errno::set_raw(errno);
    }
    got
}

/// `accept(2)` for the libraries dpm loads (see the module documentation):
/// a connection is returned only when the kernel says its socket is ours.
///
/// # Safety
/// The contract of `accept(2)`: `addr`/`len` are NULL or valid for writes
/// of `*len` bytes.
#[no_mangle]
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
        match check(sd) {
            Ok(()) => {
                set_nodelay(sd);
                quick_ack(sd);
                mark(sd, true);
                return sd;
            }
            Err(why) => {
                mark(sd, false);
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
mod tests {
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
        keep();
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
    fn a_read_with_data_on_an_accepted_connection_rearms_the_quick_ack() {
        use std::io::Write;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        // SAFETY: a listening socket; NULL address.
        let sd = unsafe { accept(listener.as_raw_fd(), std::ptr::null_mut(), std::ptr::null_mut()) };
        assert!(sd >= 0 && marked(sd), "accepted and tracked");
        let quick = || {
            let (mut on, mut len): (c_int, socklen_t) = (0, std::mem::size_of::<c_int>() as socklen_t);
            // SAFETY: a c_int option read into a c_int of that size.
            let rc = unsafe { libc::getsockopt(sd, libc::IPPROTO_TCP, libc::TCP_QUICKACK, (&mut on as *mut c_int).cast(), &mut len) };
            assert_eq!(rc, 0);
            on
        };
        for round in 0..3u8 {
            client.write_all(&[round; 4]).unwrap();
            let mut buf = [0u8; 16];
            // SAFETY: buf is ours, 16 bytes.
            let got = unsafe { read(sd, buf.as_mut_ptr().cast(), buf.len()) };
            assert_eq!((got, &buf[..4]), (4, &[round; 4][..]));
            assert_eq!(quick(), 1, "quick ACKs after read {round}");
            // The server answers: the kernel sees an interactive connection.
            // SAFETY: 1 byte of ours.
            assert_eq!(unsafe { libc::write(sd, buf.as_ptr().cast(), 1) }, 1);
            let mut one = [0u8; 1];
            std::io::Read::read_exact(&mut client, &mut one).unwrap();
        }
        // SAFETY: ours, closed once.
        unsafe { libc::close(sd) };
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
        if nix::unistd::geteuid().as_raw() != 0 {
            eprintln!("SKIPPED: another_users_connection_is_closed_unseen_and_counted needs root to act as another user");
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
