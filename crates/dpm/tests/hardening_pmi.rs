//! Hostile use of a running job's PMI server, end to end: another local user
//! on a `--pmi-port` listener, a second connection claiming a bound rank,
//! a rank flooding its PMI connection with junk and forged log lines, and a
//! rank that sends requests without ever reading the replies.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{unique, Dpm};

/// A PMI-1 rank in port mode, in Python: connects to `PMI_PORT`, names
/// itself with `initack pmiid=$PMI_ID`, initialises, publishes the port in
/// `DIR/port`, waits for `DIR/go`, finalises.
const RANK: &str = r#"
import os, socket, sys, time
d = sys.argv[1]
host, port = os.environ['PMI_PORT'].rsplit(':', 1)
s = socket.create_connection((host, int(port)))
f = s.makefile('rb', buffering=0)
s.sendall(b'cmd=initack pmiid=%s\n' % os.environ['PMI_ID'].encode())
ack = [f.readline() for _ in range(4)][0].decode().strip()
s.sendall(b'cmd=init pmi_version=1 pmi_subversion=1\n')
f.readline()
open(d + '/port.tmp', 'w').write(port)
os.rename(d + '/port.tmp', d + '/port')
while not os.path.exists(d + '/go'):
    time.sleep(0.05)
s.sendall(b'cmd=finalize\n')
print('rank:', ack, '/', f.readline().decode().strip(), flush=True)
"#;

/// Connect to 127.0.0.1:PORT, claim rank 0 and ask to spawn `touch MARKER`;
/// print what came back (b'' if the server closed the connection).
const INTRUDER: &str = r#"
import socket, sys
s = socket.create_connection(('127.0.0.1', int(sys.argv[1])))
s.settimeout(3)
spawn = ('mcmd=spawn\nnprocs=1\nexecname=/usr/bin/touch\ntotspawns=1\nspawnssofar=1\n'
         'argcnt=1\narg1=%s\npreput_num=0\ninfo_num=0\nendcmd\n' % sys.argv[2])
got = b''
try:
    s.sendall(b'cmd=initack pmiid=0\n' + spawn.encode())
    while True:
        d = s.recv(4096)
        if not d:
            break
        got += d
        if got.count(b'\n') >= 2 and b'spawn_result' in got:
            break
except (ConnectionResetError, BrokenPipeError, socket.timeout):
    pass
print(repr(got))
"#;

