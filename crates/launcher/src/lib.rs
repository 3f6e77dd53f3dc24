//! # dpm-launcher: `dpm run`, the root of a job
//!
//! - [`cli`]: the mpiexec-compatible command line.
//! - [`plan`]: executables, environments, working directories, process mapping.
//! - [`controller`]: the launcher's event loop: fences, name service, failure
//!   policy, signals, timeout, stdin, exit status.
//! - [`output`]: the ranks' stdout/stderr, raw or labelled.
//! - [`nodes`], [`manual`]: the node list and starting the daemon tree;
//!   [`private_dir`]: the per-user runtime directory for secrets.
//! - [`daemon_cmd`]: `dpm daemon`.
//!
//! On one machine the launcher starts its node daemon inside its own process
//! and talks to it over channels carrying the same [`dpm_proto`] messages a
//! remote daemon would get.

pub mod boot;
pub mod cli;
pub mod controller;
pub mod daemon_cmd;
pub mod kvs_root;
pub mod manual;
pub mod node_table;
pub mod nodes;
pub mod output;
pub mod plan;
pub mod private_dir;
pub mod run;
pub mod singleton;
pub mod spawn;

use std::time::Duration;

use dpm_kvs::Rank;
use dpm_proto::{LaunchJob, PmiMode, ToDaemon};

use cli::{CliError, RunOptions, RUN_HELP};
use controller::{Controller, Settings, Shared};
pub use daemon_cmd::{daemon_command, DaemonArgs};
use output::Console;

/// `dpm run ARGS` / `mpiexec ARGS`: returns the process exit status.
pub fn run_command(args: &[String]) -> i32 {
    if let Some(at) = args.iter().position(|a| a == "-pmi_args") {
        return singleton::run(&args[at + 1..], args[..at].iter().any(|a| a == "-v"));
    }
    let opts = match cli::parse_run(args) {
        Ok(o) => o,
        Err(CliError::Help) => {
            print!("{RUN_HELP}");
            return 0;
        }
        Err(CliError::Version) => {
            println!("dpm {}", env!("CARGO_PKG_VERSION"));
            return 0;
        }
        Err(e) => {
            eprintln!("dpm run: {e}");
            return 2;
        }
    };
    init_logging(opts.verbose);
    for w in &opts.warnings {
        tracing::warn!("{w}");
    }
    raise_fd_limit();
    if boot::wants_boot(&opts) {
        match boot::connect() {
            Ok(Some(stream)) => return block_on_local("dpm run", boot::run_through(stream, opts)),
            Ok(None) => {}
            Err(e) => tracing::warn!("not looking for a boot: {e}"),
        }
    }
    block_on_local("dpm run", run_local(opts))
}

/// `--timeout`, else `MPIEXEC_TIMEOUT` (Hydra's variable).
pub(crate) fn timeout_secs(opts: &RunOptions) -> Option<u64> {
    opts.timeout.or_else(|| std::env::var("MPIEXEC_TIMEOUT").ok().and_then(|v| v.parse().ok()))
}

/// `--tree-fanout`, else `DPM_FANOUT`, else 32.
pub(crate) fn fanout(opts: &RunOptions) -> usize {
    opts.fanout.or_else(|| std::env::var("DPM_FANOUT").ok().and_then(|v| v.parse().ok())).unwrap_or(32).max(1)
}

