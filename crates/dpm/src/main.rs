//! # dpm: the single binary
//!
//! `dpm run …` launches a job (a drop-in `mpiexec`). Invoked under the name
//! `mpiexec` or `mpirun` (a symlink), dpm behaves as `dpm run`.
//!
//! The binary owns the process-wide concerns: it sets up logging (the
//! library only emits `tracing` events) and renders a command's error once,
//! as `dpm: error: …`, exiting with the status the error maps to.
//!
//! It has no Rust `main`: the C `main` below is the entry, so that std's
//! runtime start (`lang_start`) does not run in every dpm process — see
//! [`main`].

// The unit tests' harness brings its own `main`.
#![cfg_attr(not(test), no_main)]
#![cfg_attr(test, allow(dead_code))]

use clap::{Parser, Subcommand};

mod logging;
mod man;
mod model;

/// `dpm --version`: the package version, the commit and the build date
/// (`build.rs`).
pub(crate) const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("DPM_COMMIT"), " ", env!("DPM_BUILD_DATE"), ")");
/// The build date alone, `YYYY-MM-DD` (the manual page's date).
pub(crate) const BUILD_DATE: &str = env!("DPM_BUILD_DATE");

use dpm_launcher::boot::cli::BootRequest;
use dpm_launcher::{Error, RunRequest};

#[derive(Parser)]
#[command(name = "dpm", version = VERSION, about = "dpm: a fast, scalable process manager for MPI with first-class dynamic processes")]
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
    Status {
        /// For tools: the boot's runs, jobs and ranks (host, pid, state), and
        /// the plain `dpm run`s of this user, as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Stop the booted tree: end its jobs, stop its daemons.
    Down,
    /// Predict startup and spawn costs at a scale, with their breakdown and
    /// the best KVS design and fan-out (simulated on dpm's own reactors).
    Model(model::ModelArgs),
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
        /// If the parent daemon is lost, re-attach to the launcher at
        /// HOST:PORT and keep serving (set by dpm itself for the daemons
        /// below the top of a boot's tree).
        #[arg(long, value_name = "HOST:PORT", conflicts_with = "connect")]
        rejoin: Option<String>,
        /// Seconds of silence after which a link is taken as lost (set by
        /// dpm itself from DPM_HEARTBEAT_TIMEOUT; default 1.5).
        #[arg(long, value_name = "SECONDS", value_parser = heartbeat_timeout)]
        heartbeat_timeout: Option<std::time::Duration>,
        /// The run's network interface (`-iface`): PMI ports listen on its
        /// address on this host (set by dpm itself).
        #[arg(long, value_name = "IF")]
        iface: Option<String>,
        /// Emit --pmi-trace lines.
        #[arg(long)]
        pmi_trace: bool,
        /// Log verbosity (repeat for more).
        #[arg(short, action = clap::ArgAction::Count)]
        verbose: u8,
    },
    /// Print the manual page, dpm(1), in roff (generated from the option
    /// tables; `man -l <(dpm man)` shows it).
    Man,
    /// The cleaner a node's process starts (`dpm_daemon::cleaner`): reads
    /// notes on stdin until that process is gone, then removes what its
    /// unended jobs left. Not for users.
    #[command(name = "clean-up-after", hide = true)]
    CleanUpAfter {
        /// The pid of the process it cleans up after.
        pid: u32,
    },
}

fn heartbeat_timeout(value: &str) -> Result<std::time::Duration, String> {
    dpm_proto::frame::parse_heartbeat_timeout(value).map_err(|e| e.to_string())
}

/// The process's entry, called by the C library's start.
///
/// std's `lang_start` is skipped: it costs every dpm process (a booted
/// run's client, each `dpm run`, the daemons) a read and `sscanf` parse of
/// `/proc/self/maps` (glibc's `pthread_getattr_np` for the main thread's
/// guard page), a signal stack and two handlers, ~20 system calls in all,
/// and a signal stack for every thread std starts later, for a message on
/// a stack overflow (which still ends the process, by SIGSEGV). What else it does, dpm does here: `SIGPIPE`
/// ignored (a write to a closed pipe is an `EPIPE` error) and closed
/// standard descriptors opened on `/dev/null`. `std::env::args` reads the
/// arguments glibc hands to initialisers, and every exit goes through
/// `std::process::exit`, which flushes stdout.
#[cfg(not(test))]
#[no_mangle]
pub extern "C" fn main(_argc: libc::c_int, _argv: *const *const libc::c_char) -> libc::c_int {
    start_like_std();
    dpm_main()
}

/// What std's start does that dpm needs: standard descriptors that are
/// closed are opened on `/dev/null` (so a file dpm opens never becomes its
/// stdout), and `SIGPIPE` ignored.
fn start_like_std() {
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd { fd, events: 0, revents: 0 });
    // SAFETY: `fds` is a valid array of three pollfd for the call's length.
    let polled = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 0) };
    if polled > 0 {
        for pfd in fds.iter().filter(|p| p.revents & libc::POLLNVAL != 0) {
            // SAFETY: a NUL-terminated path; the descriptor opened is the
            // lowest free one, which is this closed standard one.
            let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
            if fd != pfd.fd {
                std::process::abort();
            }
        }
    }
    // SAFETY: setting a signal's disposition to SIG_IGN, before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
}

