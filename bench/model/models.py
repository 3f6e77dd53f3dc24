"""bench/model/models.py: analytical models of dpm's startup, in paper 002's
form (process initiation + connection setup + overhead), one per KVS design
and bootstrap, with every constant taken from the calibration file (nothing
is fitted to the validation runs); and paper 002's three published models
(Original, SSH-DR, MPD-BC) with their published constants, as references.

Owns the formulas; calibrate measures, validate and project call them.

Symbols (seconds, from the calibration's medians):
  d_b  daemon_start_<bootstrap>: the parent's serial cost per child daemon
  l_b  the first daemon's latency (its `latency_us`)
  a    link_auth, h link_hop, beta link_byte
  f    rank_fork_exec (CPU per rank), L mpi_lib_start, I mpi_init (hello)
  q    pmi_local_request (a daemon's service time per request)
  g    pmi_remote_get (a get answered by another node, flat tree)
  phi  fence_per_node (a parent's cost per child arrival in a fence)

A job of N nodes x ppn ranks, fan-out k, depth D (levels of daemons under
dpm run: k + k^2 + ... + k^D >= N):

  T = T_init + T_conn + T_over
  T_init = T_boot + T_ranks
    T_boot (cold)  = sum over levels of (l_b + a + (k_l - 1) * d_b), k_l the
                     children per parent on that level; booted: 0
      T_ranks        one host (validation): MPI programs f_w + L + I
                   + (N*ppn - 1)*(f_w + L_s + I_s), the measured per-rank
                   wall slopes on this machine; raw PMI clients N*ppn*f_w
                   + ppn*(pmi_client_start - f_w) (forks share the host,
                   each node's daemon serves its ranks' PMI starts in turn)
                   dedicated nodes (projection): ppn*(f + 6q) + L + I
                   + (ppn-1)*(s - f)*cpus/cores (the daemon forks and
                   serves the PMI starts one by one; the rest overlaps)
  T_conn = the workload's PMI exchange under the design (below)
  T_over = launch and exit: 2 * (D*h + N*phi_launch), phi_launch = phi

Per design, a rank puts one key of B bytes, fences, and makes G gets of
which a fraction r is off-node (hello: MPICH's few gets; neighbours: 2;
all: P); a node needs K distinct off-node keys (its daemon fetches each
once). Every get is answered to its rank by its own daemon (ppn*G*q a
node); the gets take the larger of that daemon work and one rank's chain
of blocking misses:
  allgather  fence = 2*D*h + k*D*phi + beta*B*P*k*D (every put to every
             node, each parent sends the lot to each child); gets local
  tree       fence = 2*D*h + k*D*phi + beta*B*P (puts ride up once); a
             miss walks up to the ancestor holding it, 2*h a level; a
             parent answers its k children's K misses
  dkvs       fence = 2*D*h + k*D*phi + beta*B*ppn (puts to their owners);
             a get not owned here asks the owner: chain G*(1-1/N)*g*D
  direct     fence = 2*D*h + k*D*phi; a miss asks the key's node: chain
             G*r*g*D, daemons fetch and serve 2*K*q
  auto       dense and unhinted keys as allgather, sparse-hinted keys as
             direct: hello and all as allgather, neighbours as direct
             when its client hints them sparse
  A client's gets meet the design its requests allow (`routed`): direct
  needs the get's srcid (PMI-2), without it a miss walks up the tree as
  tree's does (dpm_kvs's route: Direct without a source goes Up, and its
  fence caches the puts at each ancestor); auto keeps unhinted keys in the
  fence. The validated workloads are raw PMI-1 clients (no srcid, no hint):
  direct is tree for them, auto allgather. The projection asks for a
  client that hints and names srcid (paper 004's sparse pattern).

On one host (the validation's virtual nodes) the wall is also at least
  max(T_boot, daemons' CPU / cores) + one rank's whole run + the rest / cores
with the host's CPU by mechanism (`cpu_parts`): the cold daemons' own start
and their cleaners (cpu_unseen_us), booted the boot's daemons' per-run CPU
(booted_run, per added node), every further rank's CPU and its two frames to
dpm run (phi each), each added node's fences (fence_cpu each), the fetches
of off-node keys along the heap's real paths (`routes`: the frames that wake
a daemon at fence_cpu / 2, the relayed ones at frame_cpu) and dkvs's owner
puts (a round trip to the owner at frame_cpu: sent back to back, read in
one wake-up).
"""

