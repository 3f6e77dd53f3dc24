//! Daemons that start when they are first needed, and the one way every
//! daemon joins a running tree.
//!
//! A run's node table lists every host of its host list, but daemons start
//! only where its first job has ranks; a message for a listed node without
//! a daemon (a spawned job placed there, a warm-spawn pooled job) is held
//! here, the daemon is started through the run's launch agent, linked
//! straight below the launcher ([`join`], as `dpm boot --add` joins its
//! own), and the held messages follow. A daemon that cannot start or does
//! not connect within [`JOIN_TIMEOUT`] is reported as a lost node: the jobs
//! placed there end with the message and status of a lost node, nothing
//! waits for it.

use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::time::Duration;

use tokio::process::Child;
use tokio::sync::{mpsc, Notify};

use dpm_daemon::links;
use dpm_kvs::NodeId;
use dpm_proto::auth::Secret;
use dpm_proto::link::Up;
use dpm_proto::tree::{self, TreeSpec};
use dpm_proto::ToDaemon;

use super::{DaemonLink, SharedRef};

/// How long a joining daemon may take to start and prove the secret (an
/// ssh that hangs, an agent that never connects).
pub const JOIN_TIMEOUT: Duration = Duration::from_secs(60);

/// The most messages held for one node while its daemon starts; more are
/// dropped with a warning (a run sends a handful: a launch, a claim, a kill).
pub const MAX_HELD: usize = 4096;

/// Start a daemon on each of `nodes` (indexes into `hosts`, the tree's
/// every host) and link it straight below this process, within `within`
/// ([`JOIN_TIMEOUT`] unless `dpm boot --add` was given one): each node's
/// link and agent process, in node order.
pub async fn join(
    nodes: &[NodeId],
    hosts: Vec<String>,
    bootstrap: &tree::Bootstrap,
    secret: &Secret,
    up: &mpsc::UnboundedSender<Up>,
    verbose: u8,
    within: Duration,
) -> Result<Vec<(DaemonLink, Child)>, String> {
    // Flat: as wide as the list, so no joined daemon starts children.
    let start_timeout = Some(within.as_secs().max(1));
    let spec = TreeSpec { fanout: hosts.len().max(1), hosts, bootstrap: bootstrap.clone(), trace: false, verbose, rejoin: None, start_timeout };
    let me = crate::machine::this_host();
    let linked = match tokio::time::timeout(within, links::start_children(nodes, &spec, &me, secret, up)).await {
        Ok(linked) => linked?,
        // (As the daemon's own start watch says it, whichever comes first.)
        Err(_) => {
            return Err(format!(
                "its daemon did not start: no answer within {} s (the start timeout: --connect-timeout, DPM_CONNECT_TIMEOUT)",
                within.as_secs()
            ))
        }
    };
    let mut out: Vec<(DaemonLink, Child)> =
        linked.into_iter().map(|c| (DaemonLink { via: c.down, node: c.node, host: spec.hosts[c.node.0].clone() }, c.process)).collect();
    out.sort_by_key(|(l, _)| l.node);
    Ok(out)
}

/// A run's daemons yet to start: how, and what waits for them.
pub struct Lazy {
    bootstrap: tree::Bootstrap,
    secret: Secret,
    joins: mpsc::WeakUnboundedSender<Up>,
    verbose: u8,
    /// How long each daemon may take to start and link.
    within: Duration,
    /// Messages for nodes whose daemon is starting.
    held: HashMap<NodeId, Vec<ToDaemon>>,
    /// Nodes to start, for [`drive`].
    due: Vec<NodeId>,
    /// Nodes whose start failed: their messages go nowhere.
    failed: HashSet<NodeId>,
    wake: Rc<Notify>,
    children: Vec<Child>,
}

