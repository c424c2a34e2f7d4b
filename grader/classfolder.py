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
import unicodedata
from pathlib import Path
from urllib.parse import quote

from grader.config import Config
from grader.gradebook import Gradebook
from grader.report import gradescope, html, markdown
from grader.results import Failure, GradeResult, Text, not_graded
from grader.sanitize import sanitize_result
from grader.stopping import held

STUDENTS_DIR = "students"
_UMASK = os.umask(0o022)
os.umask(_UMASK)


# A student id is its own file name only when no file system can confuse it with another's:
# lower case (case-insensitive volumes), NFC (macOS normalises names), short, no dot first
# (hidden), none of Windows' device names.  Every other id gets a readable part and a hash
# of the whole id after a "~", which no id kept as it is contains: two ids, two names.
_KEPT = re.compile(r"\w[\w.-]{0,63}")
_DEVICES = {"con", "prn", "aux", "nul", *(f"com{n}" for n in range(10)), *(f"lpt{n}" for n in range(10))}
READABLE_BYTES = 96


def slug(student_id: str) -> str:
    """The file name (without suffix) of a student's scorecards: distinct for distinct ids, also
    on a case- or normalisation-insensitive volume, and at most about 120 bytes whatever the id."""
    text = student_id.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    kept = (
        text == student_id
        and _KEPT.fullmatch(text) is not None
        and text == unicodedata.normalize("NFC", text) == text.casefold()
        and len(text.encode("utf-8")) <= READABLE_BYTES
        and text.split(".")[0] not in _DEVICES
    )
    if kept:
        return text
    readable = re.sub(r"[^\w.-]+", "_", unicodedata.normalize("NFC", text)).lstrip(".") or "_"
    while len(readable.encode("utf-8")) > READABLE_BYTES:
        readable = readable[:-1]
    digest = hashlib.sha256(student_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{readable}~{digest}"


def write_atomic(path: Path, text: str) -> None:
    """Readers (and a resumed batch) see the old file or the new one, never half of one.

    Held against a batch's stop signal: an interrupt between mkstemp and the rename would leave
    the temporary file in the class folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with held():
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
    return sanitize_result(not_graded(str(path), config.digest, config.items, Failure(kind=kind, message=Text(zh, en))))


def write_dashboard(out: Path, lang: str) -> Path:
    """Rebuild DIR/dashboard.html from the gradebook's current results.  A student whose scorecards
    are missing (recorded before a crash, or by a grader that named the files otherwise) gets them
    first, so every link leads somewhere."""
    from grader.report import dashboard  # the dashboard is only needed at the end

    with Gradebook.in_dir(out) as book:
        entries = book.current()
    links = {}
    for entry in entries:
        card = out / STUDENTS_DIR / f"{slug(entry.student)}.html"
        if not card.is_file():
            try:
                write_student_files(out, entry.student, entry.result, lang)
            except OSError:
                continue  # no scorecard to link to; the row and its reason are still on the dashboard
        links[entry.student] = f"{STUDENTS_DIR}/{quote(slug(entry.student))}.html"
    target = out / "dashboard.html"
    write_atomic(target, dashboard.render(entries, lang, links))
    return target
