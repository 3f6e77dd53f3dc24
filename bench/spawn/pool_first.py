#!/usr/bin/env python3
"""bench/spawn/pool_first.py: time to a first result from mpi4py's
MPIPoolExecutor, whose workers mpi4py starts with its own MPI_Comm_spawn.

Usage (as the one rank of a job): pool_first.py [WORKERS] [TASKS]
  (defaults 4 and 16). Run it with the Python that has mpi4py (the .venv's):
  `dpm run -n 1 .venv/bin/python bench/spawn/pool_first.py`.

After MPI_Init (importing mpi4py.MPI), t0; then
MPIPoolExecutor(max_workers=WORKERS), one submit(pow, 3, 4) and its
result(): `first_ms` = that time (the spawn of the workers, each a fresh
Python that imports mpi4py, and one task's round trip); then map() of TASKS
tasks (`all_ms`, from t0) and the executor's shutdown (`total_ms`). Every
result is checked; a wrong one exits 1. One line on stdout:
  pool_first k=WORKERS n=1 tasks=TASKS first_ms=A all_ms=B total_ms=C
"""

import sys
import time

from mpi4py import MPI
from mpi4py.futures import MPIPoolExecutor


def main():
    workers = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    tasks = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    if workers < 1 or tasks < 1:
        sys.exit("usage: pool_first.py [WORKERS >= 1] [TASKS >= 1]")
    t0 = time.perf_counter()
    with MPIPoolExecutor(max_workers=workers) as pool:
        first = pool.submit(pow, 3, 4).result()
        t_first = time.perf_counter()
        squares = list(pool.map(pow, range(tasks), [2] * tasks))
        t_all = time.perf_counter()
    t_end = time.perf_counter()
    if first != 81 or squares != [i * i for i in range(tasks)]:
        print("pool_first: wrong results: %r %r" % (first, squares), file=sys.stderr)
        return 1
    print("pool_first k=%d n=%d tasks=%d first_ms=%.3f all_ms=%.3f total_ms=%.3f"
          % (workers, MPI.COMM_WORLD.Get_size(), tasks, (t_first - t0) * 1e3,
             (t_all - t0) * 1e3, (t_end - t0) * 1e3))
    return 0


if __name__ == "__main__":
    sys.exit(main())
