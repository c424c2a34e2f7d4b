"""The distributed grader holds no answer key: build the wheel and the sdist (offline) and look inside.

A student may read whatever the grading machine has installed, and anyone may download a
published sdist, so both must carry the grader only: not the tests (their asserts give the
TODOs away), reference/, student_template/, the notebooks or their single source, and no
solution code under another name.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

# Lines only the solution has (the template leaves these to the student).
DISTINCTIVE = (
    "repeat_interleave(group",
    "self.free_blocks.pop(0)",
    "del self.free_blocks[:needed]",
    "needed = math.ceil(req.seq_len / self.block_size)",
    "kv_bytes_per_token = 2 * num_layers * num_kv_heads * head_dim * dtype_bytes",
    "torch.cat(ordered, dim=0)[: req.seq_len]",
)


def _solution_only_lines() -> list[str]:
    template = {line.strip() for line in (ROOT / "student_template" / "paged_attention.py").read_text().splitlines()}
    lines = []
    for line in (ROOT / "reference" / "paged_attention.py").read_text().splitlines():
        text = line.strip()
        if len(text) >= 25 and not text.startswith("#") and text not in template:
            lines.append(text)
    return lines


def _project_files() -> list[str]:
    """What a clean checkout (plus files not yet committed, minus ignored ones) holds."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [name for name in listed.split("\0") if name and (ROOT / name).is_file()]


@pytest.fixture(scope="module")
def source_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the checkout as git sees it, so untracked build leftovers cannot hide a leak."""
    if shutil.which("git") is None:
        pytest.skip("git is needed to list the project's files")
    source = tmp_path_factory.mktemp("checkout") / "src"
    for name in _project_files():
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    return source


def _built(command: list[str], dist: Path, pattern: str) -> Path:
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    built = sorted(dist.glob(pattern))
    assert len(built) == 1, built
    return built[0]


@pytest.fixture(scope="module")
def wheel(source_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    dist = tmp_path_factory.mktemp("wheel")
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w", str(dist), str(source_tree)]
    with zipfile.ZipFile(_built(command, dist, "*.whl")) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


@pytest.fixture(scope="module")
def sdist(source_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    dist = tmp_path_factory.mktemp("sdist")
    command = [sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", str(dist), str(source_tree)]
    with tarfile.open(_built(command, dist, "*.tar.gz")) as archive:
        # Names without the sdist's top folder (paged_attention_grader-0.1.0/), like the wheel's.
        return {
            member.name.split("/", 1)[1]: archive.extractfile(member).read()  # type: ignore[union-attr]
            for member in archive.getmembers()
            if member.isfile() and "/" in member.name
        }


def _assert_grader_only(names: list[str]) -> None:
    assert "grader/__init__.py" in names and "grader/config.toml" in names and "grader/rules.toml" in names  # the rules: the scorecard shows them
    assert "grader/sandbox/worker.py" in names
    top = {name.split("/")[0] for name in names}
    assert not top & {"reference", "student_template", "notebooks", "tests"}, sorted(top)
    assert not [n for n in names if n.endswith(".ipynb") or "/source/" in n or "solution" in n.lower()]


def _assert_no_solution_code(files: dict[str, bytes]) -> None:
    solution = _solution_only_lines()
    assert len(solution) >= 10  # the comparison means something
    for name, data in files.items():
        text = data.decode("utf-8", errors="replace")
        for needle in DISTINCTIVE:
            assert needle not in text, f"{name} contains solution code: {needle!r}"
        shared = [line for line in solution if line in text]
        # A few generic lines ("for i in range(num_seqs):") may coincide; a copy would share most.
        assert len(shared) <= max(3, len(solution) // 8), f"{name} shares solution lines: {shared}"


def test_wheel_holds_the_grader_and_nothing_of_the_exercise(wheel: dict[str, bytes]) -> None:
    _assert_grader_only(list(wheel))


def test_wheel_contains_no_solution_code(wheel: dict[str, bytes]) -> None:
    _assert_no_solution_code(wheel)


def test_sdist_holds_the_grader_and_nothing_of_the_exercise(sdist: dict[str, bytes]) -> None:
    names = list(sdist)
    _assert_grader_only(names)
    assert "pyproject.toml" in names and "README.md" in names  # enough to build the wheel from it
    assert not [n for n in names if n.startswith(("benchmarks/", "scripts/", ".github/")) or n in ("grade", "run-tests")]


def test_sdist_contains_no_solution_code(sdist: dict[str, bytes]) -> None:
    _assert_no_solution_code(sdist)
