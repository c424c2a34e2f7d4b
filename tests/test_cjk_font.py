"""The Chinese scorecards' screenshots show characters, not boxes: Chromium finds a CJK font.

Without one, Chromium draws every character it has no glyph for as the same empty box, so the
screenshots of the Chinese cards (tests/test_pictures.py) are unreadable while every other
assertion on them passes.  ./run-tests installs fonts-wqy-microhei as root or in CI; there this
test fails without it.  Elsewhere it skips with what to install.
"""

from __future__ import annotations

import base64
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.png import pixels
from tests.test_dashboard import Browser, find_chromium

CHARACTERS = "调用前后块"  # words of the Chinese cards, each a different glyph in any CJK font


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    executable = find_chromium()
    if executable is None:
        pytest.skip("no Chromium found (./run-tests installs Debian's chromium when run as root)")
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        instance = Browser(executable, Path(profile))
        try:
            yield instance
        finally:
            instance.close()


def _glyph(browser: Browser, index: int) -> tuple[int, int, list[tuple[int, int, int]]]:
    box = browser.js(f"(() => {{ const r = document.getElementById('c{index}').getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; }})()")
    x, y, width, height = box
    clip = {"x": x, "y": y, "width": width, "height": height, "scale": 1}
    data = browser.call("Page.captureScreenshot", {"format": "png", "clip": clip}, session=True)["data"]
    return pixels(base64.b64decode(data))


def _installs_fonts_itself() -> bool:
    """Where ./run-tests installs the font (root, or CI): its absence there is a failure."""
    return os.geteuid() == 0 or bool(os.environ.get("CI"))


def test_chinese_characters_are_drawn_as_different_glyphs(browser: Browser, tmp_path: Path) -> None:
    page = tmp_path / "glyphs.html"
    spans = "".join(
        f"<span id='c{i}' style='display:inline-block;width:64px;height:64px;font:48px sans-serif'>{ch}</span>"
        for i, ch in enumerate(CHARACTERS)
    )
    page.write_text(f"<!doctype html><html lang='zh'><meta charset='utf-8'><body style='margin:0;background:#fff'>{spans}</body></html>", encoding="utf-8")
    browser.open(page.as_uri())
    glyphs = [_glyph(browser, i) for i in range(len(CHARACTERS))]
    assert all(any(p != (255, 255, 255) for p in g[2]) for g in glyphs), "nothing drawn at all"
    distinct = len({tuple(g[2]) for g in glyphs})
    if distinct == 1 and not _installs_fonts_itself():
        pytest.skip("no CJK font: the Chinese screenshots are boxes (apt-get install fonts-wqy-microhei)")
    assert distinct == len(CHARACTERS), "Chinese characters drawn as identical boxes: no CJK font (apt-get install fonts-wqy-microhei)"
