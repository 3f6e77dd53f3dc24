"""Unit tests of dpmbench (python3 -m unittest discover -s bench/dpmbench);
crates/dpm/tests/bench_smoke.rs runs them too."""

import os
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from dpmbench import launchers as L, output, paths, programs, provenance, stats, table  # noqa: E402
from dpmbench.alternate import Arm, alternate, order_of  # noqa: E402
from dpmbench.proc import run  # noqa: E402


class ProcTest(unittest.TestCase):
    def test_success_captures_stdout(self):
        r = run(["/bin/sh", "-c", "echo hi"], 10, capture=True)
        self.assertIsNone(r.error)
        self.assertEqual(r.out, "hi\n")
        self.assertGreater(r.seconds, 0)

    def test_failure_reports_status_and_stderr_tail(self):
        r = run(["/bin/sh", "-c", "echo boom >&2; exit 3"], 10)
        self.assertIsNone(r.seconds)
        self.assertIn("exit status 3", r.error)
        self.assertIn("boom", r.error)

    def test_timeout_kills_the_whole_group(self):
        with tempfile.TemporaryDirectory() as d:
            pidfile = os.path.join(d, "pid")
            t0 = time.monotonic()
            r = run(["/bin/sh", "-c", "sleep 30 & echo $! > %s; wait" % pidfile], 0.5)
            self.assertLess(time.monotonic() - t0, 10)
            self.assertIn("timed out", r.error)
            pid = int(open(pidfile).read())
            for _ in range(100):                    # the grandchild is gone
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.05)
            else:
                self.fail("the background sleep %d survived the group kill" % pid)

    def test_missing_program(self):
        r = run(["/nonexistent/prog"], 5)
        self.assertIn("cannot start", r.error)


class StatsTest(unittest.TestCase):
    def test_summary(self):
        s = stats.summary([4, 1, 3, 2, 100])
        self.assertEqual((s["median"], s["min"], s["max"], s["n"]), (3, 1, 100, 5))
        self.assertEqual((s["q1"], s["q3"], s["iqr"], s["mad"]), (2, 4, 2, 1))
        self.assertIsNone(stats.summary([]))

    def test_ratio_clear_and_not(self):
        r = stats.ratio([10, 11, 12, 10, 11], [20, 21, 22, 20, 21])
        self.assertAlmostEqual(r.value, 0.5238, places=3)
        self.assertTrue(r.clear)
        self.assertLess(r.lo, r.value)
        self.assertGreater(r.hi, r.value)
        same = stats.ratio([10, 12, 11, 13], [11, 10, 13, 12])
        self.assertFalse(same.clear)
        self.assertIsNone(stats.ratio([], [1]))
        self.assertIsNone(stats.ratio([1], [0]))
        self.assertIsNone(stats.ratio([1, 2], [2, 3]).lo)      # too few for an interval

    def test_lstsq3(self):
        pts = [(x, y, 1 + 2 * x + 3 * y) for x in (1, 2, 4) for y in (1, 3)]
        c, a, b = stats.lstsq3(pts)
        self.assertAlmostEqual(c, 1)
        self.assertAlmostEqual(a, 2)
        self.assertAlmostEqual(b, 3)
        self.assertIsNone(stats.lstsq3([(1, 1, 1), (1, 1, 2), (1, 1, 3)]))


