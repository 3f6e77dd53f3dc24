//! What holds between the node reactor's parts after every input
//! ([`NodeReactor::check_invariants`]); the unit tests check it after each
//! one, so a handler that leaves a part behind fails the test that drove it.

use super::NodeReactor;

impl NodeReactor {
    /// The node's invariants: each PMI connection belongs to a job of the
    /// node; a live job's process with a connection is that connection's;
    /// a launch in progress awaits a start; the PMIx front end's jobs are
    /// jobs of the node and every request it waits on is open and its own;
    /// bindings are held by live ranks of the node's jobs only. A
    /// description of the first one broken, if any.
    pub fn check_invariants(&self) -> Result<(), String> {
        if let Some((conn, job)) = self.conns.iter().find(|(_, job)| !self.jobs.contains_key(job)) {
            return Err(format!("PMI connection {conn:?} of {job}, no job of the node"));
        }
        for ((job, rank), p) in &self.procs {
            let Some(conn) = p.conn.filter(|_| self.jobs.contains_key(job)) else { continue };
            if self.conns.get(&conn) != Some(job) {
                return Err(format!("rank {} of {job} has connection {conn:?}, which is not its job's", rank.0));
            }
        }
        for (job, j) in &self.jobs {
            if j.launching.as_ref().is_some_and(|l| l.pending == 0) {
                return Err(format!("{job}'s launch has every start back but is not settled"));
            }
        }
        let is_job = |job| self.jobs.contains_key(&job);
        self.pmix.check(is_job, &self.requests)?;
        let exited = |job, rank| self.procs.get(&(job, rank)).is_some_and(|p| p.exit.is_some());
        self.binding.check(is_job, exited)
    }

    /// After every input, in this crate's tests: the invariants hold.
    pub(super) fn checked(&self) {
        #[cfg(test)]
        if let Err(broken) = self.check_invariants() {
            panic!("a node reactor invariant is broken: {broken}");
        }
    }
}
