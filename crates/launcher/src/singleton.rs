//! Singleton mode: `mpiexec -pmi_args PORT INTERFACE KEY PID`.
//!
//! An MPICH program started without a launcher (`./prog`, `python script.py`)
//! that needs a process manager — to spawn, or for `MPI_UNIVERSE_SIZE` —
//! listens on a TCP port and runs `mpiexec -pmi_args …` found in its PATH
//! (`pmi-wire.md` §2.4). dpm, installed as `mpiexec`, connects back, completes
//! the `singinit` handshake, and serves the program as rank 0 of a one-process
//! job; processes it spawns are launched as usual. dpm ends when the program
//! and everything it spawned have ended.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use dpm_proto::{LaunchJob, PmiMode};

use crate::cli::RunOptions;
use crate::config::{self, RunConfig};
use crate::error::{Error, UsageError};
use crate::nodes::Node;

/// Serve the singleton; returns dpm's exit status.
pub fn run(args: &[String]) -> Result<i32, Error> {
    let (Some(port), Some(pid)) = (args.first(), args.get(3)) else {
        return Err(UsageError::new("-pmi_args needs PORT INTERFACE KEY PID").into());
    };
    let (Ok(port), Ok(pid)) = (port.parse::<u16>(), pid.parse::<u32>()) else {
        return Err(UsageError::new(format!("-pmi_args {}: PORT and PID must be numbers", args.join(" "))).into());
    };
    // MPICH formats PID in the forked child, so it is our own pid: the
    // singleton is the process that forked us.
    let pid = if pid == std::process::id() { nix::unistd::getppid().as_raw() as u32 } else { pid };
    // Everything the singleton had open was inherited (MPICH does not mark its
    // fds close-on-exec): keep none of it, so spawned children get none either.
    close_inherited_fds();
    let kvsname = crate::controller::kvsname(crate::controller::random_tag(), dpm_kvs::JobId(0));
    let stream = handshake(port, &kvsname).map_err(|e| Error::failed(format!("singleton handshake with process {pid} on port {port} failed: {e}")))?;
    let launcher_env: Vec<(String, String)> = std::env::vars().collect();
    let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
    crate::runtime::raise_fd_limit();
    crate::runtime::block_on_local(async move {
        let host = crate::machine::this_host();
        // One process, the CPUs as its universe: room to spawn into.
        let universe_size = crate::cli::cpus();
        let config = RunConfig::from_env(&RunOptions::default())?;
        let node = Node { host: host.clone(), slots: universe_size as u32 };
        let base_env = launcher_env.into_iter().filter(|(k, _)| !k.starts_with("PMI_") && !k.starts_with("PMIX_")).collect();
        let spawn = config::spawn_context(base_env, cwd, host, std::slice::from_ref(&node), false);
        let settings = config::settings(&config, universe_size, spawn, vec![node.slots], 1, std::process::id());
        let daemons = crate::nodes::start(&[node], &crate::nodes::Bootstrap::InProcess, 1, false, 0).await?;
        let kvs = config.job.kvs;
        let start = move |controller: &mut crate::controller::Controller| {
            // Job 0 keeps the name the handshake already told the program.
            let (job, _) = controller.new_job_id();
            let launch = LaunchJob {
                job,
                kvsname: kvsname.clone(),
                size: 1,
                appnums: vec![0],
                universe_size,
                process_mapping: crate::plan::process_mapping(&[0]),
                spawner: None,
                preput: Vec::new(),
                pmi_mode: PmiMode::Fd,
                stdin_rank: None,
                apps: Vec::new(),
                procs: Vec::new(),
                kvs,
                node_of: vec![dpm_kvs::NodeId(0)],
                awaiting_claim: false,
                binding: Default::default(),
                pmix_watch: false,
                hold: false,
            };
            controller.adopt(launch, pid, stream.into());
        };
        Ok(crate::local::drive(daemons, settings, start, None, false, None).await)
    })
}

fn close_inherited_fds() {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return };
    let fds: Vec<i32> = dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).filter(|&fd| fd > 2).collect();
    for fd in fds {
        // Nothing in this process owns these fds yet (no runtime, no files
        // opened); the one read_dir used is closed and fails harmlessly.
        let _ = nix::unistd::close(fd);
    }
}

/// Connect to the singleton and agree on versions; the connection then
/// carries ordinary PMI-1.
fn handshake(port: u16, kvsname: &str) -> std::io::Result<TcpStream> {
    let stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    (&stream).write_all(b"cmd=singinit authtype=none\n")?;
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line)?;
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{what}: {line:?}"));
    if !line.starts_with("cmd=singinit ") {
        return Err(bad("unexpected reply"));
    }
    if !line.contains("authtype=none") {
        return Err(bad("unsupported authentication"));
    }
    // stdio=no: the program keeps its own stdin/stdout/stderr.
    (&stream).write_all(format!("cmd=singinit_info versionok=yes stdio=no kvsname={kvsname}\n").as_bytes())?;
    stream.set_read_timeout(None)?;
    Ok(stream)
}
