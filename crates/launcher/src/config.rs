//! A run's configuration, resolved once: [`RunConfig`] from the parsed
//! options and the environment (`MPIEXEC_TIMEOUT`, `DPM_FANOUT`, `DPM_KVS`,
//! `DPM_LAUNCHER`, `DPM_SSH`, Hydra's `HYDRA_RMK`, `HYDRA_IFACE`, `HYDRA_LAUNCHER`,
//! `HYDRA_LAUNCHER_EXEC` (and their `HYDRA_BOOTSTRAP*` aliases), `DPM_CONNECT_TIMEOUT`, `DPM_WARM_SPAWN`, `DPM_HEARTBEAT_TIMEOUT` checked; flag before variable
//! before default), validated at this boundary so that nothing later can
//! overflow or panic on a value. Cold runs and booted submissions both use
//! it, and the controller's [`Settings`] are built from it in one place
//! ([`settings`]). Also here: the universe-size rule ([`universe_size`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use dpm_kvs::KvsDesign;
use dpm_proto::control::{JobSettings, Submit};
use dpm_proto::PmiMode;

use crate::cli::{self, RunOptions};
use crate::controller::Settings;
use crate::error::UsageError;
use crate::options::MAX_SECS;
use crate::pmi_choice::PmiFlavour;
use crate::run::FailurePolicy;
use crate::spawn::SpawnContext;

/// How daemons start: defined beside the bootstrap it chooses.
pub use crate::nodes::Launcher;

/// Default `--tree-fanout`.
pub const DEFAULT_FANOUT: usize = 32;
/// Default `--kill-grace`.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(3);

/// Everything about a run that is not its programs or its nodes: the
/// settings of its jobs ([`JobSettings`], what a boot is sent whole), and
/// this process's own (how it starts daemons and logs).
#[derive(Clone, Debug, PartialEq)]
pub struct RunConfig {
    pub job: JobSettings,
    pub verbose: u8,
    pub pmi_trace: bool,
    /// `--pmi`, else `DPM_PMI`; `None`: neither said, so auto (or, through
    /// a boot, the boot's `--pmi`). [`RunConfig::choose_pmi`] applies it to the job.
    pub pmi: Option<PmiFlavour>,
    /// `--tree-fanout`, else `DPM_FANOUT`, else [`DEFAULT_FANOUT`].
    pub fanout: usize,
    /// `-launcher`, else `DPM_LAUNCHER`, `HYDRA_LAUNCHER`, `HYDRA_BOOTSTRAP`;
    /// `None`: chosen from the nodes.
    pub launcher: Option<Launcher>,
    /// `-rmk`, else `HYDRA_RMK`; `None`: detected ([`crate::batch::detect`]).
    pub rmk: Option<crate::batch::Rmk>,
    /// `--ssh-command`/`-launcher-exec`, else `DPM_SSH`, `HYDRA_LAUNCHER_EXEC`,
    /// `HYDRA_BOOTSTRAP_EXEC`, split in words; `None`: the launcher's own.
    pub launcher_exec: Option<Vec<String>>,
    /// [`RunConfig::launcher_exec`], else `ssh -o BatchMode=yes`; then, as
    /// Hydra's ssh launcher, `-X` with `-enable-x`, else `-x`.
    pub ssh_command: Vec<String>,
    /// `--bind`, else `-iface`'s address (manual bootstrap).
    pub bind: Option<SocketAddr>,
    /// `-iface`, else `HYDRA_IFACE`, resolved on this host.
    pub iface: Option<dpm_daemon::iface::Iface>,
    /// `HYDRA_LAUNCHER_EXTRA_ARGS`: words after the launcher's own options
    /// (ssh, srun, blaunch, qrsh, pbs_tmrsh), before the host.
    pub launcher_extra: Vec<String>,
    /// `MPIEXEC_PORT_RANGE` (or a name Hydra reads before it): the ports
    /// dpm listens on for daemons that connect to it (manual bootstrap).
    pub port_range: Option<std::ops::RangeInclusive<u16>>,
    /// `--connect-timeout`, else `DPM_CONNECT_TIMEOUT`, else 300 s (manual bootstrap).
    pub connect_timeout: Duration,
    /// `--connect-timeout`, else `DPM_CONNECT_TIMEOUT`, if given: how long
    /// each daemon started by fork, ssh, srun or an agent may take to
    /// answer its handshake (`TreeSpec::start_timeout`; `None`: the default,
    /// `dpm_daemon::links::DEFAULT_START_TIMEOUT`).
    pub start_timeout: Option<u64>,
    /// `dpm boot --warm-spawn`: how long the boot keeps a run's unclaimed
    /// pooled job for later runs (`DPM_WARM_IDLE`, seconds; default
    /// [`DEFAULT_WARM_IDLE`]).
    pub warm_idle: Duration,
}

