"""The GitHub workflows: linted by actionlint (with shellcheck on their scripts), and wired to real commands."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from grader.cli import build_parser
from tests.conftest import ROOT

CI = ROOT / ".github" / "workflows" / "ci.yml"
CLASSROOM = ROOT / ".github" / "classroom" / "autograde.yml"


def tool(name: str) -> str | None:
    beside = Path(sys.executable).parent / name  # installed into the venv by the test extra
    return str(beside) if beside.exists() else shutil.which(name)


def actionlint(*files: Path) -> subprocess.CompletedProcess[str]:
    exe = tool("actionlint")
    assert exe, "actionlint missing: `pip install -e .[test]` installs it"
    shellcheck = tool("shellcheck")
    args = [exe, "-no-color", "-shellcheck", shellcheck or ""]  # "" turns the shellcheck integration off
    return subprocess.run([*args, *map(str, files)], capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_workflows_pass_actionlint() -> None:
    proc = actionlint(CI, CLASSROOM)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_does_catch_mistakes(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text(
        "on: push\njobs:\n  x:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - run: echo ${{ github.event.head_commit.message }}\n      - uses: actions/checkout@v6\n        with: {nope: 1}\n"
    )
    proc = actionlint(bad)
    assert proc.returncode != 0 and "nope" in proc.stdout and "untrusted" in proc.stdout


def _workflow(path: Path) -> dict:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads a bare `on` as true
    return data


def _runs(workflow: dict) -> list[str]:
    return [step["run"] for job in workflow["jobs"].values() for step in job["steps"] if "run" in step]


def test_ci_runs_the_projects_own_test_command() -> None:
    workflow = _workflow(CI)
    assert "push" in workflow["on"] and "pull_request" in workflow["on"]
    assert any(run.strip() == "./run-tests" for run in _runs(workflow))
    assert workflow["permissions"] == {"contents": "read"}


def test_classroom_workflow_grades_publishes_and_uploads() -> None:
    workflow = _workflow(CLASSROOM)
    assert "push" in workflow["on"]
    # The names GitHub Classroom looks for (classroom-resources/autograding-grading-reporter's README).
    assert workflow["name"] == "Autograding Tests" and list(workflow["jobs"]) == ["run-autograding-tests"]
    grade = next(run for run in _runs(workflow) if "-m grader grade" in run)
    argv = shlex.split(grade.replace('"$NOTEBOOK"', "nb.ipynb"))
    args = build_parser().parse_args(argv[argv.index("grader") + 1 :])  # the options exist in our CLI
    assert args.json and args.markdown and args.html
    uploads = [step for job in workflow["jobs"].values() for step in job["steps"] if "upload-artifact" in step.get("uses", "")]
    assert uploads and uploads[0]["if"] == "always()" and "scorecard.html" in uploads[0]["with"]["path"]
    assert workflow["permissions"] == {"contents": "read"}  # annotations and summaries need no write token


@pytest.mark.skipif(tool("shellcheck") is None, reason="shellcheck not installed")
def test_shell_entry_points_pass_shellcheck() -> None:
    scripts = [ROOT / "run-tests", ROOT / "grade", ROOT / ".ci" / "run", ROOT / "scripts" / "bootstrap.sh"]
    proc = subprocess.run([tool("shellcheck"), "-x", "-s", "bash", *map(str, scripts)], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stdout
