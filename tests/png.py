"""Just enough PNG reading to look at a screenshot's pixels (8-bit RGB/RGBA, not interlaced)."""

from __future__ import annotations

import struct
import zlib
from collections import Counter


def pixels(data: bytes) -> tuple[int, int, list[tuple[int, int, int]]]:
    """(width, height, RGB pixels row by row) of a PNG such as Chromium's screenshots."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    width = height = channels = 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows: list[bytearray] = []
    previous = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        rows.append(line)
        previous = line
    out = [(row[i], row[i + 1], row[i + 2]) for row in rows for i in range(0, stride, channels)]
    return width, height, out


def colours(data: bytes) -> Counter[tuple[int, int, int]]:
    return Counter(pixels(data)[2])


def has_colour(counts: Counter[tuple[int, int, int]], rgb: tuple[int, int, int], tolerance: int = 6, at_least: int = 20) -> bool:
    """At least `at_least` pixels within `tolerance` of `rgb` on every channel."""
    return sum(n for c, n in counts.items() if all(abs(a - b) <= tolerance for a, b in zip(c, rgb, strict=True))) >= at_least
