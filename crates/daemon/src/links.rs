//! Links to child daemons: start `dpm daemon` by fork, ssh or srun, greet
//! and authenticate it, and bridge its frames. Used by the launcher for its
//! children in the tree and by daemons for theirs; [`bridge_link`] also
//! serves links that arrive by TCP (the manual bootstrap).
//!
//! The child speaks on its stdin/stdout, so the link is a pipe or an ssh
//! channel. The run's secret reaches it without touching its command line: in
//! its environment when forked, as the first frame on its stdin through ssh or
//! srun. Both directions send heartbeats when idle; a link closed, or silent
//! for the [`heartbeat_timeout`] (`DPM_HEARTBEAT_TIMEOUT`, passed to every
//! daemon as `--heartbeat-timeout`), is reported as [`Up::Lost`] for the
//! child's node.

use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::Instrument;

use dpm_kvs::NodeId;
use dpm_proto::auth::{Secret, SECRET_ENV, SECRET_FILE_ENV};
use dpm_proto::frame::{handshake, heartbeat_timeout, lateness, write_frame, FrameError, Hello, Role, HEARTBEAT_EVERY, PROTOCOL_VERSION};
use dpm_proto::link::{Down, FrameReceiver, FrameSender, Up};
use dpm_proto::tree::Bootstrap;

use crate::liveness;
use crate::start_watch::{StartLoss, StartWatch};

/// How long a daemon may take to answer the handshake (ssh connection
/// included) unless the tree says (`TreeSpec::start_timeout`: the user's
/// `--connect-timeout`) — a daemon forked here that is starved of CPU, not
/// hung, longer ([`crate::start_watch`]).
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(30);

/// The start handshake's timeout of the daemons of `spec`.
pub fn start_timeout(spec: &dpm_proto::tree::TreeSpec) -> Duration {
    spec.start_timeout.map_or(DEFAULT_START_TIMEOUT, Duration::from_secs)
}

/// The `dpm daemon` flag that gives the link's silence timeout, in seconds.
pub const HEARTBEAT_TIMEOUT_FLAG: &str = "--heartbeat-timeout";

/// The `dpm daemon` flag that gives where to re-attach if the parent daemon is lost.
pub const REJOIN_FLAG: &str = "--rejoin";

/// The `dpm daemon` flag that says: the secret is the first frame on stdin.
pub const SECRET_STDIN_FLAG: &str = "--secret-stdin";

/// A child daemon's process and the two ends of its link.
pub struct ChildDaemon {
    pub node: NodeId,
    pub host: String,
    pub process: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
    /// Whether the secret goes first on stdin (ssh, srun) rather than in the
    /// environment (fork).
    secret_on_stdin: bool,
}