impl Lazy {
    /// `start_timeout`: the run's `--connect-timeout` (`None`: [`JOIN_TIMEOUT`]).
    pub fn new(bootstrap: tree::Bootstrap, secret: Secret, joins: mpsc::WeakUnboundedSender<Up>, verbose: u8, start_timeout: Option<u64>) -> Self {
        Lazy {
            bootstrap,
            secret,
            joins,
            verbose,
            within: start_timeout.map_or(JOIN_TIMEOUT, Duration::from_secs),
            held: HashMap::new(),
            due: Vec::new(),
            failed: HashSet::new(),
            wake: Rc::new(Notify::new()),
            children: Vec::new(),
        }
    }

    /// A message for `node`, which has no daemon yet: held, and its start
    /// asked for (once).
    pub fn hold(&mut self, node: NodeId, msg: ToDaemon) {
        tracing::debug!(%node, "held for a daemon starting: {}", format!("{msg:?}").chars().take(200).collect::<String>());
        if self.failed.contains(&node) {
            return;
        }
        let held = self.held.entry(node).or_insert_with(|| {
            self.due.push(node);
            self.wake.notify_one();
            Vec::new()
        });
        if held.len() >= MAX_HELD {
            tracing::warn!("{node}: more than {MAX_HELD} messages held while its daemon starts; dropped one");
            return;
        }
        held.push(msg);
    }
}

/// Start the daemons [`Lazy::hold`] asked for, each as a task of its own,
/// for the run's life.
pub async fn drive(shared: SharedRef) {
    let Some(wake) = shared.borrow().lazy.as_ref().map(|l| l.wake.clone()) else { return };
    loop {
        wake.notified().await;
        let due = shared.borrow_mut().lazy.as_mut().map(|l| std::mem::take(&mut l.due)).unwrap_or_default();
        for node in due {
            tokio::task::spawn_local(start_one(shared.clone(), node));
        }
    }
}

async fn start_one(shared: SharedRef, node: NodeId) {
    let (hosts, bootstrap, secret, up, verbose, within) = {
        let s = shared.borrow();
        let Some(lazy) = s.lazy.as_ref() else { return };
        let Some(up) = lazy.joins.upgrade() else { return };
        let hosts: Vec<String> = s.tree.shared().nodes.ids().map(|n| s.tree.shared().nodes.host(n).to_string()).collect();
        (hosts, lazy.bootstrap.clone(), lazy.secret.clone(), up, lazy.verbose, lazy.within)
    };
    let host = hosts.get(node.0).cloned().unwrap_or_default();
    tracing::info!("{node} ({host}): starting its daemon, first needed now");
    let started = join(&[node], hosts, &bootstrap, &secret, &up, verbose, within).await;
    let mut s = shared.borrow_mut();
    match started {
        Ok(mut linked) if linked.len() == 1 => {
            let (link, child) = linked.remove(0);
            if let Some(lazy) = s.lazy.as_mut() {
                for msg in lazy.held.remove(&node).unwrap_or_default() {
                    link.send(msg);
                }
                lazy.children.push(child);
            }
            s.add_links([link]);
        }
        other => {
            let error = match other {
                Err(e) => e,
                Ok(_) => "no link came back".to_string(),
            };
            if let Some(lazy) = s.lazy.as_mut() {
                lazy.held.remove(&node);
                lazy.failed.insert(node);
            }
            drop(s);
            // As any lost node: the jobs placed there end, saying why.
            let _ = up.send(Up::Lost { node, error: format!("its daemon could not start: {error}") });
        }
    }
}

/// At the run's end, after the shutdown went down every link: wait (at
/// most a second) for the daemons started late, then kill what is left.
pub async fn wait(shared: &SharedRef) {
    let mut children = shared.borrow_mut().lazy.as_mut().map(|l| std::mem::take(&mut l.children)).unwrap_or_default();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    for child in &mut children {
        if tokio::time::timeout_at(deadline, child.wait()).await.is_err() {
            let _ = child.kill().await;
        }
    }
}
