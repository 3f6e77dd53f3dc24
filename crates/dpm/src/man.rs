//! `dpm man`: the manual page, dpm(1), in roff. Generated, never written by
//! hand: the commands and `dpm model`'s options from the clap definitions in
//! `main.rs`/`model.rs`, `dpm run`'s and `dpm boot`'s from the one option
//! table that also renders their `--help` (`dpm_launcher::options::man`).
//! `man -l <(dpm man)` shows it; the wheel installs it as
//! `share/man/man1/dpm.1`.

use clap::CommandFactory;
use dpm_launcher::options::man::{boot_section, escape, prose, run_section};

/// The whole page.
pub fn page() -> String {
    let cli = crate::Cli::command();
    let mut out = String::new();
    out.push_str(&format!(".TH DPM 1 \"{}\" \"dpm {}\" \"User Commands\"\n", crate::BUILD_DATE, escape(crate::VERSION)));
    out.push_str(".SH NAME\ndpm \\- a fast, scalable process manager for MPI with first\\-class dynamic processes\n");
    out.push_str(".SH SYNOPSIS\n.nf\n");
    let visible: Vec<&clap::Command> = cli.get_subcommands().filter(|c| !c.is_hide_set()).collect();
    for command in &visible {
        out.push_str(&format!("\\fBdpm {}\\fR [\\fIOPTIONS\\fR]\n", escape(command.get_name())));
    }
    out.push_str("\\fBmpiexec\\fR, \\fBmpirun\\fR, \\fBmpiexec.dpm\\fR ...  (as \\fBdpm run\\fR)\n\\fBdpm \\-\\-version\\fR\n.fi\n");
    out.push_str(".SH DESCRIPTION\n");
    out.push_str(&prose(
        "dpm launches unmodified MPI programs (a drop-in for MPICH Hydra's mpiexec),\n\
         serves the PMI-1, PMI-2 and PMIx (Open MPI 5) requests they wire up with,\n\
         and creates processes while the job runs (MPI_Comm_spawn). Invoked as\n\
         mpiexec or mpirun (a link to dpm), it behaves as dpm run.",
    ));
    out.push_str(".SH COMMANDS\n");
    for command in &visible {
        out.push_str(&format!(".TP\n\\fB{}\\fR\n", escape(command.get_name())));
        let about = command.get_long_about().or(command.get_about()).map(|a| a.to_string()).unwrap_or_default();
        for line in about.lines() {
            out.push_str(&escape(line.trim()));
            out.push('\n');
        }
    }
    out.push_str(&run_section());
    out.push_str(&boot_section());
    if let Some(model) = cli.find_subcommand("model") {
        out.push_str(".SH \"DPM MODEL\"\n");
        options(&mut out, model);
    }
    out.push_str(".SH ENVIRONMENT\n");
    out.push_str(&prose(
        "DPM_LOG (a log filter, e.g. dpm_daemon=trace), DPM_PMI, DPM_KVS, DPM_HOSTS,\n\
         DPM_LAUNCHER, DPM_SSH, DPM_FANOUT, DPM_CONNECT_TIMEOUT, DPM_WARM_SPAWN,\n\
         DPM_ON_SPAWNED_FAILURE, DPM_HEARTBEAT_TIMEOUT, DPM_NO_BOOT, DPM_BOOT,\n\
         DPM_RUNTIME_DIR, MPIEXEC_TIMEOUT: see the options above and README.md.\n\
         Hydra's HYDRA_HOST_FILE, HYDRA_ENV, HYDRA_DEBUG, HYDRA_BINDING, HYDRA_MAPPING,\n\
         HYDRA_MEMBIND, HYDRA_TOPOLIB, HYDRA_RMK, HYDRA_LAUNCHER, HYDRA_LAUNCHER_EXEC,\n\
         HYDRA_LAUNCHER_EXTRA_ARGS, HYDRA_IFACE, MPIEXEC_PORT_RANGE: see docs/hydra.md.",
    ));
    out.push_str(".SH \"SEE ALSO\"\n\\fBmpiexec\\fR(1); README.md, ARCHITECTURE.md and docs/ in dpm's source.\n");
    out
}

/// A clap command's options, as tagged paragraphs.
fn options(out: &mut String, command: &clap::Command) {
    for arg in command.get_arguments().filter(|a| !a.is_hide_set()) {
        let Some(long) = arg.get_long() else { continue };
        out.push_str(&format!(".TP\n\\fB\\-\\-{}\\fR", escape(long)));
        let takes_value =
            arg.get_num_args().is_some_and(|n| n.takes_values()) && !matches!(arg.get_action(), clap::ArgAction::SetTrue | clap::ArgAction::Count);
        if takes_value {
            let name = arg.get_value_names().and_then(|v| v.first()).map_or_else(|| arg.get_id().as_str().to_uppercase(), |v| v.to_string());
            out.push_str(&format!(" \\fI{}\\fR", escape(&name)));
        }
        out.push('\n');
        let help = arg.get_long_help().or(arg.get_help()).map(|h| h.to_string()).unwrap_or_default();
        for line in help.lines() {
            out.push_str(&escape(line.trim()));
            out.push('\n');
        }
    }
}
