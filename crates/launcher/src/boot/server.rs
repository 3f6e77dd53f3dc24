//! Persistent daemons: `dpm boot`, `dpm status`, `dpm down`, and `dpm run`
//! through a booted tree (paper 002's MPD model: start the daemons once, then
//! launch with no daemon start-up at all).
//!
//! `dpm boot` starts a *boot server* in the background: the root of a daemon
//! tree (the same tree and bootstraps as `dpm run`) that stays up. It listens
//! on a Unix socket in the user's private directory ([`private_dir`]) and
//! checks each peer's uid (SO_PEERCRED); nothing listens on the network. Each
//! `dpm run` that finds the socket plans its job locally (programs, its
//! environment, its directory), submits it, and relays output, signals and
//! stdin; the server runs it with a [`Controller`] of its own. Runs share the
//! tree's name service, job ids and node load, so two separate `dpm run`s can
//! connect by published name and spawns see the load of every run — but each
//! run's failures, aborts and signals touch only its own jobs.
//!
//! A node lost from the tree ends the boot: its runs fail naming the node, the
//! others are ended, the server exits (boot again).
//!
//! [`private_dir`]: crate::private_dir

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, Notify};

use dpm_kvs::Rank;
use dpm_proto::control::{BootStatus, NodeStatus, RunStatus, Submit, ToClient, ToServer, CONTROL_VERSION};
use dpm_proto::frame::{read_frame, write_frame};
use dpm_proto::{LaunchJob, ToDaemon};

use crate::cli::{self, CliError, RunOptions};
use crate::controller::{self, Controller, DaemonLink, Input, Settings, Shared, SharedRef};
use crate::output::{emit, Console};
use crate::{nodes, plan, private_dir, spawn};

pub const BOOT_HELP: &str = "\
Usage: dpm boot [OPTIONS]

Start a persistent daemon tree in the background and return. Later
`dpm run` commands find it and start their jobs with no daemon start-up;
`dpm status` lists its nodes, jobs and load; `dpm down` stops it.

Nodes and bootstrap, as for dpm run:
  -hosts a,b:4 | -f FILE    the nodes (default: this machine; inside a
                            Slurm allocation: its nodes)
  --virtual-nodes N         N daemons on this machine, each a node
  -launcher fork|ssh|slurm|manual
                            how daemons start; --ssh-command CMD
                            (manual: with --foreground; --bind ADDR[:PORT],
                            --connect-timeout SECS)
  --tree-fanout K           children per daemon (default 32)
  --foreground              stay in the foreground (batch scripts, debugging)
  -v                        log more (in the boot's log file)

Files live in $DPM_RUNTIME_DIR, else $XDG_RUNTIME_DIR/dpm, else
/tmp/dpm-<uid> (mode 0700): NAME.sock (control socket, owner only),
NAME.json (rendezvous: pid, nodes), NAME.log. NAME is $DPM_BOOT, else
slurm-<jobid> inside a Slurm allocation, else 'default'.

`dpm run` uses the boot unless it is given nodes or a launcher of its own
(-hosts, -f, --virtual-nodes, -launcher), --pmi-trace, or DPM_NO_BOOT=1.
";

/// Where a boot's files are.
struct BootFiles {
    socket: PathBuf,
    rendezvous: PathBuf,
    log: PathBuf,
}

fn boot_files() -> Result<BootFiles, String> {
    let dir = private_dir::runtime_dir()?;
    let name = match (std::env::var("DPM_BOOT"), std::env::var("SLURM_JOB_ID")) {
        (Ok(n), _) if !n.is_empty() => n,
        (_, Ok(id)) if !id.is_empty() => format!("slurm-{id}"),
        _ => "default".into(),
    };
    if name.contains('/') {
        return Err(format!("DPM_BOOT={name}: a boot name cannot contain '/'"));
    }
    Ok(BootFiles {
        socket: dir.join(format!("{name}.sock")),
        rendezvous: dir.join(format!("{name}.json")),
        log: dir.join(format!("{name}.log")),
    })
}

// ---- dpm boot --------------------------------------------------------------

/// `dpm boot ARGS`.
pub fn boot_command(args: &[String]) -> i32 {
    let boot = match parse_boot(args) {
        Ok(Some(x)) => x,
        Ok(None) => {
            print!("{BOOT_HELP}");
            return 0;
        }
        Err(e) => {
            eprintln!("dpm boot: {e}");
            return 2;
        }
    };
    let files = match boot_files() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("dpm boot: {e}");
            return 1;
        }
    };
    if std::os::unix::net::UnixStream::connect(&files.socket).is_ok() {
        eprintln!("dpm boot: already booted ({}); `dpm down` first", files.socket.display());
        return 1;
    }
    // Manual daemons need the command lines dpm prints while it waits for
    // them: on the terminal, so only in the foreground.
    let launcher = boot.opts.launcher.clone().or_else(|| std::env::var("DPM_LAUNCHER").ok());
    if launcher.as_deref() == Some("manual") && !boot.foreground {
        eprintln!("dpm boot: -launcher manual needs --foreground (it prints the daemons' command lines and waits for them)");
        return 2;
    }
    if boot.foreground {
        crate::init_logging(boot.opts.verbose);
        return crate::block_on_local("dpm boot", serve(boot.opts, files, boot.ready_on_stdout));
    }
    detach(args, &files)
}

