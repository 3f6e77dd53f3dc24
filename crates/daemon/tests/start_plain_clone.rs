//! Starts where the kernel refuses `clone3` (before Linux 5.5, or a seccomp
//! filter): plain `clone`, the child resetting every signal itself. A test
//! binary of its own, since the choice is made for the whole process.

mod signals_at_start;

fn plain_clone() {
    dpm_daemon::spawn::clone3::use_clone_only();
}

#[test]
fn a_started_program_has_default_dispositions_and_no_mask() {
    plain_clone();
    signals_at_start::a_started_program_has_default_dispositions_and_no_mask();
}

#[test]
fn no_handler_of_the_parent_runs_in_a_starting_child() {
    plain_clone();
    signals_at_start::no_handler_of_the_parent_runs_in_a_starting_child();
}
