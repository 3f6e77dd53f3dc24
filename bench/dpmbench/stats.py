"""dpmbench.stats: the statistics every runner reports.

summary(values): median, min, max, quartiles, IQR and MAD of one sample list.
ratio(a, b): the ratio of the medians of two sample lists with a bootstrap
95 % interval, so that a table can say whether a difference is more than
the noise of a shared machine ("clear" when the interval excludes 1).
"""

import math
import random
import statistics

# Bootstrap resamples of ratio(); seeded, so that a table is reproducible
# from its samples.
RESAMPLES = 1000
SEED = 20261124


def quantile(sorted_values, q):
    """Linear-interpolation quantile of sorted values (q in [0, 1])."""
    if not sorted_values:
        return None
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summary(values):
    """{n, median, min, max, q1, q3, iqr, mad} of a non-empty list, else None."""
    if not values:
        return None
    s = sorted(values)
    med = statistics.median(s)
    q1, q3 = quantile(s, 0.25), quantile(s, 0.75)
    return {"n": len(s), "median": med, "min": s[0], "max": s[-1], "q1": q1, "q3": q3,
            "iqr": q3 - q1, "mad": statistics.median(abs(x - med) for x in s)}


class Ratio:
    """median(a) / median(b), and a bootstrap 95 % interval [lo, hi]."""

    def __init__(self, value, lo, hi):
        self.value, self.lo, self.hi = value, lo, hi

    @property
    def clear(self):
        """True when the interval lies wholly on one side of 1."""
        return self.lo is not None and (self.hi < 1 or self.lo > 1)

    def text(self, interval=True):
        if not interval or self.lo is None:
            return "%.2f" % self.value
        return "%.2f [%.2f–%.2f]" % (self.value, self.lo, self.hi)

    def json(self):
        return {"ratio": self.value, "lo95": self.lo, "hi95": self.hi, "clear": self.clear}


def ratio(a, b):
    """Ratio of the medians of sample lists a and b, or None if either is
    empty or b's median is 0. With at least 3 samples on each side, the
    interval is the 2.5th-97.5th percentile of the ratio over resamples."""
    if not a or not b:
        return None
    mb = statistics.median(b)
    if mb == 0:
        return None
    value = statistics.median(a) / mb
    if len(a) < 3 or len(b) < 3:
        return Ratio(value, None, None)
    rng = random.Random(SEED)
    draws = []
    for _ in range(RESAMPLES):
        rb = statistics.median(rng.choices(b, k=len(b)))
        if rb:
            draws.append(statistics.median(rng.choices(a, k=len(a))) / rb)
    draws.sort()
    return Ratio(value, quantile(draws, 0.025), quantile(draws, 0.975))


def ratio_of_medians(a, b):
    """a / b of two medians (numbers or None); None if undefined."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def lstsq3(points):
    """Least squares t = c + a*x + b*y over (x, y, t) points; None if singular."""
    s = [[0.0] * 4 for _ in range(3)]
    for x, y, t in points:
        v = (1.0, x, y)
        for i in range(3):
            for j in range(3):
                s[i][j] += v[i] * v[j]
            s[i][3] += v[i] * t
    for col in range(3):                       # Gauss-Jordan, partial pivoting
        piv = max(range(col, 3), key=lambda r: abs(s[r][col]))
        if abs(s[piv][col]) < 1e-12:
            return None
        s[col], s[piv] = s[piv], s[col]
        for r in range(3):
            if r != col:
                f = s[r][col] / s[col][col]
                s[r] = [a - f * b for a, b in zip(s[r], s[col])]
    return tuple(s[i][3] / s[i][i] for i in range(3))
