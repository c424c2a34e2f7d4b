"""`secret`: say which term secret grades of record use, or make one (docs/instructors.md, "The term secret").

    ./grade secret                   where it comes from, its fingerprint, whether it is safe
    ./grade secret --create          make one: ~/.config/pa-grader/term_secret, yours alone
    ./grade secret --rotate          a new one; the old kept beside it (term_secret.old-<date>)

The secret itself is never printed: its fingerprint (an HMAC of a fixed text under it) tells
two copies apart, e.g. a TA's machine from the instructor's.

Exit status:
  0  a secret is configured and safe (with --create or --rotate: it was written)
  1  no secret is configured (grade-batch and gradescope-zip would refuse)
  2  the secret configured is refused (open to others, empty, unreadable), or one exists
     already where --create would write (--rotate replaces it)
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
from pathlib import Path


def register(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("secret", help="the term secret of grades of record: where it is, or make one")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--create", action="store_true", help="make a term secret (refused where one exists)")
    what.add_argument("--rotate", action="store_true", help="make a new term secret, keeping the old one beside it")
    p.add_argument("--file", type=Path, default=None,
                   help="where --create and --rotate write (default: $PA_GRADER_SECRET_FILE, else ~/.config/pa-grader/term_secret)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from grader import seeds

    if args.create or args.rotate:
        named = os.environ.get(seeds.SECRET_FILE_ENV)
        target = args.file or (Path(named) if named and named != os.devnull else seeds.user_file())
        return _write(target, rotate=args.rotate)
    try:
        secret = seeds.term_secret()
    except seeds.SecretError as error:
        print(f"secret: {error}", file=sys.stderr)
        return 2
    if secret is None:
        print(f"no term secret: grade-batch and gradescope-zip refuse to grade. Make one with `./grade secret --create` ({seeds.user_file()})")
        return 1
    print(f"term secret: {seeds.source()}  fingerprint {seeds.fingerprint(secret)}")
    return 0


def _write(target: Path, rotate: bool) -> int:
    from grader import seeds

    target = target.expanduser().absolute()
    if target.exists() and not rotate:
        print(f"secret: {target} exists already: grades made on it would all change with a new one"
              " (--rotate makes a new one and keeps this one beside it)", file=sys.stderr)
        return 2
    try:
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        kept = None
        if target.exists():
            kept = target.with_name(f"{target.name}.old-{time.strftime('%Y%m%d-%H%M%S')}")
            os.replace(target, kept)
        value = secrets.token_hex(32).encode() + b"\n"
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.fchmod(fd, 0o600)  # whatever the umask
            os.write(fd, value)
        finally:
            os.close(fd)
    except OSError as error:
        print(f"secret: cannot write {target}: {error.strerror or error}", file=sys.stderr)
        return 2
    print(f"wrote {target} (mode 600, fingerprint {seeds.fingerprint(value.strip())})")
    if kept is not None:
        print(f"the old one is {kept}: keep it as long as you may have to regrade on it; every student regrades on the new one")
    if os.environ.get(seeds.SECRET_ENV):
        print(f"note: {seeds.SECRET_ENV} is set and wins over any file: unset it to use this one", file=sys.stderr)
    elif seeds.source() != str(target):
        print(f"note: the grader reads {seeds.source()} first: set {seeds.SECRET_FILE_ENV}={target} to use this one", file=sys.stderr)
    print("back it up, and give the same file to every machine that grades this term (PA_GRADER_SECRET_FILE names it elsewhere)")
    return 0
