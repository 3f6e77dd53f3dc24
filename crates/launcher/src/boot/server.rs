//! The boot server: the root of a persistent daemon tree. It starts the
//! tree, listens on the control socket (its owner's uid only), runs each
//! submitted job with a [`Controller`] of its own on the shared tree (the
//! job's settings from the submitted [`RunConfig`], built by
//! [`config::settings`] as for a cold run), answers `dpm status`, and on
//! `dpm down` or a signal ends its runs and the daemons. A lost node ends
//! only the runs with ranks there (each as a plain run ends); the boot goes
//! on with the rest, never placing on it again, until no node is left.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, Notify};

use dpm_kvs::Rank;
use dpm_proto::control::{BootStatus, NodeStatus, RunStatus, Submit, ToClient, ToServer, CONTROL_VERSION};
use dpm_proto::frame::{read_frame, write_frame};
use dpm_proto::LaunchJob;

use crate::cli::RunOptions;
use crate::config::{self, RunConfig};
use crate::controller::{self, Controller, DaemonLink, Input, Settings, Shared, SharedRef};
use crate::error::{Error, UsageError};
use crate::node_table::{NodeState, NodeTable};
use crate::output;
use crate::{hosts, nodes, plan};

use super::BootFiles;

pub(super) struct Server {
    shared: SharedRef,
    /// Starting daemons into the running tree (`dpm boot --add`).
    growth: super::grow::Growth,
    /// `NAME.json`, written again after each change of the nodes.
    rendezvous: Rc<super::rendezvous::Rendezvous>,
    /// The nodes' slots were given (see [`hosts::NodeChoice`]).
    slots_known: bool,
    /// The batch allocation the nodes came from, for `dpm status`.
    allocation: Option<String>,
    fanout: usize,
    /// `dpm boot --warm-spawn[=N]`: the default of its runs.
    warm_spawn: Option<usize>,
    /// `dpm boot --pmi` (or its `DPM_PMI`): the flavour of runs whose
    /// client was given none.
    pmi: Option<crate::pmi_choice::PmiFlavour>,
    started: Instant,
    /// Each live run's inputs, to end it when the boot goes down.
    runs: RefCell<HashMap<u64, mpsc::UnboundedSender<Input>>>,
    next_run: Cell<u64>,
    going_down: Cell<bool>,
    runs_changed: Notify,
    down: Notify,
}

