"""The course's packages (grader/config.toml [notebook] packages): installed wherever the grader is,
so that a notebook importing them runs while graded as it runs in Jupyter."""

from __future__ import annotations

import importlib.util
import re
import zipfile
from pathlib import Path

import tomllib

from grader import gradescope_package
from grader.config import load_config
from tests.conftest import ROOT

PACKAGES = load_config().notebook.packages


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].strip().lower().replace("_", "-")


def test_the_course_names_its_packages() -> None:
    assert {_name(p) for p in PACKAGES} >= {"numpy", "tqdm", "matplotlib", "pandas"}


def test_the_grader_depends_on_every_course_package() -> None:
    """`./grade` and `./run-tests` install pyproject's dependencies (scripts/bootstrap.sh), and so does
    `pip install` of the wheel: a package the config names but the grader does not depend on would
    be missing wherever the grader is installed."""
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    assert {_name(p) for p in PACKAGES} <= {_name(d) for d in dependencies}


def test_every_course_package_is_importable_here() -> None:
    missing = [name for name in load_config().notebook.import_names() if importlib.util.find_spec(name) is None]
    assert missing == []


def test_the_gradescope_image_installs_them(tmp_path: Path) -> None:
    out = tmp_path / "autograder.zip"
    gradescope_package.build(ROOT, out, "en")
    with zipfile.ZipFile(out) as archive:
        setup = archive.read("setup.sh").decode()
    install = next(line for line in setup.splitlines() if '"$SOURCE"' in line and "pip" in line)
    for requirement in PACKAGES:
        assert f"'{requirement}'" in install or f" {requirement}" in install, (requirement, install)


def test_a_grading_environment_lacking_one_says_so_on_the_scorecard() -> None:
    from grader.config import NotebookEnvironment
    from grader.environment import package_notes

    assert package_notes(load_config().notebook) == []
    [note] = package_notes(NotebookEnvironment(packages=("numpy>=1", "no-such-course-package==1.0")))
    assert "no_such_course_package" in note.en and "not your fault" in note.en and "不是你的问题" in note.zh
