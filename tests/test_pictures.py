"""Pictures of the failing state: the block pool before and after, and the attention error
heatmap; drawn from hand-made results (until the checks fill Failure.picture), checked as SVG
and in headless Chromium, with the screenshots kept (out/screenshots, or $PA_SCREENSHOTS)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from grader.report import html
from grader.report.pictures import FREE, PALETTE, attention_svg, normalise_picture, pool_svg, pool_text
from grader.sanitize import safe_line
from tests.conftest import ROOT
from tests.handmade import ATTENTION_PICTURE, POOL_PICTURE, picture_result
from tests.png import colours, has_colour
from tests.test_reports import assert_inert, parse

ARTIFACTS = Path(os.environ.get("PA_SCREENSHOTS") or ROOT / "out" / "screenshots")


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    return int(hex_colour[1:3], 16), int(hex_colour[3:5], 16), int(hex_colour[5:7], 16)


def test_pool_picture_shows_owners_free_lost_shared_and_the_mishandled_block() -> None:
    svg = pool_svg(normalise_picture(POOL_PICTURE, safe_line), "en")  # type: ignore[arg-type]
    states = re.findall(r'<g class="pa-state" data-state="(\w+)">(.*?)</g>(?=<text)', svg, re.S)
    assert [name for name, _ in states] == ["before", "after"]
    for _, body in states:
        assert len(re.findall(r'class="pa-block"', body)) == 6
    before, after = (dict(re.findall(r'data-block="(\d+)" data-holders="([^"]*)"', body)) for _, body in states)
    assert before == {"0": "r0", "1": "r1", "2": "free", "3": "free", "4": "free", "5": "free"}
    assert after["1"] == "r0, r1" and after["2"] == "lost"  # handed out twice; neither free nor held
    assert svg.count('class="pa-highlight"') == 2  # block 1, outlined before and after
    assert f'fill="{PALETTE[0]}"' in svg and f'fill="{PALETTE[1]}"' in svg and f'fill="{FREE}"' in svg
    assert "4 free blocks" in svg and "3 free blocks" in svg
    assert "调用前" in pool_svg(normalise_picture(POOL_PICTURE, safe_line), "zh") and "4 个空闲块" in pool_svg(normalise_picture(POOL_PICTURE, safe_line), "zh")  # type: ignore[arg-type]


def test_pool_picture_says_seq_len_and_marks_what_the_call_changed() -> None:
    """A decode that raised seq_len before its OOM: the blocks are the same before and after,
    and the picture still shows what changed (the issue's card drew two identical pools)."""
    state = {"free": [], "tables": {"r0": [0, 1, 2]}}
    raw = {"kind": "pool", "num_blocks": 3, "step": "m.allocate_for_decode(r0)", "highlight": [],
           "before": {**state, "lens": {"r0": 3}}, "after": {**state, "lens": {"r0": 4}}}
    picture = normalise_picture(raw, safe_line)
    assert picture is not None
    svg = pool_svg(picture, "en")
    changed = re.findall(r'<tspan class="pa-changed"[^>]*>([^<]*)</tspan>', svg)
    assert changed == [" · r0: [0, 1, 2] seq_len 3 → 4"], changed
    assert "r0: [0, 1, 2] seq_len=3" in svg  # the before panel: the value, unmarked
    assert "changed: r0: [0, 1, 2] seq_len 3 → 4" in " ".join(pool_text(picture, "en"))
    assert "改变: r0: [0, 1, 2] seq_len 3 → 4" in " ".join(pool_text(picture, "zh"))


def test_a_free_list_put_in_another_order_is_said_where_the_pools_look_alike() -> None:
    """An OOM rollback that reverses free_blocks (red team 13): every block is where it was, so
    the two pools look the same; the changed line and the summary say what moved."""
    tables = {"r0": [4], "r2": [2]}
    raw = {"kind": "pool", "num_blocks": 5, "step": "m.allocate_for_prefill(r3)", "highlight": [],
           "before": {"free": [0, 1, 3], "tables": tables}, "after": {"free": [3, 1, 0], "tables": tables}}
    picture = normalise_picture(raw, safe_line)
    assert picture is not None
    changed = re.findall(r'<tspan class="pa-changed"[^>]*>([^<]*)</tspan>', pool_svg(picture, "en"))
    assert changed == [" · free_blocks [0, 1, 3] → [3, 1, 0]"], changed
    assert "changed: free_blocks [0, 1, 3] → [3, 1, 0]" in " ".join(pool_text(picture, "en"))


def test_a_call_that_changed_nothing_is_one_panel() -> None:
    same = {"free": [1], "tables": {"r0": [0]}, "lens": {"r0": 2}}
    picture = normalise_picture({"kind": "pool", "num_blocks": 2, "step": "m.allocate_for_prefill(r1)", "before": same, "after": same}, safe_line)
    assert picture is not None
    assert re.findall(r'data-state="(\w+)"', pool_svg(picture, "en")) == ["unchanged"]
    assert [line.split(":")[0].strip() for line in pool_text(picture, "en")[:1]] == ["before = after"]


def test_the_earlier_call_that_broke_the_pool_is_drawn_first() -> None:
    """An ownership failure found at a later call, whose blocks an earlier prefill lost on its OOM."""
    lost = {"free": [1, 2], "tables": {"r0": [0]}, "lens": {"r0": 2, "r1": 11}}
    raw = {
        "kind": "pool", "num_blocks": 4, "step": "m.allocate_for_prefill(r2)", "highlight": [3],
        "before": lost, "after": {"free": [], "tables": {"r0": [0], "r2": [1, 2]}, "lens": {"r0": 2, "r1": 11, "r2": 4}},
        "earlier": {"step": "m.allocate_for_prefill(r1)", "highlight": [3],
                    "before": {"free": [1, 2, 3], "tables": {"r0": [0]}, "lens": {"r0": 2, "r1": 11}}, "after": lost},
    }
    picture = normalise_picture(raw, safe_line)
    assert picture is not None and picture["earlier"]["step"] == "m.allocate_for_prefill(r1)"
    svg = pool_svg(picture, "en")
    steps = re.findall(r'class="pa-step">([^<]*)<', svg)
    assert steps == ["① the call that first went wrong: m.allocate_for_prefill(r1)", "② the call where it was found: m.allocate_for_prefill(r2)"]
    panels = re.findall(r'data-state="(\w+)"(?: data-call="(\w+)")?', svg)
    assert panels == [("before", "earlier"), ("after", "earlier"), ("before", "this_call"), ("after", "this_call")]
    earlier_after = re.findall(r'data-call="earlier">(.*?)</g><text', svg, re.S)[1]
    assert 'data-block="3" data-holders="lost"' in earlier_after  # lost by the earlier call, where it happened
    text = pool_text(picture, "zh")
    assert text[0] == "① 最先出错的调用：m.allocate_for_prefill(r1)" and "② 出错被发现的调用：m.allocate_for_prefill(r2)" in text
    # A malformed earlier call is left out; the failing call is still drawn.
    assert "earlier" not in (normalise_picture({**raw, "earlier": {"before": "x"}}, safe_line) or {"earlier": 1})


def test_attention_heatmap_marks_what_is_beyond_the_tolerance() -> None:
    svg = attention_svg(normalise_picture(ATTENTION_PICTURE, safe_line), "en")  # type: ignore[arg-type]
    cells = re.findall(r'data-seq="(\d)" data-head="(\d)" data-bad="(\d)"', svg)
    assert len(cells) == 12
    bad = {(int(s), int(h)) for s, h, b in cells if b == "1"}
    assert bad == {(0, 2), (0, 3), (1, 3), (2, 1)}  # 0.4, 0.2, 0.05 and NaN against 2e-5
    assert 'class="pa-tolerance"' in svg and "tolerance 2e-05 (float32)" in svg
    assert svg.count('class="pa-highlight"') == 1  # the worst cell


@pytest.mark.parametrize(
    "raw",
    [
        None,
        {"kind": "pool", "num_blocks": 0, "before": {"free": [], "tables": {}}},
        {"kind": "pool", "num_blocks": 4, "before": {"free": "0123", "tables": {}}},
        {"kind": "pool", "num_blocks": 4},
        {"kind": "attention", "errors": [[1.0]], "tolerance": float("nan")},
        {"kind": "attention", "errors": [], "tolerance": 1e-3},
        {"kind": "heatmap", "errors": [[1.0]], "tolerance": 1e-3},
    ],
)
def test_malformed_pictures_draw_nothing(raw: object) -> None:
    assert normalise_picture(raw, safe_line) is None


def test_card_styles_are_scoped_so_a_notebook_keeps_its_own() -> None:
    rules = re.findall(r"([^{}]+)\{[^}]*\}", html.CARD_STYLE)
    selectors = [s.strip() for rule in rules for s in rule.split(",")]
    assert selectors and all(s.startswith(".pa-card") for s in selectors), [s for s in selectors if not s.startswith(".pa-card")]
    fragment = html.fragment(picture_result(), "en", numbering="run")
    assert fragment.startswith('<div class="pa-card"') and "<html" not in fragment and "<script" not in fragment
    assert fragment.count("<svg") == 2 and "cell [2], line 7" in fragment
    assert_inert(fragment)


# --- in a real browser ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from tests.test_dashboard import Browser, find_chromium

    executable = find_chromium()
    if executable is None:
        pytest.skip("no Chromium found (./run-tests installs Debian's chromium when run as root)")
    import tempfile

    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        instance = Browser(executable, Path(profile))
        try:
            yield instance
        finally:
            instance.close()


def _shot(browser, selector: str, path: Path) -> bytes:  # type: ignore[no-untyped-def]
    import base64

    box = browser.js(f"(() => {{ const r = document.querySelector('{selector}').getBoundingClientRect(); return [r.x + scrollX, r.y + scrollY, r.width, r.height]; }})()")
    x, y, width, height = box
    assert width > 200 and height > 100, (selector, box)
    clip = {"x": x, "y": y, "width": width, "height": height, "scale": 1}
    data = base64.b64decode(browser.call("Page.captureScreenshot", {"format": "png", "clip": clip, "captureBeyondViewport": True}, session=True)["data"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return data


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_pictures_appear_in_screenshots(browser, tmp_path: Path, lang: str) -> None:  # type: ignore[no-untyped-def]
    card = tmp_path / f"scorecard-{lang}.html"
    card.write_text(html.render(picture_result(), lang), encoding="utf-8")
    browser.open(card.as_uri())
    assert browser.problems() == []  # nothing blocked by the page's CSP, no errors
    assert browser.js("document.querySelectorAll('svg.pa-pool .pa-block').length") == 12
    assert browser.js("document.querySelectorAll('svg.pa-attention .pa-cell').length") == 12
    pool = colours(_shot(browser, "svg.pa-pool", ARTIFACTS / f"pool-{lang}.png"))
    for colour in (FREE, PALETTE[0], PALETTE[1]):  # free blocks grey, r0 and r1 in their colours
        assert has_colour(pool, _rgb(colour)), colour
    assert has_colour(pool, (17, 17, 17), tolerance=10)  # the outline of the mishandled block
    heat = colours(_shot(browser, "svg.pa-attention", ARTIFACTS / f"attention-{lang}.png"))
    assert sum(n for (r, g, b), n in heat.items() if r > 180 and g < 90 and b < 90) > 200  # far beyond the tolerance: red
    assert sum(n for (r, g, b), n in heat.items() if g > r + 20 and g > 150) > 200  # within it: green
    assert has_colour(heat, (0x22, 0x22, 0x22))  # NaN
    whole = ARTIFACTS / f"scorecard-{lang}.png"
    browser.screenshot(whole)
    assert whole.stat().st_size > 20_000


def test_item_ids_never_break_mid_word(browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    card = tmp_path / "narrow.html"
    card.write_text(html.render(picture_result(), "en"), encoding="utf-8")
    browser.call("Emulation.setDeviceMetricsOverride", {"width": 360, "height": 900, "deviceScaleFactor": 1, "mobile": False}, session=True)
    try:
        browser.open(card.as_uri())
        ids = "Array.from(document.querySelectorAll('code.pa-id'))"
        failed = sum(i.status == "failed" for i in picture_result().items)
        assert browser.js(f"{ids}.length") == failed + 1 + len(picture_result().items)  # failed and not-run cards, and the table of every item
        assert browser.js(f"{ids}.filter(e => e.getClientRects().length !== 1).map(e => e.textContent)") == []
        browser.screenshot(ARTIFACTS / "scorecard-narrow.png")
        # The measure can fail: let ids break like other code, and some of them do at this width.
        browser.js("document.head.insertAdjacentHTML('beforeend', '<style>.pa-card code.pa-id{white-space:normal;word-break:break-all}.pa-card td.pa-idcol{white-space:normal;width:1px}</style>')")
        assert browser.js(f"{ids}.filter(e => e.getClientRects().length > 1).length") > 0
    finally:
        browser.call("Emulation.clearDeviceMetricsOverride", session=True)


def test_notebook_fragment_renders_inside_a_foreign_page(browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # A page standing in for a notebook: its own styles must not change, the card must show.
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><style>body{background:rgb(1,2,3)} pre{color:rgb(4,5,6)}</style></head>"
        f"<body><pre id='theirs'>x</pre>{html.fragment(picture_result(), 'zh', numbering='run')}</body></html>"
    )
    path = tmp_path / "notebook.html"
    path.write_text(page, encoding="utf-8")
    browser.open(path.as_uri())
    assert browser.js("getComputedStyle(document.body).backgroundColor") == "rgb(1, 2, 3)"
    assert browser.js("getComputedStyle(document.getElementById('theirs')).color") == "rgb(4, 5, 6)"
    assert browser.js("document.querySelectorAll('.pa-card svg').length") == 2
    assert "代码单元 [2]第 7 行" in browser.js("document.getElementById('errors-first').textContent")
    _shot(browser, ".pa-card", ARTIFACTS / "check-fragment-zh.png")
    assert len(parse(page).tags) > 10


@pytest.mark.slow
def test_real_failures_carry_the_pictures_the_scorecard_draws() -> None:
    from tests.conftest import CORPUS, graded

    decode = next(i for i in graded(CORPUS / "buggy" / "todo3_mod_eq_one.py").items if i.id == "todo3.growth")
    assert decode.failure is not None and decode.failure.picture and decode.failure.picture["kind"] == "pool"
    assert decode.failure.picture["before"]["tables"] and decode.failure.picture["step"].startswith("m.allocate_for_decode(")
    attention = next(i for i in graded(CORPUS / "buggy" / "todo5_gqa_head_modulo.py").items if i.id == "todo5.gqa")
    assert attention.failure is not None and attention.failure.picture and attention.failure.picture["kind"] == "attention"
    page = html.render(graded(CORPUS / "buggy" / "todo3_mod_eq_one.py"), "en")
    assert page.count("<svg") >= 1