/// How long a boot keeps an unclaimed pooled job after its run (`DPM_WARM_IDLE`).
pub const DEFAULT_WARM_IDLE: Duration = Duration::from_secs(60);

/// The variable `-iface IF` gives every rank, as Hydra does: MPICH's TCP
/// netmod then uses that interface.
pub const NETWORK_IFACE_VAR: &str = "MPIR_CVAR_NEMESIS_TCP_NETWORK_IFACE";

/// Set [`NETWORK_IFACE_VAR`] to `name` in `env`, over any value given
/// (Hydra's own setting wins over `-genv`).
pub fn set_iface_var(env: &mut Vec<(String, String)>, name: &str) {
    env.retain(|(k, _)| k != NETWORK_IFACE_VAR);
    env.push((NETWORK_IFACE_VAR.to_string(), name.to_string()));
}

/// A seconds variable: unset is `None`, anything but 0..=[`MAX_SECS`] an error.
fn env_secs(env: &dyn Fn(&str) -> Option<String>, name: &str) -> Result<Option<u64>, UsageError> {
    env(name).map(|v| cli::parse_secs(&v).ok_or_else(|| UsageError(format!("{name}={v}: not a number of seconds (0 to {MAX_SECS})")))).transpose()
}

impl RunConfig {
    /// Resolve from the options and `env` (the process environment, or a
    /// table in tests): flag, then variable, then default.
    pub fn resolve(opts: &RunOptions, env: &dyn Fn(&str) -> Option<String>) -> Result<RunConfig, UsageError> {
        // 0 is no limit, as under Hydra (whose MPIEXEC_TIMEOUT=0 is unset).
        let timeout = match opts.timeout {
            Some(t) => Some(t),
            None => env_secs(env, "MPIEXEC_TIMEOUT")?,
        }
        .filter(|&t| t > 0);
        let kvs = match opts.kvs {
            Some(k) => k,
            None => env("DPM_KVS").map_or(Ok(KvsDesign::default()), |v| v.parse()).map_err(|e| UsageError(format!("DPM_KVS: {e}")))?,
        };
        let pmi = match opts.pmi {
            Some(p) => Some(p),
            None => env("DPM_PMI").map(|v| v.parse().map_err(|e: UsageError| UsageError(format!("DPM_PMI: {}", e.0)))).transpose()?,
        };
        let fanout = match opts.fanout {
            Some(f) => f,
            None => match env("DPM_FANOUT") {
                Some(v) => v.trim().parse().ok().filter(|&n| n > 0).ok_or_else(|| UsageError(format!("DPM_FANOUT={v}: not a fan-out")))?,
                None => DEFAULT_FANOUT,
            },
        };
        let launcher = match opts.launcher {
            Some(l) => Some(l),
            None => match ["DPM_LAUNCHER", "HYDRA_LAUNCHER", "HYDRA_BOOTSTRAP"].into_iter().find_map(|n| env(n).filter(|v| !v.is_empty()).map(|v| (n, v))) {
                Some((name, v)) => Some(v.parse().map_err(|e: UsageError| UsageError(format!("{name}: {}", e.0)))?),
                None => None,
            },
        };
        let rmk = match opts.rmk {
            Some(r) => Some(r),
            None => env("HYDRA_RMK")
                .filter(|v| !v.is_empty())
                .map(|v| v.parse().map_err(|e: crate::batch::BatchError| UsageError(format!("HYDRA_RMK: {e}"))))
                .transpose()?,
        };
        let launcher_exec = opts
            .ssh_command
            .clone()
            .or_else(|| ["DPM_SSH", "HYDRA_LAUNCHER_EXEC", "HYDRA_BOOTSTRAP_EXEC"].into_iter().find_map(|n| env(n).filter(|v| !v.trim().is_empty())))
            .map(|c| c.split_whitespace().map(String::from).collect::<Vec<_>>());
        let mut ssh = launcher_exec.clone().unwrap_or_else(|| ["ssh", "-o", "BatchMode=yes"].map(String::from).to_vec());
        // Hydra's ssh launcher: X forwarding only when asked for.
        ssh.push(if opts.x_forwarding == Some(true) { "-X" } else { "-x" }.to_string());
        let launcher_extra = crate::cli::hydra_env::launcher_extra_args(env);
        ssh.extend(launcher_extra.iter().cloned());
        let port_range = crate::ports::port_range(env)?;
        let iface = match opts.iface.clone().or_else(|| env("HYDRA_IFACE").filter(|v| !v.trim().is_empty())) {
            Some(name) => Some(dpm_daemon::iface::resolve(&name).map_err(|e| UsageError(format!("-iface {name}: {e}")))?),
            None => None,
        };
        let connect_timeout = match opts.connect_timeout {
            Some(t) => Some(t),
            None => env_secs(env, "DPM_CONNECT_TIMEOUT")?,
        };
        if connect_timeout == Some(0) {
            return Err(UsageError("--connect-timeout 0 (or DPM_CONNECT_TIMEOUT=0): the daemons need time to connect (1 s or more)".into()));
        }
        let warm_spawn = match opts.warm_spawn {
            Some(n) => Some(n),
            None => env("DPM_WARM_SPAWN")
                .map(|v| cli::parse_warm(&v).ok_or_else(|| UsageError(format!("DPM_WARM_SPAWN={v}: not a pool size (0 to {})", crate::run::MAX_WARM_SPAWN))))
                .transpose()?,
        };
        let failure_policy = match opts.on_spawned_failure {
            Some(p) => p,
            None => env("DPM_ON_SPAWNED_FAILURE")
                .map_or(Ok(FailurePolicy::default()), |v| crate::run::parse_failure_policy(&v))
                .map_err(|e| UsageError(format!("DPM_ON_SPAWNED_FAILURE: {e}")))?,
        };
        opts.binding.check().map_err(|e| UsageError(e.to_string()))?;
        // -disable-auto-cleanup: no failure ends another rank, in any job.
        let failure_policy = if opts.disable_auto_cleanup { FailurePolicy::KeepOthers } else { failure_policy };
        // Read by the links (`dpm_proto::frame::heartbeat_timeout`), checked
        // here so that a bad value is a usage error (exit 2) like the others.
        if let Some(v) = env(dpm_proto::frame::HEARTBEAT_TIMEOUT_ENV).filter(|v| !v.trim().is_empty()) {
            dpm_proto::frame::parse_heartbeat_timeout(&v).map_err(|e| UsageError(format!("{}: {e}", dpm_proto::frame::HEARTBEAT_TIMEOUT_ENV)))?;
        }
        if !(opts.kill_grace.is_finite() && (0.0..=MAX_SECS as f64).contains(&opts.kill_grace)) {
            return Err(UsageError(format!("--kill-grace {}: not a number of seconds (0 to {MAX_SECS})", opts.kill_grace)));
        }
        Ok(RunConfig {
            job: JobSettings {
                label: opts.label,
                pmi_mode: if opts.pmi_port { PmiMode::Port } else { PmiMode::Fd },
                timeout: timeout.map(Duration::from_secs),
                kill_grace: Duration::from_secs_f64(opts.kill_grace),
                universe_size: opts.universe_size,
                no_oversubscribe: opts.no_oversubscribe,
                failure_policy,
                report_placement: opts.report_placement,
                kvs,
                ppn: opts.ppn,
                map_by_node: opts.map_by_node,
                warm_spawn,
                warm_verbose: opts.verbose > 0 || opts.report_placement,
                binding: opts.binding.clone(),
                // Set with the PMI flavour (`choose_pmi`).
                pmix_watch: false,
                prepend: opts.prepend_pattern.clone(),
                print_all_exitcodes: opts.print_all_exitcodes,
                // Set at the start from `MPIR_being_debugged` (`crate::mpir`).
                hold: false,
                on_timeout: match (opts.stack_traces, opts.report_state) {
                    (true, _) => dpm_proto::control::TimeoutReport::Stacks,
                    (false, true) => dpm_proto::control::TimeoutReport::State,
                    (false, false) => dpm_proto::control::TimeoutReport::Nothing,
                },
            },
            verbose: opts.verbose,
            pmi_trace: opts.pmi_trace,
            pmi,
            fanout,
            launcher,
            rmk,
            launcher_exec,
            ssh_command: ssh,
            launcher_extra,
            port_range,
            bind: opts.bind.or_else(|| iface.as_ref().map(|i| SocketAddr::new(i.ip.into(), 0))),
            iface,
            connect_timeout: connect_timeout.map_or(crate::manual::DEFAULT_TIMEOUT, Duration::from_secs),
            start_timeout: connect_timeout,
            warm_idle: env_secs(env, "DPM_WARM_IDLE")?.map_or(DEFAULT_WARM_IDLE, Duration::from_secs),
        })
    }

