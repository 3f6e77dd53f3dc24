//! The boot's clients: `dpm run` through the boot (plan here, run there,
//! relay until the exit status), `dpm status` and `dpm down`.

use std::os::unix::net::UnixStream as StdUnixStream;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;

use dpm_kvs::{JobId, NodeId};
use dpm_proto::control::{BootStatus, ToClient, ToServer, CONTROL_VERSION};
use dpm_proto::frame::{read_frame, write_frame};
use dpm_proto::OUTPUT_WINDOW;

use crate::cli::RunOptions;
use crate::config::RunConfig;
use crate::controller::{self, Input};
use crate::error::{DirError, Error};
use crate::output::{self, Written};

use super::boot_files;

/// The booted tree's control socket, connected; `None` if there is no boot;
/// an error if the private directory is not private.
pub fn connect() -> Result<Option<StdUnixStream>, DirError> {
    let files = boot_files()?;
    match StdUnixStream::connect(&files.socket) {
        Ok(s) => Ok(Some(s)),
        Err(e) => {
            if files.socket.exists() {
                match dead_boot(&files, &e) {
                    Some(pid) => remove_dead_boot(&files, pid),
                    None => tracing::warn!("{} is there but does not answer ({e}): a boot server starting?", files.socket.display()),
                }
            }
            Ok(None)
        }
    }
}

/// The pid of the boot server whose files these are, if it is dead: nobody
/// listens on its socket and its rendezvous names a pid that is gone (or
/// there is no rendezvous to name one). A server still starting (its
/// socket bound, not yet listening) is alive: its files stay.
fn dead_boot(files: &super::BootFiles, refused: &std::io::Error) -> Option<Option<u32>> {
    if refused.kind() != std::io::ErrorKind::ConnectionRefused {
        return None;
    }
    let pid = std::fs::read_to_string(&files.rendezvous)
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .and_then(|v| v.get("pid").and_then(serde_json::Value::as_u64))
        .and_then(|p| u32::try_from(p).ok());
    match pid {
        // kill(pid, 0): ESRCH is a process that is gone; a zombie nobody
        // reaped yet is gone too.
        Some(p) => {
            let exists = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p as i32), None).map_or_else(|e| e != nix::errno::Errno::ESRCH, |()| true);
            let zombie = std::fs::read_to_string(format!("/proc/{p}/stat"))
                .is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')));
            (!exists || zombie).then_some(Some(p))
        }
        None if files.rendezvous.exists() => None,
        None => Some(None),
    }
}

/// Remove a dead boot's socket and rendezvous (its log stays, for the
/// post-mortem), saying so in one line.
fn remove_dead_boot(files: &super::BootFiles, pid: Option<u32>) {
    let _ = std::fs::remove_file(&files.socket);
    let _ = std::fs::remove_file(&files.rendezvous);
    let who = pid.map_or_else(String::new, |p| format!(" (pid {p})"));
    crate::output::emit(true, format!("dpm: removed the files of a boot server that is gone{who}: {}\n", files.socket.display()).as_bytes());
}

