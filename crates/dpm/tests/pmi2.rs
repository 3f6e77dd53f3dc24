//! PMI-2 as Slurm's libpmi2 client speaks it (tests/programs/pmi2_*.c,
//! linked with -lpmi2): put/fence/get, node attributes with a blocking
//! wait, the name service, abort, and the same over PMI_PORT.

mod common;

use common::pmi2_checks::{assert_abort, assert_nameserv, assert_nodeattr, assert_putfence, assert_spawn};
use common::{program, Dpm};

#[test]
fn putfence_three_ranks() {
    assert_putfence(&Dpm::run(["-n", "3", &program("pmi2_putfence")]).output(), 3);
}

#[test]
fn putfence_one_rank() {
    assert_putfence(&Dpm::run(["-n", "1", &program("pmi2_putfence")]).output(), 1);
}

#[test]
fn putfence_over_pmi_port() {
    assert_putfence(&Dpm::run(["--pmi-port", "-n", "3", &program("pmi2_putfence")]).output(), 3);
}

#[test]
fn universe_size_from_usize() {
    let out = Dpm::run(["--usize", "16", "-n", "2", &program("pmi2_putfence")]).output();
    assert_putfence(&out, 2);
    for r in 0..2 {
        out.assert_stdout_contains(&format!("pmi2 rank {r} universeSize=16\n"));
    }
}

#[test]
fn nodeattr_blocking_wait() {
    assert_nodeattr(&Dpm::run(["-n", "3", &program("pmi2_nodeattr")]).output());
}

#[test]
fn nameserv_publish_lookup_unpublish() {
    assert_nameserv(&Dpm::run(["-n", "3", &program("pmi2_nameserv")]).output());
}

#[test]
fn pmi2_abort_ends_the_job() {
    assert_abort(&Dpm::run(["-n", "3", &program("pmi2_abort")]).output());
}

#[test]
fn spawn_through_slurm_libpmi2() {
    assert_spawn(&Dpm::run(["-n", "1", &program("pmi2_spawn")]).output());
}
