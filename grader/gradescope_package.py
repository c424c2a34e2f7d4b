"""The Gradescope autograder zip: the grader package, setup.sh and run_autograder, nothing else.

Gradescope unpacks the zip into /autograder/source, runs setup.sh once when it builds the
image, then run_autograder for every submission, which must leave
/autograder/results/results.json.  The zip is an allow-list (the grader package,
pyproject.toml, README.md), so the answer key (reference/, student_template/,
notebooks/source, the solution notebook) and the test corpus can never slip in.

run_autograder reads two variables so it can be tested outside Gradescope:
AUTOGRADER_ROOT (default /autograder) and AUTOGRADER_PYTHON (default the venv setup.sh made).
"""

from __future__ import annotations

import re
import shlex
import stat
import zipfile
from pathlib import Path

import tomllib

PACKAGE = "grader"
TOP_FILES = ("pyproject.toml", "README.md")
FORBIDDEN = re.compile(r"^(reference|student_template|notebooks|tests)/|solution", re.IGNORECASE)
FIXED_TIME = (2020, 1, 1, 0, 0, 0)  # same inputs, same zip bytes
SECRET_MEMBER = f"{PACKAGE}/term_secret"  # seeds.DEFAULT_FILE, in the zip


class AnswerKeyError(RuntimeError):
    """The package would hold files of the answer key."""

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image (Ubuntu).
set -euo pipefail
ROOT="${{AUTOGRADER_ROOT:-/autograder}}"
SOURCE="$ROOT/source"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv python3-pip >/dev/null
python3 -m venv "$ROOT/venv"
"$ROOT/venv/bin/pip" install --quiet --upgrade pip
# The CPU build of PyTorch: Gradescope has no GPU and the default build is gigabytes of CUDA.
"$ROOT/venv/bin/pip" install --quiet --index-url "${{TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}}" "{torch}"
# The grader, and the packages the course's notebooks may import (config.toml [notebook] packages).
"$ROOT/venv/bin/pip" install --quiet "$SOURCE" {packages}
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for every submission; it must leave results/results.json behind.
set -uo pipefail
ROOT="${{AUTOGRADER_ROOT:-/autograder}}"
PYTHON="${{AUTOGRADER_PYTHON:-$ROOT/venv/bin/python}}"
SOURCE="$ROOT/source"
RESULTS="$ROOT/results/results.json"
mkdir -p "$ROOT/results"

# Which file to grade (grader/gradescope_submission.py): the assignment's file name, else the only
# notebook, else the only .py.  When none is the submission it writes results.json itself (not
# graded: the files found and what to upload) and prints nothing.
submission=""
status=127
# The term secret, if the zip carries one: its owner's alone, whatever the unzip made of its mode.
[ -f "$SOURCE/grader/term_secret" ] && chmod 600 "$SOURCE/grader/term_secret"
picked="$(mktemp)"
if cd "$SOURCE"; then
    PYTHONPATH="$SOURCE" "$PYTHON" -m grader.gradescope_submission "$ROOT/submission" --json "$RESULTS" --lang {lang} > "$picked"
    status=$?
    IFS= read -r -d '' submission < "$picked" || true
fi
rm -f "$picked"

if [ -n "$submission" ]; then
    PYTHONPATH="$SOURCE" "$PYTHON" -m grader grade "$submission" --json "$RESULTS" --lang {lang}
    status=$?
fi
if [ ! -s "$RESULTS" ]; then
    # The grader itself failed: tell the student instead of leaving Gradescope without results.
    printf '{{"score": 0, "output": "The autograder failed (exit status %s). Please tell the course staff.", "output_format": "text", "tests": []}}\\n' "$status" > "$RESULTS"
fi
exit 0
"""


def course_packages(root: Path) -> str:
    """The [notebook] packages of the zip's grader/config.toml, quoted for the shell."""
    raw = tomllib.loads((root / PACKAGE / "config.toml").read_text(encoding="utf-8"))
    return " ".join(shlex.quote(p) for p in raw.get("notebook", {}).get("packages", []))


def torch_requirement(root: Path) -> str:
    """The project's own torch pin, so the zip installs what the tests ran with."""
    deps = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    return next(d for d in deps if re.match(r"torch\b", d))


def members(root: Path) -> list[tuple[str, Path]]:
    """(name in the zip, file on disk) for the grader package and the top-level files.

    Never the checkout's term secret: build() packs the one configured, or none."""
    out = [(name, root / name) for name in TOP_FILES]
    for path in sorted((root / PACKAGE).rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".pyo") and rel != SECRET_MEMBER:
            out.append((rel, path))
    bad = [name for name, _ in out if FORBIDDEN.search(name)]
    if bad:
        raise AnswerKeyError(f"refusing to package answer-key files: {bad}")
    return out


def _add(archive: zipfile.ZipFile, name: str, data: bytes, executable: bool = False, private: bool = False) -> None:
    info = zipfile.ZipInfo(name, FIXED_TIME)
    info.compress_type = zipfile.ZIP_DEFLATED
    mode = 0o600 if private else 0o755 if executable else 0o644
    info.external_attr = (stat.S_IFREG | mode) << 16
    archive.writestr(info, data)


def build(root: Path, out: Path, lang: str, secret: bytes | None = None) -> list[str]:
    """Write the autograder zip to `out`; returns the names it holds.  `secret`: the term secret,
    packed as grader/term_secret (mode 600), where `grade` on Gradescope finds it; None: none."""
    out.parent.mkdir(parents=True, exist_ok=True)
    names = []
    with zipfile.ZipFile(out, "w") as archive:
        _add(archive, "setup.sh", SETUP_SH.format(torch=torch_requirement(root), packages=course_packages(root)).encode(), executable=True)
        _add(archive, "run_autograder", RUN_AUTOGRADER.format(lang=lang).encode(), executable=True)
        names += ["setup.sh", "run_autograder"]
        for name, path in members(root):
            _add(archive, name, path.read_bytes())
            names.append(name)
        if secret is not None:
            _add(archive, SECRET_MEMBER, secret + b"\n", private=True)
            names.append(SECRET_MEMBER)
    return names