import functools
import math

DESIGNS = ["allgather", "tree", "dkvs", "direct", "auto"]
WORKLOADS = ["hello", "pmi-neighbours", "pmi-all"]
# A business card MPICH puts (bytes of a PMI value, order of magnitude).
CARD_BYTES = 128
# MPICH 5's hello: after its barrier, a rank makes a handful of gets (its
# node's and its own keys; pmi-wire.md 2.5).
HELLO_GETS = 3
# A PMI-1 rank's fixed requests: init, get_maxes, get_my_kvsname, put,
# barrier_in, finalize.
PMI_STEPS = 6


def depth(nodes, k):
    """Levels of daemons under the launcher in dpm's k-ary heap."""
    k = max(1, k)
    if k == 1:
        return nodes
    d, covered, width = 0, 0, 1
    while covered < nodes:
        width *= k
        covered += width
        d += 1
    return d


def level_widths(nodes, k):
    """Daemons on each level (the launcher's children first)."""
    out, covered, width = [], 0, 1
    while covered < nodes:
        width = width * k
        w = min(width, nodes - covered)
        out.append(w)
        covered += w
    return out


def costs(cal):
    c = cal["costs"]

    def s(name, key="median_us", default=0.0):
        v = c.get(name, {}).get(key)
        return v / 1e6 if v is not None else default
    return {
        "d": {b: s("daemon_start_" + b) for b in ("fork", "ssh", "slurm")},
        "l": {b: s("daemon_start_" + b, "latency_us") for b in ("fork", "ssh", "slurm")},
        "a": s("link_auth"), "h": s("link_hop"), "beta": s("link_byte"),
        "f": s("rank_fork_exec"), "f_w": s("rank_fork_exec", "wall_us", s("rank_fork_exec")),
        "L": s("mpi_lib_start"), "L_s": s("mpi_lib_start", "wall_slope_us"),
        "I": s("mpi_init"), "I_s": s("mpi_init", "wall_slope_us"),
        "L_cpu": s("mpi_lib_start", "cpu_us"), "I_cpu": s("mpi_init", "cpu_slope_us"),
        "cpus": cal["machine"]["cpus"],
        "pmi_start": s("pmi_client_start", default=s("rank_fork_exec")),
        "q": s("pmi_local_request"), "g": s("pmi_remote_get"), "phi": s("fence_per_node"),
        "frame_cpu": s("frame_cpu", default=s("fence_per_node")),
        "q_cpu": s("pmi_local_request", "cpu_us", s("pmi_local_request")),
        "spawn": s("spawn_base"),
        # The host-wide CPU bound (one host): a client's and an MPI rank's
        # CPU, a forked daemon's own CPU (its slope less its one rank), and
        # one rank's whole run. Absent fields (older calibrations): the
        # client's CPU from its wall, no curvature, the one-rank run as the
        # critical path predicts it.
        "client_cpu": s("pmi_client_start", "cpu_us", s("pmi_client_start")),
        "client_one": s("pmi_client_start", "wall_one_us", None),
        "mpi_cpu": s("mpi_rank_cpu", default=None),
        "mpi_pair": s("mpi_rank_cpu", "pair_us"),
        "mpi_one": s("mpi_rank_cpu", "wall_one_us", None),
        "daemon_cpu": max(s("daemon_start_fork", "cpu_us") - s("rank_fork_exec"), 0.0),
        # A cold daemon's cleaner (its own process, outside dpm run's tree:
        # no rusage sees it; bench/model/unseen_cpu measures it in a cgroup).
        "cleaner_cpu": s("daemon_start_fork", "cpu_unseen_us"),
        # A booted run's CPU per added node, and a fence's per node
        # (bench/model/booted_cpu; absent: none charged, as before).
        "booted_node": s("booted_run"),
        "fence_cpu": s("fence_cpu"),
    }


