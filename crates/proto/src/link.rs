//! The envelope of the daemon tree's links, and links typed by direction.
//!
//! Payloads ([`ToDaemon`], [`ToLauncher`]) say what the launcher and a node
//! tell each other; the envelope says how they travel:
//! - [`Down`] (parent → child): a payload addressed to a node
//!   ([`Down::To`]), passed on by next hop; the tree's description for a
//!   daemon that has children; heartbeats; shutdown.
//! - [`Up`] (child → parent): a payload from a node ([`Up::From`]), merged or
//!   passed on by each daemon on the way; a node's arrival ([`Up::Ready`]);
//!   the loss of a link below ([`Up::Lost`]), which no node sends about
//!   itself: the side that saw its link break reports it; heartbeats.
//!
//! [`FrameSender`] and [`FrameReceiver`] carry one message type each, so a
//! daemon's uplink (`FrameReceiver<_, Down>`, `FrameSender<_, Up>`) cannot
//! send a `Down`, and a parent's end of a child link cannot read one: a
//! message sent the wrong way is a type error.

use std::marker::PhantomData;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use dpm_kvs::NodeId;
use serde::{de::DeserializeOwned, Deserialize, Deserializer, Serialize, Serializer};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::frame::{read_frame, write_frame, FrameError};
use crate::tree::TreeSpec;
use crate::{ToDaemon, ToLauncher};

/// Parent → child.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Down {
    /// For the daemon of `node`: daemons on the way pass it down by next hop.
    To { node: NodeId, msg: ToDaemon },
    /// Sent once, right after the handshake, to a daemon that has children in
    /// the tree: every node of the run, and how to start daemons.
    Tree(TreeSpec),
    /// Sent on an idle link so that silence means a lost parent.
    Heartbeat,
    /// A heartbeat whose timer fired `late_ms` late: the parent's host is
    /// starved of CPU (its child gives its silence more time).
    Starved { late_ms: u32 },
    /// Stop: kill whatever is left and exit (children follow when their
    /// links close).
    Shutdown,
    /// The parent is about to stop (Ctrl-Z of `dpm run`): until
    /// [`Down::Resume`] its silence is no loss (a closed link still is).
    /// Only for the link it comes on: daemons further down keep hearing
    /// from their own, running parents.
    Suspend,
    /// The parent runs again: its silence is judged afresh from now.
    Resume,
    /// The path up changed: a daemon above was lost and this subtree
    /// re-attached to the launcher. What went up through the lost daemon
    /// may be lost with it: the daemon re-sends its ranks' exits (the
    /// launcher takes an exit it knows as a no-op) and forgets the output
    /// bytes not yet acknowledged (its output window reopens), and passes
    /// this on to its children.
    Resync,
}

/// Child → parent.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Up {
    /// From the daemon of `node`, passed up the tree.
    From { node: NodeId, msg: ToLauncher },
    /// The daemon of `node` is up; `host` is its node's name.
    Ready { node: NodeId, host: String },
    /// The link to the daemon of `node` broke (daemon killed, host lost,
    /// silent too long), or its subtree could not be started; reported by
    /// the side that saw it.
    Lost { node: NodeId, error: String },
    /// The daemon of `node` took its parent (the launcher, or the daemon
    /// above it) for lost — silent, or its process stopped — and ends its
    /// ranks: its last word up, read when the parent runs again (a
    /// launcher stopped with SIGSTOP learns that it was the one silent).
    ParentLost { node: NodeId, error: String },
    /// Sent on an idle link so that silence means a lost node.
    Heartbeat,
    /// A heartbeat whose timer fired `late_ms` late: the daemon's host is
    /// starved of CPU (its parent gives its silence more time).
    Starved { late_ms: u32 },
}

/// The sending half of a link that carries `M` frames only.
pub struct FrameSender<W, M> {
    writer: W,
    kind: PhantomData<fn(&M)>,
}

impl<W: AsyncWrite + Unpin, M: Serialize> FrameSender<W, M> {
    pub fn new(writer: W) -> Self {
        FrameSender { writer, kind: PhantomData }
    }

    pub async fn send(&mut self, msg: &M) -> Result<(), FrameError> {
        write_frame(&mut self.writer, msg).await
    }
}

/// The receiving half of a link that carries `M` frames only.
pub struct FrameReceiver<R, M> {
    reader: R,
    kind: PhantomData<fn() -> M>,
}

impl<R: AsyncRead + Unpin, M: DeserializeOwned> FrameReceiver<R, M> {
    pub fn new(reader: R) -> Self {
        FrameReceiver { reader, kind: PhantomData }
    }

