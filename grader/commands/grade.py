"""`grade`: grade one submission, print a summary, optionally write Gradescope's results.json and scorecards.

Under GitHub Actions (GITHUB_ACTIONS=true) it also writes the job summary and prints the
`Points X/Y` notice and error annotations.  The options make a GradeJob; grader/job.py does it
(a warm batch's judges call the same, with no command line).

Exit status: 0 graded (whatever the score); 1 graded but below --fail-under; 2 not gradable;
3 the grader itself failed (a bug to report; the scorecard says so). The text report and the
JSON are written in every case, also when drawing some other part failed (then: 3).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


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
    p.add_argument("--quiet", "-q", action="store_true", help="print one line per rubric item")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--folder", type=Path, default=None,
                       help="the folder the notebook runs in, as a private copy (default: the one holding it)")
    where.add_argument("--alone", action="store_true", help="copy nothing of its folder: the notebook runs next to itself only")
    add_common_options(p)
    add_public_seed_option(p)
    p.set_defaults(run=run)


def add_public_seed_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--public-seed", action="store_true",
                   help="random cases from the public seed even where a term secret is configured (anyone can compute them)")


def run(args: argparse.Namespace) -> int:
    from grader.job import GradeJob, run_job

    job = GradeJob(
        submission=args.submission, json=args.json, markdown=args.markdown, html=args.html, fail_under=args.fail_under,
        quiet=args.quiet, lang=args.lang, device=args.device, seed=args.seed, config=args.config, folder=args.folder, alone=args.alone,
        public_seed=args.public_seed,
    )
    _say_which_seed(args)
    return run_job(job)


def _say_which_seed(args: argparse.Namespace) -> None:
    """A note on stderr where the random cases come from a seed anyone can compute: fine for
    feedback, not for a grade of record (grade-batch and gradescope-zip refuse it unless asked)."""
    from grader import seeds

    if args.seed is not None:
        return
    try:
        configured = seeds.source()
    except OSError:
        configured = None
    if args.public_seed or configured is None:
        print("grade: random cases from the public seed (no term secret" + (" used" if configured else "") + "): feedback,"
              " not a grade of record; see docs/instructors.md, \"The term secret\"", file=sys.stderr)


