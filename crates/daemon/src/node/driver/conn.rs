//! The driver's PMI connections: each one's write side ([`Conn`]: the
//! replies the socket would not take yet), the task that reads it and
//! hands the bytes to the reactor, the flush of its outbox, and its
//! shutdown.

use std::cell::RefCell;
use std::io::{self, ErrorKind};
use std::os::fd::OwnedFd;
use std::rc::{Rc, Weak};

use tokio::net::UnixStream;
use tokio::sync::Notify;

use dpm_kvs::JobId;
use dpm_pmi::ConnId;

use super::{Io, Node};
use crate::readbuf;

/// One PMI connection's write side.
pub(super) struct Conn {
    pub(super) stream: Rc<UnixStream>,
    /// Reply bytes the socket would not take yet; the connection task flushes them.
    pub(super) outbox: Vec<u8>,
    /// Set while the connection task is writing out the outbox.
    pub(super) flushing: bool,
    /// Close once the outbox is out ([`NodeEffects::pmi_close`]).
    pub(super) closing: bool,
    pub(super) flush: Rc<Notify>,
}

/// The driver's side of a node: [`NodeEffects`] on real sockets and processes.
/// A PMI socket as a non-blocking tokio stream. (A TCP socket in `PMI_PORT`
/// mode works the same through this wrapper: only read and write are used.)
pub(super) fn nonblocking(job: JobId, fd: OwnedFd) -> Option<Rc<UnixStream>> {
    let stream = std::os::unix::net::UnixStream::from(fd);
    match stream.set_nonblocking(true) {
        Ok(()) => registered(job, stream),
        Err(e) => {
            tracing::error!(%job, "cannot serve a PMI connection: {e}");
            None
        }
    }
}

/// A PMI socket that is non-blocking already (a started process's:
/// [`spawn::Started`]) as a tokio stream.
pub(super) fn registered(job: JobId, stream: std::os::unix::net::UnixStream) -> Option<Rc<UnixStream>> {
    match UnixStream::from_std(stream) {
        Ok(s) => Some(Rc::new(s)),
        Err(e) => {
            tracing::error!(%job, "cannot serve a PMI connection: {e}");
            None
        }
    }
}

impl Io {
    /// Serve `stream` as PMI connection `conn`.
    pub(super) fn serve(&mut self, conn: ConnId, stream: Rc<UnixStream>) {
        let flush = Rc::new(Notify::new());
        serve_conn(self.me.clone(), conn, stream.clone(), flush.clone());
        self.conns.insert(conn, Conn { stream, outbox: Vec::new(), flushing: false, closing: false, flush });
    }
}

/// Serve one PMI connection: read, hand the bytes to the reactor (which
/// writes the replies), flush what the socket would not take.
fn serve_conn(me: Weak<RefCell<Node>>, conn: ConnId, stream: Rc<UnixStream>, flush: Rc<Notify>) {
    crate::spawn_local_here(async move {
        loop {
            // Flushing first: while replies wait for the client to read them,
            // its requests are not read either (back-pressure, as a pipe
            // gives), so a client that never reads holds at most one read's
            // replies here.
            tokio::select! {
                biased;
                _ = flush.notified() => flush_outbox(&me, conn, &stream).await,
                ready = stream.readable() => {
                    if ready.is_err() {
                        break;
                    }
                    // The thread's one read buffer: the bytes are handed
                    // on before this task yields.
                    let read: io::Result<Option<usize>> = readbuf::with_buffer(|buf| {
                        let n = read_once(&stream, buf)?;
                        if n > 0 {
                            let Some(node) = me.upgrade() else { return Ok(None) };
                            node.borrow_mut().with(|r, io| r.on_pmi_bytes(io, conn, &buf[..n]));
                        }
                        Ok(Some(n))
                    });
                    match read {
                        Ok(None) => return, // the node is gone
                        Ok(Some(0)) => break,
                        Ok(Some(_)) => {}
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                        Err(_) => break,
                    }
                }
            }
        }
        if let Some(node) = me.upgrade() {
            node.borrow_mut().with(|r, io| {
                io.conns.remove(&conn);
                r.on_pmi_closed(io, conn)
            });
        }
    });
}

/// One read of a PMI socket ([`readbuf::read_drained`]: a read that does
/// not fill `buf` clears the socket's readiness; one read per request).
fn read_once(stream: &UnixStream, buf: &mut [u8]) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    let fd = stream.as_raw_fd();
    let mut short = None;
    let read = stream.try_io(tokio::io::Interest::READABLE, || readbuf::read_drained(fd, buf, &mut short));
    readbuf::outcome(read, short)
}

/// Write out what the socket would not take at once (a client slow to read).
async fn flush_outbox(me: &Weak<RefCell<Node>>, conn: ConnId, stream: &UnixStream) {
    loop {
        let data = {
            let Some(node) = me.upgrade() else { return };
            let mut node = node.borrow_mut();
            let Some(c) = node.io.conns.get_mut(&conn) else { return };
            c.flushing = !c.outbox.is_empty();
            if !c.flushing && c.closing {
                shut(stream);
            }
            std::mem::take(&mut c.outbox)
        };
        if data.is_empty() {
            return;
        }
        let mut sent = 0;
        while sent < data.len() {
            if stream.writable().await.is_err() {
                return;
            }
            match stream.try_write(&data[sent..]) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(_) => return, // the client is gone
            }
        }
    }
}

/// Shut a PMI connection both ways: the client reads end of file after
/// what was written; the connection task reads it too and ends
/// (`NodeReactor::on_pmi_closed`).
pub(super) fn shut(stream: &UnixStream) {
    use std::os::fd::AsRawFd;
    // SAFETY: shutdown(2) on a socket fd this stream owns and keeps open;
    // no memory is passed.
    unsafe { libc::shutdown(stream.as_raw_fd(), libc::SHUT_RDWR) };
}
