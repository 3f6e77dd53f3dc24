//! A boot that grows and shrinks: `dpm boot --add` starts a daemon on each
//! new host through the boot's launch agent and joins it to the running
//! tree; `dpm boot --drain` stops placing on hosts, and each one's daemon
//! leaves once its ranks ended (`--force`: they are killed now).
//!
//! The state changes in the tree's events ([`crate::tree::Tree::join`],
//! `joined`, `drain`; a drained node leaves in the event that empties it) over its [`NodeTable`](crate::node_table::NodeTable);
//! what is here moves bytes: starting the daemons, adding their links,
//! sending the shutdowns.
//!
//! A joined daemon hangs straight below the boot server, outside the heap
//! the first nodes form, so no other daemon routes through it and a lost
//! first node never takes it along. Only a daemon linked to the server
//! itself (a top-level node without children up) leaves when drained; a
//! drained interior node stays, taking nothing, while its subtree serves.

use std::cell::RefCell;
use std::time::Duration;

use tokio::process::Child;
use tokio::sync::mpsc;

use dpm_kvs::NodeId;
use dpm_proto::auth::Secret;
use dpm_proto::control::{ManualJoin, ToClient, ToServer, CONTROL_VERSION};
use dpm_proto::frame::read_frame;
use dpm_proto::link::Up;
use dpm_proto::tree;

use crate::controller::DaemonLink;
use crate::error::{Error, UsageError};

/// What the boot server keeps to start daemons into its running tree.
pub(super) struct Growth {
    /// The boot's own way to start daemons (`None`: the boot is this
    /// machine alone, or daemons started by hand).
    pub bootstrap: Option<tree::Bootstrap>,
    pub secret: Secret,
    pub joins: mpsc::WeakUnboundedSender<Up>,
    pub verbose: u8,
    /// The joined daemons' processes (their agents: ssh, srun…), waited
    /// for at the end as the first ones are.
    pub children: RefCell<Vec<Child>>,
}

impl Growth {
    /// Start a daemon for each of `nodes` (already in the table) and link it
    /// below the server within `within` ([`crate::controller::lazy::join`]); the links, one per node.
    pub async fn start(&self, nodes: &[NodeId], hosts: Vec<String>, bootstrap: &tree::Bootstrap, within: Duration) -> Result<Vec<DaemonLink>, String> {
        let up = self.joins.upgrade().ok_or("the boot's daemon links are gone")?;
        let linked = crate::controller::lazy::join(nodes, hosts, bootstrap, &self.secret, &up, self.verbose, within).await?;
        let mut out = Vec::with_capacity(linked.len());
        for (link, child) in linked {
            self.children.borrow_mut().push(child);
            out.push(link);
        }
        Ok(out)
    }

    /// `-launcher manual`: wait (within `within`) for the daemons of `nodes`
    /// (ids and hosts) the user starts by hand with the commands given to
    /// `say` ([`crate::manual::join`]); the links, one per node.
    pub async fn wait_manual(
        &self,
        nodes: &[(NodeId, String)],
        how: &ManualJoin,
        within: Duration,
        say: &mut dyn FnMut(&str),
    ) -> Result<Vec<DaemonLink>, String> {
        let up = self.joins.upgrade().ok_or("the boot's daemon links are gone")?;
        let bind = match &how.bind {
            Some(b) => Some(b.parse().map_err(|e| format!("--bind {b}: {e}"))?),
            None => None,
        };
        let port_range = crate::ports::port_range(&|k| std::env::var(k).ok()).ok().flatten();
        let manual = crate::manual::Manual { bind, timeout: within, connect_host: how.connect_host.clone(), port_range };
        let me = how.connect_host.clone().unwrap_or_else(crate::machine::this_host);
        let connected = crate::manual::join(nodes, &manual, &self.secret, &me, &up, say).await.map_err(|e| e.to_string())?;
        Ok(connected
            .into_iter()
            .map(|c| {
                let host = nodes.iter().find(|n| n.0 == c.node).map_or_else(String::new, |n| n.1.clone());
                DaemonLink { via: c.down, node: c.node, host }
            })
            .collect())
    }

