"""`gradescope-zip`: build the Gradescope autograder zip (setup.sh, run_autograder, the grader).

The zip carries the term secret (grader/term_secret, mode 600) so that Gradescope grades on
it; without one the command refuses, unless --public-seed asks for a zip whose random cases
anyone can compute (then it carries none, even where the checkout holds one).

Exit status:
  0  the zip was written
  2  --root is not a checkout of the grader, the zip cannot be written, it would hold
     answer-key files, or no term secret (or one that is refused) without --public-seed
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import grader

CHECKOUT = Path(grader.__file__).resolve().parent.parent


def register(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("gradescope-zip", help="build the Gradescope autograder zip (no answer key inside)")
    # --out like every other verb; -o and --output are the names it had first.
    p.add_argument("--out", "-o", "--output", dest="out", type=Path, default=Path("dist/gradescope-autograder.zip"),
                   help="zip to write (default: dist/gradescope-autograder.zip)")
    p.add_argument("--lang", choices=("zh", "en"), default=None, help="feedback language on Gradescope (default: the config's)")
    p.add_argument("--root", type=Path, default=CHECKOUT, help="project checkout to package (default: this grader's)")
    p.add_argument("--public-seed", action="store_true",
                   help="no term secret in the zip: Gradescope grades on the public seed (anyone can compute its cases)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from grader import gradescope_package, seeds
    from grader.config import load_config

    if not (args.root / "pyproject.toml").is_file():
        print(f"gradescope-zip: {args.root} is not a checkout of the grader (no pyproject.toml)", file=sys.stderr)
        return 2
    lang = args.lang or load_config().feedback.language
    try:
        secret = None if args.public_seed else seeds.term_secret()
    except seeds.SecretError as error:
        print(f"gradescope-zip: {error}", file=sys.stderr)
        return 2
    if secret is None and not args.public_seed:
        from grader.commands.grade_batch import NO_SECRET

        print(NO_SECRET.replace("grade-batch:", "gradescope-zip:").format(file=seeds.user_file()), file=sys.stderr)
        return 2
    try:
        names = gradescope_package.build(args.root, args.out, lang, secret)
    except gradescope_package.AnswerKeyError as error:
        print(f"gradescope-zip: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"gradescope-zip: cannot write {args.out}: {error.strerror or error}", file=sys.stderr)
        return 2
    print(f"wrote {args.out} ({len(names)} files); upload it as the assignment's autograder")
    if secret is not None:
        print(f"it carries the term secret {seeds.source()} (fingerprint {seeds.fingerprint(secret)}): keep the zip as private as the secret")
    else:
        print("it carries no term secret: Gradescope grades on the public seed, whose cases anyone can compute")
    return 0
