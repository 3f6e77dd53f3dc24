//! The PMIx guard: dpm's own `accept` and `read` for the OpenPMIx server
//! library (`libpmix.so.2`) it loads, and the proof that they are in the
//! library's path.
//!
//! - [`security`]: who may connect — the kernel's word on every connection
//!   the library accepts, before it reads a byte (the only thing that keeps
//!   another local user out of an Open MPI job's PMIx server).
//! - [`quick_ack`]: prompt TCP acknowledgements on the connections handed
//!   to the library (a speed matter: ~40 ms per rank's finalize).
//!
//! [`install`] binds them to the library alone: after `dlopen`, the
//! library's own GOT slots for `accept` and `read` (found from its dynamic
//! relocations, `dpm_pmix::elf`/`dpm_pmix::got`) are pointed at them; the
//! rest of dpm keeps libc's. Before that it checks from the library's
//! imports that its listener can be covered at all: it must import
//! `accept` and must not import `accept4` (a connection accepted by
//! `accept4` would never be checked) — otherwise `--pmi pmix` is refused.
//! After the server started, [`Canary`] connects once to each of its
//! listening sockets and waits until [`security::accept`] has seen every
//! connection: a library that accepts some other way (a plugin's own
//! import, a raw system call) is refused at the first job, before any rank
//! runs. What [`install`] learns of the library's reads (`__read_chk`,
//! `readv`, `recvmsg` imported beside `read`) only bears on the speed part
//! and is logged at debug level, never refused: OpenPMIx 5.0.x itself
//! imports `recv` for the blocking read of a client's connect message.

pub mod quick_ack;
pub mod security;

pub use security::{check, logged, refused, Logged, Refusal, LOGGED_ONE_BY_ONE, MAX_REFUSED_PER_CALL};

use dpm_pmix::got::{GotError, Loaded};
use std::collections::BTreeSet;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::time::Duration;

/// Imports that accept a connection without going through `accept`.
pub const BYPASSING_ACCEPT: &[&str] = &["accept4"];
/// Imports that read without going through `read` (speed part only).
pub const OTHER_READS: &[&str] = &["__read_chk", "readv", "recvmsg", "recv", "recvfrom"];
/// How long the canary waits for the library's listener to accept it.
pub const CANARY_LIMIT: Duration = Duration::from_secs(10);

/// Why dpm will not run a PMIx server with this library.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    #[error("the PMIx library {0} accepts connections with accept4, which dpm cannot check: another local user could join the job; refusing --pmi pmix (docs/pmix.md, \"Security\")")]
    Accept4(PathBuf),
    #[error("the PMIx library {0} does not call accept itself (its listener is elsewhere, where dpm cannot check the connections); refusing --pmi pmix (docs/pmix.md, \"Security\")")]
    NoAccept(PathBuf),
    #[error("cannot bind dpm's connection check to the PMIx library: {0}; refusing --pmi pmix")]
    Got(#[from] GotError),
    #[error("the PMIx server has no listening TCP socket dpm can see; refusing --pmi pmix (docs/pmix.md, \"Security\")")]
    NoListener,
    #[error("dpm's connection check did not see its own test connection to the PMIx server's listener {0} within {1} s: the library accepts connections unchecked; refusing --pmi pmix (docs/pmix.md, \"Security\")")]
    CanaryUnseen(SocketAddr, u64),
    #[error("cannot open the PMIx guard's test connection to {0}: {1}")]
    Canary(SocketAddr, std::io::Error),
}

/// Checks the library holding `inside` (one of its functions) and binds
/// its `accept` and `read` to the guard's. Call after `dlopen` with
/// `RTLD_NOW`, before the library's server starts (no thread of it runs).
pub fn install(inside: usize) -> Result<(), GuardError> {
    let loaded = Loaded::containing(inside)?;
    check_imports(&loaded)?;
    // SAFETY: security::accept has accept(2)'s signature and contract, and
    // quick_ack::read has read(2)'s; the library's server is not started
    // (the caller's contract), so none of its threads calls through a slot
    // while it changes.
    unsafe {
        loaded.bind("accept", security::accept as *const () as usize)?;
        loaded.bind("read", quick_ack::read as *const () as usize)?;
    }
    tracing::debug!(library = %loaded.path.display(), "the PMIx guard is bound to the library's accept and read");
    Ok(())
}

/// The import check alone (see the module documentation).
pub fn check_imports(loaded: &Loaded) -> Result<(), GuardError> {
    let lib = &loaded.library;
    if BYPASSING_ACCEPT.iter().any(|name| lib.imports(name)) {
        return Err(GuardError::Accept4(loaded.path.clone()));
    }
    if !lib.imports("accept") {
        return Err(GuardError::NoAccept(loaded.path.clone()));
    }
    let others: Vec<&str> = OTHER_READS.iter().copied().filter(|name| lib.imports(name)).collect();
    if !lib.imports("read") || !others.is_empty() {
        tracing::debug!(library = %loaded.path.display(), read = lib.imports("read"), ?others, "the library also reads without read(2): the quick ACK may not follow every message");
    }
    Ok(())
}

