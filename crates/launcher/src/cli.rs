//! `dpm run` / `mpiexec` command line, in Hydra's grammar.
//!
//! clap cannot express mpiexec's grammar (single-dash long options such as
//! `-genv K V` that take two values, `:`-separated MPMD segments, options
//! allowed between segments), so it is parsed here by hand. Options may be
//! written with one or two dashes, and `--opt=value` works for one-value options.

use std::fmt;

use dpm_kvs::design::UnknownDesign;
use dpm_kvs::KvsDesign;

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
    /// Seconds between a forwarded SIGINT/SIGTERM and SIGKILL.
    pub kill_grace: f64,
    pub hosts: Vec<String>,
    pub no_oversubscribe: bool,
    pub report_placement: bool,
    /// Said about the command line once logging is up (ignored options).
    pub warnings: Vec<String>,
    /// `-f FILE`: hosts, one `name[:slots]` or `name slots=N` per line.
    pub hostfile: Option<String>,
    /// `--virtual-nodes N`: N daemons on this machine, each a node.
    pub virtual_nodes: Option<u32>,
    /// `-launcher fork|ssh|slurm|manual`.
    pub launcher: Option<String>,
    /// `--bind ADDR[:PORT]`: where `-launcher manual` listens.
    pub bind: Option<std::net::SocketAddr>,
    /// `--connect-timeout SECS`: how long `-launcher manual` waits for its daemons.
    pub connect_timeout: Option<u64>,
    /// `--ssh-command "ssh -o …"`.
    pub ssh_command: Option<String>,
    /// `-ppn N`: ranks per node.
    pub ppn: Option<u32>,
    /// `--map-by node`: round robin over nodes instead of filling each.
    pub map_by_node: bool,
    /// `--tree-fanout K`: children per daemon in the daemon tree.
    pub fanout: Option<usize>,
    /// `--kvs DESIGN`: where puts live and how gets find them (else `DPM_KVS`).
    pub kvs: Option<KvsDesign>,
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
            kill_grace: 3.0,
            hosts: Vec::new(),
            no_oversubscribe: false,
            report_placement: false,
            warnings: Vec::new(),
            hostfile: None,
            virtual_nodes: None,
            launcher: None,
            bind: None,
            connect_timeout: None,
            ssh_command: None,
            ppn: None,
            map_by_node: false,
            fanout: None,
            kvs: None,
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum CliError {
    Help,
    Version,
    Usage(String),
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Help => f.write_str("help requested"),
            CliError::Version => f.write_str("version requested"),
            CliError::Usage(msg) => write!(f, "{msg}\nTry 'dpm run --help'."),
        }
    }
}

pub const RUN_HELP: &str = "\
Usage: dpm run [global options] [local options] PROGRAM [ARGS...] [: [local options] PROGRAM [ARGS...]]...
       mpiexec ...   (the same, when dpm is installed or linked as mpiexec)

Launch an MPI job: start the ranks, serve their PMI-1/PMI-2 requests, forward
their output, and exit with the first failing rank's status. Options follow
MPICH Hydra's mpiexec; one or two dashes both work.

Local options (apply to the ':'-separated segment they stand in):
  -n, -np N                 number of processes of this segment (default 1)
  -env NAME VALUE           set NAME=VALUE for this segment
  -envlist A,B,...          pass only these variables of dpm's environment
  -envnone / -envall        pass none / all of dpm's environment
  -wdir, -dir DIR           working directory of the processes

