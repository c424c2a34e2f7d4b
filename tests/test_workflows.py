"""The GitHub workflows: linted by actionlint (with shellcheck on their scripts), and wired to real commands."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
import yaml

from grader.cli import build_parser
from tests.conftest import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"
CI = WORKFLOWS / "ci.yml"
FULL = WORKFLOWS / "full-suite.yml"
RELEASE = WORKFLOWS / "release.yml"
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
    workflows = sorted(WORKFLOWS.glob("*.yml"))
    assert {CI, FULL, RELEASE} <= set(workflows)
    proc = actionlint(*workflows, CLASSROOM)
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


def _steps(workflow: dict) -> list[dict]:
    return [step for job in workflow["jobs"].values() for step in job["steps"]]


def _readme_test_command() -> str:
    """The README's test command: the ./run-tests line of its two commands."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme[readme.index("## The two commands") :].split("```")[1]
    return next(line.split("#")[0].strip() for line in block.splitlines() if line.startswith("./run-tests"))


def _pip_cached(workflow: dict) -> bool:
    setup = next(step for step in _steps(workflow) if step.get("uses", "").startswith("actions/setup-python@"))
    return setup["with"].get("cache") == "pip" and setup["with"].get("cache-dependency-path") == "pyproject.toml"


def test_quick_tier_runs_on_every_push_and_pull_request() -> None:
    workflow = _workflow(CI)
    assert set(workflow["on"]) == {"push", "pull_request"} and not workflow["on"]["push"]  # every branch
    assert [run.strip() for run in _runs(workflow)] == ['./run-tests -m "not slow"']
    assert _pip_cached(workflow)
    (job,) = workflow["jobs"].values()
    assert job["timeout-minutes"] <= 20  # the tier's budget is 15 minutes on GitHub's runners
    assert workflow["permissions"] == {"contents": "read"}


def test_full_suite_runs_nightly_and_on_demand_with_the_readmes_command() -> None:
    workflow = _workflow(FULL)
    assert set(workflow["on"]) == {"schedule", "workflow_dispatch"}
    (schedule,) = workflow["on"]["schedule"]
    minute, hour, day, month, weekday = schedule["cron"].split()
    assert minute.isdigit() and hour.isdigit() and (day, month, weekday) == ("*", "*", "*")  # once every night
    assert [run.strip() for run in _runs(workflow)] == [_readme_test_command()] == ["./run-tests"]
    assert _pip_cached(workflow)
    assert workflow["permissions"] == {"contents": "read"}


def test_ci_entry_point_calls_the_readmes_test_command() -> None:
    last = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert last == f"exec {_readme_test_command()}"


def test_release_builds_the_wheel_sdist_and_gradescope_zip_and_attaches_them() -> None:
    workflow = _workflow(RELEASE)
    assert workflow["on"] == {"push": {"tags": ["v*"]}}
    assert workflow["permissions"] == {"contents": "write"}  # creating a release needs it, nothing more
    runs = "\n".join(_runs(workflow))
    assert "python -m build --outdir dist/" in runs
    zip_line = next(line.strip() for line in runs.splitlines() if "gradescope-zip" in line)
    argv = shlex.split(zip_line)
    assert argv[0] == "./grade"
    args = build_parser().parse_args(argv[1:])  # the verb and its options exist
    assert str(args.out) == "dist/gradescope-autograder.zip"
    assert args.public_seed  # CI has no term secret, and a public release must carry none
    publish = next(step["run"] for step in _steps(workflow) if "gh release create" in step.get("run", ""))
    assets = shlex.split(publish[publish.index("gh release create") :].replace("\\\n", " "))
    assert {"dist/*.whl", "dist/*.tar.gz", "dist/gradescope-autograder.zip"} <= set(assets)
    assert "--verify-tag" in assets
    # The tag must name the version the wheel's file name carries; the two copies of it agree.
    assert '"$GITHUB_REF_NAME" != "v$version"' in runs
    import grader

    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    assert grader.__version__ == version


def test_classroom_reads_an_organisation_variable_and_the_docs_say_so() -> None:
    workflow = _workflow(CLASSROOM)
    (job,) = workflow["jobs"].values()
    assert job["env"]["GRADER_PACKAGE"] == "${{ vars.GRADER_PACKAGE }}"  # organisation or repository variable
    assert "organisation variable GRADER_PACKAGE" in CLASSROOM.read_text(encoding="utf-8")
    # GitHub copies no variables from a template repository: every set-up instruction says organisation.
    for doc in ("students.md", "instructors.md"):
        text = " ".join((ROOT / "docs" / doc).read_text(encoding="utf-8").split())
        assert re.search(r"organisation variable\*{0,2} `GRADER_PACKAGE`", text), doc
        assert "repository variable `GRADER_PACKAGE`" not in text, doc


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
    scripts = [ROOT / "run-tests", ROOT / "grade", ROOT / ".ci" / "run", ROOT / "scripts" / "bootstrap.sh", ROOT / "scripts" / "setup-venv.sh"]
    proc = subprocess.run([tool("shellcheck"), "-x", "-s", "bash", *map(str, scripts)], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stdout
