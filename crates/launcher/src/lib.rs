//! # dpm-launcher: `dpm run`, the root of a job
//!
//! - [`options`]: the one table of `dpm run`/`dpm boot` options and their help;
//!   [`cli`]: the mpiexec-compatible parser over it.
//! - [`config`]: [`config::RunConfig`], resolved once from options and
//!   environment for cold and booted runs; the controller's settings.
//! - [`cli::hydra_env`]: Hydra's variables that stand for options (`HYDRA_ENV`,
//!   `HYDRA_HOST_FILE`, `HYDRA_BINDING`, `MPIEXEC_PORT_RANGE`, …).
//! - [`hosts`]: the node list and the bootstrap; [`machine`]: this machine's
//!   name and [`machine::Node`].
//! - [`plan`]: executables and working directories resolved over
//!   [`plan::Files`], a job's processes, process mapping; [`local`]: the
//!   command line's segments planned here, one run driven to its end.
//! - [`runtime`]: every command's one-thread runtime and open-file limit.
//! - [`run`]: the run reactor, a plain state machine: jobs, fences, spawns,
//!   failure policy, exit status, acting through [`run::RunEffects`].
//! - [`tree`]: the tree level, a plain state machine: a daemon tree's runs,
//!   routes, pool and node table, acting through [`tree::TreeEffects`].
//! - [`controller`]: their async drivers (channels, signals, timers);
//!   [`controller::dispatch`] hands the tree the daemons' messages.
//! - [`node_table`]: the nodes, their load, and the one placer.
//! - [`output`]: the ranks' stdout/stderr, raw or labelled.
//! - [`nodes`], [`manual`]: starting the daemon tree; [`lazy`]: daemons
//!   started when first needed, and joining a running tree;
//!   [`private_dir`]: the per-user runtime directory for secrets.
//! - [`boot`]: `dpm boot`, `dpm status`, `dpm down`, runs through a boot.
//! - [`daemon_cmd`]: `dpm daemon`; [`singleton`]: `mpiexec -pmi_args`.
//! - [`error`]: the typed errors every command returns, with their exit
//!   status; the binary renders them once.
//!
//! On one machine the launcher starts its node daemon inside its own process
//! and talks to it over channels carrying the same [`dpm_proto`] messages a
//! remote daemon would get.

pub mod advice;
pub mod agent;
pub mod batch;
pub mod boot;
pub mod cli;
pub mod config;
pub mod configfile;
pub mod controller;
pub mod daemon_cmd;
pub mod error;
pub mod exitcodes;
pub mod hosts;
pub mod info;
pub mod kvs_root;
pub mod local;
pub mod machine;
pub mod manual;
pub mod mpi_probe;
pub mod mpir;
pub mod node_order;
pub mod node_table;
pub mod nodes;
pub mod options;
pub mod outfile;
pub mod output;
pub mod plan;
pub mod pmi_choice;
pub mod ports;
pub mod private_dir;
pub mod run;
pub mod run_table;
pub mod runtime;
pub mod singleton;
pub mod spawn;
pub mod tree;

use dpm_kvs::{NodeId, Rank};
use dpm_proto::LaunchJob;

use cli::{CliError, RunOptions};
use config::RunConfig;
use controller::Controller;
pub use daemon_cmd::{daemon_command, DaemonArgs};
pub use error::Error;
use local::plan_here;
use machine::this_host;
use runtime::block_on_local;
pub use runtime::raise_fd_limit;

/// What `dpm run ARGS` (or `mpiexec ARGS`) asks for.
#[derive(Debug)]
pub enum RunRequest {
    Help,
    Version,
    /// `-info`: dpm's build details, nothing run.
    Info,
    /// `mpiexec -pmi_args PORT INTERFACE KEY PID`: serve a singleton.
    Singleton {
        args: Vec<String>,
        verbose: u8,
    },
    Run(Box<RunOptions>),
}

impl RunRequest {
    /// The `-v` count, for the binary's logging.
    pub fn verbose(&self) -> u8 {
        match self {
            RunRequest::Singleton { verbose, .. } => *verbose,
            RunRequest::Run(opts) => opts.verbose,
            RunRequest::Help | RunRequest::Version | RunRequest::Info => 0,
        }
    }
}

