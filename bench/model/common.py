"""bench/model/common.py: what calibrate, validate and project share.

Owns: the paths of bench/model, one timed command with its CPU time
(wait4's rusage covers the command and every descendant it reaped: dpm's
daemons and their ranks), spreads (median, p10, p90) in the calibration
file's form, per-round slopes, the calibration file's reading and
checking, and `dpm model --json` when the dpm at hand has it.
Standard library only (numpy/matplotlib only in project).
"""

import contextlib
import fcntl
import importlib.machinery
import importlib.util
import json
import os
import platform
import resource
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
ROOT = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)

from dpmbench import provenance  # noqa: E402
from dpmbench.proc import group_kill, note  # noqa: E402,F401
from dpmbench.stats import quantile  # noqa: E402

BIN = os.path.join(HERE, "bin")
# Embedded into dpm (dpm_cluster::calibration::BUILT_IN_JSON) from the crate.
CALIBRATION = os.path.join(ROOT, "crates", "cluster", "calibration", "polyglot.json")
DPM = os.environ.get("BENCH_DPM") or os.path.join(ROOT, "target", "release", "dpm")
SCHEMA = 1
# The names the contract with dpm_cluster::calibration requires
# (daemon_start_slurm may be absent when Slurm is not up).
REQUIRED = ["daemon_start_fork", "daemon_start_ssh", "link_auth", "link_hop", "link_byte",
            "rank_fork_exec", "mpi_lib_start", "pmi_local_request", "pmi_remote_get",
            "fence_per_node", "spawn_base"]
PER = ("op", "byte", "rank", "node")
# Cold runs: a booted tree on this machine must not take the jobs.
COLD = {"DPM_NO_BOOT": "1"}


class Timed:
    """One command's outcome: wall seconds, CPU seconds (user+sys of it and
    its reaped descendants), stdout text, error (None on success)."""

    def __init__(self, wall, cpu, out, error):
        self.wall, self.cpu, self.out, self.error = wall, cpu, out, error


def timed(cmd, timeout=120, env=None, capture=False, cold=True):
    """Run cmd in its own session, stdin an open pipe (see dpmbench.proc),
    wait with wait4 for its rusage; kill the group on timeout. cold: with
    DPM_NO_BOOT=1 (no booted tree takes the job)."""
    full_env = dict(os.environ, **(COLD if cold else {}), **(env or {}))
    t0 = time.perf_counter()
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
                                stderr=subprocess.PIPE, start_new_session=True, env=full_env)
    except OSError as e:
        return Timed(None, None, None, "cannot start %s: %s" % (cmd[0], e))
    fired = []
    watchdog = threading.Timer(timeout, group_kill, (proc.pid, fired))
    watchdog.start()
    out = err = b""
    try:
        if capture:
            out = proc.stdout.read()
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
    except BaseException:
        watchdog.cancel()
        group_kill(proc.pid)
        raise
    wall = time.perf_counter() - t0
    watchdog.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stdin.close()
    cpu = usage.ru_utime + usage.ru_stime
    if fired or proc.returncode != 0:
        group_kill(proc.pid)
        why = "timed out after %g s" % timeout if fired else "exit status %d" % proc.returncode
        tail = err.decode(errors="replace").strip().splitlines()[-4:]
        return Timed(None, None, None, why + "".join("\n    " + t for t in tail) + "\n    " + " ".join(cmd))
    return Timed(wall, cpu, out.decode(errors="replace") if capture else None, None)


def must(t):
    """The Timed itself, or SystemExit with its error."""
    if t.error:
        raise SystemExit("bench/model: a run failed: " + t.error)
    return t


def spread(values_us, per, **extra):
    """A cost in the calibration file's form from samples in µs. A negative
    median (a difference lost in noise) is a measurement error, not a cost."""
    vals = sorted(values_us)
    if not vals:
        raise ValueError("no samples")
    med = quantile(vals, 0.5)
    cost = {"median_us": med, "p10_us": min(max(quantile(vals, 0.1), 0.0), med),
            "p90_us": max(quantile(vals, 0.9), med), "n": len(vals), "per": per}
    cost.update(extra)
    return cost


