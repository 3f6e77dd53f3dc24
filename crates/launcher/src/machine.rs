//! This machine and the nodes of a run: its host name, whether a host-list
//! entry names it, and [`Node`] (a host and its slots). A leaf: the modules
//! that plan, place and start nodes all use it, so it uses none of them.

/// One node of the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// Where to start the daemon (ssh target), and the node's name in messages.
    pub host: String,
    pub slots: u32,
}

/// This machine's host name.
pub fn this_host() -> String {
    nix::unistd::gethostname().map_or_else(|_| "localhost".into(), |h| h.to_string_lossy().into_owned())
}

/// Whether `name` (a host list entry) is this machine, named `host`.
pub fn is_this_host(name: &str, host: &str) -> bool {
    let name = name.split(':').next().unwrap_or(name);
    name == host || name == "localhost" || name == "127.0.0.1" || name == "::1" || host.split('.').next() == Some(name)
}