    /// The PMI flavour applied to the planned job's programs: its
    /// `pmi_mode` and KVS design for this run (a PMIx job's are fixed), and
    /// whether its nodes watch it for Open MPI ranks (`pmix_watch`:
    /// `dpm_daemon::pmix_watch`).
    pub fn choose_pmi(&mut self, apps: &mut [dpm_proto::AppSpec]) -> Result<(), crate::plan::PlanError> {
        let job = &mut self.job;
        let choice = crate::pmi_choice::choose(self.pmi.unwrap_or_default(), job.pmi_mode == PmiMode::Port, job.kvs, apps)?;
        (job.pmi_mode, job.kvs, job.pmix_watch) = (choice.mode, choice.kvs, choice.watch);
        Ok(())
    }

    /// [`RunConfig::resolve`] in this process's environment.
    pub fn from_env(opts: &RunOptions) -> Result<RunConfig, UsageError> {
        Self::resolve(opts, &|name| std::env::var(name).ok())
    }

    /// What a `dpm run` sends a boot: its job settings and the job planned here.
    pub fn submit(&self, planned: crate::plan::PlannedJob, spawn_env: Vec<(String, String)>, cwd: String, host: String) -> Submit {
        Submit {
            apps: planned.apps,
            procs: planned.procs,
            appnums: planned.appnums,
            job: self.job.clone(),
            spawn_env,
            cwd,
            host,
            client_pid: std::process::id(),
            pmi_default: self.pmi.is_none(),
        }
    }

