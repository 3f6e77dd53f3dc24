"""A worker: renders the bands the master sends and returns their pixels.

Messages (pickled, `comm.send`): the master sends on tag TASK
("setup", Settings, nice), ("render", index, first_row, last_row, fault)
and ("stop", abandon); the worker answers on tag RESULT ("ready", host, pid) once, then
("pixels", index, rgb bytes, seconds) or ("error", index, text) per band
(its povray failed: the master re-queues the band, a bounded number of times).
The master is rank 0 of `comm`: COMM_WORLD for static workers, the parent
intercommunicator for spawned ones (which disconnect from it when stopped,
so their slot is free again).
"""

import os
import signal
import time

from mpi4py import MPI

from .povray import RenderError, render_band

TASK = 1
RESULT = 2


# Seconds between probes while waiting for the master. MPICH's blocking
# receive spins at 100 % CPU, and the worker is not niced: measured on the
# 2-core machine (bench/renderfarm, 160x120, 2 workers), a worker idle at the
# end spun while the other's niced povray rendered the last tile, costing
# 5.3-7.3 CPU-seconds per static or dynamic run against 4.1 for elastic
# (whose idle workers leave at once) and 34 s renders against 21 s.
WAIT_POLL = 0.002


def receive(comm):
    """The master's next message, waiting without spinning (see WAIT_POLL)."""
    while not comm.Iprobe(source=0, tag=TASK):
        time.sleep(WAIT_POLL)
    return comm.recv(source=0, tag=TASK)


def serve(comm):
    comm.send(("ready", MPI.Get_processor_name(), os.getpid()), dest=0, tag=RESULT)
    settings, nice = None, 0
    while True:
        msg = receive(comm)
        if msg[0] == "setup":
            _, settings, nice = msg
        elif msg[0] == "render":
            _, index, first, last, fault = msg
            if fault and fault != "povray":
                inject(fault, index)
            started = time.monotonic()
            try:
                rgb = render_band(settings, first, last, nice, kill_povray(index) if fault == "povray" else None)
            except RenderError as e:
                comm.send(("error", index, str(e)), dest=0, tag=RESULT)
                continue
            comm.send(("pixels", index, rgb, time.monotonic() - started), dest=0, tag=RESULT)
        elif msg[0] == "stop":
            if msg[1]:
                # The master lost a worker: disconnect and finalize could wait
                # for it forever (see master.release_idle). Leave without them,
                # after the master: it exits at once with the run's real code
                # (4), which dpm, ending the run on the first failure, reports;
                # our own exit without MPI_Finalize would count as a failure too.
                time.sleep(2)
                os._exit(0)
            return


def inject(fault, index):
    """Test hook (--fault-tile): fail on this tile as a crashed or hung node would."""
    print(f"farm: worker pid {os.getpid()} fault {fault} on tile {index} at {time.time():.3f}", flush=True)
    if fault == "exit":
        os._exit(1)
    os.kill(os.getpid(), signal.SIGKILL if fault == "kill" else signal.SIGSTOP)


def kill_povray(index):
    """Test hook (--fault povray): SIGKILL this tile's povray once it runs,
    as the OOM killer would; the worker itself goes on."""
    def kill(pid):
        print(f"farm: worker pid {os.getpid()} fault povray on tile {index}: killing povray pid {pid}", flush=True)
        os.kill(pid, signal.SIGKILL)
    return kill


def main_spawned():
    parent = MPI.Comm.Get_parent()
    if parent == MPI.COMM_NULL:
        raise SystemExit("farm.py --spawned-worker: not started by MPI_Comm_spawn")
    serve(parent)
    parent.Disconnect()
