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
}

fn main() {
    let mut argv: Vec<String> = std::env::args().collect();
    let invoked_as = argv.first().and_then(|a| a.rsplit('/').next()).unwrap_or("dpm").to_string();
    if matches!(invoked_as.as_str(), "mpiexec" | "mpirun" | "mpiexec.dpm") {
        argv.remove(0);
        std::process::exit(dpm_launcher::run_command(&argv));
    }
    let code = match Cli::parse().command {
        Command::Run { args } => dpm_launcher::run_command(&args),
    };
    std::process::exit(code);
}
