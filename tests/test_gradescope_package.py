"""The Gradescope autograder zip: no answer key inside, and run_autograder works on a fake /autograder."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grader import seeds
from grader.config import load_config
from grader.pick import choose
from tests.conftest import ROOT, SOLUTION_NB, STUDENT_NB
from tests.test_workflows import tool

NAMED = load_config().submission_file

TERM_SECRET = b"3f1c0d9a-term-secret-for-the-zip"


def _without_secrets(env: dict[str, str], config_home: Path) -> dict[str, str]:
    """`env` with no term secret of this machine's (none in the variables, none in ~/.config)."""
    env = {k: v for k, v in env.items() if k not in (seeds.SECRET_ENV, seeds.SECRET_FILE_ENV)}
    return {**env, "XDG_CONFIG_HOME": str(config_home)}


@pytest.fixture(scope="module")
def secret_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of an instructor whose term secret is in a file of their own."""
    home = tmp_path_factory.mktemp("instructor")
    path = home / "term_secret"
    path.write_bytes(TERM_SECRET + b"\n")
    path.chmod(0o600)
    return {**_without_secrets(dict(os.environ), home), seeds.SECRET_FILE_ENV: str(path)}


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory, secret_env: dict[str, str]) -> Path:
    out = tmp_path_factory.mktemp("zip") / "autograder.zip"
    proc = subprocess.run([sys.executable, "-m", "grader", "gradescope-zip", "-o", str(out), "--lang", "en"], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, env=secret_env)
    assert proc.returncode == 0, proc.stderr
    assert f"fingerprint {seeds.fingerprint(TERM_SECRET)}" in proc.stdout and TERM_SECRET.decode() not in proc.stdout + proc.stderr
    return out


def _solution_lines() -> set[str]:
    """Distinctive lines of the answer key: the bodies of the source's solution regions."""
    lines, inside = set(), False
    for line in (ROOT / "notebooks" / "source" / "paged_attention.py").read_text(encoding="utf-8").splitlines():
        marker = line.strip()
        if marker.startswith("# >>> solution"):
            inside = True
        elif marker.startswith("# <<< solution"):
            inside = False
        elif inside and len(marker) >= 30 and not marker.startswith("#"):
            lines.add(marker)
    assert len(lines) >= 10
    return lines


def test_zip_holds_the_grader_and_no_answer_key(package: Path) -> None:
    with zipfile.ZipFile(package) as archive:
        names = archive.namelist()
        assert {"setup.sh", "run_autograder", "pyproject.toml", "grader/__init__.py", "grader/config.toml", "grader/sandbox/worker.py"} <= set(names)
        for name in names:
            assert not re.match(r"(reference|student_template|notebooks|tests)/", name), name
            assert "solution" not in name.lower() and "__pycache__" not in name
        for script in ("setup.sh", "run_autograder"):
            assert stat.S_IMODE(archive.getinfo(script).external_attr >> 16) & 0o111, script
        answers = _solution_lines()
        for name in names:
            text = archive.read(name).decode("utf-8", "replace")
            leaked = [line for line in answers if line in text]
            assert not leaked, (name, leaked[:3])
        torch_pin = next(line for line in (ROOT / "pyproject.toml").read_text().splitlines() if '"torch' in line).strip().strip(",").strip('"')
        assert torch_pin in archive.read("setup.sh").decode()


def test_zip_is_reproducible(package: Path, tmp_path: Path, secret_env: dict[str, str]) -> None:
    again = tmp_path / "again.zip"
    subprocess.run([sys.executable, "-m", "grader", "gradescope-zip", "-o", str(again), "--lang", "en"], check=True, capture_output=True,
                   cwd=ROOT, timeout=120, env=secret_env)
    assert again.read_bytes() == package.read_bytes()


