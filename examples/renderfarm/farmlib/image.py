"""Images as packed 8-bit RGB rows: reading POV-Ray's PPM, writing PPM and PNG.

The PNG encoder is the smallest correct one: colour type 2 (RGB), 8 bits,
filter 0 on every row, one zlib stream in one IDAT chunk (stdlib `zlib`).
"""

import struct
import zlib


class ImageError(Exception):
    """A file that is not the image it should be."""


def _ppm_tokens(data, count):
    """The first `count` header tokens of a PNM file and the offset after them."""
    tokens = []
    i = 0
    n = len(data)
    while len(tokens) < count:
        while i < n and data[i:i + 1].isspace():
            i += 1
        if i >= n:
            raise ImageError("truncated PPM header")
        if data[i:i + 1] == b"#":
            while i < n and data[i:i + 1] != b"\n":
                i += 1
            continue
        j = i
        while j < n and not data[j:j + 1].isspace():
            j += 1
        tokens.append(data[i:j])
        i = j
    return tokens, i + 1  # exactly one whitespace byte ends the header


def read_ppm(data):
    """(width, height, rgb bytes) of a binary 8-bit PPM (P6)."""
    tokens, start = _ppm_tokens(data, 4)
    if tokens[0] != b"P6":
        raise ImageError(f"not a binary PPM (magic {tokens[0][:8]!r})")
    try:
        width, height, maxval = (int(t) for t in tokens[1:])
    except ValueError as e:
        raise ImageError(f"bad PPM header: {e}") from None
    if maxval != 255:
        raise ImageError(f"PPM with maxval {maxval}; only 8-bit (255) is supported")
    pixels = data[start:start + width * height * 3]
    if len(pixels) != width * height * 3:
        raise ImageError(f"PPM has {len(pixels)} pixel bytes, expected {width * height * 3}")
    return width, height, pixels


def ppm_bytes(width, height, rgb):
    return b"P6\n%d %d\n255\n" % (width, height) + bytes(rgb)


def _chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)


def png_bytes(width, height, rgb):
    stride = width * 3
    raw = b"".join(b"\x00" + bytes(rgb[y * stride:(y + 1) * stride]) for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header)
            + _chunk(b"IDAT", zlib.compress(raw, 9)) + _chunk(b"IEND", b""))


def write_image(path, width, height, rgb):
    """PNG when the name ends in .png, else PPM."""
    data = png_bytes(width, height, rgb) if str(path).lower().endswith(".png") else ppm_bytes(width, height, rgb)
    with open(path, "wb") as f:
        f.write(data)


def first_difference(width, a, b):
    """(count of differing pixels, (x, y) of the first, 0-based) or (0, None)."""
    if len(a) != len(b):
        raise ImageError(f"images differ in size ({len(a)} and {len(b)} bytes)")
    if a == b:
        return 0, None
    count = 0
    first = None
    for p in range(0, len(a), 3):
        if a[p:p + 3] != b[p:p + 3]:
            count += 1
            if first is None:
                first = ((p // 3) % width, (p // 3) // width)
    return count, first
