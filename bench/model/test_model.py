"""Unit tests of bench/model: the committed calibration validates, the
checks catch bad files, paper 002's published models give back its Table 1,
and dpm's models behave as their formulas say.

  python3 -m unittest discover -s bench/model
"""

import copy
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402
import models as M  # noqa: E402


def committed():
    with open(C.CALIBRATION) as f:
        return json.load(f)


class Calibration(unittest.TestCase):
    def test_committed_file_validates(self):
        self.assertEqual(C.check_calibration(committed()), [])

    def test_missing_cost_is_reported(self):
        doc = committed()
        del doc["costs"]["link_hop"]
        self.assertIn("cost link_hop missing", C.check_calibration(doc))

    def test_bad_spread_and_schema_are_reported(self):
        doc = committed()
        doc["schema"] = 2
        doc["costs"]["link_auth"]["p10_us"] = doc["costs"]["link_auth"]["median_us"] * 2
        doc["costs"]["link_byte"]["n"] = 0
        bad = " ".join(C.check_calibration(doc))
        self.assertIn("schema", bad)
        self.assertIn("link_auth", bad)
        self.assertIn("link_byte", bad)

    def test_not_a_number_is_reported(self):
        doc = committed()
        doc["costs"]["spawn_base"]["median_us"] = "fast"
        self.assertTrue(any("spawn_base" in b for b in C.check_calibration(doc)))

    def test_spread(self):
        c = C.spread([3.0, 1.0, 2.0, 5.0, 4.0], "op")
        self.assertEqual((c["median_us"], c["n"], c["per"]), (3.0, 5, "op"))
        self.assertLessEqual(c["p10_us"], c["median_us"])
        self.assertGreaterEqual(c["p90_us"], c["median_us"])
        # A noisy difference below zero never gives a negative p10.
        self.assertGreaterEqual(C.spread([-5.0, 1.0, 2.0], "op")["p10_us"], 0.0)

    def test_slope(self):
        b, a = C.slope([1, 2, 4, 8], [3, 5, 9, 17])
        self.assertAlmostEqual(b, 2.0)
        self.assertAlmostEqual(a, 1.0)


