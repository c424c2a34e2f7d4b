"""What each rubric item checks, as the student is told it (grader/rules.toml).

One source for two readers: `python -m grader assign` writes each TODO's rules into the
notebooks (`notebook_cell`), and the scorecard lists a failed item's rules next to it
(`for_item`).  `problems` is what keeps the rules and the rubric (grader/config.toml) from
drifting apart: every item has a rule, and every rule names items of its own TODO.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import tomllib

from grader.config import Config

DEFAULT_PATH = Path(__file__).with_name("rules.toml")
EVERY_ITEM = "*"

WORDS = {
    "heading": ("评分规则：{todo}（共 {points} 分）", "What the grader checks: {todo} ({points} points)"),
    "lead": (
        "评分器在固定的边界情形和随机生成的情形上检查下面每条规则；一个评分项只有在它检查的情形全部通过时才得分。"
        "每条规则后面是检查它的评分项和分值。每次被评分的调用最多用 {call} 秒 CPU 时间，一个评分项的全部调用最多 {item} 秒；整份提交最多用 {memory} MB 内存。",
        "The grader checks each rule below on fixed corner cases and on randomly generated ones; an item scores "
        "only when every case it checks passes. After each rule: the items that check it, and their points. "
        "A graded call may take {call} s of CPU time at most, all the calls of one item {item} s, and the whole "
        "submission {memory} MB of memory.",
    ),
    "integrity": (
        "不要导入或读取答案（`reference`、`student_template`）或评分器的代码（最后的 `grader.check()` 除外），"
        "也不要改动 Python 的导入机制（`sys.meta_path` 等）：这样的提交整份得零分。",
        "Never import or read the answer key (`reference`, `student_template`) or the grader's code (the "
        "`grader.check()` at the end excepted), nor change Python's import machinery (`sys.meta_path` and the "
        "like): such a submission scores zero as a whole.",
    ),
    "every": ("本 TODO 的全部评分项", "every item of this TODO"),
    "points": ("{points} 分", "{points} pts"),
    "on_card": ("这一项检查的规则", "What this item checks"),
}
TODO_TITLES = {todo: (f"TODO {todo[-1]}", f"TODO {todo[-1]}") for todo in ("todo1", "todo2", "todo3", "todo4", "todo5")}


@dataclass(frozen=True)
class Rule:
    todo: str
    items: tuple[str, ...]  # the rubric items whose checks apply this rule ("*": every item of the TODO)
    zh: str
    en: str

    def text(self, lang: str) -> str:
        return self.zh if lang == "zh" else self.en

    def names(self, item_id: str, todo: str) -> bool:
        return item_id in self.items or (EVERY_ITEM in self.items and todo == self.todo)


def say(key: str, lang: str, **fmt: object) -> str:
    zh, en = WORDS[key]
    return (zh if lang == "zh" else en).format(**fmt)


def load_rules(path: Path | None = None) -> tuple[Rule, ...]:
    raw = tomllib.loads((path or DEFAULT_PATH).read_text(encoding="utf-8"))
    rules = []
    for number, entry in enumerate(raw.get("rule", []), start=1):
        if set(entry) != {"todo", "items", "zh", "en"}:
            raise ValueError(f"rule {number}: needs exactly todo, items, zh and en, got {sorted(entry)}")
        items = entry["items"]
        if not isinstance(items, list) or not items or not all(isinstance(i, str) for i in items):
            raise ValueError(f"rule {number}: items must be a non-empty list of item ids (or [\"*\"])")
        if not all(isinstance(entry[k], str) and entry[k].strip() for k in ("todo", "zh", "en")):
            raise ValueError(f"rule {number}: todo, zh and en must be non-empty strings")
        rules.append(Rule(entry["todo"], tuple(items), " ".join(entry["zh"].split()), " ".join(entry["en"].split())))
    return tuple(rules)


def problems(rules: tuple[Rule, ...], config: Config) -> list[str]:
    """Where the rules and the rubric disagree: a rule naming an item not in the rubric or not in
    its TODO, an item no rule names by its id."""
    todo_of = {item.id: item.todo for item in config.items}
    found = []
    for rule in rules:
        for item_id in rule.items:
            if item_id == EVERY_ITEM:
                if rule.todo not in todo_of.values():
                    found.append(f"a rule of {rule.todo}, a TODO with no rubric item: {rule.en[:60]}")
            elif item_id not in todo_of:
                found.append(f"a rule names {item_id}, which is not a rubric item: {rule.en[:60]}")
            elif todo_of[item_id] != rule.todo:
                found.append(f"a rule of {rule.todo} names {item_id}, an item of {todo_of[item_id]}")
    for item in config.items:  # a TODO-wide rule ("*") is not enough: each item says what it checks itself
        if not any(item.id in rule.items for rule in rules):
            found.append(f"no rule says what {item.id} checks")
    return found


def checked(config: Config, rules: tuple[Rule, ...] | None = None) -> tuple[Rule, ...]:
    """The rules, once they agree with the rubric (ValueError listing every disagreement)."""
    rules = load_rules() if rules is None else rules
    found = problems(rules, config)
    if found:
        raise ValueError("grader/rules.toml disagrees with the rubric:\n  " + "\n  ".join(found))
    return rules


@functools.lru_cache(maxsize=1)
def _default() -> tuple[Rule, ...]:
    return load_rules()


def for_item(item_id: str, todo: str) -> list[Rule]:
    """The rules an item checks, in order (none for an item the shipped rules do not name)."""
    try:
        rules = _default()
    except (OSError, ValueError):  # a broken rules file must never cost a scorecard
        return []
    return [rule for rule in rules if rule.names(item_id, todo)]


def _tag(rule: Rule, config: Config, lang: str) -> str:
    if EVERY_ITEM in rule.items:
        return say("every", lang)
    sep = "、" if lang == "zh" else ", "
    return sep.join(f"`{item_id}` {say('points', lang, points=f'{config.item(item_id).weight:g}')}" for item_id in rule.items)


def notebook_cell(todo: str, config: Config, rules: tuple[Rule, ...], lead: bool = False) -> str:
    """The markdown cell stating `todo`'s rules: Chinese first, then English, as the notebook
    writes; `lead`: with the paragraph saying how rules and items relate (the first such cell)."""
    points = sum(item.weight for item in config.items if item.todo == todo)
    mine = [rule for rule in rules if rule.todo == todo]
    if not mine:
        raise ValueError(f"no rule for {todo}")
    parts = []
    for lang, (open_, close) in (("zh", ("［", "］")), ("en", ("[", "]"))):
        title = TODO_TITLES[todo][0 if lang == "zh" else 1]
        parts.append(f"#### {say('heading', lang, todo=title, points=f'{points:g}')}\n")
        if lead:
            limits = config.limits
            parts.append(say("lead", lang, call=f"{limits.call_timeout_s:g}", item=f"{limits.item_budget_s:g}", memory=limits.memory_mb) + "\n")
            if config.zero_on_flag:  # grader/integrity.py
                parts.append(say("integrity", lang) + "\n")
        parts += [f"- {rule.text(lang)} {open_}{_tag(rule, config, lang)}{close}" for rule in mine]
        parts.append("")
    return "\n".join(parts).rstrip("\n")
