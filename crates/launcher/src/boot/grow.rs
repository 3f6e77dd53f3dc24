//! A boot that grows and shrinks: `dpm boot --add` starts a daemon on each
//! new host through the boot's launch agent and joins it to the running
//! tree; `dpm boot --drain` stops placing on hosts, and each one's daemon
//! leaves once its ranks ended (`--force`: they are killed now).
//!
//! The state changes in the tree's events ([`crate::tree::Tree::join`],
//! `joined`, `drain`, `leaving`) over its [`NodeTable`](crate::node_table::NodeTable);
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
use dpm_proto::control::{ToClient, ToServer, CONTROL_VERSION};
use dpm_proto::frame::read_frame;
use dpm_proto::link::Up;
use dpm_proto::tree;

use crate::controller::{DaemonLink, SharedRef};
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
    /// below the server ([`crate::controller::lazy::join`]); the links, one per node.
    pub async fn start(&self, nodes: &[NodeId], hosts: Vec<String>, bootstrap: &tree::Bootstrap) -> Result<Vec<DaemonLink>, String> {
        let up = self.joins.upgrade().ok_or("the boot's daemon links are gone")?;
        let linked = crate::controller::lazy::join(nodes, hosts, bootstrap, &self.secret, &up, self.verbose).await?;
        let mut out = Vec::with_capacity(linked.len());
        for (link, child) in linked {
            self.children.borrow_mut().push(child);
            out.push(link);
        }
        Ok(out)
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

/// The nodes that may leave now ([`crate::tree::Tree::leaving`]): their
/// links shut, released in the table. The lines to log.
pub(super) fn leave_drained(shared: &SharedRef) -> Vec<String> {
    let mut shared = shared.borrow_mut();
    let leaving = shared.tree.leaving();
    leaving
        .into_iter()
        .map(|(node, line)| {
            // A top-level node's link is its own: the shutdown reaches it alone.
            if let Some(link) = shared.links().iter().find(|l| l.node == node) {
                link.shutdown();
            }
            line
        })
        .collect()
}

/// `dpm boot --add` / `dpm boot --drain`: send the request, print what changed.
pub fn request_command(msg: ToServer) -> Result<i32, Error> {
    crate::runtime::block_on_local(async move {
        let (mut rd, _wr) = super::client::request(msg).await?;
        match read_frame::<_, ToClient>(&mut rd).await {
            Ok(ToClient::Changed(lines)) => {
                for line in lines {
                    println!("dpm boot: {line}");
                }
                Ok(0)
            }
            Ok(ToClient::Refused(why)) => Err(Error::failed(why)),
            _ => Err(Error::failed("no answer from the boot server")),
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
    let bootstrap = match choice.bootstrap {
        crate::nodes::Bootstrap::Tree(b) => explicit.then_some(b),
        // One node here: forked, as a virtual node would be.
        crate::nodes::Bootstrap::InProcess => explicit.then_some(tree::Bootstrap::Fork),
        crate::nodes::Bootstrap::Manual(_) => {
            return Err(
                UsageError::new("dpm boot --add: -launcher manual is not supported (start the boot with the hosts, or use ssh, srun or a batch agent)").into()
            )
        }
    };
    let nodes = choice.nodes.into_iter().map(|n| (n.host, n.slots)).collect();
    Ok(ToServer::Add { version: CONTROL_VERSION, nodes, bootstrap })
}
