#!/usr/bin/env python3
"""bench/spawn/loop_timeline.py ARM=LOG [ARM=LOG ...]: per-phase medians of
loop_timeline runs (a log is one run's stderr; an arm may repeat, e.g.
dpm=a.log dpm=b.log hydra=c.log, to pool alternating runs). Prints one
Markdown row per phase, one column per arm, in ms. Standard library only."""
import collections
import statistics
import sys

# (label, from (phase, task offset), to (phase, task offset)); a child's task.
PHASES = [
    ("spawn call -> child's main", ("p_spawn", 0), ("c_start", 0)),
    ("child's MPI_Init", ("c_start", 0), ("c_inited", 0)),
    ("MPI_Init returned -> spawn returned", ("c_inited", 0), ("p_spawned", 0)),
    ("whole MPI_Comm_spawn", ("p_spawn", 0), ("p_spawned", 0)),
    ("child: disconnect -> finalize returned", ("c_disc", 0), ("c_fin", 0)),
    ("parent: answer -> disconnected", ("p_recv", 0), ("p_disc", 0)),
    ("window's last disconnect -> next spawn", ("p_disc", 0), ("p_spawn", 1)),
]


def read(path):
    stamps = {}
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) == 4 and p[0] == "T":
                stamps[(p[1], int(p[2]))] = float(p[3])
    return stamps


def main():
    if len(sys.argv) < 2 or any("=" not in a for a in sys.argv[1:]):
        sys.exit(__doc__)
    arms = collections.defaultdict(lambda: collections.defaultdict(list))
    for arg in sys.argv[1:]:
        arm, path = arg.split("=", 1)
        stamps = read(path)
        tasks = 1 + max((t for _, t in stamps), default=-1)
        for label, (a, da), (b, db) in PHASES:
            for t in range(tasks):
                x, y = stamps.get((a, t + da)), stamps.get((b, t + db))
                # The window's last disconnect is that of its odd task.
                if x is not None and y is not None and (db == 0 or t % 2 == 1):
                    arms[arm][label].append((y - x) / 1e3)
        if ("p_end", -1) in stamps and ("p_spawn", 0) in stamps:
            arms[arm]["whole loop"].append((stamps[("p_end", -1)] - stamps[("p_spawn", 0)]) / 1e3)
    names = list(arms)
    print("| phase | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for label in [p[0] for p in PHASES] + ["whole loop"]:
        cells = [f"{statistics.median(arms[n][label]):.2f} ms" if arms[n][label] else "-" for n in names]
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
