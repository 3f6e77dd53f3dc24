//! `dpm run --help` and `dpm boot --help`: their prose (also the manual's,
//! [`super::man`]) and the option table's entries, aligned, section by
//! section.

use super::{Section, OPTIONS};

pub(super) const RUN_INTRO: &str = "\
Usage: dpm run [global options] [local options] PROGRAM [ARGS...] [: [local options] PROGRAM [ARGS...]]...
       mpiexec ...   (the same, when dpm is installed or linked as mpiexec)

Launch an MPI job: start the ranks, serve their PMI-1/PMI-2 requests, forward
their output, and exit with the first failing rank's status. Options follow
MPICH Hydra's mpiexec; one or two dashes both work.
";

pub(super) const RUN_NODES: &str = "\
Nodes come from -hosts/-f, else --virtual-nodes, else DPM_HOSTS, else
HYDRA_HOST_FILE (as -f), else the batch allocation named by -rmk/HYDRA_RMK or
detected as Hydra does (Slurm: SLURM_JOB_NODELIST and SLURM_TASKS_PER_NODE;
LSF: LSB_MCPU_HOSTS, or LSB_DJOB_HOSTFILE; Grid Engine: PE_HOSTFILE;
PBS/Torque: PBS_NODEFILE, a line per slot), else this machine alone (then the
daemon runs inside dpm itself). Without -n a program gets one rank per slot of
the allocation or host list (one for a host listed without a count), as in
Hydra. In an allocation daemons start through its agent (srun, blaunch, qrsh
-inherit -V, pbs_tmrsh or ssh); see docs/batch.md. With a booted tree (dpm
boot), jobs go to its daemons instead, unless -hosts, -f, --virtual-nodes,
-launcher, -rmk, -iface or --pmi-trace is given or DPM_NO_BOOT=1,
HYDRA_HOST_FILE or HYDRA_IFACE is set. Hydra's HYDRA_ENV (all|none),
HYDRA_DEBUG, HYDRA_BINDING, HYDRA_MAPPING, HYDRA_MEMBIND and HYDRA_TOPOLIB act
as -genvall/-genvnone, -verbose, -bind-to, -map-by, -membind and -topolib when
those are not given; HYDRA_LAUNCHER_EXTRA_ARGS go after the launcher's own
options (ssh, srun, blaunch, qrsh); MPIEXEC_PORT_RANGE (LOW:HIGH) bounds the
port -launcher manual listens on; see docs/hydra.md.
";

pub(super) const RUN_TAIL: &str = "\
Dynamic processes: MPI_Comm_spawn, MPI_Comm_spawn_multiple and
MPI_Publish_name/MPI_Lookup_name work under dpm run. Spawned jobs get their own
KVS, barrier and PMI_process_mapping; the run ends when every job (initial and
spawned) has ended. Spawn info keys: wdir, path, env (NAME=VALUE lines), host,
hosts, add-host, hostfile, add-hostfile (this machine only), oversubscribe,
map-by, soft; arch and file are ignored with a warning.

Limits: dpm raises its open-file limit (RLIMIT_NOFILE) to the hard limit at
start, in every role (dpm run, the boot server, each daemon): every rank
costs a node's daemon a socket and two or three pipe ends.

Exit status (covers every job of the run, spawned ones included; a failure in
any job ends all of them, except in a spawned job under
--on-spawned-failure=continue, which ends that job alone): 0 if every rank exited 0 after MPI_Finalize (or never used PMI);
otherwise the first failure decides it: a rank's non-zero exit code, 128+N for
a rank killed by signal N, the MPI_Abort code (255 for PMI-2's -1), 1 for a
rank that exited without MPI_Finalize, 127/126 for a program that is missing /
not executable, 124 for --timeout, 128+N when dpm itself got signal N (also
while -launcher manual waits for its daemons), 2 for a usage error.
";

pub(super) const BOOT_INTRO: &str = "\
Usage: dpm boot [OPTIONS]

Start a persistent daemon tree in the background and return. Later
`dpm run` commands find it and start their jobs with no daemon start-up;
`dpm status` lists its nodes, jobs and load; `dpm down` stops it.
`dpm boot --add -hosts …` grows the running boot, `dpm boot --drain HOSTS`
shrinks it.
";

pub(super) const BOOT_TAIL: &str = "\
The nodes default to this machine (inside a batch allocation, Slurm, LSF,
Grid Engine or PBS: its nodes, started through its agent).
-launcher manual needs --foreground: it prints the daemons' command lines
and waits for them (`--add -launcher manual` prints them too, for the hosts
it adds, and waits up to --connect-timeout).

