"""Soft spawns before and after the boot grows (crates/dpm/tests/boot_grow.rs).

The parent (-n 1) spawns as many children as fit ("soft" 1:MAX), prints
"first N", waits until the file FLAG exists (the test creates it once it
has added a host to the boot), spawns as many again and prints "second M".
The children wait in a barrier with the parent until both spawns are done,
so the first ones hold their slots during the second spawn.
Usage: python grow_spawn.py FLAG MAX
"""
import os
import sys
import time

from mpi4py import MPI


def spawn(most):
    info = MPI.Info.Create()
    info.Set("soft", f"1:{most}")
    try:
        return MPI.COMM_SELF.Spawn(sys.executable, [os.path.abspath(__file__)], maxprocs=most, info=info)
    except MPI.Exception as e:
        print(f"refused {e.Get_error_string()}", flush=True)
        return None
    finally:
        info.Free()


parent = MPI.Comm.Get_parent()
if parent == MPI.COMM_NULL:
    flag, most = sys.argv[1], int(sys.argv[2])
    first = spawn(most)
    print(f"first {first.Get_remote_size() if first else 0}", flush=True)
    while not os.path.exists(flag):  # the test's signal, not a clock
        time.sleep(0.05)
    second = spawn(most)
    print(f"second {second.Get_remote_size() if second else 0}", flush=True)
    for comm in (first, second):
        if comm:
            comm.Barrier()
            comm.Disconnect()
else:
    parent.Barrier()
    parent.Disconnect()
