"""The farm's decisions, as plain state machines (no MPI, no clock).

`Elastic` answers what the master asks on every turn of its loop: should it
try to spawn more workers now, and what the outcome of a try changes. A spawn
refused for lack of room (`dpm run --no-oversubscribe` or a `dpm boot` with
every slot taken: MPI_Comm_spawn returns an error) is "no room now": the
next try waits `retry_interval` seconds, doubling with each refusal in a row
up to `max_interval`, and growth goes on for as long as tiles wait, so slots
freed at any time before the render ends are used within `max_interval`. A
freed slot the master knows of (a lost worker's) cuts the wait short. Only a
farm with no worker left gives up, after `max_refusals` refusals in a row
with none: it could never finish otherwise. Refusals in a row form a
*series*, reported once when it ends (`end_series`), not once per refusal.

`TileRetries` bounds how often one tile may fail (its povray killed by the
OOM killer or a signal, or an error exit; its worker lost) before the render
is given up: a broken scene fails every tile at once, so it still ends the
render fast, and a tile that takes down every worker given it cannot use up
replacement workers for ever.

Shrinking needs no state: an idle worker with nothing left in the queue is
released at once (see master.py).
"""

from dataclasses import dataclass, field


@dataclass
class Series:
    """Refusals in a row: how many, from when to when, the first reason."""
    refusals: int
    first: float
    last: float
    reason: str


@dataclass
class Elastic:
    max_workers: int
    retry_interval: float = 0.5
    max_refusals: int = 20     # refusals in a row with no worker left before giving up
    max_interval: float = 2.0  # the longest wait between tries
    next_try: float = 0.0
    series: Series = None      # the refusals since the last success, if any
    idle_refusals: int = 0     # refusals in a row while no worker lived
    total_refusals: int = 0
    stopped: bool = False

    def should_grow(self, now, workers, waiting_tiles):
        """Try a spawn now? Only while tiles wait that no idle worker can take."""
        return (not self.stopped and workers < self.max_workers and waiting_tiles > 0
                and now >= self.next_try)

    def wait(self):
        """Seconds until the next try after the refusals of this series."""
        if self.series is None:
            return 0.0
        cap = max(self.max_interval, self.retry_interval)
        return min(cap, self.retry_interval * 2 ** min(self.series.refusals - 1, 60))

    def grew(self, now):
        """A spawn succeeded; returns the refusal series it ends, if any."""
        self.idle_refusals = 0
        self.next_try = now  # room may remain: try again on the next turn
        return self.end_series()

    def refused(self, now, workers, reason):
        """A spawn was refused while `workers` workers live. Returns True when
        this refusal ends growth for the run (no worker, too many in a row)."""
        self.total_refusals += 1
        if self.series is None:
            self.series = Series(0, now, now, reason)
        self.series.refusals += 1
        self.series.last = now
        self.idle_refusals = self.idle_refusals + 1 if workers == 0 else 0
        self.next_try = now + self.wait()
        if self.idle_refusals >= self.max_refusals:
            self.stopped = True
        return self.stopped

    def slot_freed(self, now):
        """A slot was freed (a worker lost): try again at once, not after the wait."""
        self.next_try = min(self.next_try, now)

    def end_series(self):
        """The current refusal series, ended (None when there was none)."""
        series, self.series = self.series, None
        return series


@dataclass
class TileRetries:
    """How many times each tile's render may fail before the render fails."""
    retries: int = 2
    failures: dict = field(default_factory=dict)  # tile index -> failures so far

    def failed(self, tile):
        """A render of `tile` failed; True when it may be tried again."""
        self.failures[tile] = self.failures.get(tile, 0) + 1
        return self.failures[tile] <= self.retries

    def attempts(self, tile):
        return self.failures.get(tile, 0) + 1