/// Run a job: start the nodes' daemons, place and launch, serve until the end.
async fn run_local(opts: RunOptions) -> i32 {
    let host = this_host();
    let (mut node_list, bootstrap) = match nodes_and_bootstrap(&opts, &host) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("dpm run: {e}");
            return 2;
        }
    };
    let (launcher_env, cwd, planned) = match plan_here(&opts) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let size = planned.procs.len() as u32;
    let kvs = match opts.kvs.map_or_else(cli::kvs_from_env, Ok) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("dpm run: DPM_KVS: {e}");
            return 2;
        }
    };
    let timeout = timeout_secs(&opts);
    // On one node, an explicit universe size is its slot count.
    if let (Some(u), [only]) = (opts.universe_size, node_list.as_mut_slice()) {
        if u > 0 {
            only.slots = u32::try_from(u).unwrap_or(u32::MAX);
        }
    }
    let slots: Vec<u32> = node_list.iter().map(|n| n.slots).collect();
    let node_of = plan::place(size as usize, &slots, opts.ppn, opts.map_by_node);

    let fanout = bootstrap.effective_fanout(fanout(&opts), node_list.len());
    let daemons = match nodes::start(&node_list, &bootstrap, fanout, opts.pmi_trace, opts.verbose).await {
        Ok(d) => d,
        Err(e) => {
            eprintln!("dpm run: {e}");
            return 1;
        }
    };
    let universe_size = opts.universe_size.unwrap_or_else(|| slots.iter().map(|&s| i64::from(s)).sum());
    let pmi_mode = if opts.pmi_port { PmiMode::Port } else { PmiMode::Fd };
    let settings = Settings {
        label: opts.label,
        kill_grace: Duration::from_secs_f64(opts.kill_grace.max(0.0)),
        universe_size,
        pmi_mode,
        no_oversubscribe: opts.no_oversubscribe,
        report_placement: opts.report_placement,
        spawn: spawn::SpawnContext {
            base_env: plan::segment_env(&opts, &opts.segments[0], &launcher_env),
            cwd: cwd.clone(),
            host: host.clone(),
            nodes: node_list.iter().map(|n| n.host.clone()).collect(),
        },
        node_slots: slots,
        fanout,
        owner: std::process::id(),
    };
    let start = move |controller: &mut Controller| {
        let (job, kvsname) = controller.new_job_id();
        let launch = planned.into_launch(job, kvsname, universe_size, node_of, pmi_mode, kvs);
        controller.launch(LaunchJob { stdin_rank: Some(Rank(0)), ..launch });
    };
    drive(daemons, settings, start, timeout.map(Duration::from_secs), true).await
}

/// Drive one run on daemons started for it, to its end; then shut them down.
pub(crate) async fn drive(
    daemons: nodes::Daemons,
    settings: Settings,
    start: impl FnOnce(&mut Controller),
    timeout: Option<Duration>,
    stdin: bool,
) -> i32 {
    let (links, up, waiter) = daemons.split();
    let shared = Shared::for_run(&links, &settings);
    tokio::task::spawn_local(controller::dispatch(up, shared.clone(), None));
    let mut controller = Controller::new(settings, links.clone(), shared, Console::Local);
    start(&mut controller);
    let code = controller.run(timeout, controller::local_inputs(stdin)).await;
    // The daemons kill whatever is left when they shut down; wait for that.
    // Dropping the links closes their pipes: a daemon's blocked read ends.
    for link in links {
        let _ = link.tx.send(ToDaemon::Shutdown);
    }
    waiter.wait().await;
    code
}

/// This process's environment and directory, and the job planned in them.
pub(crate) type PlannedHere = (Vec<(String, String)>, std::path::PathBuf, plan::PlannedJob);

/// The job planned in this process's environment and directory (programs
/// resolved like `execvp` after `chdir`); on error, said, with the exit status.
pub(crate) fn plan_here(opts: &RunOptions) -> Result<PlannedHere, i32> {
    let launcher_env: Vec<(String, String)> = std::env::vars().collect();
    let cwd = std::env::current_dir().map_err(|e| {
        eprintln!("dpm run: cannot read the current directory: {e}");
        1
    })?;
    let planned = plan::plan_job(opts, &launcher_env, &cwd).map_err(|e| {
        eprintln!("dpm run: {e}");
        e.exit_code()
    })?;
    Ok((launcher_env, cwd, planned))
}

