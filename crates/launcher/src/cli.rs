//! `dpm run` / `mpiexec` command line, in Hydra's grammar.
//!
//! clap cannot express mpiexec's grammar: single-dash long options (`-np 4`,
//! `-genv K V`, which clap would read as `-n -p` or as short clusters),
//! options taking two values, `:`-separated MPMD segments each with options
//! of their own, and a program whose own arguments look like options. So it
//! is parsed here by hand, option by option as [`crate::options`] lists them
//! (that table also renders `--help`). Options may be written with one or
//! two dashes, and `--opt=value` works for one-value options. `dpm boot`
//! takes the node options of `dpm run` through the same parser.
//! What each option then does to the options is `apply`'s.

mod apply;
pub mod hydra_env;

use dpm_kvs::design::UnknownDesign;
use dpm_kvs::KvsDesign;

use crate::error::UsageError;
use crate::node_order::{RankMap, SortOrder};
use crate::nodes::Launcher;
use crate::options::{self, Command, Key, MAX_SECS};
use crate::pmi_choice::PmiFlavour;
use crate::run::{parse_failure_policy, FailurePolicy};
use apply::apply;

/// How much of the launcher's environment the ranks inherit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EnvMode {
    /// Everything (Hydra's default).
    All,
    /// Nothing but what `-genv`/`-env` set.
    None,
    /// Only the named variables.
    List(Vec<String>),
}