/// Start the daemon for `node` on `host` (not yet greeted). A forked daemon
/// gets `secret` in its environment now; the others on stdin when greeted.
pub fn start(node: NodeId, host: &str, spec: &dpm_proto::tree::TreeSpec, secret: &Secret) -> Result<ChildDaemon, String> {
    let (bootstrap, trace, verbose) = (&spec.bootstrap, spec.trace, spec.verbose);
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the dpm executable: {e}"))?;
    let mut args = vec!["daemon".to_string(), "--node".into(), node.0.to_string(), "--host".into(), host.to_string()];
    if trace {
        args.push("--pmi-trace".into());
    }
    for _ in 0..verbose {
        args.push("-v".into());
    }
    // Each daemon resolves the run's interface on its own host.
    if let Some(iface) = crate::iface::chosen() {
        args.extend([crate::iface::IFACE_FLAG.to_string(), iface.name.clone()]);
    }
    // Both ends of every link must agree on when silence means loss.
    args.push(HEARTBEAT_TIMEOUT_FLAG.into());
    args.push(heartbeat_timeout().as_secs_f64().to_string());
    // A daemon below another re-attaches to the launcher if that one is lost.
    if let Some(rejoin) = spec.rejoin.as_ref().filter(|_| dpm_proto::tree::parent(node, spec.fanout).is_some() && node.0 < spec.hosts.len()) {
        args.push(REJOIN_FLAG.into());
        args.push(rejoin.clone());
    }
    // An agent's host that is this machine gets its daemon by fork.
    let bootstrap = match bootstrap {
        Bootstrap::Agent { autofork: true, .. } if is_this_machine(host) => &Bootstrap::Fork,
        other => other,
    };
    let secret_on_stdin = *bootstrap != Bootstrap::Fork;
    if secret_on_stdin {
        args.push(SECRET_STDIN_FLAG.into());
    }
    let mut cmd = match bootstrap {
        Bootstrap::Fork => {
            let mut c = Command::new(&exe);
            c.args(&args).env(SECRET_ENV, secret.to_hex());
            c
        }
        Bootstrap::Ssh(ssh) | Bootstrap::Agent { command: ssh, .. } => {
            let mut c = Command::new(&ssh[0]);
            c.args(&ssh[1..]).arg(host).arg(exe.display().to_string()).args(&args);
            c
        }
        Bootstrap::Slurm(extra) => {
            // One task on that node, overlapping the allocation's other steps
            // (daemons start children with nested sruns), without Slurm's own
            // PMI, unbuffered so frames pass as they are written; --ntasks
            // overrides the SLURM_NTASKS salloc exported.
            let mut c = Command::new("srun");
            c.args(["--nodes=1", "--ntasks=1", "--overlap", "--mpi=none", "--unbuffered", "--quiet", "--kill-on-bad-exit=1"])
                .arg(format!("--nodelist={host}"))
                .args(extra)
                .arg(exe.display().to_string())
                .args(&args);
            c
        }
    };
    if secret_on_stdin {
        // Never in ssh's or srun's environment (ssh could be set to send it).
        cmd.env_remove(SECRET_ENV);
    }
    cmd.env_remove(SECRET_FILE_ENV);
    // Their own process group: a Ctrl-C at the terminal reaches the launcher,
    // which forwards it in order; not the daemons directly.
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit()).process_group(0).kill_on_drop(true);
    let mut process = cmd.spawn().map_err(|e| format!("{node} ({host}): cannot start its daemon: {e}"))?;
    let stdin = process.stdin.take().expect("piped");
    let stdout = process.stdout.take().expect("piped");
    Ok(ChildDaemon { node, host: host.to_string(), process, stdin, stdout, secret_on_stdin })
}

/// Whether `host` names this machine (its host name, short or long, or a
/// loopback name Hydra counts as local: `localhost`, `127.0.0.1`, `::1`;
/// `127.0.0.2` is another host, as for Hydra).
pub fn is_this_machine(host: &str) -> bool {
    if matches!(host, "localhost" | "127.0.0.1" | "::1") {
        return true;
    }
    let me = nix::unistd::gethostname().map(|h| h.to_string_lossy().into_owned()).unwrap_or_default();
    let short = |name: &str| name.split('.').next().unwrap_or_default().to_string();
    !me.is_empty() && (host == me || (short(host) == short(&me) && (host == short(host) || me == short(&me))))
}

