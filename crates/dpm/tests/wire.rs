//! Raw-wire robustness of the PMI server: a client written in Python (the
//! system's /usr/bin/python3, not the venv) talks to dpm over PMI_FD
//! directly and sends malformed requests. Every bad request must get an
//! error reply (rc non-zero), and the valid requests around them must still
//! get correct replies, in order: the server survived and stayed in sync.

mod common;

use std::path::Path;

use common::{Dpm, Output};

const PYTHON: &str = "/usr/bin/python3";

/// Client helpers shared by the scripts: connection (PMI_FD, or PMI_PORT
/// with --pmi-port), framing-aware reply reader (PMI-1
/// `cmd=...\n` or PMI-2 six-byte length + body), field access, checks.
/// A failed check prints "wire FAIL ..." and exits 1.
const PRELUDE: &str = r#"
import os, re, socket, sys, time

def say(msg):
    # One write per line: output of two ranks must not interleave mid-line.
    os.write(1, (msg + "\n").encode())

def fail(msg):
    say("wire FAIL " + msg)
    sys.exit(1)

def connect():
    if "PMI_FD" in os.environ:
        return socket.socket(fileno=int(os.environ["PMI_FD"]))
    host, port = os.environ["PMI_PORT"].rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=20)

sock = connect()
sock.settimeout(20)
buf = b""

def fill():
    global buf
    try:
        data = sock.recv(65536)
    except socket.timeout:
        fail("no reply within 20 s (did the server hang?)")
    if not data:
        fail("the server closed the connection")
    buf += data

def take(n):
    global buf
    while len(buf) < n:
        fill()
    out, buf = buf[:n], buf[n:]
    return out

def reply():
    global buf
    while len(buf) < 4:
        fill()
    if buf.startswith(b"cmd="):
        while b"\n" not in buf:
            fill()
        line, _, buf = buf.partition(b"\n")
        return line.decode("utf-8", "replace")
    header = take(6)
    try:
        length = int(header)
    except ValueError:
        fail("reply with a bad length header %r" % header)
    return take(length).decode("utf-8", "replace")

def field(r, key):
    m = re.search(r"(?:^|[ ;])" + re.escape(key) + r"=([^ ;]*)", r)
    return m.group(1) if m else None

def rc_of(r):
    rc = field(r, "rc")
    if rc is None or not re.fullmatch(r"-?\d+", rc):
        fail("reply without a numeric rc: %r" % r)
    return int(rc)

def check_error(r, what):
    if rc_of(r) == 0:
        fail("%s was accepted (rc=0): %r" % (what, r))
    say("rejected %s: %s" % (what, r[:200]))

def expect_error(msg, what):
    sock.sendall(msg)
    check_error(reply(), what)

def check_ok(r, what, cmd):
    if field(r, "cmd") != cmd or rc_of(r) != 0:
        fail("%s: expected cmd=%s rc=0, got %r" % (what, cmd, r[:300]))
    return r

def expect_ok(msg, cmd):
    sock.sendall(msg)
    return check_ok(reply(), repr(msg[:100]), cmd)

def frame(body):
    return b"%6d" % len(body) + body

def no_more_replies():
    if buf:
        fail("unexpected extra reply data %r" % buf[:200])
    sock.settimeout(0.3)
    try:
        extra = sock.recv(65536)
    except socket.timeout:
        extra = b""
    if extra:
        fail("unexpected extra reply data %r" % extra[:200])
"#;

/// Run `body` (after the prelude) as every rank of an `n`-rank job.
fn run_client(n: u32, extra_args: &[&str], body: &str) -> Output {
    assert!(Path::new(PYTHON).is_file(), "{PYTHON} is missing: install python3 (scripts/setup.sh does)");
    let script = format!("{PRELUDE}\n{body}");
    let mut args: Vec<String> = extra_args.iter().map(|s| s.to_string()).collect();
    args.extend(["-n".into(), n.to_string(), PYTHON.into(), "-c".into(), script]);
    Dpm::run(args).output()
}

fn assert_clients_ok(out: &Output, n: u32) {
    out.assert_stdout_lacks("wire FAIL");
    out.assert_success();
    for r in 0..n {
        out.assert_stdout_contains(&format!("wire ok rank {r}\n"));
    }
}

const PMI1_SESSION: &str = r#"
rank = int(os.environ["PMI_RANK"])
expect_error(b"garbage\n", "garbage")
expect_error(b"cmd=nosuch\n", "an unknown command")
expect_error(b"cmd=put kvsname=x\n", "a put without key and value")
expect_error(b"    14cmd=bogus-cmd;", "an unknown PMI-2 command")
r = expect_ok(b"cmd=init pmi_version=1 pmi_subversion=1\n", "response_to_init")
if field(r, "pmi_version") != "1":
    fail("init reply %r" % r)
