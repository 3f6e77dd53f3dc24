//! The PMIx guard checks itself (docs/pmix.md, "Security: who may
//! connect"): a libpmix whose connections dpm's check cannot see is
//! refused with a clear error before any rank runs, never served unguarded.
//! The libraries are stand-ins built here with `cc` (the same eleven
//! `PMIx_*` functions dpm resolves), named to dpm the way a user names one,
//! `DPM_PMIX_LIBRARY`: one that accepts with `accept4`, one that calls
//! `accept` nowhere, and one that imports `accept` but whose listener
//! accepts through a raw system call (only the canary connection can tell).
//! The real library passing the same checks is every `--pmi pmix` test
//! (open_mpi.rs, pmix_security.rs).

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{unique, Dpm, Output};

const STUBS: &str = r#"
#include <stddef.h>
int PMIx_server_finalize(void) { return 0; }
int PMIx_server_register_nspace(void) { return -1; }
int PMIx_server_deregister_nspace(void) { return -1; }
int PMIx_server_register_client(void) { return -1; }
int PMIx_server_deregister_client(void) { return -1; }
int PMIx_server_setup_fork(void) { return -1; }
int PMIx_server_dmodex_request(void) { return -1; }
int PMIx_generate_regex(void) { return -1; }
int PMIx_generate_ppn(void) { return -1; }
const char *PMIx_Error_string(int s) { (void)s; return "PMIX_ERROR"; }
"#;

/// A stand-in `libpmix.so.2` whose `PMIx_server_init` is `init`.
fn stand_in(name: &str, init: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(unique("dpm-guard-libpmix"));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, so) = (dir.join(format!("{name}.c")), dir.join("libpmix.so.2"));
    std::fs::write(&src, format!("{STUBS}\n{init}\n")).unwrap();
    let out = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-pthread", "-o"])
        .arg(&so)
        .arg(&src)
        .output()
        .expect("cc (./scripts/setup.sh --tests installs it)");
    assert!(out.status.success(), "cc {name}: {}", String::from_utf8_lossy(&out.stderr));
    so
}

fn run_with(library: &Path) -> Output {
    Dpm::run(["--pmi", "pmix", "-genv", "DPM_PMIX_LIBRARY", &library.display().to_string(), "-n", "2", "sh", "-c", "echo RANK RAN"])
        .watchdog(Duration::from_secs(60))
        .output()
}

/// Refused: a non-zero exit, one `dpm:` line naming `why`, and no rank ran.
fn assert_refused(out: &Output, why: &str) {
    assert_ne!(out.code(), 0, "{}", out.describe());
    out.assert_stderr_contains(why).assert_stderr_contains("refusing --pmi pmix").assert_stdout_lacks("RANK RAN");
    assert!(out.stderr_str().lines().any(|l| l.starts_with("dpm: ") && l.contains(why)), "{}", out.describe());
    assert_eq!(out.stderr_str().matches(why).count(), 1, "said once\n{}", out.describe());
}

#[test]
fn a_libpmix_accepting_with_accept4_is_refused() {
    let so = stand_in("accept4", "#define _GNU_SOURCE\n#include <sys/socket.h>\nint PMIx_server_init(void *m, void *i, size_t n) { (void)m; (void)i; (void)n; return accept4(-1, 0, 0, 0) < 0 ? -1 : 0; }");
    assert_refused(&run_with(&so), "accepts connections with accept4");
}

#[test]
fn a_libpmix_that_never_calls_accept_is_refused() {
    let so = stand_in("noaccept", "int PMIx_server_init(void *m, void *i, size_t n) { (void)m; (void)i; (void)n; return 0; }");
    assert_refused(&run_with(&so), "does not call accept itself");
}

/// Imports `accept` (the static check passes) but its listener thread
/// accepts with a raw `accept4` system call: the canary is never seen.
const RAW_LISTENER: &str = r#"
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
static int lfd = -1;
static void *listen_thread(void *arg) {
    (void)arg;
    for (;;) {
        int s = (int)syscall(SYS_accept4, lfd, NULL, NULL, 0);
        if (s >= 0) close(s);
    }
    return NULL;
}
int unused_accept(int fd) { return accept(fd, 0, 0); }
int PMIx_server_init(void *m, void *i, size_t n) {
    (void)m; (void)i; (void)n;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) < 0 || listen(lfd, 16) < 0) return -1;
    pthread_t t;
    return pthread_create(&t, NULL, listen_thread, NULL) == 0 ? 0 : -1;
}
"#;

#[test]
fn a_libpmix_whose_listener_bypasses_accept_fails_the_canary() {
    let so = stand_in("raw", RAW_LISTENER);
    let running = Dpm::run(["--pmi", "pmix", "-genv", "DPM_PMIX_LIBRARY", &so.display().to_string(), "-n", "2", "sh", "-c", "echo RANK RAN"])
        .watchdog(Duration::from_secs(60))
        .spawn();
    let pid = running.pid();
    let out = running.wait();
    assert_refused(&out, "did not see its own test connection");
    // The refused server's directory goes with it (it was left behind).
    let dir = std::env::temp_dir().join(format!("dpm-pmix.{pid}"));
    assert!(!dir.exists(), "{} left behind\n{}", dir.display(), out.describe());
}