impl ChildDaemon {
    /// Hand over the secret if it goes on stdin, exchange hellos and
    /// authenticate both ways within `timeout` ([`crate::start_watch`]);
    /// `me` is the greeting node's host. On failure the daemon's process
    /// group (the ssh, srun or agent and whatever it started here) is killed.
    pub async fn greet(&mut self, me: &str, secret: &Secret, timeout: Duration) -> Result<(), String> {
        let greeted = self.greet_within(me, secret, timeout).await;
        if greeted.is_err() {
            if let Some(pid) = self.process.id() {
                // Our own child, not yet reaped, leads its own group (`process_group(0)`).
                let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL);
            }
        }
        greeted
    }

    async fn greet_within(&mut self, me: &str, secret: &Secret, timeout: Duration) -> Result<(), String> {
        let (node, host) = (self.node, self.host.clone());
        let ours = Hello { protocol: PROTOCOL_VERSION, role: Role::Launcher, node, host: me.to_string() };
        let (stdin, stdout, on_stdin) = (&mut self.stdin, &mut self.stdout, self.secret_on_stdin);
        // A forked daemon is this host's process: starved or hung, its
        // scheduler account says (an ssh's or srun's says nothing of the daemon).
        let local = if on_stdin { None } else { self.process.id() };
        let greeting = async move {
            if on_stdin {
                write_frame(stdin, &secret.to_hex()).await?;
            }
            handshake(stdout, stdin, ours, Role::Daemon, secret).await
        };
        match watched(greeting, local, timeout).await {
            Ok(Ok(hello)) if hello.node == node => Ok(()),
            Ok(Ok(hello)) => Err(format!("{node} ({host}): the daemon answered as {}", hello.node)),
            // The daemon (or ssh) exited: our greeting hits a closed pipe, or
            // its answer never comes. ssh has printed its own reason.
            Ok(Err(FrameError::Closed | FrameError::Io(_))) => {
                Err(format!("{node} ({host}): the daemon exited before it was ready (unreachable host, or no dpm there?)"))
            }
            Ok(Err(e @ (FrameError::PeerNotAuthenticated | FrameError::RefusedByPeer))) => {
                tracing::error!(node = node.0, %host, "the daemon's link was refused: {e}");
                Err(format!("{node} ({host}): {e}"))
            }
            Ok(Err(e)) => Err(format!("{node} ({host}): {e}")),
            Err(loss) => Err(format!("{node} ({host}): its daemon did not start: {loss} (the start timeout: --connect-timeout, DPM_CONNECT_TIMEOUT)")),
        }
    }

    /// Send one envelope before the link is bridged (the tree description).
    pub async fn send(&mut self, msg: &Down) -> Result<(), String> {
        write_frame(&mut self.stdin, msg).await.map_err(|e| format!("{} ({}): {e}", self.node, self.host))
    }

    /// Bridge the link: returns the sender for envelopes down; every envelope
    /// that comes up is delivered to `up`. A broken link kills what is left
    /// of the child (an ssh to a host that is gone).
    pub fn bridge(self, up: mpsc::UnboundedSender<Up>) -> (mpsc::UnboundedSender<Down>, Child) {
        let ChildDaemon { node, process, stdin, stdout, secret_on_stdin, .. } = self;
        let pid = process.id();
        // A forked daemon is this host's process: its state speaks for it
        // (an ssh or srun process says nothing of the remote daemon).
        let local = if secret_on_stdin { None } else { pid };
        let on_lost = move || {
            if let Some(pid) = pid {
                // Our own child, not yet reaped: the pid is still its.
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL);
            }
        };
        let (down, _reader) = bridge_link(node, stdout, stdin, local, on_lost, up);
        (down, process)
    }
}

/// `greeting` until it is done, or until the [`StartWatch`] over the
/// daemon (its process `local`, forked on this host, or remote) says it failed.
async fn watched<T>(greeting: impl std::future::Future<Output = T>, local: Option<u32>, timeout: Duration) -> Result<T, StartLoss> {
    let origin = tokio::time::Instant::now();
    let mut watch = StartWatch::new(timeout);
    let mut look = origin + watch.first_look();
    tokio::pin!(greeting);
    loop {
        tokio::select! {
            done = &mut greeting => return Ok(done),
            _ = tokio::time::sleep_until(look) => {
                let peer = local.map_or(liveness::Peer::Remote, liveness::probe);
                let wait = watch.judge(origin.elapsed(), peer)?;
                look = tokio::time::Instant::now() + wait;
            }
        }
    }
}