/// Serve until `dpm down`, a signal or a lost node; 0 after a clean stop.
pub(crate) async fn serve(opts: RunOptions, config: RunConfig, files: BootFiles, ready_on_stdout: bool) -> Result<i32, Error> {
    let host = opts.localhost.clone().unwrap_or_else(crate::machine::this_host);
    if let Some(iface) = &config.iface {
        dpm_daemon::iface::choose(iface.clone());
    }
    let choice = hosts::nodes_and_bootstrap(&opts, &config, &host)?;
    let allocation = choice.describe_allocation();
    let hosts::NodeChoice { nodes: node_list, bootstrap, slots_known, .. } = choice;
    let fanout = bootstrap.effective_fanout(config.fanout, node_list.len());
    let secret = dpm_proto::auth::Secret::generate().map_err(|e| Error::failed(e.to_string()))?;
    // With daemons below daemons, those below a lost one re-attach here.
    let reattach = match &bootstrap {
        nodes::Bootstrap::Tree(b) if fanout < node_list.len() => match super::reform::Reattach::bind(&node_list, b).await {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::warn!("no re-attach listener ({e}): a lost node takes the nodes below it with it");
                None
            }
        },
        _ => None,
    };
    let rejoin = reattach.as_ref().map(|r| r.addr.clone());
    let reach = nodes::Reach { rejoin, start_timeout: config.start_timeout };
    let daemons = nodes::start_with_secret(&node_list, &bootstrap, fanout, false, config.verbose, &secret, reach).await?;
    let joins = daemons.joins();
    let growth = super::grow::Growth {
        bootstrap: match &bootstrap {
            nodes::Bootstrap::Tree(b) => Some(b.clone()),
            _ => None,
        },
        secret: secret.clone(),
        joins: daemons.joins(),
        verbose: config.verbose,
        children: RefCell::new(Vec::new()),
    };
    let (links, up, waiter) = daemons.split();
    let shared = Shared::new(NodeTable::new(node_list.iter().map(|n| (n.host.clone(), n.slots)), fanout), links.clone(), up);
    let (lost_tx, mut lost_rx) = mpsc::unbounded_channel();
    let (left_tx, mut left_rx) = mpsc::unbounded_channel::<String>();
    // `--warm-spawn=N`: the runs' unclaimed pooled jobs are kept for later
    // runs, N per shape, for `DPM_WARM_IDLE` (`run::Pool`).
    {
        let mut s = shared.borrow_mut();
        s.tree.shared_mut().pool.set_policy(config.job.warm_spawn.unwrap_or(0), config.warm_idle);
        s.report_losses(lost_tx);
        s.report_departures(left_tx);
    }
    tokio::task::spawn_local(controller::drive_pool_timer(shared.clone()));
    tokio::task::spawn_local(controller::dispatch(shared.clone()));
    let rendezvous = Rc::new(super::rendezvous::Rendezvous::new(files.rendezvous.clone(), fanout));
    if let Some(reattach) = reattach {
        tracing::info!("daemons below a lost node re-attach at {}", reattach.addr);
        Shared::reform(&shared);
        tokio::task::spawn_local(reattach.serve(shared.clone(), secret, joins, rendezvous.clone()));
    }

    let _ = std::fs::remove_file(&files.socket);
    let listener = match UnixListener::bind(&files.socket) {
        Ok(l) => l,
        Err(e) => {
            shutdown(&links, waiter, &growth).await;
            return Err(Error::failed(format!("cannot listen on {}: {e}", files.socket.display())));
        }
    };
    // The directory is private already; the socket is too, in case it moves.
    let _ = std::fs::set_permissions(&files.socket, std::fs::Permissions::from_mode(0o600));
    rendezvous.write(&shared.borrow().tree.shared().nodes);
    let summary = format!("{} node{} up (pid {})", node_list.len(), if node_list.len() == 1 { "" } else { "s" }, std::process::id());
    tracing::info!("{summary}; listening on {}", files.socket.display());
    if ready_on_stdout {
        say_ready_and_close_stdout(&summary);
    }

    let server = Rc::new(Server {
        shared,
        growth,
        rendezvous,
        slots_known,
        allocation,
        fanout,
        warm_spawn: config.job.warm_spawn,
        pmi: config.pmi,
        started: Instant::now(),
        runs: RefCell::new(HashMap::new()),
        next_run: Cell::new(0),
        going_down: Cell::new(false),
        runs_changed: Notify::new(),
        down: Notify::new(),
    });
    let mut inputs = controller::local_inputs(false, false, false);
    let me = nix::unistd::getuid().as_raw();
    // Why the boot ends, when it is not `dpm down` or a signal.
    let mut lost = None;
    // Another user may connect as often as they like: a line a second.
    let origin = tokio::time::Instant::now();
    let mut refusals = dpm_daemon::refusals::RefusalLog::default();
    loop {
        let summary = refusals.due().map(|d| origin + d);
        tokio::select! {
            conn = listener.accept() => match conn {
                Ok((stream, _)) => {
                    let why = match stream.peer_cred() {
                        Ok(cred) if cred.uid() == me => {
                            tokio::task::spawn_local(serve_client(server.clone(), stream));
                            continue;
                        }
                        Ok(cred) => format!("from another user (uid {}, pid {:?})", cred.uid(), cred.pid()),
                        Err(e) => format!("no peer credentials: {e}"),
                    };
                    if let Some(line) = refusals.refused(origin.elapsed(), why) {
                        tracing::warn!("refused a control connection: {line}");
                    }
                }
                Err(e) => tracing::warn!("accept on the control socket: {e}"),
            },
            _ = tokio::time::sleep_until(summary.unwrap_or(origin)), if summary.is_some() => {
                if let Some(line) = refusals.flush(origin.elapsed()) {
                    tracing::warn!("control connections: {line}");
                }
            }
            _ = server.down.notified() => {
                tracing::info!("dpm down: stopping");
                break;
            }
            // A drained node emptied and left (its link is shut already).
            Some(line) = left_rx.recv() => {
                tracing::info!("{line}");
                server.write_rendezvous();
            }
            // Recorded in the tree before any run heard it, told here last.
            Some((node, error)) = lost_rx.recv() => {
                let (host, left) = {
                    let shared = server.shared.borrow();
                    let nodes = &shared.tree.shared().nodes;
                    // Detached nodes (below it, re-attaching) count: their runs go on.
                    let left = nodes.ids().filter(|&n| matches!(nodes.state(n), Some(NodeState::Up | NodeState::Draining | NodeState::Detached))).count();
                    (nodes.host(node).to_string(), left)
                };
                if left == 0 {
                    tracing::error!("{node} ({host}) was lost: {error}; no node is left, the boot ends");
                    lost = Some(format!("{node} ({host}) of the boot was lost: {error}; no node is left, the boot ends"));
                    break;
                }
                tracing::warn!("{node} ({host}) was lost: {error}; the runs with ranks there end, the boot goes on with {left} node(s)");
                server.write_rendezvous();
            }
            Some(Input::Signal(sig)) = inputs.recv() => {
                tracing::info!("got {}; stopping", controller::signal_name(sig));
                break;
            }
        }
    }
    // No new connections; the files go first so that no `dpm run` finds a
    // boot on its way down.
    server.going_down.set(true);
    drop(listener);
    let _ = std::fs::remove_file(&files.socket);
    server.rendezvous.close();
    end_runs(&server, lost).await;
    controller::drain_pool(&server.shared).await;
    let links = server.shared.borrow().links().to_vec();
    shutdown(&links, waiter, &server.growth).await;
    Ok(0)
}

