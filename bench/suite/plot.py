#!/usr/bin/env python3
"""bench/suite/plot.py: the PNG plots of a bench/run results directory.

    .venv/bin/python bench/suite/plot.py RESULTS_DIR [--out DIR]

Reads RESULTS_DIR/*.jsonl and config.json (pooled as in results.py) and
writes, for the sets present:
  startup.png              hello-world wall time and launch→MPI_Init vs ranks
  spawn_latency.png        MPI_Comm_spawn latency vs children, per launcher
                           (P=1 solid, P=2 dashed), spawn_multiple, spawn rate
  spawn_phases.png         where a spawn's time goes, per launcher
  intercomm_latency.png    ping-pong latency vs size per communicator
  intercomm_bandwidth.png  ping-pong bandwidth vs size per communicator
  onesided_sync.png        the synchronisation-cost table (4-byte put) as bars
  onesided_bandwidth.png   put/get/accumulate bandwidth vs size per sync
  onesided_extra.png       derived datatypes, n puts vs one, overlap
It prints the name of every file written. Needs matplotlib (scripts/setup.sh --tests
puts it in .venv); renders with the Agg backend.
"""

import argparse
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import results  # noqa: E402

COLORS = {"dpm": "#1f77b4", "hydra": "#ff7f0e", "openmpi": "#2ca02c", "srun": "#9467bd",
          "dpm-daemons": "#17becf"}
OTHER = ["#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#d62728"]
LINE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"]
DPI = 90


def color(ix, name):
    if name in COLORS:
        return COLORS[name]
    others = [n for n in ix.launchers if n not in COLORS]
    return OTHER[others.index(name) % len(OTHER)] if name in others else "#333333"


def size_label(x, _pos=None):
    x = int(round(x))
    for unit, div in (("M", 1 << 20), ("K", 1 << 10)):
        if x >= div and x % div == 0:
            return "%d%s" % (x // div, unit)
    return str(x)


def size_axis(ax):
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(size_label))
    ax.set_xlabel("message size (bytes)")


def label(ix, name):
    """'dpm (MPICH 5.0.2)': the launcher and its library's first words."""
    lib = ix.library(name).replace("Version:", "").split()
    short = " ".join(lib[:3]) if lib else ""
    return "%s (%s)" % (name, short) if short else name


def save(fig, out_dir, name, written):
    path = os.path.join(out_dir, name)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    try:                        # a 256-colour palette: a third of the size, same look
        from PIL import Image

        with Image.open(path) as img:
            small = img.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
        small.save(path, optimize=True)
    except ImportError:
        pass
    written.append(name)


def errbars(points, attr_lo="min", attr_hi="max"):
    lo = [p.median - (getattr(p, attr_lo) if getattr(p, attr_lo) is not None else p.median)
          for p in points]
    hi = [(getattr(p, attr_hi) if getattr(p, attr_hi) is not None else p.median) - p.median
          for p in points]
    return [lo, hi]


# ---- startup -----------------------------------------------------------------------------

def plot_startup(ix, out_dir, written):
    if not ix.select("startup", "wall"):
        return
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for name in ix.launchers:
        pts = sorted(ix.select("startup", "wall", name), key=lambda p: p.nprocs)
        if not pts:
            continue
        a1.errorbar([p.nprocs for p in pts], [p.median for p in pts], yerr=errbars(pts),
                    marker="o", capsize=3, color=color(ix, name), label=label(ix, name))
        for test, style, marker, what in (("launch_to_init", "-", "o", "out of MPI_Init"),
                                          ("launch_to_main", "--", "s", "in main()")):
            ns = sorted(p.nprocs for p in ix.select("startup", test, name))
            if not ns:
                continue
            runs = [[x / 1000 for x in ix.run_stats("startup", test, name, "max", nprocs=n)]
                    for n in ns]
            med = [statistics.median(r) for r in runs]
            a2.errorbar(ns, med, yerr=[[m - min(r) for m, r in zip(med, runs)],
                                       [max(r) - m for m, r in zip(med, runs)]],
                        marker=marker, linestyle=style, capsize=3, color=color(ix, name),
                        label="%s: last rank %s" % (name, what))
    for ax in (a1, a2):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(size_label))
        ax.set_xlabel("ranks (n)")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
    a1.set_ylabel("ms")
    a1.set_title("hello-world wall time (median, min–max)")
    a2.set_ylabel("ms (median, min–max over repetitions)")
    a2.set_title("from starting the launcher to the last rank ...")
    a1.legend(fontsize=8)
    a2.legend(fontsize=7)
    save(fig, out_dir, "startup.png", written)


