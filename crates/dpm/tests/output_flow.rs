//! The output path under pressure: flow control from the final consumer back
//! to the ranks (a slow stdout, a stalled boot client), the launcher never
//! blocked by it, and each rank's lines whole without `-l`.

mod common;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{dpm_bin, hydra, program, unique, Dpm};

/// Run `script` under `sh -c` with `$DPM` set to the binary under test
/// (plain runs: no boot); its stdout and stderr.
fn shell(script: &str, env: &[(&str, &str)]) -> (String, String) {
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c").arg(script).env("DPM", dpm_bin()).env("DPM_NO_BOOT", "1").env_remove("DPM_BOOT").env_remove("MPIEXEC_TIMEOUT");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run sh");
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Issue 10, defect 3: the launcher's stdout is a consumer that sleeps 4 s
/// before it reads. The launcher must keep heartbeating its daemons (main's
/// lost them after 1.5 s and exited 1 with most of the output lost) and
/// deliver every byte.
#[test]
fn a_slow_stdout_does_not_end_a_multi_node_run() {
    let script = r#"{ "$DPM" run --virtual-nodes 2 -n 2 sh -c 'yes dpm-output-line | head -n 300000'; echo "dpm exit $?" >&2; } | (sleep 4; grep -c '^dpm-output-line$')"#;
    let (stdout, stderr) = shell(script, &[]);
    assert!(stderr.contains("dpm exit 0"), "dpm failed behind a slow stdout: {stderr}");
    assert_eq!(stdout.trim(), "600000", "lines delivered; stderr: {stderr}");
}

/// `dpm run … | head -2` with ranks that write for ever: the reader goes
/// away, and the run ends as Hydra's does — the ranks get SIGPIPE and the
/// status is 141 (dpm used to drop the rest and run for ever). Plain, on two
/// virtual nodes, and through a boot; Hydra's status checked the same way.
#[test]
fn a_closed_stdout_ends_the_run_as_hydra_does() {
    // `timeout 120` is the hang guard: 124 if the run never ends.
    let status = |launcher: &str, args: &str, env: &[(&str, &str)]| {
        let script = format!(r#"timeout 120 {launcher} {args} yes dpm-line | head -2; echo "status ${{PIPESTATUS[0]}}""#);
        let mut cmd = Command::new("/bin/bash");
        cmd.arg("-c").arg(&script).env("DPM_NO_BOOT", "1").env_remove("DPM_BOOT").env_remove("MPIEXEC_TIMEOUT");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("run bash");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(stdout.starts_with("dpm-line\ndpm-line\n"), "{launcher} {args}: {stdout}{}", String::from_utf8_lossy(&out.stderr));
        stdout.lines().last().unwrap_or_default().to_string()
    };
    let dpm = dpm_bin().to_string();
    let hydra = hydra().display().to_string();
    assert_eq!(status(&hydra, "-n 2", &[]), "status 141", "Hydra's own status");
    assert_eq!(status(&dpm, "run -n 2", &[]), "status 141");
    assert_eq!(status(&dpm, "run --virtual-nodes 2 -n 2", &[]), "status 141");
    let boot = Boot::start();
    let env = boot.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    assert_eq!(status(&dpm, "run -n 2", &env), "status 141", "through a boot; its log: {}", boot.log());
}

/// A process's anonymous resident memory (its heap and stacks: where
/// buffered output would be), in KiB. Not `VmRSS`: that also counts the
/// pages of mapped files, e.g. the binary's debug information, read whole
/// when a backtrace is printed.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("RssAnon:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// A boot in a private runtime directory, downed on drop.
struct Boot {
    dir: PathBuf,
    pid: u32,
}

impl Boot {
    fn start() -> Boot {
        let dir = std::env::temp_dir().join(unique("dpm-output-boot"));
        let out = Command::new(dpm_bin()).arg("boot").env("DPM_RUNTIME_DIR", &dir).env_remove("DPM_BOOT").output().expect("run dpm boot");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "dpm boot failed: {stdout}{}", String::from_utf8_lossy(&out.stderr));
        let pid = stdout.split("(pid ").nth(1).and_then(|s| s.split(')').next()).and_then(|p| p.parse().ok());
        Boot { pid: pid.unwrap_or_else(|| panic!("dpm boot did not say its pid: {stdout}")), dir }
    }

    /// What the server wrote to its log.
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("default.log")).unwrap_or_default()
    }

    fn env(&self) -> [(&'static str, String); 2] {
        [("DPM_RUNTIME_DIR", self.dir.display().to_string()), ("DPM_NO_BOOT", String::new())]
    }
}

