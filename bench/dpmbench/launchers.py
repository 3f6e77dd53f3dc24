"""dpmbench.launchers: the launchers under test and the A/B mode.

  dpm       --dpm PATH           $BENCH_DPM           target/release/dpm
  dpm-base  --dpm-baseline PATH  $BENCH_DPM_BASELINE  (none: no A/B)
  hydra     --mpiexec PATH       $BENCH_MPIEXEC       .venv/bin/mpiexec.hydra
  mpicc     --mpicc PATH         $BENCH_MPICC         the mpicc next to an explicitly
                                                      chosen mpiexec, else .venv/bin/mpicc

With --dpm-baseline, a second dpm build takes its turns in the same rounds
as dpm and Hydra, so that "did this change slow dpm down?" is answered
under one machine load; the tables add dpm/dpm-base ratios. Each dpm is
copied before the run and the copy is measured, so that a `cargo build`
during a run of several minutes cannot mix two builds.
(scripts/setup.sh points .venv/bin/mpiexec at dpm and keeps Hydra as
mpiexec.hydra: Hydra's own name is the default.)
"""

import os
import shutil

from .paths import ROOT, VENV_BIN, pick
from .proc import is_exe, note

DPM = "dpm"
BASE = "dpm-base"
HYDRA = "hydra"


class Launcher:
    """One launcher under test: name (dpm, dpm-base, hydra), kind (dpm or
    hydra: how its command line is built), the binary run (exe) and where
    it came from (source; the same unless snapshot() copied it)."""

    def __init__(self, name, kind, exe):
        self.name, self.kind, self.exe, self.source = name, kind, exe, exe

    def is_dpm(self):
        return self.kind == DPM

    def command(self, n, prog, options=()):
        """`dpm run OPTIONS -n N PROG...` or `mpiexec OPTIONS -n N PROG...`."""
        head = [self.exe, "run"] if self.is_dpm() else [self.exe]
        return head + list(options) + ["-n", str(n)] + list(prog)

    def __repr__(self):
        return "Launcher(%s, %s)" % (self.name, self.exe)


def add_options(p, hydra=True, mpicc=True, skip=True):
    """The launcher options every runner shares."""
    p.add_argument("--dpm", help="dpm binary (default $BENCH_DPM or target/release/dpm)")
    p.add_argument("--dpm-baseline", metavar="PATH",
                   help="A/B mode: a second dpm build (default $BENCH_DPM_BASELINE; none) that "
                   "alternates with --dpm and Hydra in the same rounds; tables add dpm/dpm-base")
    if hydra:
        p.add_argument("--mpiexec", help="Hydra mpiexec (default $BENCH_MPIEXEC or "
                       ".venv/bin/mpiexec.hydra)")
    if mpicc:
        p.add_argument("--mpicc", help="mpicc for the MPI programs (default $BENCH_MPICC, the "
                       "mpicc next to --mpiexec/$BENCH_MPIEXEC, or .venv/bin/mpicc)")
    if skip:
        p.add_argument("--no-dpm", action="store_true", help="do not run dpm")
        if hydra:
            p.add_argument("--no-hydra", action="store_true", help="do not run Hydra")


def paths_resolve(args):
    """{"dpm", "dpm-base" (or None), "mpiexec", "mpicc"} from the options,
    the environment and the defaults."""
    opt = lambda name: getattr(args, name, None)     # noqa: E731
    paths = {
        DPM: pick(opt("dpm"), "BENCH_DPM", os.path.join(ROOT, "target", "release", "dpm")),
        BASE: pick(opt("dpm_baseline"), "BENCH_DPM_BASELINE", None),
        "mpiexec": pick(opt("mpiexec"), "BENCH_MPIEXEC", os.path.join(VENV_BIN, "mpiexec.hydra")),
    }
    default_cc = os.path.join(VENV_BIN, "mpicc")
    sibling_cc = os.path.join(os.path.dirname(paths["mpiexec"]), "mpicc")
    if (opt("mpiexec") or os.environ.get("BENCH_MPIEXEC")) and is_exe(sibling_cc):
        default_cc = sibling_cc                 # same MPI install as the mpiexec
    paths["mpicc"] = pick(opt("mpicc"), "BENCH_MPICC", default_cc)
    return paths


