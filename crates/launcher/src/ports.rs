//! The ports dpm listens on for daemons that connect to it (`-launcher
//! manual`, `dpm boot --add -launcher manual`, a boot's re-attach
//! listener): `MPIEXEC_PORT_RANGE` and the names Hydra 5.0.2 reads before it
//! (`MPIR_CVAR_CH3_PORT_RANGE`, …, `MPICH_PORT_RANGE`), as Hydra reads them.

use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;

use crate::error::UsageError;

/// `name`'s value, unset when empty.
fn var(env: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    env(name).filter(|v| !v.trim().is_empty())
}

/// The port-range variables in the order Hydra looks at them; the first set wins.
pub const PORT_RANGE_VARS: [&str; 11] = [
    "MPIR_CVAR_CH3_PORT_RANGE",
    "MPIR_PARAM_CH3_PORT_RANGE",
    "MPICH_CH3_PORT_RANGE",
    "MPIR_CVAR_PORTRANGE",
    "MPIR_CVAR_PORT_RANGE",
    "MPIR_PARAM_PORTRANGE",
    "MPIR_PARAM_PORT_RANGE",
    "MPICH_PORTRANGE",
    "MPICH_PORT_RANGE",
    "MPIEXEC_PORTRANGE",
    "MPIEXEC_PORT_RANGE",
];

/// The ports dpm may listen on for its daemons: `LOW:HIGH` from the first
/// of [`PORT_RANGE_VARS`] that is set; `0:0` (MPICH's default) is any port.
pub fn port_range(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<RangeInclusive<u16>>, UsageError> {
    let Some((name, v)) = PORT_RANGE_VARS.iter().find_map(|n| var(env, n).map(|v| (*n, v))) else {
        return Ok(None);
    };
    let parsed = v.trim().split_once(':').and_then(|(lo, hi)| Some((lo.trim().parse::<u16>().ok()?, hi.trim().parse::<u16>().ok()?)));
    match parsed {
        Some((0, 0)) => Ok(None),
        Some((lo, hi)) if lo > 0 && lo <= hi => Ok(Some(lo..=hi)),
        Some(_) => Err(UsageError(format!("{name}={v}: the low port is 0 or above the high one"))),
        None => Err(UsageError(format!("{name}={v}: not a port range LOW:HIGH (1 to 65535)"))),
    }
}

/// A listener on `ip`: on `port` when it is not 0, else on the first free
/// port of `range` (any port without one).
pub async fn bind_in_range(ip: IpAddr, port: u16, range: Option<&RangeInclusive<u16>>) -> std::io::Result<tokio::net::TcpListener> {
    let Some(range) = range.filter(|_| port == 0) else {
        return tokio::net::TcpListener::bind(SocketAddr::new(ip, port)).await;
    };
    for p in range.clone() {
        match tokio::net::TcpListener::bind(SocketAddr::new(ip, p)).await {
            Ok(l) => return Ok(l),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::new(std::io::ErrorKind::AddrInUse, format!("no free port in {}:{}", range.start(), range.end())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn port_ranges_in_hydras_order() {
        assert_eq!(port_range(&table(&[])).unwrap(), None);
        assert_eq!(port_range(&table(&[("MPIEXEC_PORT_RANGE", "10000:10100")])).unwrap(), Some(10000..=10100));
        assert_eq!(port_range(&table(&[("MPIEXEC_PORT_RANGE", "1:2"), ("MPICH_PORT_RANGE", "3:4")])).unwrap(), Some(3..=4));
        assert_eq!(port_range(&table(&[("MPIEXEC_PORT_RANGE", "1:2"), ("MPIR_CVAR_CH3_PORT_RANGE", "5:6")])).unwrap(), Some(5..=6));
        assert_eq!(port_range(&table(&[("MPIR_CVAR_CH3_PORT_RANGE", "0:0")])).unwrap(), None);
        for bad in ["10", "a:b", "9:8", "0:5", "1:70000"] {
            let e = port_range(&table(&[("MPIEXEC_PORT_RANGE", bad)])).unwrap_err();
            assert!(e.0.starts_with(&format!("MPIEXEC_PORT_RANGE={bad}: ")), "{e}");
        }
    }

    #[test]
    fn a_listener_takes_the_first_free_port_of_the_range() {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(first_free_port());
    }

    async fn first_free_port() {
        let ip = IpAddr::from([127, 0, 0, 1]);
        let first = bind_in_range(ip, 0, None).await.unwrap();
        let taken = first.local_addr().unwrap().port();
        let Some(next) = taken.checked_add(1) else { return };
        let second = bind_in_range(ip, 0, Some(&(taken..=next))).await;
        // The taken port is skipped (the next one may be someone else's too).
        match second {
            Ok(l) => assert_eq!(l.local_addr().unwrap().port(), next),
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse),
        }
        let none = bind_in_range(ip, 0, Some(&(taken..=taken))).await.unwrap_err();
        assert!(none.to_string().contains("no free port"), "{none}");
    }
}