class AlternateTest(unittest.TestCase):
    def test_orders(self):
        arms = ["a", "b", "c"]
        self.assertEqual(order_of(arms, 1, "same"), arms)
        self.assertEqual(order_of(arms, 1, "reverse"), ["c", "b", "a"])
        self.assertEqual(order_of(arms, 2, "rotate"), ["c", "a", "b"])

    def test_rounds_checks_failures_and_budget(self):
        seen = []
        arms = [Arm("a"), Arm("b"), Arm("c"), Arm("d", error="not up")]

        def check(arm):
            return "bad output" if arm.name == "c" else None

        def measure(arm, rnd):
            seen.append((rnd, arm.name))
            if arm.name == "b" and rnd == 1:
                return None, "exit status 1"
            arm.samples.append(rnd)
            return 1.0, None

        done = alternate(arms, 4, measure, check=check, order="reverse")
        self.assertEqual(done, 4)
        self.assertEqual(seen[:4], [(0, "a"), (0, "b"), (1, "b"), (1, "a")])
        self.assertEqual(arms[0].samples, [0, 1, 2, 3])
        self.assertEqual(arms[1].error, "run 2: exit status 1")
        self.assertEqual(arms[2].error, "check: bad output")
        self.assertEqual(arms[3].error, "not up")
        self.assertNotIn("d", [name for _, name in seen])
        # Budget: 10 rounds of 2 s against 5 s: at least min_rounds (3).
        arms = [Arm("x"), Arm("y")]
        done = alternate(arms, 10, lambda arm, rnd: (arm.samples.append(1) or 1.0, None),
                         budget=5, min_rounds=3)
        self.assertEqual(done, 3)


class TableTest(unittest.TestCase):
    def test_markdown(self):
        text = table.markdown(["a", "bb"], [[1, "x"], ["long", None]])
        self.assertEqual(text, "| a    | bb   |\n| ---- | ---- |\n| 1    | x    |\n"
                               "| long | None |\n")
        self.assertEqual(table.markdown(["a"], []), "")
        self.assertEqual(table.spread_text([3, 1, 2], " ms"), "2.00 (1.00–3.00) ms")
        self.assertEqual(table.fmt_num(1234.5), "1234")


class LaunchersTest(unittest.TestCase):
    def test_commands(self):
        dpm = L.Launcher(L.BASE, L.DPM, "/x/dpm")
        hydra = L.Launcher(L.HYDRA, L.HYDRA, "/x/mpiexec")
        self.assertEqual(dpm.command(4, ["prog", "1"]), ["/x/dpm", "run", "-n", "4", "prog", "1"])
        self.assertEqual(L.vnodes_command(hydra, 2, 3, 6, ["p"]),
                         ["/x/mpiexec", "-launcher", "fork", "-hosts", "127.0.0.1,127.0.0.2",
                          "-ppn", "3", "-n", "6", "p"])
        self.assertEqual(L.ratio_pairs([L.DPM, L.BASE, L.HYDRA]),
                         [(L.DPM, L.HYDRA), (L.DPM, L.BASE), (L.BASE, L.HYDRA)])
        self.assertEqual(L.ratio_pairs([L.DPM]), [])


class ProgramsTest(unittest.TestCase):
    def test_lines_check(self):
        self.assertIsNone(programs.lines_check("b\na\n", ["a", "b"]))
        self.assertIn("1 expected lines missing", programs.lines_check("a\n", ["a", "b"]))

    def test_spawn_parse(self):
        line = "spawn_latency k=2 n=1 times_ms=1.5,2.5 start_ms=1,1 init_ms=2,2\n"
        r = programs.spawn_parse(line, "latency", 1, 2, 2)
        self.assertEqual(r["times_ms"], [1.5, 2.5])
        self.assertIn("expected 3", programs.spawn_parse(line, "latency", 1, 2, 3))
        self.assertIn("k=2", programs.spawn_parse(line, "latency", 1, 4, 2))
        self.assertIn("0 'spawn_rate' lines", programs.spawn_parse(line, "rate", 1, 2, 2))


class OutputTest(unittest.TestCase):
    def test_write_and_provenance(self):
        with tempfile.TemporaryDirectory() as d:
            path = output.write_json({"meta": provenance.meta()}, os.path.join(d, "x", "r.json"))
            text = open(path).read()
        self.assertIn('"machine"', text)
        self.assertIn('"cores"', text)
        path = output.default_path("startup")
        self.assertEqual(os.path.dirname(path), paths.RESULTS)
        self.assertRegex(os.path.basename(path), r"^startup-\d{8}-\d{6}\.json$")


if __name__ == "__main__":
    unittest.main()