/// The sockets open before the server starts, to tell its listeners by.
pub struct Canary {
    before: BTreeSet<(RawFd, u64)>,
}

/// The open descriptors with their inodes (a socket's identity: a number
/// reused for a new socket is told apart). The listing's own descriptor is
/// closed when it is looked at, so it drops out.
fn open_fds() -> BTreeSet<(RawFd, u64)> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return BTreeSet::new() };
    let fds: Vec<RawFd> = dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect();
    fds.into_iter().filter_map(|fd| Some((fd, nix::sys::stat::fstat(fd).ok()?.st_ino))).collect()
}

/// The address a listening TCP socket `fd` can be reached at, if it is one.
fn listening_at(fd: RawFd) -> Option<SocketAddr> {
    use nix::sys::socket::{getsockname, getsockopt, sockopt, SockaddrLike, SockaddrStorage};
    use std::os::fd::BorrowedFd;
    // SAFETY: fd was listed open in /proc/self/fd just now; borrowed for two
    // queries that fail harmlessly if it was closed (or reused) since.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    if !getsockopt(&borrowed, sockopt::AcceptConn).ok()? {
        return None;
    }
    let local: SockaddrStorage = getsockname(fd).ok()?;
    let _ = local.family()?;
    let addr = if let Some(v4) = local.as_sockaddr_in() {
        let ip = if v4.ip().is_unspecified() { Ipv4Addr::LOCALHOST } else { v4.ip() };
        SocketAddr::from((ip, v4.port()))
    } else {
        let v6 = local.as_sockaddr_in6()?;
        let ip = if v6.ip().is_unspecified() { Ipv6Addr::LOCALHOST } else { v6.ip() };
        SocketAddr::from((ip, v6.port()))
    };
    Some(addr)
}

impl Canary {
    /// Notes the open descriptors: call just before the server starts.
    pub fn before_server() -> Canary {
        Canary { before: open_fds() }
    }

    /// Connects once to each TCP listener opened since
    /// [`Canary::before_server`] and waits until the guard's `accept` has
    /// seen every connection (at most [`CANARY_LIMIT`]).
    pub fn prove(self) -> Result<(), GuardError> {
        self.prove_within(CANARY_LIMIT)
    }

    fn prove_within(self, limit: Duration) -> Result<(), GuardError> {
        let listeners = self.new_listeners();
        if listeners.is_empty() {
            return Err(GuardError::NoListener);
        }
        prove(&listeners, limit)
    }

    /// The TCP listeners opened since [`Canary::before_server`].
    fn new_listeners(&self) -> Vec<SocketAddr> {
        open_fds().difference(&self.before).filter_map(|&(fd, _)| listening_at(fd)).collect()
    }
}

/// Connects once to each of `listeners` and waits until the guard's
/// `accept` has seen every connection, at most `limit`.
fn prove(listeners: &[SocketAddr], limit: Duration) -> Result<(), GuardError> {
    {
        let mut sockets = Vec::new();
        let mut ports = Vec::new();
        for &to in listeners {
            let (socket, port) = canary_socket(to).map_err(|e| GuardError::Canary(to, e))?;
            ports.push((port, to));
            sockets.push(socket);
        }
        security::expect_canary(&ports.iter().map(|p| p.0).collect::<Vec<_>>());
        for (socket, &to) in sockets.iter().zip(listeners) {
            use std::os::fd::AsRawFd;
            if let Err(e) = nix::sys::socket::connect(socket.as_raw_fd(), &nix::sys::socket::SockaddrStorage::from(to)) {
                security::canary_seen(Duration::ZERO);
                return Err(GuardError::Canary(to, e.into()));
            }
        }
        let unseen = security::canary_seen(limit);
        if let Some(&(_, to)) = unseen.first().and_then(|port| ports.iter().find(|p| p.0 == *port)) {
            return Err(GuardError::CanaryUnseen(to, limit.as_secs()));
        }
        tracing::debug!(?listeners, "the PMIx guard saw its test connection to each listener");
        Ok(())
    }
}