impl Drop for Boot {
    fn drop(&mut self) {
        let _ = Command::new(dpm_bin()).arg("down").env("DPM_RUNTIME_DIR", &self.dir).output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Issue 10, defect 2: a booted run's client stops reading (a consumer that
/// reads nothing until this test lets it). The server must not buffer the
/// run's output (main's grew by the whole 200 MB): its RSS stays small,
/// another run goes through meanwhile — before the stalled consumer reads a
/// byte, so it cannot be waiting behind it —, and every byte arrives in the
/// end.
#[test]
fn a_stalled_boot_client_blocks_only_its_ranks() {
    let boot = Boot::start();
    let env = boot.env();
    let before = rss_kib(boot.pid).expect("the server's RSS");
    let go = std::env::temp_dir().join(unique("dpm-output-go"));
    // The consumer waits for `go` (at most 120 s, a hang guard), then reads.
    let consumer = r#"(i=0; while [ ! -e "$GO" ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done; wc -c)"#;
    let mut stalled = Command::new("/bin/sh")
        .arg("-c")
        .arg(format!(r#"{{ "$DPM" run -n 1 sh -c 'yes | head -c 200000000'; echo "dpm exit $?" >&2; }} | {consumer}"#))
        .env("DPM", dpm_bin())
        .env("GO", &go)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run sh");
    let mut peak = before;
    let mut sample = || peak = peak.max(rss_kib(boot.pid).unwrap_or(0));
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(100));
        sample();
    }
    let out = Dpm::run(["-n", "1", "echo", "other run"]).env("DPM_NO_BOOT", "").env("DPM_RUNTIME_DIR", &env[0].1).output();
    out.assert_success();
    assert_eq!(out.stdout_str(), "other run\n", "{}", out.describe());
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(100));
        sample();
    }
    assert!(!go.exists(), "the consumer was let go before the other run ended");
    std::fs::write(&go, b"").expect("create the go file");
    let mut stdout = String::new();
    let mut stderr = String::new();
    stalled.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    stalled.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    let _ = stalled.wait();
    let _ = std::fs::remove_file(&go);
    assert!(stderr.contains("dpm exit 0"), "the stalled run failed: {stderr}");
    assert_eq!(stdout.trim(), "200000000", "bytes delivered; stderr: {stderr}");
    let log = boot.log();
    assert!(!log.contains("panicked"), "the boot server panicked: {log}");
    assert!(peak < before + 32 * 1024, "the boot server's heap grew from {before} KiB to {peak} KiB while its client stalled; its log: {log}");
}

/// Without `-l`, ranks whose lines are each written in five pieces (five
/// `write(2)`s) never have their lines interleaved (main's broke a few
/// lines in most runs).
#[test]
fn lines_from_several_ranks_stay_whole() {
    let lines = program("lines");
    for round in 0..6 {
        let out = Dpm::run(["-n", "4", &lines, "200", "1000"]).output();
        out.assert_success();
        let got = out.lines();
        let broken: Vec<&String> = got.iter().filter(|l| !is_whole(l)).collect();
        assert!(broken.is_empty(), "round {round}: {} broken lines, e.g. {:?}", broken.len(), &broken[..broken.len().min(3)]);
        assert_eq!(got.len(), 800, "round {round}: {}", out.describe());
    }
}

/// Issue 26: behind a reader that stalls (the output window fills while a
/// read has ended mid-line, so the ranks block in `write(2)` with the rest
/// of the line unread), main sent the held piece up after the quiet time and
/// another rank's line followed it. Every line whole, every line there.
#[test]
fn lines_stay_whole_behind_a_reader_that_stalls() {
    let lines = program("lines");
    let per_rank = 30_000;
    let mut child = Command::new(dpm_bin())
        .args(["run", "-n", "4", &lines, &per_rank.to_string()])
        .env("DPM_NO_BOOT", "1")
        .env_remove("DPM_BOOT")
        .stdout(Stdio::piped())
        .spawn()
        .expect("run dpm");
    let mut pipe = child.stdout.take().unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut since_stall = 0;
    loop {
        let n = pipe.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
        since_stall += n;
        // A stall longer than the quiet time every window or so.
        if since_stall >= 192 * 1024 {
            since_stall = 0;
            std::thread::sleep(Duration::from_millis(150));
        }
    }
    assert!(child.wait().unwrap().success());
    let text = String::from_utf8_lossy(&got);
    let broken: Vec<&str> = text.lines().filter(|l| !is_whole(l)).collect();
    assert!(broken.is_empty(), "{} broken lines, e.g. {:?}", broken.len(), &broken[..broken.len().min(3)]);
    assert_eq!(text.lines().count(), 4 * per_rank);
}

