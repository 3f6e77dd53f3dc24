"""Unit tests of the farm's MPI-free parts: images, settings, the elastic policy.

    .venv/bin/python -m unittest discover -s examples/renderfarm/tests
"""

import os
import struct
import sys
import tempfile
import unittest
import zlib

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from farmlib.image import ImageError, first_difference, png_bytes, read_ppm  # noqa: E402
from farmlib.policy import Elastic, TileRetries  # noqa: E402
from farmlib.povray import Settings  # noqa: E402


def png_chunks(data):
    """[(type, body)] of a PNG, checking every CRC."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, i = [], 8
    while i < len(data):
        (length,) = struct.unpack(">I", data[i:i + 4])
        kind, body = data[i + 4:i + 8], data[i + 8:i + 8 + length]
        (crc,) = struct.unpack(">I", data[i + 8 + length:i + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF, kind
        chunks.append((kind, body))
        i += 12 + length
    return chunks


class ImageTests(unittest.TestCase):
    def test_png_holds_the_pixels_row_by_row(self):
        rgb = bytes(range(2 * 3 * 3))  # 3 wide, 2 high
        chunks = png_chunks(png_bytes(3, 2, rgb))
        self.assertEqual([k for k, _ in chunks], [b"IHDR", b"IDAT", b"IEND"])
        self.assertEqual(struct.unpack(">IIBBBBB", chunks[0][1]), (3, 2, 8, 2, 0, 0, 0))
        self.assertEqual(zlib.decompress(chunks[1][1]), b"\x00" + rgb[:9] + b"\x00" + rgb[9:])

    def test_ppm_with_povray_comments_is_read(self):
        data = b"P6\n# Software: POV-Ray\n# Render Date: x\n2 1\n255\n" + b"\x01\x02\x03\x0a\x0b\x0c"
        self.assertEqual(read_ppm(data), (2, 1, b"\x01\x02\x03\x0a\x0b\x0c"))

    def test_bad_ppms_are_refused(self):
        for data in (b"P3\n1 1\n255\n0 0 0", b"P6\n1 1\n65535\n" + bytes(6), b"P6\n2 2\n255\n" + bytes(5), b"P6\n2"):
            with self.assertRaises(ImageError, msg=data):
                read_ppm(data)

    def test_first_difference_counts_pixels_and_finds_the_first(self):
        a = bytes(4 * 2 * 3)
        b = bytearray(a)
        b[3 * (1 * 4 + 2) + 1] = 9   # x=2, y=1
        b[3 * (1 * 4 + 3)] = 9       # x=3, y=1
        self.assertEqual(first_difference(4, a, bytes(b)), (2, (2, 1)))
        self.assertEqual(first_difference(4, a, a), (0, None))
        with self.assertRaises(ImageError):
            first_difference(4, a, a[:-3])


class SettingsTests(unittest.TestCase):
    def test_tiles_must_lie_on_the_block_grid(self):
        with tempfile.NamedTemporaryFile(suffix=".pov") as scene:
            s = Settings(scene=scene.name, width=8, height=8, aa="0.3", povray=sys.executable)
            self.assertEqual(s.check(64), [])
            self.assertEqual(len(s.check(20)), 1)
            self.assertIn("multiple of the render block size 32", s.check(20)[0])

    def test_every_problem_is_named(self):
        s = Settings(scene="/nonexistent.pov", width=0, height=8, aa="x", povray="/nonexistent/povray")
        text = "\n".join(s.check(32))
        for needle in ("image size 0x8", "--aa 'x'", "scene file /nonexistent.pov", "/nonexistent/povray"):
            self.assertIn(needle, text)

    def test_band_command(self):
        s = Settings(scene="/s/x.pov", width=8, height=64, aa="", library=["/inc"])
        cmd = s.command("/tmp/o.ppm", 33, 64)
        for arg in ("+I/s/x.pov", "+L/s", "+L/inc", "+W8", "+H64", "+BS32", "-A", "+SR33", "+ER64", "+WT1"):
            self.assertIn(arg, cmd)


class ElasticTests(unittest.TestCase):
    def test_grows_only_with_waiting_tiles_and_room_under_the_cap(self):
        e = Elastic(max_workers=3)
        self.assertTrue(e.should_grow(0.0, workers=1, waiting_tiles=2))
        self.assertFalse(e.should_grow(0.0, workers=1, waiting_tiles=0))
        self.assertFalse(e.should_grow(0.0, workers=3, waiting_tiles=5))

    def test_refusals_back_off_doubling_up_to_the_cap_and_never_stop_while_workers_live(self):
        e = Elastic(max_workers=8, retry_interval=0.5, max_refusals=3, max_interval=2.0)
        waits = []
        now = 10.0
        for _ in range(30):  # far beyond max_refusals: growth goes on
            self.assertFalse(e.refused(now, workers=1, reason="full"))
            waits.append(round(e.next_try - now, 3))
            self.assertFalse(e.should_grow(e.next_try - 0.01, 1, 5))
            now = e.next_try
            self.assertTrue(e.should_grow(now, 1, 5), "a slot freed late is still grown into")
        self.assertEqual(waits[:5], [0.5, 1.0, 2.0, 2.0, 2.0])
        self.assertEqual(max(waits), 2.0)
        series = e.grew(now)  # a success ends the series and reports it once
        self.assertEqual((series.refusals, series.reason), (30, "full"))
        self.assertIsNone(e.end_series())
        self.assertEqual(e.total_refusals, 30)
        e.refused(now, workers=1, reason="full")
        self.assertEqual(e.next_try - now, 0.5, "a new series starts at the first wait")

    def test_only_a_farm_with_no_worker_gives_up(self):
        e = Elastic(max_workers=8, retry_interval=0.5, max_refusals=3)
        self.assertFalse(e.refused(0.0, workers=0, reason="full"))
        self.assertFalse(e.refused(1.0, workers=1, reason="full"), "a live worker resets the count")
        self.assertFalse(e.refused(2.0, workers=0, reason="full"))
        self.assertFalse(e.refused(3.0, workers=0, reason="full"))
        self.assertTrue(e.refused(4.0, workers=0, reason="full"))
        self.assertFalse(e.should_grow(100.0, 0, 5))

    def test_a_freed_slot_cuts_the_wait_short(self):
        e = Elastic(max_workers=8, retry_interval=0.5, max_interval=8.0)
        for t in range(5):
            e.refused(float(t), workers=1, reason="full")
        self.assertFalse(e.should_grow(4.5, 1, 1))
        e.slot_freed(4.5)
        self.assertTrue(e.should_grow(4.5, 1, 1))


class TileRetryTests(unittest.TestCase):
    def test_a_tile_is_retried_a_bounded_number_of_times(self):
        r = TileRetries(retries=2)
        self.assertEqual(r.attempts(3), 1)
        self.assertTrue(r.failed(3))
        self.assertTrue(r.failed(3))
        self.assertEqual(r.attempts(3), 3)
        self.assertFalse(r.failed(3), "the third failure ends the render")
        self.assertTrue(r.failed(4), "other tiles count on their own")
        self.assertFalse(TileRetries(retries=0).failed(0), "no retries: the first failure is final")

if __name__ == "__main__":
    unittest.main()
