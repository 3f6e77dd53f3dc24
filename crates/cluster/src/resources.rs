//! Contention on a simulated node, modelled simply: `C` cores that the
//! daemon's work and its ranks' CPU work queue for, a daemon that is one
//! thread (its work is serial, as the node reactor's driver is), and one NIC
//! that sends the node's frames one after another, by bytes.
//!
//! The daemon's thread ([`DaemonThread`]) is apart from the cores it runs
//! on: virtual nodes of one host each have their own daemon, serial in
//! itself, all taking the host's shared cores (charging every node's
//! daemon work on one thread made the simulator 20-37 % slow on 16-64
//! virtual nodes: the daemons of a host serve side by side).
//!
//! Reservations are greedy and made in event order: a piece of work takes
//! the core that best fits it from the time it is ready (which may lie in
//! the virtual future; see [`NodeResources::cpu`]). With `cores == 0` nothing contends: work takes
//! exactly its own duration, so the protocol tests keep their timings.

use std::time::Duration;

/// One node's (or host's) cores and NIC.
#[derive(Clone, Debug)]
pub struct NodeResources {
    /// When each core is next free; empty: unlimited cores.
    cores: Vec<Duration>,
    /// When the NIC has sent everything queued so far.
    nic_free: Duration,
}

/// One daemon's thread: its work is serial, each piece on a core of its host.
#[derive(Clone, Copy, Debug, Default)]
pub struct DaemonThread {
    /// When the thread is next free.
    free: Duration,
    /// When its last frame arrived.
    last_arrival: Option<Duration>,
}

impl DaemonThread {
    /// A frame arriving at `at`: whether it comes within `window` of the
    /// frame before it (sent back to back with it: the same read takes both).
    pub fn arrives_with_previous(&mut self, at: Duration, window: Duration) -> bool {
        let close = self.last_arrival.is_some_and(|last| at.saturating_sub(last) <= window);
        self.last_arrival = Some(at);
        close
    }

    /// The daemon's work of `work` ready at `at`, on a core of `host`: when it is done.
    pub fn run(&mut self, host: &mut NodeResources, at: Duration, work: Duration) -> Duration {
        if work.is_zero() {
            return at.max(self.free);
        }
        let done = host.cpu(at.max(self.free), work);
        self.free = done;
        done
    }
}

impl NodeResources {
    pub fn new(cores: usize) -> Self {
        NodeResources { cores: vec![Duration::ZERO; cores], nic_free: Duration::ZERO }
    }

    /// CPU work of `work` ready at `at`: when it is done. It takes the core
    /// free latest but by `at` (else the one free first): taking any free
    /// core would leave the gap before `at` idle for good, and a second
    /// core so blocked halved the host (a zero-length piece of work did it
    /// too: it takes no core).
    pub fn cpu(&mut self, at: Duration, work: Duration) -> Duration {
        if work.is_zero() || self.cores.is_empty() {
            return at + work;
        }
        let fits = self.cores.iter().enumerate().filter(|(_, &free)| free <= at).max_by_key(|(_, &free)| free);
        let (i, _) = fits.or_else(|| self.cores.iter().enumerate().min_by_key(|(_, &free)| free)).expect("cores is not empty");
        let done = at.max(self.cores[i]) + work;
        self.cores[i] = done;
        done
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
        let mut d = DaemonThread::default();
        assert_eq!(d.run(&mut n, Duration::ZERO, MS), 11 * MS);
        assert_eq!(d.run(&mut n, Duration::ZERO, MS), 12 * MS, "the daemon's thread is serial");
        let mut free = NodeResources::new(0);
        assert_eq!(free.cpu(5 * MS, MS), 6 * MS);
        assert_eq!(free.cpu(5 * MS, MS), 6 * MS, "unlimited cores do not contend");
    }

    #[test]
    fn work_ready_later_leaves_the_other_cores_to_work_ready_now() {
        let mut n = NodeResources::new(2);
        assert_eq!(n.cpu(Duration::ZERO, MS), MS);
        assert_eq!(n.cpu(5 * MS, MS), 6 * MS, "takes the core free at 1 ms, not the idle one");
        assert_eq!(n.cpu(Duration::ZERO, 3 * MS), 3 * MS, "the idle core is still free at 0");
        assert_eq!(n.cpu(2 * MS, Duration::ZERO), 2 * MS, "no work takes no core");
        assert_eq!(n.cpu(Duration::ZERO, MS), 4 * MS, "both busy: the one free first");
    }

    #[test]
    fn daemons_of_one_host_serve_side_by_side_on_its_cores() {
        // Two virtual nodes' daemons on a host of two cores: each is serial,
        // but they run in parallel until the cores are all taken.
        let mut host = NodeResources::new(2);
        let (mut a, mut b) = (DaemonThread::default(), DaemonThread::default());
        assert_eq!(a.run(&mut host, Duration::ZERO, MS), MS);
        assert_eq!(b.run(&mut host, Duration::ZERO, MS), MS, "another daemon does not wait for the first");
        assert_eq!(a.run(&mut host, Duration::ZERO, MS), 2 * MS, "one daemon is serial");
        assert_eq!(host.cpu(Duration::ZERO, 3 * MS), 4 * MS, "ranks queue behind the daemons for the cores");
    }

    #[test]
    fn a_frame_close_behind_another_is_read_with_it() {
        let mut d = DaemonThread::default();
        let w = Duration::from_micros(9);
        assert!(!d.arrives_with_previous(MS, w), "the first frame wakes the thread");
        assert!(d.arrives_with_previous(MS + Duration::from_micros(5), w), "sent back to back");
        assert!(d.arrives_with_previous(MS + Duration::from_micros(14), w), "a burst goes on");
        assert!(!d.arrives_with_previous(2 * MS, w), "a frame on its own wakes it again");
    }

    #[test]
    fn the_nic_sends_frames_one_after_another() {
        let mut n = NodeResources::new(0);
        assert_eq!(n.send(Duration::ZERO, 3 * MS), 3 * MS);
        assert_eq!(n.send(MS, 3 * MS), 6 * MS);
        assert_eq!(n.send(10 * MS, MS), 11 * MS);
    }
}