/// One MPMD segment: `-n N [local options] prog args...`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    pub nprocs: Option<u32>,
    pub program: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub env_mode: Option<EnvMode>,
    pub wdir: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RunOptions {
    pub segments: Vec<Segment>,
    pub genv: Vec<(String, String)>,
    pub genv_mode: EnvMode,
    pub label: bool,
    pub timeout: Option<u64>,
    pub universe_size: Option<i64>,
    pub verbose: u8,
    pub pmi_trace: bool,
    pub pmi_port: bool,
    /// `--pmi simple|pmix|auto` (else `DPM_PMI`).
    pub pmi: Option<PmiFlavour>,
    /// Seconds between a forwarded SIGINT/SIGTERM and SIGKILL.
    pub kill_grace: f64,
    pub hosts: Vec<String>,
    pub no_oversubscribe: bool,
    /// `--on-spawned-failure end|continue` (else `DPM_ON_SPAWNED_FAILURE`).
    pub on_spawned_failure: Option<FailurePolicy>,
    pub report_placement: bool,
    /// `--get-stack-traces`, `--report-state-on-timeout` (PRRTE's).
    pub stack_traces: bool,
    pub report_state: bool,
    /// `--warm-spawn[=N]`: pooled jobs per spawn shape (else `DPM_WARM_SPAWN`).
    pub warm_spawn: Option<usize>,
    /// Said about the command line once logging is up (ignored options).
    pub warnings: Vec<String>,
    /// `-f FILE`: hosts, one `name[:slots]` or `name slots=N` per line.
    pub hostfile: Option<String>,
    /// `--virtual-nodes N`: N daemons on this machine, each a node.
    pub virtual_nodes: Option<u32>,
    /// `-launcher fork|ssh|slurm|manual`.
    pub launcher: Option<Launcher>,
    /// `-rmk pbs|lsf|sge|slurm|user`: where the nodes come from without a host list.
    pub rmk: Option<crate::batch::Rmk>,
    /// `--bind ADDR[:PORT]`: where `-launcher manual` listens.
    pub bind: Option<std::net::SocketAddr>,
    /// `--connect-timeout SECS`: how long `-launcher manual` waits for its daemons.
    pub connect_timeout: Option<u64>,
    /// `--ssh-command "ssh -o …"`.
    pub ssh_command: Option<String>,
    /// `-iface IF`: the network interface to use (else `HYDRA_IFACE`).
    pub iface: Option<String>,
    /// `-enable-x` (true) / `-disable-x` (false): `ssh -X` / `ssh -x`.
    pub x_forwarding: Option<bool>,
    /// `-ppn N`: ranks per node.
    pub ppn: Option<u32>,
    /// `--map-by node`: round robin over nodes instead of filling each.
    pub map_by_node: bool,
    /// `--tree-fanout K`: children per daemon in the daemon tree.
    pub fanout: Option<usize>,
    /// `--kvs DESIGN`: where puts live and how gets find them (else `DPM_KVS`).
    pub kvs: Option<KvsDesign>,
    /// `-bind-to`, `-map-by` (within a node), `--cpus-per-rank`, `-membind`,
    /// `--report-bindings`, `--gpus-per-rank`.
    pub binding: dpm_binding::BindPolicy,
    /// `-outfile-pattern` / `-errfile-pattern`: the ranks' stdout/stderr to
    /// files (checked patterns; see [`crate::outfile`]).
    pub outfile_pattern: Option<String>,
    pub errfile_pattern: Option<String>,
    /// `-localhost NAME`: this machine's name for the run.
    pub localhost: Option<String>,
    /// `-disable-auto-cleanup`: a failed rank does not end the others.
    pub disable_auto_cleanup: bool,
    /// `-prepend-pattern`: each output line's prefix (checked; `%r`…).
    pub prepend_pattern: Option<String>,
    /// `-print-all-exitcodes`: every rank's wait status at the end.
    pub print_all_exitcodes: bool,
    /// `-skip-launch-node`: this machine's entries leave the node list.
    pub skip_launch_node: bool,
    /// `-order-nodes`: the node list sorted by slots.
    pub order_nodes: Option<SortOrder>,
    /// `-rankmap`: the first job's ranks on these nodes (as written, parsed).
    pub rankmap: Option<(String, RankMap)>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            segments: Vec::new(),
            genv: Vec::new(),
            genv_mode: EnvMode::All,
            label: false,
            timeout: None,
            universe_size: None,
            verbose: 0,
            pmi_trace: false,
            pmi_port: false,
            pmi: None,
            kill_grace: 3.0,
            hosts: Vec::new(),
            no_oversubscribe: false,
            on_spawned_failure: None,
            report_placement: false,
            stack_traces: false,
            report_state: false,
            warm_spawn: None,
            warnings: Vec::new(),
            hostfile: None,
            virtual_nodes: None,
            launcher: None,
            rmk: None,
            bind: None,
            connect_timeout: None,
            ssh_command: None,
            iface: None,
            x_forwarding: None,
            ppn: None,
            map_by_node: false,
            fanout: None,
            kvs: None,
            binding: dpm_binding::BindPolicy::default(),
            outfile_pattern: None,
            errfile_pattern: None,
            localhost: None,
            disable_auto_cleanup: false,
            prepend_pattern: None,
            print_all_exitcodes: false,
            skip_launch_node: false,
            order_nodes: None,
            rankmap: None,
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum CliError {
    Help,
    Version,
    /// `-info`: build details, nothing run.
    Info,
    Usage(String),
}

impl From<CliError> for crate::error::Error {
    /// Help and version are answered before this; as errors they are usage errors.
    fn from(e: CliError) -> Self {
        match e {
            CliError::Usage(m) => crate::error::UsageError(m).into(),
            CliError::Help => crate::error::UsageError("help requested".into()).into(),
            CliError::Version => crate::error::UsageError("version requested".into()).into(),
            CliError::Info => crate::error::UsageError("build details requested".into()).into(),
        }
    }
}

/// `dpm boot`'s own flags, besides the node options it shares with `dpm run`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BootFlags {
    pub foreground: bool,
    /// Internal: the detached server says "ready" on stdout for its parent.
    pub ready_on_stdout: bool,
    /// `--add`: the node options name hosts to join the running boot.
    pub add: bool,
    /// `--drain HOSTS`: hosts to drain from the running boot.
    pub drain: Vec<String>,
    /// `--force` (with `--drain`).
    pub force: bool,
}

