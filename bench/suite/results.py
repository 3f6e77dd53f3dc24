"""bench/suite/results.py: read a results directory, pool runs, write summary.md.

Shared by bench/suite/run (summary.md) and bench/suite/plot.py (the PNGs).
Python 3 standard library only.

Pooling: the records of one (launcher, family, test, variant, size, nprocs)
from every run and repetition are merged. When every record kept its raw
samples (the programs keep up to 100), the statistics are recomputed over
all of them; otherwise the median is the median of the runs' medians, min
the smallest min, max the largest max, avg the mean of the averages.
"""

import json
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from dpmbench.table import markdown as table  # noqa: E402

SETS = ["startup", "spawn", "intercomm", "onesided"]


def records_load(directory):
    """All records of <directory>/<set>.jsonl: (configs, results)."""
    configs, results = [], []
    for name in SETS:
        path = os.path.join(directory, name + ".jsonl")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                rec = json.loads(line)
                (configs if rec["type"] == "config" else results).append(rec)
    return configs, results


def variant_key(variant):
    return tuple(sorted((k, str(v)) for k, v in variant.items()))


def percentile(sorted_values, q):
    """Nearest-rank percentile, as the C harness computes p99."""
    if not sorted_values:
        return None
    rank = max(0, math.ceil(q * len(sorted_values)) - 1)
    return sorted_values[rank]


class Agg:
    """One pooled measurement point."""

    def __init__(self, records):
        first = records[0]
        self.launcher = first["launcher"]
        self.family = first["family"]
        self.test = first["test"]
        self.variant = first["variant"]
        self.size = first["size"]
        self.nprocs = first["nprocs"]
        self.unit = first["unit"]
        self.runs = len(records)
        self.extras = [r.get("extra") or {} for r in records]
        self.check = all(r.get("check") for r in records)
        if all("samples" in r for r in records):
            values = sorted(x for r in records for x in r["samples"] if x is not None)
            self.samples = values
            self.n = len(values)
            self.median = statistics.median(values)
            self.min, self.max = values[0], values[-1]
            self.avg = statistics.fmean(values)
            self.stddev = statistics.stdev(values) if len(values) > 1 else 0.0
            self.p99 = percentile(values, 0.99)
            self.q1 = percentile(values, 0.25)
            self.q3 = percentile(values, 0.75)
        else:
            st = [r["stats"] for r in records]
            self.samples = None
            self.n = sum(s["n"] for s in st)
            self.median = statistics.median(s["median"] for s in st)
            self.min = min(s["min"] for s in st)
            self.max = max(s["max"] for s in st)
            self.avg = statistics.fmean(s["avg"] for s in st)
            self.stddev = statistics.fmean(s["stddev"] for s in st)
            self.p99 = max(s["p99"] for s in st)
            self.q1 = self.q3 = None

    def extra_median(self, key):
        values = [e[key] for e in self.extras if isinstance(e.get(key), (int, float))]
        return statistics.median(values) if values else None

    def bandwidth(self):
        """MB/s (10^6 bytes/s) at the median time, or None."""
        scale = {"us": 1e-6, "ms": 1e-3, "s": 1.0}.get(self.unit)
        if not self.size or scale is None or not self.median:
            return None
        return self.size / (self.median * scale) / 1e6


def aggregate(results):
    """{(launcher, family, test, variant_key, size, nprocs): Agg}"""
    groups = {}
    for r in results:
        key = (r["launcher"], r["family"], r["test"], variant_key(r["variant"]), r["size"],
               r["nprocs"])
        groups.setdefault(key, []).append(r)
    return {k: Agg(v) for k, v in groups.items()}