/// Parse `dpm run ARGS` / `mpiexec ARGS`.
pub fn parse_run_command(args: &[String]) -> Result<RunRequest, Error> {
    if let Some(at) = args.iter().position(|a| a == "-pmi_args") {
        let verbose = u8::from(args[..at].iter().any(|a| a == "-v"));
        return Ok(RunRequest::Singleton { args: args[at + 1..].to_vec(), verbose });
    }
    match cli::parse_run_with_env(args, &|k| std::env::var(k).ok()) {
        Ok(o) => Ok(RunRequest::Run(Box::new(o))),
        Err(CliError::Help) => Ok(RunRequest::Help),
        Err(CliError::Version) => Ok(RunRequest::Version),
        Err(CliError::Info) => Ok(RunRequest::Info),
        Err(e) => Err(e.into()),
    }
}

/// `dpm run`: returns the run's exit status, or why there was no run.
pub fn run_command(mut opts: RunOptions) -> Result<i32, Error> {
    // `%t` of the output patterns counts from here.
    outfile::started();
    let mut config = RunConfig::from_env(&opts)?;
    if let Some(iface) = &config.iface {
        config::set_iface_var(&mut opts.genv, &iface.name);
        dpm_daemon::iface::choose(iface.clone());
    }
    check_output_files(&opts)?;
    // MPIR launch mode: a debugger that started us set this before `main`.
    config.job.hold = mpir::being_debugged();
    for w in &opts.warnings {
        tracing::warn!("{w}");
    }
    raise_fd_limit();
    if boot::wants_boot(&opts) {
        match boot::client::connect() {
            Ok(Some(stream)) => return block_on_local(boot::client::run_through(stream, opts, config)),
            Ok(None) => {}
            Err(e) => tracing::warn!("not looking for a boot: {e}"),
        }
    }
    // This process runs the job's node: its cleaner is forked now, while
    // the process has one thread, rather than exec'd later (issue 37).
    dpm_daemon::cleaner::prefork();
    block_on_local(run_local(opts, config))
}

/// `-outfile-pattern`/`-errfile-pattern` name files this user can create
/// (the first rank's, here): refused before anything starts otherwise.
fn check_output_files(opts: &RunOptions) -> Result<(), Error> {
    let host = opts.localhost.clone().unwrap_or_else(this_host);
    let cwd = std::env::current_dir().map_err(|e| Error::failed(format!("cannot read the current directory: {e}")))?;
    for (option, pattern) in [("-outfile-pattern", &opts.outfile_pattern), ("-errfile-pattern", &opts.errfile_pattern)] {
        if let Some(p) = pattern {
            outfile::preflight(option, p, &host, &cwd).map_err(error::UsageError::new)?;
        }
    }
    Ok(())
}