Files live in $DPM_RUNTIME_DIR, else $XDG_RUNTIME_DIR/dpm, else
/tmp/dpm-<uid> (mode 0700): NAME.sock (control socket, owner only),
NAME.json (rendezvous: pid, nodes; rewritten as they change), NAME.log. NAME is $DPM_BOOT, else
slurm-<jobid>, lsf-<jobid>, sge-<jobid> or pbs-<jobid> inside such an
allocation, else 'default'.

`dpm run` uses the boot unless it is given nodes or a launcher of its own
(-hosts, -f, --virtual-nodes, -launcher, -rmk), -iface or HYDRA_IFACE,
--pmi-trace, or DPM_NO_BOOT=1.
";

/// Column where an option's help starts.
const HELP_COLUMN: usize = 28;

/// The options of `section`, one entry each, help aligned.
fn section(out: &mut String, section: Section) {
    for o in OPTIONS.iter().filter(|o| o.section == section) {
        let mut head = format!("  {}", o.names.join(", "));
        if !o.arg.is_empty() {
            // An optional value (`[=N]`) is written against the name.
            if !o.arg.starts_with("[=") {
                head.push(' ');
            }
            head.push_str(o.arg);
        }
        let mut lines = o.help.lines();
        match lines.next() {
            Some(first) if head.len() < HELP_COLUMN => out.push_str(&format!("{head:<HELP_COLUMN$}{first}\n")),
            Some(first) => out.push_str(&format!("{head}\n{:HELP_COLUMN$}{first}\n", "")),
            None => out.push_str(&format!("{head}\n")),
        }
        for line in lines {
            out.push_str(&format!("{:HELP_COLUMN$}{line}\n", ""));
        }
    }
}

/// `dpm run --help`.
pub fn run_help() -> String {
    let mut out = String::from(RUN_INTRO);
    out.push_str("\nLocal options (apply to the ':'-separated segment they stand in):\n");
    section(&mut out, Section::Local);
    out.push_str("\nGlobal options:\n");
    section(&mut out, Section::Global);
    out.push_str("PMI key-value space (docs/pmi-extensions.md):\n");
    section(&mut out, Section::Kvs);
    out.push_str("Nodes and placement:\n");
    section(&mut out, Section::Nodes);
    section(&mut out, Section::Placement);
    out.push_str(RUN_NODES);
    section(&mut out, Section::Common);
    out.push('\n');
    out.push_str(RUN_TAIL);
    out
}

/// `dpm boot --help`.
pub fn boot_help() -> String {
    let mut out = String::from(BOOT_INTRO);
    out.push_str("\nNodes and bootstrap, as for dpm run:\n");
    section(&mut out, Section::Nodes);
    section(&mut out, Section::Boot);
    section(&mut out, Section::Common);
    out.push('\n');
    out.push_str(BOOT_TAIL);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::{lookup, Command};

    #[test]
    fn help_lists_every_listed_option_of_its_command() {
        let (run, boot) = (run_help(), boot_help());
        for o in OPTIONS.iter().filter(|o| !matches!(o.section, Section::Hidden | Section::BootInternal)) {
            if o.section.taken_by(Command::Run) {
                assert!(run.contains(o.names[0]), "dpm run --help lacks {}", o.names[0]);
            }
            if o.section.taken_by(Command::Boot) {
                assert!(boot.contains(o.names[0]), "dpm boot --help lacks {}", o.names[0]);
            }
        }
        assert!(lookup("n", Command::Boot).is_none(), "dpm boot takes no -n");
        assert!(lookup("foreground", Command::Run).is_none());
        assert!(lookup("ready-on-stdout", Command::Run).is_none());
        assert!(run.starts_with("Usage: dpm run ") && boot.starts_with("Usage: dpm boot "));
    }
}