    /// The boot server's side of [`RunConfig::submit`], checked again (a
    /// client is another process): the job settings of the submission; the
    /// node settings are the boot's own.
    pub fn from_submit(submit: &Submit, fanout: usize) -> Result<RunConfig, UsageError> {
        let mut job = submit.job.clone();
        let max = Duration::from_secs(MAX_SECS);
        if job.kill_grace > max || job.timeout.is_some_and(|t| t > max) {
            return Err(UsageError(format!("a kill grace or timeout beyond {MAX_SECS} seconds")));
        }
        job.binding.check().map_err(|e| UsageError(e.to_string()))?;
        job.warm_spawn = job.warm_spawn.filter(|&n| n <= crate::run::MAX_WARM_SPAWN);
        Ok(RunConfig {
            job,
            verbose: 0,
            pmi_trace: false,
            // The client chose the flavour (its pmi_mode) from its programs;
            // with `pmi_default` the boot chooses again with its own default.
            pmi: None,
            fanout,
            launcher: None,
            rmk: None,
            launcher_exec: None,
            ssh_command: Vec::new(),
            launcher_extra: Vec::new(),
            port_range: None,
            bind: None,
            iface: None,
            connect_timeout: crate::manual::DEFAULT_TIMEOUT,
            start_timeout: None,
            warm_idle: DEFAULT_WARM_IDLE,
        })
    }
}

