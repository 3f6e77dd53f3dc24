//! The driver of a daemon tree's [`Tree`]: [`Shared`] holds the tree, the
//! links to its daemons, the stream of what comes up from them and each
//! run's I/O (its [`Output`], timers, tools), and carries out the tree's
//! effects ([`TreeEffects`]). [`dispatch`] hands the tree every message
//! from the daemons ([`Tree::on_up`] decides where it goes);
//! [`drive_pool_timer`] is the pool's clock. Each run's own task is a
//! [`super::Controller`].

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::time::Duration;

use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use dpm_kvs::{JobId, NodeId, Rank};
use dpm_proto::control::ProcInfo;
use dpm_proto::link::Up;
use dpm_proto::{Stream, ToDaemon, ToLauncher};

use super::{Announced, DaemonLink, Settings};
use crate::node_table::NodeTable;
use crate::output::Output;
use crate::run::Timer;
use crate::tree::{Tree, TreeEffects};

/// One run's I/O, kept by the driver while the run goes.
pub(super) struct RunIo {
    pub(super) output: Output,
    pub(super) timers: BTreeMap<Timer, Instant>,
    /// Jobs whose ranks have all started, for the run's tools.
    pub(super) announced: Vec<Announced>,
    /// `-print-all-exitcodes`: the first job (once launched) and its ranks' statuses.
    pub(super) exit_codes: Option<(Option<JobId>, crate::exitcodes::ExitCodes)>,
    /// Ranks ended since the driver last looked (the run's table for tools).
    pub(super) ranks_ended: bool,
    /// Notified when the run's timers, tools or end change.
    pub(super) changed: Rc<Notify>,
}

/// A daemon tree and its driver's state (see the module documentation).
pub struct Shared {
    pub tree: Tree,
    /// The links to the tree's nodes.
    pub(super) links: Vec<DaemonLink>,
    /// What comes up from the daemons (`None` once taken by a test, or never given).
    up: Option<mpsc::UnboundedReceiver<Up>>,
    /// The daemons' stream ended.
    pub(super) daemons_gone: bool,
    pub(super) io: HashMap<u32, RunIo>,
    /// Notified when the pool's timer is armed.
    pool_woken: Rc<Notify>,
    /// Told each lost node (a boot's server).
    lost: Option<mpsc::UnboundedSender<(NodeId, String)>>,
    /// Told each drained node that left (a boot's server), its line.
    left: Option<mpsc::UnboundedSender<String>>,
    /// A plain run's listed nodes without a daemon yet: started when first
    /// sent to ([`crate::controller::lazy`]).
    pub lazy: Option<crate::controller::lazy::Lazy>,
    /// The tree itself, for a detached node still waiting after
    /// [`reattach_wait`] to be lost (a boot that re-forms: `boot::reform`).
    reattach: Option<std::rc::Weak<RefCell<Shared>>>,
}

/// How long the nodes below a lost interior node wait for their daemons to
/// re-attach before they are lost too (20 heartbeat timeouts: 30 s by default).
pub use dpm_daemon::liveness::reattach_wait;

/// The link of `node` (links are in node order, except those that joined later).
fn find_link(links: &[DaemonLink], node: NodeId) -> Option<&DaemonLink> {
    links.get(node.0).filter(|l| l.node == node).or_else(|| links.iter().find(|l| l.node == node))
}

pub type SharedRef = Rc<RefCell<Shared>>;

impl Shared {
    /// A tree over `nodes`, fed by `up`, the stream from its daemons.
    pub fn new(nodes: NodeTable, links: Vec<DaemonLink>, up: mpsc::UnboundedReceiver<Up>) -> SharedRef {
        let tree = Tree::new(nodes, super::random_tag());
        let shared = Shared {
            tree,
            links,
            up: Some(up),
            daemons_gone: false,
            io: HashMap::new(),
            pool_woken: Rc::default(),
            lost: None,
            left: None,
            lazy: None,
            reattach: None,
        };
        Rc::new(RefCell::new(shared))
    }

    /// The tree of one plain run: its links' hosts, `settings.node_slots`;
    /// with `lazy`, the listed nodes after the links' (`settings.spawn.nodes`)
    /// too, their daemons started when first needed.
    pub fn for_run(links: Vec<DaemonLink>, up: mpsc::UnboundedReceiver<Up>, settings: &Settings, lazy: Option<crate::controller::lazy::Lazy>) -> SharedRef {
        let slots = |i: usize| settings.node_slots.get(i).copied().unwrap_or(1);
        let mut hosts: Vec<String> = links.iter().map(|l| l.host.clone()).collect();
        if lazy.is_some() {
            hosts.extend(settings.spawn.nodes.iter().skip(links.len()).cloned());
        }
        let first = links.len();
        let table = NodeTable::new(hosts.into_iter().enumerate().map(|(i, h)| (h, slots(i))), settings.fanout).with_first(first);
        let shared = Shared::new(table, links, up);
        shared.borrow_mut().lazy = lazy;
        shared
    }

