"""Every rule a rubric item checks is stated in the student notebook, from grader/rules.toml, and
shown on the scorecard next to the item when it fails."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from grader import assign, rules
from grader.config import load_config
from grader.report import html, text
from grader.results import FAILED
from tests.conftest import ROOT, STUDENT_NB
from tests.handmade import picture_result

CONFIG = load_config()
RULES = rules.load_rules()


def _rules_cells(path: Path) -> dict[str, str]:
    """Each TODO's rules cell in a generated notebook, by the TODO its heading names."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    cells = {}
    for cell in nb["cells"]:
        if "rules" in cell["metadata"].get("tags", []):
            source = "".join(cell["source"])
            todo = next(t for t in ("todo1", "todo2", "todo3", "todo4", "todo5") if f"TODO {t[-1]}（" in source)
            cells[todo] = source
    return cells


def test_the_rules_agree_with_the_rubric() -> None:
    assert rules.problems(RULES, CONFIG) == []
    for item in CONFIG.items:  # every item says what it checks, with a rule of its own or a TODO-wide one
        assert rules.for_item(item.id, item.todo), item.id
        assert any(item.id in rule.items for rule in RULES), f"{item.id} has only TODO-wide rules"


@pytest.mark.parametrize("path", [STUDENT_NB, ROOT / "notebooks" / "paged_attention_solution.ipynb"])
def test_every_rule_is_in_its_todos_cell_with_its_items_and_points(path: Path) -> None:
    cells = _rules_cells(path)
    assert sorted(cells) == ["todo1", "todo2", "todo3", "todo4", "todo5"]
    for rule in RULES:
        cell = cells[rule.todo]
        for lang, tag_of in (("zh", "{id}` {w:g} 分"), ("en", "{id}` {w:g} pts")):
            line = next((row for row in cell.splitlines() if row.startswith(f"- {rule.text(lang)} ")), None)
            assert line is not None, (rule.todo, lang, rule.text(lang))
            if rules.EVERY_ITEM in rule.items:
                assert line.endswith(("［本 TODO 的全部评分项］", "[every item of this TODO]")), line
            for item_id in rule.items:
                if item_id != rules.EVERY_ITEM:
                    assert tag_of.format(id=item_id, w=CONFIG.item(item_id).weight) in line, line
    # Chinese first, then English, as the notebook writes; the time limits come from the configuration.
    first = cells["todo1"]
    assert first.index("评分规则：TODO 1（共 15 分）") < first.index("What the grader checks: TODO 1 (15 points)")
    assert f"{CONFIG.limits.call_timeout_s:g} s of CPU time" in first and f"{CONFIG.limits.memory_mb} MB of memory" in first
    assert CONFIG.zero_on_flag and "scores zero as a whole" in first and "整份得零分" in first  # grader/integrity.py


def test_rules_cells_stand_before_the_code_of_their_todo() -> None:
    nb = json.loads(STUDENT_NB.read_text(encoding="utf-8"))
    sources = ["".join(c["source"]) for c in nb["cells"]]
    where = {todo: next(i for i, s in enumerate(sources) if f"What the grader checks: TODO {todo[-1]} " in s) for todo in ("todo1", "todo2", "todo5")}
    assert where["todo1"] < next(i for i, s in enumerate(sources) if "def estimate_kv_cache_bytes" in s)
    assert where["todo2"] < next(i for i, s in enumerate(sources) if "class KVCacheManager" in s)
    assert where["todo5"] < next(i for i, s in enumerate(sources) if "def paged_attention" in s)


def test_a_rule_and_the_rubric_that_disagree_are_refused() -> None:
    stray = rules.Rule("todo2", ("todo2.no_such_item",), "某条规则", "some rule")
    elsewhere = rules.Rule("todo2", ("todo3.growth",), "某条规则", "some rule")
    found = rules.problems((*RULES, stray, elsewhere), CONFIG)
    assert any("todo2.no_such_item" in p and "not a rubric item" in p for p in found)
    assert any("todo3.growth, an item of todo3" in p for p in found)
    unstated = tuple(r for r in RULES if "todo4.truncate" not in r.items)
    assert rules.problems(unstated, CONFIG) == ["no rule says what todo4.truncate checks"]
    with pytest.raises(ValueError, match="todo4.truncate"):
        rules.checked(CONFIG, unstated)


def test_a_new_item_without_a_rule_stops_assign(monkeypatch: pytest.MonkeyPatch) -> None:
    added = dataclasses.replace(CONFIG.items[0], id="todo1.new_item")
    config = dataclasses.replace(CONFIG, items=(*CONFIG.items, added))
    cells = assign.parse_cells((ROOT / assign.SOURCE).read_text(encoding="utf-8"))
    with pytest.raises(ValueError, match="no rule says what todo1.new_item checks"):
        assign.notebook_text(cells, "template", config)


@pytest.mark.parametrize(
    "source, error",
    [
        ("# %% rules todo1\nsome text\n", "takes no text"),
        ("# %% [markdown]\n# hello\n", "one `# %% rules todoN` cell per TODO"),
    ],
)
def test_rules_markers_are_checked(source: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        assign.notebook_text(assign.parse_cells(source), "template")


def test_malformed_rules_files_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"
    path.write_text('[[rule]]\ntodo = "todo1"\nitems = []\nzh = "a"\nen = "b"\n', encoding="utf-8")
    with pytest.raises(ValueError, match="non-empty list"):
        rules.load_rules(path)
    path.write_text('[[rule]]\ntodo = "todo1"\nitems = ["*"]\nzh = "a"\n', encoding="utf-8")
    with pytest.raises(ValueError, match="exactly todo, items, zh and en"):
        rules.load_rules(path)


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_the_scorecard_shows_a_failed_items_rules(lang: str) -> None:
    result = picture_result()
    failed = [item for item in result.items if item.status == FAILED]
    passed = [item for item in result.items if item.status != FAILED]
    assert failed and passed
    page, plain = html.fragment(result, lang), text.render(result, lang)
    heading = rules.say("on_card", lang)
    assert page.count('class="pa-rules"') == len(failed) and heading in plain
    for item in failed:
        for rule in rules.for_item(item.id, item.todo):
            assert html.rule_html(rule.text(lang)) in page and rule.text(lang) in plain
    for item in passed:  # a passed item's own rules are not repeated on the card
        own = [r for r in RULES if item.id in r.items]
        assert all(html.rule_html(r.text(lang)) not in page for r in own)


def test_a_rules_code_spans_become_code_and_the_rest_is_escaped() -> None:
    assert html.rule_html("`a < b` & <i>") == "<code>a &lt; b</code> &amp; &lt;i&gt;"


def test_items_of_another_rubric_get_no_rules() -> None:
    assert rules.for_item("todo9.unknown", "todo9") == []