/// A TCP socket bound to a port of its own (the canary's mark), not yet
/// connected.
fn canary_socket(to: SocketAddr) -> std::io::Result<(std::os::fd::OwnedFd, u16)> {
    use nix::sys::socket::{bind, getsockname, socket, AddressFamily, SockFlag, SockType, SockaddrIn, SockaddrIn6, SockaddrStorage};
    use std::os::fd::AsRawFd;
    let fd = match to {
        SocketAddr::V4(_) => {
            let fd = socket(AddressFamily::Inet, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
            bind(fd.as_raw_fd(), &SockaddrIn::new(0, 0, 0, 0, 0))?;
            fd
        }
        SocketAddr::V6(_) => {
            let fd = socket(AddressFamily::Inet6, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
            bind(fd.as_raw_fd(), &SockaddrIn6::from(std::net::SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, 0, 0, 0)))?;
            fd
        }
    };
    let local: SockaddrStorage = getsockname(fd.as_raw_fd())?;
    let port = local.as_sockaddr_in().map(|a| a.port()).or_else(|| local.as_sockaddr_in6().map(|a| a.port())).unwrap_or(0);
    Ok((fd, port))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    /// Loads a library built from `source` with `cc`; returns the address of its `take`.
    fn load(name: &str, source: &str) -> unsafe extern "C" fn(libc::c_int) -> libc::c_int {
        let dir = std::env::temp_dir().join(format!("dpm-guard-so.{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (src, so) = (dir.join(format!("{name}.c")), dir.join(format!("{name}.so")));
        std::fs::write(&src, source).unwrap();
        let out = std::process::Command::new("cc").args(["-shared", "-fPIC", "-o"]).arg(&so).arg(&src).output().expect("cc (scripts/setup.sh installs it)");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        // SAFETY: a test library with no constructors; RTLD_NOW binds its slots now; never closed.
        let lib = unsafe { libloading::os::unix::Library::open(Some(&so), libc::RTLD_NOW | libc::RTLD_LOCAL) }.unwrap();
        // SAFETY: take's C signature.
        let take = *unsafe { lib.get::<unsafe extern "C" fn(libc::c_int) -> libc::c_int>(b"take\0") }.unwrap();
        std::mem::forget(lib);
        take
    }

    #[test]
    fn a_library_accepting_with_accept4_is_refused() {
        let take = load("g_accept4", "#define _GNU_SOURCE\n#include <sys/socket.h>\nint take(int fd) { return accept4(fd, 0, 0, 0); }\n");
        let err = install(take as *const () as usize).unwrap_err();
        assert!(matches!(err, GuardError::Accept4(_)), "{err}");
        assert!(err.to_string().contains("accepts connections with accept4"), "{err}");
    }

    #[test]
    fn a_library_that_does_not_call_accept_is_refused() {
        let take = load("g_none", "#include <unistd.h>\nint take(int fd) { char b; return (int)read(fd, &b, 1); }\n");
        let err = install(take as *const () as usize).unwrap_err();
        assert!(matches!(err, GuardError::NoAccept(_)), "{err}");
    }

    #[test]
    fn a_library_calling_accept_reaches_the_guard_and_the_process_keeps_libcs() {
        let take = load("g_accept", "#include <sys/socket.h>\n#include <unistd.h>\nint take(int fd) { char b; int s = accept(fd, 0, 0); if (s >= 0) (void)read(s, &b, 0); return s; }\n");
        install(take as *const () as usize).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        // SAFETY: take accepts on a listening socket.
        let sd = unsafe { take(listener.as_raw_fd()) };
        assert!(sd >= 0, "{}", std::io::Error::last_os_error());
        // Only the guard's accept sets TCP_NODELAY and tracks the fd.
        // SAFETY: sd is the socket just accepted, owned from here.
        let server = unsafe { <TcpStream as std::os::fd::FromRawFd>::from_raw_fd(sd) };
        assert!(server.nodelay().unwrap() && quick_ack::marked(sd), "accepted through the guard");
        assert_eq!(server.peer_addr().unwrap(), client.local_addr().unwrap());
        // dpm's own accept (libc's, through std) is not the guard's.
        let _second = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (plain, _) = listener.accept().unwrap();
        assert!(!plain.nodelay().unwrap(), "std's accept is libc's: no TCP_NODELAY");
    }

    #[test]
    fn the_canary_passes_a_listener_accepting_through_the_guard_and_fails_one_that_does_not() {
        let _one = security::tests::CANARY_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        // Through the guard: a thread accepting with security::accept.
        let canary = Canary::before_server();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let fd = listener.as_raw_fd();
        let taker = std::thread::spawn(move || loop {
            // SAFETY: a listening socket (blocking); NULL address.
            let sd = unsafe { security::accept(fd, std::ptr::null_mut(), std::ptr::null_mut()) };
            if sd >= 0 {
                // The stop connection (the canary never comes back from accept).
                // SAFETY: ours, closed once.
                unsafe { libc::close(sd) };
                return;
            }
        });
        let listeners = canary.new_listeners();
        assert!(listeners.contains(&listener.local_addr().unwrap()), "{listeners:?}");
        prove(&[listener.local_addr().unwrap()], Duration::from_secs(10)).unwrap();
        // Kept open until it is accepted: a closed one would be refused.
        let _stop = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        taker.join().unwrap();
        drop(listener);
        // Not through the guard: nobody calls its accept.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let err = prove(&[listener.local_addr().unwrap()], Duration::from_millis(300)).unwrap_err();
        assert!(matches!(err, GuardError::CanaryUnseen(at, _) if at == listener.local_addr().unwrap()), "{err}");
    }
}