/// Issue 36: 4 ranks × 1,000,000 lines of five `write(2)`s each, without
/// `-l`, on one node and on 2 virtual nodes: main tore 2–5 lines in the 4
/// million (a held piece went up on its quiet timer while its rest waited
/// unread in the pipe, the node's reading task having run late). None now,
/// and every line there.
#[test]
fn four_million_lines_stay_whole() {
    let lines = program("lines");
    let per_rank = 1_000_000;
    for nodes in ["1", "2"] {
        let out = Dpm::run(["--virtual-nodes", nodes, "-n", "4", &lines, &per_rank.to_string()]).watchdog(Duration::from_secs(300)).output();
        out.assert_success();
        let text = String::from_utf8_lossy(&out.stdout);
        let broken: Vec<&str> = text.lines().filter(|l| !is_whole(l)).collect();
        assert!(broken.is_empty(), "{nodes} node(s): {} broken lines, e.g. {:?}", broken.len(), &broken[..broken.len().min(3)]);
        assert_eq!(text.lines().count(), 4 * per_rank, "{nodes} node(s)");
    }
}

/// `rank R line I end`.
fn is_whole(line: &str) -> bool {
    let words: Vec<&str> = line.split(' ').collect();
    matches!(&words[..], ["rank", r, "line", i, "end"] if r.parse::<u32>().is_ok() && i.parse::<u32>().is_ok())
}

/// Output without a newline is not held until the program ends: a `\r`
/// passes at once, a partial line after a short quiet time. The program
/// goes on only once this test has read what it wrote so far (it waits for
/// a file the test creates then), so held output would never arrive and
/// the read's hang guard would fail the test.
#[test]
fn progress_output_appears_while_the_program_runs() {
    let dir = common::TempDir::new("dpm-progress");
    let wait_for = |name: &str| format!("i=0; while [ ! -e {}/{name} ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done", dir.path_str());
    let script = format!(r#"printf '10%%\r'; {}; printf 'partial'; {}; echo ' done'"#, wait_for("one"), wait_for("two"));
    let mut child =
        Command::new(dpm_bin()).args(["run", "-n", "1", "sh", "-c", &script]).env("DPM_NO_BOOT", "1").stdout(Stdio::piped()).spawn().expect("run dpm");
    let mut pipe = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 256];
        while let Ok(n @ 1..) = pipe.read(&mut buf) {
            if tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut got = Vec::new();
    let mut read_until = |want: &[u8]| {
        while !got.starts_with(want) {
            match rx.recv_timeout(Duration::from_secs(60)) {
                Ok(chunk) => got.extend_from_slice(&chunk),
                Err(e) => panic!("waiting for {:?} ({e}); got {:?}", String::from_utf8_lossy(want), String::from_utf8_lossy(&got)),
            }
        }
        assert_eq!(got, want, "more than {:?} arrived before the program wrote it", String::from_utf8_lossy(want));
    };
    read_until(b"10%\r");
    std::fs::write(dir.path.join("one"), b"").unwrap();
    read_until(b"10%\rpartial");
    std::fs::write(dir.path.join("two"), b"").unwrap();
    read_until(b"10%\rpartial done\n");
    assert!(child.wait().unwrap().success());
    reader.join().unwrap();
}

/// Binary output with no newline at all, from a fast writer, through the
/// line holding and the window: every byte, in order.
#[test]
fn binary_output_through_the_window_is_byte_exact() {
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let file = common::TempFile::new("dpm-output-binary", &data, 0o644);
    let out = Dpm::run(["--virtual-nodes", "2", "-n", "1", "/bin/cat", &file.path_str()]).output();
    out.assert_success();
    assert!(out.stdout == data, "{} bytes back of {}", out.stdout.len(), data.len());
}
