//! Where the nodes come from, and how a daemon starts on each.
//!
//! Two separate questions, answered separately (as Hydra does):
//! - the node list: `-hosts a,b:4`, `-f hostfile`, `--virtual-nodes N`, or this
//!   machine alone ([`crate::cli`] resolves flag → environment → default);
//! - the bootstrap: `InProcess` (one node: the daemon is a task of the
//!   launcher), `Fork` (a `dpm daemon` child process per node on this machine
//!   — virtual nodes), `Ssh` (`ssh HOST dpm daemon`).
//!
//! A fork or ssh daemon speaks the framed protocol on its stdin/stdout, so the
//! link is a pipe the launcher owns or an ssh channel ssh authenticated:
//! nothing listens on the network. Each link is bridged here to the
//! controller's channels; a link that breaks becomes [`ToLauncher::Lost`].

use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use dpm_proto::frame::{handshake, read_frame, write_frame, FrameError, Hello, Role, HEARTBEAT_EVERY, HEARTBEAT_TIMEOUT, PROTOCOL_VERSION};
use dpm_proto::{ToDaemon, ToLauncher};

use crate::controller::DaemonLink;

/// One node of the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// Where to start the daemon (ssh target), and the node's name in messages.
    pub host: String,
    pub slots: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bootstrap {
    InProcess,
    Fork,
    /// The ssh command and its options, e.g. `["ssh", "-o", "BatchMode=yes"]`.
    Ssh(Vec<String>),
}

/// How long a daemon may take to answer the handshake (ssh connection included).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The running daemons of a run.
pub struct Daemons {
    pub links: Vec<DaemonLink>,
    pub up: mpsc::UnboundedReceiver<(usize, ToLauncher)>,
    children: Vec<Child>,
    in_process: Option<tokio::task::JoinHandle<()>>,
}

/// What remains of [`Daemons`] once the controller took the links.
pub struct DaemonsWaiter {
    children: Vec<Child>,
    in_process: Option<tokio::task::JoinHandle<()>>,
}

impl Daemons {
    /// The links and message stream for the controller; the rest waits for the end.
    pub fn split(self) -> (Vec<DaemonLink>, mpsc::UnboundedReceiver<(usize, ToLauncher)>, DaemonsWaiter) {
        (self.links, self.up, DaemonsWaiter { children: self.children, in_process: self.in_process })
    }
}

impl DaemonsWaiter {
    /// After `Shutdown` was sent: wait for the daemons to exit (they kill
    /// what is left of their jobs first); kill any that hang.
    pub async fn wait(mut self) {
        if let Some(h) = self.in_process.take() {
            let _ = h.await;
        }
        // Healthy daemons kill their ranks and exit within milliseconds; what
        // is still running after a second is an ssh to a host that is gone.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
        for child in &mut self.children {
            if tokio::time::timeout_at(deadline, child.wait()).await.is_err() {
                let _ = child.kill().await;
            }
        }
    }
}