def test_zip_carries_the_term_secret_its_owners_alone(package: Path) -> None:
    with zipfile.ZipFile(package) as archive:
        assert archive.read("grader/term_secret").strip() == TERM_SECRET
        assert stat.S_IMODE(archive.getinfo("grader/term_secret").external_attr >> 16) == 0o600
        assert 'chmod 600 "$SOURCE/grader/term_secret"' in archive.read("run_autograder").decode()


def test_without_a_secret_the_zip_is_refused_unless_the_public_seed_is_asked_for(tmp_path: Path) -> None:
    env = _without_secrets(dict(os.environ), tmp_path)
    out = tmp_path / "autograder.zip"
    refused = subprocess.run([sys.executable, "-m", "grader", "gradescope-zip", "-o", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=120, env=env)
    assert refused.returncode == 2 and not out.exists()
    assert "no term secret" in refused.stderr and "./grade secret --create" in refused.stderr and "--public-seed" in refused.stderr
    public = subprocess.run([sys.executable, "-m", "grader", "gradescope-zip", "-o", str(out), "--public-seed"], capture_output=True, text=True,
                            cwd=ROOT, timeout=120, env=env)
    assert public.returncode == 0, public.stderr
    assert "no term secret" in public.stdout
    with zipfile.ZipFile(out) as archive:
        assert "grader/term_secret" not in archive.namelist()
    (tmp_path / "open").write_text("readable by all\n")
    (tmp_path / "open").chmod(0o644)
    open_secret = subprocess.run([sys.executable, "-m", "grader", "gradescope-zip", "-o", str(out)], capture_output=True, text=True, cwd=ROOT,
                                 timeout=120, env={**env, seeds.SECRET_FILE_ENV: str(tmp_path / "open")})
    assert open_secret.returncode == 2 and "chmod 600" in open_secret.stderr and "readable by all" not in open_secret.stderr


@pytest.mark.skipif(tool("shellcheck") is None, reason="shellcheck not installed")
def test_zip_scripts_pass_shellcheck(package: Path, tmp_path: Path) -> None:
    with zipfile.ZipFile(package) as archive:
        archive.extractall(tmp_path, ["setup.sh", "run_autograder"])
    proc = subprocess.run([tool("shellcheck"), str(tmp_path / "setup.sh"), str(tmp_path / "run_autograder")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout


def _autograder(package: Path, root: Path) -> Path:
    """Lay out /autograder the way Gradescope does: the zip unpacked in source/, an empty submission/."""
    with zipfile.ZipFile(package) as archive:
        archive.extractall(root / "source")
    (root / "submission").mkdir()
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
    (root / "run_autograder").chmod(0o755)
    return root


def _run(root: Path) -> dict:
    # AUTOGRADER_PYTHON: this venv has the dependencies; the grader itself comes from the zip,
    # and the term secret too (nothing of this machine's: Gradescope has only the zip).
    env = {**_without_secrets(dict(os.environ), root), "AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": sys.executable}
    env.pop("GITHUB_ACTIONS", None)
    proc = subprocess.run(["bash", str(root / "run_autograder")], capture_output=True, text=True, cwd=root, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads((root / "results" / "results.json").read_text(encoding="utf-8"))


def test_run_autograder_grades_a_submission_with_the_zipped_grader(package: Path, tmp_path: Path) -> None:
    root = _autograder(package, tmp_path / "autograder")
    shutil.copy(SOLUTION_NB, root / "submission" / "my work.ipynb")
    (root / "submission" / "helper.py").write_text("x = 1\n")  # the notebook is what gets graded
    results = _run(root)
    assert results["score"] == 100 and results["tests"] and results["extra_data"]["grade_result"]["submission"].endswith("my work.ipynb")
    assert results["extra_data"]["grade_result"]["random_cases"]["kind"] == "secret"  # the zip's own term secret
    assert stat.S_IMODE((root / "source" / "grader" / "term_secret").stat().st_mode) == 0o600
    which = subprocess.run(
        [sys.executable, "-c", "import grader; print(grader.__file__)"],
        capture_output=True, text=True, cwd=root / "source", env={**os.environ, "PYTHONPATH": str(root / "source")}, check=True,
    )
    assert Path(which.stdout.strip()).is_relative_to(root / "source")


def test_run_autograder_with_nothing_uploaded_still_writes_results(package: Path, tmp_path: Path) -> None:
    results = _run(_autograder(package, tmp_path / "autograder"))
    assert results["score"] == 0 and results["tests"] == [] and results["output_format"] == "text"
    assert results["output"].startswith("Not graded: no file was uploaded") and NAMED in results["output"]


def test_pick_the_named_file_then_the_only_notebook_then_the_only_script() -> None:
    def pick(*names: str) -> str | None:
        chosen = choose([Path(n) for n in names], NAMED).path
        return None if chosen is None else chosen.as_posix()

    assert pick("Untitled.ipynb", NAMED) == NAMED  # the case of the issue: a stray notebook beside the named one
    assert pick("z.ipynb", "Paged_Attention_Student.IPYNB") == "Paged_Attention_Student.IPYNB"
    assert pick(f"old/{NAMED}", NAMED, "b.ipynb") == NAMED  # a repository: the shallowest copy
    assert pick(f"x/{NAMED}", f"y/{NAMED}") is None  # two equally deep: which one is not ours to guess
    assert pick("my work.ipynb", "helper.py", "data.csv") == "my work.ipynb"
    assert pick("solution.py", "notes.txt") == "solution.py"
    assert pick("a.ipynb", "b.ipynb") is None and pick("a.py", "b.py") is None and pick("notes.txt") is None and pick() is None


def test_run_autograder_with_several_notebooks_none_named_grades_nothing_and_says_what_to_upload(package: Path, tmp_path: Path) -> None:
    root = _autograder(package, tmp_path / "autograder")
    hostile = 'b <a href="evil:">x<img src=x>\x1b.ipynb'
    for name in ("Untitled.ipynb", hostile, "notes.txt"):
        shutil.copy(SOLUTION_NB, root / "submission" / name)
    (root / "submission" / ".ipynb_checkpoints").mkdir()
    (root / "submission" / ".ipynb_checkpoints" / "Untitled-checkpoint.ipynb").write_text("{}")
    os.symlink("/etc/passwd", root / "submission" / "link.py")
    results = _run(root)
    assert results["score"] == 0 and results["tests"] == [] and results["extra_data"]["graded"] is False
    output = results["output"]
    assert output.startswith("Not graded: several files could be the submission") and NAMED in output and "Gradescope needs a score" in output
    assert "Untitled.ipynb" in output and "notes.txt" in output and "checkpoint" not in output and "link.py" not in output
    # The submission's names are shown as text, never rendered: every string Gradescope formats is "text".
    assert '<a href="evil:">x<img src=x>' in output and "\x1b" not in output and "\\x1b" in output
    assert results["output_format"] == results["test_output_format"] == results["test_name_format"] == "text"


def test_run_autograder_grades_the_named_notebook_beside_a_stray_one(package: Path, tmp_path: Path) -> None:
    root = _autograder(package, tmp_path / "autograder")
    shutil.copy(SOLUTION_NB, root / "submission" / NAMED)
    shutil.copy(STUDENT_NB, root / "submission" / "Untitled.ipynb")  # sorts first; used to be graded: 0/100
    results = _run(root)
    assert results["score"] == 100, results["output"][:2000]
    assert Path(results["extra_data"]["grade_result"]["submission"]).name == NAMED
    assert results["output_format"] == "text" and all(t["output_format"] == "text" and t["name_format"] == "text" for t in results["tests"])


def test_run_autograder_reports_a_broken_grader_to_the_student(package: Path, tmp_path: Path) -> None:
    root = _autograder(package, tmp_path / "autograder")
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": "/bin/false"}
    assert subprocess.run(["bash", str(root / "run_autograder")], env=env, capture_output=True, timeout=60).returncode == 0
    results = json.loads((root / "results" / "results.json").read_text())
    assert results["score"] == 0 and "autograder failed" in results["output"]