/// `MPI_UNIVERSE_SIZE` for a run of `world` processes on nodes with
/// `total_slots` slots (-1: unset, which MPICH leaves unset).
///
/// Hydra leaves it unset unless asked (`-usize`), and MPICH's spawning
/// programs then choose their own counts: a universe of this machine's CPU
/// count made `spawn1`-style programs under `-n 1` see a universe no larger
/// than their world and skip or fail their spawns. So:
/// - `--usize N`: N, but never below `world` (a negative N: unset);
/// - `--no-oversubscribe`: the slots, never below `world` (spawns are
///   refused beyond it, so it must be a number);
/// - slots that were given (`slots_known`: `-hosts a:4`, a host file with
///   slots, a Slurm allocation) and hold `world`: those slots, a number the
///   user stated;
/// - otherwise unset, as Hydra.
pub fn universe_size(explicit: Option<i64>, total_slots: i64, slots_known: bool, world: u32, no_oversubscribe: bool) -> i64 {
    let world = i64::from(world);
    match explicit {
        Some(n) if n < 0 => -1,
        Some(n) => n.max(world),
        None if no_oversubscribe => total_slots.max(world),
        None if slots_known && total_slots >= world => total_slots,
        None => -1,
    }
}

/// [`universe_size`] for a run of `config`: under PMIx (Open MPI) a universe
/// left unset is the nodes' slots, never below `world`, as `mpirun` (PRRTE)
/// registers it (Open MPI's `MPI_UNIVERSE_SIZE`, `OMPI_UNIVERSE_SIZE`).
pub fn run_universe(config: &RunConfig, total_slots: i64, slots_known: bool, world: u32) -> i64 {
    let job = &config.job;
    let u = universe_size(job.universe_size, total_slots, slots_known, world, job.no_oversubscribe);
    if u < 0 && job.universe_size.is_none() && job.pmi_mode == PmiMode::Pmix {
        return total_slots.max(i64::from(world));
    }
    u
}

/// The controller's settings for a run of this configuration (cold or
/// booted: the one place they are built).
pub fn settings(config: &RunConfig, universe_size: i64, spawn: SpawnContext, node_slots: Vec<u32>, fanout: usize, owner: u32) -> Settings {
    let job = &config.job;
    Settings {
        label: job.label,
        kill_grace: job.kill_grace,
        universe_size,
        universe_follows: None,
        pmi_mode: job.pmi_mode,
        no_oversubscribe: job.no_oversubscribe,
        report_placement: job.report_placement,
        spawn,
        node_slots,
        fanout,
        heap_nodes: usize::MAX,
        owner,
        warm_spawn: job.warm_spawn.unwrap_or(0),
        warm_verbose: job.warm_verbose,
        warm_starting: crate::run::warm_starting_default(),
        binding: job.binding.clone(),
        on_timeout: job.on_timeout,
    }
}