    pub async fn recv(&mut self) -> Result<M, FrameError> {
        read_frame(&mut self.reader).await
    }
}

/// A file descriptor handed to the launcher's in-process daemon inside a
/// message ([`ToDaemon::Adopt`]): owned, never a bare number. It does not
/// cross a process boundary: serialized, it is dropped, and it arrives empty.
#[derive(Clone, Debug, Default)]
pub struct InProcessFd(Option<Arc<OwnedFd>>);

impl InProcessFd {
    pub fn new(fd: OwnedFd) -> Self {
        InProcessFd(Some(Arc::new(fd)))
    }

    /// The descriptor, if this message never left the process.
    pub fn get(&self) -> Option<&OwnedFd> {
        self.0.as_deref()
    }
}

impl Serialize for InProcessFd {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_unit()
    }
}

impl<'de> Deserialize<'de> for InProcessFd {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        <()>::deserialize(d)?;
        Ok(InProcessFd(None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dpm_kvs::JobId;

    #[tokio::test(flavor = "current_thread")]
    async fn envelopes_travel_typed_by_direction() {
        let (a, b) = tokio::io::duplex(1 << 16);
        let (_ar, aw) = tokio::io::split(a);
        let (br, _bw) = tokio::io::split(b);
        let mut down: FrameSender<_, Down> = FrameSender::new(aw);
        let mut from_parent: FrameReceiver<_, Down> = FrameReceiver::new(br);
        down.send(&Down::To { node: NodeId(3), msg: ToDaemon::Forget { job: JobId(2) } }).await.unwrap();
        let got = from_parent.recv().await.unwrap();
        assert!(matches!(got, Down::To { node: NodeId(3), msg: ToDaemon::Forget { job: JobId(2) } }));
    }

    #[test]
    fn a_node_id_is_the_bare_index_on_the_wire() {
        // The frames as they were when envelopes carried a plain `usize`:
        // variant index, then the node as a varint (300 = 0xac 0x02).
        let up = postcard::to_allocvec(&Up::Ready { node: NodeId(300), host: "h".into() }).unwrap();
        assert_eq!(up, [1, 0xac, 0x02, 1, b'h']);
        let back: Up = postcard::from_bytes(&up).unwrap();
        assert!(matches!(back, Up::Ready { node: NodeId(300), .. }));
        let legacy = postcard::to_allocvec(&(1u8, 300usize, "h")).unwrap();
        assert_eq!(up, legacy);
        // The handshake's JSON has the number alone.
        assert_eq!(serde_json::to_string(&NodeId(7)).unwrap(), "7");
        assert_eq!(serde_json::from_str::<NodeId>("7").unwrap(), NodeId(7));
    }

    #[test]
    fn a_rank_exit_is_the_struct_variant_s_fields_on_the_wire() {
        use crate::{ExitStatus, PmiProgress, RankExit, ToLauncher};
        use dpm_kvs::Rank;
        // `Exited` carried its fields inline before it carried a `RankExit`:
        // the bytes are those of the inline fields, in the same order.
        #[derive(serde::Serialize)]
        enum Inline {
            _Started,
            _LaunchFailed,
            _Output,
            Exited { job: JobId, rank: Rank, pid: u32, status: ExitStatus, pmi: PmiProgress, at: u64 },
        }
        let exit = RankExit { job: JobId(2), rank: Rank(5), pid: 4242, status: ExitStatus::Signal(9), pmi: PmiProgress::Finalized, at: 1 << 40 };
        let bytes = postcard::to_allocvec(&ToLauncher::Exited(exit)).unwrap();
        let inline = Inline::Exited { job: exit.job, rank: exit.rank, pid: exit.pid, status: exit.status, pmi: exit.pmi, at: exit.at };
        assert_eq!(bytes, postcard::to_allocvec(&inline).unwrap());
        assert!(matches!(postcard::from_bytes(&bytes).unwrap(), ToLauncher::Exited(back) if back == exit));
    }

    #[test]
    fn a_descriptor_does_not_cross_a_process_boundary() {
        let (fd, _other) = std::os::unix::net::UnixStream::pair().unwrap();
        let fd = InProcessFd::new(fd.into());
        assert!(fd.get().is_some());
        let bytes = postcard::to_allocvec(&fd).unwrap();
        let back: InProcessFd = postcard::from_bytes(&bytes).unwrap();
        assert!(back.get().is_none());
    }
}
