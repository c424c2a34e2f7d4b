"""GitHub Actions: job summary, the `Points X/Y` notice GitHub Classroom reads, error annotations.

Workflow commands are lines on stdout that the runner interprets, so anything a submission
controls is escaped as command data, and the plain-text report (which quotes student
exceptions) is printed between ::stop-commands:: markers so it cannot issue commands itself.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from grader.report import markdown
from grader.results import FAILED, GradeResult

MAX_ANNOTATIONS = 10  # GitHub shows at most 10 of each kind per step


def in_actions(env: Mapping[str, str] = os.environ) -> bool:
    return env.get("GITHUB_ACTIONS") == "true"


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(name: str, message: str, **properties: str) -> str:
    props = ",".join(f"{key}={escape_property(value)}" for key, value in properties.items() if value)
    return f"::{name}{' ' + props if props else ''}::{escape_data(message)}"


def points_notice(result: GradeResult) -> str:
    """`Points X/Y` with the score as it is (two decimals at most), as GitHub Classroom's own tools write it.

    Classroom's reporter (classroom-resources/autograding-grading-reporter, src/notify-classroom.js)
    prints `Points ${totalPoints}/${maxPoints}` with JavaScript's default number formatting of a
    sum of per-test scores, and its Python runner gives each test max_score / number of tests,
    so the notice Classroom reads carries decimals whenever those do.  Rounding here would
    make Classroom disagree with the scorecard and the CSV.
    """
    return command("notice", f"Points {result.score:g}/{result.max_score:g}", title="Points")


def annotations(result: GradeResult, lang: str, file: str = "") -> list[str]:
    """The points notice first, then an error per failed item and a warning per cell that raised."""
    lines = [points_notice(result)]
    if result.error is not None:
        lines.append(command("error", result.error.message.get(lang), file=file, title=markdown.say("unreadable", lang)))
        return lines
    failed = [item for item in result.items if item.status == FAILED]
    shown = failed if len(failed) <= MAX_ANNOTATIONS else failed[: MAX_ANNOTATIONS - 1]
    for item in shown:
        body = [item.failure.message.get(lang) if item.failure else item.title.get(lang)]
        if item.failure is not None and item.failure.repro_for(lang):
            body.append(f"{markdown.say('repro', lang)}:\n{markdown.clip(item.failure.repro_for(lang), 2000, lang)}")
        lines.append(command("error", "\n".join(body), file=file, title=f"{item.id} ({item.score:g}/{item.weight:g})"))
    if len(shown) < len(failed):
        rest = [item.id for item in failed[len(shown) :]]
        lines.append(command("error", ", ".join(rest), file=file, title=markdown.say("more", lang, n=len(rest))))
    broken = [cell for cell in result.cells if cell.status not in ("ok", "not_run")]
    for cell in broken[:MAX_ANNOTATIONS]:
        title = f"{markdown.say('cell', lang)} {cell.index}: {cell.error_type or cell.status}"
        lines.append(command("warning", cell.message[:1000] or cell.status, file=file, title=title))
    return lines


def workspace_path(path: Path, env: Mapping[str, str] = os.environ) -> str:
    """The submission relative to the checkout, so annotations link to the file."""
    workspace = env.get("GITHUB_WORKSPACE")
    try:
        return str(path.resolve().relative_to(Path(workspace).resolve())) if workspace else str(path)
    except ValueError:
        return str(path)


def stop_commands(out: TextIO) -> str:
    token = secrets.token_hex(16)
    out.write(f"::stop-commands::{token}\n")
    return token


def resume_commands(out: TextIO, token: str) -> None:
    out.write(f"::{token}::\n")


def publish(result: GradeResult, lang: str, submission: Path, out: TextIO, env: Mapping[str, str] = os.environ) -> None:
    """Write the job summary and step outputs, then print the annotations."""
    summary = env.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as handle:
            handle.write(markdown.render(result, lang) + "\n")
    outputs = env.get("GITHUB_OUTPUT")
    if outputs:
        with open(outputs, "a", encoding="utf-8") as handle:
            handle.write(f"points={result.score:g}\nmax-points={result.max_score:g}\n")
    for line in annotations(result, lang, workspace_path(submission, env)):
        out.write(line + "\n")
    out.flush()
