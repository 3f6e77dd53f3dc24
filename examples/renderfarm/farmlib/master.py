"""The master: the tile queue, the worker pool in each mode, growth and release.

Workers live in *groups*, one per communicator they were reached through:
COMM_WORLD (static: ranks 1..P), one intercommunicator for the P workers a
dynamic run spawns at start, or one intercommunicator per worker in elastic
mode, so each can be released alone. A group of spawned workers is
disconnected (`MPI_Comm_disconnect`) once every member has been told to stop;
their processes then finalise and exit, and dpm counts their slots free.

The loop polls (`Iprobe` per group, then a short sleep) rather than blocking
in a receive, because MPI gives no receive timeout: a worker that stops
answering is declared lost after --tile-timeout, and so is one whose receive
raises an MPI error. A lost worker's tile goes back to the front of the
queue, and so does a tile whose povray failed (killed by the OOM killer or a
signal), up to --tile-retries times; see README.md ("Failure") for what MPICH
and dpm do.
"""

import collections
import os
import sys
import time

from mpi4py import MPI

from .image import first_difference, write_image
from .policy import Elastic, TileRetries
from .povray import RenderError, render_whole
from .progress import Progress, log
from .worker import RESULT, TASK

# Elastic growth with `--grow-spawn soft` (the default): one spawn asks for
# every worker wanted with the MPI `soft` key "1:N" (`%d` is filled with N),
# and dpm starts as many as its free slots hold (MPI_Comm_spawn succeeds; the
# intercommunicator's remote group has the ones started). `--grow-spawn one`
# asks for one worker per spawn, all or nothing (what a launcher without
# `soft` gives: Hydra starts every maxprocs whatever the key says).
SOFT_INFO = {"soft": "1:%d"}
POLL_SLEEP = 0.005  # seconds between polls when nothing happened
LIVENESS_EVERY = 0.1  # seconds between checks that this host's workers still exist


def mpi_error(e):
    """An MPI exception in one line: MPICH's error stack ends with the cause."""
    lines = [line.strip() for line in e.Get_error_string().splitlines() if line.strip()]
    return lines[-1].replace("....", "").replace("..", "") if lines else str(e)


class Worker:
    def __init__(self, wid, group, rank, decided_at):
        self.wid = wid
        self.group = group
        self.rank = rank
        self.decided_at = decided_at   # when the master decided to have this worker
        self.state = "starting"        # starting, idle, busy, stopped, released, lost
        self.host = "?"
        self.pid = None
        self.tile = None
        self.since = decided_at        # start of the current state
        self.tiles = 0

    def send(self, msg):
        self.group.comm.send(msg, dest=self.rank, tag=TASK)


class Group:
    def __init__(self, comm, spawned):
        self.comm = comm
        self.spawned = spawned
        self.members = {}              # remote rank -> Worker
        self.disconnected = False


class FarmError(Exception):
    """The farm cannot finish: rendered error text for the user."""