/// Start one daemon per node. On any failure nothing is left running.
pub async fn start(nodes: &[Node], bootstrap: &Bootstrap, trace: bool, verbose: u8) -> Result<Daemons, String> {
    let (up_tx, up_rx) = mpsc::unbounded_channel();
    if *bootstrap == Bootstrap::InProcess {
        let (down_tx, down_rx) = mpsc::unbounded_channel();
        let (daemon_up_tx, mut daemon_up_rx) = mpsc::unbounded_channel();
        let config = dpm_daemon::DaemonConfig { host: nodes[0].host.clone(), trace };
        let handle = tokio::task::spawn_local(dpm_daemon::run(config, down_rx, daemon_up_tx));
        tokio::task::spawn_local(async move {
            while let Some(msg) = daemon_up_rx.recv().await {
                if up_tx.send((0, msg)).is_err() {
                    return;
                }
            }
        });
        let links = vec![DaemonLink { tx: down_tx, host: nodes[0].host.clone() }];
        return Ok(Daemons { links, up: up_rx, children: Vec::new(), in_process: Some(handle) });
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the dpm executable: {e}"))?;
    let mut children = Vec::new();
    let mut links = Vec::new();
    // Start them all first (ssh connections proceed in parallel), then greet each.
    let mut pending = Vec::new();
    for (k, node) in nodes.iter().enumerate() {
        let mut daemon_args = vec!["daemon".to_string(), "--node".into(), k.to_string(), "--host".into(), node.host.clone()];
        if trace {
            daemon_args.push("--pmi-trace".into());
        }
        for _ in 0..verbose {
            daemon_args.push("-v".into());
        }
        let mut cmd = match bootstrap {
            Bootstrap::Fork => {
                let mut c = Command::new(&exe);
                c.args(&daemon_args);
                c
            }
            Bootstrap::Ssh(ssh) => {
                let mut c = Command::new(&ssh[0]);
                c.args(&ssh[1..]).arg(&node.host).arg(exe.display().to_string()).args(&daemon_args);
                c
            }
            Bootstrap::InProcess => unreachable!(),
        };
        // Their own process group: a Ctrl-C at the terminal reaches the
        // launcher, which forwards it in order; not the daemons directly.
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit()).process_group(0).kill_on_drop(true);
        match cmd.spawn() {
            Ok(mut child) => {
                let stdin = child.stdin.take().expect("piped");
                let stdout = child.stdout.take().expect("piped");
                pending.push((k, stdin, stdout, child.id()));
                children.push(child);
            }
            Err(e) => return Err(format!("cannot start the daemon for node {k} ({}): {e}", node.host)),
        }
    }
    for (k, mut stdin, mut stdout, pid) in pending {
        let host = nodes[k].host.clone();
        let ours = Hello { protocol: PROTOCOL_VERSION, role: Role::Launcher, node: k, host: crate::this_host() };
        let greeting = tokio::time::timeout(CONNECT_TIMEOUT, handshake(&mut stdout, &mut stdin, ours, Role::Daemon)).await;
        match greeting {
            Ok(Ok(hello)) if hello.node == k => {}
            Ok(Ok(hello)) => return Err(format!("node {k} ({host}): the daemon answered as node {}", hello.node)),
            // The daemon (or ssh) exited: our greeting hits a closed pipe, or
            // its answer never comes. ssh has printed its own reason above.
            Ok(Err(FrameError::Closed | FrameError::Io(_))) => {
                return Err(format!("node {k} ({host}): the daemon exited before it was ready (unreachable host, or no dpm there?)"))
            }
            Ok(Err(e)) => return Err(format!("node {k} ({host}): {e}")),
            Err(_) => return Err(format!("node {k} ({host}): no answer within {} s", CONNECT_TIMEOUT.as_secs())),
        }
        let (down_tx, mut down_rx) = mpsc::unbounded_channel::<ToDaemon>();
        tokio::task::spawn_local(async move {
            loop {
                let msg = match tokio::time::timeout(HEARTBEAT_EVERY, down_rx.recv()).await {
                    Ok(Some(msg)) => msg,
                    Ok(None) => return,
                    Err(_) => ToDaemon::Heartbeat,
                };
                if write_frame(&mut stdin, &msg).await.is_err() {
                    return; // the reader reports the broken link
                }
            }
        });
        let up = up_tx.clone();
        tokio::task::spawn_local(async move {
            loop {
                let error = match tokio::time::timeout(HEARTBEAT_TIMEOUT, read_frame::<_, ToLauncher>(&mut stdout)).await {
                    Ok(Ok(ToLauncher::Heartbeat)) => continue,
                    Ok(Ok(msg)) => {
                        if up.send((k, msg)).is_err() {
                            return;
                        }
                        continue;
                    }
                    Ok(Err(FrameError::Closed)) => "its daemon exited or the connection to it was lost".to_string(),
                    Ok(Err(e)) => e.to_string(),
                    Err(_) => format!("no word from its daemon for {:.1} s (host down or unreachable)", HEARTBEAT_TIMEOUT.as_secs_f64()),
                };
                // What is left of the link (an ssh to a host that is gone)
                // is of no use: end it now rather than at shutdown.
                if let Some(pid) = pid {
                    // SAFETY: kill(2) on our own child, not yet reaped.
                    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                }
                let _ = up.send((k, ToLauncher::Lost { error }));
                return;
            }
        });
        links.push(DaemonLink { tx: down_tx, host });
    }
    Ok(Daemons { links, up: up_rx, children, in_process: None })
}