/// Parse the arguments after `dpm run` (or after `mpiexec`).
pub fn parse_run(args: &[String]) -> Result<RunOptions, CliError> {
    parse_run_with_env(args, &|_| None)
}

/// [`parse_run`] with Hydra's variables of `env` ([`hydra_env`]):
/// defaults the command line overrides.
pub fn parse_run_with_env(args: &[String], env: hydra_env::Env) -> Result<RunOptions, CliError> {
    let mut opts = RunOptions::default();
    hydra_env::defaults(&mut opts, env).map_err(|e| CliError::Usage(e.0))?;
    let (mut opts, _) = parse_into(opts, args, Command::Run)?;
    if opts.segments.is_empty() {
        return Err(CliError::Usage("no program given".into()));
    }
    hydra_env::host_file(&mut opts, env).map_err(|e| CliError::Usage(e.0))?;
    Ok(opts)
}

/// Parse the arguments after `dpm boot`: the node options of `dpm run` and its own.
pub fn parse_boot(args: &[String]) -> Result<(RunOptions, BootFlags), CliError> {
    parse(args, Command::Boot)
}

/// The one parser: every option is looked up in [`OPTIONS`]. A
/// `-configfile` is read once the command line is parsed (as Hydra does):
/// its words continue the command line, its lines separated like `:`.
fn parse(args: &[String], command: Command) -> Result<(RunOptions, BootFlags), CliError> {
    parse_into(RunOptions::default(), args, command)
}

fn parse_into(mut opts: RunOptions, args: &[String], command: Command) -> Result<(RunOptions, BootFlags), CliError> {
    let mut boot = BootFlags::default();
    let mut config_file = None;
    parse_words(args, command, &mut opts, &mut boot, &mut config_file)?;
    if let Some(file) = config_file {
        if !opts.segments.is_empty() {
            return Err(CliError::Usage(format!("-configfile {file} and a program on the command line exclude each other")));
        }
        let words = crate::configfile::read(&file).map_err(|e| CliError::Usage(e.to_string()))?;
        let mut again = None;
        parse_words(&words, command, &mut opts, &mut boot, &mut again)?;
        if again.is_some() {
            return Err(CliError::Usage(format!("-configfile {file}: a config file cannot name another")));
        }
    }
    Ok((opts, boot))
}

/// Parse `args` into `opts` (segments appended); a `-configfile` is noted in `config_file`.
fn parse_words(args: &[String], command: Command, opts: &mut RunOptions, boot: &mut BootFlags, config_file: &mut Option<String>) -> Result<(), CliError> {
    let mut seg = empty_segment();
    let mut in_program = false;
    let mut i = 0;
    let usage = |m: String| CliError::Usage(m);
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if command == Command::Run && arg == ":" {
            finish_segment(opts, &mut seg)?;
            in_program = false;
            continue;
        }
        if in_program {
            seg.args.push(arg.clone());
            continue;
        }
        if !arg.starts_with('-') || arg == "-" {
            if command == Command::Boot {
                return Err(usage(format!("unexpected argument '{arg}'")));
            }
            seg.program = arg.clone();
            in_program = true;
            continue;
        }
        // `--name=value` → name, Some(value)
        let stripped = arg.trim_start_matches('-');
        let (name, inline) = match stripped.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (stripped, None),
        };
        let Some(opt) = options::lookup(name, command) else {
            return Err(usage(format!("unknown option '{arg}'")));
        };
        let mut values = Vec::with_capacity(usize::from(opt.values));
        if opt.values == 0 && opt.key == Key::WarmSpawn {
            // A flag with an optional `=value`.
            values.extend(inline.clone());
        }
        for k in 0..opt.values {
            match (k, &inline) {
                (0, Some(v)) => values.push(v.clone()),
                _ => {
                    let v = args.get(i).cloned().ok_or_else(|| usage(format!("option '{arg}' needs {}", what(opt.key, k))))?;
                    i += 1;
                    values.push(v);
                }
            }
        }
        if opt.key == Key::ConfigFile {
            if config_file.is_some() {
                return Err(usage(format!("'{arg}' given twice")));
            }
            *config_file = values.pop();
            continue;
        }
        apply(opt.key, arg, values, opts, &mut seg, boot)?;
    }
    finish_segment(opts, &mut seg)
}

