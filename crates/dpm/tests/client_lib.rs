//! dpm's PMI client libraries (client/, include/; docs/pmi-client.md):
//! libpmi2 and libpmi against dpm's server and against Hydra, programs
//! built against Slurm's libpmi2 running on dpm's (the ABI), the
//! singleton, and a connection that closes under the library.
//!
//! The dpm_* programs of tests/programs are linked with target/client/lib
//! (scripts/setup.sh builds it); the ABI tests point LD_LIBRARY_PATH there.

mod common;

use std::process::Command;

use common::pmi2_checks::{assert_abort, assert_nameserv, assert_nodeattr, assert_putfence, assert_spawn};
use common::{assert_bench_line, hydra, pmi_bench, program, repo_root, Dpm, Output};

/// target/client/lib, where `make -C client` puts libpmi.so.0 and
/// libpmi2.so.0; fails the test when they were not built.
fn client_lib_dir() -> String {
    let dir = repo_root().join("target/client/lib");
    for lib in ["libpmi.so.0", "libpmi2.so.0"] {
        assert!(dir.join(lib).is_file(), "{} is missing: run ./scripts/setup.sh (it runs make -C client)", dir.join(lib).display());
    }
    dir.to_string_lossy().into_owned()
}

/// Every rank of `n` printed `line {r} rest`.
fn assert_each_rank(out: &Output, n: u32, line: impl Fn(u32) -> String) {
    out.assert_success();
    out.assert_stdout_lacks("FAIL");
    let lines = out.lines();
    for r in 0..n {
        let want = line(r);
        assert!(lines.contains(&want), "no {want:?} line\n{}", out.describe());
    }
}

/// Run a test program directly, without a launcher (20 s at most), with
/// no PMI variables inherited from whoever runs the tests.
fn run_alone(name: &str, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new("timeout");
    cmd.arg("20").arg(program(name)).args(args);
    for var in ["PMI_FD", "PMI_PORT", "PMI_ID", "PMI_RANK", "PMI_SIZE", "PMI_JOBID", "PMI_SPAWNED"] {
        cmd.env_remove(var);
    }
    cmd.output().unwrap_or_else(|e| panic!("cannot run {name}: {e}"))
}