/// Start `dpm boot --foreground` as a session of its own, its stderr to the
/// log file; return once it says it is ready (or print why it is not).
fn detach(args: &[String], files: &BootFiles) -> i32 {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("dpm boot: cannot find the dpm executable: {e}");
            return 1;
        }
    };
    let log = match std::fs::OpenOptions::new().create(true).write(true).truncate(true).mode(0o600).open(&files.log) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("dpm boot: {}: {e}", files.log.display());
            return 1;
        }
    };
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("boot").arg("--foreground").arg("--ready-on-stdout").args(args);
    cmd.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::piped()).stderr(log);
    // Its own session: no terminal's hangup or Ctrl-C reaches it.
    // SAFETY: setsid is async-signal-safe.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("dpm boot: cannot start the boot server: {e}");
            return 1;
        }
    };
    let mut line = String::new();
    let _ = BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line);
    if let Some(summary) = line.strip_prefix("ready ") {
        println!("dpm boot: {} (log: {})", summary.trim(), files.log.display());
        return 0;
    }
    let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
    let text = std::fs::read_to_string(&files.log).unwrap_or_default();
    eprint!("{text}");
    eprintln!("dpm boot: the boot server did not start ({status})");
    let _ = std::fs::remove_file(&files.log);
    1
}

struct BootArgs {
    /// The nodes, bootstrap and fan-out, as `dpm run` takes them.
    opts: RunOptions,
    foreground: bool,
    /// Internal: the detached server says "ready" on stdout for its parent.
    ready_on_stdout: bool,
}

/// The options of `dpm boot`: `None` for --help.
fn parse_boot(args: &[String]) -> Result<Option<BootArgs>, String> {
    let mut opts = RunOptions::default();
    let mut foreground = false;
    let mut ready_on_stdout = false;
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        let stripped = arg.trim_start_matches('-');
        let (name, inline) = match stripped.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (stripped, None),
        };
        let mut value = |what: &str| -> Result<String, CliError> {
            if let Some(v) = inline.clone() {
                return Ok(v);
            }
            let v = args.get(i).cloned().ok_or_else(|| CliError::Usage(format!("option '{arg}' needs {what}")))?;
            i += 1;
            Ok(v)
        };
        match name {
            "h" | "help" => return Ok(None),
            "v" | "verbose" => opts.verbose += 1,
            "foreground" => foreground = true,
            "ready-on-stdout" => ready_on_stdout = true,
            _ if cli::node_option(name, arg, &mut value, &mut opts).map_err(|e| match e {
                CliError::Usage(m) => m,
                other => other.to_string(),
            })? => {}
            _ => return Err(format!("unknown option '{arg}' (see dpm boot --help)")),
        }
    }
    Ok(Some(BootArgs { opts, foreground, ready_on_stdout }))
}

// ---- the boot server -------------------------------------------------------

struct Server {
    shared: SharedRef,
    links: Vec<DaemonLink>,
    nodes: Vec<nodes::Node>,
    fanout: usize,
    started: Instant,
    /// Each live run's inputs, to end it when the boot goes down.
    runs: RefCell<HashMap<u64, mpsc::UnboundedSender<Input>>>,
    next_run: Cell<u64>,
    going_down: Cell<bool>,
    runs_changed: Notify,
    down: Notify,
}

