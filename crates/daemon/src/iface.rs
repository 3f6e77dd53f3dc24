//! `-iface IF` (Hydra's option, also `HYDRA_IFACE`): the network interface a
//! run uses. Its IPv4 address is where a node's PMI port listens (and what
//! `PMI_PORT` names), as Hydra advertises the interface's address for its
//! ports. The choice is process-wide: `dpm run` sets it for the daemon it
//! runs inside, `dpm daemon --iface IF` for itself, and a daemon passes it
//! on to the daemons it starts ([`crate::links`]); each resolves the name on
//! its own host, as Hydra's proxies do.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::OnceLock;

/// The `dpm daemon` flag that names the interface.
pub const IFACE_FLAG: &str = "--iface";

/// An interface and the IPv4 address it has on this host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Iface {
    pub name: String,
    pub ip: Ipv4Addr,
}

#[derive(Debug, thiserror::Error)]
pub enum IfaceError {
    #[error("cannot list this host's network interfaces: {0}")]
    List(nix::Error),
    #[error("no network interface '{0}' with an IPv4 address on this host")]
    NotFound(String),
}

/// `name`'s first IPv4 address on this host.
pub fn resolve(name: &str) -> Result<Iface, IfaceError> {
    let addrs = nix::ifaddrs::getifaddrs().map_err(IfaceError::List)?;
    addrs
        .filter(|a| a.interface_name == name)
        .find_map(|a| a.address.as_ref().and_then(|s| s.as_sockaddr_in()).map(|sin| sin.ip()))
        .map(|ip| Iface { name: name.to_string(), ip })
        .ok_or_else(|| IfaceError::NotFound(name.to_string()))
}

static CHOSEN: OnceLock<Iface> = OnceLock::new();

/// This process's interface, set once before any node starts (a second
/// call changes nothing).
pub fn choose(iface: Iface) {
    let _ = CHOSEN.set(iface);
}

/// The interface chosen for this process, if any.
pub fn chosen() -> Option<&'static Iface> {
    CHOSEN.get()
}

/// Where this host's PMI ports listen: the chosen interface's address,
/// else loopback (the ranks are on the node that serves them).
pub fn listen_ip() -> IpAddr {
    chosen().map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |i| IpAddr::V4(i.ip))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_resolves_and_a_missing_interface_is_an_error() {
        let lo = resolve("lo").unwrap();
        assert_eq!(lo, Iface { name: "lo".into(), ip: Ipv4Addr::LOCALHOST });
        let err = resolve("dpm-no-such0").unwrap_err();
        assert_eq!(err.to_string(), "no network interface 'dpm-no-such0' with an IPv4 address on this host");
    }
}