/// `dpm run` through the boot: plan here, run there, relay until the exit status.
pub async fn run_through(stream: StdUnixStream, mut opts: RunOptions, mut config: RunConfig) -> Result<i32, Error> {
    // As Hydra in an allocation: a program without -n runs on every slot
    // of the boot's nodes (those taking ranks).
    if opts.segments.iter().any(|s| s.nprocs.is_none()) {
        let slots = boot_slots().await?;
        for seg in &mut opts.segments {
            seg.nprocs.get_or_insert(slots);
        }
    }
    let (launcher_env, cwd, mut planned) = crate::local::plan_here(&opts)?;
    config.choose_pmi(&mut planned.apps)?;
    let spawn_env = crate::local::segment_env(&opts, &opts.segments[0], &launcher_env);
    let submit = config.submit(planned, spawn_env, cwd.display().to_string(), opts.localhost.clone().unwrap_or_else(crate::machine::this_host));
    let (mut rd, mut wr) = to_tokio(stream)?;
    // A stdin of /dev/null has ended already: its end goes with the
    // submission, in one write (the server reads the two frames in turn).
    let stdin_ended = controller::stdin_is_dev_null();
    let mut first = Vec::new();
    write_frame(&mut first, &ToServer::Run { version: CONTROL_VERSION, submit: Box::new(submit) }).await.map_err(submit_error)?;
    if stdin_ended {
        write_frame(&mut first, &ToServer::Stdin(Vec::new())).await.map_err(submit_error)?;
    }
    wr.write_all(&first).await.map_err(|e| submit_error(e.into()))?;
    let mut inputs = controller::local_inputs(!stdin_ended, true, true);
    // MPIR: held jobs continue once this process's debugger let it go on.
    let (continue_tx, mut continues) = tokio::sync::mpsc::unbounded_channel::<(u32, Option<dpm_proto::ToolDaemon>)>();
    tokio::task::spawn_local(async move {
        loop {
            let input = tokio::select! {
                Some((job, tool)) = continues.recv() => {
                    if write_frame(&mut wr, &ToServer::Continue { job, tool }).await.is_err() {
                        return;
                    }
                    continue;
                }
                input = inputs.recv() => match input {
                    Some(input) => input,
                    None => return,
                },
            };
            let (msg, stop) = match input {
                // Ctrl-Z: the server stops this run's processes (only), then
                // this client stops as the terminal asked; `fg` sends SIGCONT
                // on, which continues them.
                Input::Signal(sig) => (ToServer::Signal(sig), sig == libc::SIGTSTP),
                Input::Stdin(data) => (ToServer::Stdin(data), false),
                // Nothing here ends a run this way (the boot's run ends itself).
                Input::End(_) | Input::Continue(..) => continue,
            };
            if write_frame(&mut wr, &msg).await.is_err() {
                return;
            }
            if stop {
                let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
            }
        }
    });
    let mut out = Relay::new();
    let end = loop {
        out.room().await;
        match read_frame::<_, ToClient>(&mut rd).await {
            Ok(ToClient::Stdout(data)) => out.write(false, data),
            Ok(ToClient::Stderr(data)) => out.write(true, data),
            Ok(ToClient::Exit(code)) => break Ok(code),
            // Every rank of a job started: into this process's MPIR table
            // (the debugger reads it here), the breakpoint called; a held
            // job goes on once the debugger let us go on.
            Ok(ToClient::Procs { job, procs, held }) => {
                crate::mpir::publish(&procs);
                let tool = crate::mpir::tool_daemon();
                if held || tool.is_some() {
                    let _ = continue_tx.send((job, tool));
                }
            }
            Ok(ToClient::Refused(why)) => break Err(Error::failed(format!("the boot refused the job: {why}"))),
            Ok(_) => {}
            Err(e) => break Err(Error::failed(format!("lost the boot server: {e}"))),
        }
    };
    out.finish().await;
    end
}

/// The slots of the boot's nodes that take new ranks (at least 1): as
/// given, or one per node where they were guessed from the CPUs (Hydra
/// counts a host listed without a count as one slot).
async fn boot_slots() -> Result<u32, Error> {
    let (mut rd, _wr) = request(ToServer::Status { version: CONTROL_VERSION }).await?;
    match read_frame::<_, ToClient>(&mut rd).await {
        Ok(ToClient::Status(s)) => {
            let up = s.nodes.iter().filter(|n| n.state == "up");
            Ok(if s.slots_known { up.fold(0u32, |t, n| t.saturating_add(n.slots)) } else { up.count() as u32 }.max(1))
        }
        Ok(ToClient::Refused(why)) => Err(Error::failed(format!("the boot refused the job: {why}"))),
        _ => Err(Error::failed("no answer from the boot server")),
    }
}

fn submit_error(e: dpm_proto::frame::FrameError) -> Error {
    Error::failed(format!("cannot submit to the boot: {e}"))
}

/// The client's output: written by a thread ([`output::stdout_sink`]),
/// started with the first bytes to write (a run that prints nothing, such
/// as `dpm run -n 1 /bin/true`, starts none), with at most
/// [`OUTPUT_WINDOW`] bytes queued. At the bound the client stops reading
/// its connection, so a stopped or slow stdout backs up to the server's
/// writer for this run and from there, through the run's output windows,
/// to its ranks.
struct Relay {
    sink: Option<output::Sink>,
    queued: u64,
}

impl Relay {
    fn new() -> Self {
        Relay { sink: None, queued: 0 }
    }

    fn write(&mut self, is_err: bool, data: Vec<u8>) {
        let bytes = data.len() as u64;
        self.queued += bytes;
        let sink = self.sink.get_or_insert_with(output::stdout_sink);
        sink.console.write(is_err, data, Some(Written { node: NodeId(0), job: JobId(0), bytes }));
    }

    /// Wait until the queue is below its bound.
    async fn room(&mut self) {
        let Some(sink) = self.sink.as_mut() else { return };
        while let Ok(w) = sink.written.try_recv() {
            self.queued = self.queued.saturating_sub(w.bytes);
        }
        while self.queued >= OUTPUT_WINDOW {
            let Some(w) = sink.written.recv().await else { return };
            self.queued = self.queued.saturating_sub(w.bytes);
        }
    }

    /// Everything queued is written.
    async fn finish(self) {
        let Some(output::Sink { console, mut written }) = self.sink else { return };
        drop(console);
        while written.recv().await.is_some() {}
    }
}

fn to_tokio(stream: StdUnixStream) -> Result<(OwnedReadHalf, OwnedWriteHalf), Error> {
    let control = |e: std::io::Error| Error::failed(format!("the boot's control socket: {e}"));
    stream.set_nonblocking(true).map_err(control)?;
    Ok(UnixStream::from_std(stream).map_err(control)?.into_split())
}

