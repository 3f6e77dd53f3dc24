#!/usr/bin/env python3
"""bench/spawn/pool_series.py: several mpi4py MPIPoolExecutor pools in a row,
the pattern of a notebook or a workflow step (project issue 37).

Usage (as the one rank of a job): pool_series.py [POOLS] [WORKERS] [TASKS] [GAP_MS]
  (defaults 5, 2, 8 and 300). Run it with the Python that has mpi4py.

After MPI_Init (importing mpi4py.MPI), t0; then POOLS times: an
MPIPoolExecutor(max_workers=WORKERS) (mpi4py spawns its workers itself)
maps a small function over TASKS items, is shut down, and GAP_MS of sleep
follow (none after the last). `first_ms`: t0 to the first result of the
first pool (a spawn that no launcher can have seen before); `firsts_ms`:
each pool's time from its creation to its first result; `total_ms`: t0 to
the last pool's shutdown; `rests_ms`: each pool's first result to its last
(the rest of the map); `shuts_ms`: each pool's last result to the end of
its shutdown (the workers told to stop, disconnected and gone). With
DPM_PHASES_LOG naming a file, each pool's creation, first result, last
result and shutdown are appended to it as `PID pool-I-EVENT SECONDS` lines
(time.time(); bench/spawn/phases reads them). Every
result is checked; a wrong one exits 1. One line on stdout:
  pool_series k=WORKERS n=1 pools=P first_ms=A total_ms=B firsts_ms=a,b,...
      rests_ms=c,d,... shuts_ms=e,f,...
"""

import os
import sys
import time

from mpi4py import MPI
from mpi4py.futures import MPIPoolExecutor


def square(x):
    return x * x


def event(i, what):
    """One line for bench/spawn/phases (when DPM_PHASES_LOG is set)."""
    log = os.environ.get("DPM_PHASES_LOG")
    if log:
        with open(log, "a") as f:
            f.write("%d pool-%d-%s %.6f\n" % (os.getpid(), i, what, time.time()))


def main():
    pools = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    tasks = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    gap = (int(sys.argv[4]) if len(sys.argv) > 4 else 300) / 1e3
    if pools < 1 or workers < 1 or tasks < 1 or gap < 0:
        sys.exit("usage: pool_series.py [POOLS >= 1] [WORKERS >= 1] [TASKS >= 1] [GAP_MS >= 0]")
    firsts, rests, shuts = [], [], []
    t0 = time.perf_counter()
    for i in range(pools):
        if i:
            time.sleep(gap)
        start = time.perf_counter()
        event(i, "create")
        with MPIPoolExecutor(max_workers=workers) as pool:
            it = pool.map(square, range(tasks))
            first = next(it)
            firsts.append(time.perf_counter() - start)
            event(i, "first")
            rest = list(it)
            mapped = time.perf_counter()
            rests.append(mapped - start - firsts[-1])
            event(i, "mapped")
        shuts.append(time.perf_counter() - mapped)
        event(i, "shut")
        if [first] + rest != [x * x for x in range(tasks)]:
            print("pool_series: wrong results: %r" % ([first] + rest), file=sys.stderr)
            return 1
    total = time.perf_counter() - t0
    ms = lambda xs: ",".join("%.1f" % (x * 1e3) for x in xs)  # noqa: E731
    print("pool_series k=%d n=%d pools=%d first_ms=%.3f total_ms=%.3f firsts_ms=%s rests_ms=%s "
          "shuts_ms=%s" % (workers, MPI.COMM_WORLD.Get_size(), pools, firsts[0] * 1e3, total * 1e3,
                           ms(firsts), ms(rests), ms(shuts)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
