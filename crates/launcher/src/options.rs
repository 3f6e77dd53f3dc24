//! The one table of `dpm run` and `dpm boot` options: their names, values,
//! which command takes them and their help. The hand parser ([`crate::cli`])
//! looks every option up here, and `--help` is rendered from here, so an
//! option cannot be parsed without being documented or the other way round.
//! The help's prose and layout are [`help`]'s; the manual page's sections
//! come from here too ([`man`]).

pub mod help;
pub mod man;

/// What an option does; the parser matches on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    Np,
    Env,
    EnvList,
    EnvNone,
    EnvAll,
    Wdir,
    Genv,
    GenvList,
    GenvNone,
    GenvAll,
    Label,
    Timeout,
    GetStackTraces,
    ReportStateOnTimeout,
    Usize,
    PmiTrace,
    PmiPort,
    Pmi,
    NoOversubscribe,
    Oversubscribe,
    OnSpawnedFailure,
    ReportPlacement,
    WarmSpawn,
    KillGrace,
    Kvs,
    Hosts,
    Hostfile,
    VirtualNodes,
    Launcher,
    Rmk,
    SshCommand,
    Bind,
    ConnectTimeout,
    Fanout,
    Ppn,
    MapBy,
    BindTo,
    CpusPerRank,
    Membind,
    ReportBindings,
    GpusPerRank,
    Foreground,
    ReadyOnStdout,
    BootAdd,
    BootDrain,
    BootForce,
    Verbose,
    VeryVerbose,
    Help,
    Version,
    ConfigFile,
    OutfilePattern,
    ErrfilePattern,
    Localhost,
    Topolib,
    DisableAutoCleanup,
    PrependPattern,
    PrintAllExitcodes,
    Info,
    SkipLaunchNode,
    OrderNodes,
    Rankmap,
    Iface,
    /// `-enable-x` / `-disable-x`: X forwarding through the ssh launcher.
    EnableX,
    DisableX,
}

/// Where an option is listed in the help (and so which command takes it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Section {
    /// `dpm run`, per `:` segment.
    Local,
    /// `dpm run`, the whole run.
    Global,
    /// `dpm run`: the KVS design.
    Kvs,
    /// Nodes and bootstrap: `dpm run` and `dpm boot`.
    Nodes,
    /// Placement of ranks: `dpm run` only.
    Placement,
    /// `dpm boot` only.
    Boot,
    /// Both commands.
    Common,
    /// Taken but not listed (aliases of listed ones).
    Hidden,
    /// `dpm boot` only, not listed (internal).
    BootInternal,
}

/// Which command line is being parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    Run,
    Boot,
}

impl Section {
    pub fn taken_by(self, command: Command) -> bool {
        match self {
            Section::Nodes | Section::Common | Section::Hidden => true,
            Section::Boot | Section::BootInternal => command == Command::Boot,
            _ => command == Command::Run,
        }
    }
}

pub struct Opt {
    pub key: Key,
    /// As shown in the help; parsed with one or two dashes either way.
    pub names: &'static [&'static str],
    /// The value(s) as shown (empty: a flag).
    pub arg: &'static str,
    /// How many values follow (0, 1 or 2).
    pub values: u8,
    pub section: Section,
    /// Help lines (continuation lines start after a '\n').
    pub help: &'static str,
}

/// The largest number of seconds `--timeout`, `--kill-grace`,
/// `--connect-timeout` and their variables accept (about 31 years): far
/// beyond any run, and far from overflowing a deadline.
pub const MAX_SECS: u64 = 1_000_000_000;

const fn opt(key: Key, names: &'static [&'static str], arg: &'static str, values: u8, section: Section, help: &'static str) -> Opt {
    Opt { key, names, arg, values, section, help }
}

use Key as K;
use Section as S;

