//! # dpm: the single binary
//!
//! `dpm run …` launches a job (a drop-in `mpiexec`). Invoked under the name
//! `mpiexec` or `mpirun` (a symlink), dpm behaves as `dpm run`.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "dpm", version, about = "dpm: a fast, scalable process manager for MPI with first-class dynamic processes")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Launch an MPI job (Hydra mpiexec options; see `dpm run --help`).
    #[command(disable_help_flag = true)]
    Run {
        /// mpiexec-style options, then PROGRAM [ARGS...] [: ...]
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<String>,
    },
    /// Start a persistent daemon tree in the background (see `dpm boot --help`).
    #[command(disable_help_flag = true)]
    Boot {
        /// Nodes and bootstrap options, as for dpm run.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<String>,
    },
    /// List the booted tree's nodes, jobs and load.
    Status,
    /// Stop the booted tree: end its jobs, stop its daemons.
    Down,
    /// A node daemon, started by `dpm run` or a parent daemon through fork,
    /// ssh or srun (speaks the internal protocol on stdin/stdout), or by hand
    /// with --connect for `dpm run -launcher manual`. The secret that
    /// authenticates the link never goes on this command line: it comes in
    /// DPM_SECRET_FILE (a 0600 file of yours) or DPM_SECRET, or on stdin.
    Daemon {
        /// The node index the launcher assigned.
        #[arg(long)]
        node: usize,
        /// The node's name as the job sees it (default: this host's name).
        #[arg(long)]
        host: Option<String>,
        /// Connect to the launcher at HOST:PORT (the command `dpm run
        /// -launcher manual` printed) instead of serving stdin/stdout.
        #[arg(long, value_name = "HOST:PORT")]
        connect: Option<String>,
        /// Read the secret as the first frame on stdin (how ssh and srun
        /// daemons get it; set by dpm itself).
        #[arg(long, conflicts_with = "connect")]
        secret_stdin: bool,
        /// Seconds of silence after which a link is taken as lost (set by
        /// dpm itself from DPM_HEARTBEAT_TIMEOUT; default 1.5).
        #[arg(long, value_name = "SECONDS", value_parser = heartbeat_timeout)]
        heartbeat_timeout: Option<std::time::Duration>,
        /// Emit --pmi-trace lines.
        #[arg(long)]
        pmi_trace: bool,
        /// Log verbosity (repeat for more).
        #[arg(short, action = clap::ArgAction::Count)]
        verbose: u8,
    },
}

fn heartbeat_timeout(value: &str) -> Result<std::time::Duration, String> {
    dpm_proto::frame::parse_heartbeat_timeout(value).map_err(|e| e.to_string())
}

fn main() {
    let mut argv: Vec<String> = std::env::args().collect();
    let invoked_as = argv.first().and_then(|a| a.rsplit('/').next()).unwrap_or("dpm").to_string();
    if matches!(invoked_as.as_str(), "mpiexec" | "mpirun" | "mpiexec.dpm") {
        argv.remove(0);
        // A launcher makes its own secret; an inherited one goes nowhere.
        dpm_proto::auth::scrub_env();
        std::process::exit(dpm_launcher::run_command(&argv));
    }
    let code = match Cli::parse().command {
        Command::Daemon { node, host, connect, secret_stdin, heartbeat_timeout, pmi_trace, verbose } => {
            if let Some(timeout) = heartbeat_timeout {
                dpm_proto::frame::set_heartbeat_timeout(timeout);
            }
            dpm_launcher::daemon_command(dpm_launcher::DaemonArgs { node, host, pmi_trace, verbose, secret_stdin, connect })
        }
        // A launcher (or boot server) makes its own secret; an inherited one
        // goes nowhere.
        command => {
            dpm_proto::auth::scrub_env();
            match command {
                Command::Run { args } => dpm_launcher::run_command(&args),
                Command::Boot { args } => dpm_launcher::boot::boot_command(&args),
                Command::Status => dpm_launcher::boot::status_command(),
                Command::Down => dpm_launcher::boot::down_command(),
                Command::Daemon { .. } => unreachable!("matched above"),
            }
        }
    };
    std::process::exit(code);
}
