//! A plain `dpm run`'s (and a boot client's) inputs: this process's signals and stdin.

use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

use super::Input;

/// Whether this process's stdin is `/dev/null` (the same character device).
pub(crate) fn stdin_is_dev_null() -> bool {
    use nix::sys::stat::{fstat, stat, SFlag};
    let is_chr = |mode: u32| SFlag::from_bits_truncate(mode) & SFlag::S_IFMT == SFlag::S_IFCHR;
    match (fstat(libc::STDIN_FILENO), stat("/dev/null")) {
        (Ok(fd0), Ok(null)) => is_chr(fd0.st_mode) && is_chr(null.st_mode) && fd0.st_rdev == null.st_rdev,
        _ => false,
    }
}

/// This process's signals (INT, TERM, HUP; with `job_control` also TSTP and
/// CONT, Ctrl-Z and `fg`), with `console` SIGPIPE when its stdout or stderr
/// is closed (they carry the run's output), and, if `stdin`, its stdin, read on a thread of its
/// own (a blocking read must not stall the event loop).
pub fn local_inputs(stdin: bool, job_control: bool, console: bool) -> mpsc::UnboundedReceiver<Input> {
    let (tx, rx) = mpsc::unbounded_channel();
    // SIGQUIT (Ctrl-\): the ranks' states and stacks, the run goes on.
    // The states signal: a tool asks for the ranks' PMI states (`run_table`).
    let mut kinds = vec![
        SignalKind::interrupt(),
        SignalKind::terminate(),
        SignalKind::hangup(),
        SignalKind::quit(),
        SignalKind::from_raw(crate::run_table::states_signal()),
    ];
    if job_control {
        kinds.extend([SignalKind::from_raw(libc::SIGTSTP), SignalKind::from_raw(libc::SIGCONT)]);
    }
    for kind in kinds {
        let mut stream = signal(kind).expect("signal handler");
        let tx = tx.clone();
        tokio::task::spawn_local(async move {
            while stream.recv().await.is_some() {
                if tx.send(Input::Signal(kind.as_raw_value())).is_err() {
                    return;
                }
            }
        });
    }
    // dpm's stdout or stderr has no reader any more: SIGPIPE, as the
    // signal itself would have told a launcher that does not ignore it.
    if console {
        let closed = tx.clone();
        tokio::task::spawn_local(async move {
            crate::output::CONSOLE_CLOSED.notified().await;
            let _ = closed.send(Input::Signal(libc::SIGPIPE));
        });
    }
    if stdin && stdin_is_dev_null() {
        // Nothing to read: the end of input now, without a thread.
        let _ = tx.send(Input::Stdin(Vec::new()));
    } else if stdin {
        let eof = tx.clone();
        let started = std::thread::Builder::new().name("dpm-stdin".into()).spawn(move || {
            use std::io::Read;
            let mut buf = vec![0u8; 64 * 1024];
            let mut stdin = std::io::stdin().lock();
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) | Err(_) => {
                        let _ = tx.send(Input::Stdin(Vec::new()));
                        return;
                    }
                    Ok(n) => {
                        if tx.send(Input::Stdin(buf[..n].to_vec())).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        if let Err(e) = started {
            // No thread (a pids limit): rank 0 sees the end of its input
            // at once rather than wait for input that never comes.
            eprintln!("dpm: warning: cannot start the stdin thread ({e}); rank 0's stdin is empty");
            let _ = eof.send(Input::Stdin(Vec::new()));
        }
    }
    rx
}