/// Bridge an open, authenticated link to the daemon of `node`: returns the
/// sender for envelopes down, and the task reading from the link, which ends
/// when the link does (after reporting [`Up::Lost`] for `node` to `up` and
/// calling `on_lost`). Every envelope that comes up (payloads from the
/// subtree, its nodes' arrivals and losses below) is delivered to `up`.
/// Heartbeats go down when the link is idle. Silence is judged by a
/// [`liveness::Detector`], with the daemon's process (`local`: its pid when
/// it runs on this host) probed when the link falls silent.
pub fn bridge_link<R, W>(
    node: NodeId,
    reader: R,
    writer: W,
    local: Option<u32>,
    on_lost: impl FnOnce() + 'static,
    up: mpsc::UnboundedSender<Up>,
) -> (mpsc::UnboundedSender<Down>, JoinHandle<()>)
where
    R: AsyncRead + Unpin + 'static,
    W: AsyncWrite + Unpin + 'static,
{
    let (down_tx, mut down_rx) = mpsc::unbounded_channel::<Down>();
    let mut writer: FrameSender<W, Down> = FrameSender::new(writer);
    let mut reader: FrameReceiver<R, Up> = FrameReceiver::new(reader);
    crate::spawn_local_here(async move {
        loop {
            let waiting = tokio::time::Instant::now();
            let msg = match tokio::time::timeout(HEARTBEAT_EVERY, down_rx.recv()).await {
                Ok(Some(msg)) => msg,
                Ok(None) => return,
                Err(_) => match lateness(waiting.elapsed()) {
                    Some(late_ms) => Down::Starved { late_ms },
                    None => Down::Heartbeat,
                },
            };
            if writer.send(&msg).await.is_err() {
                return; // the reader reports the broken link
            }
        }
    });
    let reader = crate::spawn_local_here(async move {
        let mut meter = SilenceMeter::new();
        let mut stops = STOPS.load(Ordering::SeqCst);
        let origin = tokio::time::Instant::now();
        let mut detector = liveness::Detector::new(heartbeat_timeout(), origin.elapsed());
        let peer = || local.map_or(liveness::Peer::Remote, liveness::probe);
        loop {
            // We were stopped (Ctrl-Z) meanwhile: a fresh clock.
            let frame = next_frame(reader.recv(), &mut detector, origin, || silence_counts(&mut stops), peer).await;
            if matches!(frame, Heard::Frame(_)) {
                meter.heard(|| format!("{node}"));
                stops = STOPS.load(Ordering::SeqCst); // heard since any stop
            }
            let error = match frame {
                Heard::Frame(Ok(Up::Heartbeat)) => {
                    detector.reported(Duration::ZERO);
                    continue;
                }
                Heard::Frame(Ok(Up::Starved { late_ms })) => {
                    detector.reported(Duration::from_millis(late_ms.into()));
                    continue;
                }
                Heard::Frame(Ok(envelope)) => {
                    if up.send(envelope).is_err() {
                        return;
                    }
                    continue;
                }
                Heard::Frame(Err(FrameError::Closed)) => "its daemon exited or the connection to it was lost".to_string(),
                Heard::Frame(Err(e)) => e.to_string(),
                Heard::Lost(liveness::Loss::Gone) => "its daemon exited".to_string(),
                Heard::Lost(liveness::Loss::Stopped(d)) => format!("its daemon is stopped (SIGSTOP?) and sent no word for {:.1} s", d.as_secs_f64()),
                Heard::Lost(liveness::Loss::Silent(d)) => format!("no word from its daemon for {:.1} s (host down, unreachable or hung)", d.as_secs_f64()),
                Heard::Lost(liveness::Loss::Hung(d, idle)) => format!(
                    "no word from its daemon for {:.1} s, and it neither ran nor waited for a CPU for {:.1} s (hung)",
                    d.as_secs_f64(),
                    idle.as_secs_f64()
                ),
            };
            // What is left of the link is of no use: end it now rather than at shutdown.
            on_lost();
            let _ = up.send(Up::Lost { node, error });
            return;
        }
    });
    (down_tx, reader)
}

/// What waiting for a link's next frame came to.
pub(crate) enum Heard<T> {
    Frame(T),
    Lost(liveness::Loss),
}