/// What spawned jobs inherit: the first segment's environment, the
/// directory and host the run was started from, the nodes' names.
/// `node_env`: the first app's [`dpm_proto::AppSpec::node_env`].
pub fn spawn_context(base_env: Vec<(String, String)>, cwd: PathBuf, host: String, nodes: &[crate::nodes::Node], node_env: bool) -> SpawnContext {
    SpawnContext { base_env, cwd, host, nodes: nodes.iter().map(|n| n.host.clone()).collect(), node_env }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(args: &str, vars: &[(&str, &str)]) -> Result<RunConfig, UsageError> {
        let args: Vec<String> = args.split_whitespace().map(String::from).collect();
        let opts = cli::parse_run(&args).unwrap();
        let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        RunConfig::resolve(&opts, &move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn a_zero_timeout_is_no_limit() {
        assert_eq!(resolve("./p", &[("MPIEXEC_TIMEOUT", "0")]).unwrap().job.timeout, None);
        assert_eq!(resolve("--timeout 0 ./p", &[("MPIEXEC_TIMEOUT", "5")]).unwrap().job.timeout, None);
        assert_eq!(resolve("-t 3 ./p", &[("MPIEXEC_TIMEOUT", "0")]).unwrap().job.timeout, Some(Duration::from_secs(3)));
    }

    #[test]
    fn disable_auto_cleanup_keeps_the_others_and_travels_to_a_boot() {
        let c = resolve("-disable-auto-cleanup --on-spawned-failure continue ./p", &[]).unwrap();
        assert_eq!(c.job.failure_policy, FailurePolicy::KeepOthers);
        let submit = c.submit(crate::plan::PlannedJob::new(), Vec::new(), "/".into(), "h".into());
        assert_eq!(RunConfig::from_submit(&submit, 32).unwrap().job.failure_policy, FailurePolicy::KeepOthers);
    }

    #[test]
    fn flags_before_variables_before_defaults() {
        let c = resolve("./p", &[]).unwrap();
        assert_eq!((c.job.timeout, c.fanout, c.job.kill_grace, c.launcher), (None, DEFAULT_FANOUT, DEFAULT_KILL_GRACE, None));
        assert_eq!(c.ssh_command, ["ssh", "-o", "BatchMode=yes", "-x"]);
        let vars = [("MPIEXEC_TIMEOUT", "5"), ("DPM_FANOUT", "4"), ("DPM_LAUNCHER", "ssh"), ("DPM_SSH", "rsh -l me"), ("DPM_KVS", "tree")];
        let c = resolve("./p", &vars).unwrap();
        assert_eq!((c.job.timeout, c.fanout, c.launcher, c.job.kvs), (Some(Duration::from_secs(5)), 4, Some(Launcher::Ssh), KvsDesign::Tree));
        assert_eq!(c.ssh_command, ["rsh", "-l", "me", "-x"]);
        let c = resolve("--timeout 7 --tree-fanout 2 -launcher fork --kvs dkvs ./p", &vars).unwrap();
        assert_eq!((c.job.timeout, c.fanout, c.launcher, c.job.kvs), (Some(Duration::from_secs(7)), 2, Some(Launcher::Fork), KvsDesign::Dkvs));
    }

    #[test]
    fn x_forwarding_as_hydras_ssh_launcher() {
        // Off unless asked for (ssh -x), on with -enable-x (ssh -X); the last word counts.
        assert_eq!(resolve("-disable-x ./p", &[]).unwrap().ssh_command, ["ssh", "-o", "BatchMode=yes", "-x"]);
        assert_eq!(resolve("-enable-x ./p", &[("DPM_SSH", "myssh -p 22")]).unwrap().ssh_command, ["myssh", "-p", "22", "-X"]);
        assert_eq!(resolve("-enable-x -disable-x ./p", &[]).unwrap().ssh_command.last().map(String::as_str), Some("-x"));
    }

    #[test]
    fn iface_from_the_flag_or_hydra_iface() {
        use std::net::Ipv4Addr;
        let c = resolve("-iface lo ./p", &[("HYDRA_IFACE", "dpm-no-such0")]).unwrap();
        assert_eq!(c.iface.as_ref().map(|i| (i.name.as_str(), i.ip)), Some(("lo", Ipv4Addr::LOCALHOST)));
        // -launcher manual listens there, unless --bind says otherwise.
        assert_eq!(c.bind, Some(SocketAddr::from(([127, 0, 0, 1], 0))));
        assert_eq!(resolve("-iface lo --bind 127.0.0.2:7000 ./p", &[]).unwrap().bind, Some(SocketAddr::from(([127, 0, 0, 2], 7000))));
        assert_eq!(resolve("./p", &[("HYDRA_IFACE", "lo")]).unwrap().iface.map(|i| i.name), Some("lo".to_string()));
        assert_eq!(resolve("./p", &[]).unwrap().iface, None);
        let err = resolve("./p", &[("HYDRA_IFACE", "dpm-no-such0")]).unwrap_err();
        assert_eq!(err.0, "-iface dpm-no-such0: no network interface 'dpm-no-such0' with an IPv4 address on this host");
        let mut env = vec![(NETWORK_IFACE_VAR.to_string(), "eth9".to_string()), ("A".to_string(), "1".to_string())];
        set_iface_var(&mut env, "lo");
        assert_eq!(env, [("A".to_string(), "1".to_string()), (NETWORK_IFACE_VAR.to_string(), "lo".to_string())]);
    }

    #[test]
    fn hydras_launcher_rmk_and_exec_variables() {
        use crate::batch::{BatchSystem, Rmk};
        let c = resolve("./p", &[("HYDRA_LAUNCHER", "lsf"), ("HYDRA_RMK", "pbs"), ("HYDRA_LAUNCHER_EXEC", "/opt/lsf/blaunch")]).unwrap();
        assert_eq!((c.launcher, c.rmk), (Some(Launcher::Lsf), Some(Rmk::Batch(BatchSystem::Pbs))));
        assert_eq!(
            (c.launcher_exec.as_deref(), c.ssh_command.as_slice()),
            (Some(&["/opt/lsf/blaunch".to_string()][..]), &["/opt/lsf/blaunch".to_string(), "-x".to_string()][..])
        );
        let c = resolve("-launcher sge -rmk user ./p", &[("HYDRA_LAUNCHER", "lsf"), ("HYDRA_RMK", "pbs"), ("HYDRA_BOOTSTRAP_EXEC", "/q")]).unwrap();
        assert_eq!((c.launcher, c.rmk, c.launcher_exec), (Some(Launcher::Sge), Some(Rmk::User), Some(vec!["/q".to_string()])));
        // DPM's own variables first; HYDRA_BOOTSTRAP is HYDRA_LAUNCHER's old name.
        let c = resolve("./p", &[("DPM_LAUNCHER", "ssh"), ("HYDRA_LAUNCHER", "sge"), ("DPM_SSH", "myssh")]).unwrap();
        assert_eq!((c.launcher, c.ssh_command), (Some(Launcher::Ssh), vec!["myssh".to_string(), "-x".to_string()]));
        assert_eq!(resolve("./p", &[("HYDRA_BOOTSTRAP", "pbs")]).unwrap().launcher, Some(Launcher::Pbs));
        assert!(resolve("./p", &[("HYDRA_RMK", "cobalt")]).unwrap_err().0.starts_with("HYDRA_RMK: unknown resource manager 'cobalt'"));
        assert!(resolve("./p", &[("HYDRA_LAUNCHER", "rsh")]).unwrap_err().0.starts_with("HYDRA_LAUNCHER: unknown launcher 'rsh'"));
        assert_eq!(resolve("./p", &[]).unwrap().launcher_exec, None);
    }

    #[test]
    fn out_of_range_values_are_usage_errors() {
        let err = resolve("./p", &[("MPIEXEC_TIMEOUT", "18446744073709551615")]).unwrap_err();
        assert!(err.0.contains("MPIEXEC_TIMEOUT=18446744073709551615: not a number of seconds"), "{err}");
        assert!(resolve("./p", &[("DPM_CONNECT_TIMEOUT", "1e30")]).is_err());
        assert!(resolve("./p", &[("DPM_LAUNCHER", "rsh")]).unwrap_err().0.contains("unknown launcher 'rsh'"));
        assert!(resolve("./p", &[("DPM_KVS", "ring")]).unwrap_err().0.starts_with("DPM_KVS: "));
        assert!(resolve("./p", &[("DPM_HEARTBEAT_TIMEOUT", "0.1")]).unwrap_err().0.starts_with("DPM_HEARTBEAT_TIMEOUT: invalid heartbeat timeout"));
        assert!(resolve("./p", &[("DPM_HEARTBEAT_TIMEOUT", "2.5")]).is_ok());
        for bad in ["--kill-grace 1e300", "--kill-grace inf", "--kill-grace nan", "--kill-grace -1", "--timeout 18446744073709551615"] {
            let args: Vec<String> = format!("{bad} ./p").split_whitespace().map(String::from).collect();
            assert!(cli::parse_run(&args).is_err(), "{bad} parsed");
        }
        assert_eq!(resolve("--kill-grace 1e9 ./p", &[]).unwrap().job.kill_grace, Duration::from_secs(MAX_SECS));
    }

    #[test]
    fn universe_is_never_below_the_world() {
        // The default: unset, as Hydra — whatever the CPUs.
        for world in 1..=4 {
            assert_eq!(universe_size(None, 2, false, world, false), -1, "world {world}");
        }
        // Slots that were given (a host list with slots, Slurm): while they hold the world.
        assert_eq!(universe_size(None, 8, true, 2, false), 8);
        assert_eq!(universe_size(None, 2, true, 2, false), 2);
        assert_eq!(universe_size(None, 2, true, 3, false), -1);
        // --no-oversubscribe needs a number to refuse spawns beyond.
        assert_eq!(universe_size(None, 2, false, 4, true), 4);
        assert_eq!(universe_size(None, 8, false, 4, true), 8);
        // --usize.
        assert_eq!(universe_size(Some(16), 2, false, 4, false), 16);
        assert_eq!(universe_size(Some(2), 2, true, 4, false), 4);
        assert_eq!(universe_size(Some(-1), 8, true, 4, true), -1);
    }

    #[test]
    fn warm_spawn_from_the_flag_before_the_variable() {
        assert_eq!(resolve("./p", &[]).unwrap().job.warm_spawn, None);
        assert_eq!(resolve("--warm-spawn ./p", &[]).unwrap().job.warm_spawn, Some(crate::run::DEFAULT_WARM_SPAWN));
        assert_eq!(resolve("--warm-spawn=5 ./p", &[("DPM_WARM_SPAWN", "1")]).unwrap().job.warm_spawn, Some(5));
        assert_eq!(resolve("./p", &[("DPM_WARM_SPAWN", "0")]).unwrap().job.warm_spawn, Some(0));
        let parse = |a: &str| cli::parse_run(&a.split_whitespace().map(String::from).collect::<Vec<_>>());
        assert!(parse("--warm-spawn=65 ./p").is_err());
        assert!(resolve("./p", &[("DPM_WARM_SPAWN", "lots")]).is_err());
        let c = resolve("-v --warm-spawn=3 ./p", &[]).unwrap();
        assert!(c.job.warm_verbose);
        let back = RunConfig::from_submit(&c.submit(crate::plan::PlannedJob::new(), Vec::new(), "/".into(), "h".into()), c.fanout).unwrap();
        assert_eq!((back.job.warm_spawn, back.job.warm_verbose), (Some(3), true), "a booted run keeps them");
    }

    #[test]
    fn the_failure_policy_comes_from_the_flag_then_the_variable() {
        let policy = |line: &str, env: &[(&str, &str)]| resolve(line, env).map(|c| c.job.failure_policy);
        assert_eq!(policy("./p", &[]).unwrap(), FailurePolicy::EndRun);
        assert_eq!(policy("--on-spawned-failure continue ./p", &[]).unwrap(), FailurePolicy::SurviveSpawnedJobs);
        assert_eq!(policy("--on-spawned-failure=end ./p", &[("DPM_ON_SPAWNED_FAILURE", "continue")]).unwrap(), FailurePolicy::EndRun);
        assert_eq!(policy("./p", &[("DPM_ON_SPAWNED_FAILURE", "Continue")]).unwrap(), FailurePolicy::SurviveSpawnedJobs);
        let err = policy("./p", &[("DPM_ON_SPAWNED_FAILURE", "retry")]).unwrap_err();
        assert_eq!(err.0, "DPM_ON_SPAWNED_FAILURE: 'retry' is not a failure policy (end or continue)");
        let args: Vec<String> = ["--on-spawned-failure", "ignore", "./p"].map(String::from).to_vec();
        assert!(cli::parse_run(&args).is_err());
        // A booted run gets it through its submission.
        let c = resolve("--on-spawned-failure continue ./p", &[]).unwrap();
        let submit = c.submit(crate::plan::PlannedJob::new(), Vec::new(), "/".into(), "h".into());
        assert_eq!(RunConfig::from_submit(&submit, 32).unwrap().job.failure_policy, FailurePolicy::SurviveSpawnedJobs);
    }

    #[test]
    fn a_submission_gives_back_the_job_settings() {
        let c = resolve("--timeout 9 --kill-grace 0.5 --usize 6 -l --pmi-port -ppn 2 ./p", &[]).unwrap();
        let submit = c.submit(crate::plan::PlannedJob::new(), Vec::new(), "/".into(), "h".into());
        let back = RunConfig::from_submit(&submit, c.fanout).unwrap();
        assert_eq!(
            back,
            RunConfig {
                verbose: 0,
                launcher: None,
                rmk: None,
                launcher_exec: None,
                ssh_command: Vec::new(),
                launcher_extra: Vec::new(),
                port_range: None,
                ..c
            }
        );
        let mut bad = submit.clone();
        bad.job.kill_grace = Duration::from_secs(MAX_SECS + 1);
        assert!(RunConfig::from_submit(&bad, 32).is_err());
    }
}
