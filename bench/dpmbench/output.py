"""dpmbench.output: results files under bench/results/ (git-ignored)."""

import datetime
import json
import os

from .paths import RESULTS
from .proc import note


def stamp_now():
    return datetime.datetime.now().strftime("%Y%m%d-%H%M%S")


def default_path(runner, ext=".json"):
    """bench/results/<runner>-<date>-<time><ext>."""
    return os.path.join(RESULTS, "%s-%s%s" % (runner, stamp_now(), ext))


def write_json(doc, path):
    """Write doc as indented JSON to path (its directory made); return path."""
    path = os.path.abspath(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, default=str)
        f.write("\n")
    note("wrote " + path)
    return path
