"""The master's log lines and progress display.

Log lines go to stdout, each prefixed "farm: " and flushed at once (dpm
forwards them as they come; the tests read them). Progress is either one line
rewritten in place with a carriage return ("line": what a terminal wants; dpm
forwards the bytes unchanged, so it also works through `dpm run`), one plain
line per finished tile ("plain": logs and pipes), or nothing. "auto" picks
"line" when stdout is a terminal; under `dpm run` a rank's stdout is a pipe,
so ask for `--progress line` there.
"""

import sys
import time


def log(message):
    _end_line()
    sys.stdout.write(f"farm: {message}\n")
    sys.stdout.flush()


_open_line = False


def _end_line():
    global _open_line
    if _open_line:
        sys.stdout.write("\n")
        _open_line = False


class Progress:
    def __init__(self, total, style="auto", clock=time.monotonic):
        if style == "auto":
            style = "line" if sys.stdout.isatty() else "plain"
        self.style = style
        self.total = total
        self.done = 0
        self.clock = clock
        self.start = clock()

    def text(self, workers):
        elapsed = self.clock() - self.start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else float("inf")
        eta_text = "?" if eta == float("inf") else f"{eta:.0f} s"
        pct = 100.0 * self.done / self.total if self.total else 100.0
        return (f"{self.done}/{self.total} tiles ({pct:.0f}%), {rate:.2f} tiles/s, "
                f"ETA {eta_text}, {workers} worker{'s' if workers != 1 else ''}")

    def tile_done(self, workers):
        global _open_line
        self.done += 1
        if self.style == "plain":
            log(f"progress {self.text(workers)}")
        elif self.style == "line":
            sys.stdout.write(f"\rfarm: {self.text(workers)}\x1b[K")
            sys.stdout.flush()
            _open_line = True
            if self.done == self.total:
                _end_line()
