"""Running POV-Ray: one band of rows, or the whole image as the reference.

Measured (POV-Ray 3.7.0.10, glasschess, +A0.3): a band rendered alone is
pixel-identical to the same rows of a whole-image render only when it starts
on POV-Ray's render-block grid (+BS, default 32 rows: rows 1, 33, 65, ...).
Anti-aliasing and jitter are worked out per 32x32 block, so a band starting
at row 38 differed from the whole render in its edge rows and in rows inside
(69, 96, ...) by up to 28 levels. Tiles are therefore whole multiples of the
block size; `Settings.check()` refuses anything else.

A partial render (+SR/+ER) still writes a full-size PPM with the rows outside
the band black; `render_band` cuts the band out.
"""

import os
import shutil
import signal
import subprocess
from dataclasses import dataclass, field

from .image import ImageError, read_ppm


class RenderError(Exception):
    """POV-Ray is missing, refused the scene, or produced no image."""


@dataclass
class Settings:
    """What every worker needs to render a band; sent to each worker once."""
    scene: str
    width: int
    height: int
    aa: str = ""               # "" = no anti-aliasing, else POV-Ray's threshold, e.g. "0.3"
    block: int = 32            # POV-Ray's render block size (+BS)
    povray: str = "povray"
    library: list = field(default_factory=list)  # extra +L include paths

    def check(self, tile_rows):
        """A list of problems with these settings (empty when they are fine)."""
        problems = []
        if self.width < 1 or self.height < 1:
            problems.append(f"image size {self.width}x{self.height} must be at least 1x1")
        if self.block < 1:
            problems.append(f"--block-size {self.block} must be at least 1")
        elif tile_rows < 1 or tile_rows % self.block:
            problems.append(f"--tile-rows {tile_rows} must be a positive multiple of the render block size "
                            f"{self.block} (bands off POV-Ray's block grid render different pixels)")
        if self.aa:
            try:
                float(self.aa)
            except ValueError:
                problems.append(f"--aa {self.aa!r} is not a number (POV-Ray's anti-aliasing threshold, e.g. 0.3)")
        if not os.path.isfile(self.scene):
            problems.append(f"scene file {self.scene} does not exist")
        if shutil.which(self.povray) is None:
            problems.append(f"POV-Ray ({self.povray}) is not installed or not on PATH "
                            "(Debian: apt-get install povray povray-examples)")
        return problems

    def command(self, output, first_row=None, last_row=None):
        scene = os.path.abspath(self.scene)
        cmd = [self.povray, f"+I{scene}", f"+L{os.path.dirname(scene)}"]
        cmd += [f"+L{p}" for p in self.library]
        cmd += [f"+W{self.width}", f"+H{self.height}", f"+BS{self.block}",
                "+FP", "-D", "+WT1", f"+O{output}"]
        cmd.append(f"+A{self.aa}" if self.aa else "-A")
        if first_row is not None:
            cmd += [f"+SR{first_row}", f"+ER{last_row}"]
        return cmd


def _ignore_sigusr1():
    # Hydra with -disable-auto-cleanup tells the survivors of a failed rank
    # with SIGUSR1 to their process group (MPICH's failure notification);
    # measured: it killed the povray of a healthy worker (exit -10). MPICH
    # handles the signal in the worker itself; povray should ignore it.
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)


def _signal_name(number):
    try:
        return f" ({signal.Signals(number).name})"
    except ValueError:
        return ""


# The povray a worker is running now, if any: ended with the worker when it
# leaves on a signal (farm.py's SIGINT handler), never left behind.
RUNNING = None


def _run(settings, first_row=None, last_row=None, nice=0, fault=None):
    """The full-size RGB bytes POV-Ray wrote for these rows (or all of them).

    `fault` (test hook, `--fault povray`): a callable given the povray's pid
    once it runs, which kills it as the OOM killer would."""
    global RUNNING
    # The image comes on povray's stdout (`+O-`; measured: the same bytes as
    # `+O file`), so a worker killed mid-tile leaves no file behind.
    cmd = settings.command("-", first_row, last_row)
    if nice:
        cmd = ["nice", "-n", str(nice)] + cmd
    try:
        RUNNING = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, preexec_fn=_ignore_sigusr1)
    except OSError as e:
        raise RenderError(f"cannot run {cmd[0]}: {e}") from None
    try:
        if fault:
            fault(RUNNING.pid)
        data, stderr = RUNNING.communicate()
        code = RUNNING.returncode
    finally:
        RUNNING = None
    if code != 0 or not data:
        tail = b"\n".join((stderr or b"").strip().splitlines()[-6:]).decode(errors="replace")
        how = f"was killed by signal {-code}{_signal_name(-code)}" if code < 0 else f"exited with {code}"
        raise RenderError(f"povray {how} rendering {settings.scene}"
                          f" rows {first_row or 1}-{last_row or settings.height}" + (f":\n{tail}" if tail else ""))
    try:
        width, height, rgb = read_ppm(data)
    except ImageError as e:
        raise RenderError(f"povray's output is unreadable: {e}") from None
    if (width, height) != (settings.width, settings.height):
        raise RenderError(f"povray wrote a {width}x{height} image, expected {settings.width}x{settings.height}")
    return rgb


def render_band(settings, first_row, last_row, nice=0, fault=None):
    """RGB bytes of rows first_row..last_row (1-based, inclusive)."""
    rgb = _run(settings, first_row, last_row, nice, fault)
    stride = settings.width * 3
    return rgb[(first_row - 1) * stride:last_row * stride]


def render_whole(settings, nice=0):
    """RGB bytes of the whole image from one plain POV-Ray run."""
    return _run(settings, nice=nice)
