"""The term secret stays the judge's, and grades of record are made on it (issue 19).

A submission that hunts for the secret reads nothing (secret_hunt.py, graded beside a secret
file any uid could read: the mount namespace covers it); Landlock leaves it out where there is
no mount namespace; where neither could, the grading stops.  `grade-batch` refuses to grade
without a secret (or with one open to others) unless asked for the public seed, and its skip of
unchanged files compares the seed: a secret set or changed regrades everyone.
(The secret's own rules: tests/test_seeds.py; the Gradescope zip: tests/test_gradescope_package.py.)
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grader import seeds
from tests import hostile_surroundings as surroundings
from tests.conftest import ROOT
from tests.test_hostile import FILES, MOUNT_NS, graded

pytestmark = pytest.mark.slow


def test_a_submission_hunting_for_the_secret_reads_nothing() -> None:
    if not (MOUNT_NS or FILES):
        pytest.skip("neither a mount namespace nor Landlock here: the grading would stop (see the test below)")
    run = graded("secret_hunt.py")
    excerpt, planted = run.result.output_excerpt, run.around["path"]
    assert surroundings.PLANTED_SECRET.decode() not in excerpt and "FOUND" not in excerpt, excerpt[-2000:]
    assert "the secret in use" not in excerpt
    # It did find the file, and was refused: the cover, not the file's mode (644) or its folder.
    assert re.search(rf"^REFUSED {re.escape(planted)}: (PermissionError|FileNotFoundError)$", excerpt, re.M), excerpt[-2000:]
    assert re.search(r"SECRET HUNT: 0 found, [1-9]\d* refused", excerpt), excerpt[-2000:]
    assert all(c.status == "ok" for c in run.result.cells), run.result.cells
    assert run.result.score == 100


def _confine_script(secret: Path, landlock: bool) -> str:
    """The zygote's confinement, alone, in a throwaway process; then an attempt to read `secret`."""
    return textwrap.dedent(
        f"""
        import importlib.util, json, os, sys
        here = {str(ROOT / "grader" / "sandbox")!r}
        for name in ("wire", "seccomp", "confine"):
            spec = importlib.util.spec_from_file_location("_pa_sandbox_" + name, os.path.join(here, name + ".py"))
            module = importlib.util.module_from_spec(spec)
            sys.modules["_pa_sandbox_" + name] = module
            spec.loader.exec_module(module)
        confine = sys.modules["_pa_sandbox_confine"]
        work = os.getcwd()
        facts = {{"hidden_files": [{str(secret)!r}], "covered": []}}
        report = confine.confine({{"workdir": work, "landlock": {landlock!r}, "seccomp": False, "limits": {{}}}}, facts)
        print("REPORT", json.dumps({{k: report[k] for k in ("landlock", "secret_exposed")}}))
        for path in ({str(secret)!r}, {str(secret.with_name("neighbour"))!r}):
            try:
                print("READ", path, open(path).read().strip())
            except OSError as error:
                print("REFUSED", path, type(error).__name__)
        """
    )


def _planted(tmp_path: Path) -> Path:
    """A secret's file in the Python installation (a folder Landlock lets every grading read), any uid may read."""
    folder = Path(sys.prefix) / f"pa-secret-test-{os.getpid()}"
    folder.mkdir(mode=0o755, exist_ok=True)
    (folder / "term_secret").write_text("landlock-keeps-me\n")
    (folder / "neighbour").write_text("readable\n")
    return folder / "term_secret"