def script_module(name):
    """A bench/model script (calibrate, validate) as a module."""
    import importlib.machinery
    import importlib.util
    loader = importlib.machinery.SourceFileLoader(name, os.path.join(C.HERE, name))
    spec = importlib.util.spec_from_loader(name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def calibrate_module():
    return script_module("calibrate")


class Validate(unittest.TestCase):
    def test_held_out_sets_are_unseen_by_the_other_cases(self):
        v = script_module("validate")

        def key(c):
            return tuple(sorted(c.items()))
        seen = {key(c) for c in v.cases_full() + v.cases_quick()}
        one, two = {key(c) for c in v.cases_held_out()}, {key(c) for c in v.cases_held_out_2()}
        self.assertEqual(len(one), 7)
        self.assertEqual(len(two), 7)
        self.assertFalse(one & seen)
        self.assertFalse(two & seen)
        self.assertFalse(two & one)
        # Nor a shape (nodes x ranks a node, fan-out) any of them already has.
        shape = {(c["nodes"], c["ppn"], c["fanout"]) for c in v.cases_full() + v.cases_held_out()}
        self.assertFalse({(c["nodes"], c["ppn"], c["fanout"]) for c in v.cases_held_out_2()} & shape)


class Calibrate(unittest.TestCase):
    def test_quadratic_gives_back_the_host_curve(self):
        # mpi_rank_cpu's fit: CPU(n) = a + b*n + c*n^2 over n = 1, 16, 32, 64.
        xs = [1, 16, 32, 64]
        a, b, c = calibrate_module().quadratic(xs, [0.03 + 0.036 * x + 0.0004 * x * x for x in xs])
        self.assertAlmostEqual(a, 0.03)
        self.assertAlmostEqual(b, 0.036)
        self.assertAlmostEqual(c, 0.0004)

    def test_the_new_costs_are_in_the_committed_file(self):
        costs = committed()["costs"]
        self.assertGreater(costs["mpi_rank_cpu"]["pair_us"], 0)
        self.assertGreater(costs["mpi_rank_cpu"]["wall_one_us"], 0)
        self.assertGreater(costs["pmi_client_start"]["wall_one_us"], 0)
        self.assertGreater(costs["pmi_local_request"]["cpu_us"], costs["pmi_local_request"]["median_us"],
                           "the host's CPU per get holds the daemon's service and the client's")


class Paper002(unittest.TestCase):
    def test_published_models_give_back_table1_at_128(self):
        # The models were fitted on 4..128 processes (section 5.2): at 128
        # they must land near the measured Table 1.
        for scheme in M.PAPER002_SCHEMES:
            measured = M.PAPER002_TABLE1[scheme][-1]
            self.assertLess(abs(M.paper002(scheme, 128) / measured - 1), 0.10, scheme)

    def test_mpd_bc_two_orders_faster_at_2048(self):
        # "more than two orders of magnitude for 2048-process jobs" is the
        # paper's claim against Original; its own models give ~70x.
        self.assertGreater(M.paper002("Original", 2048) / M.paper002("MPD-BC", 2048), 50)


class Models(unittest.TestCase):
    cal = committed()

    def test_depth_is_dpm_heap(self):
        # dpm's k-ary heap: the launcher's k children, then k^2, ...
        self.assertEqual(M.depth(32, 32), 1)
        self.assertEqual(M.depth(33, 32), 2)
        self.assertEqual(M.depth(16384, 32), 3)
        self.assertEqual(M.depth(6, 2), 2)
        self.assertEqual(M.depth(7, 2), 3)
        self.assertEqual(M.level_widths(7, 2), [2, 4, 1])

    def test_booted_is_faster_than_cold(self):
        for boot in ("fork", "ssh"):
            cold = M.predict(self.cal, 64, 16, "auto", 32, boot, False, "hello")
            booted = M.predict(self.cal, 64, 16, "auto", 32, boot, True, "hello")
            self.assertLess(booted["startup_s"], cold["startup_s"])
            self.assertEqual(booted["breakdown"]["initiation_boot"], 0.0)

    def test_grows_with_nodes_and_parts_add_up(self):
        prev = 0.0
        for n in (1, 4, 16, 64, 256):
            p = M.predict(self.cal, n, 16, "allgather", 32, "ssh", False, "pmi-all")
            self.assertGreater(p["startup_s"], prev)
            self.assertAlmostEqual(p["startup_s"], sum(p["breakdown"].values()))
            prev = p["startup_s"]

    def test_tree_makes_many_ssh_starts_parallel(self):
        flat = M.predict(self.cal, 1024, 64, "auto", 1024, "ssh", False, "hello")
        tree = M.predict(self.cal, 1024, 64, "auto", 8, "ssh", False, "hello")
        self.assertLess(tree["startup_s"], flat["startup_s"] / 10)

    def test_allgather_pays_for_bytes_at_scale(self):
        ag = M.predict(self.cal, 16384, 64, "allgather", 32, "ssh", True, "hello")
        direct = M.predict(self.cal, 16384, 64, "direct", 32, "ssh", True, "hello")
        self.assertGreater(ag["fence_s"], direct["fence_s"])

    def test_auto_follows_the_hints(self):
        for w, same in (("hello", "allgather"), ("pmi-neighbours", "direct")):
            a = M.predict(self.cal, 64, 16, "auto", 32, "fork", True, w, hints=True)
            b = M.predict(self.cal, 64, 16, same, 32, "fork", True, w, hints=True)
            self.assertAlmostEqual(a["startup_s"], b["startup_s"])
        # A raw PMI-1 client hints nothing: auto keeps its keys in the fence.
        a = M.predict(self.cal, 64, 16, "auto", 32, "fork", True, "pmi-neighbours")
        b = M.predict(self.cal, 64, 16, "allgather", 32, "fork", True, "pmi-neighbours")
        self.assertAlmostEqual(a["startup_s"], b["startup_s"])

    def test_direct_without_srcid_walks_the_tree(self):
        # dpm_kvs routes a direct get with no srcid up the tree, and direct's
        # fence caches the puts on the way: tree's mechanism.
        self.assertEqual(M.routed("direct", "pmi-all"), "tree")
        self.assertEqual(M.routed("direct", "pmi-all", hints=True), "direct")
        for one_host in (False, True):
            a = M.predict(self.cal, 6, 16, "direct", 2, "fork", False, "pmi-all", one_host=one_host)
            b = M.predict(self.cal, 6, 16, "tree", 2, "fork", False, "pmi-all", one_host=one_host)
            self.assertAlmostEqual(a["startup_s"], b["startup_s"])

    def test_owner_puts_cost_dkvs_alone(self):
        k_ = M.costs(self.cal)
        dkvs = M.owner_put_cpu(k_, "dkvs", 16, 8, 32, "pmi-neighbours")
        self.assertGreater(dkvs, 0.0)
        for d in ("allgather", "tree", "direct", "auto"):
            self.assertEqual(M.owner_put_cpu(k_, d, 16, 8, 32, "pmi-neighbours"), 0.0, d)
        self.assertGreater(M.owner_put_cpu(k_, "auto", 16, 8, 32, "pmi-neighbours", hints=True), 0.0)
        self.assertEqual(M.owner_put_cpu(k_, "dkvs", 1, 8, 32, "pmi-neighbours"), 0.0, "one node owns all")
        # A put and its ack: a fetch's links, each at a frame's CPU.
        self.assertLess(dkvs / (16 * 8 * 15 / 16), 4 * k_["phi"] + 2 * k_["q_cpu"])

    def test_best_is_the_minimum(self):
        b = M.best(self.cal, 256, 64, "ssh", False, "hello")
        for d in M.DESIGNS:
            for k in (2, 32, 128):
                p = M.predict(self.cal, 256, 64, d, k, "ssh", False, "hello")
                self.assertLessEqual(b["startup_s"], p["startup_s"] + 1e-12)

    def test_unknown_names_are_errors(self):
        with self.assertRaises(ValueError):
            M.predict(self.cal, 4, 4, "ring", 32, "fork", False, "hello")
        with self.assertRaises(ValueError):
            M.predict(self.cal, 4, 4, "auto", 32, "fork", False, "nbody")

    def test_missing_extras_fall_back(self):
        cal = copy.deepcopy(self.cal)
        for c in cal["costs"].values():
            for k in [k for k in c if k.endswith("_us") and k not in ("median_us", "p10_us", "p90_us")]:
                del c[k]
        cal["costs"].pop("pmi_client_start", None)
        cal["costs"].pop("mpi_init", None)
        p = M.predict(cal, 16, 16, "auto", 32, "fork", False, "pmi-neighbours")
        self.assertGreater(p["startup_s"], 0)

        for w in ("hello", "pmi-neighbours", "pmi-all"):
            p = M.predict(cal, 4, 4, "auto", 32, "fork", False, w, one_host=True)
            self.assertGreater(p["startup_s"], 0, w)

    def test_one_host_wall_is_at_least_its_cpu_over_its_cores(self):
        k_ = M.costs(self.cal)
        for nodes, ppn, w, booted in ((16, 16, "pmi-neighbours", False), (64, 1, "pmi-neighbours", False),
                                      (8, 8, "hello", True), (16, 16, "pmi-all", False)):
            p = M.predict(self.cal, nodes, ppn, "auto", 32, "fork", booted, w, one_host=True)
            crit = M.critical_path(self.cal, nodes, ppn, "auto", 32, "fork", booted, w, one_host=True)
            one = k_["mpi_one"] if w == "hello" else k_["client_one"]
            parts = M.cpu_parts(k_, "auto", nodes, ppn, 32, w, booted)
            self.assertAlmostEqual(parts["ranks"], M.host_cpu(k_, nodes, ppn, w, booted))
            self.assertAlmostEqual(parts["fetches"], M.fetch_cpu(k_, "auto", nodes, ppn, 32, w))
            cpu = sum(v for name, v in parts.items() if name != "daemons")
            cores = self.cal["machine"]["cpus"]
            boot = max(crit["breakdown"]["initiation_boot"], M.daemons_cpu(k_, nodes, booted) / cores)
            bound = boot + one + cpu / cores
            self.assertAlmostEqual(p["startup_s"], max(crit["startup_s"], bound), msg=w)
            self.assertAlmostEqual(p["startup_s"], sum(p["breakdown"].values()))
        # Dedicated nodes (the projection) have no such bound.
        self.assertNotIn("host_cpu", M.predict(self.cal, 16, 16, "auto", 32, "fork", False, "hello")["breakdown"])

    def test_an_mpi_rank_costs_more_among_more_ranks_on_its_host(self):
        k_ = M.costs(self.cal)
        self.assertGreater(k_["mpi_pair"], 0)
        per = lambda p: M.host_cpu(k_, 1, p, "hello", True) / (p - 1)  # noqa: E731
        self.assertGreater(per(64), per(16))
        # Booted, the daemons' own start costs the host nothing.
        self.assertEqual(M.daemons_cpu(k_, 16, True), 0.0)
        self.assertGreater(M.daemons_cpu(k_, 16, False), 0.0)
        # Each cold daemon's cleaner too (outside dpm run's rusage).
        self.assertGreater(k_["cleaner_cpu"], 0.0)
        self.assertAlmostEqual(M.daemons_cpu(k_, 16, False), 15 * (k_["daemon_cpu"] + k_["cleaner_cpu"]))

    def test_fetches_cost_cpu_except_under_allgather(self):
        k_ = M.costs(self.cal)
        self.assertEqual(M.fetch_cpu(k_, "allgather", 16, 16, 32, "pmi-all"), 0.0)
        self.assertEqual(M.fetch_cpu(k_, "direct", 1, 64, 32, "pmi-all"), 0.0, "one node fetches nothing")
        tree = M.fetch_cpu(k_, "tree", 16, 16, 32, "pmi-all")
        direct = M.fetch_cpu(k_, "direct", 16, 16, 32, "pmi-all", hints=True)
        self.assertGreater(direct, tree, "a tree's fetch stops at the ancestor: half the links")
        self.assertGreater(direct, 100 * M.fetch_cpu(k_, "direct", 16, 16, 32, "pmi-neighbours", hints=True))

    def test_a_fetch_takes_the_trees_real_paths(self):
        # Fan-out >= nodes: every node under the launcher, two links apart.
        self.assertEqual(M.routes(8, 8), {"named": 4.0, "up": 2.0, "held": 0.0})
        deep = M.routes(8, 2)
        self.assertGreater(deep["named"], 4.0)
        self.assertLess(deep["named"], 4 * M.depth(8, 2), "the mean path, not the deepest")
        self.assertGreater(deep["held"], 0.0, "a parent holds its subtree's keys")
        self.assertAlmostEqual(M.routes(1, 4)["named"], 0.0)
        # Sampled beyond ROUTE_PAIRS pairs, and deterministic.
        self.assertEqual(M.routes(3000, 32), M.routes(3000, 32))
        self.assertLess(M.routes(3000, 32)["named"], 4 * M.depth(3000, 32))
        k_ = M.costs(self.cal)
        self.assertGreater(M.fetch_cpu(k_, "dkvs", 8, 8, 2, "pmi-all"), M.fetch_cpu(k_, "dkvs", 8, 8, 8, "pmi-all"),
                           "a deeper tree, longer paths to the owner")
        # A tree's miss stops at the lowest ancestor holding the key, and a
        # parent holds its subtree's keys: fewer fetches when deeper.
        self.assertLess(M.routes(8, 2)["up"], M.routes(8, 2)["named"])

    def test_a_booted_run_pays_its_nodes_and_every_run_its_fences(self):
        k_ = M.costs(self.cal)
        self.assertGreater(k_["booted_node"], 0.0)
        self.assertGreater(k_["fence_cpu"], 0.0)
        self.assertAlmostEqual(M.booted_cpu(k_, 16, True), 15 * k_["booted_node"])
        self.assertEqual(M.booted_cpu(k_, 16, False), 0.0, "a cold daemon's start includes it")
        self.assertEqual(M.fence_cpu(k_, 1, "pmi-all"), 0.0, "one node's fence is in the client's CPU")
        self.assertAlmostEqual(M.fence_cpu(k_, 4, "pmi-neighbours"), 3 * k_["fence_cpu"])
        self.assertAlmostEqual(M.fence_cpu(k_, 4, "hello"), 6 * k_["fence_cpu"], msg="MPICH's address exchange")
        booted = M.cpu_parts(k_, "allgather", 16, 4, 32, "pmi-neighbours", True)
        self.assertGreater(booted["booted"], 0.0)
        self.assertEqual(booted["daemons"], 0.0)
        # A calibration without them charges none (older files still read).
        old = json.loads(json.dumps(self.cal))
        del old["costs"]["booted_run"], old["costs"]["fence_cpu"]
        self.assertEqual(M.booted_cpu(M.costs(old), 16, True), 0.0)

    def test_a_spawn_saturates_at_its_childrens_nodes(self):
        near = M.spawn_time(self.cal, 64, 64, 32)
        self.assertEqual(near["nodes_reached"], 64)
        for n in (128, 4096, 16384):
            far = M.spawn_time(self.cal, n, 64, 32)
            self.assertEqual(far["nodes_reached"], 64)
            # Only the tree's depth grows: a few hops, not a cost per node.
            self.assertLess(far["spawn_s"], near["spawn_s"] * 1.1, n)
        self.assertLess(M.spawn_time(self.cal, 4, 64)["nodes_reached"], 64)
        self.assertAlmostEqual(near["spawn_s"], sum(near["breakdown"].values()))


if __name__ == "__main__":
    unittest.main()