r = expect_ok(b"cmd=get_maxes\n", "maxes")
for key in ("kvsname_max", "keylen_max", "vallen_max"):
    if not (field(r, key) or "").isdigit() or int(field(r, key)) <= 0:
        fail("maxes reply lacks %s: %r" % (key, r))
kvs = field(expect_ok(b"cmd=get_my_kvsname\n", "my_kvsname"), "kvsname").encode()
# A request split over two writes.
sock.sendall(b"cmd=put kvsname=" + kvs + b" key=wire-key-%d " % rank)
time.sleep(0.1)
expect_ok(b"value=wire-value-%d\n" % rank, "put_result")
# Two requests in one write (neither blocks).
sock.sendall(b"cmd=get_appnum\ncmd=get_universe_size\n")
if field(check_ok(reply(), "get_appnum", "appnum"), "appnum") != "0":
    fail("appnum is not 0")
check_ok(reply(), "get_universe_size", "universe_size")
expect_ok(b"cmd=barrier_in\n", "barrier_out")
size = int(os.environ["PMI_SIZE"])
for src in range(size):
    r = expect_ok(b"cmd=get kvsname=" + kvs + b" key=wire-key-%d\n" % src, "get_result")
    if field(r, "value") != "wire-value-%d" % src:
        fail("get of wire-key-%d returned %r" % (src, r))
expect_error(b"cmd=get kvsname=" + kvs + b" key=no-such-key\n", "a get of a missing key")
expect_error(b"cmd=bogus\n", "an unknown command after init")
expect_error(b"cmd=put kvsname=" + kvs + b"\n", "a put without key after init")
expect_ok(b"cmd=get_maxes\n", "maxes")
expect_ok(b"cmd=finalize\n", "finalize_ack")
no_more_replies()
say("wire ok rank %d" % rank)
"#;

#[test]
fn pmi1_malformed_requests_get_errors_and_the_server_survives() {
    assert_clients_ok(&run_client(1, &[], PMI1_SESSION), 1);
}

#[test]
fn pmi1_malformed_requests_with_two_ranks() {
    assert_clients_ok(&run_client(2, &[], PMI1_SESSION), 2);
}

const PMI2_SESSION: &str = r#"
rank = int(os.environ["PMI_RANK"])
size = int(os.environ["PMI_SIZE"])
expect_error(frame(b"junk;"), "a PMI-2 frame without cmd=")
expect_error(frame(b"cmd=nosuch;"), "an unknown PMI-2 command")
r = expect_ok(b"cmd=init pmi_version=2 pmi_subversion=0\n", "response_to_init")
if field(r, "pmi_version") != "2":
    fail("init reply %r" % r)
r = expect_ok(frame(b"cmd=fullinit;pmirank=%d;" % rank), "fullinit-response")
if field(r, "rank") != str(rank) or field(r, "size") != str(size):
    fail("fullinit reply %r" % r)
expect_error(frame(b"cmd=kvs-put;"), "a kvs-put without key and value")
expect_error(frame(b"cmd=kvs-get;"), "a kvs-get without key")
expect_error(frame(b"cmd=nosuch;a=b;"), "an unknown command after fullinit")
jobid = field(expect_ok(frame(b"cmd=job-getid;"), "job-getid-response"), "jobid").encode()
expect_ok(frame(b"cmd=kvs-put;key=k%d;value=v%d;" % (rank, rank)), "kvs-put-response")
# A frame split inside its length header and inside its body.
whole = frame(b"cmd=kvs-fence;")
sock.sendall(whole[:3]); time.sleep(0.05)
sock.sendall(whole[3:10]); time.sleep(0.05)
expect_ok(whole[10:], "kvs-fence-response")
for src in range(size):
    r = expect_ok(frame(b"cmd=kvs-get;jobid=%s;srcid=%d;key=k%d;" % (jobid, src, src)), "kvs-get-response")
    if field(r, "found") != "TRUE" or field(r, "value") != "v%d" % src:
        fail("kvs-get of k%d: %r" % (src, r))
sock.sendall(frame(b"cmd=kvs-get;jobid=%s;key=no-such-key;" % jobid))
r = reply()
if field(r, "cmd") != "kvs-get-response" or (rc_of(r) == 0 and field(r, "found") != "FALSE"):
    fail("a kvs-get of a missing key: %r" % r)
expect_ok(frame(b"cmd=finalize;"), "finalize-response")
no_more_replies()
say("wire ok rank %d" % rank)
"#;

#[test]
fn pmi2_malformed_frames_get_errors_and_the_server_survives() {
    assert_clients_ok(&run_client(2, &[], PMI2_SESSION), 2);
}

#[test]
fn pmi2_malformed_frames_over_pmi_port() {
    assert_clients_ok(&run_client(2, &["--pmi-port"], PMI2_SESSION), 2);
}

