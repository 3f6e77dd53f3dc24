//! A live process's stack, for a hung job that explains itself
//! (`dpm run --timeout N --get-stack-traces`): every thread's backtrace by
//! gdb (`thread apply all bt`), else by elfutils' `eu-stack`, whichever is
//! installed on the node; one line saying so when neither is. Bounded:
//! a tracer that has not answered within the limit is killed and the
//! process named as not traced.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one process's tracer may take: gdb needs ~0.3 s of CPU (it
/// reads the program's and its libraries' symbols), ~1 s on a quiet host;
/// 3 to 9 s were measured with four at once beside four spinning ranks on
/// a 2-core host at a load of 30.
pub const TRACE_LIMIT: Duration = Duration::from_secs(15);

/// The tracers dpm knows, in the order it tries them.
fn tracers(pid: i32) -> [(&'static str, Vec<String>); 2] {
    let p = pid.to_string();
    let gdb = ["-nx", "-batch", "-iex", "set auto-load off", "-iex", "set debuginfod enabled off", "-p", &p, "-ex", "thread apply all bt"];
    [("gdb", gdb.map(String::from).to_vec()), ("eu-stack", vec!["-p".into(), p.clone()])]
}

/// Process `pid`'s stack as text, or one line saying why there is none.
pub fn trace(pid: i32, limit: Duration) -> String {
    for (tool, args) in tracers(pid) {
        let child = Command::new(tool).args(&args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn();
        let mut child = match child {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return format!("cannot run {tool}: {e}"),
        };
        // The output is read on a thread of its own: a tracer that fills the
        // pipe must not stall the deadline.
        let mut stdout = child.stdout.take().expect("piped");
        let reader = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stdout.read_to_string(&mut text);
            text
        });
        let deadline = Instant::now() + limit;
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let _ = reader.join();
                    return format!("not traced: {tool} did not answer within {} s", limit.as_secs());
                }
            }
        }
        let text = reader.join().unwrap_or_default();
        return keep_frames(tool, &text);
    }
    "no stack: neither gdb nor eu-stack is installed on this node".to_string()
}

/// The lines of a tracer's output that are the stack (gdb's thread
/// headers and frames; all of eu-stack's).
fn keep_frames(tool: &str, text: &str) -> String {
    let kept: Vec<&str> =
        if tool == "gdb" { text.lines().filter(|l| l.starts_with('#') || l.starts_with("Thread ")).collect() } else { text.lines().collect() };
    if kept.is_empty() {
        return format!("no stack: {tool} printed none (is ptrace allowed here?)");
    }
    kept.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gdb_output_keeps_its_threads_and_frames() {
        let text = "Attaching to process 7\n[Thread debugging using libthread_db enabled]\n\nThread 1 (Thread 0x7f (LWP 7) \"a\"):\n#0  0x1 in poll ()\n#1  0x2 in MPI_Recv ()\n[Inferior 1 (process 7) detached]\n";
        assert_eq!(keep_frames("gdb", text), "Thread 1 (Thread 0x7f (LWP 7) \"a\"):\n#0  0x1 in poll ()\n#1  0x2 in MPI_Recv ()");
        assert!(keep_frames("gdb", "nothing\n").starts_with("no stack"));
    }

    #[test]
    fn a_live_process_is_traced_within_the_bound() {
        let mut child = Command::new("sleep").arg("30").spawn().expect("sleep");
        let started = Instant::now();
        let text = trace(child.id() as i32, TRACE_LIMIT);
        let _ = child.kill();
        let _ = child.wait();
        assert!(started.elapsed() < TRACE_LIMIT + Duration::from_secs(2), "{text}");
        assert!(text.contains("#0") || text.starts_with("no stack") || text.starts_with("not traced"), "{text}");
    }
}
