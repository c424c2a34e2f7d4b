"""`grade-batch`: grade a class's submissions in parallel into a class folder (resumable).

Exit status:
  0    every student found has a result: a grade, or a scorecard saying why their file
       could not be graded (not a notebook, empty, too large)
  1    some students have no grade: a grader error (timeout, crash) or left out (a folder
       with several notebooks and none named as [submission] file says, or none); each has a row with the reason in the gradebook
       and the CSV, and a re-run retries them
  2    nothing to grade, a path not found, two submissions for one student id, the
       gradebook cannot be opened, or no term secret (or one that is refused) without
       --public-seed: grades of record draw their random cases from the term secret
  130  stopped by SIGINT or SIGTERM (also when SIGINT was ignored at start); run the same
       command again to grade the rest
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from grader.commands.grade import add_common_options, add_public_seed_option

if TYPE_CHECKING:
    from grader.config import Config

DEFAULT_OUT = Path("grades")
NO_SECRET = """grade-batch: no term secret. Grades of record draw their random cases from it, so that no student
can compute them in advance (with the public seed anyone can). Make one for the term, once:

    ./grade secret --create

It writes {file}, readable by you alone. Back it up, and give the same file to every machine
that grades this term (PA_GRADER_SECRET_FILE names it where it is elsewhere): the same file then
gets the same cases, and the same grade, everywhere. For a practice run on cases anyone can
compute: --public-seed. (docs/instructors.md, "The term secret")"""


def add_out_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"class folder with the gradebook (default: {DEFAULT_OUT})")


def register(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("grade-batch", help="grade many submissions in parallel into a gradebook (resumable)")
    p.add_argument("submissions", nargs="+", type=Path, help="notebooks/scripts, or folders of them (alice.ipynb or alice/notebook.ipynb)")
    add_out_option(p)
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, help="submissions graded at once (default: all cores)")
    p.add_argument("--id-from", choices=("auto", "stem", "parent"), default="auto",
                   help="student id: file stem, or its folder's name (auto: folder name for files in sub-folders)")
    p.add_argument("--timeout", type=float, default=None, help="seconds per submission (default: the config's total budget + 120)")
    p.add_argument("--force", action="store_true", help="regrade submissions that are unchanged since their last grading")
    p.add_argument("--cold", action="store_true",
                   help="one `grade` process per submission, each importing torch and the checks itself"
                   " (default: judges and workers forked from ones that imported them once; same grades)")
    add_common_options(p)
    add_public_seed_option(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from grader.discovery import BatchError
    from grader.stopping import stop_on_signals

    # From the start: a batch started with SIGINT ignored still stops on it (see stop_on_signals).
    with stop_on_signals():
        try:
            return _grade(args)
        except BatchError as error:
            print(f"grade-batch: {error}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("interrupted: run the same command again to grade the rest", file=sys.stderr)
            return 130


def _grade(args: argparse.Namespace) -> int:
    from grader import seeds
    from grader.batch import run_batch
    from grader.classfolder import write_dashboard
    from grader.config import load_config
    from grader.discovery import discover
    from grader.grade import with_seed
    from grader.job import GradeJob

    config = with_seed(load_config(args.config), args.seed)
    if args.public_seed:
        config = seeds.public_seed(config)
    identity = _seed_identity(config, args.public_seed or args.seed is not None)
    if identity is None:
        return 2
    lang = args.lang or config.feedback.language
    students, left_out = discover(args.submissions, args.id_from, exclude=[args.out], named=config.submission_file)
    job = GradeJob(lang=lang, device=args.device, seed=args.seed, config=args.config.resolve() if args.config is not None else None,
                   public_seed=args.public_seed)
    timeout = args.timeout if args.timeout is not None else config.limits.total_budget_s + 120
    summary = run_batch(
        students, args.out, config, lang=lang, jobs=args.jobs, job=job, timeout_s=timeout,
        left_out=left_out, force=args.force, warm=not args.cold, device=args.device, seed_identity=identity,
    )
    dashboard = write_dashboard(args.out, lang)
    # Counts that add up to the students found: graded (a total), not gradable (a scorecard saying why), ...
    counts = [f"graded {summary.graded - summary.unreadable}", f"not gradable {summary.unreadable}", f"grader errors {summary.errors}"]
    if summary.left_out:
        counts.append(f"left out {summary.left_out}")
    counts.append(f"unchanged {summary.skipped}")
    if summary.unfinished:
        counts.append(f"not reached {summary.unfinished}")
    print(f"{', '.join(counts)}; gradebook {args.out / 'gradebook.sqlite'}, dashboard {dashboard}", file=sys.stderr)
    if summary.interrupted:
        raise KeyboardInterrupt  # reported, with exit 130, by run()
    return 1 if summary.errors or summary.left_out else 0


def _seed_identity(config: Config, asked_public: bool) -> str | None:
    """Which seed this batch grades on (the gradebook keeps it: a secret set or changed regrades
    everyone), said on stderr; None, with the reason said, where grades of record cannot be made."""
    from grader import seeds

    try:
        identity = seeds.identity(config)
    except seeds.SecretError as error:
        print(f"grade-batch: {error}", file=sys.stderr)
        return None
    if identity.startswith("secret:"):
        print(f"grade-batch: random cases from the term secret {seeds.source()} (fingerprint {identity[7:]})", file=sys.stderr)
    elif not asked_public:
        print(NO_SECRET.format(file=seeds.user_file()), file=sys.stderr)
        return None
    else:
        print(f"grade-batch: random cases from a seed anyone can compute ({identity}), as asked", file=sys.stderr)
    return identity