class Index:
    """Pooled points of one results directory, with lookups."""

    def __init__(self, directory):
        self.directory = directory
        self.configs, self.results = records_load(directory)
        self.points = aggregate(self.results)
        path = os.path.join(directory, "config.json")
        self.run = {}
        if os.path.exists(path):
            with open(path) as f:
                self.run = json.load(f)
        order = self.run.get("launchers_run") or []
        seen = {a.launcher for a in self.points.values()}
        self.launchers = [n for n in order if n in seen] + sorted(seen - set(order))

    def select(self, family, test, launcher=None, **variant):
        """Points of family/test whose variant contains the given items."""
        out = []
        for a in self.points.values():
            if a.family != family or a.test != test:
                continue
            if launcher is not None and a.launcher != launcher:
                continue
            if any(str(a.variant.get(k)) != str(v) for k, v in variant.items()):
                continue
            out.append(a)
        return out

    def one(self, family, test, launcher, size=None, nprocs=None, **variant):
        for a in self.select(family, test, launcher, **variant):
            if size is not None and a.size != size:
                continue
            if nprocs is not None and a.nprocs != nprocs:
                continue
            return a
        return None

    def values(self, family, test, key, **variant):
        """Sorted distinct values of a variant key (or 'size', 'nprocs')."""
        vals = set()
        for a in self.select(family, test, **variant):
            v = getattr(a, key) if key in ("size", "nprocs") else a.variant.get(key)
            if v is not None:
                vals.add(v)
        return sorted(vals, key=lambda v: (isinstance(v, str), v))

    def run_stats(self, family, test, launcher, stat, nprocs=None, **variant):
        """One statistic of every run's own record (e.g. each run's max), in run order."""
        out = []
        for r in self.results:
            if (r["family"], r["test"], r["launcher"]) != (family, test, launcher):
                continue
            if nprocs is not None and r["nprocs"] != nprocs:
                continue
            if any(str(r["variant"].get(k)) != str(v) for k, v in variant.items()):
                continue
            out.append(r["stats"][stat])
        return out

    def library(self, launcher):
        for c in self.configs:
            if c["launcher"] == launcher:
                return c["mpi_library"].strip()
        return ""


# ---- formatting --------------------------------------------------------------------

def fmt(x):
    if x is None:
        return ""
    ax = abs(x)
    if ax >= 1000:
        return "%.0f" % x
    if ax >= 100:
        return "%.1f" % x
    if ax >= 10:
        return "%.2f" % x
    if ax >= 1:
        return "%.2f" % x
    return "%.3f" % x


