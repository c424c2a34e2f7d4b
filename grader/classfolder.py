"""The class folder's files besides the gradebook: each student's scorecards and the dashboard.

    gradebook.sqlite          every grading, with history (grader/gradebook.py)
    dashboard.html            the class dashboard (grader/report/dashboard.py)
    students/<id>.json        Gradescope-format results.json (extra_data.grade_result inside)
    students/<id>.md, .html   the student's scorecards

Files are replaced atomically, so a reader (or a resumed batch) never sees half of one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from urllib.parse import quote

from grader.config import Config
from grader.gradebook import Gradebook
from grader.report import gradescope, html, markdown
from grader.results import FAILED, Failure, GradeResult, ItemResult, Text

STUDENTS_DIR = "students"
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def slug(student_id: str) -> str:
    """A file name for a student id; ids that needed changing get a hash so two never collide."""
    safe = re.sub(r"[^\w.-]", "_", student_id).strip(".") or "_"
    if safe != student_id:
        safe += "-" + hashlib.sha1(student_id.encode("utf-8")).hexdigest()[:6]
    return safe


def write_atomic(path: Path, text: str) -> None:
    """Readers (and a resumed batch) see the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; scorecards are shared with the TAs
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_student_files(out: Path, student_id: str, result: GradeResult, lang: str) -> None:
    folder, name = out / STUDENTS_DIR, slug(student_id)  # not with_suffix: ids like john.doe have dots
    payload = gradescope.to_results_json(result, lang)
    write_atomic(folder / f"{name}.json", json.dumps(payload, ensure_ascii=False, indent=2) + "\n")
    write_atomic(folder / f"{name}.md", markdown.render(result, lang))
    write_atomic(folder / f"{name}.html", html.render(result, lang))


def error_result(path: Path, config: Config, kind: str, en: str, zh: str) -> GradeResult:
    """The record kept for a student without a grade (the grader failed, or no single file to grade)."""
    failure = Failure(kind=kind, message=Text(zh, en))
    items = [
        ItemResult(id=i.id, todo=i.todo, title=Text(i.zh, i.en), weight=i.weight, status=FAILED, failure=failure)
        for i in config.items
    ]
    return GradeResult(submission=str(path), sha256="", config_digest=config.digest, items=items, error=failure)


def write_dashboard(out: Path, lang: str) -> Path:
    """Rebuild DIR/dashboard.html from the gradebook's current results."""
    from grader.report import dashboard  # the dashboard is only needed at the end

    with Gradebook.in_dir(out) as book:
        entries = book.current()
    links = {e.student: f"{STUDENTS_DIR}/{quote(slug(e.student))}.html" for e in entries}
    target = out / "dashboard.html"
    write_atomic(target, dashboard.render(entries, lang, links))
    return target
