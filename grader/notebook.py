"""`grader.check()`: the grader's feedback inside a running notebook.

    import grader
    grader.check()            # every TODO
    grader.check("todo3")     # only TODO 3's items (about half the time): the card shows TODO 3's points
    grader.check(lang="en")

It grades the cells this kernel has run so far, in the order they ran (IPython's input
history, as typed), exactly as `grade` grades a file: a fresh process of the grader runs them
in the sandbox, through IPython, in a copy of the notebook's folder (where the kernel started),
and checks them with the same rubric. Nothing of the kernel is used but the
text of those cells: not its objects, not its modules (a patched `torch` or `grader` in the
kernel changes nothing). The scorecard is shown inline (HTML in a notebook front end, text in
a terminal) and returned: `.score` out of 100 (over the items graded), `.points` and
`.possible` (the points of the TODOs checked: 17 and 25 for TODO 3), `.items`.  The card is
titled with the notebook's file name: the one the front end gives the kernel, else the
notebook in the kernel's folder whose code cells are the ones that ran.

Cell numbers are the kernel's execution counts, `In [n]`, as the notebook shows them.
`grader.check` lines themselves are never graded (grader/checkcalls.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.config import TODOS
from grader.results import FAILED, PASSED, GradeResult, ItemResult

MESSAGES = {
    "outside": (
        "grader.check() 只能在 Jupyter / IPython 笔记本中运行：它评的是内核已经运行过的代码单元。"
        "在终端中请用 `python -m grader grade 你的笔记本.ipynb`（或仓库中的 ./grade）。",
        "grader.check() works inside a Jupyter/IPython notebook: it grades the cells the kernel has run. "
        "In a terminal, run `python -m grader grade your_notebook.ipynb` (or ./grade in the repository).",
    ),
    "bad_todo": (
        "不认识的 TODO {todo!r}：可以写 {choices}，或者不写（检查全部）。",
        "unknown TODO {todo!r}: use one of {choices}, or nothing to check them all.",
    ),
    "bad_lang": ("lang 只能是 'zh' 或 'en'，收到 {value!r}", "lang must be 'zh' or 'en', got {value!r}"),
    "nothing": ("还没有运行过任何代码单元：先运行你的代码，再调用 grader.check()。", "no cell has run yet: run your cells first, then call grader.check()."),
    "failed": ("评分器自身出错（不是你的问题），请把这条信息告诉助教：{detail}", "the grader itself failed (not your fault); please show this to the TAs: {detail}"),
    "interrupted": ("已中断评分。", "grading interrupted."),
}
NOTE_RUN = (
    "评的是内核运行过的代码单元（按运行顺序）；单元编号是 In [n] 的执行计数。",
    "graded: the cells this kernel ran, in the order they ran; cell numbers are execution counts, In [n].",
)


def _say(key: str, lang: str, **fmt: object) -> str:
    zh, en = MESSAGES[key]
    return (zh if lang == "zh" else en).format(**fmt)


@dataclass
class CheckResult:
    """What grader.check() returns: the score out of 100 over the items graded, and the items."""

    result: GradeResult
    lang: str = "zh"
    seconds: float = 0.0
    todos: list[str] = field(default_factory=list)

    @property
    def score(self) -> float:
        return self.result.score

    @property
    def max_score(self) -> float:
        return self.result.max_score

    @property
    def points(self) -> float:
        """Points earned in the TODOs checked (every TODO: the same as .score)."""
        return sum(got for got, _ in self.result.todo_scores().values()) if self.todos else self.score

    @property
    def possible(self) -> float:
        return sum(possible for _, possible in self.result.todo_scores().values()) if self.todos else self.max_score

    @property
    def items(self) -> list[ItemResult]:
        return self.result.items

    @property
    def failed(self) -> list[str]:
        return [item.id for item in self.items if item.status == FAILED]

    def __repr__(self) -> str:
        from grader.report import scope

        passed = sum(1 for item in self.items if item.status == PASSED)
        total = scope.total(self.result, self.todos, self.lang) or f"{self.score:g} / 100"
        if self.lang == "zh":
            return f"<grader.check：{total}，通过 {passed} 个评分项，未通过 {len(self.failed)} 个>"
        return f"<grader.check: {total}, {passed} item{'s' * (passed != 1)} passed, {len(self.failed)} failed>"


def _shell() -> Any:
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def _todos(todo: object) -> list[str] | None:
    """None: every TODO. Accepts "todo3", "TODO 3", 3 and "3"."""
    if todo is None:
        return []
    text = str(todo).strip().lower().replace(" ", "")
    name = text if text.startswith("todo") else f"todo{text}"
    return [name] if name in TODOS else None


def history(shell: Any) -> list[tuple[int, str]]:
    """(execution count, source as typed) for every cell this kernel ran, in order."""
    raw = list(getattr(shell.history_manager, "input_hist_raw", []) or [])
    return [(number, source) for number, source in enumerate(raw) if number > 0 and isinstance(source, str) and source.strip()]


def _notebook_name(shell: Any, folder: str | None = None, cells: list[tuple[int, str]] = ()) -> str:
    """The notebook's file: as the front end names it to the kernel (Jupyter Server in the
    environment or as __session__, VS Code in a variable), else the notebook of the kernel's
    folder whose code cells are most like the cells that ran."""
    user_ns = getattr(shell, "user_ns", {})
    named = [os.environ.get("JPY_SESSION_NAME"), user_ns.get("__vsc_ipynb_file__")]
    session = user_ns.get("__session__")  # ipykernel's copy of the session's name (a console has one too)
    if isinstance(session, str) and session.endswith(".ipynb"):
        named.append(session)
    for candidate in named:
        if isinstance(candidate, str) and candidate.strip():
            return candidate
    return _likeliest_notebook(folder, cells) or "notebook.ipynb"


MAX_NOTEBOOKS, MAX_NOTEBOOK_BYTES = 40, 8 << 20  # the folder's notebooks read to find which one is running


def _likeliest_notebook(folder: str | None, cells: list[tuple[int, str]]) -> str | None:
    """The .ipynb of `folder` sharing the most code cells with `cells` (the only one, when there is
    one); None when none shares any, or two share as many."""
    if not folder:
        return None
    try:
        found = sorted(p for p in Path(folder).glob("*.ipynb") if p.is_file())[:MAX_NOTEBOOKS]
    except OSError:
        return None
    if len(found) == 1:
        return found[0].name
    ran = {" ".join(source.split()) for _, source in cells}
    scores: list[tuple[int, str]] = []
    for path in found:
        try:
            if path.stat().st_size > MAX_NOTEBOOK_BYTES:
                continue
            data = json.loads(path.read_text(encoding="utf-8"))
            sources = ["".join(c.get("source", "")) if isinstance(c.get("source"), list) else str(c.get("source", ""))
                       for c in data.get("cells", []) if isinstance(c, dict) and c.get("cell_type") == "code"]
        except (OSError, ValueError, AttributeError, TypeError):
            continue
        scores.append((sum(" ".join(source.split()) in ran for source in sources if source.strip()), path.name))
    scores.sort(reverse=True)
    if not scores or scores[0][0] == 0 or (len(scores) > 1 and scores[1][0] == scores[0][0]):
        return None
    return scores[0][1]


def _notebook_folder(shell: Any) -> str:
    """Where the kernel started, which is the notebook's folder (IPython's directory history
    begins there, whatever %cd did since)."""
    visited = getattr(shell, "user_ns", {}).get("_dh")
    if isinstance(visited, list) and visited and isinstance(visited[0], str):
        return visited[0]
    return os.getcwd()


def check(todo: str | int | None = None, *, lang: str | None = None) -> CheckResult | None:
    """Grade the cells this kernel has run so far and show the scorecard. See the module doc."""
    from grader.config import load_config

    config = load_config()
    lang = lang or config.feedback.language
    if lang not in ("zh", "en"):
        print(_say("bad_lang", "en", value=lang), file=sys.stderr)
        return None
    shell = _shell()
    if shell is None or not hasattr(shell, "history_manager"):
        print(_say("outside", lang), file=sys.stderr)
        return None
    todos = _todos(todo)
    if todos is None:
        print(_say("bad_todo", lang, todo=todo, choices=", ".join(repr(t) for t in TODOS)), file=sys.stderr)
        return None
    cells = history(shell)
    if not cells:
        print(_say("nothing", lang), file=sys.stderr)
        return None
    started = time.monotonic()
    folder = _notebook_folder(shell)
    try:
        result = grade_history(cells, _notebook_name(shell, folder, cells), todos, folder=folder)
    except KeyboardInterrupt:
        print(_say("interrupted", lang), file=sys.stderr)
        return None
    except Exception as error:  # the grader's own failure: say so, never a traceback
        print(_say("failed", lang, detail=f"{type(error).__name__}: {error}"), file=sys.stderr)
        return None
    outcome = CheckResult(result, lang, round(time.monotonic() - started, 2), todos)
    show(outcome)
    return outcome


def show(outcome: CheckResult) -> None:
    from grader.report import html, text

    plain = text.render(outcome.result, outcome.lang, numbering="run", todos=outcome.todos)
    try:
        from IPython.display import display

        rich = html.fragment(outcome.result, outcome.lang, numbering="run", todos=outcome.todos)
        display({"text/plain": plain, "text/html": rich}, raw=True)
    except ImportError:
        print(plain)


def grade_history(cells: list[tuple[int, str]], name: str, todos: list[str], timeout: float | None = None, folder: str | None = None) -> GradeResult:
    """Grade (number, source) cells in a fresh grader process, in a copy of `folder` (the
    notebook's; None: nothing of it), as `grade` grades a notebook; the sanitised result."""
    from grader.runner import stop_grader
    from grader.sanitize import sanitize_result

    with tempfile.TemporaryDirectory(prefix="pa-check-") as tmp:
        request, answer = Path(tmp) / "cells.json", Path(tmp) / "result.json"
        request.write_text(json.dumps({"cells": cells, "name": name, "todos": todos, "folder": folder}, ensure_ascii=True), encoding="utf-8")
        command = [sys.executable, "-m", "grader.notebook", str(request), str(answer)]
        env = {**os.environ, "PYTHONPATH": _import_root() + os.pathsep + os.environ.get("PYTHONPATH", "")}
        # Run from the empty temporary folder: nothing next to the notebook shadows the grader.
        child = subprocess.Popen(
            command, cwd=tmp, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            output, _ = child.communicate(timeout=timeout)
        except BaseException:  # Ctrl-C in the notebook, or the timeout: the grader and its sandbox stop
            stop_grader(child)
            raise
        if child.returncode != 0 or not answer.exists():
            tail = output.decode("utf-8", "replace")[-800:]
            raise RuntimeError(f"exit status {child.returncode}: {tail}")
        data = json.loads(answer.read_text(encoding="utf-8"))
    return sanitize_result(GradeResult.from_dict(data))


def _import_root() -> str:
    # The folder holding this `grader` package: the child imports the same grader as the kernel.
    return str(Path(__file__).resolve().parent.parent)


# --- the child: python -m grader.notebook REQUEST.json RESULT.json ----------------------------

def child_main(request: Path, answer: Path) -> int:
    from grader.checkcalls import strip_check_calls
    from grader.config import load_config
    from grader.folder import plan
    from grader.grade import grade_submission, resolve_device
    from grader.report.cells import annotate
    from grader.results import Text
    from grader.sanitize import sanitize_result
    from grader.submission import Cell, Submission

    data = json.loads(request.read_text(encoding="utf-8"))
    # The cells as typed, as `grade` reads them from a notebook: IPython runs them in the sandbox.
    cells = strip_check_calls([Cell(int(number), str(source)) for number, source in data["cells"]])
    digest = hashlib.sha256("\n\n".join(cell.source for cell in cells).encode("utf-8", "replace")).hexdigest()
    name = Path(re.sub(r"[\x00-\x1f]", "", str(data["name"]))[:300] or "notebook.ipynb")
    config = load_config()
    folder = Path(data["folder"]) if isinstance(data.get("folder"), str) else None
    notebook = name if name.is_absolute() or folder is None else folder / name
    submission = Submission(name, "notebook", cells, digest, folder=plan(notebook, folder, config.notebook))
    started = time.monotonic()
    result = grade_submission(submission, config, resolve_device("auto"), data["todos"] or None)
    result.seconds = round(time.monotonic() - started, 3)
    result.notes.insert(0, Text(*NOTE_RUN))
    result.submission_name = name.name  # the card's title: the notebook's own name, not the copy's path
    annotate(sanitize_result(result), cells, numbering="run")  # sanitised first: bounded work
    answer.write_text(json.dumps(sanitize_result(result).to_dict(), ensure_ascii=True), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(child_main(Path(sys.argv[1]), Path(sys.argv[2])))
