"""bench/spawn/phases_site/sitecustomize.py: timestamps of a Python MPI
process for bench/spawn/phases, written only when DPM_PHASES_LOG names a
file (each line: `PID EVENT SECONDS`, appended; one write per line):

  start   the interpreter reached site initialisation (time.time())
  init    the first import that returned with MPI initialised (mpi4py.MPI
          calls MPI_Init as its import ends): for a spawned child, its world
          complete and connected to the parent (PARENT_ROOT_PORT_NAME
          answered; for a pooled child: claimed)
  spawn-I, spawned-I
          the I-th (from 0) call of mpi4py.futures' client_spawn began,
          returned (MPI_Comm_spawn: the workers started and connected)
  cpu     at exit, the process's CPU seconds (user + system, all threads)

bench/spawn/phases puts this directory first on PYTHONPATH; nothing here
runs without it.
"""

import os
import time

_LOG = os.environ.get("DPM_PHASES_LOG")


def _write(event, value):
    line = "%d %s %.6f\n" % (os.getpid(), event, value)
    fd = os.open(_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _install():
    import atexit
    import builtins
    import resource
    import sys

    _write("start", time.time())
    real = builtins.__import__

    state = {"init": False, "spawn": False, "calls": 0}

    def spawn_wrap(core):
        inner = core.client_spawn

        def client_spawn(*args, **kwargs):
            i = state["calls"]
            state["calls"] += 1
            _write("spawn-%d" % i, time.time())
            try:
                return inner(*args, **kwargs)
            finally:
                _write("spawned-%d" % i, time.time())

        core.client_spawn = client_spawn

    def hooked(*args, **kwargs):
        module = real(*args, **kwargs)
        mpi = sys.modules.get("mpi4py.MPI")
        # In sys.modules from the start of its own import: wait for the
        # MPI_Init at its end.
        if not state["init"] and mpi is not None and hasattr(mpi, "Is_initialized") and mpi.Is_initialized():
            state["init"] = True
            _write("init", time.time())
        core = sys.modules.get("mpi4py.futures._core")
        if not state["spawn"] and core is not None and hasattr(core, "client_spawn"):
            state["spawn"] = True
            spawn_wrap(core)
        if state["init"] and state["spawn"]:
            builtins.__import__ = real
        return module

    builtins.__import__ = hooked

    def cpu():
        r = resource.getrusage(resource.RUSAGE_SELF)
        _write("cpu", r.ru_utime + r.ru_stime)

    atexit.register(cpu)


if _LOG:
    _install()
