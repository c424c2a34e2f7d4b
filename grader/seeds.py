"""The seed of a grading's random cases: the term's secret with the file's sha256.

A student who knows the grader's source still cannot know, before submitting, which random
cases a file will meet: the seed is an HMAC of the file's sha256 under the instructor's
per-term secret.  The same file always gets the same cases (grading stays deterministic).

Where the secret comes from, first found: the environment variable PA_GRADER_SECRET; the
file PA_GRADER_SECRET_FILE names; `grader/term_secret` next to the configuration (git-ignored
and left out of the wheel and sdist, which package only *.py, *.toml and *.json; the
Gradescope zip carries it when it is there).  Without a secret the configured seed is used:
public, which is fine for `grader.check()` and feedback.  Every result says which was used
(`GradeResult.random_cases`), and the scorecard shows it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import os
from pathlib import Path

from grader.config import Config

SECRET_ENV = "PA_GRADER_SECRET"
SECRET_FILE_ENV = "PA_GRADER_SECRET_FILE"
DEFAULT_FILE = Path(__file__).with_name("term_secret")
MAX_SECRET = 4096

SECRET, PUBLIC, GIVEN = "secret", "public", "given"  # GradeResult.random_cases


def term_secret() -> bytes | None:
    value = os.environ.get(SECRET_ENV, "")
    if value:
        return value.encode()
    path = Path(os.environ[SECRET_FILE_ENV]) if os.environ.get(SECRET_FILE_ENV) else DEFAULT_FILE
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_SECRET).strip()
    except OSError:
        return None
    return data or None


def seeded(config: Config, sha256: str) -> tuple[Config, str]:
    """The configuration with this file's seed, and which kind of seed it is."""
    if config.seed_source == "command line":
        return config, GIVEN
    secret = term_secret()
    if secret is None:
        return config, PUBLIC
    digest = hmac.new(secret, f"{config.hypothesis.seed}:{sha256}".encode(), hashlib.sha256).digest()
    seed = int.from_bytes(digest[:8], "big")
    return dataclasses.replace(config, hypothesis=dataclasses.replace(config.hypothesis, seed=seed)), SECRET


def describe(kind: str, config: Config, lang: str) -> str:
    """The scorecard's line on where the random cases came from (never the secret seed itself)."""
    if kind == SECRET:
        return "本学期的保密种子与本文件共同决定（提交前无法预知）" if lang == "zh" else "drawn from the term's secret seed and this file (not knowable before submitting)"
    if kind == GIVEN:
        return f"命令行给定的种子 {config.hypothesis.seed}" if lang == "zh" else f"the seed given on the command line, {config.hypothesis.seed}"
    return (f"公开种子 {config.hypothesis.seed}（未设置 {SECRET_ENV}：仅作反馈）" if lang == "zh"
            else f"public seed {config.hypothesis.seed} (no {SECRET_ENV} set: feedback only)")


def describe_both(kind: str, config: Config) -> dict[str, str]:
    """What GradeResult.random_cases holds: the kind, and the line in both languages."""
    return {"kind": kind, "zh": describe(kind, config, "zh"), "en": describe(kind, config, "en")}
