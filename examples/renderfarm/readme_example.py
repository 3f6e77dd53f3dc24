#!/usr/bin/env python3
"""Run the README's elastic example and put its output into README.md.

    .venv/bin/python examples/renderfarm/readme_example.py   # from the repository root

Runs `dpm run --no-oversubscribe --usize 3 -n 1 .venv/bin/python farm.py
--mode elastic --workers 1 --max-workers 8` (the example under "Usage"),
stdout and stderr together as a terminal shows them, and replaces the text
between the README's `<!-- elastic-example -->` markers with it, so the
output shown is what the command prints.
"""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MARK = "<!-- elastic-example -->"
COMMAND = ["target/release/dpm", "run", "--no-oversubscribe", "--usize", "3", "-n", "1",
           ".venv/bin/python", "examples/renderfarm/farm.py", "--mode", "elastic", "--workers", "1",
           "--max-workers", "8"]


def main():
    run = subprocess.run(COMMAND, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=600)
    if run.returncode != 0:
        sys.exit(f"the example failed (exit {run.returncode}):\n{run.stdout}")
    shown = " ".join(c.replace(".venv/bin/python", "$PY").replace("examples/renderfarm/farm.py", "$FARM")
                     for c in COMMAND)
    block = f"{MARK}\n```\n$ {shown}\n{run.stdout.rstrip()}\n```\n{MARK}"
    path = os.path.join(HERE, "README.md")
    with open(path) as f:
        text = f.read()
    start, end = text.find(MARK), text.rfind(MARK)
    if start < 0 or end == start:
        sys.exit(f"{path} lacks the two {MARK} markers")
    with open(path, "w") as f:
        f.write(text[:start] + block + text[end + len(MARK):])
    print(f"{path}: {len(run.stdout.splitlines())} lines of output")


if __name__ == "__main__":
    main()
