"""The seed of a grading's random cases: the term's secret with the file's sha256.

A student who knows the grader's source still cannot know, before submitting, which random
cases a file will meet: the seed is an HMAC of the file's sha256 under the instructor's
per-term secret.  The same file always gets the same cases (grading stays deterministic).

Where the secret comes from, first found: the environment variable PA_GRADER_SECRET; the
file PA_GRADER_SECRET_FILE names; `grader/term_secret` next to the configuration (git-ignored
and left out of the wheel and sdist, which package only *.py, *.toml and *.json; what the
Gradescope zip carries); `~/.config/pa-grader/term_secret` (user_file(), where `secret --create`
writes it, outside the checkout); PA_GRADER_SECRET_FILE=/dev/null says "none".  A file readable or writable by anyone but its owner is
refused, as ssh refuses such a key (SecretError): whoever can read it can compute every
student's cases.  Without a secret the configured seed is used: public, which is fine for
`grader.check()` and feedback; `grade-batch` and `gradescope-zip` refuse it unless asked
(`--public-seed`, config.seed_source "public").  Every result says which was used
(`GradeResult.random_cases`), and the scorecard shows it; `identity()` names the seed without
giving the secret away (the batch's skip of unchanged files compares it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import os
import stat
from pathlib import Path

from grader.config import Config

SECRET_ENV = "PA_GRADER_SECRET"
SECRET_FILE_ENV = "PA_GRADER_SECRET_FILE"
DEFAULT_FILE = Path(__file__).with_name("term_secret")
MAX_SECRET = 4096
FINGERPRINT_MESSAGE = b"pa-grader term secret fingerprint"

SECRET, PUBLIC, GIVEN = "secret", "public", "given"  # GradeResult.random_cases
PUBLIC_SOURCE = "public"  # Config.seed_source: the public seed, whatever secret is configured (--public-seed)


class SecretError(Exception):
    """A term secret is configured but must not be used (readable by others, unreadable, empty)."""


def user_file() -> Path:
    """Where `secret --create` puts the term secret: the user's configuration, outside any checkout."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "pa-grader" / "term_secret"


def candidate_files() -> list[Path]:
    """The files a secret may come from, in the order they are tried (PA_GRADER_SECRET_FILE=/dev/null:
    none, whatever the machine holds; what the tests use)."""
    named = os.environ.get(SECRET_FILE_ENV)
    if named == os.devnull:
        return []
    return [Path(named)] if named else [DEFAULT_FILE, user_file()]


def source() -> str | None:
    """Where the secret in use comes from (the variable's name or the file), None without one."""
    if os.environ.get(SECRET_ENV):
        return SECRET_ENV
    for path in candidate_files():
        if path.exists():
            return str(path)
    return None


def term_secret() -> bytes | None:
    """The term's secret, or None where none is configured.  Raises SecretError for one that is
    configured but must not be used: the grading stops there rather than fall back to the public seed."""
    value = os.environ.get(SECRET_ENV, "")
    if value:
        return value.encode()
    named = os.environ.get(SECRET_FILE_ENV)
    for path in candidate_files():
        data = _read_private(path, must_exist=bool(named))
        if data is not None:
            return data
    return None


def _read_private(path: Path, must_exist: bool) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        if must_exist:
            raise SecretError(f"the term secret {path} ({SECRET_FILE_ENV}) does not exist") from None
        return None
    except OSError as error:
        raise SecretError(f"the term secret {path} cannot be read: {error.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SecretError(f"the term secret {path} is not a regular file")
        if info.st_mode & 0o077:
            raise SecretError(
                f"the term secret {path} is open to others (mode {stat.S_IMODE(info.st_mode):04o}): whoever can read it"
                f" can compute every student's random cases. Refused, as ssh refuses such a key; make it its owner's"
                f" alone (chmod 600 {path}), and if others could read it, make a new one (docs/instructors.md, \"The term secret\")"
            )
        data = os.read(fd, MAX_SECRET).strip()
    finally:
        os.close(fd)
    if not data:
        raise SecretError(f"the term secret {path} is empty")
    return data


def secret_paths() -> list[str]:
    """Every file a secret could come from that exists, as the sandbox must never open it (its
    mount namespace covers each; Landlock leaves each out): the path and where a link leads."""
    found: set[str] = set()
    named = os.environ.get(SECRET_FILE_ENV)
    for path in ([Path(named)] if named and named != os.devnull else []) + [DEFAULT_FILE, user_file()]:
        if path.is_file():
            found.update((str(path.absolute()), os.path.realpath(path)))
    return sorted(found)


def public_seed(config: Config) -> Config:
    """The configuration with the public seed, whatever secret is configured (--public-seed)."""
    if config.seed_source == "command line":
        return config
    return dataclasses.replace(config, seed_source=PUBLIC_SOURCE)


def seeded(config: Config, sha256: str) -> tuple[Config, str]:
    """The configuration with this file's seed, and which kind of seed it is."""
    if config.seed_source == "command line":
        return config, GIVEN
    if config.seed_source == PUBLIC_SOURCE:
        return config, PUBLIC
    secret = term_secret()
    if secret is None:
        return config, PUBLIC
    digest = hmac.new(secret, f"{config.hypothesis.seed}:{sha256}".encode(), hashlib.sha256).digest()
    seed = int.from_bytes(digest[:8], "big")
    return dataclasses.replace(config, hypothesis=dataclasses.replace(config.hypothesis, seed=seed)), SECRET


def identity(config: Config) -> str:
    """Which seed grades under `config` are made on, as the gradebook keeps it: "public:<seed>",
    "given:<seed>" or "secret:<fingerprint>", an HMAC of a fixed text under the secret (it names
    the secret without giving it, or anything that helps to guess it, away)."""
    if config.seed_source == "command line":
        return f"given:{config.hypothesis.seed}"
    secret = None if config.seed_source == PUBLIC_SOURCE else term_secret()
    if secret is None:
        return f"public:{config.hypothesis.seed}"
    return "secret:" + fingerprint(secret)


def fingerprint(secret: bytes) -> str:
    return hmac.new(secret, FINGERPRINT_MESSAGE, hashlib.sha256).hexdigest()[:16]


def describe(kind: str, config: Config, lang: str) -> str:
    """The scorecard's line on where the random cases came from (never the secret seed itself)."""
    if kind == SECRET:
        return "本学期的保密种子与本文件共同决定（提交前无法预知）" if lang == "zh" else "drawn from the term's secret seed and this file (not knowable before submitting)"
    if kind == GIVEN:
        return f"命令行给定的种子 {config.hypothesis.seed}" if lang == "zh" else f"the seed given on the command line, {config.hypothesis.seed}"
    return (f"公开种子 {config.hypothesis.seed}（未使用学期密钥：任何人都能算出这些用例，仅作反馈）" if lang == "zh"
            else f"public seed {config.hypothesis.seed} (no term secret: anyone can compute these cases; feedback only)")


def describe_both(kind: str, config: Config) -> dict[str, str]:
    """What GradeResult.random_cases holds: the kind, and the line in both languages."""
    return {"kind": kind, "zh": describe(kind, config, "zh"), "en": describe(kind, config, "en")}
