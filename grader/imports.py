"""Results graded elsewhere, read back into GradeResults for the gradebook.

Accepted:
  * a results.json from `grade --json` (a student's CI run, Gradescope's run_autograder):
    Gradescope format with our GradeResult in extra_data.grade_result; or a bare GradeResult;
  * a folder of those (alice/results.json -> alice, bob.json -> bob);
  * a Gradescope "Export Submissions" zip or folder: submission_metadata.yml names the
    submitters (student id = :sid, else :email, else :name) and holds each :results:.
Results without extra_data.grade_result (another autograder's) are reported and skipped,
and so is anything malformed: a bad file or entry skips only itself, never the import.
Each result says where it came from: `import:ci` (results.json files) or `import:gradescope`
(an export), so the gradebook, the CSV and the dashboard can tell it from a grade made here.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from grader.gradebook import CI, GRADESCOPE
from grader.results import GradeResult
from grader.sanitize import sanitize_result

METADATA = "submission_metadata.yml"


class ImportProblem(Exception):
    pass


@dataclass(frozen=True)
class Imported:
    student: str
    result: GradeResult
    origin: str  # file (and entry) it came from
    source: str  # CI or GRADESCOPE
    submitted_at: str | None = None


# What GradeResult.from_dict raises on JSON of the wrong shape (a hand-edited or foreign file).
MALFORMED = (KeyError, TypeError, ValueError, AttributeError)


def result_from_json(data: Any) -> GradeResult:
    """A GradeResult from untrusted JSON; ImportProblem when it is not one of ours."""
    if not isinstance(data, dict):
        raise ImportProblem("not a JSON object")
    if "items" in data and "config_digest" in data:
        grade_result = data
    else:
        extra = data.get("extra_data")
        grade_result = extra.get("grade_result") if isinstance(extra, dict) else None
    if not isinstance(grade_result, dict):
        raise ImportProblem("no extra_data.grade_result: not produced by this grader")
    try:
        result = GradeResult.from_dict(grade_result)
    except MALFORMED as error:
        raise ImportProblem(f"not a valid grade result ({type(error).__name__}: {error})") from None
    # An imported file is untrusted text: made safe before it is recorded or rendered.
    return sanitize_result(result)


def _student_for(path: Path, base: Path | None) -> str:
    if base is not None and path.parent != base:
        return path.relative_to(base).parts[0]  # alice/results.json, alice/ci/results.json -> alice
    return path.parent.name if path.name == "results.json" else path.stem


def _json_file(path: Path, student: str) -> Imported:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as error:
        raise ImportProblem(f"{path}: unreadable JSON ({error})") from None
    try:
        return Imported(student, result_from_json(data), str(path), CI)
    except ImportProblem as error:
        raise ImportProblem(f"{path}: {error}") from None


def _when(value: Any) -> str | None:
    """Exports write times like `2026-01-29 17:15:22.145 -08:00`: YAML may or may not parse them."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(re.sub(r"\s+([+-]\d)", r"\1", value.strip()))
        except ValueError:
            return value
    if isinstance(value, datetime):
        value = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc).isoformat(timespec="seconds")
    return str(value) if value else None


def _gradescope_export(text: str, origin: str) -> Iterator[Imported | ImportProblem]:
    import yaml  # only exports need it

    try:
        metadata = yaml.safe_load(text) or {}
    except (yaml.YAMLError, RecursionError) as error:
        yield ImportProblem(f"{origin}: unreadable YAML ({error})")
        return
    if not isinstance(metadata, dict):
        yield ImportProblem(f"{origin}: not a Gradescope export's metadata (no mapping of submissions)")
        return
    for folder, record in sorted(metadata.items(), key=lambda pair: str(pair[0])):
        if not isinstance(record, dict):
            continue
        where = f"{origin}:{folder}"
        try:
            result = result_from_json(record.get(":results"))
        except ImportProblem as error:
            yield ImportProblem(f"{where}: {error}")
            continue
        submitters = [p for p in record.get(":submitters") or [] if isinstance(p, dict)]
        if not submitters:
            yield ImportProblem(f"{where}: no submitters")
        for person in submitters:  # a group submission counts for each member
            student = str(person.get(":sid") or person.get(":email") or person.get(":name") or folder)
            yield Imported(student, result, where, GRADESCOPE, _when(record.get(":created_at")))


def read(path: Path, student: str | None = None) -> Iterator[Imported | ImportProblem]:
    """Everything importable under `path`; problems are yielded too, so one bad file skips only itself."""
    if path.is_file() and path.suffix == ".zip":
        try:
            with zipfile.ZipFile(path) as archive:
                names = [n for n in archive.namelist() if n.rsplit("/", 1)[-1] == METADATA]
                if not names:
                    yield ImportProblem(f"{path}: no {METADATA} (not a Gradescope export)")
                    return
                text = io.TextIOWrapper(archive.open(min(names, key=len)), encoding="utf-8").read()
        except (OSError, zipfile.BadZipFile, UnicodeDecodeError, RuntimeError) as error:  # RuntimeError: encrypted
            yield ImportProblem(f"{path}: unreadable zip ({error})")
            return
        yield from _gradescope_export(text, str(path))
    elif path.is_file() and path.name.endswith((".yml", ".yaml")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            yield ImportProblem(f"{path}: unreadable ({error})")
            return
        yield from _gradescope_export(text, str(path))
    elif path.is_file():
        try:
            yield _json_file(path, student or _student_for(path, None))
        except ImportProblem as problem:
            yield problem
    elif path.is_dir():
        metadata = path / METADATA
        if metadata.is_file():
            yield from read(metadata)
            return
        files = sorted(p for p in path.rglob("*.json") if not any(part.startswith(".") for part in p.relative_to(path).parts))
        if not files:
            yield ImportProblem(f"{path}: no .json results found")
        for file in files:
            try:
                yield _json_file(file, student or _student_for(file, path))
            except ImportProblem as problem:
                yield problem
    else:
        yield ImportProblem(f"{path}: not found")