/// Wait for `recv` (the next frame) while `detector` judges the silence,
/// probing the peer's process (`peer`) whenever a verdict is due; silence
/// is not judged while `judging` says no (the clock starts afresh). The
/// frame's future is never dropped half-read: a frame read is cancel-unsafe
/// (its length, then its body), and an earlier timeout around each read
/// would have lost the bytes read so far and read the rest as a length.
pub(crate) async fn next_frame<T>(
    recv: impl std::future::Future<Output = T>,
    detector: &mut liveness::Detector,
    origin: tokio::time::Instant,
    mut judging: impl FnMut() -> bool,
    peer: impl Fn() -> liveness::Peer,
) -> Heard<T> {
    tokio::pin!(recv);
    let mut wait = detector.deadline().saturating_sub(origin.elapsed().saturating_sub(detector.last_heard()));
    loop {
        match tokio::time::timeout(wait, &mut recv).await {
            Ok(frame) => {
                detector.heard(origin.elapsed());
                return Heard::Frame(frame);
            }
            Err(_) => {
                let now = origin.elapsed();
                if !judging() {
                    detector.restart(now);
                    wait = detector.deadline();
                    continue;
                }
                match detector.judge(now, peer()) {
                    liveness::Verdict::Wait(more) => wait = more,
                    liveness::Verdict::Lost(loss) => return Heard::Lost(loss),
                }
            }
        }
    }
}

/// Whether this process is stopping (Ctrl-Z of `dpm run`): its links do not
/// judge silence until [`resume_judging`]…
static SUSPENDED: AtomicBool = AtomicBool::new(false);
/// …and each suspension and resumption counts here, so that a wait for a
/// frame that spanned one starts afresh rather than reading as loss.
static STOPS: AtomicU64 = AtomicU64::new(0);

/// This process is about to stop: the silence of the links it bridged is no
/// loss until [`resume_judging`] (a closed link still is).
pub fn suspend_judging() {
    SUSPENDED.store(true, Ordering::SeqCst);
    STOPS.fetch_add(1, Ordering::SeqCst);
}

/// This process runs again: every link's silence is judged from now.
pub fn resume_judging() {
    SUSPENDED.store(false, Ordering::SeqCst);
    STOPS.fetch_add(1, Ordering::SeqCst);
}

/// Whether a silence just measured may be loss: not while suspended, nor if
/// a stop came or went since `seen` (which is brought up to date).
fn silence_counts(seen: &mut u64) -> bool {
    let now = STOPS.load(Ordering::SeqCst);
    let quiet = now == *seen && !SUSPENDED.load(Ordering::SeqCst);
    *seen = now;
    quiet
}

/// The longest silence on a link so far, logged (debug) each time it grows
/// past two heartbeat periods: how close a busy peer came to being lost.
pub(crate) struct SilenceMeter {
    last: tokio::time::Instant,
    longest: Duration,
}

impl SilenceMeter {
    pub(crate) fn new() -> Self {
        SilenceMeter { last: tokio::time::Instant::now(), longest: 2 * HEARTBEAT_EVERY }
    }

    /// A frame came (or the wait for one ended) from `peer`.
    pub(crate) fn heard(&mut self, peer: impl FnOnce() -> String) {
        let gap = self.last.elapsed();
        self.last = tokio::time::Instant::now();
        if gap > self.longest {
            self.longest = gap;
            tracing::debug!("the link to {} was silent for {:.0} ms", peer(), gap.as_secs_f64() * 1e3);
        }
    }
}

/// A child daemon whose link is up and bridged.
pub struct LinkedChild {
    pub node: NodeId,
    /// Envelopes for the child's subtree.
    pub down: mpsc::UnboundedSender<Down>,
    pub process: Child,
}