/// Connect to the boot and send `msg`: the connection, to read the answer
/// from (`dpm down`'s answer is the server closing it).
pub(super) async fn request(msg: ToServer) -> Result<(OwnedReadHalf, OwnedWriteHalf), Error> {
    let stream = connect()?.ok_or_else(|| Error::failed("no booted daemons (start them with `dpm boot`)"))?;
    let (rd, mut wr) = to_tokio(stream)?;
    write_frame(&mut wr, &msg).await.map_err(|_| Error::failed("the boot server went away"))?;
    Ok((rd, wr))
}

/// The boot's status (`None` without a boot).
async fn boot_status() -> Result<Option<BootStatus>, Error> {
    if connect()?.is_none() {
        return Ok(None);
    }
    let (mut rd, _wr) = request(ToServer::Status { version: CONTROL_VERSION }).await?;
    match read_frame::<_, ToClient>(&mut rd).await {
        Ok(ToClient::Status(s)) => Ok(Some(s)),
        Ok(ToClient::Refused(why)) => Err(Error::Failed(why)),
        _ => Err(Error::failed("no answer from the boot server")),
    }
}

/// `dpm status`; with `json`, for tools: `{"boot": …, "runs": […]}`, the
/// boot's status (null without a boot) and this user's plain runs
/// ([`crate::run_table`]), each with its jobs' ranks.
pub fn status_command(json: bool) -> Result<i32, Error> {
    if json {
        return crate::runtime::block_on_local(async move {
            let mut boot = boot_status().await?;
            // The booted runs' clients are asked for their ranks' states
            // first, then the plain runs (waited for meanwhile), then the
            // boot is asked again until each asked run has listed them.
            let mut asked: Vec<(u32, u64)> =
                boot.iter().flat_map(|b| &b.runs).filter(|r| crate::run_table::ask_states(r)).map(|r| (r.client_pid, r.states_listed)).collect();
            let runs = crate::run_table::read_all_with_states();
            let deadline = tokio::time::Instant::now() + crate::run_table::STATES_WAIT;
            while !asked.is_empty() && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
                let Some(now) = boot_status().await? else { break };
                asked.retain(|(pid, before)| now.runs.iter().any(|r| r.client_pid == *pid && r.states_listed <= *before));
                boot = Some(now);
            }
            let all = serde_json::json!({ "boot": boot, "runs": runs });
            println!("{}", serde_json::to_string_pretty(&all).unwrap_or_default());
            Ok(0)
        });
    }
    crate::runtime::block_on_local(async move {
        let (mut rd, _wr) = request(ToServer::Status { version: CONTROL_VERSION }).await?;
        match read_frame::<_, ToClient>(&mut rd).await {
            Ok(ToClient::Status(s)) => {
                print!("{}", format_status(&s));
                Ok(0)
            }
            Ok(ToClient::Refused(why)) => Err(Error::Failed(why)),
            _ => Err(Error::failed("no answer from the boot server")),
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
    if let Some(a) = &s.allocation {
        out.push_str(&format!("nodes from the {a}\n"));
    }
    out.push_str("node  host                  slots  load\n");
    for (i, n) in s.nodes.iter().enumerate() {
        out.push_str(&format!("{i:<5} {:<21} {:>5}  {:>4}", n.host, n.slots, n.load));
        if let Some(why) = &n.lost {
            out.push_str(&format!("  lost: {why}"));
        } else if !n.state.is_empty() && n.state != "up" {
            out.push_str(&format!("  {}", n.state));
        }
        out.push('\n');
    }
    if s.runs.is_empty() {
        out.push_str("no jobs running\n");
    }
    for run in &s.runs {
        match run.client_pid {
            0 => out.push_str("kept for later runs (warm spawn):\n"),
            pid => out.push_str(&format!("dpm run (pid {pid}):\n")),
        }
        for (job, kvsname, size) in &run.jobs {
            out.push_str(&format!("  job {job}  {kvsname}  {size} rank{}\n", if *size == 1 { "" } else { "s" }));
        }
    }
    out
}

/// `dpm down`: returns once the server has ended every job and exited.
pub fn down_command() -> Result<i32, Error> {
    crate::runtime::block_on_local(async move {
        let (mut rd, _wr) = request(ToServer::Down { version: CONTROL_VERSION }).await?;
        // The server closes the connection when it exits.
        match tokio::time::timeout(Duration::from_secs(30), read_frame::<_, ToClient>(&mut rd)).await {
            Ok(Ok(ToClient::Refused(why))) => Err(Error::Failed(why)),
            Ok(_) => Ok(0),
            Err(_) => Err(Error::failed("the boot server did not stop within 30 s")),
        }
    })
}