    /// Links to daemons that joined the running tree (`dpm boot --add`, a
    /// lazy node's).
    pub fn add_links(&mut self, links: impl IntoIterator<Item = DaemonLink>) {
        self.links.extend(links);
    }

    /// The links to the tree's nodes.
    pub fn links(&self) -> &[DaemonLink] {
        &self.links
    }

    /// Each lost node (and why) is told to `tx` once the runs heard of it.
    pub fn report_losses(&mut self, tx: mpsc::UnboundedSender<(NodeId, String)>) {
        self.lost = Some(tx);
    }

    /// The tree re-forms around a lost interior node: the nodes below it
    /// wait for their daemons to re-attach; one still waiting after
    /// [`reattach_wait`] is given to the tree as lost.
    pub fn reform(shared: &SharedRef) {
        let mut s = shared.borrow_mut();
        s.tree.shared_mut().nodes.enable_reform();
        s.reattach = Some(Rc::downgrade(shared));
    }

    /// The daemon of detached `node` re-attached on a link of its own
    /// (`down`): the tree takes it back (see [`Tree::reattach`]) and its
    /// subtree's messages go down that link from now on.
    pub fn reattach(&mut self, node: NodeId, down: mpsc::UnboundedSender<dpm_proto::link::Down>) -> Result<Vec<NodeId>, crate::node_table::ReattachError> {
        // What came up before (its parent's loss) is heard first.
        self.pump();
        let back = self.tree.reattach(node)?;
        let below = self.tree.shared().nodes.subtree(node);
        for link in self.links.iter_mut().filter(|l| below.contains(&l.node)) {
            link.via = down.clone();
        }
        Ok(back)
    }

    /// Each drained node that left (its line) is told to `tx`, its link shut.
    pub fn report_departures(&mut self, tx: mpsc::UnboundedSender<String>) {
        self.left = Some(tx);
    }

    /// One event of the tree, its effects carried out here.
    pub fn event<T>(&mut self, event: impl FnOnce(&mut Tree, &mut dyn TreeEffects) -> T) -> T {
        let Shared { tree, links, io, pool_woken, lost, left, lazy, reattach, .. } = self;
        event(tree, &mut Driver { links, lazy, io, pool_woken, lost, left, reattach })
    }

    /// Hand the tree what the daemons sent and no one took yet (before an
    /// input of a run: what came up first is heard first).
    pub(super) fn pump(&mut self) {
        while let Some(Ok(envelope)) = self.up.as_mut().map(|up| up.try_recv()) {
            self.event(|tree, fx| tree.on_up(fx, envelope));
        }
    }
}

/// The tree's effects in a live tree.
struct Driver<'a> {
    links: &'a [DaemonLink],
    lazy: &'a mut Option<crate::controller::lazy::Lazy>,
    io: &'a mut HashMap<u32, RunIo>,
    pool_woken: &'a Notify,
    lost: &'a Option<mpsc::UnboundedSender<(NodeId, String)>>,
    reattach: &'a Option<std::rc::Weak<RefCell<Shared>>>,
    left: &'a Option<mpsc::UnboundedSender<String>>,
}

