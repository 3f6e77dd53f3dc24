//! The PMIx watch on the in-process cluster: the real node reactors and run
//! reactor with scripted Open MPI ranks ([`Step::OpenMpiInit`]) served
//! PMI-1/2. Unwatched they run as singletons (what `--pmi auto` used to
//! allow for a program it could not see); watched, the ranks on any node
//! connect to their own node's watch, the trip reaches the run, and the run
//! ends with the message and exit 1, every rank killed. MPICH ranks of a
//! watched job run as before.

use std::time::Duration;

use dpm_cluster::{Cluster, Layout, Step};

const LIMIT: Duration = Duration::from_secs(60);

fn singletons(c: &Cluster) -> usize {
    c.output.values().map(|o| String::from_utf8_lossy(o).matches("rank 0 of 1\n").count()).sum()
}

#[test]
fn unwatched_open_mpi_ranks_run_as_singletons() {
    let mut c = Cluster::new(Layout::nodes(3));
    c.script("ompi", vec![Step::OpenMpiInit]);
    c.launch("ompi", 6, Some(2));
    assert_eq!(c.run_until(LIMIT), Some(0), "the silent failure the watch exists for");
    assert_eq!(singletons(&c), 6);
}

#[test]
fn open_mpi_ranks_on_every_node_trip_their_nodes_watch_and_the_run_ends() {
    let mut c = Cluster::new(Layout::nodes(3));
    c.script("ompi", vec![Step::OpenMpiInit]);
    c.launch_watched(&[("ompi", 6)], Some(2));
    assert_eq!(c.run_until(LIMIT), Some(1));
    let s = c.said.last().cloned().unwrap_or_default();
    assert!(s.contains("runs Open MPI, which needs PMIx") && s.contains("--pmi pmix"), "{:?}", c.said);
    assert_eq!(singletons(&c), 0, "no rank ran as a singleton");
    assert_eq!(c.live(), 0, "every rank was killed");
}

#[test]
fn the_trip_of_one_nodes_watch_ends_a_job_whose_other_ranks_wait() {
    // MPICH ranks on nodes 0 and 1 wait in their fence for ranks that never
    // speak PMI-1; the Open MPI ranks on node 2 trip that node's watch.
    let mut c = Cluster::new(Layout::nodes(3));
    c.script("mpich", vec![Step::Init, Step::Barrier, Step::Finalize]);
    c.script("ompi", vec![Step::OpenMpiInit]);
    c.launch_watched(&[("mpich", 4), ("ompi", 2)], Some(2));
    assert_eq!(c.run_until(LIMIT), Some(1));
    assert!(c.said.iter().any(|s| s.contains("runs Open MPI, which needs PMIx")), "{:?}", c.said);
    assert_eq!(c.live(), 0);
}

#[test]
fn mpich_ranks_of_a_watched_job_run_as_before() {
    let mut c = Cluster::new(Layout::nodes(2));
    c.script("mpich", vec![Step::Init, Step::Barrier, Step::Finalize]);
    c.launch_watched(&[("mpich", 4)], None);
    assert_eq!(c.run_until(LIMIT), Some(0));
    assert!(c.said.is_empty(), "{:?}", c.said);
}