Global options:
  -genv NAME VALUE          set NAME=VALUE for every process
  -genvlist A,B,...         pass only these variables of dpm's environment
  -genvnone                 pass none of dpm's environment
  -genvall                  pass all of dpm's environment (default)
  -l, -prepend-rank, --label
                            prefix every output line with [rank] ([job.rank]
                            for spawned jobs)
  --timeout SECS            kill the job after SECS seconds (exit code 124);
                            also read from MPIEXEC_TIMEOUT
  --usize N                 universe size (MPI_UNIVERSE_SIZE); default: the
                            number of logical CPUs
  --pmi-trace               print every PMI message each way on stderr,
                            as C[rank]: ... (client) and S[rank]: ... (server)
  --pmi-port                serve PMI on a loopback TCP port (PMI_PORT and
                            PMI_ID) instead of inherited socketpairs
  --no-oversubscribe        refuse MPI_Comm_spawn beyond the universe size
                            (the spawn returns an error); default: allow
  --oversubscribe           allow more processes than slots (default)
  --report-placement        print on stderr where every job's ranks run,
                            spawned jobs included
  --kill-grace SECS         after forwarding SIGINT/SIGTERM, wait SECS before
                            SIGKILL (default 3)
PMI key-value space (docs/pmi-extensions.md):
  --kvs DESIGN              where puts live and how gets find them (default
                            auto; also DPM_KVS); spawned jobs inherit it:
                              allgather  every put goes to every node at the
                                         fence; gets never leave the node
                              tree       puts ride the fence up and are cached
                                         at each ancestor; a get walks up
                              dkvs       each key lives on an owner daemon (a
                                         hash); gets ask it
                              direct     puts stay on their node; a get asks
                                         the node of its srcid (else as tree)
                              auto       dense and unhinted keys as allgather,
                                         hint=sparse keys as direct/dkvs
Nodes and placement:
  -hosts, -host H[:N][,...] hosts to run on, N slots each (default: CPUs)
  -f, -hostfile FILE        hosts from a file: 'name[:N]' or 'name slots=N'
  --virtual-nodes N         N daemons on this machine, each a separate node
                            (MPICH then wires up across nodes)
  -launcher fork|ssh|slurm|manual
                            how daemons start (default: slurm inside a Slurm
                            allocation, ssh for other hosts, fork for this
                            machine); also DPM_LAUNCHER. manual: dpm listens
                            on TCP and prints one command per node to run
                            by hand; each daemon connects back and proves
                            the run's secret (kept in a private 0600 file,
                            never on a command line); a flat tree
  --ssh-command CMD         the ssh command (default 'ssh -o BatchMode=yes');
                            also DPM_SSH
  --bind ADDR[:PORT]        where -launcher manual listens (default: every
                            IPv4 address, a free port)
  --connect-timeout SECS    how long -launcher manual waits for the daemons
                            to connect (default 300); also DPM_CONNECT_TIMEOUT
  --tree-fanout K           daemons form a K-ary tree under dpm (default 32,
                            so up to 32 nodes are flat); each daemon starts
                            its children and merges their fence traffic;
                            also DPM_FANOUT
  -ppn N                    N ranks per node, then the next node
  --map-by slot|node        fill each node's slots in turn (default), or
                            deal ranks round-robin over the nodes
Nodes come from -hosts/-f, else --virtual-nodes, else DPM_HOSTS, else the
Slurm allocation (SLURM_JOB_NODELIST, slots from SLURM_TASKS_PER_NODE), else
this machine alone (then the daemon runs inside dpm itself). With a booted
tree (dpm boot), jobs go to its daemons instead, unless -hosts, -f,
--virtual-nodes, -launcher or --pmi-trace is given or DPM_NO_BOOT=1.
  -v, --verbose             log what dpm does (repeat for more; or DPM_LOG)
  -h, --help                show this help

Accepted for compatibility and ignored, with a warning: -bind-to, -binding,
-iface, -rmk, -prepend-pattern, -print-all-exitcodes, -info.

Dynamic processes: MPI_Comm_spawn, MPI_Comm_spawn_multiple and
MPI_Publish_name/MPI_Lookup_name work under dpm run. Spawned jobs get their own
KVS, barrier and PMI_process_mapping; the run ends when every job (initial and
spawned) has ended. Spawn info keys: wdir, path, env (NAME=VALUE lines), host,
hosts, add-host, hostfile, add-hostfile (this machine only), oversubscribe,
map-by, soft; arch and file are ignored with a warning.