def gets_of(workload, nodes, ppn):
    """(gets per rank G, fraction off-node r, hinted sparse?)"""
    p = nodes * ppn
    if workload == "hello":
        return HELLO_GETS, 0.0, False
    if workload == "pmi-neighbours":
        return 2, (1.0 if ppn == 1 else min(1.0, 2.0 / ppn)) if nodes > 1 else 0.0, True
    if workload == "pmi-all":
        return p, (nodes - 1) / nodes, False
    raise ValueError("unknown workload %r" % workload)


def remote_keys(workload, nodes, ppn):
    """Distinct off-node keys one node's ranks need (a node's daemon fetches
    each once: later gets for it are local hits or coalesced)."""
    if nodes == 1 or workload == "hello":
        return 0
    if workload == "pmi-neighbours":
        return 2
    return nodes * ppn * (nodes - 1) / nodes


def routed(design, workload, hints=False):
    """The design a workload's gets really meet. hints: the client hints
    its sparse keys and names each get's srcid (PMI-2, paper 004); a raw
    PMI-1 client (the validation's pmi1_client, MPICH's PMI-1 hello) does
    neither. Under direct, a get with no srcid walks up the tree and the
    fence caches the puts on the way up: tree's mechanism, not direct's
    (a fetch of 4 links a level to the key's node). Under auto, unhinted
    keys ride the fence (allgather); only hinted sparse ones go direct."""
    _, _, sparse = gets_of(workload, 2, 2)
    if design == "auto":
        design = "direct" if sparse and hints else "allgather"
    if design == "direct" and not hints:
        design = "tree"
    return design


def conn_time(k_, design, nodes, ppn, fanout, workload, one_host=False, hints=False):
    """The PMI exchange of one workload under one design, seconds, and its
    fence part. Gets: the larger of the node daemon's work (every get is
    answered to its rank by its own daemon, ppn*G*q, plus the fetches it
    makes and serves for other nodes) and one rank's chain of blocking gets
    that miss (G*r*g, g growing with the depth the request crosses)."""
    p = nodes * ppn
    k = min(fanout, nodes)
    d = depth(nodes, fanout)
    G, r, _ = gets_of(workload, nodes, ppn)
    design = routed(design, workload, hints)
    q, g, h = k_["q"], k_["g"], k_["h"]
    # A node's daemon answers its ranks' gets one by one (q: the daemon's
    # service, the bottleneck on one node); the nodes' daemons side by side.
    # On one host they share its cores: host_cpu bounds that (charging all
    # nodes' gets as one daemon's, as before, was 35-43 % high).
    local = ppn * G * q
    K = remote_keys(workload, nodes, ppn)
    base = 2 * d * h + k * d * k_["phi"]
    if design == "allgather":
        fence = base + k_["beta"] * CARD_BYTES * p * k * d
        gets = local
    elif design == "tree":
        # Puts ride up once; a miss walks up to the ancestor holding the key
        # (2 hops a level); a parent answers its k children's misses.
        fence = base + k_["beta"] * CARD_BYTES * p
        gets = max(local + k * K * q, G * r * 2 * h * d + local)
    elif design == "dkvs":
        # Puts go to their owners; a get not owned here asks the owner.
        fence = base + k_["beta"] * CARD_BYTES * ppn
        own = (1 - 1 / nodes) if nodes > 1 else 0.0
        K_o = K / r * own if r else 0.0
        gets = max(local + 2 * K_o * q, G * own * g * d)
    elif design == "direct":
        fence = base
        gets = max(local + 2 * K * q, G * r * g * d)
    else:
        raise ValueError("unknown design %r" % design)
    return fence + gets, fence


def boot_time(k_, nodes, fanout, bootstrap, booted):
    if booted:
        return 0.0
    d_b, l_b = k_["d"][bootstrap], k_["l"][bootstrap]
    total = 0.0
    parents = 1
    for w in level_widths(nodes, fanout):
        per_parent = math.ceil(w / parents)
        total += l_b + k_["a"] + (per_parent - 1) * d_b
        parents = w
    return total


