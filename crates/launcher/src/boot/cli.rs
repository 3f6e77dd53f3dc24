//! `dpm boot`: parse its options (the node options of `dpm run`, through the
//! same table and parser, plus its own), then either serve in the foreground
//! or start the server detached and wait until it says it is ready.

use std::io::BufRead;
use std::os::unix::fs::OpenOptionsExt;

use crate::cli::{self, BootFlags, CliError, RunOptions};
use crate::config::{Launcher, RunConfig};
use crate::error::{Error, UsageError};

use super::{boot_files, BootFiles};

/// What `dpm boot ARGS` asks for.
#[derive(Debug)]
pub enum BootRequest {
    Help,
    Boot(Box<BootArgs>),
}

#[derive(Debug)]
pub struct BootArgs {
    /// The nodes, bootstrap and fan-out, as `dpm run` takes them.
    pub opts: RunOptions,
    pub flags: BootFlags,
    /// The arguments as given, for the detached server's command line.
    args: Vec<String>,
}

/// Parse `dpm boot ARGS`.
pub fn parse_boot_command(args: &[String]) -> Result<BootRequest, Error> {
    match cli::parse_boot(args) {
        Ok((opts, flags)) => Ok(BootRequest::Boot(Box::new(BootArgs { opts, flags, args: args.to_vec() }))),
        Err(CliError::Help) => Ok(BootRequest::Help),
        Err(e) => Err(e.into()),
    }
}

/// `dpm boot`: 0 once the server is up (detached) or has stopped (foreground).
pub fn boot_command(boot: Box<BootArgs>) -> Result<i32, Error> {
    let config = RunConfig::from_env(&boot.opts)?;
    if let Some(request) = change_request(&boot, &config)? {
        return super::grow::request_command(request);
    }
    let files = boot_files()?;
    if std::os::unix::net::UnixStream::connect(&files.socket).is_ok() {
        return Err(Error::failed(format!("already booted ({}); `dpm down` first", files.socket.display())));
    }
    // Manual daemons need the command lines dpm prints while it waits for
    // them: on the terminal, so only in the foreground.
    if config.launcher == Some(Launcher::Manual) && !boot.flags.foreground {
        return Err(UsageError::new("-launcher manual needs --foreground (it prints the daemons' command lines and waits for them)").into());
    }
    if boot.flags.foreground {
        crate::runtime::raise_fd_limit();
        return crate::runtime::block_on_local(super::server::serve(boot.opts, config, files, boot.flags.ready_on_stdout));
    }
    detach(&boot.args, &files)
}

/// `--add` or `--drain`: the change to ask of the running boot.
fn change_request(boot: &BootArgs, config: &RunConfig) -> Result<Option<dpm_proto::control::ToServer>, Error> {
    let flags = &boot.flags;
    let refuse = |m: &str| -> Result<Option<_>, Error> { Err(UsageError::new(m).into()) };
    match (flags.add, flags.drain.is_empty()) {
        (true, false) => refuse("dpm boot: --add and --drain are separate requests"),
        _ if flags.force && flags.drain.is_empty() => refuse("dpm boot: --force goes with --drain HOSTS"),
        (true, true) if flags.foreground => refuse("dpm boot --add: --foreground starts a boot; --add grows the running one"),
        (true, true)
            if boot.opts.hosts.is_empty()
                && boot.opts.hostfile.is_none()
                && boot.opts.rmk.is_none()
                && crate::batch::detect(&|k: &str| std::env::var(k).ok()).is_none() =>
        {
            refuse("dpm boot --add: name the hosts to add (-hosts, -f, or -rmk inside an allocation)")
        }
        (true, true) => Ok(Some(super::grow::add_request(&boot.opts, config)?)),
        (false, false) => {
            Ok(Some(dpm_proto::control::ToServer::Drain { version: dpm_proto::control::CONTROL_VERSION, hosts: flags.drain.clone(), force: flags.force }))
        }
        (false, true) => Ok(None),
    }
}

/// Start `dpm boot --foreground` as a session of its own, its stderr to the
/// log file; return once it says it is ready (or say why it is not, with
/// its log).
fn detach(args: &[String], files: &BootFiles) -> Result<i32, Error> {
    let exe = std::env::current_exe().map_err(|e| Error::failed(format!("cannot find the dpm executable: {e}")))?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(&files.log)
        .map_err(|e| Error::failed(format!("{}: {e}", files.log.display())))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("boot").arg("--foreground").arg("--ready-on-stdout").args(args);
    cmd.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::piped()).stderr(log);
    // Its own session: no terminal's hangup or Ctrl-C reaches it.
    // SAFETY: the closure runs between fork and exec and calls only setsid,
    // which is async-signal-safe.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| nix::unistd::setsid().map(drop).map_err(std::io::Error::from));
    }
    let mut child = cmd.spawn().map_err(|e| Error::failed(format!("cannot start the boot server: {e}")))?;
    let mut line = String::new();
    if let Some(stdout) = child.stdout.take() {
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
    }
    if let Some(summary) = line.strip_prefix("ready ") {
        println!("dpm boot: {} (log: {})", summary.trim(), files.log.display());
        return Ok(0);
    }
    let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
    // The server's own words come first: relayed from its log as they are.
    let text = std::fs::read_to_string(&files.log).unwrap_or_default();
    crate::output::emit(true, text.as_bytes());
    let _ = std::fs::remove_file(&files.log);
    Err(Error::failed(format!("the boot server did not start ({status})")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_options_parse() {
        let args: Vec<String> = ["--virtual-nodes", "4", "--tree-fanout=2", "-v"].iter().map(|s| s.to_string()).collect();
        let BootRequest::Boot(boot) = parse_boot_command(&args).unwrap() else { panic!("not a boot") };
        assert_eq!(boot.opts.virtual_nodes, Some(4));
        assert_eq!(boot.opts.fanout, Some(2));
        assert_eq!(boot.opts.verbose, 1);
        assert!(!boot.flags.foreground);
        assert!(parse_boot_command(&["-n".to_string(), "2".to_string()]).is_err());
        assert!(parse_boot_command(&["prog".to_string()]).is_err());
        assert!(matches!(parse_boot_command(&["--help".to_string()]), Ok(BootRequest::Help)));
    }
}
