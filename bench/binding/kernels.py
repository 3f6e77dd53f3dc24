"""The binding benchmark's MPI program (mpi4py + numpy), run by bench/binding/run.

Two ranks: a ping-pong of 8-byte messages (the half round trip, median of
--reps batches), then every rank's STREAM-style triad a = b + s*c over
arrays of --mb MB each (the best of --reps, summed over the ranks).
Rank 0 prints "pingpong_us X" and "triad_gbs Y".
"""
import argparse
import time

import numpy as np
from mpi4py import MPI

p = argparse.ArgumentParser()
p.add_argument("--iters", type=int, default=2000)
p.add_argument("--reps", type=int, default=5)
p.add_argument("--mb", type=int, default=32)
args = p.parse_args()

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
buf = np.zeros(1, dtype=np.float64)
peer = 1 - rank if comm.Get_size() >= 2 else None
halves = []
for _ in range(args.reps):
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(args.iters):
        if peer is None:
            break
        if rank == 0:
            comm.Send(buf, dest=peer)
            comm.Recv(buf, source=peer)
        elif rank == 1:
            comm.Recv(buf, source=peer)
            comm.Send(buf, dest=peer)
    halves.append((time.perf_counter() - t0) / args.iters / 2 * 1e6)

n = args.mb * 1024 * 1024 // 8
a, b, c = np.zeros(n), np.ones(n), np.full(n, 2.0)
best = float("inf")
for _ in range(args.reps):
    comm.Barrier()
    t0 = time.perf_counter()
    np.multiply(c, 3.0, out=a)
    np.add(a, b, out=a)
    best = min(best, time.perf_counter() - t0)
# Triad traffic: read b and c, write a (the two-step form reads a once more).
gbs = comm.reduce(4 * 8 * n / best / 1e9, op=MPI.SUM, root=0)
if rank == 0:
    print("pingpong_us %.3f" % sorted(halves)[len(halves) // 2], flush=True)
    print("triad_gbs %.3f" % gbs, flush=True)