async fn serve(opts: RunOptions, files: BootFiles, ready_on_stdout: bool) -> i32 {
    let host = crate::this_host();
    let (node_list, bootstrap) = match crate::nodes_and_bootstrap(&opts, &host) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("dpm boot: {e}");
            return 2;
        }
    };
    let fanout = bootstrap.effective_fanout(crate::fanout(&opts), node_list.len());
    let daemons = match nodes::start(&node_list, &bootstrap, fanout, false, opts.verbose).await {
        Ok(d) => d,
        Err(e) => {
            eprintln!("dpm boot: {e}");
            return 1;
        }
    };
    let (links, up, waiter) = daemons.split();
    let shared = Shared::new(links.len());
    let (lost_tx, mut lost_rx) = mpsc::unbounded_channel();
    tokio::task::spawn_local(controller::dispatch(up, shared.clone(), Some(lost_tx)));

    let _ = std::fs::remove_file(&files.socket);
    let listener = match UnixListener::bind(&files.socket) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("dpm boot: cannot listen on {}: {e}", files.socket.display());
            shutdown(&links, waiter).await;
            return 1;
        }
    };
    // The directory is private already; the socket is too, in case it moves.
    let _ = std::fs::set_permissions(&files.socket, std::fs::Permissions::from_mode(0o600));
    let rendezvous = rendezvous_json(&node_list, fanout);
    if let Err(e) = write_private(&files.rendezvous, &rendezvous) {
        eprintln!("dpm boot: {}: {e}", files.rendezvous.display());
    }
    let summary = format!("{} node{} up (pid {})", node_list.len(), if node_list.len() == 1 { "" } else { "s" }, std::process::id());
    tracing::info!("{summary}; listening on {}", files.socket.display());
    if ready_on_stdout {
        say_ready_and_close_stdout(&summary);
    }

    let server = Rc::new(Server {
        shared,
        links: links.clone(),
        nodes: node_list,
        fanout,
        started: Instant::now(),
        runs: RefCell::new(HashMap::new()),
        next_run: Cell::new(0),
        going_down: Cell::new(false),
        runs_changed: Notify::new(),
        down: Notify::new(),
    });
    let mut inputs = controller::local_inputs(false);
    let me = nix::unistd::getuid().as_raw();
    loop {
        tokio::select! {
            conn = listener.accept() => match conn {
                Ok((stream, _)) => match stream.peer_cred() {
                    Ok(cred) if cred.uid() == me => { tokio::task::spawn_local(serve_client(server.clone(), stream)); }
                    Ok(cred) => tracing::warn!(uid = cred.uid(), pid = ?cred.pid(), "refused a control connection from another user"),
                    Err(e) => tracing::warn!("refused a control connection: no peer credentials: {e}"),
                },
                Err(e) => tracing::warn!("accept on the control socket: {e}"),
            },
            _ = server.down.notified() => {
                tracing::info!("dpm down: stopping");
                break;
            }
            Some((node, error)) = lost_rx.recv() => {
                let host = server.nodes.get(node).map_or("?", |n| n.host.as_str());
                tracing::error!("node {node} ({host}) was lost: {error}; the boot ends");
                break;
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
    let _ = std::fs::remove_file(&files.rendezvous);
    end_runs(&server).await;
    shutdown(&links, waiter).await;
    0
}

fn say_ready_and_close_stdout(summary: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "ready {summary}");
    let _ = out.flush();
    // The parent stops reading; nothing else goes there.
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        use std::os::fd::AsRawFd;
        // SAFETY: dup2 onto our own stdout.
        unsafe { libc::dup2(null.as_raw_fd(), 1) };
    }
}

/// Ask every run to end (SIGTERM, then SIGKILL after its grace) and wait.
async fn end_runs(server: &Server) {
    for tx in server.runs.borrow().values() {
        let _ = tx.send(Input::Signal(libc::SIGTERM));
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

async fn shutdown(links: &[DaemonLink], waiter: nodes::DaemonsWaiter) {
    for link in links {
        let _ = link.tx.send(ToDaemon::Shutdown);
    }
    waiter.wait().await;
}

fn rendezvous_json(nodes: &[nodes::Node], fanout: usize) -> String {
    let nodes: Vec<serde_json::Value> = nodes.iter().map(|n| serde_json::json!({ "host": n.host, "slots": n.slots })).collect();
    let started = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    serde_json::json!({
        "pid": std::process::id(),
        "version": env!("CARGO_PKG_VERSION"),
        "protocol": CONTROL_VERSION,
        "started": started,
        "fanout": fanout,
        "nodes": nodes,
    })
    .to_string()
}

fn write_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new().create(true).write(true).truncate(true).mode(0o600).open(path)?;
    f.write_all(text.as_bytes())?;
    f.write_all(b"\n")
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
        ToServer::Run { version, .. } | ToServer::Status { version } | ToServer::Down { version } => Some(*version),
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
        ToServer::Down { .. } => {
            server.down.notify_one();
            // The connection closes when the server exits: that is the answer.
            std::future::pending::<()>().await;
        }
        _ => {}
    }
}

