"""Spawned ranks are bound to free objects (crates/dpm/tests/binding.rs).

The parent (any -n) prints its CPUs, spawns N children of this script, and
each child prints its own; every line is "ROLE RANK cpus LIST", LIST in
Linux's list form as the rank's Cpus_allowed_list shows it.
Usage: python bind_spawn.py [N]
"""
import os
import sys

from mpi4py import MPI

from cpus_allowed import cpus


parent = MPI.Comm.Get_parent()
rank = MPI.COMM_WORLD.Get_rank()
if parent == MPI.COMM_NULL:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    print(f"parent {rank} cpus {cpus()}", flush=True)
    child = MPI.COMM_WORLD.Spawn(sys.executable, [os.path.abspath(__file__)], maxprocs=n)
    child.Barrier()
    child.Disconnect()
else:
    print(f"child {rank} cpus {cpus()}", flush=True)
    parent.Barrier()
    parent.Disconnect()
