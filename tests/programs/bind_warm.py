"""Claimed pooled children are bound to free objects (crates/dpm/tests/binding.rs).

The parent (-n 1) prints its CPUs, then spawns one child of this script
ITERS times, one after the other (always the same command: one shape to
pool); each child sends the parent its pid and its CPUs as it reads them
once its MPI_Init is over (after its claim, for a pooled one). The parent waits until that child is gone (its
/proc entry reaped) before the next spawn, so that at each claim the only
live ranks are the parent, the claimed child and the pool. Lines:
"parent 0 cpus LIST", "child I cpus LIST" (I: the iteration), "done".
Usage: python bind_warm.py ITERS
"""
import os
import sys
import time

from mpi4py import MPI

from cpus_allowed import cpus


parent = MPI.Comm.Get_parent()
if parent == MPI.COMM_NULL:
    print(f"parent 0 cpus {cpus()}", flush=True)
    for i in range(int(sys.argv[1])):
        child = MPI.COMM_WORLD.Spawn(sys.executable, [os.path.abspath(__file__), "child"], maxprocs=1)
        pid, child_cpus = child.recv(source=0)
        print(f"child {i} cpus {child_cpus}", flush=True)
        child.Disconnect()
        # Bounded: a child that never goes is the test's failure, not a hang.
        for _ in range(3000):
            if not os.path.exists(f"/proc/{pid}"):
                break
            time.sleep(0.01)
    print("done", flush=True)
else:
    parent.send((os.getpid(), cpus()), dest=0)
    parent.Disconnect()
