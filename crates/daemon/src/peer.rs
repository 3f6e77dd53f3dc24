//! Who is at the other end of a loopback TCP connection: the uid that owns
//! the connecting socket, asked of the kernel through `NETLINK_SOCK_DIAG`.
//!
//! A job's `--pmi-port` listener (127.0.0.1) is reachable by every local
//! user, and MPICH's client can carry no secret (it connects to
//! `PMI_PORT=host:port` and sends `PMI_ID`, parsed with `atoi`). Without a
//! check, another user could claim a rank and `mcmd=spawn` programs that run
//! as the job's owner. So every accepted connection is checked here and
//! refused unless its socket belongs to the daemon's own uid.
//!
//! The query is one `SOCK_DIAG_BY_FAMILY` request for the exact 4-tuple of
//! the *connecting* socket (its local end is our peer address), answered
//! with an `inet_diag_msg` carrying `idiag_uid` and `idiag_inode`. Messages
//! are built and read as bytes (layouts from `linux/inet_diag.h`,
//! `linux/netlink.h`), so no `unsafe` is needed. A socket whose owner already
//! closed it (inode 0: orphaned, or a time-wait socket, which the kernel
//! reports as uid 0) is refused too: its uid is not known, and a legitimate
//! PMI client waits for its replies.

use std::net::{IpAddr, SocketAddr};

use nix::sys::socket::{recv, sendto, socket, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType};
use std::os::fd::AsRawFd;

/// `linux/sock_diag.h`.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `linux/netlink.h`.
const NLM_F_REQUEST: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const NLMSG_HDR: usize = 16;
/// `inet_diag_req_v2`: family, protocol, ext, pad, states, then the sockid.
const REQ_LEN: usize = 8 + SOCKID_LEN;
/// `inet_diag_sockid`: sport, dport, src[4], dst[4], if, cookie[2].
const SOCKID_LEN: usize = 48;
/// `inet_diag_msg`: family, state, timer, retrans, sockid, expires, rqueue,
/// wqueue, uid, inode.
const UID_AT: usize = NLMSG_HDR + 4 + SOCKID_LEN + 12;
const INODE_AT: usize = UID_AT + 4;
/// `INET_DIAG_NOCOOKIE`: match by address alone.
const NO_COOKIE: u32 = !0;

#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("connection from uid {0}, not this daemon's uid {1}")]
    OtherUser(u32, u32),
    #[error("the connecting socket is already closed, its owner unknown")]
    Orphaned,
    #[error("not a connection within one address family ({0} to {1})")]
    Mixed(SocketAddr, SocketAddr),
    #[error("cannot ask the kernel who connected: {0}")]
    Netlink(#[from] nix::Error),
    #[error("the kernel does not know the connecting socket: {0}")]
    Kernel(nix::Error),
    #[error("short sock_diag answer ({0} bytes)")]
    Short(usize),
    #[error("cannot read the connection's addresses: {0}")]
    Addr(#[from] std::io::Error),
}

/// Accept a connection (`local` is our end) only from a socket of our own uid.
pub fn check_same_user(local: SocketAddr, peer: SocketAddr) -> Result<(), PeerError> {
    let me = nix::unistd::geteuid().as_raw();
    match tcp_peer_uid(local, peer)? {
        uid if uid == me => Ok(()),
        uid => Err(PeerError::OtherUser(uid, me)),
    }
}

/// The uid owning the TCP socket at `peer` connected to `local` (both on
/// this host, in this network namespace).
pub fn tcp_peer_uid(local: SocketAddr, peer: SocketAddr) -> Result<u32, PeerError> {
    let request = request(local, peer)?;
    let fd = socket(AddressFamily::Netlink, SockType::Datagram, SockFlag::SOCK_CLOEXEC, SockProtocol::NetlinkSockDiag)?;
    sendto(fd.as_raw_fd(), &request, &NetlinkAddr::new(0, 0), MsgFlags::empty())?;
    let mut answer = [0u8; 512];
    let n = recv(fd.as_raw_fd(), &mut answer, MsgFlags::empty())?;
    parse_answer(&answer[..n])
}

/// The `SOCK_DIAG_BY_FAMILY` request for the connecting socket: its source
/// is our peer, its destination our end.
fn request(local: SocketAddr, peer: SocketAddr) -> Result<Vec<u8>, PeerError> {
    let (family, src, dst) = match (peer.ip(), local.ip()) {
        (IpAddr::V4(p), IpAddr::V4(l)) => (libc::AF_INET, pad16(&p.octets()), pad16(&l.octets())),
        (IpAddr::V6(p), IpAddr::V6(l)) => (libc::AF_INET6, p.octets(), l.octets()),
        _ => return Err(PeerError::Mixed(peer, local)),
    };
    let len = NLMSG_HDR + REQ_LEN;
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    m.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes()); // seq
    m.extend_from_slice(&0u32.to_ne_bytes()); // pid: the kernel
    m.extend_from_slice(&[family as u8, libc::IPPROTO_TCP as u8, 0, 0]);
    m.extend_from_slice(&(!0u32).to_ne_bytes()); // every state
    m.extend_from_slice(&peer.port().to_be_bytes());
    m.extend_from_slice(&local.port().to_be_bytes());
    m.extend_from_slice(&src);
    m.extend_from_slice(&dst);
    m.extend_from_slice(&0u32.to_ne_bytes()); // any interface
    m.extend_from_slice(&NO_COOKIE.to_ne_bytes());
    m.extend_from_slice(&NO_COOKIE.to_ne_bytes());
    debug_assert_eq!(m.len(), len);
    Ok(m)
}

fn pad16(v4: &[u8; 4]) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..4].copy_from_slice(v4);
    a
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn parse_answer(b: &[u8]) -> Result<u32, PeerError> {
    let short = || PeerError::Short(b.len());
    let kind = u16::from_ne_bytes(b.get(4..6).ok_or_else(short)?.try_into().map_err(|_| short())?);
    if kind == NLMSG_ERROR {
        let errno = u32_at(b, NLMSG_HDR).ok_or_else(short)? as i32;
        return Err(PeerError::Kernel(nix::Error::from_raw(-errno)));
    }
    let uid = u32_at(b, UID_AT).ok_or_else(short)?;
    let inode = u32_at(b, INODE_AT).ok_or_else(short)?;
    if inode == 0 {
        return Err(PeerError::Orphaned);
    }
    Ok(uid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn a_connection_of_our_own_is_ours() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, peer) = listener.accept().unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        let local = server.local_addr().unwrap();
        assert_eq!(tcp_peer_uid(local, peer).unwrap(), nix::unistd::geteuid().as_raw());
        check_same_user(local, peer).unwrap();
    }

    #[test]
    fn an_unknown_or_closed_peer_is_not_taken_for_anyone() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, peer) = listener.accept().unwrap();
        let local = server.local_addr().unwrap();
        // No socket at this address.
        let nobody = SocketAddr::new(peer.ip(), peer.port().wrapping_add(1).max(1));
        assert!(matches!(tcp_peer_uid(local, nobody), Err(PeerError::Kernel(_))), "{:?}", tcp_peer_uid(local, nobody));
        // The client closed its socket before the check: its owner is unknown.
        drop(client);
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(check_same_user(local, peer).is_err());
    }
}
