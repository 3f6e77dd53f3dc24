"""dpmbench.programs: the benchmark programs' output, checked and parsed.

lines_check(): a check run printed exactly the expected lines (any order).
SpawnProgram / spawn_parse(): bench/spawn's spawn_latency and spawn_rate
(also built by bench/scale), which time their spawns themselves and print
one result line `spawn_latency k=K n=N times_ms=a,b,... start_ms=...
init_ms=...` or `spawn_rate ... rate=R seconds=S times_ms=...`.
"""

import collections
import os


def lines_check(text, expected):
    """None when text's lines are exactly `expected` in any order, else why not."""
    got = collections.Counter((text or "").splitlines())
    want = collections.Counter(expected)
    if got == want:
        return None
    missing = sum((want - got).values())
    extra = list((got - want).elements())
    return ("printed %d lines, expected %d: %d expected lines missing, %d unexpected%s"
            % (sum(got.values()), sum(want.values()), missing, len(extra),
               " (first: %r)" % extra[0][:80] if extra else ""))


class SpawnProgram:
    """One spawn case: kind "latency" (spawn_latency K COUNT: a parent of n
    ranks spawns K children COUNT times) or "rate" (spawn_rate COUNT K: COUNT
    spawns in a row, the children kept alive)."""

    def __init__(self, name, kind, n, k):
        self.name, self.kind, self.n, self.k = name, kind, n, k

    def count(self, args):
        """Spawns per run: --spawns (latency) or --rate-count (rate)."""
        return args.spawns if self.kind == "latency" else args.rate_count

    def prog(self, bin_dir, args):
        if self.kind == "latency":
            return [os.path.join(bin_dir, "spawn_latency"), str(self.k), str(args.spawns)]
        return [os.path.join(bin_dir, "spawn_rate"), str(args.rate_count), str(self.k)]

    def parse(self, text, args):
        return spawn_parse(text, self.kind, self.n, self.k, self.count(args))


def spawn_parse(text, kind, n, k, count):
    """The program's result line as a dict, or an error string.

    latency: {"times_ms": [...], "start_ms": [...], "init_ms": [...]}
    rate:    {"rate": R, "seconds": S, "times_ms": [...]}
    """
    tag = "spawn_latency" if kind == "latency" else "spawn_rate"
    lines = [line for line in (text or "").splitlines() if line.startswith(tag + " ")]
    if len(lines) != 1:
        return "printed %d '%s' lines, expected 1" % (len(lines), tag)
    fields = dict(word.split("=", 1) for word in lines[0].split()[1:] if "=" in word)
    for key, value in (("k", k), ("n", n)):
        if fields.get(key) != str(value):
            return "reported %s=%s, expected %s" % (key, fields.get(key), value)
    try:
        result = {key: [float(x) for x in fields[key].split(",")]
                  for key in ("times_ms", "start_ms", "init_ms") if key in fields}
        if kind == "rate":
            result["rate"] = float(fields["rate"])
            result["seconds"] = float(fields["seconds"])
    except (KeyError, ValueError) as e:
        return "cannot parse %r: %s" % (lines[0][:120], e)
    if len(result.get("times_ms", [])) != count:
        return "reported %d spawn times, expected %d" % (len(result.get("times_ms", [])), count)
    return result
