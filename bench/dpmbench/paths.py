"""dpmbench.paths: where the repository, bench/ and the results are."""

import os

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(BENCH)
RESULTS = os.path.join(BENCH, "results")        # git-ignored
VENV_BIN = os.path.join(ROOT, ".venv", "bin")


def pick(option, env_name, default):
    """option > $env_name > default; the first two made absolute."""
    if option:
        return os.path.abspath(option)
    if os.environ.get(env_name):
        return os.path.abspath(os.environ[env_name])
    return default