class Master:
    def __init__(self, args, settings):
        self.args = args
        self.settings = settings
        self.mode = args.mode
        rows = args.tile_rows
        self.tiles = [(i, first, min(first + rows - 1, settings.height))
                      for i, first in enumerate(range(1, settings.height + 1, rows))]
        self.queue = collections.deque(self.tiles)
        self.image = bytearray(settings.width * settings.height * 3)
        self.done = set()
        self.groups = []
        self.workers = []
        self.progress = Progress(len(self.tiles), args.progress)
        self.elastic = Elastic(args.max_workers, args.grow_interval, args.grow_retries, args.grow_interval_max)
        self.retries = TileRetries(args.tile_retries)
        self.failed_by = {}            # tile index -> workers whose povray failed it
        self.lost = 0
        self.faulted = set()
        self.slowest = 0.0             # seconds, dispatch to result, of the slowest tile
        self.host = MPI.Get_processor_name()
        self.next_liveness = 0.0

    # ---- the pool ---------------------------------------------------------

    def live(self):
        return [w for w in self.workers if w.state in ("starting", "idle", "busy")]

    def remaining(self):
        """Workers whose processes are still the farm's: live, or told to
        stop but not yet released (a group is released as a whole)."""
        return sum(w.state in ("starting", "idle", "busy", "stopped") for w in self.workers)

    def add_group(self, comm, spawned, decided_at):
        group = Group(comm, spawned)
        size = comm.Get_remote_size() if spawned else comm.Get_size()
        ranks = range(size) if spawned else range(1, size)
        for rank in ranks:
            w = Worker(len(self.workers) + 1, group, rank, decided_at)
            group.members[rank] = w
            self.workers.append(w)
            w.send(("setup", self.settings, self.args.nice))
        self.groups.append(group)
        return list(group.members.values())

    def spawn_info(self, growth):
        """The info keys of a spawn: `soft` for elastic growth (--grow-spawn
        soft), `dpm_warm=true` for growth with --warm (dpm's warm spawn pool)."""
        keys = {}
        if growth and self.args.grow_spawn == "soft":
            keys.update(SOFT_INFO)
        if growth and self.args.warm:
            keys["dpm_warm"] = "true"
        return keys

    def spawn_group(self, count, growth=False):
        """Spawn up to `count` workers as one group; raises MPI.Exception when refused."""
        info = MPI.Info.Create()
        for key, value in self.spawn_info(growth).items():
            info.Set(key, value % count if "%d" in value else value)
        farm = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "farm.py")
        decided = time.monotonic()
        try:
            comm = MPI.COMM_SELF.Spawn(sys.executable, [farm, "--spawned-worker"], maxprocs=count, info=info)
        finally:
            info.Free()
        return self.add_group(comm, True, decided), time.monotonic() - decided

    def try_grow(self, waiting):
        """Spawn one worker (--grow-spawn soft: every worker wanted, as many as fit)."""
        count = 1
        if self.args.grow_spawn == "soft":
            count = max(1, min(self.args.max_workers - len(self.live()), waiting))
        try:
            added, took = self.spawn_group(count, growth=True)
        except MPI.Exception as e:
            # No room now: a normal answer. One line per series of refusals
            # (when it ends), not one per try; --verbose shows each.
            ended = self.elastic.refused(time.monotonic(), len(self.live()), mpi_error(e))
            if self.args.verbose:
                log(f"spawn refused ({mpi_error(e)}); next try in {self.elastic.wait():g} s")
            if ended:
                self.report_refusals(f"giving up: no worker left after {self.elastic.idle_refusals} in a row")
            return
        self.report_refusals("then grew", self.elastic.grew(time.monotonic()))
        n = len(self.live()) - len(added)
        for w in added:
            n += 1
            log(f"grew to {n} worker{'s' if n != 1 else ''}: worker {w.wid} spawned in {took:.3f} s")

    def report_refusals(self, outcome, series=None):
        """The one line for a series of refused spawns, once it ended."""
        series = series or self.elastic.end_series()
        if series is None:
            return
        n = series.refusals
        cap = max(self.args.grow_interval, self.args.grow_interval_max)
        # MPICH's text is "pmi1_spawn(220).: PMI_Spawn_multiple returned -1":
        # the cause alone (dpm says more with `dpm run -v`).
        log(f"no room for another worker: {n} spawn{'s' if n != 1 else ''} refused in "
            f"{series.last - series.first:.1f} s, waits doubling from {self.args.grow_interval:g} to {cap:g} s "
            f"({series.reason.rsplit(': ', 1)[-1]}); {outcome}")

    # ---- messages -------------------------------------------------------

    def poll(self):
        """Receive every waiting message; True when there was any."""
        got = False
        for group in self.groups:
            if group.disconnected or not any(w.state in ("starting", "busy") for w in group.members.values()):
                continue
            status = MPI.Status()
            while True:
                try:
                    if not group.comm.Iprobe(source=MPI.ANY_SOURCE, tag=RESULT, status=status):
                        break
                    src = status.Get_source()
                    msg = group.comm.recv(source=src, tag=RESULT)
                except MPI.Exception as e:
                    for w in group.members.values():
                        if w.state in ("starting", "busy"):
                            self.lose(w, f"MPI error: {mpi_error(e)}")
                    break
                got = True
                self.handle(group.members[src], msg)
        return got

    def handle(self, w, msg):
        now = time.monotonic()
        kind = msg[0]
        if w.state == "lost":
            # Only slow after all; its tile went back to the queue. A second
            # copy of the same pixels is harmless, but keep the count honest.
            log(f"late answer from lost worker {w.wid} ignored")
            return
        if kind == "ready":
            _, w.host, pid = msg
            w.pid = pid
            w.state, w.since = "idle", now
            if self.args.verbose or self.mode == "elastic":
                log(f"worker {w.wid} ready on {w.host} (pid {pid}) {now - w.decided_at:.3f} s after it was asked for")
        elif kind == "pixels":
            _, index, rgb, seconds = msg
            _, first, last = self.tiles[index]
            stride = self.settings.width * 3
            if len(rgb) != (last - first + 1) * stride:
                raise FarmError(f"worker {w.wid} sent {len(rgb)} bytes for tile {index}, "
                                f"expected {(last - first + 1) * stride}")
            self.image[(first - 1) * stride:last * stride] = rgb
            w.tiles += 1
            if w.tiles == 1 and self.mode == "elastic":
                log(f"worker {w.wid} finished its first tile {now - w.decided_at:.3f} s after the grow decision "
                    f"(its render: {seconds:.3f} s)")
            self.slowest = max(self.slowest, now - w.since)
            w.state, w.tile, w.since = "idle", None, now
            if index not in self.done:
                self.done.add(index)
                self.progress.tile_done(len(self.live()))
        elif kind == "error":
            # Its povray failed (the OOM killer, a signal, an error exit): the
            # worker goes on, the tile goes back to the queue, to another
            # worker if one is idle; a tile failing every time (a broken
            # scene) ends the render after --tile-retries.
            _, index, text = msg
            tile, w.tile = w.tile, None
            w.state, w.since = "idle", now
            self.failed_by.setdefault(index, set()).add(w.wid)
            if not self.retries.failed(index):
                self.give_up(index, f"worker {w.wid} on {w.host}: {text}")
            if index not in self.done:
                self.queue.appendleft(tile)
            log(f"worker {w.wid} on {w.host}: {text.splitlines()[0]}; tile {index} re-queued "
                f"(try {self.retries.attempts(index)} of {self.args.tile_retries + 1})")

    def give_up(self, index, last):
        """Tile `index` failed once more than --tile-retries allows."""
        n = self.retries.attempts(index) - 1
        raise FarmError(f"tile {index} failed {n} time{'s' if n != 1 else ''}, last: {last}")

    def lose(self, w, reason):
        self.lost += 1
        tile = w.tile
        w.state, w.tile = "lost", None
        self.elastic.slot_freed(time.monotonic())  # its slot may be free: grow into it now
        if tile is not None and tile[0] not in self.done:
            # A tile that takes down every worker given it (its povray's
            # memory, say) counts against --tile-retries too: else replaced
            # workers would take it, and die, for ever.
            if not self.retries.failed(tile[0]):
                self.give_up(tile[0], f"lost worker {w.wid} on {w.host} ({reason})")
            self.queue.appendleft(tile)
            log(f"lost worker {w.wid} on {w.host} ({reason}); tile {tile[0]} re-queued")
        else:
            log(f"lost worker {w.wid} on {w.host} ({reason})")

    # ---- the loop ---------------------------------------------------------

    def dispatch(self):
        now = time.monotonic()
        for w in self.workers:
            if w.state == "idle" and self.queue:
                # Not a tile this worker's povray failed, while another waits.
                pick = next((t for t in self.queue if w.wid not in self.failed_by.get(t[0], ())), self.queue[0])
                self.queue.remove(pick)
                w.tile = pick
                w.state, w.since = "busy", now
                fault = None
                if w.tile[0] == self.args.fault_tile and w.tile[0] not in self.faulted:
                    fault = self.args.fault  # test hook: the first worker given this tile fails
                    self.faulted.add(w.tile[0])
                w.send(("render",) + w.tile + (fault,))

    def release_idle(self, force=False):
        """Stop idle workers once nothing waits (elastic: at once; else at the end).

        After a loss (called last, once the image is written), the workers
        of a group with a lost member are told to leave without disconnecting
        or finalising: both are collective with the lost worker's side (a
        dynamic group's intercommunicator, static COMM_WORLD), and measured
        under Hydra -disable-auto-cleanup, a healthy worker's Disconnect or
        Finalize then waited forever. Other groups are released as always."""
        if self.queue or not (force or self.mode == "elastic"):
            return
        for w in self.workers:
            if w.state == "idle":
                w.send(("stop", self.abandoned(w.group)))
                w.state = "stopped"
        for group in self.groups:
            members = group.members.values()
            if self.abandoned(group):
                continue
            if group.spawned and not group.disconnected and all(w.state == "stopped" for w in members):
                group.comm.Disconnect()
                group.disconnected = True
                for w in members:
                    w.state = "released"
                    n = self.remaining()
                    log(f"released worker {w.wid} ({w.tiles} tile{'s' if w.tiles != 1 else ''}); "
                        f"{n} worker{' remains' if n == 1 else 's remain'}")

    def abandoned(self, group):
        """A group whose disconnect (or, for COMM_WORLD, finalize) would wait
        for a lost member: its workers leave without either. An elastic
        worker has a group of its own, so one loss abandons nobody else."""
        return any(w.state == "lost" for w in group.members.values())

    def check_liveness(self, now):
        """A worker on this host whose process is gone is lost at once.

        MPICH tells the master nothing when a peer dies (README, "Failure"):
        without this, only the tile timeout would notice. It works for
        workers on this machine (one node, virtual nodes); a dead worker on
        another host is still found by the timeout."""
        if now < self.next_liveness:
            return
        self.next_liveness = now + LIVENESS_EVERY
        for w in self.workers:
            if w.state in ("idle", "busy") and w.pid and w.host == self.host:
                try:
                    os.kill(w.pid, 0)
                except ProcessLookupError:
                    self.lose(w, f"its process {w.pid} is gone")
                except PermissionError:
                    pass  # exists (another user's: not ours, but not gone)

    def check_timeouts(self, now):
        # A tile may take longer than --tile-timeout when the machine is
        # loaded: never call a worker lost before 4x the slowest tile so far.
        limit = max(self.args.tile_timeout, 4 * self.slowest)
        for w in self.workers:
            if w.state == "busy" and now - w.since > limit:
                self.lose(w, f"no answer for tile {w.tile[0]} in {limit:.1f} s")
            elif w.state == "starting" and now - w.since > self.args.start_timeout:
                self.lose(w, f"not ready {self.args.start_timeout:g} s after it was started")

    def start_workers(self):
        world = MPI.COMM_WORLD
        if self.mode == "static":
            if world.Get_size() < 2:
                raise FarmError("static mode needs workers: start it as `dpm run -n P+1 ... --mode static`")
            self.add_group(world, False, time.monotonic())
            log(f"static: {world.Get_size() - 1} workers (ranks 1..{world.Get_size() - 1})")
        elif self.mode == "dynamic":
            try:
                added, took = self.spawn_group(self.args.workers)
            except MPI.Exception as e:
                raise FarmError(f"cannot spawn {self.args.workers} workers: {mpi_error(e)}") from None
            log(f"dynamic: spawned {len(added)} workers in {took:.3f} s")
        else:
            for _ in range(self.args.workers):
                self.try_grow(1)

    def run(self):
        self.start_workers()
        started = time.monotonic()
        self.elastic.next_try = max(self.elastic.next_try, started + self.args.grow_after)
        log(f"rendering {self.settings.scene} at {self.settings.width}x{self.settings.height} "
            f"in {len(self.tiles)} tiles of {self.args.tile_rows} rows, mode {self.mode}")
        while len(self.done) < len(self.tiles):
            active = self.poll()
            self.dispatch()
            now = time.monotonic()
            # Tiles no worker will take: workers still starting take one each.
            waiting = len(self.queue) - sum(w.state == "starting" for w in self.workers)
            if self.mode == "elastic" and self.elastic.should_grow(now, len(self.live()), waiting):
                self.try_grow(waiting)
                active = True
            elif waiting <= 0 and self.elastic.series:
                self.report_refusals("no tile waits for a worker any more")
            self.release_idle()
            self.check_liveness(now)
            self.check_timeouts(now)
            if not self.live() and self.queue and (self.mode != "elastic" or self.elastic.stopped):
                raise FarmError(f"no workers left and {len(self.queue)} tile{'s' if len(self.queue) != 1 else ''} "
                                "unrendered")
            if not active:
                time.sleep(POLL_SLEEP)
        elapsed = time.monotonic() - started
        self.report_refusals("the render finished first")
        if not self.lost:
            self.release_idle(force=True)  # after a loss: main() does it last
        log(f"rendered {len(self.tiles)} tiles in {elapsed:.3f} s with {len(self.workers)} workers "
            f"(" + ", ".join(f"worker {w.wid}: {w.tiles}" for w in self.workers) + ")")
        return elapsed


