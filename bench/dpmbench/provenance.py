"""dpmbench.provenance: what was measured, where and when.

git state of the repository (commit, dirty flag), the machine (cores,
load, kernel, date), and each binary under test (path, build time, size,
sha256, `--version`, and the commit of the git tree it was built in, which
tells the two dpm builds of an A/B run apart).
"""

import datetime
import hashlib
import os
import platform
import subprocess

from .paths import ROOT
from .proc import first_line


def now_iso():
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def git_state(root=ROOT):
    """{"commit": short hash, "dirty": bool, "describe": "abc123[-dirty]"},
    or None outside a git tree."""
    def git(*argv):
        try:
            out = subprocess.run(["git", "-C", root] + list(argv), stdin=subprocess.DEVNULL,
                                 capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None
    commit = git("rev-parse", "--short", "HEAD")
    if not commit:
        return None
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    return {"commit": commit, "dirty": dirty, "describe": commit + ("-dirty" if dirty else "")}


def git_commit(root=ROOT):
    """The short commit with "-dirty" when the tree has changes, or None."""
    state = git_state(root)
    return state["describe"] if state else None


def machine():
    return {"host": platform.node(), "cores": os.cpu_count(), "kernel": platform.release(),
            "python": platform.python_version(), "loadavg": list(os.getloadavg()),
            "date": now_iso()}


def machine_line():
    m = machine()
    return "machine: %s, %d cores, kernel %s, load average %.1f %.1f %.1f" % (
        m["host"], m["cores"], m["kernel"], *m["loadavg"])


def stamp(path):
    """(inode, size, mtime) of a file, to see whether it was rebuilt; None if absent."""
    try:
        st = os.stat(path)
        return (st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        return None


def mtime_iso(path):
    try:
        return (datetime.datetime.fromtimestamp(os.path.getmtime(path)).astimezone()
                .isoformat(timespec="seconds"))
    except OSError:
        return None


def tree_of(path):
    """The top of the git tree a file lies in (walking up from it), or None."""
    d = os.path.dirname(os.path.abspath(path))
    while True:
        if os.path.exists(os.path.join(d, ".git")):
            return d
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


def binary(path, version_cmd=None):
    """Provenance of one binary under test."""
    info = {"path": path, "mtime": mtime_iso(path), "size": None, "sha256": None,
            "version": None, "git": None}
    try:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        info["sha256"] = h.hexdigest()[:16]
        info["size"] = os.path.getsize(path)
    except OSError:
        return info
    info["version"] = first_line(version_cmd or [path, "--version"]) or None
    tree = tree_of(path)
    if tree:
        info["git"] = git_state(tree)
    return info


def meta(launchers=(), **extra):
    """The "meta" block of a results file: repository state, machine, the
    launchers' binaries (source paths, before any copy), and extra keys."""
    doc = {"date": now_iso(), "git": git_state(), "machine": machine(),
           "launchers": {ln.name: dict(binary(ln.source), kind=ln.kind) for ln in launchers}}
    doc["commit"] = doc["git"]["describe"] if doc["git"] else None
    doc.update(extra)
    return doc