/// The node list (flag → environment → default) and how to start daemons there.
pub(crate) fn nodes_and_bootstrap(opts: &RunOptions, host: &str) -> Result<(Vec<nodes::Node>, nodes::Bootstrap), String> {
    let cpus = cli::cpus().max(1) as u32;
    let parse = |entry: &str| -> Result<nodes::Node, String> {
        let entry = entry.trim();
        let (name, slots) = if let Some((n, rest)) = entry.split_once(char::is_whitespace) {
            let slots = rest.trim().strip_prefix("slots=").ok_or_else(|| format!("host entry '{entry}': expected 'name slots=N'"))?;
            (n, Some(slots))
        } else if let Some((n, s)) = entry.split_once(':') {
            (n, Some(s))
        } else {
            (entry, None)
        };
        let slots = match slots {
            Some(s) => s.trim().parse().ok().filter(|&n: &u32| n > 0).ok_or_else(|| format!("host entry '{entry}': bad slot count"))?,
            None => cpus,
        };
        Ok(nodes::Node { host: name.to_string(), slots })
    };
    let mut list: Vec<nodes::Node> = Vec::new();
    if let Some(file) = &opts.hostfile {
        let text = std::fs::read_to_string(file).map_err(|e| format!("host file {file}: {e}"))?;
        for line in text.lines().map(|l| l.split('#').next().unwrap_or("").trim()).filter(|l| !l.is_empty()) {
            list.push(parse(line)?);
        }
        if list.is_empty() {
            return Err(format!("host file {file} names no host"));
        }
    }
    for h in &opts.hosts {
        list.push(parse(h)?);
    }
    let virtual_nodes = opts.virtual_nodes.is_some();
    if virtual_nodes && !list.is_empty() {
        return Err("--virtual-nodes and -hosts/-f exclude each other".into());
    }
    let mut from_slurm = false;
    if let Some(n) = opts.virtual_nodes {
        list = (0..n).map(|k| nodes::Node { host: format!("{host}-v{k}"), slots: cpus }).collect();
    } else if list.is_empty() {
        if let Ok(env) = std::env::var("DPM_HOSTS") {
            for h in env.split(',').filter(|h| !h.trim().is_empty()) {
                list.push(parse(h)?);
            }
        } else if let Ok(nodelist) = std::env::var("SLURM_JOB_NODELIST") {
            list = slurm_nodes(&nodelist)?;
            from_slurm = true;
        }
    }
    let launcher = opts.launcher.clone().or_else(|| std::env::var("DPM_LAUNCHER").ok());
    if list.is_empty() {
        if launcher.as_deref() == Some("manual") {
            return Err("-launcher manual needs the nodes: -hosts, -f or DPM_HOSTS".into());
        }
        return Ok((vec![nodes::Node { host: host.to_string(), slots: cpus }], nodes::Bootstrap::InProcess));
    }
    let all_local = virtual_nodes || list.iter().all(|n| is_this_host(&n.host, host));
    let ssh = || -> Vec<String> {
        let cmd = opts.ssh_command.clone().or_else(|| std::env::var("DPM_SSH").ok()).unwrap_or_else(|| "ssh -o BatchMode=yes".into());
        cmd.split_whitespace().map(String::from).collect()
    };
    let bootstrap = match launcher.as_deref() {
        Some("ssh" | "slurm" | "manual") if virtual_nodes => return Err("--virtual-nodes run on this machine; they start with fork".into()),
        Some("slurm") if std::env::var_os("SLURM_JOB_ID").is_none() => {
            return Err("-launcher slurm works inside a Slurm allocation (salloc, sbatch) only".into())
        }
        Some("slurm") => nodes::Bootstrap::Slurm,
        Some("ssh") => nodes::Bootstrap::Ssh(ssh()),
        Some("fork") if all_local => nodes::Bootstrap::Fork,
        Some("fork") => return Err("-launcher fork starts daemons on this machine only; use ssh for other hosts".into()),
        Some("manual") => nodes::Bootstrap::Manual(manual::Manual {
            bind: opts.bind,
            timeout: opts
                .connect_timeout
                .or_else(|| std::env::var("DPM_CONNECT_TIMEOUT").ok().and_then(|v| v.parse().ok()))
                .map_or(manual::DEFAULT_TIMEOUT, Duration::from_secs),
        }),
        Some(other) => return Err(format!("unknown launcher '{other}' (fork, ssh, slurm or manual)")),
        None if list.len() == 1 && (all_local || from_slurm) && is_this_host_or_slurm_node(&list[0].host, host) => {
            nodes::Bootstrap::InProcess
        }
        None if from_slurm => nodes::Bootstrap::Slurm,
        // --virtual-nodes N promises N daemon processes, even for N = 1.
        None if all_local && list.len() == 1 && !virtual_nodes => nodes::Bootstrap::InProcess,
        None if all_local => nodes::Bootstrap::Fork,
        None => nodes::Bootstrap::Ssh(ssh()),
    };
    Ok((list, bootstrap))
}

