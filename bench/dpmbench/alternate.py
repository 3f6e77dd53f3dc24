"""dpmbench.alternate: launchers take turns inside one run.

Every arm (a launcher, or one way of running it) gets an untimed check run
first, which is also its warm-up; then `rounds` rounds, each arm once per
round. Alternating inside the run makes drift in the machine's load hit
every arm alike, which matters on a shared machine far more than the
number of samples.
"""

from . import stats, table

ORDERS = ("same", "reverse", "rotate")


class Arm:
    """One arm's samples (numbers in the runner's unit), its raw records,
    and the error that stopped it (it is not run again after one)."""

    def __init__(self, name, error=None):
        self.name = name
        self.samples = []
        self.records = []
        self.error = error

    def summary(self):
        return None if self.error else stats.summary(self.samples)

    def median(self):
        s = self.summary()
        return s["median"] if s else None

    def text(self, unit=""):
        if self.error:
            return "FAIL"
        return table.spread_text(self.samples, unit)

    def json(self):
        return {"samples": self.samples, "summary": self.summary(), "error": self.error}


def order_of(arms, rnd, order):
    """The arms in the order they run in round rnd (0-based): "same" (ABAB),
    "reverse" (AB BA AB: who goes first swaps every round) or "rotate"
    (ABC BCA CAB)."""
    if order == "reverse":
        return list(arms) if rnd % 2 == 0 else list(reversed(arms))
    if order == "rotate" and arms:
        k = rnd % len(arms)
        return list(arms[k:]) + list(arms[:k])
    return list(arms)


def alternate(arms, rounds, measure, check=None, order="reverse", budget=0.0,
              min_rounds=1, budget_per_arm=False):
    """Run the arms in alternation; return the number of rounds run.

    check(arm) -> error text or None: the untimed check run (skipped for
    arms that already carry an error; a failed check fails the arm).
    measure(arm, rnd) -> (seconds, error): one timed run; it stores its own
    samples in arm.samples / arm.records; seconds feeds the budget.
    budget: seconds. If the first round shows that `rounds` rounds would take
    longer, fewer are run, at least min_rounds; budget_per_arm: the same per
    arm after its first run (an arm's own rounds shrink).
    """
    if order not in ORDERS:
        raise ValueError("order must be one of %s" % ", ".join(ORDERS))
    for arm in arms:
        if arm.error is None and check is not None:
            error = check(arm)
            if error:
                arm.error = "check: " + error
    active = [a for a in arms if a.error is None]
    limit = {id(a): rounds for a in active}
    rnd = 0
    while rnd < rounds and any(a.error is None and rnd < limit[id(a)] for a in active):
        round_time = 0.0
        for arm in order_of(active, rnd, order):
            if arm.error is not None or rnd >= limit[id(arm)]:
                continue
            seconds, error = measure(arm, rnd)
            if error:
                arm.error = "run %d: %s" % (rnd + 1, error)
                continue
            round_time += seconds
            if budget_per_arm and rnd == 0 and budget > 0 and seconds * rounds > budget:
                limit[id(arm)] = max(min_rounds, int(budget / max(seconds, 1e-9)))
        rnd += 1
        if not budget_per_arm and rnd == 1 and budget > 0 and round_time * rounds > budget:
            rounds = max(min_rounds, min(rounds, int(budget / max(round_time, 1e-9))))
    return rnd
