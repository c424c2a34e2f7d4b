"""A real kernel is the oracle: each corpus notebook runs under nbclient (a real ipykernel) and under the
grader's worker, and the two agree on which cells raised (and what), and on what the five contract
definitions do afterwards (tests/fidelity_probe.py, the same cell appended to both runs).

Both runs start in a copy of the notebook's folder (a flat corpus file: the notebook alone), run
the cells the grader runs (`grader.check()` lines are taken out, as grading takes them out), and
run every cell whatever raised before (nbclient's allow_errors), as the grader does.  Where the
grader must differ, and nowhere else (docs/notebooks.md):

- a cell that raised SystemExit stops both (Jupyter's Run All stops there; nbclient would go on);
  the probe then runs on the cells before it, in both;
- a line the grader did not run (a shell command, an install, a debugger, the network) may make
  the kernel's cell raise what that line raises there (a failing `%%bash`, `%debug` asking for
  input), where the grader's cell ran through.  Nothing else may differ.

Corpus notebooks a bare kernel must not run (it has no sandbox): hostile/kill_judge.ipynb (it
kills the process that started it), and what is not a notebook (hostile/input_not_json.ipynb).
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

from grader import skipped_values
from grader.checks import REQUIRED_NAMES
from grader.config import load_config
from grader.folder import plan
from grader.sandbox import warm
from grader.sandbox.client import Sandbox, worker_env
from grader.submission import Cell, load_submission
from tests.conftest import CORPUS
from tests.fidelity_probe import PROBE

pytestmark = pytest.mark.slow

CONFIG = load_config()
PROBE_LINE = "__PA_PROBE__"
NOT_IN_A_BARE_KERNEL = {"kill_judge.ipynb", "input_not_json.ipynb"}
# Notebooks whose definitions branch on a skipped line's value (or the files it writes): Jupyter and the grader run
# different code by design, and the judge says so (grader/skipped_values.py), which is checked instead.
DIFFERS_BY_DESIGN = {"rt9_nb_shell_value_stubs.ipynb", "rt10_nb_shell_side_effect_file.ipynb", "rt24_nb_writefile_marker.ipynb",
                     "rt24_nb_alias_magic_sx.ipynb", "rt30_nb_capture_shell_output.ipynb",
                     "rt32_nb_raise_on_error.ipynb"}
# What a skipped line may make the kernel's cell raise (the grader's ran through).
KERNEL_RAISES_FOR = {
    "shell": {"CalledProcessError"},
    "install": {"CalledProcessError"},
    "debugger": {"StdinNotImplementedError", "BdbQuit"},
    "network": {"URLError", "OSError", "HTTPError", "TimeoutError"},
    "program": {"OSError", "FileNotFoundError"},
}


def _notebooks() -> list[Path]:
    found = []
    for kind in ("correct", "buggy", "given", "gaming", "hostile"):
        for entry in sorted((CORPUS / kind).iterdir()):
            if entry.suffix == ".ipynb" and entry.name not in NOT_IN_A_BARE_KERNEL:
                found.append(entry)
            elif entry.is_dir():
                found += sorted(entry.glob("*.ipynb"))
    return found


NOTEBOOKS = _notebooks()


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}" if path.parent.parent.parent == CORPUS else path.stem


def _folder(path: Path, into: Path) -> Path:
    """A private copy of the notebook's folder: a flat corpus file alone (its folder is the corpus),
    any other notebook's whole folder."""
    if path.parent.parent == CORPUS:
        target = into / "notebook"
        target.mkdir()
        shutil.copy(path, target / path.name)
    else:
        target = into / path.parent.name
        shutil.copytree(path.parent, target)
    return target


def _cells(path: Path) -> list[Cell]:
    """What the grader runs: the code cells as typed, grader.check() lines out, empty ones skipped (as nbclient does)."""
    return [c for c in load_submission(path, 1 << 24).cells if c.source.strip()]


def _outcome(cell: nbformat.NotebookNode, reply: dict[str, Any] | None) -> str | None:
    """What a kernel's cell raised: its first error output's type, else the reply's (a UsageError
    is printed, not an error output), else None."""
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return str(output.get("ename"))
    content = (reply or {}).get("content", {})
    return str(content.get("ename")) if content.get("status") == "error" else None


def kernel_run(path: Path, stop_before: int | None = None) -> tuple[dict[int, str | None], dict[str, Any] | None]:
    """Run the cells with nbclient on a real ipykernel, in a copy of the notebook's folder; the
    outcome of each cell run, and the probe's JSON.  The probe runs after the last cell, or just
    before cell `stop_before` (the one that raised SystemExit in the grader)."""
    with tempfile.TemporaryDirectory(prefix="pa-fidelity-kernel-") as tmp:
        folder = _folder(path, Path(tmp))
        cells = _cells(path)
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(c.source) for c in cells] + [nbformat.v4.new_code_cell(PROBE)]
        replies: dict[int, dict[str, Any]] = {}
        client = NotebookClient(nb, timeout=180, kernel_name="python3", allow_errors=True, resources={"metadata": {"path": str(folder)}})
        client.on_cell_executed = lambda cell, cell_index, execute_reply: replies.__setitem__(cell_index, execute_reply)
        outcomes: dict[int, str | None] = {}
        probe = len(cells)
        with client.setup_kernel():
            for position, cell in enumerate(cells):
                if stop_before == cell.index:
                    client.execute_cell(nb.cells[probe], probe)
                client.execute_cell(nb.cells[position], position)
                outcomes[cell.index] = _outcome(nb.cells[position], replies.get(position))
                if outcomes[cell.index] == "SystemExit":
                    break
            if stop_before is None:
                client.execute_cell(nb.cells[probe], probe)
        result = folder / "__pa_probe__.json"
        return outcomes, json.loads(result.read_text()) if result.exists() else None