pub const OPTIONS: &[Opt] = &[
    opt(K::Np, &["-n", "-np"], "N", 1, S::Local, "number of processes of this segment (default 1)"),
    opt(K::Env, &["-env"], "NAME VALUE", 2, S::Local, "set NAME=VALUE for this segment"),
    opt(K::EnvList, &["-envlist"], "A,B,...", 1, S::Local, "pass only these variables of dpm's environment"),
    opt(K::EnvNone, &["-envnone"], "", 0, S::Local, "pass none of dpm's environment"),
    opt(K::EnvAll, &["-envall"], "", 0, S::Local, "pass all of dpm's environment"),
    opt(K::Wdir, &["-wdir", "-dir"], "DIR", 1, S::Local, "working directory of the processes"),
    opt(K::Genv, &["-genv"], "NAME VALUE", 2, S::Global, "set NAME=VALUE for every process"),
    opt(K::GenvList, &["-genvlist"], "A,B,...", 1, S::Global, "pass only these variables of dpm's environment"),
    opt(K::GenvNone, &["-genvnone"], "", 0, S::Global, "pass none of dpm's environment"),
    opt(K::GenvAll, &["-genvall"], "", 0, S::Global, "pass all of dpm's environment (default)"),
    opt(K::Label, &["-l", "-prepend-rank", "--label"], "", 0, S::Global, "prefix every output line with [rank] ([job.rank]\nfor spawned jobs)"),
    opt(
        K::Timeout,
        &["--timeout", "-t"],
        "SECS",
        1,
        S::Global,
        "kill the job after SECS seconds (exit code 124);\nalso read from MPIEXEC_TIMEOUT; at most 1e9",
    ),
    opt(
        K::GetStackTraces,
        &["--get-stack-traces"],
        "",
        0,
        S::Global,
        "with --timeout: before the job is killed, print each\nrank's stack (gdb or eu-stack on its node) and its\nstate (the PMI call it waits in)",
    ),
    opt(
        K::ReportStateOnTimeout,
        &["--report-state-on-timeout"],
        "",
        0,
        S::Global,
        "with --timeout: before the job is killed, print each\nrank's state (host, pid, the PMI call it waits in)",
    ),
    opt(
        K::Usize,
        &["--usize"],
        "N",
        1,
        S::Global,
        "universe size (MPI_UNIVERSE_SIZE), never below the\n\
         number of processes; INFINITE leaves it unset;\n\
         SYSTEM is the logical CPUs. Default: unset, as\n\
         under Hydra (MPICH's spawning programs then pick\n\
         their own counts), unless the nodes' slots were\n\
         given (-hosts H:N, a host file with slots, a\n\
         batch allocation: Slurm, PBS, LSF, Grid Engine)\n\
         and hold the processes: then their sum. With\n\
         --no-oversubscribe: the nodes' slots (CPUs where\n\
         not given)",
    ),
    opt(K::PmiTrace, &["--pmi-trace"], "", 0, S::Global, "print every PMI message each way on stderr,\nas C[rank]: ... (client) and S[rank]: ... (server)"),
    opt(
        K::PmiPort,
        &["--pmi-port"],
        "",
        0,
        S::Global,
        "serve PMI on a loopback TCP port (PMI_PORT and\nPMI_ID; -iface: on its address) instead of\ninherited socketpairs",
    ),
    opt(
        K::Pmi,
        &["--pmi"],
        "FLAVOUR",
        1,
        S::Common,
        "the PMI the ranks get (default auto; also DPM_PMI;\n\
         dpm boot: the default of its runs, which a run's\n\
         own --pmi or DPM_PMI overrides):\n  \
           simple  PMI-1/PMI-2 (MPICH, Intel MPI, MVAPICH)\n  \
           pmix    PMIx (Open MPI 5)\n  \
           auto    pmix for a program that links Open MPI\n          \
                   (libmpi.so.40), else simple",
    ),
    opt(
        K::NoOversubscribe,
        &["--no-oversubscribe"],
        "",
        0,
        S::Global,
        "refuse MPI_Comm_spawn beyond the universe size\n(the spawn returns an error); default: allow",
    ),
    opt(K::Oversubscribe, &["--oversubscribe"], "", 0, S::Global, "allow more processes than slots (default)"),
    opt(
        K::OnSpawnedFailure,
        &["--on-spawned-failure"],
        "end|continue",
        1,
        S::Global,
        "what a failed rank of a spawned job does: end\n\
         (default) ends the whole run; continue ends that\n\
         job only and the run goes on (an elastic\n\
         application replaces its workers); also\n\
         DPM_ON_SPAWNED_FAILURE",
    ),
    opt(K::ReportPlacement, &["--report-placement"], "", 0, S::Global, "print on stderr where every job's ranks run,\nspawned jobs included"),
    opt(K::KillGrace, &["--kill-grace"], "SECS", 1, S::Global, "after forwarding SIGINT/SIGTERM, wait SECS before\nSIGKILL (default 3; at most 1e9)"),
    opt(
        K::Kvs,
        &["--kvs"],
        "DESIGN",
        1,
        S::Kvs,
        "where puts live and how gets find them (default\n\
         auto; also DPM_KVS); spawned jobs inherit it:\n  \
           allgather  every put goes to every node at the\n             \
                      fence; gets never leave the node\n  \
           tree       puts ride the fence up and are cached\n             \
                      at each ancestor; a get walks up\n  \
           dkvs       each key lives on an owner daemon (a\n             \
                      hash); gets ask it\n  \
           direct     puts stay on their node; a get asks\n             \
                      the node of its srcid (else as tree)\n  \
           auto       a run of several nodes: the design the\n             \
                      startup model predicts faster beyond its\n             \
                      error (-v says why; DPM_ADVICE=off: not\n             \
                      asked); else dense and unhinted keys as\n             \
                      allgather, hint=sparse keys as direct/dkvs",
    ),
    opt(K::Hosts, &["-hosts", "-host"], "H[:N][,...]", 1, S::Nodes, "hosts to run on, N slots each (default: CPUs)"),
    opt(K::Hostfile, &["-f", "-hostfile", "-machinefile"], "FILE", 1, S::Nodes, "hosts from a file: 'name[:N]' or 'name slots=N'"),
    opt(K::VirtualNodes, &["--virtual-nodes"], "N", 1, S::Nodes, "N daemons on this machine, each a separate node\n(MPICH then wires up across nodes)"),
    opt(
        K::Launcher,
        &["-launcher", "-bootstrap"],
        "fork|ssh|slurm|manual|lsf|sge|pbs",
        1,
        S::Nodes,
        "how daemons start (default: the allocation's own\n\
         agent: srun, blaunch, qrsh -inherit -V, pbs_tmrsh\n\
         or else ssh; ssh for other hosts, fork for this\n\
         machine); also DPM_LAUNCHER, HYDRA_LAUNCHER.\n\
         lsf: $LSF_BINDIR/blaunch HOST; sge:\n\
         $SGE_ROOT/bin/$ARC/qrsh -inherit -V HOST; pbs:\n\
         pbs_tmrsh HOST if on PATH, else ssh; hosts that\n\
         are this machine are forked (not with\n\
         HYDRA_LAUNCHER_AUTOFORK=0). manual: dpm listens\n\
         on TCP and prints one command per node to run\n\
         by hand; each daemon connects back and proves\n\
         the run's secret (kept in a private 0600 file,\n\
         never on a command line); a flat tree",
    ),
    opt(
        K::Rmk,
        &["-rmk"],
        "pbs|lsf|sge|slurm|user",
        1,
        S::Nodes,
        "where the nodes come from without -hosts/-f: that\n\
         batch system's allocation (user: none, this\n\
         machine); also HYDRA_RMK. Default: detected\n\
         (SLURM_JOB_NODELIST; LSF_BINDIR+LSB_MCPU_HOSTS;\n\
         SGE_ROOT+ARC+PE_HOSTFILE; PBS_NODEFILE)",
    ),
    opt(
        K::SshCommand,
        &["--ssh-command", "-launcher-exec", "-bootstrap-exec"],
        "CMD",
        1,
        S::Nodes,
        "the ssh command (default 'ssh -o BatchMode=yes'),\nor the agent of -launcher lsf|sge|pbs; also\nDPM_SSH, HYDRA_LAUNCHER_EXEC, HYDRA_BOOTSTRAP_EXEC",
    ),
    opt(K::Bind, &["--bind"], "ADDR[:PORT]", 1, S::Nodes, "where -launcher manual listens (default: every\nIPv4 address, a free port)"),
    opt(
        K::ConnectTimeout,
        &["--connect-timeout"],
        "SECS",
        1,
        S::Nodes,
        "how long each daemon may take to start and\nconnect (default 30; -launcher manual 300; dpm\nboot --add 60); also DPM_CONNECT_TIMEOUT",
    ),
    opt(
        K::Fanout,
        &["--tree-fanout", "--fanout"],
        "K",
        1,
        S::Nodes,
        "daemons form a K-ary tree under dpm (default 32,\n\
         so up to 32 nodes are flat, unless the startup\n\
         model predicts another faster beyond its error:\n\
         -v says which and why); each daemon starts\n\
         its children and merges their fence traffic;\n\
         also DPM_FANOUT",
    ),
    opt(
        K::Iface,
        &["-iface"],
        "IF",
        1,
        S::Nodes,
        "the network interface to use (also HYDRA_IFACE):\n\
         the ranks get MPIR_CVAR_NEMESIS_TCP_NETWORK_IFACE=IF,\n\
         --pmi-port listens on IF's address, and so does\n\
         -launcher manual (without --bind). An interface\n\
         without an IPv4 address is an error",
    ),
    opt(K::EnableX, &["-enable-x"], "", 0, S::Nodes, "-launcher ssh: forward X (ssh -X)"),
    opt(K::DisableX, &["-disable-x"], "", 0, S::Nodes, "-launcher ssh: no X forwarding (ssh -x; the default)"),
    opt(
        K::SkipLaunchNode,
        &["-skip-launch-node"],
        "",
        0,
        S::Placement,
        "run no rank on this machine: its entries leave the\nnode list (an error if none is left)",
    ),
    opt(
        K::OrderNodes,
        &["-order-nodes"],
        "ASCENDING|DESCENDING",
        1,
        S::Placement,
        "sort the node list by slots (also up/down), ties\nin list order, before ranks are placed",
    ),
    opt(
        K::Rankmap,
        &["-rankmap"],
        "MAP",
        1,
        S::Placement,
        "rank i on node MAP[i] (0: the list's first):\n\
         '0,0,1,1', or blocks '(first,nodes,per-node)'\n\
         as in '(vector,(0,2,2))'; repeated from the\n\
         start when shorter than the job",
    ),
    opt(K::Ppn, &["-ppn"], "N", 1, S::Placement, "N ranks per node, then the next node"),
    opt(
        K::MapBy,
        &["--map-by"],
        "HOW",
        1,
        S::Placement,
        "slot (default): fill each node's slots in turn;\n\
         node: deal ranks round-robin over the nodes;\n\
         OBJ (core, socket, numa, l3cache…): within a node,\n\
         rank i in the i-th OBJ in turn; ppr:N:OBJ: N ranks\n\
         in each OBJ (Open MPI's); :pe=M binds M cores each",
    ),
    opt(
        K::BindTo,
        &["-bind-to", "-binding"],
        "OBJ[:N]",
        1,
        S::Placement,
        "bind each rank to N objects of hwthread, core,\n\
         l1cache, l2cache, l3cache, numa, socket or board\n\
         (hwloc's topology, within the CPUs dpm itself may\n\
         use); rr: one CPU each; user:0+1,2: rank i gets\n\
         list i; none (default, as Hydra). Ranks sharing\n\
         CPUs are reported on stderr (not with\n\
         OBJ:overload-allowed); spawned ranks take objects\n\
         no live rank holds",
    ),
    opt(
        K::CpusPerRank,
        &["--cpus-per-rank", "--cpus-per-proc"],
        "M",
        1,
        S::Placement,
        "bind each rank to M hardware threads (with\n-bind-to core: M cores); Slurm's --cpus-per-task",
    ),
    opt(
        K::Membind,
        &["-membind"],
        "OBJ[:N]",
        1,
        S::Placement,
        "bind each rank's memory to the NUMA nodes of the\nOBJ its CPUs are in (unbound ranks: the i-th OBJ)",
    ),
    opt(
        K::ReportBindings,
        &["--report-bindings"],
        "",
        0,
        S::Placement,
        "print each rank's binding on stderr as Open MPI\n\
         does, with its CPU list (and memory, GPUs)",
    ),
    opt(
        K::GpusPerRank,
        &["--gpus-per-rank", "-gpus-per-proc"],
        "N",
        1,
        S::Placement,
        "give each rank N GPUs of its node of its own, the\n\
         closest to its CPUs first, through\n\
         CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES or\n\
         ZE_AFFINITY_MASK (hwloc's devices); no GPU: an\n\
         error; auto or 0: none set (Hydra's default)",
    ),
    opt(K::Foreground, &["--foreground"], "", 0, S::Boot, "stay in the foreground (batch scripts, debugging;\nneeded by -launcher manual)"),
    opt(K::ReadyOnStdout, &["--ready-on-stdout"], "", 0, S::BootInternal, ""),
    opt(
        K::BootAdd,
        &["--add"],
        "",
        0,
        S::Boot,
        "grow the running boot: start a daemon on each host\n\
         the node options name (-hosts, -f, an allocation)\n\
         through the boot's launcher (or -launcher; manual:\n\
         print the commands to run) and join it, waiting up\n\
         to --connect-timeout (default 60, manual 300); later\n\
         runs and spawns, soft spawns of runs going, use its slots",
    ),
    opt(
        K::BootDrain,
        &["--drain"],
        "HOSTS",
        1,
        S::Boot,
        "shrink the running boot: these hosts (comma-separated)\n\
         take no new ranks; each one's daemon leaves once its\n\
         ranks ended and its slots are released",
    ),
    opt(K::BootForce, &["--force"], "", 0, S::Boot, "with --drain: kill the hosts' ranks now (their runs\nend as for a killed rank)"),
    opt(
        K::WarmSpawn,
        &["--warm-spawn"],
        "[=N]",
        0,
        S::Common,
        "keep N jobs of each MPI_Comm_spawn shape started\n\
         ahead in free slots (bare flag: 2; at most 64;\n\
         also DPM_WARM_SPAWN; dpm boot: the default of its\n\
         runs); a matching spawn claims one at once. Off\n\
         by default: a pooled child runs the program's\n\
         code before MPI_Init ahead of the spawn",
    ),
    opt(
        K::Verbose,
        &["-v", "--verbose"],
        "",
        0,
        S::Common,
        "log what dpm does, with timestamps and levels (repeat for more; or DPM_LOG); without it dpm says only warnings and errors, as dpm: lines",
    ),
    opt(K::VeryVerbose, &["-vv"], "", 0, S::Hidden, ""),
    opt(K::Help, &["-h", "--help"], "", 0, S::Common, "show this help"),
    opt(K::Version, &["--version"], "", 0, S::Global, "print dpm's version"),
    opt(
        K::ConfigFile,
        &["-configfile"],
        "FILE",
        1,
        S::Global,
        "the segments from FILE, one per line, each as on\n\
         the command line ('-n 2 ./a x'; words split at\n\
         blanks, no quoting; lines starting with # are\n\
         comments); instead of a program on the command line",
    ),
    opt(
        K::OutfilePattern,
        &["-outfile-pattern"],
        "PATTERN",
        1,
        S::Global,
        "write each rank's stdout to the file PATTERN names:\n\
         %r rank, %g job (0: the first, then each spawned\n\
         job), %p the job's node index, %h host, %t seconds\n\
         since the start, %% a %. Appended to, never\n\
         truncated; created with your umask",
    ),
    opt(K::ErrfilePattern, &["-errfile-pattern"], "PATTERN", 1, S::Global, "the same for each rank's stderr"),
    opt(
        K::Localhost,
        &["-localhost"],
        "NAME",
        1,
        S::Global,
        "this machine's name for the run (default: its host\n\
         name): host list entries NAME are this machine, and\n\
         -launcher manual's daemons connect back to NAME",
    ),
    opt(K::Topolib, &["-topolib"], "hwloc", 1, S::Global, "the topology library: hwloc (the only one)"),
    opt(
        K::DisableAutoCleanup,
        &["-disable-auto-cleanup"],
        "",
        0,
        S::Global,
        "a failed rank does not end the others: they run\n\
         on (PMI_dead_processes names the dead) until all\n\
         wait in a PMI fence a dead rank cannot join, which\n\
         ends the run (an MPI_Abort ends it at once); the\n\
         first failure decides the status",
    ),
    opt(
        K::PrependPattern,
        &["-prepend-pattern"],
        "PATTERN",
        1,
        S::Global,
        "prefix every output line with PATTERN, its\n\
         specifiers as -outfile-pattern's ('[%r] ' is -l)",
    ),
    opt(
        K::PrintAllExitcodes,
        &["-print-all-exitcodes"],
        "",
        0,
        S::Global,
        "at the end, print every rank's wait status on\n\
         stdout, node by node, as Hydra does\n\
         ('[mpiexec@HOST] Exit codes: [node] 0,256')",
    ),
    opt(K::Info, &["-info"], "", 0, S::Global, "print dpm's build details (Hydra's -info) and\nexit, running nothing"),
];

/// The option `name` (without its dashes) of `command`, if it has one.
pub fn lookup(name: &str, command: Command) -> Option<&'static Opt> {
    OPTIONS.iter().filter(|o| o.section.taken_by(command)).find(|o| o.names.iter().any(|n| n.trim_start_matches('-') == name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_unique_and_parses_back() {
        let mut seen = std::collections::HashSet::new();
        for o in OPTIONS {
            for n in o.names {
                let bare = n.trim_start_matches('-');
                assert!(seen.insert(bare), "option {n} is listed twice");
                let command = if o.section.taken_by(Command::Run) { Command::Run } else { Command::Boot };
                assert_eq!(lookup(bare, command).map(|f| f.key), Some(o.key), "{n}");
            }
            // An optional `[=value]` belongs to a flag (no separate value).
            let shown = !o.arg.is_empty() && !o.arg.starts_with("[=");
            assert_eq!(shown, o.values > 0, "{:?}: a value is shown iff one is taken", o.names);
        }
    }
}
