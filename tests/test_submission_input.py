"""Broken input: whatever file arrives, the grader answers with a scorecard, never a traceback.

A file that cannot be graded (not JSON, empty, binary, not a regular file, too large...)
gets exit status 2 and its reason in both languages; a file that can be read is graded
(exit 0), however broken its code: a syntax error in one cell, a missing name, a wrong
signature, wrong return types, an old notebook format, megabytes of outputs.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest

from grader.config import Config, load_config
from grader.grade import grade_path
from grader.results import GradeResult
from grader.submission import SubmissionError, load_submission
from tests.conftest import ROOT

HOSTILE = ROOT / "tests" / "corpus" / "hostile"
REFERENCE = (ROOT / "reference" / "paged_attention.py").read_text()


def fast_config() -> Config:
    config = load_config()
    limits = dataclasses.replace(config.limits, call_timeout_s=2, item_budget_s=8, cell_timeout_s=5, total_budget_s=60)
    hypothesis = dataclasses.replace(config.hypothesis, max_examples=20, stateful_examples=10, attention_examples=8)
    return dataclasses.replace(config, limits=limits, hypothesis=hypothesis)


CONFIG = fast_config()


@functools.cache
def graded(path: Path) -> GradeResult:
    return grade_path(path, CONFIG, "cpu")


def _notebook(cells: list[str], outputs: int = 0) -> str:
    nb = nbformat.v4.new_notebook()
    for i, source in enumerate(cells):
        cell = nbformat.v4.new_code_cell(source)
        cell["id"] = f"c{i}"
        if i == 0:  # all outputs on the first cell
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="x" * 1023 + "\n") for _ in range(outputs)]
        nb.cells.append(cell)
    return nbformat.writes(nb)


def _write(name: str, data: bytes | str) -> Callable[[Path], Path]:
    def make(folder: Path) -> Path:
        path = folder / name
        if isinstance(data, str):
            path.write_text(data, encoding="utf-8")
        else:
            path.write_bytes(data)
        return path

    return make


def _fifo(folder: Path) -> Path:
    path = folder / "pipe.py"
    os.mkfifo(path)
    return path


def _directory(folder: Path) -> Path:
    path = folder / "folder.ipynb"
    path.mkdir()
    return path


MB = 1 << 20
V4 = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}}

# name -> (how to make it, words its English reason holds, words its Chinese reason holds)
UNGRADABLE: dict[str, tuple[Callable[[Path], Path], str, str]] = {
    "empty_notebook": (_write("empty.ipynb", b""), "empty", "空"),
    "empty_script": (_write("empty.py", b""), "empty", "空"),
    "whitespace_script": (_write("blank.py", "  \n\t\n"), "empty", "空"),
    "not_json": (_write("broken.ipynb", "{not json"), "not a valid Jupyter notebook", "不是有效的 Jupyter 笔记本"),
    "json_list": (_write("list.ipynb", "[1, 2, 3]"), "not a notebook", "不是笔记本"),
    "deep_json": (_write("deep.ipynb", "[" * 100_000 + "]" * 100_000), "not a valid Jupyter notebook", "不是有效的 Jupyter 笔记本"),
    "huge_int_json": (_write("int.ipynb", '{"nbformat": ' + "9" * 5000 + "}"), "not a valid Jupyter notebook", "不是有效的 Jupyter 笔记本"),
    "nbformat_5": (_write("v5.ipynb", json.dumps({**V4, "nbformat": 5, "cells": []})), "nbformat 5", "nbformat 5"),
    "nbformat_string": (_write("v4s.ipynb", json.dumps({**V4, "nbformat": "4", "cells": []})), "nbformat 4", "nbformat 4"),
    "cells_not_a_list": (_write("cells.ipynb", json.dumps({**V4, "cells": "print(1)"})), "cannot read the notebook", "无法读取笔记本"),
    "source_of_ints": (
        _write("ints.ipynb", json.dumps({**V4, "cells": [{"cell_type": "code", "source": [1, 2], "metadata": {}, "outputs": [], "execution_count": None}]})),
        "cannot read the notebook",
        "无法读取笔记本",
    ),
    "no_code_cells": (
        _write("prose.ipynb", json.dumps({**V4, "cells": [{"cell_type": "markdown", "source": "# notes", "metadata": {}}]})),
        "no code cells",
        "没有代码单元",
    ),
    "binary_script": (_write("blob.py", bytes(range(256))), "binary", "二进制"),
    "latin1_script": (_write("latin1.py", "x = 'café'\n".encode("latin-1")), "UTF-8", "UTF-8"),
    "wrong_extension": (_write("answer.txt", REFERENCE), "unsupported file type", "不支持的文件类型"),
    "directory": (_directory, "directory", "目录"),
    "named_pipe": (_fifo, "not a regular file", "不是普通文件"),
    "missing": (lambda folder: folder / "nowhere.ipynb", "not found", "找不到"),
    "too_large": (_write("big.ipynb", _notebook([REFERENCE], outputs=21 * 1024)), "too large", "过大"),
}


@pytest.mark.parametrize("case", sorted(UNGRADABLE))
def test_ungradable_input_gets_a_reason_in_both_languages(tmp_path: Path, case: str) -> None:
    make, en_words, zh_words = UNGRADABLE[case]
    path = make(tmp_path)
    result = grade_path(path, CONFIG, "cpu")
    assert result.error is not None and result.error.kind == "unreadable"
    assert en_words in result.error.message.en and zh_words in result.error.message.zh, result.error.message
    assert result.error.message.zh != result.error.message.en
    assert result.score == 0 and all(item.status == "not_run" and item.failure is None for item in result.items)  # not graded: no item failed


def test_reasons_come_from_submission_errors_not_crashes(tmp_path: Path) -> None:
    """The reader itself raises only SubmissionError, whatever it is given."""
    for case, (make, _, _) in UNGRADABLE.items():
        folder = tmp_path / case
        folder.mkdir()
        with pytest.raises(SubmissionError) as caught:
            load_submission(make(folder), CONFIG.limits.max_file_mb * MB)
        assert caught.value.zh and caught.value.en and caught.value.code


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "grader", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


@pytest.mark.parametrize("name", ["input_not_json.ipynb", "input_binary.py"])
@pytest.mark.parametrize("lang", ["zh", "en"])
def test_cli_exits_2_with_the_reason(tmp_path: Path, name: str, lang: str) -> None:
    proc = _cli("grade", str(HOSTILE / name), "--json", "results.json", "--lang", lang, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    reason = {"zh": ("未评分", "不是有效的 Jupyter 笔记本" if name.endswith(".ipynb") else "二进制"), "en": ("Not graded", "not a valid Jupyter notebook" if name.endswith(".ipynb") else "binary")}[lang]
    assert all(word in proc.stdout for word in reason), proc.stdout
    payload = json.loads((tmp_path / "results.json").read_text())
    assert payload["score"] == 0 and reason[1] in payload["output"]


@pytest.mark.slow
def test_cli_grades_readable_but_broken_code(tmp_path: Path) -> None:
    proc = _cli("grade", str(HOSTILE / "input_missing_names.py"), "--lang", "en", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "KVCacheManager not defined" in proc.stdout and "paged_attention not defined" in proc.stdout


# --- readable files with broken code: graded, item by item ------------------------------------


@pytest.mark.slow
def test_nbformat_3_is_converted_and_graded() -> None:
    result = graded(HOSTILE / "input_nbformat_v3.ipynb")
    assert result.error is None and result.score == 100
    assert any("nbformat 3" in note.en and "nbformat 3" in note.zh for note in result.notes)


@pytest.mark.slow
def test_a_syntax_error_costs_only_its_cell() -> None:
    result = graded(HOSTILE / "input_syntax_error_cell.ipynb")
    assert result.score == 100
    broken = [c for c in result.cells if c.status != "ok"]
    assert [(c.index, c.status, c.error_type) for c in broken] == [(2, "error", "SyntaxError")]


@pytest.mark.slow
def test_missing_names_are_named() -> None:
    result = graded(HOSTILE / "input_missing_names.py")
    for item in result.items:
        if item.todo == "todo1":
            assert item.status == "passed", item.failure
        elif item.status != "not_run":
            assert item.status == "failed" and item.failure.kind == "missing"
            wanted = "paged_attention" if item.todo == "todo5" else "KVCacheManager"
            assert wanted in item.failure.message.en and wanted in item.failure.message.zh
            assert "not defined" in item.failure.message.en and "没有找到" in item.failure.message.zh


@pytest.mark.slow
def test_wrong_signatures_are_reported_as_type_errors() -> None:
    result = graded(HOSTILE / "input_wrong_signature.py")
    items = {i.id: i for i in result.items}
    for item_id, item in items.items():
        if item.status == "not_run":
            continue
        if item_id.startswith("todo5.") and item_id != "todo5.scale_and_stability":
            assert item.status == "passed", item.failure  # a call passing `scale` fails for the scale item alone
            continue
        assert item.status == "failed", item_id
        assert "TypeError" in item.failure.message.en and "TypeError" in item.failure.message.zh
        assert item.failure.kind == "error"
    assert "unexpected keyword argument 'head_dim'" in items["todo2.block_count"].failure.message.en


@pytest.mark.slow
def test_wrong_return_types_fail_every_item_that_reads_them() -> None:
    result = graded(HOSTILE / "input_wrong_return_types.py")
    items = {i.id: i for i in result.items}
    failed = [i for i in result.items if i.status == "failed"]
    assert len(failed) == len([i for i in result.items if i.status != "not_run"])
    assert "should be a dict" in items["todo1.per_token"].failure.message.en
    assert "should be a list, got deque" in items["todo2.block_count"].failure.message.en  # the contract's free list is a list
    assert "list" in items["todo4.table_order"].failure.message.en
    assert "ndarray" in items["todo5.mha_fp32"].failure.message.en
    for item in failed:
        assert item.failure.kind in ("wrong", "error", "not_exercised") and item.failure.message.zh and item.failure.message.en
    assert any("given code" in g.message.en for g in result.given_code)  # the deque and the list-shaped ledger


@pytest.mark.slow
def test_megabytes_of_outputs_are_ignored(tmp_path: Path) -> None:
    """A notebook under the size limit that is mostly outputs: read fast, outputs never graded."""
    path = tmp_path / "chatty.ipynb"
    path.write_text(_notebook([REFERENCE, "print('hello')"], outputs=15 * 1024))
    assert 15 * MB < path.stat().st_size < CONFIG.limits.max_file_mb * MB
    submission = load_submission(path, CONFIG.limits.max_file_mb * MB)
    assert [c.index for c in submission.cells] == [1, 2]
    result = grade_path(path, CONFIG, "cpu")
    assert result.score == 100 and result.seconds < 60
