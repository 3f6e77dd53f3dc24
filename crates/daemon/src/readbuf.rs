//! The node's reads of PMI sockets and output pipes: one buffer per thread,
//! and one `read(2)` per readiness.
//!
//! Why one buffer: each connection and each output pipe once owned a
//! 16 KiB buffer of its own, zeroed when its task started. With every rank
//! of a job alive at once (a PMI exchange: all must reach the barrier) that
//! is 48 KiB of fresh memory per rank, and the page faults of zeroing it
//! were 16 % of the node thread's CPU at n = 256 (`perf record`,
//! docs/benchmarks.md "PMI engine cost per request"). A read is synchronous
//! once the fd is ready, and what it read is handed on (or copied) before
//! the task yields, so all of a thread's reads can share one buffer.

use std::cell::Cell;
use std::io::{self, ErrorKind};
use std::os::fd::RawFd;

/// The most one read takes.
pub const READ_SIZE: usize = 16 * 1024;

thread_local! {
    static BUFFER: Cell<Option<Box<[u8]>>> = const { Cell::new(None) };
}

/// Run `f` with this thread's read buffer ([`READ_SIZE`] bytes). Reentrant:
/// a call inside `f` gets a buffer of its own.
pub fn with_buffer<T>(f: impl FnOnce(&mut [u8]) -> T) -> T {
    let mut buf = BUFFER.take().unwrap_or_else(|| vec![0u8; READ_SIZE].into_boxed_slice());
    let out = f(&mut buf);
    BUFFER.set(Some(buf));
    out
}

/// One `read(2)` of `fd` into `buf`, for a tokio object's `try_io`. A read
/// that does not fill `buf` took everything the fd held: it returns
/// `WouldBlock`, so that `try_io` clears the readiness there and then (as
/// tokio's own `AsyncRead` does on epoll), and leaves the count in `short`.
/// The task then sleeps until more arrives instead of reading again only to
/// be told `WouldBlock`: one read per request or write, not two. (Data that
/// arrives after the read raises a new epoll event, which sets the readiness
/// again: tokio clears only the readiness the read was made under.)
pub fn read_drained(fd: RawFd, buf: &mut [u8], short: &mut Option<usize>) -> io::Result<usize> {
    // SAFETY: read(2) into `buf`, valid for `buf.len()` bytes, on an fd the
    // caller's tokio object owns and keeps open for the call.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    match n {
        n if n < 0 => Err(io::Error::last_os_error()),
        n if n > 0 && (n as usize) < buf.len() => {
            *short = Some(n as usize);
            Err(ErrorKind::WouldBlock.into())
        }
        n => Ok(n as usize),
    }
}

/// What [`read_drained`] under `try_io` read: the short count it left, or
/// `try_io`'s own result.
pub fn outcome(read: io::Result<usize>, short: Option<usize>) -> io::Result<usize> {
    match short {
        Some(n) => Ok(n),
        None => read,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_short_read_reports_its_count_as_would_block_and_a_full_one_as_read() {
        let (r, w) = std::os::unix::net::UnixStream::pair().unwrap();
        r.set_nonblocking(true).unwrap();
        (&w).write_all(b"cmd=init\n").unwrap();
        let mut buf = [0u8; 64];
        let mut short = None;
        let read = read_drained(r.as_raw_fd(), &mut buf, &mut short);
        assert_eq!(read.unwrap_err().kind(), ErrorKind::WouldBlock);
        assert_eq!(outcome(Err(ErrorKind::WouldBlock.into()), short).unwrap(), 9);
        assert_eq!(&buf[..9], b"cmd=init\n");
        (&w).write_all(&[b'x'; 8]).unwrap();
        let mut small = [0u8; 8];
        let mut short = None;
        assert_eq!(read_drained(r.as_raw_fd(), &mut small, &mut short).unwrap(), 8);
        assert_eq!(short, None);
        let empty = read_drained(r.as_raw_fd(), &mut small, &mut short);
        assert_eq!(empty.unwrap_err().kind(), ErrorKind::WouldBlock);
        assert_eq!(short, None);
        drop(w);
        assert_eq!(read_drained(r.as_raw_fd(), &mut small, &mut short).unwrap(), 0);
    }

    #[test]
    fn the_buffer_is_reused_and_a_nested_call_gets_another() {
        let first = with_buffer(|b| {
            b[0] = 7;
            let inner = with_buffer(|c| {
                assert_eq!(c.len(), READ_SIZE);
                c.as_ptr() as usize
            });
            assert_ne!(inner, b.as_ptr() as usize);
            b.as_ptr() as usize
        });
        assert_eq!(with_buffer(|b| b.as_ptr() as usize), first);
    }
}
