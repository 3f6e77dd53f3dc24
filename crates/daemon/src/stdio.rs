//! The ends of a `dpm daemon`'s link when it is the process's stdin and
//! stdout (started by fork, ssh or srun).
//!
//! `tokio::io::stdin()`/`stdout()` do every read and write on tokio's
//! blocking thread pool: each frame costs a hand-off to another thread and
//! back (futex wake-ups, context switches). With many small KVS messages per
//! fence that was a quarter of all CPU time in a 1,024-process run on 64
//! virtual nodes (`bench/pmi`). When stdin and stdout are pipes — they are
//! for fork, and for ssh and srun as far as dpm can see — they are made
//! non-blocking and driven by the runtime's reactor instead, and reads are
//! buffered (a burst of frames is one `read`). Anything else (a terminal, a
//! socket, a file) keeps tokio's blocking stdio.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileTypeExt;
use std::pin::Pin;

use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::net::unix::pipe;

/// Read buffer of the link: a fence delta of a large job spans several reads
/// anyway; this takes a burst of small KVS frames in one.
const READ_BUFFER: usize = 64 * 1024;

/// One end of the link, whatever drives it.
pub type Reader = Pin<Box<dyn AsyncRead>>;
pub type Writer = Pin<Box<dyn AsyncWrite>>;

/// The link's reading and writing ends, from stdin and stdout.
pub fn link() -> (Reader, Writer) {
    let reader: Pin<Box<dyn AsyncRead>> = match stdin_pipe() {
        Some(r) => Box::pin(BufReader::with_capacity(READ_BUFFER, r)),
        None => Box::pin(tokio::io::stdin()),
    };
    let writer: Pin<Box<dyn AsyncWrite>> = match stdout_pipe() {
        Some(w) => Box::pin(w),
        None => Box::pin(tokio::io::stdout()),
    };
    (reader, writer)
}

/// A duplicate of fd `fd` if it is a pipe (the original stays open, so
/// nothing else in the process finds 0 or 1 reused by another file).
fn dup_if_pipe(fd: BorrowedFd<'_>) -> Option<OwnedFd> {
    let file = std::fs::File::from(fd.try_clone_to_owned().ok()?);
    file.metadata().ok()?.file_type().is_fifo().then(|| file.into())
}

fn stdin_pipe() -> Option<pipe::Receiver> {
    let fd = dup_if_pipe(std::io::stdin().as_fd())?;
    // Sets O_NONBLOCK on the pipe (shared with fd 0, which nothing else reads).
    pipe::Receiver::from_owned_fd(fd).ok()
}

fn stdout_pipe() -> Option<pipe::Sender> {
    let fd = dup_if_pipe(std::io::stdout().as_fd())?;
    pipe::Sender::from_owned_fd(fd).ok()
}
