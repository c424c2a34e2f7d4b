"""`grade`: grade one submission, print a summary, optionally write Gradescope's results.json and scorecards.

Under GitHub Actions (GITHUB_ACTIONS=true) it also writes the job summary and prints the
`Points X/Y` notice and error annotations.

Exit status: 0 graded (whatever the score); 1 graded but below --fail-under; 2 not gradable;
3 the grader itself failed (a bug to report; the scorecard says so).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grader.config import Config
    from grader.results import GradeResult

EXIT_GRADED, EXIT_BELOW, EXIT_UNGRADABLE, EXIT_INTERNAL = 0, 1, 2, 3


def add_common_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lang", choices=("zh", "en"), default=None, help="feedback language (default: the config's, zh)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="where paged attention is checked")
    p.add_argument("--seed", type=int, default=None, help="hypothesis seed (default: the config's)")
    p.add_argument("--config", type=Path, default=None, help="grading configuration (default: grader/config.toml)")


def register(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("grade", help="grade one notebook (.ipynb) or script (.py)")
    p.add_argument("submission", type=Path)
    p.add_argument("--json", type=Path, default=None, help="write Gradescope results.json here")
    p.add_argument("--markdown", type=Path, default=None, help="write the Markdown scorecard here")
    p.add_argument("--html", type=Path, default=None, help="write the self-contained HTML scorecard here")
    p.add_argument("--fail-under", type=float, default=None, help="exit 1 when the score is below this")
    add_common_options(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # Imported here so that `--help` and the other verbs stay fast.
    from grader.config import load_config
    from grader.grade import grade_path, with_seed
    from grader.report import github, gradescope, html, markdown, text

    config = with_seed(load_config(args.config), args.seed)
    lang = args.lang or config.feedback.language
    try:
        result = grade_path(args.submission, config, args.device)
    except Exception as error:  # a bug of the grader's own: still a scorecard, never a traceback
        result = internal_error_result(args.submission, config, error)
    actions = github.in_actions()
    # In GitHub Actions the text quotes student exceptions: keep it from issuing workflow commands.
    token = github.stop_commands(sys.stdout) if actions else None
    sys.stdout.write(text.render(result, lang))
    if token is not None:
        github.resume_commands(sys.stdout, token)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = gradescope.to_results_json(result, lang)
        args.json.write_text(json.dumps(payload, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    for path, render in ((args.markdown, markdown.render), (args.html, html.render)):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(render(result, lang), encoding="utf-8")
    if actions:
        github.publish(result, lang, args.submission, sys.stdout)
    if result.error is not None:
        return EXIT_INTERNAL if result.error.kind == "internal" else EXIT_UNGRADABLE
    if args.fail_under is not None and result.score < args.fail_under:
        return EXIT_BELOW
    return EXIT_GRADED


def internal_error_result(path: Path, config: Config, error: Exception) -> GradeResult:
    from grader.results import FAILED, Failure, GradeResult, ItemResult, Text

    failure = Failure(
        kind="internal",
        message=Text(
            f"评分器自身出错（不是你的问题），请把这条信息告诉助教：{type(error).__name__}: {error}",
            f"the grader itself failed (not your fault); please show this to the TAs: {type(error).__name__}: {error}",
        ),
    )
    items = [ItemResult(i.id, i.todo, Text(i.zh, i.en), i.weight, FAILED, failure) for i in config.items]
    return GradeResult(submission=str(path), sha256="", config_digest=config.digest, items=items, error=failure)