fn describe(out: &std::process::Output) -> String {
    format!("status {:?}\n--- stdout ---\n{}--- stderr ---\n{}", out.status, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

// ---- libpmi2: the Slurm-derived programs built against dpm's library ----

#[test]
fn libpmi2_putfence() {
    assert_putfence(&Dpm::run(["-n", "3", &program("dpm_pmi2_putfence")]).output(), 3);
}

#[test]
fn libpmi2_putfence_over_pmi_port() {
    assert_putfence(&Dpm::run(["--pmi-port", "-n", "3", &program("dpm_pmi2_putfence")]).output(), 3);
}

#[test]
fn libpmi2_nodeattr_wait() {
    assert_nodeattr(&Dpm::run(["-n", "3", &program("dpm_pmi2_nodeattr")]).output());
}

#[test]
fn libpmi2_nameserv() {
    assert_nameserv(&Dpm::run(["-n", "3", &program("dpm_pmi2_nameserv")]).output());
}

#[test]
fn libpmi2_spawn() {
    assert_spawn(&Dpm::run(["-n", "1", &program("dpm_pmi2_spawn")]).output());
}

#[test]
fn libpmi2_abort() {
    assert_abort(&Dpm::run(["-n", "3", &program("dpm_pmi2_abort")]).output());
}

#[test]
fn libpmi2_under_hydra() {
    // The same library against Hydra's PMI-2 (its fence answers at once
    // and holds gets instead; the library does not care).
    assert_putfence(&common::hydra_output(|| Dpm::mpiexec(&hydra(), ["-n", "3", &program("dpm_pmi2_putfence")])), 3);
}

// ---- libpmi2: the rest of the API ----

#[test]
fn libpmi2_api_three_ranks() {
    let out = Dpm::run(["--usize", "16", "-n", "3", &program("dpm_pmi2_api")]).output();
    assert_each_rank(&out, 3, |r| format!("pmi2 rank {r} universeSize 16 mapping (vector,(0,1,3))"));
    assert_each_rank(&out, 3, |r| format!("pmi2 api ok rank {r} size 3 server"));
}

#[test]
fn libpmi2_api_on_two_virtual_nodes() {
    // Node attributes are per node: each node's first rank puts them. The
    // program reads universeSize, which is unset by default (as under Hydra).
    let out = Dpm::run(["--usize", "8", "--virtual-nodes", "2", "-n", "4", &program("dpm_pmi2_api")]).output();
    assert_each_rank(&out, 4, |r| format!("pmi2 api ok rank {r} size 4 server"));
    out.assert_stdout_contains("mapping (vector,(0,2,2))");
}

// ---- libpmi (PMI-1) ----

#[test]
fn libpmi_api_and_spawn() {
    let out = Dpm::run(["--usize", "16", "-n", "3", &program("dpm_pmi1_api"), "spawn"]).output();
    assert_each_rank(&out, 3, |r| format!("pmi1 api ok rank {r} size 3 server"));
    assert_each_rank(&out, 3, |r| format!("pmi1 rank {r} clique 3: 0,1,2"));
    out.assert_stdout_contains("pmi1 rank 2 lookup p1svc=p1-port\n");
    out.assert_stdout_contains("pmi1 spawn parent ok errors 0,0; missing program refused (rc=-1)\n");
    let lines = out.lines();
    let head = "pmi1 rank 0 size 3 appnum 0 universe 16 kvsname ";
    let kvsname = lines.iter().find_map(|l| l.strip_prefix(head)).unwrap_or_else(|| panic!("no {head:?} line\n{}", out.describe()));
    // The children saw the parent's preput at once, before any barrier.
    for r in 0..2 {
        out.assert_stdout_contains(&format!("pmi1 child {r} of 2 ok preput hello-from-{kvsname}\n"));
    }
}

#[test]
fn libpmi_appnum_in_mpmd() {
    let prog = program("dpm_pmi1_api");
    let out = Dpm::run(["-n", "1", &prog, ":", "-n", "2", &prog]).output();
    assert_each_rank(&out, 3, |r| format!("pmi1 api ok rank {r} size 3 server"));
    for (r, appnum) in [(0, 0), (1, 1), (2, 1)] {
        out.assert_stdout_contains(&format!("pmi1 rank {r} size 3 appnum {appnum} "));
    }
}

#[test]
fn libpmi_over_pmi_port() {
    // PMI_PORT + PMI_ID: the initack handshake, then the usual sequence.
    let out = Dpm::run(["--pmi-port", "-n", "2", &program("dpm_pmi1_api")]).output();
    assert_each_rank(&out, 2, |r| format!("pmi1 api ok rank {r} size 2 server"));
}

#[test]
fn libpmi_clique_on_two_virtual_nodes() {
    let out = Dpm::run(["--virtual-nodes", "2", "-n", "4", &program("dpm_pmi1_api")]).output();
    assert_each_rank(&out, 4, |r| format!("pmi1 rank {r} clique 2: {}", if r < 2 { "0,1" } else { "2,3" }));
}

#[test]
fn libpmi_under_hydra() {
    // The same library against MPICH's own PMI-1 server.
    let out = common::hydra_output(|| Dpm::mpiexec(&hydra(), ["-n", "3", &program("dpm_pmi1_api")]));
    assert_each_rank(&out, 3, |r| format!("pmi1 api ok rank {r} size 3 server"));
    out.assert_stdout_contains("pmi1 rank 0 size 3 appnum 0 universe -1 kvsname kvs_");
}

// ---- the ABI: programs built against Slurm's pmi2.h and -lpmi2 ----

/// Run a Slurm-built program with dpm's libpmi2 first on the library path
/// and its wire trace on, and check that every one of `procs` processes
/// printed dpm's trace: Slurm's library cannot print `dpm-pmi2 C: ...`.
fn run_on_dpm_libpmi2(args: &[&str], procs: usize) -> Output {
    let lib = client_lib_dir();
    let mut all = vec!["-genv", "LD_LIBRARY_PATH", &lib, "-genv", "PMI2_DEBUG", "1"];
    all.extend_from_slice(args);
    let out = Dpm::run(all).output();
    let inits = out.stderr_str().matches("dpm-pmi2 C: cmd=init pmi_version=2 pmi_subversion=0\n").count();
    assert_eq!(inits, procs, "expected dpm's libpmi2 to initialise {procs} processes\n{}", out.describe());
    out
}

#[test]
fn abi_slurm_built_programs_resolve_to_dpm_libpmi2() {
    // What the dynamic linker will pick, before anything runs.
    let lib = client_lib_dir();
    for name in ["pmi2_putfence", "pmi2_nodeattr", "pmi2_nameserv", "pmi2_spawn"] {
        let ldd = Command::new("ldd").arg(program(name)).env("LD_LIBRARY_PATH", &lib).output().expect("run ldd");
        let text = String::from_utf8_lossy(&ldd.stdout);
        let want = format!("libpmi2.so.0 => {lib}/libpmi2.so.0 ");
        assert!(text.contains(&want), "ldd {name} does not resolve libpmi2.so.0 to dpm's:\n{text}");
    }
}

#[test]
fn abi_slurm_built_putfence_on_dpm_libpmi2() {
    assert_putfence(&run_on_dpm_libpmi2(&["-n", "3", &program("pmi2_putfence")], 3), 3);
}

#[test]
fn abi_slurm_built_nodeattr_and_nameserv_on_dpm_libpmi2() {
    assert_nodeattr(&run_on_dpm_libpmi2(&["-n", "3", &program("pmi2_nodeattr")], 3));
    assert_nameserv(&run_on_dpm_libpmi2(&["-n", "3", &program("pmi2_nameserv")], 3));
}

#[test]
fn abi_slurm_built_spawn_on_dpm_libpmi2() {
    // The children inherit the library path: 1 parent + 2 children.
    assert_spawn(&run_on_dpm_libpmi2(&["-n", "1", &program("pmi2_spawn")], 3));
}

#[test]
fn abi_control_without_the_path_uses_slurms_libpmi2() {
    // The same run without LD_LIBRARY_PATH: Slurm's library, no dpm trace.
    // Without this the trace check above could pass for the wrong reason.
    let out = Dpm::run(["-genv", "PMI2_DEBUG", "1", "-n", "3", &program("pmi2_putfence")]).output();
    assert_putfence(&out, 3);
    assert!(!out.stderr_str().contains("dpm-pmi2"), "Slurm's libpmi2 printed dpm's trace?\n{}", out.describe());
}

// ---- singleton: started without a process manager ----

#[test]
fn singleton_libpmi2() {
    let out = run_alone("dpm_pmi2_api", &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("pmi2 api ok rank 0 size 1 singleton\n"), "{}", describe(&out));
    assert!(text.contains("mapping (vector,(0,1,1))"), "{}", describe(&out));
}

#[test]
fn singleton_libpmi() {
    let out = run_alone("dpm_pmi1_api", &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("pmi1 api ok rank 0 size 1 singleton\n"), "{}", describe(&out));
    assert!(text.contains("pmi1 rank 0 lookup p1svc=p1-port\n"), "{}", describe(&out));
}

// ---- a connection that closes: error codes, no crash, no hang ----

/// Both libraries, a PMI_FD whose peer is gone (`before-init`) or goes
/// away after reading the first request (`mid-request`).
fn assert_closed_standalone(mode: &str) {
    let out = run_alone("dpm_pmi_closed", &[mode]);
    let text = String::from_utf8_lossy(&out.stdout);
    // Killed by SIGPIPE would be no exit code at all.
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    for line in ["closed pmi1 PMI_Init rc=-1", "closed pmi1 PMI_Barrier rc=1", "closed pmi2 PMI2_Init rc=-1", "closed pmi2 PMI2_KVS_Get rc=1"] {
        assert!(text.contains(&format!("{line}\n")), "no {line:?}\n{}", describe(&out));
    }
    assert!(text.contains(&format!("closed {mode} done\n")), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("dpm-pmi1: PMI connection") && err.contains("dpm-pmi2: PMI connection"), "the failure was not reported\n{}", describe(&out));
}

#[test]
fn closed_socket_before_init() {
    assert_closed_standalone("before-init");
}

#[test]
fn closed_socket_mid_request() {
    assert_closed_standalone("mid-request");
}

#[test]
fn closed_socket_after_init_under_dpm() {
    let out = Dpm::run(["-n", "2", &program("dpm_pmi_closed"), "after-init"]).output();
    // The first rank to exit ends the run (no finalize reached dpm), so the
    // other may be killed before it prints: at least one did it all.
    for call in ["PMI2_KVS_Put", "PMI2_KVS_Fence", "PMI2_KVS_Get", "PMI2_Finalize"] {
        out.assert_stdout_contains(&format!("closed pmi2 {call} rc=-1\n"));
    }
    out.assert_stdout_contains("closed after-init done\n");
    out.assert_stdout_lacks("FAIL");
    out.assert_code(1);
    out.assert_stderr_contains("without calling MPI_Finalize");
}

// ---- bench/pmi's program over both PMI versions ----

/// `pmi_bench` speaks PMI-1 through the benchmarks' own wire client
/// (`bench/common/pmi1.c`) and PMI-2 through dpm's `libpmi2`; `libpmi` has
/// its own tests above.
#[test]
fn bench_pmi_patterns_over_pmi1_and_libpmi2() {
    let bench = pmi_bench();
    for pattern in ["fence", "fence-put", "dense", "sparse", "alltoall"] {
        for pmi in [1, 2] {
            let out = Dpm::run(["--virtual-nodes", "2", "-n", "4", &bench, "--reps", "2", "--pmi", &pmi.to_string(), pattern]).output();
            assert_bench_line(&out, pattern, pmi, 4);
        }
    }
}