fn dpm_main() -> ! {
    // Nodes this binary runs may start their cleaner as `dpm clean-up-after`.
    dpm_daemon::cleaner::process::enable();
    let mut argv: Vec<String> = std::env::args().collect();
    let invoked_as = argv.first().and_then(|a| a.rsplit('/').next()).unwrap_or("dpm").to_string();
    if matches!(invoked_as.as_str(), "mpiexec" | "mpirun" | "mpiexec.dpm") {
        argv.remove(0);
        // A launcher makes its own secret; an inherited one goes nowhere.
        dpm_proto::auth::scrub_env();
        exit(run(&argv));
    }
    // `dpm run` takes every later word as its own (it has its own option
    // table): straight there, without building clap's whole command tree
    // (its cost is on every job's start).
    if argv.get(1).map(String::as_str) == Some("run") {
        dpm_proto::auth::scrub_env();
        exit(run(&argv[2..]));
    }
    // The cleaner every `dpm run` starts (`dpm clean-up-after <pid>`, from
    // dpm itself): straight there too. Through clap it cost a third of its
    // CPU (issue 37: ~1.4 ms a run, beside the rank).
    if let [_, sub, pid] = argv.as_slice() {
        if sub == dpm_daemon::cleaner::process::SUBCOMMAND {
            if let Ok(pid) = pid.parse::<u32>() {
                logging::init(0);
                std::process::exit(dpm_daemon::cleaner::process::main(pid));
            }
        }
    }
    let outcome = match Cli::parse().command {
        Command::CleanUpAfter { pid } => {
            logging::init(0);
            std::process::exit(dpm_daemon::cleaner::process::main(pid));
        }
        Command::Daemon { node, host, connect, secret_stdin, rejoin, heartbeat_timeout, iface, pmi_trace, verbose } => {
            // Logging starts no thread: the daemon still takes its secret
            // out of the environment of a single-threaded process.
            logging::init(verbose);
            if let Some(timeout) = heartbeat_timeout {
                dpm_proto::frame::set_heartbeat_timeout(timeout);
            }
            let args = dpm_launcher::DaemonArgs { node: dpm_kvs::NodeId(node), host, pmi_trace, verbose, secret_stdin, connect, rejoin, iface };
            ("dpm daemon", dpm_launcher::daemon_command(args))
        }
        // A launcher (or boot server) makes its own secret; an inherited one
        // goes nowhere.
        command => {
            dpm_proto::auth::scrub_env();
            match command {
                Command::Run { args } => exit(run(&args)),
                Command::Boot { args } => ("dpm boot", boot(&args)),
                Command::Status { json } => {
                    logging::init(0);
                    ("dpm status", dpm_launcher::boot::client::status_command(json))
                }
                Command::Down => {
                    logging::init(0);
                    ("dpm down", dpm_launcher::boot::client::down_command())
                }
                Command::Model(args) => ("dpm model", model::command(args)),
                Command::Man => {
                    print!("{}", man::page());
                    ("dpm man", Ok(0))
                }
                Command::Daemon { .. } | Command::CleanUpAfter { .. } => unreachable!("matched above"),
            }
        }
    };
    exit(outcome);
}

/// Exit with the command's status, or say its error (the one place errors
/// are rendered) and exit with the error's status.
fn exit((who, result): (&str, Result<i32, Error>)) -> ! {
    let code = match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{}", e.render(who));
            e.exit_code()
        }
    };
    std::process::exit(code)
}

/// `dpm run ARGS` / `mpiexec ARGS`.
fn run(args: &[String]) -> (&'static str, Result<i32, Error>) {
    let request = match dpm_launcher::parse_run_command(args) {
        Ok(r) => r,
        Err(e) => return ("dpm run", Err(e)),
    };
    logging::init(request.verbose());
    match request {
        RunRequest::Help => {
            print!("{}", dpm_launcher::options::help::run_help());
            ("dpm run", Ok(0))
        }
        RunRequest::Version => {
            println!("dpm {VERSION}");
            ("dpm run", Ok(0))
        }
        RunRequest::Info => {
            print!("{}", dpm_launcher::info::build_details(VERSION));
            ("dpm run", Ok(0))
        }
        RunRequest::Singleton { args, .. } => ("mpiexec", dpm_launcher::singleton::run(&args)),
        RunRequest::Run(opts) => {
            // The startup model picks the fan-out a run was not given.
            dpm_launcher::advice::set_advisor(model::advise);
            ("dpm run", dpm_launcher::run_command(*opts))
        }
    }
}

/// `dpm boot ARGS`.
fn boot(args: &[String]) -> Result<i32, Error> {
    match dpm_launcher::boot::cli::parse_boot_command(args)? {
        BootRequest::Help => {
            print!("{}", dpm_launcher::options::help::boot_help());
            Ok(0)
        }
        BootRequest::Boot(boot) => {
            logging::init(boot.opts.verbose);
            dpm_launcher::boot::cli::boot_command(boot)
        }
    }
}