def test_without_a_mount_namespace_landlock_leaves_the_secret_out(tmp_path: Path) -> None:
    from grader.sandbox.isolation import landlock_abi

    if not landlock_abi():
        pytest.skip("no Landlock here")
    secret = _planted(tmp_path)
    try:
        out = subprocess.run([sys.executable, "-s", "-c", _confine_script(secret, True)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    finally:
        for path in secret.parent.iterdir():
            path.unlink()
        secret.parent.rmdir()
    assert out.returncode == 0, out.stderr
    assert re.search(r'REPORT \{"landlock": [1-9]\d*, "secret_exposed": false\}', out.stdout), out.stdout
    assert f"REFUSED {secret} PermissionError" in out.stdout and "landlock-keeps-me" not in out.stdout
    assert f"READ {secret.with_name('neighbour')} readable" in out.stdout  # the folder's other files stay readable


def test_where_nothing_keeps_the_secret_out_the_grading_stops(tmp_path: Path) -> None:
    """No mount namespace covered it and no Landlock: the zygote says so before any cell, and the
    judge refuses to run the submission (client.py raises SandboxBroken on it)."""
    secret = _planted(tmp_path)
    try:
        out = subprocess.run([sys.executable, "-s", "-c", _confine_script(secret, False)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    finally:
        for path in secret.parent.iterdir():
            path.unlink()
        secret.parent.rmdir()
    assert out.returncode == 0, out.stderr
    assert 'REPORT {"landlock": 0, "secret_exposed": true}' in out.stdout, out.stdout
    client = (ROOT / "grader" / "sandbox" / "client.py").read_text()
    assert 'if event.get("secret_exposed") is True:\n                        raise SandboxBroken(' in client


# --- grade-batch: grades of record on a secret ---------------------------------------------------

def _batch(folder: Path, out: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "grader", "grade-batch", str(folder), "--out", str(out), "--cold", "-j", "1", "--lang", "en", *extra],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )


def _rows(out: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(out / "gradebook.sqlite") as db:
        return list(db.execute("SELECT s.student_id, i.identity FROM submissions s LEFT JOIN seed_identities i ON i.submission_id = s.id ORDER BY s.id"))


def test_grade_batch_grades_of_record_on_the_secret(tmp_path: Path) -> None:
    """Refused without a secret (how to make one said); --public-seed grades; setting the secret
    regrades what was graded on the public seed; the same secret skips; a changed one regrades;
    one open to others is refused."""
    folder = tmp_path / "subs"
    folder.mkdir()
    (folder / "alice.ipynb").write_bytes(b"\x00 not a notebook")  # quick: a scorecard saying why, no sandbox
    out = tmp_path / "grades"
    env = {k: v for k, v in os.environ.items() if k not in (seeds.SECRET_ENV, seeds.SECRET_FILE_ENV)}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    refused = _batch(folder, out, env)
    assert refused.returncode == 2 and "no term secret" in refused.stderr and "./grade secret --create" in refused.stderr
    assert "--public-seed" in refused.stderr and not (out / "gradebook.sqlite").exists()

    public = _batch(folder, out, env, "--public-seed")
    assert public.returncode == 0, public.stderr
    again = _batch(folder, out, env, "--public-seed")
    assert "unchanged 1" in again.stderr, again.stderr
    assert _rows(out)[0][1].startswith("public:")

    secret = tmp_path / "term_secret"
    secret.write_text("the first secret of the term\n")
    secret.chmod(0o600)
    env[seeds.SECRET_FILE_ENV] = str(secret)
    first = _batch(folder, out, env)
    assert first.returncode == 0, first.stderr
    assert "unchanged 0" in first.stderr and f"fingerprint {seeds.fingerprint(b'the first secret of the term')}" in first.stderr
    assert "the first secret" not in first.stderr + first.stdout
    kept = _batch(folder, out, env)
    assert "unchanged 1" in kept.stderr, kept.stderr

    secret.write_text("another secret\n")
    changed = _batch(folder, out, env)
    assert changed.returncode == 0 and "unchanged 0" in changed.stderr, changed.stderr
    identities = [identity for _, identity in _rows(out)]
    assert len(identities) == 3 and identities[0].startswith("public:")
    assert identities[1] == "secret:" + seeds.fingerprint(b"the first secret of the term") != identities[2]

    secret.chmod(0o640)
    open_to_group = _batch(folder, out, env)
    assert open_to_group.returncode == 2 and f"chmod 600 {secret}" in open_to_group.stderr
    assert len(_rows(out)) == 3  # nothing graded on it