/// Start each of `nodes` (children of one parent), then greet, authenticate
/// and describe the tree to all of them at once (ssh connections proceed in
/// parallel). Each link is bridged to `up` as soon as it is authenticated,
/// so heartbeats flow while slower children are still connecting. On error,
/// every child started is killed (when dropped).
pub async fn start_children(
    nodes: &[NodeId],
    spec: &dpm_proto::tree::TreeSpec,
    me: &str,
    secret: &Secret,
    up: &mpsc::UnboundedSender<Up>,
) -> Result<Vec<LinkedChild>, String> {
    dpm_proto::frame::configure_heartbeat_timeout().map_err(|e| format!("{}: {e}", dpm_proto::frame::HEARTBEAT_TIMEOUT_ENV))?;
    let mut greeting = tokio::task::JoinSet::new();
    let timeout = start_timeout(spec);
    for &node in nodes {
        let mut child = start(node, &spec.hosts[node.0], spec, secret)?;
        let (me, secret, spec) = (me.to_string(), secret.clone(), spec.clone());
        let greet = async move {
            child.greet(&me, &secret, timeout).await?;
            if !dpm_proto::tree::children(Some(child.node), spec.hosts.len(), spec.fanout).is_empty() {
                child.send(&Down::Tree(spec)).await?;
            }
            Ok::<_, String>(child)
        };
        greeting.spawn_local(greet.in_current_span());
    }
    let mut linked = Vec::with_capacity(nodes.len());
    while let Some(done) = greeting.join_next().await {
        // The first failure ends the others (dropping the set kills them).
        let child = done.map_err(|e| format!("starting a daemon failed: {e}"))??;
        let node = child.node;
        let (down, process) = child.bridge(up.clone());
        linked.push(LinkedChild { node, down, process });
    }
    Ok(linked)
}

#[cfg(test)]
mod tests {
    use super::is_this_machine;
    use super::*;

    /// A bridged link whose daemon sends `first`, then falls silent (its
    /// end stays open): how long until the bridge reports it lost.
    async fn silent_after(first: Up) -> (Duration, String) {
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let (our_read, our_write) = tokio::io::split(ours);
        let (_their_read, their_write) = tokio::io::split(theirs);
        let (up_tx, mut up_rx) = mpsc::unbounded_channel();
        let (_down, _reader) = bridge_link(NodeId(7), our_read, our_write, None, || {}, up_tx);
        let mut daemon: FrameSender<_, Up> = FrameSender::new(their_write);
        daemon.send(&first).await.unwrap();
        let sent = tokio::time::Instant::now();
        match up_rx.recv().await.expect("the bridge reports before it ends") {
            Up::Lost { node, error } => {
                assert_eq!(node, NodeId(7));
                (sent.elapsed(), error)
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    /// A remote daemon (no process to look at) that said its host starves
    /// gets 3 times the lateness it reported past the timeout; one that
    /// said nothing, the timeout.
    #[test]
    fn a_remote_daemon_that_reported_starvation_is_given_more_time() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        tokio::task::LocalSet::new().block_on(&rt, async {
            let timeout = heartbeat_timeout();
            let (plain, why) = silent_after(Up::Heartbeat).await;
            assert!(plain >= timeout && plain < timeout + Duration::from_secs(20), "{plain:?}: {why}");
            assert!(why.starts_with("no word from its daemon for "), "{why}");
            let (starved, why) = silent_after(Up::Starved { late_ms: 1000 }).await;
            let stretched = timeout + Duration::from_secs(3);
            assert!(starved >= stretched && starved < stretched + Duration::from_secs(20), "{starved:?} (at least {stretched:?}): {why}");
        });
    }

    #[test]
    fn this_machine_by_name_and_loopback_but_not_127_0_0_2() {
        let me = nix::unistd::gethostname().unwrap().to_string_lossy().into_owned();
        assert!(is_this_machine(&me) && is_this_machine("localhost") && is_this_machine("127.0.0.1"));
        assert!(!is_this_machine("127.0.0.2"), "Hydra counts 127.0.0.2 as another host");
        assert!(!is_this_machine(&format!("{me}x")) && !is_this_machine("other.example.org"));
    }
}