def fmt_size(n):
    if n is None:
        return "-"
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return "%d %s" % (n // div, unit)
    return "%d B" % n


def cell(a, spread=True):
    """'median (min–max)' of a point."""
    if a is None:
        return ""
    if spread and a.n > 1:
        return "%s (%s–%s)" % (fmt(a.median), fmt(a.min), fmt(a.max))
    return fmt(a.median)


def ratio_cols(ix, values, ref="dpm"):
    """'L/dpm' ratio columns for every launcher L but the reference."""
    return [n for n in ix.launchers if n != ref and ref in ix.launchers]


# ---- summary.md -------------------------------------------------------------------------

def summary_startup(ix):
    out = []
    ns = ix.values("startup", "init", "nprocs")
    if not ns:
        return out
    L = ix.launchers
    rows = []
    for n in ns:
        row = [n]
        for name in L:
            row.append(cell(ix.one("startup", "wall", name, nprocs=n)))
        ref = ix.one("startup", "wall", "dpm", nprocs=n)
        for name in ratio_cols(ix, L):
            a = ix.one("startup", "wall", name, nprocs=n)
            row.append("%.2f" % (a.median / ref.median) if a and ref else "")
        rows.append(row)
    out.append("### Startup: hello-world wall time\n\nThe whole launcher command, measured "
               "by the runner (ms, median (min–max) over the repetitions).\n")
    out.append(table(["n"] + ["%s ms" % x for x in L] + ["%s/dpm" % x for x in ratio_cols(ix, L)],
                     rows))
    rows = []
    for n in ns:
        row = [n]
        for name in L:
            a = ix.one("startup", "init", name, nprocs=n)
            last = [x / 1000 for x in ix.run_stats("startup", "launch_to_init", name, "max",
                                                   nprocs=n)]
            row.append("%s / %s / %s" % (fmt(a.min / 1000), fmt(a.median / 1000),
                                         fmt(a.max / 1000)) if a else "")
            row.append("%s (%s–%s)" % (fmt(statistics.median(last)), fmt(min(last)),
                                       fmt(max(last))) if last else "")
        rows.append(row)
    heads = ["n"]
    for name in L:
        heads += ["%s MPI_Init ms min / median / max" % name,
                  "%s launch → last rank out of MPI_Init, ms" % name]
    out.append("\nPer rank: `MPI_Init`'s duration (ms, over all ranks of all repetitions), "
               "and the time from the runner starting the launcher to the last rank "
               "returning from `MPI_Init` (ms, median (min–max) over the repetitions).\n")
    out.append(table(heads, rows))
    return out


def summary_spawn(ix):
    out = []
    L = ix.launchers
    keys = sorted({(a.nprocs, int(a.variant["children"])) for a in ix.select("spawn", "latency")})
    if keys:
        rows = []
        for p, c in keys:
            row = [p, c]
            for name in L:
                row.append(cell(ix.one("spawn", "latency", name, nprocs=p, children=c)))
            ref = ix.one("spawn", "latency", "dpm", nprocs=p, children=c)
            for name in ratio_cols(ix, L):
                a = ix.one("spawn", "latency", name, nprocs=p, children=c)
                row.append("%.2f" % (a.median / ref.median) if a and ref else "")
            row.append(max((a.n for a in ix.select("spawn", "latency", children=c)
                            if a.nprocs == p), default=""))
            rows.append(row)
        out.append("### Spawn latency\n\n`MPI_Comm_spawn` of C children from a P-rank parent, "
                   "timed on the root (ms, median (min–max) over every spawn of every "
                   "repetition; `spawns` is the pooled count per launcher).\n")
        out.append(table(["P", "C"] + ["%s ms" % x for x in L]
                         + ["%s/dpm" % x for x in ratio_cols(ix, L)] + ["spawns"], rows))
        rows = []
        phases = [("start", "start"), ("child_init", "child MPI_Init"), ("ready", "ready"),
                  ("latency", "spawn returns"), ("first_msg", "first msg µs"),
                  ("next_msg", "next msg µs"), ("disconnect", "disconnect")]
        for name in L:
            for p, c in keys:
                if p != keys[0][0]:
                    continue
                row = [name, p, c]
                for test, _ in phases:
                    a = ix.one("spawn", test, name, nprocs=p, children=c)
                    row.append(fmt(a.median) if a else "")
                rows.append(row)
        out.append("\nWhere a spawn's time goes (medians; ms after the root called "
                   "`MPI_Comm_spawn` unless marked µs): `start` the last child entered "
                   "`main()`, `child MPI_Init` the longest `MPI_Init` among the children, "
                   "`ready` the last child returned from it, `spawn returns` the call returned "
                   "on the root; then the first and second ping-pong with child 0 (half round "
                   "trip, µs) and the disconnect (ms).\n")
        out.append(table(["launcher", "P", "C"] + [h for _, h in phases], rows))
    keys = sorted({(a.nprocs, int(a.variant["children"])) for a in ix.select("spawn", "multiple")})
    if keys:
        rows = []
        for p, c in keys:
            rows.append([p, c] + [cell(ix.one("spawn", "multiple", n, nprocs=p, children=c))
                                  for n in L])
        out.append("\n### MPI_Comm_spawn_multiple\n\nTwo commands, ceil(C/2) + floor(C/2) "
                   "children (ms, median (min–max)).\n")
        out.append(table(["P", "C"] + ["%s ms" % x for x in L], rows))
    rates = ix.select("spawn", "rate")
    if rates:
        rows = []
        for name in L:
            a = ix.one("spawn", "rate", name)
            e = ix.one("spawn", "rate_each", name)
            if a is None:
                continue
            count = a.extra_median("count")
            rows.append([name, int(count) if count else "", cell(a), fmt(e.median) if e else "",
                         fmt(e.max) if e else "", a.runs])
        out.append("\n### Spawn rate\n\nPaper 001's method: spawns of one child in a row, "
                   "the children kept alive (asleep) until the last spawn returned. Rate = "
                   "spawns / elapsed time (median (min–max) over the runs); each spawn's own "
                   "time shows whether the launcher slows down as live processes pile up.\n")
        out.append(table(["launcher", "spawns per run", "spawns/s", "each spawn median ms",
                          "each spawn max ms", "runs"], rows))
    return out


COMMS = ["world", "merged", "spawn", "connect", "join"]


def summary_intercomm(ix):
    out = []
    L = ix.launchers
    pts = ix.select("intercomm", "pingpong")
    if pts:
        sizes = sorted({a.size for a in pts})
        small, large = sizes[0], sizes[-1]
        rows = []
        for name in L:
            for comm in COMMS:
                lat = ix.one("intercomm", "pingpong", name, size=small, comm=comm)
                if lat is None:
                    continue
                kb = ix.one("intercomm", "pingpong", name, size=1024, comm=comm)
                big = ix.one("intercomm", "pingpong", name, size=large, comm=comm)
                create = ix.one("intercomm", "create", name, comm=comm)
                first = ix.one("intercomm", "first_msg", name, comm=comm)
                nxt = ix.one("intercomm", "next_msg", name, comm=comm)
                rows.append([name, comm, fmt(create.median) if create else "—",
                             fmt(first.median) if first else "", fmt(nxt.median) if nxt else "",
                             fmt(lat.median), fmt(kb.median) if kb else "",
                             fmt(big.bandwidth()) if big else ""])
        out.append("### Inter- vs intra-communicator ping-pong\n\nTwo processes; half round "
                   "trip in µs (medians). `create`: making the communicator (the spawn, "
                   "`MPI_Intercomm_merge`, `MPI_Comm_accept`, `MPI_Comm_join`; µs); "
                   "`first`/`next`: the first and second 1-byte message on it (the first "
                   "pays any on-demand connection); then the latency at %s and 1 KiB and "
                   "the bandwidth at %s (MB/s).\n" % (fmt_size(small), fmt_size(large)))
        out.append(table(["launcher", "comm", "create µs", "first µs", "next µs",
                          "%s µs" % fmt_size(small), "1 KiB µs", "%s MB/s" % fmt_size(large)],
                         rows))
    tests = [("publish", "MPI_Publish_name"), ("lookup", "MPI_Lookup_name"),
             ("unpublish", "MPI_Unpublish_name"), ("open_port", "MPI_Open_port"),
             ("close_port", "MPI_Close_port"), ("accept", "MPI_Comm_accept"),
             ("connect", "MPI_Comm_connect"), ("merge", "MPI_Intercomm_merge"),
             ("disconnect", "MPI_Comm_disconnect")]
    rows = []
    for test, label in tests:
        row = [label]
        found = False
        for name in L:
            a = ix.one("intercomm", test, name)
            found = found or a is not None
            row.append(cell(a))
        if found:
            rows.append(row)
    if rows:
        out.append("\n### Name service and connection costs\n\nµs, median (min–max): "
                   "publish/lookup/unpublish between two ranks; accept/connect/merge/"
                   "disconnect of a fresh 1+1 connection, repeated.\n")
        out.append(table(["operation"] + ["%s µs" % x for x in L], rows))
    return out


SYNCS = ["sendrecv", "fence", "pscw", "lock", "lockall"]
MEMS = ["malloc", "allocmem", "winalloc"]


def summary_onesided(ix):
    out = []
    L = ix.launchers
    if ix.select("onesided", "sync"):
        rows = []
        size = ix.values("onesided", "sync", "size")
        for name in L:
            for mem in MEMS:
                row = [name, mem]
                found = False
                for sync in SYNCS:
                    a = ix.one("onesided", "sync", name, sync=sync, mem=mem)
                    found = found or a is not None
                    row.append(fmt(a.median) if a else "")
                if found:
                    rows.append(row)
        out.append("### One-sided synchronisation cost (paper 003, Table 2)\n\nOne %s-byte "
                   "`MPI_Put` (`sendrecv`: `MPI_Send`/`MPI_Recv`), µs, median. fence and pscw: "
                   "half a ping-pong of epochs; lock: lock+put+unlock; lockall: put+flush "
                   "inside `MPI_Win_lock_all`. `malloc`/`allocmem`: `MPI_Win_create` on "
                   "malloc'd / `MPI_Alloc_mem` memory; `winalloc`: `MPI_Win_allocate`.\n"
                   % (size[0] if size else 4))
        out.append(table(["launcher", "memory"] + SYNCS, rows))
    pts = ix.select("onesided", "rma")
    if pts:
        sizes = sorted({a.size for a in pts})
        small, large = sizes[0], sizes[-1]
        combos = sorted({(a.variant["op"], a.variant["sync"], a.variant["mem"]) for a in pts},
                        key=lambda c: (MEMS.index(c[2]) if c[2] in MEMS else 9,
                                       SYNCS.index(c[1]) if c[1] in SYNCS else 9, c[0]))
        rows = []
        for op, sync, mem in combos:
            row = [op, sync, mem]
            for name in L:
                a = ix.one("onesided", "rma", name, size=small, op=op, sync=sync, mem=mem)
                b = ix.one("onesided", "rma", name, size=large, op=op, sync=sync, mem=mem)
                row += [fmt(a.median) if a else "", fmt(b.bandwidth()) if b else ""]
            rows.append(row)
        heads = ["op", "sync", "memory"]
        for name in L:
            heads += ["%s %s µs" % (name, fmt_size(small)), "%s %s MB/s" % (name, fmt_size(large))]
        out.append("\n### One-sided latency and bandwidth\n\nLatency at the smallest size "
                   "(µs, median) and bandwidth at the largest (MB/s at the median time). "
                   "acc is `MPI_Accumulate` of `MPI_INT` with `MPI_SUM` (from 4 bytes).\n")
        out.append(table(heads, rows))
    pts = ix.select("onesided", "dtype")
    if pts:
        sizes = sorted({a.size for a in pts})
        pick = [s for s in (1024, 65536, sizes[-1]) if s in sizes] or sizes[-1:]
        pick = sorted(set(pick))
        rows = []
        for xfer in ("put", "sendrecv"):
            for dtype in ("contig", "vector", "indexed"):
                row = [xfer, dtype]
                for name in L:
                    for s in pick:
                        a = ix.one("onesided", "dtype", name, size=s, xfer=xfer, dtype=dtype)
                        row.append(fmt(a.median) if a else "")
                rows.append(row)
        heads = ["transfer", "datatype"] + ["%s %s µs" % (n, fmt_size(s)) for n in L for s in pick]
        out.append("\n### Derived datatypes\n\nThe same payload as contiguous bytes, a vector "
                   "(every other double) or an indexed type (blocks of 1–4 doubles with gaps), "
                   "on both sides; put with fence vs send/recv ping-pong (µs, median).\n")
        out.append(table(heads, rows))
    pts = ix.select("onesided", "multi")
    if pts:
        sizes = sorted({a.size for a in pts})
        pick = sorted({s for s in (64, 4096, 65536, sizes[-1]) if s in sizes}) or sizes[-1:]
        nputs = ix.values("onesided", "multi", "nputs")
        rows = []
        for name in L:
            for n in nputs:
                row = [name, n]
                for s in pick:
                    a = ix.one("onesided", "multi", name, size=s, nputs=n)
                    row.append(fmt(a.median) if a else "")
                rows.append(row)
        sync = pts[0].variant.get("sync", "")
        out.append("\n### n puts vs one put\n\nThe same bytes moved by n `MPI_Put`s of size/n "
                   "in one %s epoch (µs, median): a library that merged them would show no "
                   "growth with n.\n" % sync)
        out.append(table(["launcher", "n puts"] + [fmt_size(s) for s in pick], rows))
    pts = ix.select("onesided", "overlap")
    if pts:
        sizes = sorted({a.size for a in pts})
        pick = sorted({s for s in (4096, 65536, sizes[-1]) if s in sizes}) or sizes[-1:]
        rows = []
        for name in L:
            for sync in ("fence", "lock"):
                for s in pick:
                    a = ix.one("onesided", "overlap", name, size=s, sync=sync)
                    if a is None:
                        continue
                    rows.append([name, sync, fmt_size(s), fmt(a.extra_median("comm_us")),
                                 fmt(a.extra_median("compute_us")), fmt(a.median),
                                 fmt(a.extra_median("ratio")), fmt(a.extra_median("overlap"))])
        out.append("\n### Overlap of computation and one-sided transfer\n\nThe target computes "
                   "for about as long as the transfer takes while the origin puts (µs). ratio = "
                   "both / transfer alone: about 1 means the transfer progressed during the "
                   "computation, about 2 that it waited for it; overlap = (comm + compute − "
                   "both) / min(comm, compute).\n")
        out.append(table(["launcher", "sync", "size", "transfer alone", "compute",
                          "both", "ratio", "overlap"], rows))
    pts = ix.select("onesided", "win_create")
    if pts:
        kinds = ix.values("onesided", "win_create", "kind")
        sizes = ix.values("onesided", "win_create", "bytes")
        rows = []
        for kind in kinds:
            for s in sizes:
                row = [kind, fmt_size(int(s))]
                for name in L:
                    a = ix.one("onesided", "win_create", name, kind=kind, bytes=s)
                    f = ix.one("onesided", "win_free", name, kind=kind, bytes=s)
                    row.append("%s / %s" % (fmt(a.median), fmt(f.median)) if a and f else "")
                rows.append(row)
        for kind in ("malloc", "allocmem"):
            for s in sizes:
                row = ["alloc: %s" % kind, fmt_size(int(s))]
                for name in L:
                    a = ix.one("onesided", "mem_alloc", name, kind=kind, bytes=s)
                    row.append(fmt(a.median) if a else "")
                rows.append(row)
        out.append("\n### Window creation\n\nCreate / free (µs, median, collective over the "
                   "2 ranks): `create` = `MPI_Win_create` on malloc'd memory, `allocmem` on "
                   "`MPI_Alloc_mem` memory, `allocate` = `MPI_Win_allocate`, `dynamic` = "
                   "`MPI_Win_create_dynamic` + attach, `shared` = `MPI_Win_allocate_shared`; "
                   "last rows: the allocation alone, `malloc` vs `MPI_Alloc_mem`.\n")
        out.append(table(["window", "bytes"] + ["%s µs" % n for n in L], rows))
    return out


def summary_markdown(directory, failures=None, notes=None, plots=None):
    ix = Index(directory)
    run = ix.run
    parts = ["# Benchmark results\n"]
    meta = run.get("machine", {})
    parts.append("%s on %s (%s cores, %s), commit %s; mode %s; load average %s at the "
                 "start, %s at the end; %.0f s.\n" % (
                     run.get("date", "?"), meta.get("host", "?"), meta.get("cores", "?"),
                     meta.get("kernel", "?"), run.get("commit", "?"), run.get("mode", "?"),
                     " ".join("%.1f" % x for x in meta.get("loadavg_start", [])),
                     " ".join("%.1f" % x for x in meta.get("loadavg_end", [])),
                     run.get("seconds", 0)))
    rows = []
    for name in ix.launchers:
        info = run.get("launchers", {}).get(name, {})
        rows.append([name, "`%s`" % info.get("command", ""), ix.library(name),
                     info.get("version", "")])
    parts.append(table(["launcher", "command", "MPI library", "launcher version"], rows))
    for name, why in (run.get("skipped") or {}).items():
        parts.append("- %s: skipped: %s\n" % (name, why))
    if notes:
        parts.append("".join("- %s\n" % n for n in notes))
    parts.append("\n")
    for section in (summary_startup, summary_spawn, summary_intercomm, summary_onesided):
        body = section(ix)
        if body:
            parts.append("\n".join(body) + "\n")
    if plots:
        parts.append("### Plots\n\n" + "".join("![%s](%s)\n\n" % (p, p) for p in plots))
    if failures:
        parts.append("### Failures\n\n")
        for f in failures:
            parts.append("- %s %s rep %d: %s\n" % (f["case"], f["launcher"], f["rep"],
                                                    f["error"].replace("\n", " ")))
    return "".join(parts)