fn status(server: &Server) -> BootStatus {
    let shared = server.shared.borrow();
    let nodes = server
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| NodeStatus { host: n.host.clone(), slots: n.slots, load: shared.load.get(i).copied().unwrap_or(0) })
        .collect();
    let mut by_owner: HashMap<u32, Vec<(u32, String, u32)>> = HashMap::new();
    for (job, (owner, kvsname, size)) in &shared.jobs {
        by_owner.entry(*owner).or_default().push((job.0, kvsname.clone(), *size));
    }
    let mut runs: Vec<RunStatus> = by_owner.into_iter().map(|(client_pid, jobs)| RunStatus { client_pid, jobs }).collect();
    runs.sort_by_key(|r| r.jobs.first().map(|j| j.0));
    BootStatus {
        server_pid: std::process::id(),
        uptime_secs: server.started.elapsed().as_secs_f64(),
        fanout: server.fanout,
        nodes,
        runs,
    }
}

/// Run a submitted job for its client: its output goes back over the
/// connection, its signals and stdin come in; a client that goes away has
/// its job ended (SIGTERM, then SIGKILL after the grace).
async fn run_for_client(server: &Rc<Server>, submit: Submit, mut rd: tokio::net::unix::OwnedReadHalf, mut wr: tokio::net::unix::OwnedWriteHalf) {
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<ToClient>();
    let writer = tokio::task::spawn_local(async move {
        while let Some(msg) = out_rx.recv().await {
            if write_frame(&mut wr, &msg).await.is_err() {
                break; // the client is gone; its reader ends the run
            }
        }
    });
    let (in_tx, in_rx) = mpsc::unbounded_channel::<Input>();
    let id = server.next_run.get();
    server.next_run.set(id + 1);
    server.runs.borrow_mut().insert(id, in_tx.clone());
    let reader = tokio::task::spawn_local(async move {
        loop {
            let input = match read_frame::<_, ToServer>(&mut rd).await {
                Ok(ToServer::Signal(sig)) => Input::Signal(sig),
                Ok(ToServer::Stdin(data)) => Input::Stdin(data),
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

    let timeout = submit.timeout_secs.map(Duration::from_secs);
    let (settings, launch_of) = settings_for(server, &submit);
    let mut controller = Controller::new(settings, server.links.clone(), server.shared.clone(), Console::Remote(out_tx.clone()));
    let (job, kvsname) = controller.new_job_id();
    let load = server.shared.borrow().load.clone();
    controller.launch(launch_of(job, kvsname, submit, &load));
    let code = controller.run(timeout, in_rx).await;
    let _ = out_tx.send(ToClient::Exit(code));
    drop(out_tx);
    let _ = writer.await;
    reader.abort();
    server.runs.borrow_mut().remove(&id);
    server.runs_changed.notify_waiters();
}

/// Makes the run's first job, placed with the nodes' current load.
type LaunchOf = Box<dyn FnOnce(dpm_kvs::JobId, String, Submit, &[i64]) -> LaunchJob>;

/// The run's settings on this tree, and how to make its first job.
fn settings_for(server: &Server, submit: &Submit) -> (Settings, LaunchOf) {
    let slots: Vec<u32> = server.nodes.iter().map(|n| n.slots).collect();
    let universe_size = submit.universe_size.unwrap_or_else(|| slots.iter().map(|&s| i64::from(s)).sum());
    let settings = Settings {
        label: submit.label,
        kill_grace: Duration::from_secs_f64(submit.kill_grace_secs.max(0.0)),
        universe_size,
        pmi_mode: submit.pmi_mode,
        no_oversubscribe: submit.no_oversubscribe,
        report_placement: submit.report_placement,
        spawn: spawn::SpawnContext {
            base_env: submit.spawn_env.clone(),
            cwd: PathBuf::from(&submit.cwd),
            host: submit.host.clone(),
            nodes: server.nodes.iter().map(|n| n.host.clone()).collect(),
        },
        node_slots: slots.clone(),
        fanout: server.fanout,
        owner: submit.client_pid,
    };
    let launch_of: LaunchOf = Box::new(move |job, kvsname, submit: Submit, load: &[i64]| {
        let size = submit.procs.len() as u32;
        // Other runs' processes hold slots: a run that fits in the free
        // slots goes there (the default placement only), else as usual.
        let default_placement = submit.ppn.is_none() && !submit.map_by_node;
        let node_of = match plan::place_in_free(size as usize, &slots, load) {
            Some(node_of) if default_placement => node_of,
            _ => plan::place(size as usize, &slots, submit.ppn, submit.map_by_node),
        };
        let planned = plan::PlannedJob { apps: submit.apps, procs: submit.procs, appnums: submit.appnums };
        let launch = planned.into_launch(job, kvsname, universe_size, node_of, submit.pmi_mode, submit.kvs);
        LaunchJob { stdin_rank: Some(Rank(0)), ..launch }
    });
    (settings, launch_of)
}

// ---- clients: dpm run, dpm status, dpm down --------------------------------

/// Whether `dpm run` with these options goes through a boot (if one is up):
/// not when it names nodes or a launcher of its own, or asks for PMI traces
/// (the boot's daemons were started without them).
pub fn wants_boot(opts: &RunOptions) -> bool {
    opts.hosts.is_empty()
        && opts.hostfile.is_none()
        && opts.virtual_nodes.is_none()
        && opts.launcher.is_none()
        && !opts.pmi_trace
        && std::env::var_os("DPM_NO_BOOT").is_none_or(|v| v.is_empty() || v == "0")
}

/// The booted tree's control socket, connected; `None` if there is no boot;
/// an error if the private directory is not private.
pub fn connect() -> Result<Option<std::os::unix::net::UnixStream>, String> {
    let files = boot_files()?;
    match std::os::unix::net::UnixStream::connect(&files.socket) {
        Ok(s) => Ok(Some(s)),
        Err(e) => {
            if files.socket.exists() {
                tracing::warn!("{} is there but does not answer ({e}): a boot server that died?", files.socket.display());
            }
            Ok(None)
        }
    }
}

/// For `dpm status` and `dpm down`: the connection, or the reason there is none.
fn connect_for(who: &str) -> Option<std::os::unix::net::UnixStream> {
    match connect() {
        Ok(Some(s)) => Some(s),
        Ok(None) => {
            eprintln!("{who}: no booted daemons (start them with `dpm boot`)");
            None
        }
        Err(e) => {
            eprintln!("{who}: {e}");
            None
        }
    }
}

/// `dpm run` through the boot: plan here, run there, relay until the exit status.
pub async fn run_through(stream: std::os::unix::net::UnixStream, opts: RunOptions) -> i32 {
    let (launcher_env, cwd, planned) = match crate::plan_here(&opts) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let kvs = match opts.kvs.map_or_else(crate::cli::kvs_from_env, Ok) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("dpm run: DPM_KVS: {e}");
            return 2;
        }
    };
    let submit = Submit {
        apps: planned.apps,
        procs: planned.procs,
        appnums: planned.appnums,
        ppn: opts.ppn,
        map_by_node: opts.map_by_node,
        label: opts.label,
        kill_grace_secs: opts.kill_grace,
        universe_size: opts.universe_size,
        pmi_mode: if opts.pmi_port { dpm_proto::PmiMode::Port } else { dpm_proto::PmiMode::Fd },
        no_oversubscribe: opts.no_oversubscribe,
        report_placement: opts.report_placement,
        timeout_secs: crate::timeout_secs(&opts),
        spawn_env: plan::segment_env(&opts, &opts.segments[0], &launcher_env),
        cwd: cwd.display().to_string(),
        host: crate::this_host(),
        client_pid: std::process::id(),
        kvs,
    };
    let Some((mut rd, mut wr)) = to_tokio(stream) else { return 1 };
    if let Err(e) = write_frame(&mut wr, &ToServer::Run { version: CONTROL_VERSION, submit: Box::new(submit) }).await {
        eprintln!("dpm run: cannot submit to the boot: {e}");
        return 1;
    }
    let mut inputs = controller::local_inputs(true);
    tokio::task::spawn_local(async move {
        while let Some(input) = inputs.recv().await {
            let msg = match input {
                Input::Signal(sig) => ToServer::Signal(sig),
                Input::Stdin(data) => ToServer::Stdin(data),
            };
            if write_frame(&mut wr, &msg).await.is_err() {
                return;
            }
        }
    });
    loop {
        match read_frame::<_, ToClient>(&mut rd).await {
            Ok(ToClient::Stdout(data)) => emit(false, &data),
            Ok(ToClient::Stderr(data)) => emit(true, &data),
            Ok(ToClient::Exit(code)) => return code,
            Ok(ToClient::Refused(why)) => {
                eprintln!("dpm run: the boot refused the job: {why}");
                return 1;
            }
            Ok(_) => {}
            Err(e) => {
                eprintln!("dpm run: lost the boot server: {e}");
                return 1;
            }
        }
    }
}

fn to_tokio(stream: std::os::unix::net::UnixStream) -> Option<(tokio::net::unix::OwnedReadHalf, tokio::net::unix::OwnedWriteHalf)> {
    let _ = stream.set_nonblocking(true);
    match UnixStream::from_std(stream) {
        Ok(s) => Some(s.into_split()),
        Err(e) => {
            eprintln!("dpm: the boot's control socket: {e}");
            None
        }
    }
}

/// Connect to the boot and send `msg`: the connection, to read the answer
/// from (`dpm down`'s answer is the server closing it), or the exit status
/// after saying what went wrong.
async fn request(who: &str, msg: ToServer) -> Result<(tokio::net::unix::OwnedReadHalf, tokio::net::unix::OwnedWriteHalf), i32> {
    let stream = connect_for(who).ok_or(1)?;
    let (rd, mut wr) = to_tokio(stream).ok_or(1)?;
    if write_frame(&mut wr, &msg).await.is_err() {
        eprintln!("{who}: the boot server went away");
        return Err(1);
    }
    Ok((rd, wr))
}

/// `dpm status`.
pub fn status_command() -> i32 {
    crate::block_on_local("dpm status", async move {
        let (mut rd, _wr) = match request("dpm status", ToServer::Status { version: CONTROL_VERSION }).await {
            Ok(c) => c,
            Err(code) => return code,
        };
        match read_frame::<_, ToClient>(&mut rd).await {
            Ok(ToClient::Status(s)) => {
                print!("{}", format_status(&s));
                0
            }
            Ok(ToClient::Refused(why)) => {
                eprintln!("dpm status: {why}");
                1
            }
            _ => {
                eprintln!("dpm status: no answer from the boot server");
                1
            }
        }
    })
}

fn format_status(s: &BootStatus) -> String {
    let mut out = format!(
        "boot: pid {}, up {:.1} s, {} node{}, tree fan-out {}\n",
        s.server_pid,
        s.uptime_secs,
        s.nodes.len(),
        if s.nodes.len() == 1 { "" } else { "s" },
        s.fanout
    );
    out.push_str("node  host                  slots  load\n");
    for (i, n) in s.nodes.iter().enumerate() {
        out.push_str(&format!("{i:<5} {:<21} {:>5}  {:>4}\n", n.host, n.slots, n.load));
    }
    if s.runs.is_empty() {
        out.push_str("no jobs running\n");
    }
    for run in &s.runs {
        out.push_str(&format!("dpm run (pid {}):\n", run.client_pid));
        for (job, kvsname, size) in &run.jobs {
            out.push_str(&format!("  job {job}  {kvsname}  {size} rank{}\n", if *size == 1 { "" } else { "s" }));
        }
    }
    out
}

/// `dpm down`: returns once the server has ended every job and exited.
pub fn down_command() -> i32 {
    crate::block_on_local("dpm down", async move {
        let (mut rd, _wr) = match request("dpm down", ToServer::Down { version: CONTROL_VERSION }).await {
            Ok(c) => c,
            Err(code) => return code,
        };
        // The server closes the connection when it exits.
        match tokio::time::timeout(Duration::from_secs(30), read_frame::<_, ToClient>(&mut rd)).await {
            Ok(Ok(ToClient::Refused(why))) => {
                eprintln!("dpm down: {why}");
                1
            }
            Ok(_) => 0,
            Err(_) => {
                eprintln!("dpm down: the boot server did not stop within 30 s");
                1
            }
        }
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn boot_options_parse() {
        let args: Vec<String> = ["--virtual-nodes", "4", "--tree-fanout=2", "-v"].iter().map(|s| s.to_string()).collect();
        let boot = super::parse_boot(&args).unwrap().unwrap();
        assert_eq!(boot.opts.virtual_nodes, Some(4));
        assert_eq!(boot.opts.fanout, Some(2));
        assert_eq!(boot.opts.verbose, 1);
        assert!(!boot.foreground);
        assert!(super::parse_boot(&["-n".to_string(), "2".to_string()]).is_err());
        assert!(super::parse_boot(&["--help".to_string()]).unwrap().is_none());
    }
}
