"""dpmbench.runners: the runners under bench/ (bench/run dispatches to them)."""

# name: (script under bench/, what it measures)
RUNNERS = {
    "startup": ("startup/run", "job start and end: /bin/true, MPI hello, raw PMI-1 clients"),
    "spawn": ("spawn/run", "MPI_Comm_spawn latency and rate"),
    "leak": ("spawn/leak", "dpm's memory, fds, threads over many spawns"),
    "pmi": ("pmi/run", "PMI access patterns (paper 004, Figure 7) over virtual nodes"),
    "hostlist": ("hostlist/run", "startup against the host list's length (10, 100, 1,000 hosts, -n 2)"),
    "scale": ("scale/run", "costs against nodes: virtual nodes, netns hosts, booted trees"),
    "renderfarm": ("renderfarm/run", "paper 001's Figure 8: the POV-Ray render farm, static/dynamic/elastic"),
    "headline": ("headline/run", "the README's headline rows, written into README.md and docs/benchmarks.md"),
    "suite": ("suite/run", "the suite (startup, spawn, intercomm, onesided) for any MPI"),
}