/// A one-node Slurm allocation on the node dpm runs on needs no srun step.
fn is_this_host_or_slurm_node(node: &str, host: &str) -> bool {
    is_this_host(node, host) || std::env::var("SLURMD_NODENAME").is_ok_and(|n| n == node)
}

/// The nodes of the Slurm allocation: names expanded by `scontrol show
/// hostnames`, slots from `SLURM_TASKS_PER_NODE` (`2(x3),1` means 2,2,2,1).
fn slurm_nodes(nodelist: &str) -> Result<Vec<nodes::Node>, String> {
    let out = std::process::Command::new("scontrol")
        .args(["show", "hostnames", nodelist])
        .output()
        .map_err(|e| format!("SLURM_JOB_NODELIST is set but scontrol cannot be run: {e}"))?;
    if !out.status.success() {
        return Err(format!("scontrol show hostnames {nodelist}: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    let hosts: Vec<String> = String::from_utf8_lossy(&out.stdout).split_whitespace().map(String::from).collect();
    let slots = std::env::var("SLURM_TASKS_PER_NODE").map(|v| expand_slurm_counts(&v)).unwrap_or_default();
    let cpus = cli::cpus().max(1) as u32;
    Ok(hosts.into_iter().enumerate().map(|(i, host)| nodes::Node { host, slots: slots.get(i).copied().unwrap_or(cpus) }).collect())
}

/// `2(x3),1` → `[2, 2, 2, 1]` (Slurm's compressed per-node counts).
fn expand_slurm_counts(text: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (count, times) = match item.split_once("(x") {
            Some((c, t)) => (c, t.trim_end_matches(')')),
            None => (item, "1"),
        };
        if let (Ok(c), Ok(t)) = (count.parse::<u32>(), times.parse::<usize>()) {
            out.extend(std::iter::repeat_n(c.max(1), t));
        }
    }
    out
}

/// Run `main` to completion on one thread: the daemon keeps its state in a
/// `LocalSet` (see dpm-daemon), and ranks are started from threads that live
/// as long as the process.
pub(crate) fn block_on_local(who: &str, main: impl std::future::Future<Output = i32>) -> i32 {
    match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => {
            let code = runtime.block_on(tokio::task::LocalSet::new().run_until(main));
            // Not waiting for blocking reads still pending (tokio's stdin of a
            // daemon whose link is still open): the process is done.
            runtime.shutdown_background();
            code
        }
        Err(e) => {
            eprintln!("{who}: cannot start the runtime: {e}");
            1
        }
    }
}

pub(crate) fn this_host() -> String {
    nix::unistd::gethostname().map_or_else(|_| "localhost".into(), |h| h.to_string_lossy().into_owned())
}

pub(crate) fn is_this_host(name: &str, host: &str) -> bool {
    let name = name.split(':').next().unwrap_or(name);
    name == host || name == "localhost" || name == "127.0.0.1" || name == "::1" || host.split('.').next() == Some(name)
}

/// Logging: `-v` (debug), `-vv` (trace), or a `DPM_LOG` filter such as `dpm_daemon=trace`.
pub fn init_logging(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let default = match verbose {
        0 => "warn",
        1 => "debug",
        _ => "trace",
    };
    let filter = std::env::var("DPM_LOG").ok().and_then(|f| EnvFilter::try_new(f).ok()).unwrap_or_else(|| EnvFilter::new(default));
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}

/// Each rank costs the daemon a socket and two or three pipe ends.
pub(crate) fn raise_fd_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < hard {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn slurm_counts_expand() {
        assert_eq!(super::expand_slurm_counts("2(x3),1"), vec![2, 2, 2, 1]);
        assert_eq!(super::expand_slurm_counts("4"), vec![4]);
        assert_eq!(super::expand_slurm_counts(""), Vec::<u32>::new());
    }
}