impl TreeEffects for Driver<'_> {
    /// Down `node`'s link; held for a daemon that starts now if it has none.
    fn send(&mut self, node: NodeId, msg: ToDaemon) {
        match (find_link(self.links, node), self.lazy.as_mut()) {
            (Some(link), _) => {
                link.send(msg);
            }
            (None, Some(lazy)) => lazy.hold(node, msg),
            (None, None) => {}
        }
    }
    fn output(&mut self, owner: u32, node: NodeId, job: JobId, rank: Rank, stream: Stream, data: &[u8]) {
        if let Some(io) = self.io.get_mut(&owner) {
            io.output.write(node, job, rank, stream, data);
        }
    }
    fn flush_output(&mut self, owner: u32, job: JobId, rank: Rank) {
        if let Some(io) = self.io.get_mut(&owner) {
            io.output.flush_rank(job, rank);
        }
    }
    fn tool_output(&mut self, owner: u32, stream: Stream, data: &[u8]) {
        if let Some(io) = self.io.get(&owner) {
            io.output.console().write(stream == Stream::Stderr, data.to_vec(), None);
        }
    }
    fn say(&mut self, owner: u32, line: &str) {
        match self.io.get(&owner) {
            Some(io) => io.output.console().say(line),
            None => tracing::debug!("for a run gone: {line}"),
        }
    }
    fn now_micros(&self) -> u64 {
        dpm_daemon::now_micros()
    }
    fn arm(&mut self, owner: u32, timer: Timer, after: Duration) {
        if let Some(io) = self.io.get_mut(&owner) {
            io.timers.insert(timer, Instant::now() + after);
            io.changed.notify_one();
        }
    }
    fn finished(&mut self, owner: u32, _code: i32) {
        if let Some(io) = self.io.get(&owner) {
            io.changed.notify_one();
        }
    }
    fn wake_pool(&mut self, _at: u64) {
        self.pool_woken.notify_one();
    }
    fn files(&self) -> &dyn crate::plan::Files {
        &crate::plan::HostFiles
    }
    fn procs_started(&mut self, owner: u32, job: JobId, procs: Vec<ProcInfo>, held: bool) {
        // Told after the event (`Controller::tell_tools`): the breakpoint
        // may hold this process for as long as a debugger likes.
        if let Some(io) = self.io.get_mut(&owner) {
            io.announced.push(Announced { job, procs, held });
            io.changed.notify_one();
        }
    }
    fn nodes_lost(&mut self, node: NodeId, why: &str, _lost: &[NodeId]) {
        if let Some(tx) = self.lost {
            let _ = tx.send((node, why.to_string()));
        }
    }
    fn nodes_detached(&mut self, node: NodeId, detached: &[NodeId]) {
        let Some(shared) = self.reattach.clone() else { return };
        let (waiting, parent) = (detached.to_vec(), node);
        tokio::task::spawn_local(async move {
            let wait = reattach_wait();
            tokio::time::sleep(wait).await;
            let Some(shared) = shared.upgrade() else { return };
            let mut s = shared.borrow_mut();
            s.pump();
            for node in waiting {
                // One that re-attached meanwhile (or was lost) is not waiting.
                if s.tree.shared().nodes.state(node) == Some(crate::node_table::NodeState::Detached) {
                    let error = format!("its parent, node {}, was lost and its daemon did not re-attach within {:.0} s", parent.0, wait.as_secs_f64());
                    s.event(|tree, fx| tree.on_up(fx, Up::Lost { node, error }));
                }
            }
        });
    }
    fn node_left(&mut self, node: NodeId, line: &str) {
        // A top-level node's link is its own: the shutdown reaches it alone.
        if let Some(link) = find_link(self.links, node) {
            link.shutdown();
        }
        if let Some(tx) = self.left {
            let _ = tx.send(line.to_string());
        }
    }
    fn up_for_run(&mut self, owner: u32, node: NodeId, msg: &ToLauncher) {
        let Some(io) = self.io.get_mut(&owner) else { return };
        if matches!(msg, ToLauncher::RankReport { .. }) {
            // It may end a listing of the ranks' states (the run's table is due).
            io.changed.notify_one();
        }
        let ToLauncher::Exited(exit) = msg else { return };
        if let Some((Some(first), codes)) = &mut io.exit_codes {
            if exit.job == *first {
                codes.record(node, exit.rank, &exit.status);
            }
        }
        io.ranks_ended = true;
        io.changed.notify_one();
    }
    fn wants_place(&self, owner: u32, job: JobId, node: NodeId) -> bool {
        self.io.get(&owner).is_some_and(|io| io.output.wants_places() && !io.output.knows_place(job, node))
    }
    fn place(&mut self, owner: u32, job: JobId, node: NodeId, index: usize, host: &str) {
        if let Some(io) = self.io.get_mut(&owner) {
            io.output.place(job, node, crate::output::NodePlace { index, host: host.to_string() });
        }
    }
}

/// Hand each message from the daemons to the tree (which sends it where
/// its one rule says); when their stream ends, every run hears so.
pub async fn dispatch(shared: SharedRef) {
    loop {
        let next = std::future::poll_fn(|cx| match shared.borrow_mut().up.as_mut() {
            Some(up) => up.poll_recv(cx),
            None => std::task::Poll::Ready(None),
        })
        .await;
        let mut s = shared.borrow_mut();
        match next {
            Some(envelope) => s.event(|tree, fx| tree.on_up(fx, envelope)),
            None => {
                s.daemons_gone = true;
                s.event(|tree, fx| tree.on_daemons_gone(fx));
                return;
            }
        }
    }
}

/// Kill every job the tree's pool holds and wait (at most 5 s) until their
/// ends are heard and their nodes have forgotten them (their MPICH segments
/// go then): the end of a tree (`dpm down`, a plain run's end).
pub async fn drain_pool(shared: &SharedRef) {
    shared.borrow_mut().event(|tree, fx| tree.drop_pooled(fx));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !shared.borrow().tree.shared().pool.is_empty() {
        if Instant::now() >= deadline {
            tracing::warn!("warm-spawn pooled jobs still going after 5 s; shutting the daemons down under them");
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The pool's timer: sleeps until the deadline it asked for (re-read each
/// time one is armed), then gives it to [`Tree::on_pool_timer`]. Runs for
/// the tree's life (a boot's; a plain run's pool keeps nothing, so never asks).
pub async fn drive_pool_timer(shared: SharedRef) {
    let woken = shared.borrow().pool_woken.clone();
    loop {
        let wake = shared.borrow().tree.pool_wake();
        let Some(at) = wake else {
            woken.notified().await;
            continue;
        };
        let after = Duration::from_micros(at.saturating_sub(dpm_daemon::now_micros()));
        tokio::select! {
            () = tokio::time::sleep(after) => shared.borrow_mut().event(|tree, fx| tree.on_pool_timer(fx, at)),
            () = woken.notified() => {}
        }
    }
}
