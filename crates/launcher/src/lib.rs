//! # dpm-launcher: `dpm run`, the root of a job
//!
//! - [`cli`]: the mpiexec-compatible command line.
//! - [`plan`]: executables, environments, working directories, process mapping.
//! - [`controller`]: the launcher's event loop: fences, name service, failure
//!   policy, signals, timeout, stdin, exit status.
//! - [`output`]: the ranks' stdout/stderr, raw or labelled.
//!
//! On one machine the launcher starts its node daemon inside its own process
//! and talks to it over channels carrying the same [`dpm_proto`] messages a
//! remote daemon would get.

pub mod cli;
pub mod controller;
pub mod output;
pub mod plan;
pub mod singleton;
pub mod spawn;

use std::time::Duration;

use tokio::sync::mpsc;

use dpm_kvs::Rank;
use dpm_proto::{LaunchJob, PmiMode};

use cli::{CliError, RunOptions, RUN_HELP};
use controller::{Controller, DaemonLink, Settings};

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
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("dpm: cannot start the runtime: {e}");
            return 1;
        }
    };
    // One thread: the daemon keeps its state in a LocalSet (see dpm-daemon).
    runtime.block_on(tokio::task::LocalSet::new().run_until(run_local(opts)))
}

/// Run a job on this machine: one node daemon, in this process.
async fn run_local(opts: RunOptions) -> i32 {
    let host = this_host();
    for h in &opts.hosts {
        if !is_this_host(h, &host) {
            eprintln!("dpm run: host '{h}' is not this machine; running on other hosts needs the multi-node support, which this dpm does not have yet");
            return 2;
        }
    }
    let launcher_env: Vec<(String, String)> = std::env::vars().collect();
    let cwd = match std::env::current_dir() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("dpm run: cannot read the current directory: {e}");
            return 1;
        }
    };
    let planned = match plan::plan_job(&opts, &launcher_env, &cwd) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("dpm run: {e}");
            return e.exit_code();
        }
    };
    let size = planned.procs.len() as u32;
    let timeout = opts.timeout.or_else(|| std::env::var("MPIEXEC_TIMEOUT").ok().and_then(|v| v.parse().ok()));

    let universe_size = opts.universe_size.unwrap_or_else(cli::cpus);
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
        },
    };
    let (mut controller, daemon) = start_local(settings, opts.pmi_trace);
    let (job, kvsname) = controller.new_job_id();
    controller.launch(
        0,
        LaunchJob {
            job,
            kvsname,
            size,
            appnums: planned.appnums,
            universe_size,
            process_mapping: plan::process_mapping(&vec![0; size as usize]),
            spawner: None,
            preput: Vec::new(),
            pmi_mode,
            stdin_rank: Some(Rank(0)),
            apps: planned.apps,
            procs: planned.procs,
        },
    );
    let code = controller.run(timeout.map(Duration::from_secs)).await;
    // The daemon kills whatever is left when it shuts down; wait for that.
    let _ = daemon.await;
    code
}

/// The controller and its one node daemon, in this process.
pub(crate) fn start_local(settings: Settings, trace: bool) -> (Controller, tokio::task::JoinHandle<()>) {
    let (down_tx, down_rx) = mpsc::unbounded_channel();
    let (up_tx, up_rx) = mpsc::unbounded_channel();
    let host = settings.spawn.host.clone();
    let config = dpm_daemon::DaemonConfig { host: host.clone(), trace };
    let daemon = tokio::task::spawn_local(dpm_daemon::run(config, down_rx, up_tx));
    (Controller::new(settings, vec![DaemonLink { tx: down_tx, host }], up_rx), daemon)
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
fn raise_fd_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < hard {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
        }
    }
}