/// Issue 26: a bad PMI-2 length header (here after `fullinit`, the
/// connection speaking PMI-2) stopped the connection from answering: the
/// client waited for ever. Now it gets one PMI-2 error reply naming the
/// header, and then end of file.
const PMI2_BAD_HEADER: &str = r#"
rank = int(os.environ["PMI_RANK"])
expect_ok(frame(b"cmd=fullinit;pmirank=%d;" % rank), "fullinit-response")
sock.sendall([b"00x012cmd=job-getid;", b"  -5  cmd=job-getid;"][int(os.environ["BAD"])])
r = reply()
check_error(r, "a bad length header")
if "length header" not in r:
    fail("the error does not name the header: %r" % r)
sock.settimeout(20)
try:
    rest = sock.recv(65536)
except socket.timeout:
    fail("the connection was not closed after the bad header")
if rest:
    fail("more after the error: %r" % rest[:200])
say("wire ok rank %d" % rank)
"#;

#[test]
fn pmi2_bad_length_header_gets_an_error_then_the_connection_closes() {
    for args in [&["-genv", "BAD", "0"][..], &["-genv", "BAD", "1", "--pmi-port"]] {
        let out = run_client(1, args, PMI2_BAD_HEADER);
        out.assert_stdout_lacks("wire FAIL");
        out.assert_stdout_contains("wire ok rank 0\n");
        // A rank whose PMI connection ended before finalize: as under Hydra.
        assert_eq!(out.code(), 1, "{}", out.describe());
        out.assert_stderr_contains("without calling MPI_Finalize");
    }
}

#[test]
fn overlong_request_gets_one_error_and_the_server_stays_in_sync() {
    // More than the server's 999,999-byte message limit, as one PMI-1 line.
    // Expected: exactly one error reply for it, then the next request's reply.
    let body = r#"
expect_ok(b"cmd=init pmi_version=1 pmi_subversion=1\n", "response_to_init")
sock.sendall(b"cmd=put kvsname=x key=k value=" + b"z" * 1500000 + b"\n")
check_error(reply(), "a 1.5 MB request")
expect_ok(b"cmd=get_maxes\n", "maxes")
expect_ok(b"cmd=finalize\n", "finalize_ack")
no_more_replies()
say("wire ok rank 0")
"#;
    assert_clients_ok(&run_client(1, &[], body), 1);
}

/// Rank 0 spawns, over the raw PMI-1 wire, one child with 55,000 arguments
/// (a checksum of the others as the last) on the second node. MPICH's own
/// client cannot send it (its PMI-1 command holds fewer than 1,000 tokens:
/// `PMIU_cmd_add_substr` asserts), so the wire is spoken here.
const SPAWN_55000_ARGS: &str = r#"
import zlib
CHILD = "import sys, zlib; a = sys.argv[1:]; ok = len(a) == 55000 and a[:2] == ['x0', 'x1'] and str(zlib.crc32(' '.join(a[:-1]).encode())) == a[-1]; print('child got %d arguments, checksum %s' % (len(a), 'ok' if ok else 'WRONG'), flush=True)"
expect_ok(b"cmd=init pmi_version=1 pmi_subversion=1\n", "response_to_init")
args = ["x%d" % i for i in range(54999)]
args.append(str(zlib.crc32(" ".join(args).encode())))
argv = ["-c", CHILD] + args
block = ["mcmd=spawn", "nprocs=1", "execname=" + sys.executable, "totspawns=1", "spawnssofar=1", "argcnt=%d" % len(argv)]
block += ["arg%d=%s" % (i + 1, a) for i, a in enumerate(argv)]
block += ["preput_num=0", "info_num=1", "info_key_0=host", "info_val_0=" + sys.argv[1], "endcmd"]
sock.sendall(("\n".join(block) + "\n").encode())
check_ok(reply(), "the spawn of 55,000 arguments", "spawn_result")
expect_ok(b"cmd=finalize\n", "finalize_ack")
say("wire ok rank 0")
"#;

/// A spawn of 55,000 arguments (issue 10: parsing it once held a daemon's
/// only thread past the heartbeat timeout; the limit is 65,536) reaches a
/// child on another node whole, and no node is lost.
#[test]
fn a_spawn_of_55000_arguments_reaches_a_child_on_another_node_whole() {
    let host = format!("{}-v1", common::hostname());
    let body = SPAWN_55000_ARGS.replace("sys.argv[1]", &format!("{host:?}"));
    let out = run_client(1, &["--virtual-nodes", "2", "--report-placement"], &body);
    assert_clients_ok(&out, 1);
    out.assert_stdout_contains("child got 55000 arguments, checksum ok\n");
    assert_eq!(common::spawned_hosts(&out.stderr_str()), std::slice::from_ref(&host), "the child was not on {host}\n{}", out.describe());
    assert!(!out.stderr_str().contains("lost"), "{}", out.describe());
}