def check(settings, rgb, nice):
    """Compare with one plain POV-Ray render; returns the number of differing pixels."""
    started = time.monotonic()
    try:
        reference = render_whole(settings, nice)
    except RenderError as e:
        raise FarmError(f"--check: the reference render failed: {e}") from None
    count, first = first_difference(settings.width, rgb, reference)
    took = time.monotonic() - started
    if count:
        log(f"check: FAILED: {count} of {settings.width * settings.height} pixels differ from a plain "
            f"povray render (first at x={first[0]}, y={first[1]}); reference took {took:.3f} s")
    else:
        log(f"check: pixel-identical to a plain povray render ({settings.width}x{settings.height}, "
            f"reference took {took:.3f} s)")
    return count


def main(args, settings):
    """The master's whole run; returns the process exit code."""
    master = Master(args, settings)
    try:
        elapsed = master.run()
    except FarmError as e:
        # Workers may be mid-tile or mid-disconnect; MPI_Abort ends them all
        # (dpm reports the abort code) instead of leaving anyone waiting.
        log(f"error: {e}")
        sys.stdout.flush()
        MPI.COMM_WORLD.Abort(3)
        os._exit(3)  # Abort does not return; should a launcher let it, still never go on
    if args.out:
        write_image(args.out, settings.width, settings.height, master.image)
        log(f"wrote {args.out}")
    log(f"time {elapsed:.3f} s")
    code = 0
    if args.check and check(settings, master.image, args.nice):
        code = 5
    if master.lost:
        # A lost worker may still be "connected" as far as MPICH knows, and
        # MPI_Finalize waits for connected processes: leave without it.
        log(f"{master.lost} worker(s) were lost; leaving without MPI_Finalize")
        sys.stdout.flush()
        master.release_idle(force=True)
        os._exit(code or 4)
    return code