fn say_ready_and_close_stdout(summary: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "ready {summary}");
    let _ = out.flush();
    // The parent stops reading; nothing else goes there.
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        use std::os::fd::AsRawFd;
        let _ = nix::unistd::dup2(null.as_raw_fd(), libc::STDOUT_FILENO);
    }
}

/// Ask every run to end (SIGTERM, then SIGKILL after its grace) and wait:
/// as a signal (`dpm down`, the boot server's own), or for a lost node.
async fn end_runs(server: &Server, lost: Option<String>) {
    for tx in server.runs.borrow().values() {
        let _ = tx.send(lost.clone().map_or(Input::Signal(libc::SIGTERM), Input::End));
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !server.runs.borrow().is_empty() {
        let changed = server.runs_changed.notified();
        if tokio::time::timeout_at(deadline, changed).await.is_err() {
            tracing::warn!("runs still going after 10 s; shutting the daemons down under them");
            return;
        }
    }
}

async fn shutdown(links: &[DaemonLink], waiter: nodes::DaemonsWaiter, growth: &super::grow::Growth) {
    for link in links {
        link.shutdown();
    }
    waiter.wait().await;
    growth.wait().await;
}

impl Server {
    /// The rendezvous file for the nodes as they are now (not once the
    /// boot goes down: its files are gone then).
    fn write_rendezvous(&self) {
        if !self.going_down.get() {
            self.rendezvous.write(&self.shared.borrow().tree.shared().nodes);
        }
    }
}

/// One control connection: a run, a status query or `dpm down`.
async fn serve_client(server: Rc<Server>, stream: UnixStream) {
    let (mut rd, mut wr) = stream.into_split();
    let first = match tokio::time::timeout(Duration::from_secs(10), read_frame::<_, ToServer>(&mut rd)).await {
        Ok(Ok(m)) => m,
        Ok(Err(e)) => return tracing::warn!("control connection: {e}"),
        Err(_) => return tracing::warn!("control connection: no request within 10 s"),
    };
    let version = match &first {
        ToServer::Run { version, .. }
        | ToServer::Status { version }
        | ToServer::Down { version }
        | ToServer::Add { version, .. }
        | ToServer::Drain { version, .. } => Some(*version),
        _ => None,
    };
    if version != Some(CONTROL_VERSION) {
        let why = format!("this boot speaks control protocol {CONTROL_VERSION} (dpm {}); got {version:?}", env!("CARGO_PKG_VERSION"));
        let _ = write_frame(&mut wr, &ToClient::Refused(why)).await;
        return;
    }
    match first {
        ToServer::Run { submit, .. } => {
            if server.going_down.get() {
                let _ = write_frame(&mut wr, &ToClient::Refused("the boot is going down".into())).await;
                return;
            }
            run_for_client(&server, *submit, rd, wr).await;
        }
        ToServer::Status { .. } => {
            let _ = write_frame(&mut wr, &ToClient::Status(status(&server))).await;
        }
        ToServer::Add { nodes, bootstrap, timeout_secs, manual, .. } => {
            // Notes (a manual join's commands) go out while the join waits.
            let (note_tx, mut notes) = mpsc::unbounded_channel::<String>();
            let writer = tokio::task::spawn_local(async move {
                while let Some(line) = notes.recv().await {
                    if write_frame(&mut wr, &ToClient::Note(line)).await.is_err() {
                        break;
                    }
                }
                wr
            });
            let how = Join { bootstrap, within: timeout_secs.map(Duration::from_secs), manual };
            let answer = match add(&server, nodes, how, note_tx).await {
                Ok(lines) => ToClient::Changed(lines),
                Err(why) => ToClient::Refused(why),
            };
            if let Ok(mut wr) = writer.await {
                let _ = write_frame(&mut wr, &answer).await;
            }
        }
        ToServer::Drain { hosts, force, .. } => {
            let drained = server.shared.borrow_mut().event(|tree, fx| tree.drain(fx, &hosts, force));
            let answer = match drained {
                Ok(lines) => {
                    // (A node that left at once is logged as it leaves, too.)
                    for line in &lines {
                        tracing::info!("{line}");
                    }
                    server.write_rendezvous();
                    ToClient::Changed(lines)
                }
                Err(why) => ToClient::Refused(why),
            };
            let _ = write_frame(&mut wr, &answer).await;
        }
        ToServer::Down { .. } => {
            server.down.notify_one();
            // The connection closes when the server exits: that is the answer.
            std::future::pending::<()>().await;
        }
        _ => {}
    }
}

/// How `dpm boot --add` starts its daemons.
struct Join {
    /// The way the command named (`None`: the boot's own).
    bootstrap: Option<dpm_proto::tree::Bootstrap>,
    /// `--connect-timeout` (`None`: [`crate::controller::lazy::JOIN_TIMEOUT`],
    /// or, by hand, [`crate::manual::DEFAULT_TIMEOUT`]).
    within: Option<Duration>,
    /// `-launcher manual`: the user starts them.
    manual: Option<dpm_proto::control::ManualJoin>,
}

/// `dpm boot --add`: the nodes into the table (taking nothing until their
/// daemons are in), their daemons started through the boot's way (or the
/// one the command named; by hand with `-launcher manual`, the commands
/// sent to `notes`) and linked; refused whole, nothing left behind, if one
/// cannot start or connect in time.
async fn add(server: &Server, nodes: Vec<(String, u32)>, how: Join, notes: mpsc::UnboundedSender<String>) -> Result<Vec<String>, String> {
    if server.going_down.get() {
        return Err("the boot is going down".into());
    }
    let bootstrap = how.bootstrap.or_else(|| server.growth.bootstrap.clone());
    if bootstrap.is_none() && how.manual.is_none() {
        return Err("this boot's daemons were not started by fork, ssh, srun or a batch agent: say how to start the new ones (-launcher)".into());
    }
    let (ids, hosts) = {
        let mut shared = server.shared.borrow_mut();
        let ids = shared.tree.join(&nodes).map_err(|e| e.to_string())?;
        let table = &shared.tree.shared().nodes;
        (ids, table.ids().map(|n| table.host(n).to_string()).collect::<Vec<_>>())
    };
    let started = match (&how.manual, bootstrap) {
        (Some(manual), _) => {
            let waited: Vec<(dpm_kvs::NodeId, String)> = ids.iter().map(|&n| (n, hosts[n.0].clone())).collect();
            let within = how.within.unwrap_or(crate::manual::DEFAULT_TIMEOUT);
            server.growth.wait_manual(&waited, manual, within, &mut |line| drop(notes.send(line.to_string()))).await
        }
        (None, Some(bootstrap)) => server.growth.start(&ids, hosts, &bootstrap, how.within.unwrap_or(crate::controller::lazy::JOIN_TIMEOUT)).await,
        (None, None) => Err("no way to start the new daemons".into()),
    };
    drop(notes);
    match started {
        Ok(links) => {
            let mut shared = server.shared.borrow_mut();
            shared.add_links(links);
            let said = shared.tree.joined(&ids);
            for line in &said {
                tracing::info!("{line}");
            }
            drop(shared);
            server.write_rendezvous();
            Ok(said)
        }
        Err(e) => {
            server.shared.borrow_mut().tree.unjoin(&ids);
            tracing::warn!("dpm boot --add: {e}");
            Err(format!("cannot add {}: {e}", nodes.iter().map(|n| n.0.as_str()).collect::<Vec<_>>().join(", ")))
        }
    }
}

fn status(server: &Server) -> BootStatus {
    let s = server.shared.borrow();
    let shared = s.tree.shared();
    let table = &shared.nodes;
    let nodes = table
        .ids()
        .map(|n| NodeStatus {
            host: table.host(n).to_string(),
            slots: table.slots(n),
            load: table.load(n),
            lost: table.lost_reason(n).map(str::to_string),
            state: match table.state(n) {
                Some(NodeState::Up) | None => "up",
                Some(NodeState::Draining) => "draining",
                Some(NodeState::Lost) => "lost",
                Some(NodeState::Released) => "released",
                Some(NodeState::Joining) => "joining",
                Some(NodeState::Detached) => "detached (its parent was lost; re-attaching)",
            }
            .to_string(),
        })
        .collect();
    let mut by_owner: HashMap<u32, Vec<(u32, String, u32)>> = HashMap::new();
    for (job, (owner, kvsname, size)) in &shared.jobs {
        by_owner.entry(*owner).or_default().push((job.0, kvsname.clone(), *size));
    }
    // Pooled jobs: the run's they were made for, or, kept for later runs,
    // the boot's own (`client_pid` 0).
    for (job, kvsname, size, owner) in shared.pool.listed() {
        by_owner.entry(owner.unwrap_or(0)).or_default().push((job.0, kvsname, size));
    }
    let mut runs: Vec<RunStatus> = by_owner
        .into_iter()
        .map(|(client_pid, jobs)| {
            let ranks = jobs.iter().filter_map(|(job, ..)| Some((*job, shared.ranks.get(&dpm_kvs::JobId(*job))?.clone()))).collect();
            // A run's client forwards the states signal to its run here (not
            // the boot's own pooled jobs, `client_pid` 0).
            let states_signal = (client_pid != 0).then(crate::run_table::states_signal);
            let states_listed = shared.states_listed.get(&client_pid).copied().unwrap_or(0);
            RunStatus { client_pid, jobs, ranks, states_signal, states_listed }
        })
        .collect();
    runs.sort_by_key(|r| r.jobs.first().map(|j| j.0));
    BootStatus {
        server_pid: std::process::id(),
        uptime_secs: server.started.elapsed().as_secs_f64(),
        fanout: server.fanout,
        nodes,
        runs,
        allocation: server.allocation.clone(),
        slots_known: server.slots_known,
    }
}

/// Run a submitted job for its client: its output goes back over the
/// connection, its signals and stdin come in; a client that goes away has
/// its job ended (SIGTERM, then SIGKILL after the grace). The connection is
/// written by a task of the run's own: a client that stops reading blocks
/// only that task — and, through the run's output windows, its ranks —
/// never the server or other runs.
async fn run_for_client(server: &Rc<Server>, mut submit: Submit, mut rd: tokio::net::unix::OwnedReadHalf, wr: tokio::net::unix::OwnedWriteHalf) {
    let (sink, drain) = output::sink();
    let (tools_tx, tools_rx) = mpsc::unbounded_channel();
    let writer = tokio::task::spawn_local(write_to_client(drain, tools_rx, wr));
    let (in_tx, in_rx) = mpsc::unbounded_channel::<Input>();
    let id = server.next_run.get();
    server.next_run.set(id + 1);
    server.runs.borrow_mut().insert(id, in_tx.clone());
    let reader = tokio::task::spawn_local(async move {
        loop {
            let input = match read_frame::<_, ToServer>(&mut rd).await {
                Ok(ToServer::Signal(sig)) => Input::Signal(sig),
                Ok(ToServer::Stdin(data)) => Input::Stdin(data),
                Ok(ToServer::Continue { job, tool }) => Input::Continue(dpm_kvs::JobId(job), tool),
                Ok(_) => continue,
                Err(_) => {
                    let _ = in_tx.send(Input::Signal(libc::SIGTERM));
                    return;
                }
            };
            if in_tx.send(input).is_err() {
                return;
            }
        }
    });

    let last = match RunConfig::from_submit(&submit, server.fanout).and_then(|config| with_boot_pmi(config, server.pmi, &mut submit)) {
        Ok(mut config) => {
            config.job.warm_spawn = config.job.warm_spawn.or(server.warm_spawn);
            let (settings, launch_of) = settings_for(server, &config, &submit);
            let mut controller = Controller::new(settings, server.shared.clone(), sink);
            controller.tell_client(tools_tx);
            controller.set_failure_policy(config.job.failure_policy);
            controller.set_output_extras(config.job.prepend.clone(), config.job.print_all_exitcodes);
            controller.submit(submit.procs.len(), |job, kvsname, nodes| launch_of(job, kvsname, submit, nodes));
            // Returns once the run's output is written to the client.
            ToClient::Exit(controller.run(config.job.timeout, in_rx).await)
        }
        Err(e) => {
            // The writer ends when the sink is gone: without this drop a
            // refused run's client would wait for ever.
            drop(sink);
            ToClient::Refused(e.to_string())
        }
    };
    if let Ok(Some(mut wr)) = writer.await {
        let _ = write_frame(&mut wr, &last).await;
    }
    reader.abort();
    server.runs.borrow_mut().remove(&id);
    server.runs_changed.notify_waiters();
}

/// Write a run's output, and its jobs' process tables (MPIR in the
/// client), to its client until the run drops its console; the connection
/// back, unless the client went away.
async fn write_to_client(
    mut drain: output::Drain,
    mut tools: mpsc::UnboundedReceiver<controller::Announced>,
    mut wr: tokio::net::unix::OwnedWriteHalf,
) -> Option<tokio::net::unix::OwnedWriteHalf> {
    let mut open = true;
    loop {
        tokio::select! {
            biased;
            Some(a) = tools.recv() => {
                if open {
                    open = write_frame(&mut wr, &ToClient::Procs { job: a.job.0, procs: a.procs, held: a.held }).await.is_ok();
                }
            }
            chunk = drain.next() => {
                let Some(output::Chunk { is_err, data, written, .. }) = chunk else { break };
                if open && !data.is_empty() {
                    let msg = if is_err { ToClient::Stderr(data) } else { ToClient::Stdout(data) };
                    // The client is gone: its reader ends the run; the rest is dropped.
                    open = write_frame(&mut wr, &msg).await.is_ok();
                }
                drain.done(written);
            }
        }
    }
    open.then_some(wr)
}

/// Makes the run's first job, placed with the nodes' current load.
/// A run whose client said no flavour gets the boot's `--pmi`, chosen
/// again from its programs (the client's auto choice is replaced; a
/// refusal, e.g. `simple` for an Open MPI program, refuses the run).
fn with_boot_pmi(mut config: RunConfig, boot: Option<crate::pmi_choice::PmiFlavour>, submit: &mut Submit) -> Result<RunConfig, UsageError> {
    // The boot's -iface reaches its runs' ranks as a cold run's would.
    if let Some(iface) = dpm_daemon::iface::chosen() {
        for env in submit.apps.iter_mut().map(|a| &mut a.env).chain([&mut submit.spawn_env]) {
            config::set_iface_var(env, &iface.name);
        }
    }
    if let (true, Some(flavour)) = (submit.pmi_default, boot) {
        config.pmi = Some(flavour);
        // The PMIx watch too: the boot's choice says whether the job is watched.
        config.choose_pmi(&mut submit.apps).map_err(|e| UsageError(e.to_string()))?;
    }
    Ok(config)
}

type LaunchOf = Box<dyn FnOnce(dpm_kvs::JobId, String, Submit, &NodeTable) -> LaunchJob>;

/// The run's settings on this tree, and how to make its first job.
fn settings_for(server: &Server, config: &RunConfig, submit: &Submit) -> (Settings, LaunchOf) {
    let (slots, total, nodes) = {
        let shared = server.shared.borrow();
        let table = &shared.tree.shared().nodes;
        let nodes: Vec<nodes::Node> = table.ids().map(|n| nodes::Node { host: table.host(n).to_string(), slots: table.slots(n) }).collect();
        // Lost and draining nodes take nothing: their slots are no part of the universe.
        (table.all_slots(), table.usable_slots(), nodes)
    };
    let universe_size = config::run_universe(config, total, server.slots_known, submit.procs.len() as u32);
    let spawn = config::spawn_context(
        submit.spawn_env.clone(),
        PathBuf::from(&submit.cwd),
        submit.host.clone(),
        &nodes,
        submit.apps.first().is_some_and(|a| a.node_env),
    );
    let mut settings = config::settings(config, universe_size, spawn, slots.clone(), server.fanout, submit.client_pid);
    settings.heap_nodes = server.shared.borrow().tree.shared().nodes.first();
    // A universe of the boot's slots (no `-usize`) grows and shrinks with the boot.
    settings.universe_follows = (config.job.universe_size.is_none() && universe_size >= 0).then_some(submit.procs.len() as u32);
    let (ppn, map_by_node, pmi_mode, kvs, binding) =
        (config.job.ppn, config.job.map_by_node, config.job.pmi_mode, config.job.kvs, Box::new(config.job.binding.clone()));
    let (pmix_watch, hold) = (config.job.pmix_watch, config.job.hold);
    let launch_of: LaunchOf = Box::new(move |job, kvsname, submit: Submit, nodes: &NodeTable| {
        // Other runs' processes hold slots: the placer puts a run that fits
        // into the free ones. The run reserves the placement when it launches.
        let node_of = nodes.plan_booted(submit.procs.len(), ppn, map_by_node);
        let planned = plan::PlannedJob { apps: submit.apps, procs: submit.procs, appnums: submit.appnums };
        let launch = planned.into_launch(job, kvsname, universe_size, node_of, pmi_mode, kvs);
        LaunchJob { stdin_rank: Some(Rank(0)), binding: binding.clone(), pmix_watch, hold, ..launch }
    });
    (settings, launch_of)
}
