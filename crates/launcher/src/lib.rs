//! # dpm-launcher: `dpm run`, the root of a job
//!
//! - [`options`]: the one table of `dpm run`/`dpm boot` options and their help;
//!   [`cli`]: the mpiexec-compatible parser over it.
//! - [`config`]: [`config::RunConfig`], resolved once from options and
//!   environment for cold and booted runs; the controller's settings.
//! - [`hosts`]: the node list and the bootstrap; [`machine`]: this machine's
//!   name and [`machine::Node`].
//! - [`plan`]: executables and working directories resolved over
//!   [`plan::Files`], a job's processes, process mapping; [`local`]: the
//!   command line's segments planned here, one run driven to its end.
//! - [`runtime`]: every command's one-thread runtime and open-file limit.
//! - [`run`]: the run reactor, a plain state machine: jobs, fences, spawns,
//!   failure policy, exit status, acting through [`run::RunEffects`].
//! - [`controller`]: its async driver (channels, signals, timers) and
//!   [`controller::dispatch`], which routes daemon messages to runs.
//! - [`node_table`]: the nodes, their load, and the one placer.
//! - [`output`]: the ranks' stdout/stderr, raw or labelled.
//! - [`nodes`], [`manual`]: starting the daemon tree;
//!   [`private_dir`]: the per-user runtime directory for secrets.
//! - [`boot`]: `dpm boot`, `dpm status`, `dpm down`, runs through a boot.
//! - [`daemon_cmd`]: `dpm daemon`; [`singleton`]: `mpiexec -pmi_args`.
//! - [`error`]: the typed errors every command returns, with their exit
//!   status; the binary renders them once.
//!
//! On one machine the launcher starts its node daemon inside its own process
//! and talks to it over channels carrying the same [`dpm_proto`] messages a
//! remote daemon would get.

pub mod boot;
pub mod cli;
pub mod config;
pub mod configfile;
pub mod controller;
pub mod daemon_cmd;
pub mod error;
pub mod hosts;
pub mod kvs_root;
pub mod local;
pub mod machine;
pub mod manual;
pub mod mpi_probe;
pub mod mpir;
pub mod node_table;
pub mod nodes;
pub mod options;
pub mod outfile;
pub mod output;
pub mod plan;
pub mod pmi_choice;
pub mod private_dir;
pub mod run;
pub mod run_table;
pub mod runtime;
pub mod singleton;
pub mod spawn;

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
            RunRequest::Help | RunRequest::Version => 0,
        }
    }
}

/// Parse `dpm run ARGS` / `mpiexec ARGS`.
pub fn parse_run_command(args: &[String]) -> Result<RunRequest, Error> {
    if let Some(at) = args.iter().position(|a| a == "-pmi_args") {
        let verbose = u8::from(args[..at].iter().any(|a| a == "-v"));
        return Ok(RunRequest::Singleton { args: args[at + 1..].to_vec(), verbose });
    }
    match cli::parse_run(args) {
        Ok(o) => Ok(RunRequest::Run(Box::new(o))),
        Err(CliError::Help) => Ok(RunRequest::Help),
        Err(CliError::Version) => Ok(RunRequest::Version),
        Err(e) => Err(e.into()),
    }
}

/// `dpm run`: returns the run's exit status, or why there was no run.
pub fn run_command(opts: RunOptions) -> Result<i32, Error> {
    // `%t` of the output patterns counts from here.
    outfile::started();
    let mut config = RunConfig::from_env(&opts)?;
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
    block_on_local(run_local(opts, config))
}

/// Run a job: start the nodes' daemons, place and launch, serve until the end.
async fn run_local(opts: RunOptions, mut config: RunConfig) -> Result<i32, Error> {
    let host = opts.localhost.clone().unwrap_or_else(this_host);
    let hosts::NodeChoice { nodes: mut node_list, bootstrap, slots_known } = hosts::nodes_and_bootstrap(&opts, &config, &host)?;
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
    let node_of: Vec<NodeId> = node_table::fill(size as usize, &slots, config.job.ppn, config.job.map_by_node).into_iter().map(NodeId).collect();

    let fanout = bootstrap.effective_fanout(config.fanout, node_list.len());
    let daemons = nodes::start(&node_list, &bootstrap, fanout, config.pmi_trace, config.verbose).await?;
    let total: i64 = slots.iter().map(|&s| i64::from(s)).sum();
    let universe_size = config::universe_size(config.job.universe_size, total, slots_known, size, config.job.no_oversubscribe);
    let spawn = config::spawn_context(local::segment_env(&opts, &opts.segments[0], &launcher_env), cwd, host, &node_list);
    let settings = config::settings(&config, universe_size, spawn, slots, fanout, std::process::id());
    let (pmi_mode, kvs, policy, binding) = (config.job.pmi_mode, config.job.kvs, config.job.failure_policy, Box::new(config.job.binding.clone()));
    let (pmix_watch, hold) = (config.job.pmix_watch, config.job.hold);
    let patterns = output::FilePatterns { stdout: opts.outfile_pattern.clone(), stderr: opts.errfile_pattern.clone() };
    let start = move |controller: &mut Controller| {
        controller.set_failure_policy(policy);
        controller.set_file_patterns(patterns);
        let (job, kvsname) = controller.new_job_id();
        let launch = planned.into_launch(job, kvsname, universe_size, node_of, pmi_mode, kvs);
        controller.launch(LaunchJob { stdin_rank: Some(Rank(0)), binding, pmix_watch, hold, ..launch });
    };
    Ok(local::drive(daemons, settings, start, config.job.timeout, true).await)
}