/// What the `k`th value of an option is, for "option '-n' needs a process count".
fn what(key: Key, k: u8) -> &'static str {
    match (key, k) {
        (Key::Np, _) => "a process count",
        (Key::Env | Key::Genv, 0) => "a variable name and value",
        (Key::Env | Key::Genv, _) => "a value",
        (Key::EnvList | Key::GenvList, _) => "a list of names",
        (Key::Wdir, _) => "a directory",
        (Key::Timeout | Key::KillGrace | Key::ConnectTimeout, _) => "seconds",
        (Key::Usize, _) => "a size",
        (Key::Ppn | Key::Fanout, _) => "a count",
        (Key::Kvs, _) => "a KVS design",
        (Key::Pmi, _) => "simple, pmix or auto",
        (Key::MapBy, _) => "a mapping (slot, node, core, socket, ppr:N:OBJ…)",
        (Key::BindTo | Key::Membind, _) => "an object (core, socket, numa…)",
        (Key::CpusPerRank | Key::GpusPerRank, _) => "a count",
        (Key::Hosts, _) => "a host list",
        (Key::Hostfile, _) => "a file",
        (Key::VirtualNodes, _) => "a node count",
        (Key::Launcher, _) => crate::nodes::LAUNCHERS,
        (Key::Rmk, _) => "pbs, lsf, sge, slurm or user",
        (Key::Bind, _) => "an address",
        (Key::SshCommand, _) => "a command",
        (Key::ConfigFile, _) => "a file",
        (Key::OutfilePattern | Key::ErrfilePattern, _) => "a file name pattern",
        (Key::Localhost, _) => "a host name",
        (Key::Topolib, _) => "a topology library (hwloc)",
        (Key::PrependPattern, _) => "a prefix pattern",
        (Key::OrderNodes, _) => "ASCENDING or DESCENDING",
        (Key::Rankmap, _) => "a rank map",
        _ => "a value",
    }
}

/// A warm-spawn pool size (`--warm-spawn=N`, `DPM_WARM_SPAWN`): 0 to [`crate::run::MAX_WARM_SPAWN`].
pub fn parse_warm(text: &str) -> Option<usize> {
    text.trim().parse().ok().filter(|&n| n <= crate::run::MAX_WARM_SPAWN)
}

/// A whole number of seconds, at most [`MAX_SECS`].
pub fn parse_secs(text: &str) -> Option<u64> {
    text.trim().parse().ok().filter(|&s| s <= MAX_SECS)
}

/// Seconds as `--kill-grace` takes them: finite, not negative, at most [`MAX_SECS`].
pub fn parse_grace(text: &str) -> Option<f64> {
    text.trim().parse().ok().filter(|s: &f64| s.is_finite() && *s >= 0.0 && *s <= MAX_SECS as f64)
}

fn empty_segment() -> Segment {
    Segment { nprocs: None, program: String::new(), args: Vec::new(), env: Vec::new(), env_mode: None, wdir: None }
}

fn finish_segment(opts: &mut RunOptions, seg: &mut Segment) -> Result<(), CliError> {
    let seg = std::mem::replace(seg, empty_segment());
    if seg.program.is_empty() {
        // Only global options (or nothing) may stand without a program.
        if seg == empty_segment() {
            return if opts.segments.is_empty() { Ok(()) } else { Err(CliError::Usage("empty segment after ':'".into())) };
        }
        return Err(CliError::Usage("options given without a program".into()));
    }
    opts.segments.push(seg);
    Ok(())
}