def available(args, paths, need_dpm=False):
    """The launchers to measure, in turn order (dpm, dpm-base, hydra), with
    a note for each one left out. Exits when --dpm-baseline is given but is
    not a program, or when --mpiexec is dpm itself, or need_dpm and no dpm."""
    out = []
    dpm = paths[DPM]
    if getattr(args, "no_dpm", False):
        note("dpm: skipped (--no-dpm)")
    elif is_exe(dpm):
        out.append(Launcher(DPM, DPM, dpm))
    else:
        note("dpm: not found at %s (build it with `cargo build --release`, or pass --dpm)" % dpm)
    base = paths.get(BASE)
    if base:
        if not is_exe(base):
            raise SystemExit("run: --dpm-baseline %s is not an executable" % base)
        if out and os.path.realpath(base) == os.path.realpath(dpm):
            note("dpm-base: %s is the same file as --dpm: an A/A run" % base)
        out.append(Launcher(BASE, DPM, base))
    mpiexec = paths.get("mpiexec")
    if mpiexec is None:
        pass                                    # a runner without Hydra
    elif getattr(args, "no_hydra", False):
        note("hydra: skipped (--no-hydra)")
    elif not is_exe(mpiexec):
        note("hydra: mpiexec not found at %s (run scripts/setup.sh, or pass --mpiexec)" % mpiexec)
    elif is_exe(dpm) and os.path.realpath(mpiexec) == os.path.realpath(dpm):
        raise SystemExit("run: %s is dpm itself, not Hydra; pass Hydra with --mpiexec "
                         "(scripts/setup.sh keeps it as .venv/bin/mpiexec.hydra)" % mpiexec)
    else:
        out.append(Launcher(HYDRA, HYDRA, mpiexec))
    if need_dpm and not any(ln.name == DPM for ln in out):
        raise SystemExit("run: this benchmark needs dpm")
    return out


def snapshot(launchers, directory):
    """Copy every dpm to directory/<name> and run the copy from now on."""
    os.makedirs(directory, exist_ok=True)
    for ln in launchers:
        if ln.is_dpm():
            copy = os.path.join(directory, ln.name)
            shutil.copy2(ln.source, copy)
            ln.exe = copy
            note("%s: %s (copied from %s)" % (ln.name, copy, ln.source))
        else:
            note("%s: %s" % (ln.name, ln.exe))


def named(launchers):
    return {ln.name: ln for ln in launchers}


# The ratios an A/B table shows, in column order: (numerator, denominator).
def ratio_pairs(names):
    """dpm/hydra, dpm/dpm-base, dpm-base/hydra among the names present."""
    pairs = [(DPM, HYDRA), (DPM, BASE), (BASE, HYDRA)]
    return [(a, b) for a, b in pairs if a in names and b in names]


# Hydra's "virtual nodes": distinct host names that all mean this machine.
def hydra_fork_hosts(nodes):
    """Hydra merges repeated names (localhost,localhost is one proxy) and
    looks every name up; made-up names went to DNS, which here answered
    some queries only after its 5 s timeout. Numeric loopback addresses are
    distinct, need no lookup, and the fork launcher ignores them."""
    return ",".join("127.0.0.%d" % (i + 1) for i in range(nodes))


def vnodes_command(ln, nodes, ppn, n, prog):
    """`nodes` virtual nodes on this machine, ppn ranks each: dpm with
    -launcher fork --virtual-nodes N (without -launcher fork, --virtual-nodes
    1 runs the daemon inside dpm, not as a forked daemon); Hydra with
    -launcher fork and one loopback "host" per node (one proxy each)."""
    if ln.is_dpm():
        opts = ["-launcher", "fork", "--virtual-nodes", str(nodes)]
    else:
        opts = ["-launcher", "fork", "-hosts", hydra_fork_hosts(nodes)]
    return ln.command(n, prog, opts + ["-ppn", str(ppn)])