# ---- spawn --------------------------------------------------------------------------------

def plot_spawn(ix, out_dir, written):
    lat = ix.select("spawn", "latency")
    rates = ix.select("spawn", "rate")
    if not lat and not rates:
        return
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2), gridspec_kw={"width_ratios": [3, 3, 2]})
    for test, ax, title in (("latency", axes[0], "MPI_Comm_spawn latency"),
                            ("multiple", axes[1], "MPI_Comm_spawn_multiple (2 commands)")):
        for name in ix.launchers:
            for p_ranks, style, marker in ((1, "-", "o"), (2, "--", "s")):
                pts = sorted((p for p in ix.select("spawn", test, name) if p.nprocs == p_ranks),
                             key=lambda p: int(p.variant["children"]))
                if not pts:
                    continue
                ax.errorbar([int(p.variant["children"]) for p in pts], [p.median for p in pts],
                            yerr=errbars(pts, "q1", "q3"), linestyle=style, marker=marker,
                            capsize=3, color=color(ix, name),
                            label="%s, P=%d" % (name, p_ranks))
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(size_label))
        ax.set_yscale("log")
        ax.set_xlabel("children per spawn (C)")
        ax.set_ylabel("ms (median, quartiles)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    ax = axes[2]
    names, values, errs = [], [], [[], []]
    for name in ix.launchers:
        p = ix.one("spawn", "rate", name)
        if p:
            names.append(name)
            values.append(p.median)
            errs[0].append(p.median - p.min)
            errs[1].append(p.max - p.median)
    if names:
        bars = ax.bar(names, values, yerr=errs, capsize=4,
                      color=[color(ix, n) for n in names])
        for bar, v in zip(bars, values):
            ax.annotate("%.3g" % v, (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=8, xytext=(0, 2),
                        textcoords="offset points")
        count = ix.one("spawn", "rate", names[0]).extra_median("count")
        ax.set_title("spawn rate (%d spawns, children kept alive)" % (count or 0))
        ax.set_ylabel("spawns / s (median, min–max)")
        ax.grid(True, axis="y", alpha=0.3)
    save(fig, out_dir, "spawn_latency.png", written)


def plot_spawn_phases(ix, out_dir, written):
    names = [n for n in ix.launchers if ix.select("spawn", "latency", n)]
    if not names:
        return
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names) + 1, 4), squeeze=False,
                             sharey=True)
    for ax, name in zip(axes[0], names):
        pts = sorted((p for p in ix.select("spawn", "latency", name) if p.nprocs == 1),
                     key=lambda p: int(p.variant["children"]))
        cs = [int(p.variant["children"]) for p in pts]
        start, ready, ret = [], [], []
        for c in cs:
            s = ix.one("spawn", "start", name, nprocs=1, children=c)
            r = ix.one("spawn", "ready", name, nprocs=1, children=c)
            t = ix.one("spawn", "latency", name, nprocs=1, children=c)
            start.append(s.median if s else 0)
            ready.append(max(0, (r.median if r else 0) - (s.median if s else 0)))
            ret.append(max(0, (t.median if t else 0) - (r.median if r else 0)))
        x = list(range(len(cs)))
        ax.bar(x, start, color="#9ecae1", label="to the last child's main()")
        ax.bar(x, ready, bottom=start, color="#3182bd", label="children's MPI_Init")
        ax.bar(x, ret, bottom=[a + b for a, b in zip(start, ready)], color="#fd8d3c",
               label="until spawn returns")
        ax.set_xticks(x, [str(c) for c in cs])
        ax.set_xlabel("children (parent: 1 rank)")
        ax.set_title(name)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0][0].set_ylabel("ms after MPI_Comm_spawn was called (medians)")
    axes[0][0].legend(fontsize=8)
    save(fig, out_dir, "spawn_phases.png", written)


# ---- intercomm -------------------------------------------------------------------------------