/// The design `DPM_KVS` names; the default (`auto`) when it is unset.
pub fn kvs_from_env() -> Result<KvsDesign, UnknownDesign> {
    std::env::var("DPM_KVS").map_or(Ok(KvsDesign::default()), |v| v.parse())
}

/// Logical CPUs of this machine.
pub fn cpus() -> i64 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> RunOptions {
        parse_run(&line.split_whitespace().map(String::from).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn mpmd_segments_keep_their_own_options() {
        let o = parse("-genv A 1 -n 2 -env B 2 ./a x y : -np 3 -wdir /tmp ./b");
        assert_eq!(o.genv, vec![("A".into(), "1".into())]);
        assert_eq!(o.segments.len(), 2);
        assert_eq!(o.segments[0].nprocs, Some(2));
        assert_eq!(o.segments[0].env, vec![("B".into(), "2".into())]);
        assert_eq!(o.segments[0].args, vec!["x", "y"]);
        assert_eq!(o.segments[1].nprocs, Some(3));
        assert_eq!(o.segments[1].wdir.as_deref(), Some("/tmp"));
    }

    #[test]
    fn program_arguments_are_not_options() {
        let o = parse("-n 1 ./prog -n 5 --label");
        assert_eq!(o.segments[0].args, vec!["-n", "5", "--label"]);
        assert!(!o.label);
    }

    #[test]
    fn double_dash_and_equals_forms() {
        let o = parse("--np=4 --timeout=30 --label --usize 16 -genvnone ./p");
        assert_eq!(o.segments[0].nprocs, Some(4));
        assert_eq!(o.timeout, Some(30));
        assert!(o.label);
        assert_eq!(o.universe_size, Some(16));
        assert_eq!(o.genv_mode, EnvMode::None);
    }

    #[test]
    fn kvs_design_is_an_option() {
        assert_eq!(parse("--kvs dkvs -n 2 ./p").kvs, Some(KvsDesign::Dkvs));
        assert_eq!(parse("-kvs=tree ./p").kvs, Some(KvsDesign::Tree));
        assert_eq!(parse("./p").kvs, None);
        let err = parse_run(&["--kvs".into(), "ring".into(), "./p".into()]).unwrap_err();
        assert_eq!(err, CliError::Usage("'--kvs ring': unknown KVS design 'ring' (use allgather, tree, dkvs, direct or auto)".into()));
    }

    #[test]
    fn genvlist_splits_names() {
        let o = parse("-genvlist PATH,HOME -n 1 ./p");
        assert_eq!(o.genv_mode, EnvMode::List(vec!["PATH".into(), "HOME".into()]));
    }

    #[test]
    fn errors_are_clear() {
        let err = |l: &str| parse_run(&l.split_whitespace().map(String::from).collect::<Vec<_>>()).unwrap_err();
        assert_eq!(err("-n"), CliError::Usage("option '-n' needs a process count".into()));
        assert_eq!(err("-n x ./p"), CliError::Usage("'-n x': not a process count".into()));
        assert_eq!(err("-bogus ./p"), CliError::Usage("unknown option '-bogus'".into()));
        assert_eq!(err("-n 2"), CliError::Usage("options given without a program".into()));
        assert_eq!(err("-n 1 ./a :"), CliError::Usage("empty segment after ':'".into()));
        assert_eq!(err("--help"), CliError::Help);
        assert_eq!(err("--bind host.example ./p"), CliError::Usage("'--bind host.example': not an IP address (ADDR or ADDR:PORT)".into()));
    }

    #[test]
    fn manual_bootstrap_options() {
        let o = parse("-launcher manual --bind 127.0.0.1 --connect-timeout 20 -hosts a,b ./p");
        assert_eq!(o.launcher, Some(Launcher::Manual));
        assert_eq!(o.bind, Some("127.0.0.1:0".parse().unwrap()));
        assert_eq!(o.connect_timeout, Some(20));
        assert_eq!(parse("--bind=[::1]:7000 ./p").bind, Some("[::1]:7000".parse().unwrap()));
    }
}
