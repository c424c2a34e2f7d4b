"""Random cases a student cannot know in advance: the seed is the term's secret with the file's sha256."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest
import tomllib

from grader import gradescope_package, seeds
from grader.config import load_config
from grader.grade import with_seed
from tests.conftest import ROOT


@pytest.fixture
def secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(seeds.SECRET_ENV, "term 2026 spring")


def test_no_secret_means_the_public_configured_seed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(seeds.SECRET_ENV, raising=False)
    monkeypatch.setenv(seeds.SECRET_FILE_ENV, str(tmp_path / "none"))
    config = load_config()
    seeded, kind = seeds.seeded(config, "ab" * 32)
    assert kind == seeds.PUBLIC and seeded.hypothesis.seed == config.hypothesis.seed
    assert str(config.hypothesis.seed) in seeds.describe(kind, seeded, "en")


def test_a_secret_seed_is_the_same_for_a_file_and_different_across_files_and_terms(secret: None, monkeypatch: pytest.MonkeyPatch) -> None:
    config = load_config()
    a, kind = seeds.seeded(config, "aa" * 32)
    again, _ = seeds.seeded(config, "aa" * 32)
    b, _ = seeds.seeded(config, "bb" * 32)
    assert kind == seeds.SECRET and a.hypothesis.seed == again.hypothesis.seed != b.hypothesis.seed
    assert a.hypothesis.seed != config.hypothesis.seed
    monkeypatch.setenv(seeds.SECRET_ENV, "another term")
    assert seeds.seeded(config, "aa" * 32)[0].hypothesis.seed != a.hypothesis.seed
    assert str(a.hypothesis.seed) not in seeds.describe(kind, a, "en") + seeds.describe(kind, a, "zh")  # never shown


def test_the_secret_may_come_from_a_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(seeds.SECRET_ENV, raising=False)
    path = tmp_path / "secret"
    path.write_text("from a file\n", encoding="utf-8")
    monkeypatch.setenv(seeds.SECRET_FILE_ENV, str(path))
    assert seeds.term_secret() == b"from a file"
    monkeypatch.setenv(seeds.SECRET_ENV, "from the environment")
    assert seeds.term_secret() == b"from the environment"


def test_a_seed_given_on_the_command_line_wins(secret: None) -> None:
    config = with_seed(load_config(), 7)
    seeded, kind = seeds.seeded(config, "aa" * 32)
    assert kind == seeds.GIVEN and seeded.hypothesis.seed == 7


def test_the_secret_file_travels_in_the_gradescope_zip_but_never_in_the_wheel(tmp_path: Path) -> None:
    root = tmp_path / "checkout"
    (root / "grader").mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        (root / name).write_text((ROOT / name).read_text(encoding="utf-8"), encoding="utf-8")
    (root / "grader" / "__init__.py").write_text("", encoding="utf-8")
    (root / "grader" / seeds.DEFAULT_FILE.name).write_text("s3cret", encoding="utf-8")
    assert f"grader/{seeds.DEFAULT_FILE.name}" in [name for name, _ in gradescope_package.members(root)]
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]["grader"]
    assert not any(fnmatch.fnmatch(seeds.DEFAULT_FILE.name, pattern) for pattern in package_data)
    assert "/grader/term_secret" in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()


def test_the_worker_never_sees_the_secret(secret: None) -> None:
    from grader.sandbox.client import worker_env

    assert not any("SECRET" in name for name in worker_env(False))