def plot_intercomm(ix, out_dir, written):
    names = [n for n in ix.launchers if ix.select("intercomm", "pingpong", n)]
    if not names:
        return
    for kind in ("latency", "bandwidth"):
        fig, axes = plt.subplots(1, len(names), figsize=(4.6 * len(names) + 0.5, 4.2),
                                 squeeze=False, sharey=True)
        for ax, name in zip(axes[0], names):
            for i, comm in enumerate(results.COMMS):
                pts = sorted(ix.select("intercomm", "pingpong", name, comm=comm),
                             key=lambda p: p.size)
                if not pts:
                    continue
                xs = [p.size for p in pts]
                if kind == "latency":
                    ax.plot(xs, [p.median for p in pts], marker=".", color=LINE[i], label=comm)
                    first = ix.one("intercomm", "first_msg", name, comm=comm)
                    if first:
                        ax.plot([1], [first.median], marker="*", markersize=10, color=LINE[i],
                                linestyle="none")
                else:
                    ax.plot(xs, [p.bandwidth() for p in pts], marker=".", color=LINE[i],
                            label=comm)
            size_axis(ax)
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
            ax.set_title(label(ix, name))
            if ax is axes[0][0]:
                ax.set_ylabel("half round trip, µs (median)" if kind == "latency"
                              else "MB/s (at the median time)")
            if kind == "latency":
                ax.plot([], [], marker="*", color="gray", linestyle="none",
                        label="first message (★)")
            ax.legend(fontsize=8)
        fig.suptitle("ping-pong over MPI_COMM_WORLD, a merged intracommunicator and "
                     "spawn / connect-accept / join intercommunicators", fontsize=10)
        save(fig, out_dir, "intercomm_%s.png" % kind, written)


# ---- onesided ------------------------------------------------------------------------------

def plot_onesided_sync(ix, out_dir, written):
    names = [n for n in ix.launchers if ix.select("onesided", "sync", n)]
    if not names:
        return
    fig, axes = plt.subplots(1, len(names), figsize=(4.6 * len(names) + 0.5, 4.2),
                             squeeze=False, sharey=True)
    width = 0.27
    for ax, name in zip(axes[0], names):
        for j, mem in enumerate(results.MEMS):
            vals = []
            for sync in results.SYNCS:
                p = ix.one("onesided", "sync", name, sync=sync, mem=mem)
                vals.append(p.median if p else float("nan"))
            xs = [i + (j - 1) * width for i in range(len(results.SYNCS))]
            bars = ax.bar(xs, vals, width, label=mem, color=LINE[j])
            for bar, v in zip(bars, vals):
                if v == v:
                    ax.annotate("%.2g" % v, (bar.get_x() + bar.get_width() / 2, v),
                                ha="center", va="bottom", fontsize=6, rotation=90,
                                xytext=(0, 2), textcoords="offset points")
        ax.set_xticks(range(len(results.SYNCS)), results.SYNCS)
        ax.set_yscale("log")
        ax.grid(True, axis="y", which="both", alpha=0.3)
        ax.set_title(label(ix, name))
        ax.legend(fontsize=8, title="window memory", title_fontsize=8)
    axes[0][0].set_ylabel("µs per 4-byte put (median)")
    fig.suptitle("one-sided synchronisation cost (paper 003 Table 2; sendrecv = "
                 "two-sided baseline)", fontsize=10)
    save(fig, out_dir, "onesided_sync.png", written)


def plot_onesided_bandwidth(ix, out_dir, written):
    names = [n for n in ix.launchers if ix.select("onesided", "rma", n)]
    if not names:
        return
    ops = ["put", "get", "acc"]
    fig, axes = plt.subplots(len(names), 3, figsize=(14, 3.6 * len(names)), squeeze=False,
                             sharey=True)
    for r, name in enumerate(names):
        for c, op in enumerate(ops):
            ax = axes[r][c]
            lines = [("send", "sendrecv", "malloc", "black", ":")]
            lines += [(op, s, "malloc", LINE[i], "-") for i, s in
                      enumerate(["fence", "pscw", "lock", "lockall"])]
            if op == "put":
                lines += [("put", s, m, LINE[i], "--" if m == "allocmem" else "-.")
                          for i, s in ((0, "fence"), (3, "lockall"))
                          for m in ("allocmem", "winalloc")]
            for o, s, m, col, style in lines:
                pts = sorted(ix.select("onesided", "rma", name, op=o, sync=s, mem=m),
                             key=lambda p: p.size)
                if not pts:
                    continue
                ax.plot([p.size for p in pts], [p.bandwidth() for p in pts], color=col,
                        linestyle=style, label="%s %s" % (s, m) if m != "malloc" or
                        s == "sendrecv" else s)
            size_axis(ax)
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
            ax.set_title("%s: %s" % (label(ix, name), {"acc": "MPI_Accumulate (int, sum)",
                                                       "put": "MPI_Put", "get": "MPI_Get"}[op]),
                         fontsize=9)
            if c == 0:
                ax.set_ylabel("MB/s (median)")
            ax.legend(fontsize=7)
    save(fig, out_dir, "onesided_bandwidth.png", written)


