//! The TCP-ACK part of the PMIx guard: prompt acknowledgements on the
//! connections the guard handed to the library.
//!
//! Accepted TCP connections get `TCP_NODELAY` ([`accepted`], called by the
//! security part's `accept`), and every read that returns data on one of
//! them re-arms `TCP_QUICKACK` ([`read`], which libpmix's `read` calls are
//! bound to: [`super::install`]). A client's one-way message (Open MPI's
//! `MPI_Finalize` sends an event notification the server does not answer)
//! was otherwise acknowledged only by the delayed-ACK timer, and the
//! client's next message (`PMIx_Finalize`) waited for that ACK behind
//! Nagle's algorithm on the client's socket: ~40 ms in every rank's
//! finalize (docs/pmix.md, "Speed"). Nothing here decides who may connect.

use std::os::fd::{BorrowedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

use libc::{c_int, socklen_t};

/// File descriptors below this are tracked for [`read`]'s quick ACK.
const TRACKED_FDS: usize = 65_536;
/// One bit per fd: a connection the guard accepted for the library.
/// A bit outlives the library's `close` of its fd; a later socket of that
/// number then gets a harmless `TCP_QUICKACK` (an error on a non-TCP fd),
/// until the number is accepted again.
static ACCEPTED: [AtomicU64; TRACKED_FDS / 64] = [const { AtomicU64::new(0) }; TRACKED_FDS / 64];

pub(super) fn mark(fd: RawFd, accepted: bool) {
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

pub(super) fn marked(fd: c_int) -> bool {
    usize::try_from(fd).is_ok_and(|i| i < TRACKED_FDS && ACCEPTED[i / 64].load(Ordering::Relaxed) & (1 << (i % 64)) != 0)
}

/// A connection handed to the library: `TCP_NODELAY`, a quick ACK, tracked.
pub(super) fn accepted(sd: RawFd) {
    // SAFETY: sd is the open socket accept just returned, alive for this call.
    let fd = unsafe { BorrowedFd::borrow_raw(sd) };
    // Not TCP (a Unix socket): nothing to do, the error is ignored.
    let _ = nix::sys::socket::setsockopt(&fd, nix::sys::socket::sockopt::TcpNoDelay, &true);
    quick_ack(sd);
    mark(sd, true);
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

/// `read(2)` for libpmix (its GOT slots for `read` point here): the system
/// call, then, when it returned data on a connection the guard handed to
/// the library, `TCP_QUICKACK` again. Async-signal-safe (two system calls
/// and an atomic load).
///
/// # Safety
/// The contract of `read(2)`: `buf` is valid for writes of `n` bytes.
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    #[test]
    fn a_read_with_data_on_an_accepted_connection_rearms_the_quick_ack() {
        use std::io::Write;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        // SAFETY: a listening socket; NULL address.
        let sd = unsafe { super::super::security::accept(listener.as_raw_fd(), std::ptr::null_mut(), std::ptr::null_mut()) };
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
}
