"""What is around a hostile grading of issue 16's round: a TA's secret key, a colluding classmate.

Set up before the case is graded and observed after (tests/test_hostile.py, SURROUNDINGS);
the checks themselves are in tests/test_deny_by_default.py.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = ROOT / "tests" / "corpus" / "hostile"
TA_SECRET = b"ta-secret-5f0c2e71"  # what keyring_read_plant.py must never print
PLANTED = "pa-planted-key"
KEY_SPEC_SESSION_KEYRING = -3
KEYCTL_INVALIDATE = 21
_NUMBERS = {"x86_64": (250, 248), "aarch64": (219, 217)}  # keyctl, add_key


def _libc() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def add_session_key(description: str, payload: bytes) -> int:
    """A user key in this process's session keyring (which a grader started from here inherits); -1 without keyrings."""
    numbers = _NUMBERS.get(platform.machine())
    if numbers is None:
        return -1
    key = _libc().syscall(
        ctypes.c_long(numbers[1]), ctypes.c_char_p(b"user"), ctypes.c_char_p(description.encode()), ctypes.c_char_p(payload), ctypes.c_size_t(len(payload)), ctypes.c_long(KEY_SPEC_SESSION_KEYRING)
    )
    return int(key)


def invalidate_key(serial: int) -> None:
    numbers = _NUMBERS.get(platform.machine())
    if numbers is not None and serial > 0:
        _libc().syscall(ctypes.c_long(numbers[0]), ctypes.c_long(KEYCTL_INVALIDATE), ctypes.c_long(serial))


def key_users() -> dict[int, int]:
    """Per uid, how many keys it owns (/proc/key-users: every user's, whoever reads it)."""
    counts = {}
    try:
        with open("/proc/key-users") as f:
            for line in f:
                uid, rest = line.split(":", 1)
                counts[int(uid)] = int(rest.split()[1].split("/")[0])
    except (OSError, ValueError, IndexError):
        pass
    return counts


def visible_keys() -> str:
    try:
        with open("/proc/keys") as f:
            return f.read()
    except OSError:
        return ""


@contextlib.contextmanager
def ta_secret_key() -> Iterator[dict[str, Any]]:
    """The TA's secret in the session keyring the judge (this process) and its worker would inherit.

    After the grading: the keys each uid owns, and the keys this process can list, so that a
    key the submission planted to outlive its grading would show.
    """
    serial = add_session_key("pa-ta-secret", TA_SECRET)
    seen: dict[str, Any] = {"serial": serial, "before": key_users()}
    try:
        yield seen
    finally:
        invalidate_key(serial)
        deadline = time.monotonic() + 5  # an ended grading's keyring is collected a moment later
        while True:
            seen["after"], seen["listed"] = key_users(), visible_keys()
            if time.monotonic() > deadline or not (set(seen["after"]) - set(seen["before"])):
                break
            time.sleep(0.1)


PLANTED_SECRET = b"term-secret-9b2e4f7a"  # what secret_hunt.py must never print


@contextlib.contextmanager
def planted_secret() -> Iterator[dict[str, Any]]:
    """A term secret file where any uid could read it (mode 644, in the Python installation's share/,
    which every grading may read and list): only the sandbox's covering of it keeps the submission
    out.  (The grader refuses such a file as *the* secret; here the variable holds the secret in
    use, and the file is one more the grader knows of, as ~/.config/pa-grader/term_secret.)"""
    config = Path(tempfile.mkdtemp(prefix="pa-hostile-config-", dir=Path(sys.prefix) / "share"))
    path = config / "pa-grader" / "term_secret"
    path.parent.mkdir(mode=0o755)
    config.chmod(0o755)
    path.write_bytes(PLANTED_SECRET + b"\n")
    path.chmod(0o644)
    saved = {name: os.environ.get(name) for name in ("XDG_CONFIG_HOME", "PA_GRADER_SECRET")}
    os.environ["XDG_CONFIG_HOME"] = str(config)
    os.environ["PA_GRADER_SECRET"] = "the secret in use, from the variable"
    try:
        yield {"path": str(path)}
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        path.unlink()
        path.parent.rmdir()
        config.rmdir()


@contextlib.contextmanager
def colluding_sender(limits: dict[str, Any], sender: str = "collude_sender.py", env: dict[str, str] | None = None) -> Iterator[dict[str, Any]]:
    """`sender` graded by a `grade` process of its own while the receiver is graded here.

    `limits`: [limits] of the receiver's case, the sender gets the same (as one batch would);
    `env`: variables of the sender's grader (the receiver's are this process's).
    """
    folder = Path(tempfile.mkdtemp(prefix="pa-collude-"))
    config = _config_with(folder, limits)
    out = folder / "sender.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(folder), **(env or {})}
    process = subprocess.Popen(
        [sys.executable, "-m", "grader", "grade", str(HOSTILE / sender), "--config", str(config), "--json", str(out), "--quiet"],
        cwd=folder,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: dict[str, Any] = {}
    try:
        time.sleep(1.0)  # the sender's worker is starting: the receiver's will see it from its first look
        yield seen
    finally:
        try:
            _, stderr = process.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            process.kill()
            _, stderr = process.communicate()
        seen["returncode"], seen["stderr"] = process.returncode, stderr[-2000:]
        if out.exists():
            seen["sender"] = json.loads(out.read_text())
        seen["left_in_tmp"] = sorted(p.name for p in folder.iterdir() if p.name not in ("sender.json", "config.toml"))
        for path in folder.iterdir():
            path.unlink()
        folder.rmdir()


def _config_with(folder: Path, limits: dict[str, Any]) -> Path:
    """grader/config.toml with some [limits] changed, written into `folder`."""
    lines = (ROOT / "grader" / "config.toml").read_text().splitlines()
    out, section = [], ""
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("["):
            section = stripped
        key = stripped.split("=", 1)[0].strip() if "=" in stripped and not stripped.startswith("#") else ""
        if section == "[limits]" and key in limits:
            line = f"{key} = {limits[key]}"
        out.append(line)
    path = folder / "config.toml"
    path.write_text("\n".join(out) + "\n")
    return path
