"""The elastic mode's decisions, as a plain state machine (no MPI, no clock).

`Elastic` answers two questions the master asks on every turn of its loop:
should it try to spawn one more worker now, and what the outcome of a try
changes. A spawn refused for lack of room (`dpm run --no-oversubscribe` with
every slot taken: MPI_Comm_spawn returns an error) is "no room now": the next
try waits `retry_interval` seconds, and after `max_refusals` refusals in a row
growth stops for the rest of the run, so a full machine costs a bounded number
of spawn attempts. Shrinking needs no state: an idle worker with nothing left
in the queue is released at once (see master.py).
"""

from dataclasses import dataclass


@dataclass
class Elastic:
    max_workers: int
    retry_interval: float = 0.5
    max_refusals: int = 20
    next_try: float = 0.0
    refusals: int = 0          # consecutive refusals
    total_refusals: int = 0
    stopped: bool = False

    def should_grow(self, now, workers, waiting_tiles):
        """Try a spawn now? Only while tiles wait that no idle worker can take."""
        return (not self.stopped and workers < self.max_workers and waiting_tiles > 0
                and now >= self.next_try)

    def grew(self, now):
        self.refusals = 0
        self.next_try = now  # room may remain: try again on the next turn

    def refused(self, now):
        """Returns True when this refusal ends growth for the run."""
        self.refusals += 1
        self.total_refusals += 1
        self.next_try = now + self.retry_interval
        if self.refusals >= self.max_refusals:
            self.stopped = True
        return self.stopped
