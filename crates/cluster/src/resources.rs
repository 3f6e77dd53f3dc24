//! Contention on a simulated node, modelled simply: `C` cores that the
//! daemon's work and its ranks' CPU work queue for, a daemon that is one
//! thread (its work is serial, as the node reactor's driver is), and one NIC
//! that sends the node's frames one after another, by bytes.
//!
//! Reservations are greedy and made in event order: a piece of work takes
//! the core that frees first, from the time it is ready (which may lie in
//! the virtual future). With `cores == 0` nothing contends: work takes
//! exactly its own duration, so the protocol tests keep their timings.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

/// One node's cores, daemon thread and NIC.
#[derive(Clone, Debug)]
pub struct NodeResources {
    /// When each core is next free (a min-heap); empty: unlimited cores.
    cores: BinaryHeap<Reverse<Duration>>,
    /// When the daemon's thread is next free.
    daemon_free: Duration,
    /// When the NIC has sent everything queued so far.
    nic_free: Duration,
}

impl NodeResources {
    pub fn new(cores: usize) -> Self {
        NodeResources { cores: (0..cores).map(|_| Reverse(Duration::ZERO)).collect(), daemon_free: Duration::ZERO, nic_free: Duration::ZERO }
    }

    /// CPU work of `work` ready at `at`: when it is done.
    pub fn cpu(&mut self, at: Duration, work: Duration) -> Duration {
        let Some(Reverse(free)) = self.cores.pop() else { return at + work };
        let done = at.max(free) + work;
        self.cores.push(Reverse(done));
        done
    }

    /// The daemon's work of `work` ready at `at` (serial on its thread, and on a core): when it is done.
    pub fn daemon(&mut self, at: Duration, work: Duration) -> Duration {
        if work.is_zero() {
            return at.max(self.daemon_free);
        }
        let done = self.cpu(at.max(self.daemon_free), work);
        self.daemon_free = done;
        done
    }

    /// The daemon's thread waits until `at` (for its starts to be done).
    pub fn daemon_until(&mut self, at: Duration) {
        self.daemon_free = self.daemon_free.max(at);
    }

    /// A frame of `wire` (bytes × per-byte cost) sent at `at`: when its last
    /// byte has left the NIC.
    pub fn send(&mut self, at: Duration, wire: Duration) -> Duration {
        let done = at.max(self.nic_free) + wire;
        self.nic_free = done;
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn work_queues_for_the_cores_and_the_daemon_is_serial() {
        let mut n = NodeResources::new(2);
        assert_eq!(n.cpu(Duration::ZERO, 10 * MS), 10 * MS);
        assert_eq!(n.cpu(Duration::ZERO, 10 * MS), 10 * MS);
        assert_eq!(n.cpu(Duration::ZERO, 10 * MS), 20 * MS, "a third piece waits for a core");
        assert_eq!(n.daemon(Duration::ZERO, MS), 11 * MS);
        assert_eq!(n.daemon(Duration::ZERO, MS), 12 * MS, "the daemon's thread is serial");
        let mut free = NodeResources::new(0);
        assert_eq!(free.cpu(5 * MS, MS), 6 * MS);
        assert_eq!(free.cpu(5 * MS, MS), 6 * MS, "unlimited cores do not contend");
    }

    #[test]
    fn the_nic_sends_frames_one_after_another() {
        let mut n = NodeResources::new(0);
        assert_eq!(n.send(Duration::ZERO, 3 * MS), 3 * MS);
        assert_eq!(n.send(MS, 3 * MS), 6 * MS);
        assert_eq!(n.send(10 * MS, MS), 11 * MS);
    }
}
