//! Hydra's environment variables that stand for options, read as Hydra
//! 5.0.2 reads them (its `mpiexec/get_parameters.c`, `tools/topo/topo.c`,
//! the launchers' `HYDRA_LAUNCHER_EXTRA_ARGS`): an option on the command
//! line wins over its variable, the variable over the default.
//!
//! - Before the command line ([`defaults`]): `HYDRA_ENV` (`all`:
//!   `-genvall`, `none`: `-genvnone`), `HYDRA_DEBUG` (a boolean: `-verbose`),
//!   `HYDRA_BINDING`, `HYDRA_MAPPING`, `HYDRA_MEMBIND` (`-bind-to`,
//!   `-map-by`, `-membind`), `HYDRA_TOPOLIB` (`-topolib`: hwloc).
//! - After it ([`host_file`]): `HYDRA_HOST_FILE` is `-f FILE` when no
//!   `-hosts`, `-f`, `--virtual-nodes` or `DPM_HOSTS` gave the nodes; as in
//!   Hydra it wins over a batch allocation.
//! - [`launcher_extra_args`]: `HYDRA_LAUNCHER_EXTRA_ARGS`, words put after
//!   the launcher's own options (ssh, srun, blaunch, qrsh, pbs_tmrsh).
//! - `MPIEXEC_PORT_RANGE` and the names Hydra reads before it: the
//!   [`crate::ports`] module (no part of the command line).
//!
//! A value dpm cannot read is a usage error naming the variable.
//! `HYDRA_PROXY_RETRY_COUNT` has no meaning in dpm (docs/hydra.md).

use super::{EnvMode, RunOptions};
use crate::error::UsageError;

/// The environment as a lookup (the process's, or a table in tests).
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// `name`'s value, unset when empty.
fn var(env: Env, name: &str) -> Option<String> {
    env(name).filter(|v| !v.trim().is_empty())
}

/// MPICH's booleans (`MPL_env2bool`): 1/0, yes/no, true/false, on/off.
pub fn parse_bool(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "yes" | "true" | "on" => Some(true),
        "0" | "no" | "false" | "off" => Some(false),
        _ => None,
    }
}

/// The variables that give defaults to options: applied to `opts` before
/// the command line is parsed into it, so that its options win.
pub fn defaults(opts: &mut RunOptions, env: Env) -> Result<(), UsageError> {
    let bad = |name: &str, v: &str, why: &dyn std::fmt::Display| UsageError(format!("{name}={v}: {why}"));
    if let Some(v) = var(env, "HYDRA_ENV") {
        opts.genv_mode = match v.trim() {
            "all" => EnvMode::All,
            "none" => EnvMode::None,
            _ => return Err(bad("HYDRA_ENV", &v, &"all (pass dpm's environment to the ranks) or none")),
        };
    }
    if let Some(v) = var(env, "HYDRA_DEBUG") {
        match parse_bool(&v) {
            Some(true) => opts.verbose = opts.verbose.max(1),
            Some(false) => {}
            None => return Err(bad("HYDRA_DEBUG", &v, &"not a boolean (1/0, yes/no, true/false, on/off)")),
        }
    }
    if let Some(v) = var(env, "HYDRA_TOPOLIB") {
        if !v.trim().eq_ignore_ascii_case("hwloc") {
            return Err(bad("HYDRA_TOPOLIB", &v, &"dpm reads the topology with hwloc only"));
        }
    }
    if let Some(v) = var(env, "HYDRA_BINDING") {
        opts.binding.set_bind(&v).map_err(|e| bad("HYDRA_BINDING", &v, &e))?;
    }
    if let Some(v) = var(env, "HYDRA_MAPPING") {
        opts.map_by_node = opts.binding.set_map(&v).map_err(|e| bad("HYDRA_MAPPING", &v, &e))?;
    }
    if let Some(v) = var(env, "HYDRA_MEMBIND") {
        opts.binding.set_membind(&v).map_err(|e| bad("HYDRA_MEMBIND", &v, &e))?;
    }
    Ok(())
}

/// `HYDRA_HOST_FILE` as `-f FILE`, when nothing on the command line (nor
/// `DPM_HOSTS`, dpm's own variable) named the nodes; a file that cannot be
/// opened is named with the variable.
pub fn host_file(opts: &mut RunOptions, env: Env) -> Result<(), UsageError> {
    if opts.hosts.is_empty() && opts.hostfile.is_none() && opts.virtual_nodes.is_none() && env("DPM_HOSTS").is_none() {
        if let Some(file) = var(env, "HYDRA_HOST_FILE") {
            std::fs::File::open(&file).map_err(|e| UsageError(format!("HYDRA_HOST_FILE={file}: cannot read it: {e}")))?;
            opts.hostfile = Some(file);
        }
    }
    Ok(())
}