/// Run a job: start the nodes' daemons, place and launch, serve until the end.
async fn run_local(mut opts: RunOptions, mut config: RunConfig) -> Result<i32, Error> {
    let host = opts.localhost.clone().unwrap_or_else(this_host);
    let choice = hosts::nodes_and_bootstrap(&opts, &config, &host)?;
    // As Hydra: a program without -n runs on every slot of an allocation,
    // or of a host list (one for an entry without a count).
    let default_n = choice.allocation.as_ref().map(|a| a.nodes.iter().fold(0u32, |t, n| t.saturating_add(n.slots))).or(choice.listed);
    if let Some(n) = default_n {
        for seg in &mut opts.segments {
            seg.nprocs.get_or_insert(n);
        }
    }
    if config.job.report_placement {
        if let Some(what) = choice.describe_allocation() {
            eprintln!("dpm: nodes from the {what}");
        }
    }
    let hosts::NodeChoice { nodes: node_list, bootstrap, slots_known, .. } = choice;
    let real_host = this_host();
    let is_local = |name: &str| machine::is_this_host(name, &host) || machine::is_this_host(name, &real_host);
    let mut node_list = node_order::reshape(node_list, opts.skip_launch_node, opts.order_nodes, is_local).map_err(|e| error::UsageError(e.to_string()))?;
    let (launcher_env, cwd, mut planned) = plan_here(&opts)?;
    config.choose_pmi(&mut planned.apps)?;
    let size = planned.procs.len() as u32;
    // On one node, an explicit universe size is its slot count.
    if let (Some(u), [only]) = (config.job.universe_size, node_list.as_mut_slice()) {
        if u > 0 {
            only.slots = u32::try_from(u).unwrap_or(u32::MAX);
        }
    }
    let slots: Vec<u32> = node_list.iter().map(|n| n.slots).collect();
    let node_of = match &opts.rankmap {
        Some((text, map)) => map.place(text, size as usize, slots.len()).map_err(|e| error::UsageError(e.to_string()))?,
        None => node_table::fill(size as usize, &slots, config.job.ppn, config.job.map_by_node),
    };
    // The universe is the whole list's; daemons start only where the first
    // job has ranks (`node_order::split_used`), the other listed nodes'
    // when a spawn or the warm pool first needs them (`lazy`).
    let total: i64 = slots.iter().map(|&s| i64::from(s)).sum();
    let lazy_start = node_order::starts_used_only(&bootstrap, opts.virtual_nodes.is_some());
    let (node_list, all_nodes, node_of, slots) = if lazy_start {
        let (kept, rest, node_of) = node_order::split_used(node_list, &node_of);
        let all: Vec<machine::Node> = kept.iter().cloned().chain(rest).collect();
        let slots = all.iter().map(|n| n.slots).collect();
        (kept, all, node_of, slots)
    } else {
        (node_list.clone(), node_list, node_of, slots)
    };
    let node_of: Vec<NodeId> = node_of.into_iter().map(NodeId).collect();

    let given = opts.fanout.is_some() || std::env::var_os("DPM_FANOUT").is_some();
    let (fanout, kvs) = advice::choose(given, config.fanout, config.job.kvs, || {
        let kind = match &bootstrap {
            nodes::Bootstrap::Tree(dpm_proto::tree::Bootstrap::Fork) => "fork",
            nodes::Bootstrap::Tree(dpm_proto::tree::Bootstrap::Ssh(_)) => "ssh",
            nodes::Bootstrap::Tree(dpm_proto::tree::Bootstrap::Slurm(_)) => "slurm",
            _ => return None, // one node, or daemons started by hand: no tree to shape
        };
        let mut per = vec![0u32; node_list.len()];
        for n in &node_of {
            per[n.0] += 1;
        }
        let ppn = per.into_iter().max().unwrap_or(1).max(1);
        Some(advice::Shape { nodes: node_list.len(), ppn, bootstrap: kind, fanout: config.fanout, fanout_free: !given, kvs: config.job.kvs })
    })?;
    config.job.kvs = kvs;
    let fanout = bootstrap.effective_fanout(fanout, node_list.len());
    let secret = dpm_proto::auth::Secret::generate().map_err(|e| Error::failed(e.to_string()))?;
    let reach = nodes::Reach { rejoin: None, start_timeout: config.start_timeout };
    let daemons = nodes::start_with_secret(&node_list, &bootstrap, fanout, config.pmi_trace, config.verbose, &secret, reach).await?;
    let lazy = match &bootstrap {
        nodes::Bootstrap::Tree(b) if lazy_start && all_nodes.len() > node_list.len() => {
            Some(controller::lazy::Lazy::new(b.clone(), secret, daemons.joins(), config.verbose, config.start_timeout))
        }
        _ => None,
    };
    let universe_size = config::run_universe(&config, total, slots_known, size);
    let spawn = config::spawn_context(
        local::segment_env(&opts, &opts.segments[0], &launcher_env),
        cwd,
        host,
        &all_nodes,
        planned.apps.first().is_some_and(|a| a.node_env),
    );
    let mut settings = config::settings(&config, universe_size, spawn, slots, fanout, std::process::id());
    settings.heap_nodes = node_list.len();
    let (pmi_mode, kvs, policy, binding) = (config.job.pmi_mode, config.job.kvs, config.job.failure_policy, Box::new(config.job.binding.clone()));
    let (pmix_watch, hold) = (config.job.pmix_watch, config.job.hold);
    let patterns = output::FilePatterns { stdout: opts.outfile_pattern.clone(), stderr: opts.errfile_pattern.clone() };
    let (prepend, print_all_exitcodes) = (config.job.prepend.clone(), config.job.print_all_exitcodes);
    let start = move |controller: &mut Controller| {
        controller.set_failure_policy(policy);
        controller.set_file_patterns(patterns);
        controller.set_output_extras(prepend, print_all_exitcodes);
        let (job, kvsname) = controller.new_job_id();
        let launch = planned.into_launch(job, kvsname, universe_size, node_of, pmi_mode, kvs);
        controller.launch(LaunchJob { stdin_rank: Some(Rank(0)), binding, pmix_watch, hold, ..launch });
    };
    let code = local::drive(daemons, settings, start, config.job.timeout, true, lazy).await;
    if code == 0 && outfile::lost() {
        eprintln!("dpm: error: output that could not be written to its file went to stderr instead");
        return Ok(1);
    }
    Ok(code)
}
