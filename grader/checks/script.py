"""Reproductions: the code a student pastes after their own cells to see a failure again.

A script is built step by step as a check drives the submission, so it holds exactly the
calls that ran, in order, from a fresh process.  When a check fails it appends `assert`s that
state the expected and the actual value: pasted after the student's cells the script fails
there, and after a correct solution it runs clean (every expectation is written relative to
what the code itself chose, never to this submission's particular block ids).  Comments
exist in both languages.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Line:
    code: str  # "" for a comment-only line
    en: str = ""
    zh: str = ""
    code_zh: str = ""  # the same code with its assert message in Chinese (empty: `code`)

    def render(self, lang: str) -> str:
        comment = self.zh if lang == "zh" and self.zh else self.en
        code = self.code_zh if lang == "zh" and self.code_zh else self.code
        if not comment:
            return code
        if not code:
            return f"# {comment}"
        return f"{code}  # {comment}"


@dataclass
class Script:
    lines: list[Line] = field(default_factory=list)

    def add(self, code: str, en: str = "", zh: str = "") -> None:
        self.lines.append(Line(code, en, zh))

    def note(self, en: str, zh: str) -> None:
        self.lines.append(Line("", en, zh))

    def expect(self, condition: str, message: str, message_zh: str = "") -> None:
        """An assert whose message (an f-string body) shows the expected and the actual value.

        The message is written between double quotes, so its expressions use single quotes
        (an f-string of Python 3.11 cannot nest the same quote or hold a backslash).
        """
        for text in (message, message_zh):
            if '"' in text or "\\" in text:
                raise ValueError(f"an assert message for a reproduction cannot hold a double quote or backslash: {text}")
        code_zh = f'assert {condition}, f"{message_zh}"' if message_zh else ""
        self.lines.append(Line(f'assert {condition}, f"{message}"', code_zh=code_zh))

    def copy(self) -> Script:
        return Script(list(self.lines))

    def render(self, lang: str, limit: int = 0) -> str:
        rendered = "\n".join(line.render(lang) for line in self.lines).split("\n")
        if limit and len(rendered) > limit:
            # Keep the set-up and the failing end; the middle steps are the least telling.  The
            # cut falls between whole statements (never inside a try/except), so that what is
            # left still runs.
            start = limit // 3
            while start < len(rendered) and not _statement_starts(rendered[start]):
                start += 1
            end = len(rendered) - (limit - start - 1)
            while end < len(rendered) and not _statement_starts(rendered[end]):
                end += 1
            if start < end:
                middle = f"# ... 省略 {end - start} 行 ..." if lang == "zh" else f"# ... {end - start} lines cut ..."
                rendered = [*rendered[:start], middle, *rendered[end:]]
        return "\n".join(rendered)


def _statement_starts(line: str) -> bool:
    """Whether a line of a reproduction begins a top-level statement (a cut may fall before it)."""
    return not line[:1].isspace() and re.match(r"(except|else|finally|elif)\b", line) is None
