"""dpmbench.proc: running one benchmark command, and small process helpers.

A command runs in its own session (process group), so that after a failure
or a timeout every process it left behind (proxies, daemons, ranks) is
killed as one group. The wait is a plain blocking waitpid: Popen.wait(timeout)
polls with sleeps growing to 50 ms, which would round every time up to the
next poll; the timeout is a watchdog thread instead.
"""

import collections
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time

# A run's outcome: seconds (None after a failure), stdout text (None unless
# captured), error text (None on success).
Run = collections.namedtuple("Run", "seconds out error")


def note(msg):
    """Progress and diagnostics go to stderr; the tables go to stdout."""
    print(msg, file=sys.stderr, flush=True)


def is_exe(path):
    return path is not None and os.path.isfile(path) and os.access(path, os.X_OK)


def group_kill(pid, fired=None):
    """SIGKILL the process group `pid` (a run's session); `fired` records it."""
    if fired is not None:
        fired.append(True)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _tail(text, lines, drop=()):
    kept = [line.rstrip() for line in (text or "").strip().splitlines()
            if line.strip() and not any(d in line for d in drop)]
    return kept[-lines:]


def run(cmd, timeout, capture=False, env=None, stdin_pipe=False, out_path=None,
        err_path=None, tail_drop=()):
    """Run cmd once; return a Run.

    capture: keep stdout (returned as text); else it goes to /dev/null, or to
    out_path if given. stderr goes to err_path if given, else to a temporary
    file; its last lines (and captured stdout's) explain a failure.
    env: the whole environment (None: ours).
    stdin_pipe: stdin is a pipe kept open until the command has ended, instead
    of /dev/null. (With stdin at EOF, Hydra's mpiexec forwards the EOF to the
    proxy of rank 0 and, when that proxy has already exited - a short program
    on several "hosts" - dies of SIGPIPE, exit 141, about half the time.)
    tail_drop: substrings of stderr lines left out of the error text.
    Ctrl-C or SIGTERM while waiting kills the command's group, then re-raises.
    """
    out_f = open(out_path, "w+b") if out_path else tempfile.TemporaryFile()
    err_f = open(err_path, "w+b") if err_path else tempfile.TemporaryFile()
    with out_f, err_f:
        stdout = out_f if capture or out_path else subprocess.DEVNULL
        t0 = time.perf_counter()
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL,
                                    stdout=stdout, stderr=err_f, start_new_session=True, env=env)
        except OSError as e:
            return Run(None, None, "cannot start %s: %s" % (cmd[0], e))
        fired = []
        watchdog = threading.Timer(timeout, group_kill, (proc.pid, fired))
        watchdog.start()
        try:
            rc = proc.wait()
        except BaseException:               # Ctrl-C, SIGTERM: take the command with us
            watchdog.cancel()
            group_kill(proc.pid)
            proc.wait()
            raise
        elapsed = time.perf_counter() - t0
        watchdog.cancel()
        if proc.stdin:
            proc.stdin.close()
        out_f.seek(0)
        text = out_f.read().decode(errors="replace") if capture else None
        if not fired and rc == 0:
            return Run(elapsed, text, None)
        group_kill(proc.pid)                # leftovers of a failed launcher
        failure = "timed out after %g s" % timeout if fired else "exit status %d" % rc
        err_f.seek(0)
        tail = (_tail(text, 6) + _tail(err_f.read().decode(errors="replace"), 6, tail_drop))[-6:]
        return Run(None, None, failure + "".join("\n    " + line for line in tail))


def first_line(cmd, timeout=20):
    """The first non-empty line a command prints (stdout, then stderr), or ""."""
    try:
        out = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                             timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    for line in (out.stdout + out.stderr).splitlines():
        if line.strip():
            return line.strip()
    return ""


def help_text(cmd, timeout=30):
    """stdout + stderr of a --help command ("" if it cannot run), and its status."""
    try:
        out = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                             timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return "", None
    return out.stdout + out.stderr, out.returncode


def nofile_raise(want=None):
    """Raise the soft open-file limit (Hydra needs about 4 fds per rank):
    to `want` if given (warning when the hard limit is lower), else to the
    hard limit. Returns the new soft limit."""
    inf = resource.RLIM_INFINITY
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if want is None:
        target = max(soft, 65536) if hard == inf else hard
    else:
        target = want if hard == inf else min(hard, max(want, soft))
    if soft != inf and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if want is not None and soft != inf and soft < want:
        note("warning: open-file limit %d is below %d (raise it with ulimit -n)" % (soft, want))
    return soft


def descendants(pid):
    """Every process below pid (by /proc/*/stat's parent pid)."""
    children = collections.defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry) as f:
                    stat = f.read()
                ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children[ppid].append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def make(directory, targets=(), variables=None):
    """`make -s -C directory targets VAR=value...`; exits the runner on failure."""
    cmd = ["make", "-s", "-C", directory] + list(targets) + \
        ["%s=%s" % kv for kv in (variables or {}).items()]
    note("building: " + " ".join(cmd))
    if subprocess.run(cmd).returncode != 0:
        sys.exit("run: build failed (see make output above)")
