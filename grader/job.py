"""One grading job: grade a submission and deliver what was asked for, the one path that the
`grade` command and a warm batch's judges (grader/judge_server.py) share.

The text report goes to standard output; results.json (Gradescope's format, with the whole
result), the Markdown and HTML scorecards to files.  Under GitHub Actions (GITHUB_ACTIONS=true)
also the job summary, the `Points X/Y` notice and error annotations.  Returns the exit status
(EXIT_*); every file asked for is written in every case, also when drawing some part failed.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from grader.config import Config
    from grader.results import GradeResult

EXIT_GRADED, EXIT_BELOW, EXIT_UNGRADABLE, EXIT_INTERNAL = 0, 1, 2, 3
PATHS = ("submission", "json", "markdown", "html", "config", "folder")


@dataclass(frozen=True)
class GradeJob:
    """What `grade` is asked to do (its options), as plain data."""

    submission: Path = field(default_factory=Path)
    json: Path | None = None
    markdown: Path | None = None
    html: Path | None = None
    fail_under: float | None = None
    quiet: bool = False
    lang: str | None = None  # None: the configuration's
    device: str = "auto"
    seed: int | None = None  # None: the configuration's
    public_seed: bool = False  # the public seed even where a term secret is configured (--public-seed)
    config: Path | None = None  # None: grader/config.toml
    folder: Path | None = None  # the folder the notebook runs in (None: the one holding it)
    alone: bool = False  # no folder: the notebook runs next to itself only

    def to_dict(self) -> dict[str, Any]:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GradeJob:
        return cls(**{k: (Path(v) if k in PATHS and v is not None else v) for k, v in data.items()})

    def argv(self) -> list[str]:
        """The same job as a `grade` command line (what a cold batch runs)."""
        out = [str(self.submission)]
        for name in ("json", "markdown", "html", "fail_under", "device", "seed", "config", "folder", "lang"):
            value = getattr(self, name)
            if value is not None:
                out += ["--" + name.replace("_", "-"), str(value)]
        flags = [("--quiet", self.quiet), ("--alone", self.alone), ("--public-seed", self.public_seed)]
        return out + [flag for flag, on in flags if on]


def run_job(job: GradeJob) -> int:
    """Grade and write the reports; the exit status.  Never raises for a bug of its own: that reads
    as "the grader failed" (3), with the traceback on stderr."""
    try:
        return _run(job)
    except Exception:  # the last resort: a bug here must still read as "the grader failed" (3), not 1
        print("the grader itself failed / 评分器自身出错:", file=sys.stderr)
        traceback.print_exc(file=sys.stderr)
        return EXIT_INTERNAL


def _run(job: GradeJob) -> int:
    # Imported here so that `--help` and the other verbs stay fast.
    from grader import seeds
    from grader.config import load_config
    from grader.grade import grade_path, with_seed
    from grader.report import github, gradescope, html, markdown, text
    from grader.sanitize import sanitize_result, visible

    _tolerant_stdout()
    config = with_seed(load_config(job.config), job.seed)
    if job.public_seed:
        config = seeds.public_seed(config)
    lang = job.lang or config.feedback.language
    broken: list[str] = []  # parts that could not be made: the grader failed (exit 3)

    def attempt(part: str, draw: Callable[[], Any], fallback: Callable[[], Any]) -> Any:
        try:
            return draw()
        except Exception as error:
            broken.append(f"{part}: {type(error).__name__}: {error}")
            return fallback()

    try:
        result = grade_path(job.submission, config, job.device, folder=job.folder, alone=job.alone)
    except seeds.SecretError as error:  # the TA's to fix, said to the TA (its path is not the student's business)
        print(f"grade: {error}", file=sys.stderr)
        result = internal_error_result(job.submission, config, RuntimeError("the term secret is refused (see the grader's log)"))
    except Exception as error:  # a bug of the grader's own: still a scorecard, never a traceback
        result = internal_error_result(job.submission, config, error)
    result = sanitize_result(result)  # first: what follows then works on bounded text
    attempt("sources", lambda: with_sources(result, job.submission, config), lambda: None)
    result = sanitize_result(result)  # the source lines added are the student's text too
    actions = github.in_actions()
    report = attempt("text", lambda: text.render(result, lang, quiet=job.quiet), lambda: plain_summary(result))
    # In GitHub Actions the text quotes student exceptions: keep it from issuing workflow commands.
    token = github.stop_commands(sys.stdout) if actions else None
    sys.stdout.write(report)
    if token is not None:
        github.resume_commands(sys.stdout, token)
    sys.stdout.flush()
    if job.json is not None:
        payload = attempt("json", lambda: gradescope.to_results_json(result, lang), lambda: plain_payload(result, lang))
        _write(job.json, attempt("json", lambda: gradescope.to_json(payload), lambda: json.dumps(plain_payload(result, lang), default=str) + "\n"))
    for path, render, part in ((job.markdown, markdown.render, "markdown"), (job.html, html.render, "html")):
        if path is not None:
            _write(path, attempt(part, lambda render=render: render(result, lang), lambda: plain_summary(result)))
    if actions:
        attempt("github", lambda: github.publish(result, lang, job.submission, sys.stdout), lambda: None)
    if broken:
        # An exception's text may quote the submission: escaped, like every name on the terminal.
        print("the grader failed to draw part of the report / 评分器未能生成报告的一部分: " + visible("; ".join(broken)), file=sys.stderr)
        return EXIT_INTERNAL
    if result.error is not None:
        return EXIT_INTERNAL if result.error.kind == "internal" else EXIT_UNGRADABLE
    if result.grader_errors():  # a check of ours raised on some item: the rest were graded
        print("the grader failed on / 评分器出错的评分项: " + ", ".join(result.grader_errors()), file=sys.stderr)
        return EXIT_INTERNAL
    if job.fail_under is not None and result.score < job.fail_under:
        return EXIT_BELOW
    return EXIT_GRADED


def _tolerant_stdout() -> None:
    # A terminal that cannot show some character gets an escape, never a crash mid-report.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
        except (AttributeError, ValueError):
            pass


def _write(path: Path, content: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content, encoding="utf-8", errors="backslashreplace")


def with_sources(result: GradeResult, path: Path, config: Config) -> None:
    """Point failures at the student's lines (grader/report/cells.py) when there is something
    to point at. Reading the file again costs milliseconds; grading took seconds."""
    from grader.report.cells import annotate, raised
    from grader.submission import SubmissionError, load_submission

    needs = raised(result) or any(i.failure is not None and (i.failure.traceback or i.failure.kind == "missing") for i in result.items)
    if result.error is not None or not needs:
        return
    try:
        submission = load_submission(path, config.limits.max_file_mb << 20)
    except SubmissionError:
        return  # changed since grading: leave the report as it is
    annotate(result, submission.cells)


def plain_summary(result: GradeResult) -> str:
    """What is left to say when a renderer failed: the score, and which items passed."""
    lines = [f"Score / 得分: {result.score:g} / {result.max_score:g}   ({result.submission})"]
    lines += [f"  {item.id}: {item.status} ({item.score:g}/{item.weight:g})" for item in result.items]
    return "\n".join(lines) + "\n"


def plain_payload(result: GradeResult, lang: str) -> dict[str, Any]:
    """results.json without the parts that failed to draw: still the score and every item."""
    tests = [
        {"name": item.id, "score": item.score, "max_score": item.weight, "status": "passed" if item.status == "passed" else "failed"}
        for item in result.items
    ]
    payload: dict[str, Any] = {"score": result.score, "max_score": result.max_score, "output": plain_summary(result), "tests": tests,
                               "output_format": "text", "test_output_format": "text", "test_name_format": "text"}
    try:
        payload["extra_data"] = {"grade_result": json.loads(json.dumps(result.to_dict(), default=str))}
    except Exception:  # even the record cannot be written: the score alone
        pass
    return payload


def internal_error_result(path: Path, config: Config, error: Exception) -> GradeResult:
    from grader.grade import grader_error
    from grader.results import Failure, Text, not_graded

    # In the grader's words only: the exception's text may quote the submission (grade.grader_error).
    where = grader_error(error).actual
    failure = Failure(
        kind="internal",
        message=Text(
            f"评分器自身出错（不是你的问题），请把这条信息告诉助教：{where}",
            f"the grader itself failed (not your fault); please show this to the TAs: {where}",
        ),
    )
    return not_graded(str(path), config.digest, config.items, failure)