def plot_onesided_extra(ix, out_dir, written):
    names = [n for n in ix.launchers if ix.select("onesided", "dtype", n)
             or ix.select("onesided", "multi", n) or ix.select("onesided", "overlap", n)]
    if not names:
        return
    fig, axes = plt.subplots(len(names), 3, figsize=(14, 3.6 * len(names)), squeeze=False)
    for r, name in enumerate(names):
        ax = axes[r][0]
        i = 0
        for xfer, style in (("put", "-"), ("sendrecv", ":")):
            for k, dtype in enumerate(("contig", "vector", "indexed")):
                pts = sorted(ix.select("onesided", "dtype", name, xfer=xfer, dtype=dtype),
                             key=lambda p: p.size)
                if pts:
                    ax.plot([p.size for p in pts], [p.median for p in pts], color=LINE[k],
                            linestyle=style, label="%s %s" % (xfer, dtype))
                i += 1
        size_axis(ax)
        ax.set_yscale("log")
        ax.set_ylabel("µs (median)")
        ax.set_title("%s: derived datatypes (put+fence vs send/recv)" % name, fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)

        ax = axes[r][1]
        for k, n in enumerate(ix.values("onesided", "multi", "nputs", launcher=name)):
            pts = sorted(ix.select("onesided", "multi", name, nputs=n), key=lambda p: p.size)
            ax.plot([p.size for p in pts], [p.bandwidth() for p in pts], color=LINE[k % 7],
                    label="%s put%s" % (n, "s" if int(n) > 1 else ""))
        size_axis(ax)
        ax.set_yscale("log")
        ax.set_ylabel("MB/s (median)")
        ax.set_xlabel("bytes per transfer (all puts)")
        ax.set_title("%s: n puts vs one put of the same bytes" % name, fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)

        ax = axes[r][2]
        for k, sync in enumerate(("fence", "lock")):
            pts = sorted(ix.select("onesided", "overlap", name, sync=sync), key=lambda p: p.size)
            if pts:
                ratios = [p.extra_median("ratio") or 0 for p in pts]
                top = 3.0               # outliers (a descheduled run) are drawn at the top
                ax.plot([p.size for p in pts], [min(r, top) for r in ratios], marker="o",
                        color=LINE[k], label=sync)
                for p, r in zip(pts, ratios):
                    if r > top:
                        ax.annotate("%.0f" % r, (p.size, top), fontsize=7, color=LINE[k],
                                    ha="center", va="bottom", xytext=(0, 2),
                                    textcoords="offset points")
        ax.set_ylim(0.8, 3.3)
        ax.axhline(1, color="gray", linewidth=0.8)
        ax.axhline(2, color="gray", linewidth=0.8, linestyle="--")
        size_axis(ax)
        ax.set_ylabel("both / transfer alone")
        ax.set_title("%s: overlap (1 = full, 2 = none)" % name, fontsize=9)
        ax.grid(True, alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
    save(fig, out_dir, "onesided_extra.png", written)


def main():
    p = argparse.ArgumentParser(description="Plot a bench/run results directory.")
    p.add_argument("results", help="results directory (with <set>.jsonl, config.json)")
    p.add_argument("--out", help="where to write the PNGs (default: the results directory)")
    args = p.parse_args()
    out_dir = args.out or args.results
    os.makedirs(out_dir, exist_ok=True)
    ix = results.Index(args.results)
    written = []
    for fn in (plot_startup, plot_spawn, plot_spawn_phases, plot_intercomm, plot_onesided_sync,
               plot_onesided_bandwidth, plot_onesided_extra):
        fn(ix, out_dir, written)
    for name in written:
        print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