Exit status (covers every job of the run, spawned ones included; a failure in
any job ends all of them): 0 if every rank exited 0 after MPI_Finalize (or never used PMI);
otherwise the first failure decides it: a rank's non-zero exit code, 128+N for
a rank killed by signal N, the MPI_Abort code (255 for PMI-2's -1), 1 for a
rank that exited without MPI_Finalize, 127/126 for a program that is missing /
not executable, 124 for --timeout, 128+N when dpm itself got signal N.
";

/// Options that take no value and are ignored for compatibility.
const IGNORED_FLAGS: &[&str] = &["print-all-exitcodes", "info", "nameserver-none", "disable-auto-cleanup", "enable-x", "disable-x"];
/// Options that take one value and are ignored for compatibility.
const IGNORED_VALUED: &[&str] = &["bind-to", "binding", "iface", "rmk", "prepend-pattern"];

/// The options choosing the nodes and how daemons start there, shared by
/// `dpm run` and `dpm boot`: `Ok(false)` if `name` is none of them. `value`
/// takes the option's value (saying what it should be).
pub fn node_option(
    name: &str,
    arg: &str,
    value: &mut dyn FnMut(&str) -> Result<String, CliError>,
    opts: &mut RunOptions,
) -> Result<bool, CliError> {
    let usage = |m: String| CliError::Usage(m);
    match name {
        "hosts" | "host" => opts.hosts.extend(value("a host list")?.split(',').filter(|h| !h.is_empty()).map(String::from)),
        "f" | "hostfile" | "machinefile" => opts.hostfile = Some(value("a file")?),
        "virtual-nodes" => {
            let v = value("a node count")?;
            opts.virtual_nodes = Some(v.parse().ok().filter(|&n| n > 0).ok_or_else(|| usage(format!("'{arg} {v}': not a node count")))?);
        }
        "launcher" | "bootstrap" => {
            let v = value("fork, ssh, slurm or manual")?;
            if !matches!(v.as_str(), "fork" | "ssh" | "slurm" | "manual") {
                return Err(usage(format!("'{arg} {v}': this dpm starts daemons with fork, ssh, slurm or manual")));
            }
            opts.launcher = Some(v);
        }
        "bind" => {
            let v = value("an address")?;
            opts.bind = Some(parse_bind(&v).ok_or_else(|| usage(format!("'{arg} {v}': not an IP address (ADDR or ADDR:PORT)")))?);
        }
        "connect-timeout" => {
            let v = value("seconds")?;
            opts.connect_timeout = Some(v.parse().map_err(|_| usage(format!("'{arg} {v}': not a number of seconds")))?);
        }
        "ssh-command" | "launcher-exec" | "bootstrap-exec" => opts.ssh_command = Some(value("a command")?),
        "tree-fanout" | "fanout" => {
            let v = value("a count")?;
            opts.fanout = Some(v.parse().ok().filter(|&n| n > 0).ok_or_else(|| usage(format!("'{arg} {v}': not a fan-out")))?);
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// Parse the arguments after `dpm run` (or after `mpiexec`).
pub fn parse_run(args: &[String]) -> Result<RunOptions, CliError> {
    let mut opts = RunOptions::default();
    let mut seg = empty_segment();
    let mut in_program = false;
    let mut i = 0;
    let usage = |m: String| CliError::Usage(m);
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == ":" {
            finish_segment(&mut opts, &mut seg)?;
            in_program = false;
            continue;
        }
        if in_program {
            seg.args.push(arg.clone());
            continue;
        }
        if !arg.starts_with('-') || arg == "-" {
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
        let mut value = |what: &str| -> Result<String, CliError> {
            if let Some(v) = inline.clone() {
                return Ok(v);
            }
            let v = args.get(i).cloned().ok_or_else(|| usage(format!("option '{arg}' needs {what}")))?;
            i += 1;
            Ok(v)
        };
        match name {
            "h" | "help" => return Err(CliError::Help),
            "version" => return Err(CliError::Version),
            "n" | "np" => {
                let v = value("a process count")?;
                let n: u32 = v.parse().map_err(|_| usage(format!("'{arg} {v}': not a process count")))?;
                seg.nprocs = Some(n);
            }
            "env" | "genv" => {
                let k = value("a variable name and value")?;
                let v = value("a value")?;
                if name == "env" { seg.env.push((k, v)) } else { opts.genv.push((k, v)) }
            }
            "envlist" | "genvlist" => {
                let list = EnvMode::List(value("a list of names")?.split(',').filter(|s| !s.is_empty()).map(String::from).collect());
                if name == "envlist" { seg.env_mode = Some(list) } else { opts.genv_mode = list }
            }
            "envnone" => seg.env_mode = Some(EnvMode::None),
            "envall" => seg.env_mode = Some(EnvMode::All),
            "genvnone" => opts.genv_mode = EnvMode::None,
            "genvall" => opts.genv_mode = EnvMode::All,
            "wdir" | "dir" => seg.wdir = Some(value("a directory")?),
            "l" | "label" | "prepend-rank" => opts.label = true,
            "timeout" | "t" => {
                let v = value("seconds")?;
                opts.timeout = Some(v.parse().map_err(|_| usage(format!("'{arg} {v}': not a number of seconds")))?);
            }
            "usize" => {
                let v = value("a size")?;
                opts.universe_size = Some(match v.to_ascii_uppercase().as_str() {
                    "INFINITE" | "UNLIMITED" => -1,
                    "SYSTEM" => cpus(),
                    _ => v.parse().map_err(|_| usage(format!("'{arg} {v}': not a universe size")))?,
                });
            }
            "v" | "verbose" => opts.verbose += 1,
            "vv" => opts.verbose += 2,
            "pmi-trace" => opts.pmi_trace = true,
            "pmi-port" => opts.pmi_port = true,
            "no-oversubscribe" => opts.no_oversubscribe = true,
            "oversubscribe" => opts.no_oversubscribe = false,
            "report-placement" => opts.report_placement = true,
            "kill-grace" => {
                let v = value("seconds")?;
                opts.kill_grace = v.parse().map_err(|_| usage(format!("'{arg} {v}': not a number of seconds")))?;
            }
            "ppn" => {
                let v = value("a count")?;
                opts.ppn = Some(v.parse().ok().filter(|&n| n > 0).ok_or_else(|| usage(format!("'{arg} {v}': not a count")))?);
            }
            "kvs" => {
                let v = value("a KVS design")?;
                opts.kvs = Some(v.parse().map_err(|e: UnknownDesign| usage(format!("'{arg} {v}': {e}")))?);
            }
            "map-by" => {
                let v = value("slot or node")?;
                match v.to_ascii_lowercase().as_str() {
                    "node" => opts.map_by_node = true,
                    "slot" | "core" => opts.map_by_node = false,
                    _ => return Err(usage(format!("'{arg} {v}': use slot or node"))),
                }
            }
            _ if node_option(name, arg, &mut value, &mut opts)? => {}
            _ if IGNORED_FLAGS.contains(&name) => opts.warnings.push(format!("option '{arg}' is ignored")),
            _ if IGNORED_VALUED.contains(&name) => {
                let v = value("a value")?;
                opts.warnings.push(format!("option '{arg} {v}' is ignored"));
            }
            _ => return Err(usage(format!("unknown option '{arg}'"))),
        }
    }
    finish_segment(&mut opts, &mut seg)?;
    if opts.segments.is_empty() {
        return Err(usage("no program given".into()));
    }
    Ok(opts)
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

/// `10.0.0.1`, `10.0.0.1:7000`, `::1` or `[::1]:7000` (port 0: any).
fn parse_bind(text: &str) -> Option<std::net::SocketAddr> {
    text.parse().ok().or_else(|| text.parse::<std::net::IpAddr>().ok().map(|ip| std::net::SocketAddr::new(ip, 0)))
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
        assert_eq!(o.launcher.as_deref(), Some("manual"));
        assert_eq!(o.bind, Some("127.0.0.1:0".parse().unwrap()));
        assert_eq!(o.connect_timeout, Some(20));
        assert_eq!(parse("--bind=[::1]:7000 ./p").bind, Some("[::1]:7000".parse().unwrap()));
    }
}
