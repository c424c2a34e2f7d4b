"""Where the answer lives in the exercise's single source, and which TODO owns each part.

A solution region (``# >>> solution`` ... ``# <<< solution``) is followed by the template
region that replaces it for students, whose prompt names the TODO ("TODO 3: ...").  That
pairing, not the line numbers, decides the TODO, so regions can move and grow freely.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from grader import assign

OPEN, CLOSE = "# >>> solution", "# <<< solution"
TEMPLATE_OPEN, TEMPLATE_CLOSE = "# >>> template", "# <<< template"
TODO_IN_PROMPT = re.compile(r"\bTODO (\d+)\b")


class NoRepository(Exception):
    """The audit was started outside a checkout: there is no answer to mutate."""


@dataclass(frozen=True)
class Region:
    todo: str  # "todo1" ... as in grader/config.py's TODOS, or "given"
    first: int  # first line of the answer (1-based), just after the opening marker
    last: int  # last line of the answer (1-based), just before the closing marker
    graded_by: str = ""  # given code: the TODO whose items call it (they are graded with its mutants)

    def holds(self, first: int, last: int) -> bool:
        return self.first <= first and last <= self.last


def find_regions(text: str) -> list[Region]:
    """Every solution region of the source, in order, each with its TODO."""
    lines = text.splitlines()
    regions: list[Region] = []
    opened: int | None = None
    pending: list[tuple[int, int]] = []  # closed solution regions waiting for their template
    template: int | None = None
    for number, line in enumerate(lines, start=1):
        marker = line.strip()
        if marker == OPEN:
            opened = number
        elif marker == CLOSE:
            if opened is None:
                raise ValueError(f"line {number}: '{CLOSE}' without '{OPEN}'")
            pending.append((opened + 1, number - 1))
            opened = None
        elif marker == TEMPLATE_OPEN:
            template = number
        elif marker == TEMPLATE_CLOSE and template is not None:
            match = TODO_IN_PROMPT.search("\n".join(lines[template:number]))
            if pending and match is None:
                raise ValueError(f"lines {template}-{number}: the template after a solution region names no TODO")
            regions.extend(Region(f"todo{match.group(1)}", first, last) for first, last in pending if match)
            pending, template = [], None
    if opened is not None or pending:
        raise ValueError("a solution region is unclosed or has no template naming its TODO")
    return regions


GIVEN = "given"  # the TODO name of given code's mutants
CONTRACT = ("estimate_kv_cache_bytes", "Request", "KVCacheManager", "paged_attention")
# The TODO whose items call each piece of given code (a given mutant is graded with them too).
CALLED_BY = {"estimate_kv_cache_bytes": "todo1", "Request": "todo2", "KVCacheManager": "todo2", "allocate_for_decode": "todo3",
             "get_physical_cache": "todo4", "paged_attention": "todo5"}


def given_regions(text: str, answers: list[Region]) -> list[Region]:
    """The given code: each statement of a contract function or method that is not part of a
    solution region (validation, allocation_report, release_request, the bounds checks...).
    Docstrings are left out (no behaviour)."""
    regions: list[Region] = []
    for top in ast.parse(text).body:
        if not (isinstance(top, (ast.FunctionDef, ast.ClassDef)) and top.name in CONTRACT):
            continue
        functions = [top] if isinstance(top, ast.FunctionDef) else [n for n in top.body if isinstance(n, ast.FunctionDef)]
        for function in functions:
            for index, statement in enumerate(function.body):
                if index == 0 and isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
                    continue  # the docstring
                first, last = statement.lineno, statement.end_lineno or statement.lineno
                if not any(a.first <= last and first <= a.last for a in answers):
                    regions.append(Region(GIVEN, first, last, CALLED_BY.get(function.name, CALLED_BY[top.name])))
    return regions


def reference_module(source_text: str) -> str:
    """The reference module exactly as `python -m grader assign` writes it from this source."""
    return assign.module_text(assign.parse_cells(source_text), "solution", assign.SOURCE)


def source_path(root: Path) -> Path:
    path = root / assign.SOURCE
    if not path.is_file():
        raise NoRepository(
            f"the audit mutates the exercise's answer in {assign.SOURCE}, which is not under {root.resolve()}: "
            "the installed grader holds no answer. Run it from a checkout of the repository (or pass --root)."
        )
    return path
