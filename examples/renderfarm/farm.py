#!/usr/bin/env python3
"""A POV-Ray render farm over MPI (paper 001, section 6): one master hands out
bands of rows from a work queue to workers that render them with povray.

    dpm run -n 5 python farm.py --mode static  --scene S.pov --out img.png   # ranks 1..4 work
    dpm run -n 1 python farm.py --mode dynamic --workers 4 --scene S.pov     # spawns 4 at start
    dpm run --no-oversubscribe -n 1 python farm.py --mode elastic --workers 1 --max-workers 8 ...

See README.md in this directory for the modes, the pixel check and failures.
"""

import os
import signal
import sys


def interrupted(signum, _frame):
    """Ctrl-C (dpm forwards SIGINT to every process of the run): leave at
    once with 128+N, quietly — not one KeyboardInterrupt traceback per
    process — ending this worker's povray, if any, with it. The master says
    so once; MPI_Finalize would wait for peers that are leaving too."""
    povray = sys.modules.get("farmlib.povray")
    running = getattr(povray, "RUNNING", None)
    if running is not None:
        try:
            running.kill()
        except OSError:
            pass
    if MASTER:
        try:
            sys.stdout.write(f"\nfarm: interrupted ({signal.Signals(signum).name})\n")
            sys.stdout.flush()
        except Exception:  # a write it interrupted (reentrant), a closed pipe: leave anyway
            pass
    os._exit(128 + signum)


MASTER = False
signal.signal(signal.SIGINT, interrupted)

import argparse  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

GLASSCHESS = "/usr/share/doc/povray/examples/advanced/glasschess/glasschess.pov"


def parse(argv):
    p = argparse.ArgumentParser(prog="farm.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--scene", default=GLASSCHESS, help="POV-Ray scene file (default: the glass chess board)")
    p.add_argument("--width", type=int, default=320)
    p.add_argument("--height", type=int, default=240)
    p.add_argument("--aa", default="0.3", help="anti-aliasing threshold (POV-Ray +A); 'off' for none")
    p.add_argument("--tile-rows", type=int, default=32, help="rows per tile: a multiple of --block-size")
    p.add_argument("--block-size", type=int, default=32, help="POV-Ray's render block size (+BS)")
    p.add_argument("--library", action="append", default=[], help="extra POV-Ray include path (+L)")
    p.add_argument("--povray", default="povray", help="the POV-Ray program")
    p.add_argument("--out", help="output image: .png, else PPM")
    p.add_argument("--mode", choices=["static", "dynamic", "elastic"], default="dynamic")
    p.add_argument("--workers", type=int, default=2, help="workers at start (dynamic, elastic)")
    p.add_argument("--max-workers", type=int, default=8, help="elastic: grow up to this many workers")
    p.add_argument("--grow-interval", type=float, default=0.5,
                   help="elastic: seconds to wait after a refused spawn (doubling, see --grow-interval-max)")
    p.add_argument("--grow-after", type=float, default=0.0, help="elastic: no growth in the first S seconds")
    p.add_argument("--grow-retries", type=int, default=20,
                   help="elastic: with no worker left, refusals in a row before the render is given up")
    p.add_argument("--grow-interval-max", type=float, default=2.0,
                   help="elastic: the wait after a refused spawn doubles up to S seconds")
    p.add_argument("--grow-spawn", choices=["soft", "one"], default="soft",
                   help="elastic: one spawn for every worker wanted with the MPI soft key (as many as fit), "
                        "or one worker per spawn")
    p.add_argument("--warm", action="store_true",
                   help="elastic: ask dpm for a pre-started worker on growth (spawn info dpm_warm=true)")
    p.add_argument("--tile-retries", type=int, default=2,
                   help="times a tile is rendered again after its povray failed (killed, crashed) or its worker "
                        "was lost")
    p.add_argument("--tile-timeout", type=float, default=300.0, help="seconds before a silent worker is lost")
    p.add_argument("--start-timeout", type=float, default=60.0, help="seconds for a spawned worker to report")
    p.add_argument("--check", action="store_true", help="compare with one plain povray render")
    p.add_argument("--progress", choices=["auto", "line", "plain", "none"], default="auto")
    p.add_argument("--nice", type=int, default=0, help="run povray under nice -n N")
    p.add_argument("--verbose", action="store_true")
    # Test hooks: the first worker given tile K fails on it (killed, stopped, or exits 1).
    p.add_argument("--fault-tile", type=int, default=None, help=argparse.SUPPRESS)
    # `povray`: the worker's povray is killed (SIGKILL, as by the OOM killer); the worker goes on.
    p.add_argument("--fault", choices=["kill", "stop", "exit", "povray"], default="kill", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.workers < 1 or args.max_workers < args.workers:
        p.error("need 1 <= --workers <= --max-workers")
    if args.tile_timeout <= 0 or args.start_timeout <= 0 \
            or min(args.grow_interval, args.grow_after, args.grow_interval_max, args.tile_retries) < 0 \
            or args.grow_retries < 1:
        p.error("timeouts must be positive, --grow-interval, --grow-interval-max, --grow-after and --tile-retries "
                ">= 0, --grow-retries >= 1")
    return args


def main(argv):
    if argv[:1] == ["--spawned-worker"]:
        from farmlib import worker
        worker.main_spawned()
        return 0
    args = parse(argv)
    from mpi4py import MPI
    from farmlib import master, worker
    from farmlib.povray import Settings
    from farmlib.progress import log

    global MASTER
    world = MPI.COMM_WORLD
    MASTER = world.Get_rank() == 0
    if world.Get_rank() > 0:
        if args.mode != "static":
            return 2  # rank 0 says why
        worker.serve(world)
        return 0
    if args.mode != "static" and world.Get_size() > 1:
        log(f"error: --mode {args.mode} starts alone and spawns its workers: run it with -n 1")
        return 2
    if args.mode == "static" and world.Get_size() < 2:
        log("error: --mode static needs workers: run it with -n P+1 for P workers")
        return 2
    settings = Settings(scene=args.scene, width=args.width, height=args.height,
                        aa="" if args.aa == "off" else args.aa, block=args.block_size,
                        povray=args.povray, library=args.library)
    problems = settings.check(args.tile_rows)
    if problems:
        for problem in problems:
            log(f"error: {problem}")
        for rank in range(1, world.Get_size()):
            world.send(("stop", False), dest=rank, tag=worker.TASK)
        return 2
    return master.main(args, settings)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