def rank_time(k_, nodes, ppn, mpi, one_host, node_cores):
    """Initiation of the ranks: the first rank's fork/exec and library
    start, then each further rank's slope. On one host (the virtual nodes
    and netns hosts here) all N*ppn ranks share its cores and the slopes
    are the measured per-rank wall slopes on it; on dedicated nodes of
    node_cores cores, a node's ppn ranks share them: the daemon forks them
    one by one (f, CPU) and their library starts overlap, the measured
    slope shrinking by cpus/node_cores."""
    if mpi:
        lib, slope = k_["L"] + k_["I"], k_["f_w"] + k_["L_s"] + k_["I_s"]
    else:
        # A raw PMI client: its exec and its init/fence/finalize round trips.
        lib, slope = 0.0, k_["pmi_start"]
    if one_host and not mpi:
        # Forks and execs share the host; each node's daemon serves its own
        # ranks' PMI starts one after another, the nodes side by side.
        return nodes * ppn * k_["f_w"] + ppn * max(slope - k_["f_w"], 0.0)
    if one_host and k_["mpi_cpu"] is not None:
        # The serial part: each node's daemon forks its ranks one by one,
        # then the last one's library start. The rest of the per-rank wall
        # slope is the host's cores shared, which host_cpu bounds with the
        # curve calibrated at 1..64 ranks (the 1->32 slope alone was 23 %
        # high at 8 ranks).
        return ppn * k_["f_w"] + lib
    if one_host:
        return k_["f_w"] + lib + (nodes * ppn - 1) * slope
    # The daemon forks its ranks one by one and serves their PMI starts
    # (PMI_STEPS requests each); the rest of a rank's start overlaps with
    # the others' on the node's cores.
    serial = ppn * (k_["f"] + PMI_STEPS * k_["q"])
    return serial + lib + (ppn - 1) * max(slope - k_["f"], 0.0) * k_["cpus"] / max(node_cores, 1)


def _ancestors(pos, fanout):
    """Heap positions from `pos` up to the launcher (0), `pos` first: node i
    sits at position i + 1 (crates/proto/src/tree.rs)."""
    out = [pos]
    while pos:
        pos = (pos - 1) // fanout
        out.append(pos)
    return out


# Ordered node pairs beyond this are sampled (deterministically): the
# projection asks for thousands of nodes.
ROUTE_PAIRS = 4096


