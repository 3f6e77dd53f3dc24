//! The batch systems' launch agents: the command a daemon is started with on
//! another host of the allocation (`AGENT… HOST dpm daemon …`, the shape of
//! ssh), so that the batch system accounts for it and kills it with the job.
//!
//! As Hydra finds them (its `external_common_launch.c`), the launcher's exec
//! (`-launcher-exec`, `HYDRA_LAUNCHER_EXEC`) first:
//! - LSF: `$LSF_BINDIR/blaunch`, else `blaunch` on `PATH`, else
//!   `/usr/bin/blaunch`. Hydra adds `-n` (stdin from `/dev/null`); dpm does
//!   not: the daemon's link is its stdin.
//! - Grid Engine: `$SGE_ROOT/bin/$ARC/qrsh`, else `qrsh` on `PATH`, else
//!   `/usr/bin/qrsh`; then `-inherit -V`.
//! - PBS: `pbs_tmrsh` on `PATH` (PBS Pro's TM-backed rsh), else ssh. Hydra
//!   5.0.2 built without TM has no `pbs` launcher and uses ssh.
//!
//! The daemons of the tree start their children the same way
//! ([`dpm_proto::tree::Bootstrap::Agent`]); a host that is this machine
//! gets its daemon by fork ([`dpm_daemon::links`]).

use std::path::{Path, PathBuf};

use crate::batch::BatchSystem;
use crate::nodes::Launcher;

/// The launcher a batch system brings when none was asked for.
pub fn of(system: BatchSystem) -> Launcher {
    match system {
        BatchSystem::Slurm => Launcher::Slurm,
        BatchSystem::Lsf => Launcher::Lsf,
        BatchSystem::Sge => Launcher::Sge,
        BatchSystem::Pbs => Launcher::Pbs,
    }
}

/// `name` in the directories of `path` (a `PATH` value), if executable there.
pub fn find_in_path(name: &str, path: Option<&str>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    path?
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(name))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// The agent command (everything before the host) of `launcher`, one of
/// `Lsf`, `Sge`, `Pbs`. `exec`: the launcher exec given; `ssh`: the ssh
/// command (PBS without `pbs_tmrsh`); `env` the environment; `find` looks
/// a program up on `PATH`.
pub fn command(
    launcher: Launcher,
    exec: Option<&[String]>,
    ssh: &[String],
    extra: &[String],
    env: &dyn Fn(&str) -> Option<String>,
    find: &dyn Fn(&str) -> Option<PathBuf>,
) -> Vec<String> {
    let var = |k: &str| env(k).filter(|v| !v.is_empty());
    let located = |given: Option<String>, name: &str| -> Vec<String> {
        match exec {
            Some(e) if !e.is_empty() => e.to_vec(),
            _ => vec![given.or_else(|| find(name).map(|p| p.display().to_string())).unwrap_or_else(|| format!("/usr/bin/{name}"))],
        }
    };
    // `HYDRA_LAUNCHER_EXTRA_ARGS` after the agent's own options, as Hydra
    // puts them; the ssh command carries them already.
    let with_extra = |mut c: Vec<String>| {
        c.extend(extra.iter().cloned());
        c
    };
    match launcher {
        Launcher::Lsf => with_extra(located(var("LSF_BINDIR").map(|d| format!("{d}/blaunch")), "blaunch")),
        Launcher::Sge => {
            let qrsh = match (var("SGE_ROOT"), var("ARC")) {
                (Some(root), Some(arc)) => Some(format!("{root}/bin/{arc}/qrsh")),
                _ => None,
            };
            let mut c = located(qrsh, "qrsh");
            c.extend(["-inherit", "-V"].map(String::from));
            with_extra(c)
        }
        Launcher::Pbs => match exec {
            Some(e) if !e.is_empty() => with_extra(e.to_vec()),
            _ => find("pbs_tmrsh").map_or_else(|| ssh.to_vec(), |p| with_extra(vec![p.display().to_string()])),
        },
        Launcher::Fork | Launcher::Ssh | Launcher::Slurm | Launcher::Manual => ssh.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn agents_as_hydra_finds_them() {
        let ssh = s(&["ssh", "-o", "BatchMode=yes"]);
        let none = |_: &str| None;
        let env = |k: &str| match k {
            "LSF_BINDIR" => Some("/lsf/bin".to_string()),
            "SGE_ROOT" => Some("/sge".to_string()),
            "ARC" => Some("lx-amd64".to_string()),
            _ => None,
        };
        assert_eq!(command(Launcher::Lsf, None, &ssh, &[], &env, &none), s(&["/lsf/bin/blaunch"]));
        assert_eq!(command(Launcher::Sge, None, &ssh, &[], &env, &none), s(&["/sge/bin/lx-amd64/qrsh", "-inherit", "-V"]));
        assert_eq!(command(Launcher::Lsf, None, &ssh, &[], &|_| None, &none), s(&["/usr/bin/blaunch"]));
        let found = |n: &str| Some(PathBuf::from(format!("/path/{n}")));
        assert_eq!(command(Launcher::Sge, None, &ssh, &[], &|_| None, &found), s(&["/path/qrsh", "-inherit", "-V"]));
        // PBS: pbs_tmrsh where it is, else ssh (Hydra without TM).
        assert_eq!(command(Launcher::Pbs, None, &ssh, &[], &env, &found), s(&["/path/pbs_tmrsh"]));
        assert_eq!(command(Launcher::Pbs, None, &ssh, &[], &env, &none), ssh);
        // The launcher exec replaces the program, not Grid Engine's flags.
        let exec = s(&["/my/agent"]);
        assert_eq!(command(Launcher::Sge, Some(&exec), &ssh, &[], &env, &none), s(&["/my/agent", "-inherit", "-V"]));
        assert_eq!(command(Launcher::Lsf, Some(&exec), &ssh, &[], &env, &none), exec);
        assert_eq!(command(Launcher::Pbs, Some(&exec), &ssh, &[], &env, &none), exec);
        // HYDRA_LAUNCHER_EXTRA_ARGS after the agent's options; ssh has them already.
        let extra = s(&["-p", "7"]);
        assert_eq!(command(Launcher::Sge, None, &ssh, &extra, &env, &none), s(&["/sge/bin/lx-amd64/qrsh", "-inherit", "-V", "-p", "7"]));
        assert_eq!(command(Launcher::Lsf, None, &ssh, &extra, &env, &none), s(&["/lsf/bin/blaunch", "-p", "7"]));
        assert_eq!(command(Launcher::Pbs, None, &ssh, &extra, &env, &none), ssh);
    }

    #[test]
    fn path_lookup_needs_an_executable_file() {
        let dir = std::env::temp_dir().join(format!("dpm-agent-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join("blaunch");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        let path = format!("/nonexistent:{}", dir.display());
        assert_eq!(find_in_path("blaunch", Some(&path)), None, "not executable yet");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(find_in_path("blaunch", Some(&path)), Some(exe));
        assert_eq!(find_in_path("blaunch", None), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