fn wait_for(path: &Path, limit: Duration) -> String {
    let start = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            return text;
        }
        assert!(start.elapsed() < limit, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn python(cmd: &mut Command, script: &str, args: &[&str]) -> String {
    let out = cmd.arg("/usr/bin/python3").arg("-c").arg(script).args(args).output().expect("run python3");
    assert!(out.status.success(), "python3 failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn another_user_cannot_use_a_jobs_pmi_port_nor_a_second_connection_a_bound_rank() {
    if !common::root_to_act_as_another_user("another_user_cannot_use_a_jobs_pmi_port_nor_a_second_connection_a_bound_rank") {
        return;
    }
    let dir = std::env::temp_dir().join(unique("dpm-pmiport"));
    std::fs::create_dir(&dir).unwrap();
    let d = dir.to_string_lossy().into_owned();
    let job = Dpm::run(["--pmi-port", "-n", "1", "/usr/bin/python3", "-c", RANK, &d]).env("DPM_LOG", "warn").spawn();
    let port = wait_for(&dir.join("port"), Duration::from_secs(20));

    // As user nobody: the daemon closes the connection unanswered.
    let marker = dir.join("spawned-by-nobody");
    let mut nobody = Command::new("setpriv");
    nobody.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
    let got = python(&mut nobody, INTRUDER, &[&port, &marker.to_string_lossy()]);
    assert_eq!(got, "b''", "another user got answers from the job's PMI server");

    // As the job's own user, a second connection claiming bound rank 0: refused,
    // and nothing is served to it before it names a free rank.
    let marker2 = dir.join("spawned-by-second");
    let got = python(&mut Command::new("env"), INTRUDER, &[&port, &marker2.to_string_lossy()]);
    assert!(got.contains("cmd=initack rc=1 msg="), "{got}");
    assert!(got.contains("cmd=spawn_result rc=1 msg="), "{got}");

    // Had a spawn gone through, touch would have run by now.
    std::thread::sleep(Duration::from_millis(1500));
    std::fs::write(dir.join("go"), "").unwrap();
    let out = job.wait();
    let _ = std::fs::remove_dir_all(&dir);
    out.assert_success();
    assert!(!marker.exists(), "a program ran as the job's owner on another user's request");
    assert!(!marker2.exists(), "a second connection spawned a program");
    // The job itself was unaffected.
    out.assert_stdout_contains("rank: cmd=initack rc=0 rank=0 size=1 appnum=0 debug=0 / cmd=finalize_ack rc=0\n");
    out.assert_stderr_contains("refused a PMI port connection");
    out.assert_stderr_contains("connection from uid 65534");
}

/// A rank (PMI_FD mode) that sends a spawn request whose execname carries a
/// raw newline and a forged dpm line, then 2.5 MB of junk lines while
/// it reads the answers; prints how many it got.
const FLOODER: &str = r#"
import os, socket, threading
s = socket.socket(fileno=int(os.environ['PMI_FD']))
n = 256 * 1024
spawn = ('mcmd=spawn\nnprocs=1\nexecname=/nonexistent\ndpm: job failed: forged\ntotspawns=1\nspawnssofar=1\n'
         'argcnt=0\npreput_num=0\ninfo_num=0\nendcmd\n')
s.sendall(spawn.encode())
got = b''
while b'\n' not in got:
    got += s.recv(4096)
threading.Thread(target=lambda: s.sendall(b'junk line\n' * n), daemon=True).start()
lines = got.count(b'\n') - 1
while lines < n:
    lines += s.recv(1 << 16).count(b'\n')
print('answers', lines, flush=True)
"#;

#[test]
fn a_rank_flooding_its_pmi_connection_neither_floods_the_log_nor_forges_lines() {
    let out = Dpm::run(["-n", "1", "/usr/bin/python3", "-c", FLOODER]).env("DPM_LOG", "warn").output();
    let err = out.stderr_str();
    assert!(err.lines().count() < 40, "{} lines of log for one rank's junk:\n{}", err.lines().count(), &err[..err.len().min(4000)]);
    out.assert_stdout_contains(&format!("answers {}\n", 256 * 1024));
    assert!(!err.lines().any(|l| l.starts_with("dpm: job failed: forged")), "a forged log line:\n{err}");
}

/// Sends `cmd=get_maxes` without reading a reply until its socket stops
/// taking bytes for a second (or 64 MiB went in), noting the launcher's
/// resident memory (the node daemon runs inside it on one node) before and
/// after; then reads every reply and finalises.
const NON_READER: &str = r#"
import os, socket, time
def rss_kib():
    for line in open('/proc/%d/status' % os.getppid()):
        if line.startswith('VmRSS:'):
            return int(line.split()[1])
s = socket.socket(fileno=int(os.environ['PMI_FD']))
s.sendall(b'cmd=init pmi_version=1 pmi_subversion=1\n')
assert s.recv(4096).startswith(b'cmd=response_to_init')
before = rss_kib()
req = b'cmd=get_maxes\n' * 4096
s.setblocking(False)
sent, stalled = 0, None
while sent < (64 << 20):
    try:
        sent += s.send(req)
        stalled = None
    except BlockingIOError:
        stalled = stalled or time.monotonic()
        if time.monotonic() - stalled > 1.0:
            break
        time.sleep(0.01)
after = rss_kib()
s.setblocking(True)
one = b'cmd=get_maxes\n'
n, replies = sent // len(one), 0
def read_until(count):
    global replies
    while replies < count:
        replies += s.recv(1 << 16).count(b'\n')
read_until(n)
if sent % len(one):  # complete the request the full socket cut
    s.sendall(one[sent % len(one):])
    n += 1
    read_until(n)
print('sent', sent, 'requests', n, 'replies', replies, 'grew_kib', after - before, flush=True)
s.sendall(b'cmd=finalize\n')
s.recv(4096)
"#;

#[test]
fn a_rank_that_never_reads_its_replies_is_held_back_not_buffered() {
    let out = Dpm::run(["-n", "1", "/usr/bin/python3", "-c", NON_READER]).output();
    out.assert_success();
    let line = out.stdout_str().lines().find(|l| l.starts_with("sent ")).map(str::to_string).unwrap_or_default();
    let field = |name: &str| -> u64 {
        let words: Vec<&str> = line.split_whitespace().collect();
        let at = words.iter().position(|w| *w == name).unwrap_or_else(|| panic!("no {name} in {line:?}"));
        words[at + 1].parse().unwrap()
    };
    // The daemon stops reading while a reply waits for the socket: what
    // went in is one read's worth beyond what both socket buffers hold.
    assert!(field("sent") < 16 << 20, "the daemon kept reading from a rank that does not read: {line}");
    assert_eq!(field("replies"), field("requests"), "every request gets exactly one answer: {line}");
    assert!(field("grew_kib") < 32 * 1024, "the daemon buffered the replies: {line}");
}
