"""Results graded elsewhere, read back into GradeResults for the gradebook.

Accepted:
  * a results.json from `grade --json` (a student's CI run, Gradescope's run_autograder):
    Gradescope format with our GradeResult in extra_data.grade_result; or a bare GradeResult;
  * a folder of those (alice/results.json -> alice, bob.json -> bob);
  * a Gradescope "Export Submissions" zip or folder: submission_metadata.yml names the
    submitters (student id = :sid, else :email, else :name) and holds each :results:.
Results without extra_data.grade_result (another autograder's) are reported and skipped.
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

from grader.results import GradeResult

METADATA = "submission_metadata.yml"


class ImportProblem(Exception):
    pass


@dataclass(frozen=True)
class Imported:
    student: str
    result: GradeResult
    origin: str  # file (and entry) it came from
    submitted_at: str | None = None


def result_from_json(data: Any) -> GradeResult:
    if not isinstance(data, dict):
        raise ImportProblem("not a JSON object")
    if "items" in data and "config_digest" in data:
        return GradeResult.from_dict(data)
    grade_result = (data.get("extra_data") or {}).get("grade_result")
    if not isinstance(grade_result, dict):
        raise ImportProblem("no extra_data.grade_result: not produced by this grader")
    return GradeResult.from_dict(grade_result)


def _student_for(path: Path, base: Path | None) -> str:
    if base is not None and path.parent != base:
        return path.relative_to(base).parts[0]  # alice/results.json, alice/ci/results.json -> alice
    return path.parent.name if path.name == "results.json" else path.stem


def _json_file(path: Path, student: str) -> Imported:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ImportProblem(f"{path}: unreadable JSON ({error})") from None
    try:
        return Imported(student, result_from_json(data), str(path))
    except (ImportProblem, KeyError, TypeError) as error:
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
    except yaml.YAMLError as error:
        yield ImportProblem(f"{origin}: unreadable YAML ({error})")
        return
    for folder, record in sorted(metadata.items()):
        if not isinstance(record, dict):
            continue
        submitters = record.get(":submitters") or []
        where = f"{origin}:{folder}"
        try:
            result = result_from_json(record.get(":results"))
        except (ImportProblem, KeyError, TypeError) as error:
            yield ImportProblem(f"{where}: {error}")
            continue
        for person in submitters:  # a group submission counts for each member
            student = str(person.get(":sid") or person.get(":email") or person.get(":name") or folder)
            yield Imported(student, result, where, _when(record.get(":created_at")))


def read(path: Path, student: str | None = None) -> Iterator[Imported | ImportProblem]:
    """Everything importable under `path`; problems are yielded too, so one bad file skips only itself."""
    if path.is_file() and path.suffix == ".zip":
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n.rsplit("/", 1)[-1] == METADATA]
            if not names:
                yield ImportProblem(f"{path}: no {METADATA} (not a Gradescope export)")
                return
            text = io.TextIOWrapper(archive.open(min(names, key=len)), encoding="utf-8").read()
        yield from _gradescope_export(text, str(path))
    elif path.is_file() and path.name.endswith((".yml", ".yaml")):
        yield from _gradescope_export(path.read_text(encoding="utf-8"), str(path))
    elif path.is_file():
        try:
            yield _json_file(path, student or _student_for(path, None))
        except ImportProblem as problem:
            yield problem
    elif path.is_dir():
        metadata = path / METADATA
        if metadata.is_file():
            yield from _gradescope_export(metadata.read_text(encoding="utf-8"), str(metadata))
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