def grader_run(path: Path, stop_before: int | None = None) -> tuple[dict[int, str | None], dict[str, Any] | None, list[Any]]:
    """The same cells in the grader's worker (a sandbox, with the copy of the folder the grader makes)."""
    with tempfile.TemporaryDirectory(prefix="pa-fidelity-grader-") as tmp:
        folder = _folder(path, Path(tmp))
        cells = _cells(path)
        if stop_before is not None:
            cells = [c for c in cells if c.index < stop_before]
        probe = Cell(max((c.index for c in cells), default=0) + 1, PROBE)
        notebook = folder / path.name
        limits = dataclasses.replace(CONFIG.limits, output_kb=1 << 14)  # the probe's line after all a notebook prints
        with Sandbox([*cells, probe], limits, folder=plan(notebook, folder, CONFIG.notebook)) as sandbox:
            report = sandbox.load()
            assert report.failed is None, (report.failed, sandbox.output()[0][-3000:])
            outcomes = {c.index: ((c.error or {}).get("type") if c.status == "error" else None if c.status == "ok" else c.status)
                        for c in report.cells if c.index != probe.index and c.status != "not_run"}
        # The file the probe writes is in the worker's tmpfs, out of the judge's sight: its line in
        # the output, read once the sandbox is closed (all the worker wrote has been read then).
        lines = [line for line in sandbox.output()[0].splitlines() if line.startswith(PROBE_LINE)]
        found = json.loads(lines[-1][len(PROBE_LINE):]) if lines else None
        return outcomes, found, report.skipped


def _kernel(job: tuple[Path, int | None]) -> tuple[Path, int | None, tuple[dict[int, str | None], dict[str, Any] | None]]:
    return job[0], job[1], kernel_run(*job)


@pytest.fixture(scope="module")
def runs() -> Iterator[dict[Path, dict[str, Any]]]:
    """Every notebook run both ways: kernels two at a time, grader workers from one warm template."""
    template = warm.start(worker_env(False))
    template.wait_ready()
    warm.use(template)
    try:
        graded: dict[Path, dict[str, Any]] = {}
        for path in NOTEBOOKS:
            outcomes, probe, skipped = grader_run(path)
            stop = next((i for i, error in outcomes.items() if error == "SystemExit"), None)
            if stop is not None:
                _, probe, _ = grader_run(path, stop_before=stop)
            graded[path] = {"outcomes": outcomes, "probe": probe, "skipped": skipped, "stop": stop}
        with multiprocessing.get_context("fork").Pool(2) as pool:
            for path, _, (outcomes, probe) in pool.imap_unordered(_kernel, [(p, graded[p]["stop"]) for p in NOTEBOOKS]):
                graded[path]["kernel"] = {"outcomes": outcomes, "probe": probe}
        yield graded
    finally:
        warm.use(None)
        template.close()


def _same(a: Any, b: Any) -> bool:
    """Equal, floats within 2e-3 (the kernel's torch uses several threads, the worker one)."""
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= 2e-3
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def test_the_corpus_notebooks_are_all_here() -> None:
    assert len(NOTEBOOKS) >= 38
    assert sum("nb14" in str(p) for p in NOTEBOOKS) == 13


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[_id(p) for p in NOTEBOOKS])
def test_the_grader_runs_the_notebook_as_a_real_kernel_does(runs: dict[Path, dict[str, Any]], path: Path) -> None:
    graded, kernel = runs[path], runs[path]["kernel"]
    if path.name in DIFFERS_BY_DESIGN:
        assert not _same(graded["probe"], kernel["probe"]), "the notebook was meant to run differently where its shell line is skipped"
        assert skipped_values.affected_todos(skipped_values.analyse(_cells(path)), REQUIRED_NAMES), "and the judge must say so"
        return
    allowed = {}
    for line in graded["skipped"]:
        allowed.setdefault(line.index, set()).update(KERNEL_RAISES_FOR[line.reason])
    differing = {}
    for index in sorted(set(kernel["outcomes"]) | set(graded["outcomes"])):
        ours, theirs = graded["outcomes"].get(index, "not run"), kernel["outcomes"].get(index, "not run")
        if ours != theirs and not (ours is None and theirs in allowed.get(index, ())):
            differing[index] = {"grader": ours, "kernel": theirs}
    assert differing == {}, differing
    assert kernel["probe"] is not None and graded["probe"] is not None
    assert _same(graded["probe"], kernel["probe"]), {k: (graded["probe"].get(k), kernel["probe"].get(k))
                                                    for k in kernel["probe"] if not _same(graded["probe"].get(k), kernel["probe"][k])}


def test_the_fidelity_test_sees_a_difference_when_there_is_one(tmp_path: Path) -> None:
    """The comparison can fail: a notebook whose %%bash cell writes the module it then imports runs
    in a kernel and not in the grader (a documented difference: no shell), and the probe and the
    cell outcomes say so."""
    folder = tmp_path / "shelled"
    folder.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in ("%%bash\necho 'def estimate_kv_cache_bytes(*a, **k):\n    return 42' > made.py",
                                                       "from made import estimate_kv_cache_bytes")]
    nbformat.write(nb, folder / "notebook.ipynb")
    ours, our_probe, skipped = grader_run(folder / "notebook.ipynb")
    theirs, their_probe = kernel_run(folder / "notebook.ipynb")
    assert [s.reason for s in skipped] == ["shell"]
    assert ours == {1: None, 2: "ModuleNotFoundError"} and theirs == {1: None, 2: None}
    assert our_probe is not None and their_probe is not None
    assert our_probe["ledger"] == ["raised", "KeyError"] and their_probe["ledger"] == ["ok", 42]