def slope(xs, ys):
    """Least-squares slope and intercept of ys against xs."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return b, my - b * mx


def bare_start_us(prog, n=64):
    """CPU (user+sys, the children's rusage) of one start and exit of `prog`
    with no launcher: posix_spawn and wait, n times, per process in µs. The
    machine's own price of a process (its kernel, its hypervisor): beside
    `rank_fork_exec` it tells a machine that moved from a dpm that did."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(n):
        pid = os.posix_spawn(prog, [prog], {})
        os.waitpid(pid, 0)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ((r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)) / n * 1e6


def machine():
    return {"host": platform.node(), "cpus": os.cpu_count(), "kernel": platform.release(),
            "loadavg": list(os.getloadavg())}


def _cpu_ticks():
    """(busy, total) jiffies over all CPUs from /proc/stat: busy counts
    user, nice, system, irq, softirq and steal (a hypervisor's other guests)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return sum(v[:8]) - idle, sum(v[:8])


def others_cpus(seconds=0.25):
    """How many of this machine's CPUs others keep busy: /proc/stat over
    `seconds` while this benchmark runs nothing (0: quiet; os.cpu_count():
    saturated)."""
    b0, t0 = _cpu_ticks()
    time.sleep(seconds)
    b1, t1 = _cpu_ticks()
    return (b1 - b0) / max(t1 - t0, 1) * os.cpu_count()


class Cgroup:
    """A cgroup of this process's own (and so of all it starts, orphans
    included); `usage()` is its CPU in seconds. Needs the right to make one
    (root)."""

    def __init__(self, what, join=True):
        name = "dpm-model-%s-%d" % (what, os.getpid())
        self.joined = join
        v1 = "/sys/fs/cgroup/cpuacct"
        v2 = "/sys/fs/cgroup/unified" if os.path.isdir("/sys/fs/cgroup/unified") else "/sys/fs/cgroup"
        if os.path.exists(os.path.join(v1, "cpuacct.usage")):
            self.path, self.v2 = os.path.join(v1, name), False
            self.parent = v1
        elif os.path.exists(os.path.join(v2, "cgroup.procs")):
            self.path, self.v2 = os.path.join(v2, name), True
            self.parent = v2
        else:
            raise SystemExit("bench/model: no cgroup cpuacct (v1) or cgroup v2 here")
        try:
            os.mkdir(self.path)
            if join:
                self.join()
        except OSError as e:
            raise SystemExit("bench/model: cannot make or join a cgroup (%s): run it as root" % e)

    def join(self):
        """Move the calling process in (also as a child's preexec_fn)."""
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    def usage(self):
        if self.v2:
            with open(os.path.join(self.path, "cpu.stat")) as f:
                return next(int(l.split()[1]) for l in f if l.startswith("usage_usec")) / 1e6
        with open(os.path.join(self.path, "cpuacct.usage")) as f:
            return int(f.read()) / 1e9

    def close(self):
        if self.joined:
            with open(os.path.join(self.parent, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except OSError:
                time.sleep(0.1)     # a cleaner still ending
        note("warning: %s left behind (busy)" % self.path)


def commit():
    return provenance.git_commit(ROOT) or "unknown"


def check_calibration(doc):
    """The checks dpm_cluster::calibration makes, in Python: a list of
    problems (empty: valid)."""
    bad = []
    if doc.get("schema") != SCHEMA:
        bad.append("schema is %r, not %d" % (doc.get("schema"), SCHEMA))
    m = doc.get("machine") or {}
    if not m.get("host") or not isinstance(m.get("cpus"), int) or m["cpus"] < 1:
        bad.append("machine needs host and cpus >= 1")
    for key in ("commit", "date"):
        if not isinstance(doc.get(key), str) or not doc[key]:
            bad.append("%s missing" % key)
    costs = doc.get("costs") or {}
    for name in REQUIRED:
        if name not in costs:
            bad.append("cost %s missing" % name)
    for name, c in costs.items():
        try:
            lo, med, hi = float(c["p10_us"]), float(c["median_us"]), float(c["p90_us"])
            ok = 0 <= lo <= med <= hi and med > 0 and int(c["n"]) >= 1 and c["per"] in PER
            ok = ok and all(v == v and v != float("inf") for v in (lo, med, hi))
        except (KeyError, TypeError, ValueError):
            ok = False
        if not ok:
            bad.append("cost %s is not a spread (p10 <= median <= p90, median > 0, n >= 1, per): %r"
                       % (name, c))
    return bad


def load_calibration(path=CALIBRATION):
    with open(path) as f:
        doc = json.load(f)
    bad = check_calibration(doc)
    if bad:
        raise SystemExit("bench/model: %s is not a valid calibration:\n  %s" % (path, "\n  ".join(bad)))
    return doc


def cost_s(cal, name, default=None):
    """A cost's median in seconds (None/default when absent)."""
    c = cal["costs"].get(name)
    return c["median_us"] / 1e6 if c else default


def dpm_has_model(dpm=DPM):
    try:
        r = subprocess.run([dpm, "model", "--help"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


def dpm_model(nodes, ppn, kvs=None, fanout=None, bootstrap="fork", booted=False,
              workload="hello", calibration=CALIBRATION, dpm=DPM, timeout=300,
              one_host_cores=None):
    """`dpm model ... --json` as a dict, or {"error": text}. one_host_cores:
    every node on one host of that many cores (`--one-host --cores C`)."""
    cmd = [dpm, "model", "--nodes", str(nodes), "--ppn", str(ppn), "--bootstrap", bootstrap,
           "--workload", workload, "--calibration", calibration, "--json"]
    if one_host_cores:
        cmd += ["--one-host", "--cores", str(one_host_cores)]
    if kvs:
        cmd += ["--kvs", kvs]
    if fanout:
        cmd += ["--tree-fanout", str(fanout)]
    if booted:
        cmd.append("--booted")
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": str(e)}
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]}
    try:
        return json.loads(r.stdout)
    except ValueError:
        return {"error": "not JSON: " + r.stdout[:200]}


def nofile_raise():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def on_sigterm():
    """SIGTERM unwinds like Ctrl-C, so every `finally` (fixtures, locks) runs."""
    def raise_interrupt(*_):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, raise_interrupt)


FIXTURES_LOCK = "/tmp/dpm-fixtures.lock"


class Skip(Exception):
    """A section that cannot run here, with the reason."""


def load_scale():
    """bench/scale/run as a module: its netns fixture, lock and h0 worker."""
    path = os.path.join(BENCH, "scale", "run")
    loader = importlib.machinery.SourceFileLoader("bench_scale", path)
    spec = importlib.util.spec_from_loader("bench_scale", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod, path


@contextlib.contextmanager
def flocked(path, what):
    """flock(2) on path (as flock(1) and the tests' FixtureLock take it)."""
    with open(path, "a") as f:
        note("%s: waiting for %s ..." % (what, path))
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


@contextlib.contextmanager
def slurm():
    """The Slurm fixture (tests/fixtures/slurm.sh: slurmctld and slurmd n1..n4
    on this machine) up, under the machine-wide fixtures lock and the slurm
    test's own: yields a function that prefixes a client command
    (`slurm.sh exec CMD`). Raises Skip when it cannot come up (exit 77:
    not root, no Slurm); always takes it down again."""
    script = os.path.join(ROOT, "tests", "fixtures", "slurm.sh")
    tmp = os.environ.get("TMPDIR") or "/tmp"
    with flocked(FIXTURES_LOCK, "slurm"), flocked(os.path.join(tmp, "dpm-slurm-test.lock"), "slurm"):
        try:
            up = subprocess.run(["bash", script, "up"], stdin=subprocess.DEVNULL,
                                capture_output=True, text=True, timeout=120)
            if up.returncode != 0:
                raise Skip("Slurm fixture did not come up (exit %d): %s" % (
                    up.returncode, " / ".join(up.stderr.strip().splitlines()[-2:])))
            yield lambda cmd: ["bash", script, "exec"] + cmd
        finally:
            down = subprocess.run(["bash", script, "down"], stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=120)
            if down.returncode != 0:
                note("warning: slurm.sh down failed: " + down.stderr.strip())


@contextlib.contextmanager
def netns():
    """The netns ssh hosts h1..h4 up (bench/scale's fixture, under the
    machine-wide fixtures lock and the fixture's own), and a worker in h0
    that times commands there: yields (worker, ssh_command). Raises Skip
    when the fixture cannot come up; always takes it down again."""
    scale, scale_path = load_scale()
    with flocked(FIXTURES_LOCK, "netns"):
        lock = scale.Lock(300)
        worker = None
        try:
            up = scale.fixture("up")
            if up.returncode != 0:
                raise Skip("netns fixture did not come up: " +
                           " / ".join(up.stderr.strip().splitlines()[-2:]))
            info = dict(line.split("=", 1) for line in up.stdout.splitlines() if "=" in line)
            worker = scale.WorkerRunner(["bash", scale.FIXTURE, "exec", "h0", sys.executable,
                                         scale_path, "--worker"])
            yield worker, info["SSH_COMMAND"]
        finally:
            if worker is not None:
                worker.close()
            down = scale.fixture("down")
            if down.returncode != 0:
                note("warning: netns fixture down failed: " + down.stderr.strip())
            lock.release()


def ssh_hosts(n):
    return ",".join("h%d" % (i + 1) for i in range(n))


DOC = os.path.join(ROOT, "docs", "model.md")


def docs_block(name, text):
    """Replace docs/model.md's block between `<!-- NAME:begin -->` and
    `<!-- NAME:end -->` with text (a generated table); say so if absent."""
    begin, end = "<!-- %s:begin -->" % name, "<!-- %s:end -->" % name
    try:
        with open(DOC) as f:
            doc = f.read()
    except OSError:
        note("docs/model.md not found: the %s block is not written" % name)
        return
    if begin not in doc or end not in doc:
        note("docs/model.md has no %s markers: the block is not written" % name)
        return
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    with open(DOC, "w") as f:
        f.write("%s%s\n%s\n%s%s" % (head, begin, text.strip(), end, tail))