/// `HYDRA_LAUNCHER_EXTRA_ARGS`, split at blanks as Hydra splits it.
pub fn launcher_extra_args(env: Env) -> Vec<String> {
    env("HYDRA_LAUNCHER_EXTRA_ARGS").map(|v| v.split_whitespace().map(String::from).collect()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    fn parse(args: &str, vars: &[(&str, &str)]) -> Result<RunOptions, crate::cli::CliError> {
        let args: Vec<String> = args.split_whitespace().map(String::from).collect();
        crate::cli::parse_run_with_env(&args, &table(vars))
    }

    #[test]
    fn variables_give_defaults_the_command_line_overrides() {
        let o = parse("-n 1 p", &[("HYDRA_ENV", "none"), ("HYDRA_DEBUG", "yes"), ("HYDRA_BINDING", "core"), ("HYDRA_MAPPING", "node")]).unwrap();
        assert_eq!(o.genv_mode, EnvMode::None);
        assert_eq!(o.verbose, 1);
        assert!(o.binding.bind.is_some());
        assert!(o.map_by_node);
        let o = parse("-genvall -bind-to none -map-by slot -n 1 p", &[("HYDRA_ENV", "none"), ("HYDRA_BINDING", "core"), ("HYDRA_MAPPING", "node")]).unwrap();
        assert_eq!(o.genv_mode, EnvMode::All);
        assert_eq!(o.binding.bind, Some(dpm_binding::policy::BindTo::None));
        assert!(!o.map_by_node);
        let o = parse("-n 1 p", &[("HYDRA_ENV", "all"), ("HYDRA_DEBUG", "0"), ("HYDRA_MEMBIND", "numa"), ("HYDRA_TOPOLIB", "hwloc")]).unwrap();
        assert_eq!((o.genv_mode, o.verbose), (EnvMode::All, 0));
        assert!(o.binding.membind.is_some());
        // Unset or empty: the defaults.
        let o = parse("-n 1 p", &[("HYDRA_ENV", ""), ("HYDRA_BINDING", " ")]).unwrap();
        assert_eq!((o.genv_mode, o.binding.bind), (EnvMode::All, None));
    }

    #[test]
    fn bad_values_name_their_variable() {
        for (name, value, says) in [
            ("HYDRA_ENV", "some", "HYDRA_ENV=some: all"),
            ("HYDRA_DEBUG", "maybe", "HYDRA_DEBUG=maybe: not a boolean"),
            ("HYDRA_TOPOLIB", "plpa", "HYDRA_TOPOLIB=plpa: dpm reads the topology with hwloc only"),
            ("HYDRA_BINDING", "atoms", "HYDRA_BINDING=atoms: "),
            ("HYDRA_MAPPING", "x:y", "HYDRA_MAPPING=x:y: "),
            ("HYDRA_MEMBIND", "atoms", "HYDRA_MEMBIND=atoms: "),
        ] {
            match parse("-n 1 p", &[(name, value)]) {
                Err(crate::cli::CliError::Usage(m)) => assert!(m.starts_with(says), "{m}"),
                other => panic!("{name}={value}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_host_file_variable_only_when_no_nodes_were_given() {
        let file = [("HYDRA_HOST_FILE", "/dev/null")];
        assert_eq!(parse("-n 1 p", &file).unwrap().hostfile.as_deref(), Some("/dev/null"));
        match parse("-n 1 p", &[("HYDRA_HOST_FILE", "/nonexistent/hosts")]) {
            Err(crate::cli::CliError::Usage(m)) => assert!(m.starts_with("HYDRA_HOST_FILE=/nonexistent/hosts: cannot read it: "), "{m}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(parse("-f /mine -n 1 p", &file).unwrap().hostfile.as_deref(), Some("/mine"));
        assert_eq!(parse("-hosts a,b -n 1 p", &file).unwrap().hostfile, None);
        assert_eq!(parse("--virtual-nodes 2 -n 1 p", &file).unwrap().hostfile, None);
        assert_eq!(parse("-n 1 p", &[("HYDRA_HOST_FILE", "/dev/null"), ("DPM_HOSTS", "a")]).unwrap().hostfile, None);
    }

    #[test]
    fn extra_launcher_args_split_at_blanks() {
        assert!(launcher_extra_args(&table(&[])).is_empty());
        assert_eq!(launcher_extra_args(&table(&[("HYDRA_LAUNCHER_EXTRA_ARGS", " -p 2222  -q ")])), ["-p", "2222", "-q"]);
    }
}