    /// After the shutdown went down every link: wait (at most a second) for
    /// the joined daemons' processes, then kill what is left.
    pub async fn wait(&self) {
        let mut children = std::mem::take(&mut *self.children.borrow_mut());
        let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
        for child in &mut children {
            if tokio::time::timeout_at(deadline, child.wait()).await.is_err() {
                let _ = child.kill().await;
            }
        }
    }
}

/// `dpm boot --add` / `dpm boot --drain`: send the request, print what
/// changed (and, while a manual join waits, the commands to run, on stderr).
pub fn request_command(msg: ToServer) -> Result<i32, Error> {
    crate::runtime::block_on_local(async move {
        let (mut rd, _wr) = super::client::request(msg).await?;
        loop {
            match read_frame::<_, ToClient>(&mut rd).await {
                Ok(ToClient::Note(line)) => eprintln!("{line}"),
                Ok(ToClient::Changed(lines)) => {
                    for line in lines {
                        println!("dpm boot: {line}");
                    }
                    return Ok(0);
                }
                Ok(ToClient::Refused(why)) => return Err(Error::failed(why)),
                _ => return Err(Error::failed("no answer from the boot server")),
            }
        }
    })
}

/// The request `dpm boot --add` sends: the nodes its node options name
/// (a host list, a host file, an allocation) and, if it named a launcher
/// (or its allocation has an agent), that way to start them.
pub fn add_request(opts: &crate::cli::RunOptions, config: &crate::config::RunConfig) -> Result<ToServer, Error> {
    let host = opts.localhost.clone().unwrap_or_else(crate::machine::this_host);
    let choice = crate::hosts::nodes_and_bootstrap(opts, config, &host)?;
    let explicit = config.launcher.is_some() || choice.allocation.is_some();
    let mut manual = None;
    let bootstrap = match choice.bootstrap {
        crate::nodes::Bootstrap::Tree(b) => explicit.then_some(b),
        // One node here: forked, as a virtual node would be.
        crate::nodes::Bootstrap::InProcess => explicit.then_some(tree::Bootstrap::Fork),
        crate::nodes::Bootstrap::Manual(m) => {
            manual = Some(ManualJoin { bind: m.bind.map(|a| a.to_string()), connect_host: m.connect_host });
            None
        }
    };
    let nodes = choice.nodes.into_iter().map(|n| (n.host, n.slots)).collect();
    Ok(ToServer::Add { version: CONTROL_VERSION, nodes, bootstrap, timeout_secs: join_timeout(opts)?, manual })
}

/// `--connect-timeout`, else `DPM_CONNECT_TIMEOUT`: how long the added
/// daemons may take to connect (`None`: the server's default, see
/// [`crate::controller::lazy::JOIN_TIMEOUT`]); 0 is refused (a join
/// needs time to connect).
fn join_timeout(opts: &crate::cli::RunOptions) -> Result<Option<u64>, UsageError> {
    let given = match opts.connect_timeout {
        Some(t) => Some((t, format!("--connect-timeout {t}"))),
        None => match std::env::var("DPM_CONNECT_TIMEOUT").ok().filter(|v| !v.trim().is_empty()) {
            Some(v) => {
                let secs = crate::cli::parse_secs(&v)
                    .ok_or_else(|| UsageError(format!("DPM_CONNECT_TIMEOUT={v}: not a number of seconds (0 to {})", crate::options::MAX_SECS)))?;
                Some((secs, format!("DPM_CONNECT_TIMEOUT={v}")))
            }
            None => None,
        },
    };
    match given {
        Some((0, what)) => Err(UsageError(format!("dpm boot --add: {what}: the new daemons need time to connect (1 s or more)"))),
        Some((secs, _)) => Ok(Some(secs)),
        None => Ok(None),
    }
}