def _pairs(nodes, adjacent):
    if adjacent:
        # pmi-neighbours: a node's off-node keys are its neighbours' ranks'.
        step = max(1, 2 * nodes // ROUTE_PAIRS)
        return [(i, (i + d) % nodes) for i in range(0, nodes, step) for d in (-1, 1) if (i + d) % nodes != i]
    if nodes * (nodes - 1) <= ROUTE_PAIRS:
        return [(i, j) for i in range(nodes) for j in range(nodes) if i != j]
    out, x = [], 12345
    while len(out) < ROUTE_PAIRS:
        x = (1103515245 * x + 12345) % (1 << 31)
        i, j = x % nodes, (x // nodes) % nodes
        if i != j:
            out.append((i, j))
    return out


@functools.lru_cache(maxsize=4096)
def routes(nodes, fanout, adjacent=False):
    """The real paths of a fetch in dpm's k-ary heap, averaged over the
    ordered pairs (i asks, j holds; adjacent: i and its neighbours, else
    all): `named` the frames of a request to node j and its answer
    (dkvs's owner, direct's source: up to the lowest common ancestor and
    down, both ways), `up` the frames of a tree miss (up to the lowest
    ancestor holding j's keys, the common one, and back) over the pairs
    that fetch, `held` the fraction of pairs where i holds j's keys
    already (j in i's subtree: the tree's fence caches them on the way
    up). The depth bounds them; the mean is what a run pays (8 nodes,
    fan-out 2: 5.7 frames a named fetch against the 4 D = 12 charged
    before)."""
    if nodes <= 1:
        return {"named": 0.0, "up": 0.0, "held": 1.0}
    k = max(1, fanout)
    named = up = 0.0
    fetching = held = 0
    pairs = _pairs(nodes, adjacent)
    for i, j in pairs:
        ai, aj = _ancestors(i + 1, k), _ancestors(j + 1, k)
        on_j = set(aj)
        common = next(a for a in ai if a in on_j)
        di, dj = ai.index(common), aj.index(common)
        named += 2 * (di + dj)
        if common == i + 1:
            held += 1
        else:
            fetching += 1
            up += 2 * di
    return {"named": named / len(pairs), "up": up / fetching if fetching else 0.0,
            "held": held / len(pairs)}


def fetch_cpu(k_, design, nodes, ppn, fanout, workload, hints=False):
    """The CPU of the fetches of keys held on other nodes (all designs but
    allgather, whose fence brings every key): a node's daemon fetches each
    of its K missing keys once, along the tree's real paths (`routes`):
    dkvs and direct to the node holding it and back, tree up to the lowest
    ancestor holding it (none for its own subtree's keys). A fetch is
    served at both ends (q_cpu each); its answer wakes the asking daemon,
    and under dkvs and direct the request wakes the holder too: a frame
    that wakes its receiver costs the host what a fence's frame does
    (`woken`: fence_cpu / 2, a node's frame up and down); the frames
    between are relayed in bursts with the node's other fetches (its ranks
    ask for the same keys together) at frame_cpu each. A tree's ancestor
    answers its subtree's misses in such bursts, no wake-up of its own.
    (phi, a wall slope, for every frame over 4 D links, as before, was
    2.1x what bench/model/cpu_breakdown measured quiet: dkvs pmi-all 8 x 8
    at fan-out 4, 454 us a fetch charged against ~212; this charges 196.)"""
    design = routed(design, workload, hints)
    if design == "allgather" or nodes == 1:
        return 0.0
    r = routes(nodes, fanout, adjacent=workload == "pmi-neighbours" and design != "dkvs")
    K = remote_keys(workload, nodes, ppn)
    if design == "tree":
        fetches, frames, wakes = nodes * K * (1 - r["held"]), r["up"], 1
    else:
        fetches, frames, wakes = nodes * K, r["named"], 2
    woken = k_["fence_cpu"] / 2 if k_["fence_cpu"] else k_["phi"]
    per = 2 * k_["q_cpu"] + wakes * woken + max(frames - wakes, 0.0) * k_["frame_cpu"]
    return fetches * per


def daemons_cpu(k_, nodes, booted):
    """The started daemons' own CPU and their cleaners' (cold), seconds;
    booted, none: the boot's daemons are up (their per-run work is
    `booted_cpu`)."""
    return 0.0 if booted else (nodes - 1) * (k_["daemon_cpu"] + k_["cleaner_cpu"])


def booted_cpu(k_, nodes, booted):
    """A booted run's CPU per added node (booted_run, bench/model/booted_cpu:
    the boot's daemon takes the run, sets its job up, reports and ends it),
    which a cold daemon's start includes and a boot's does not."""
    return (nodes - 1) * k_["booted_node"] if booted else 0.0


def fences_of(workload, nodes):
    """PMI fences a run makes: one (the raw client's barrier; MPICH's in
    MPI_Finalize), and a multi-node MPICH job's node roots' address
    exchange one more (pmi-wire.md 2.5)."""
    return 2 if workload == "hello" and nodes > 1 else 1


def fence_cpu(k_, nodes, workload):
    """The fences' CPU per added node (fence_cpu, bench/model/booted_cpu:
    each node's daemon and its parent take the fence's frames up and
    down); one node's is in the client's calibrated CPU."""
    return (nodes - 1) * fences_of(workload, nodes) * k_["fence_cpu"]


def owner_put_cpu(k_, design, nodes, ppn, fanout, workload, hints=False):
    """The CPU of puts sent to their owner before the fence (dkvs; auto's
    sparse-hinted keys): each put not owned on its node goes to the key's
    owner and is acknowledged (dpm_kvs's OwnerPut; the node enters the
    fence once all are): a round trip to the owner like a fetch's (the
    mean path of `routes`), served at both ends (q_cpu each). Unlike a fetch, a frame here costs
    its CPU (frame_cpu), not a wake-up (phi): a node's ranks put together
    and their owner puts and acks leave and arrive back to back, read in
    one wake-up (bench/model/cpu_breakdown: dkvs less allgather, same
    shape, ~90 us of CPU a put where phi per frame charges ~250)."""
    _, _, sparse = gets_of(workload, nodes, ppn)
    if nodes == 1 or not (design == "dkvs" or (design == "auto" and sparse and hints)):
        return 0.0
    hops = routes(nodes, fanout)["named"]
    return nodes * ppn * (1 - 1 / nodes) * (hops * k_["frame_cpu"] + 2 * k_["q_cpu"])


def cpu_parts(k_, design, nodes, ppn, fanout, workload, booted, hints=False):
    """One host's CPU of a run beyond its first rank's, by mechanism
    (seconds): what bench/model/cpu_breakdown sets against a cgroup's."""
    return {"daemons": daemons_cpu(k_, nodes, booted),
            "booted": booted_cpu(k_, nodes, booted),
            "ranks": host_cpu(k_, nodes, ppn, workload, booted),
            "fences": fence_cpu(k_, nodes, workload),
            "fetches": fetch_cpu(k_, design, nodes, ppn, fanout, workload, hints),
            "owner_puts": owner_put_cpu(k_, design, nodes, ppn, fanout, workload, hints)}


def host_cpu(k_, nodes, ppn, workload, booted):
    """One host's CPU for the ranks beyond the first, seconds: every further
    rank's own (an MPI rank's grows with the ranks on the host: b + c*P a
    rank, calibrated as mpi_rank_cpu), its two frames to dpm run, and for
    pmi-all the gets beyond the two the calibrated client makes (q_cpu
    each). Over the host's cores it bounds the wall from below,
    whatever the critical path: all daemons and ranks of the virtual nodes
    share these cores."""
    p = nodes * ppn
    if workload == "hello":
        if k_["mpi_cpu"] is None:
            per = k_["f"] + k_["L_cpu"] + k_["I_cpu"]
            rest = (p - 1) * per
        else:
            rest = (p - 1) * k_["mpi_cpu"] + (p * p - 1) * k_["mpi_pair"]
    else:
        rest = (p - 1) * k_["client_cpu"]
        if workload == "pmi-all":
            rest += p * max(p - 2, 0) * k_["q_cpu"]
    # Over daemon links, each rank's Started and Exited frames reach dpm
    # run one by one (dpm_proto::ToLauncher, per rank), phi each (the
    # simulator charges the same); on one node there is no link.
    frames = 2 * p * k_["phi"] if nodes > 1 else 0.0
    return rest + frames


def predict(cal, nodes, ppn, design="auto", fanout=32, bootstrap="fork", booted=False,
            workload="hello", one_host=False, node_cores=64, hints=False):
    """The model's startup (seconds) with its breakdown. one_host: every
    node on this machine (validation); else dedicated nodes of node_cores
    cores (projection). On one host the wall is at least one rank's run
    plus the rest of the host's CPU over its cores (host_cpu): the excess
    over the critical path is its `host_cpu` part."""
    crit = critical_path(cal, nodes, ppn, design, fanout, bootstrap, booted, workload,
                         one_host, node_cores, hints)
    if not one_host:
        return crit
    k_ = costs(cal)
    one = k_["mpi_one"] if workload == "hello" else k_["client_one"]
    if one is None:
        one = critical_path(cal, 1, 1, design, fanout, bootstrap, True, workload, True,
                            node_cores)["startup_s"]
    parts = cpu_parts(k_, design, nodes, ppn, fanout, workload, booted, hints)
    cpu = sum(v for name, v in parts.items() if name != "daemons")
    cores = max(k_["cpus"], 1)
    # The ranks start once the daemons are up: after the bootstrap's wall,
    # or the daemons' own CPU on the cores if that is longer.
    boot = max(crit["breakdown"]["initiation_boot"], parts["daemons"] / cores)
    bound = boot + one + cpu / cores
    excess = max(bound - crit["startup_s"], 0.0)
    crit["breakdown"]["host_cpu"] = excess
    crit["startup_s"] += excess
    crit["host_bound_s"] = bound
    crit["cpu_parts"] = parts
    return crit


def critical_path(cal, nodes, ppn, design="auto", fanout=32, bootstrap="fork", booted=False,
                  workload="hello", one_host=False, node_cores=64, hints=False):
    """The critical path: initiation + connection setup + overhead."""
    k_ = costs(cal)
    d = depth(nodes, fanout)
    ranks = rank_time(k_, nodes, ppn, workload == "hello", one_host, node_cores)
    boot = boot_time(k_, nodes, fanout, bootstrap, booted)
    conn, fence = conn_time(k_, design, nodes, ppn, fanout, workload, one_host, hints)
    over = 2 * (d * k_["h"] + min(fanout, nodes) * d * k_["phi"])
    parts = {"initiation_boot": boot, "initiation_ranks": ranks, "connection": conn,
             "overhead": over}
    return {"startup_s": sum(parts.values()), "breakdown": parts, "fence_s": fence,
            "depth": d, "design": design, "fanout": fanout, "bootstrap": bootstrap,
            "booted": booted, "workload": workload, "answered_by": "bench/model/models.py"}


def spawn_time(cal, nodes, children, fanout=32, node_cores=64):
    """One MPI_Comm_spawn of `children` MPI processes from a running job on
    `nodes` dedicated nodes, seconds, with its breakdown. dpm places each
    child on the node with the most free slots (a full job: one per node in
    turn), so the children reach m = min(nodes, children) nodes and the
    spawn saturates there; the job's size adds only its tree's depth.
      spawn_base (the launcher's fixed part, calibrated less the child's own
      start) + 4*D*h (request up, launch down, started up, reply down)
      + 2*m*phi (the launcher sends m launches, takes m reports)
      + the children's start on their node (rank_time of children/m ranks)."""
    k_ = costs(cal)
    d = depth(nodes, fanout)
    m = min(nodes, children)
    per_node = math.ceil(children / m)
    parts = {"spawn_base": k_["spawn"], "tree": 4 * d * k_["h"] + 2 * m * k_["phi"],
             "children": rank_time(k_, m, per_node, True, False, node_cores)}
    return {"spawn_s": sum(parts.values()), "breakdown": parts, "nodes_reached": m, "depth": d}


def best(cal, nodes, ppn, bootstrap="fork", booted=False, workload="hello",
         fanouts=(2, 4, 8, 16, 32, 64, 128), designs=DESIGNS, hints=False):
    """The fastest (design, fan-out) and its prediction."""
    out = None
    for design in designs:
        for k in fanouts:
            p = predict(cal, nodes, ppn, design, k, bootstrap, booted, workload, hints=hints)
            if out is None or p["startup_s"] < out["startup_s"]:
                out = p
    return out


# ------------------------------------------------------------ paper 002

def w_bytes(n_items):
    """Paper 002's W_x: a message of x 4-byte QP ids over Gigabit Ethernet
    (8 ns per byte). With it the published constants give Table 1 back
    (Original 13.6 s at 128; MPD-BC 2.9 s at 128 against 3.10 measured)."""
    return 4 * n_items * 8e-9


def paper002(scheme, n):
    """Paper 002's published models (section 5.2), seconds for n processes."""
    if scheme == "Original":
        return 0.100 * n + 10.5 * n * (w_bytes(n) + w_bytes(n * n)) + 0.12
    if scheme == "SSH-DR":
        return 0.100 * n + (8.5e-9 * n ** 3 + 10.5 * n * w_bytes(n)) + 0.12
    if scheme == "MPD-BC":
        return (0.20 + 0.0010 * n) + (0.0180 * n + 2.5 * n * w_bytes(n)) + 0.30
    raise ValueError(scheme)


PAPER002_SCHEMES = ["Original", "SSH-DR", "MPD-BC"]
# Table 1 of paper 002, the measured points the models were fitted on.
PAPER002_TABLE1 = {
    "n": [4, 8, 16, 32, 64, 128],
    "Original": [0.59, 0.92, 1.74, 3.41, 7.3, 13.7],
    "SSH-DR": [0.58, 0.94, 1.69, 3.37, 6.77, 13.45],
    "MPD-BC": [0.61, 0.63, 0.64, 0.84, 1.58, 3.10],
}
