"""Read a submission (.ipynb or .py) into the code cells a fresh kernel would run.

"Restart and run all": code cells top to bottom whatever their execution counts, outputs
ignored, each cell as typed (IPython runs it in the sandbox; `Cell.python` is what the judge
reads of it).  Input that cannot be read raises SubmissionError with a reason in both
languages; nothing here runs student code.
"""

from __future__ import annotations

import hashlib
import json
import re
import stat
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from grader.cells import Cell
from grader.checkcalls import strip_check_calls
from grader.folder import FolderCopy

PY_CELL_MARKER = re.compile(r"^# ?(%%|In\[[ 0-9]*\]:)")


class SubmissionError(Exception):
    def __init__(self, code: str, zh: str, en: str):
        super().__init__(en)
        self.code = code
        self.zh = zh
        self.en = en


@dataclass
class Submission:
    path: Path
    kind: str  # "notebook" or "python"
    cells: list[Cell]
    sha256: str
    notes: list[tuple[str, str]] = field(default_factory=list)  # (zh, en) remarks for the scorecard
    folder: FolderCopy | None = None  # what of its folder the notebook sees (grader/folder.py); None: nothing


def load_submission(path: Path, max_bytes: int) -> Submission:
    try:
        info = path.stat()
    except FileNotFoundError:
        raise SubmissionError("missing", f"找不到提交文件：{path}", f"submission not found: {path}") from None
    except OSError as error:
        raise SubmissionError("unreadable", f"无法读取提交文件：{error.strerror}", f"cannot read the submission: {error.strerror}") from None
    if stat.S_ISDIR(info.st_mode):
        raise SubmissionError("not_a_file", f"提交的是目录而不是文件：{path}", f"submission is a directory: {path}")
    if not stat.S_ISREG(info.st_mode):  # a pipe or a device would block or never end
        raise SubmissionError("not_a_file", f"提交的不是普通文件：{path}", f"submission is not a regular file: {path}")
    if info.st_size > max_bytes:
        raise SubmissionError(
            "too_large",
            f"文件过大（{info.st_size} 字节，上限 {max_bytes}）；请清除输出后再提交",
            f"file too large ({info.st_size} bytes, limit {max_bytes}); clear the outputs and resubmit",
        )
    try:
        with path.open("rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as error:
        raise SubmissionError("unreadable", f"无法读取提交文件：{error.strerror}", f"cannot read the submission: {error.strerror}") from None
    if len(data) > max_bytes:  # it grew after the size check
        raise SubmissionError("too_large", f"文件过大（上限 {max_bytes} 字节）", f"file too large (limit {max_bytes} bytes)")
    digest = hashlib.sha256(data).hexdigest()
    suffix = path.suffix.lower()
    if suffix == ".ipynb":
        cells, notes = _notebook_cells(data)
        return Submission(path, "notebook", strip_check_calls(cells), digest, notes)
    if suffix == ".py":
        return Submission(path, "python", strip_check_calls(_python_cells(_decode(data))), digest)
    raise SubmissionError(
        "unsupported_type",
        f"不支持的文件类型 {suffix or '(无后缀)'}：请提交 .ipynb 或 .py",
        f"unsupported file type {suffix or '(none)'}: submit a .ipynb or .py file",
    )


def looks_loadable(path: Path, max_bytes: int) -> bool:
    """A quick look, without nbformat: False where load_submission is sure to refuse the file
    (too large, binary, not UTF-8, not a JSON object), which a worker need not start for."""
    try:
        if path.stat().st_size > max_bytes:
            return False
        with path.open("rb") as f:
            text = _decode(f.read(max_bytes + 1))
    except (OSError, SubmissionError):
        return False
    if path.suffix.lower() != ".ipynb":
        return True
    try:
        return isinstance(json.loads(text), dict)
    except (ValueError, RecursionError):  # (a JSON array nested thousands deep)
        return False


def _decode(data: bytes) -> str:
    if b"\x00" in data:
        raise SubmissionError("binary", "文件是二进制内容，不是文本", "the file is binary, not text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise SubmissionError(
            "not_utf8", f"文件不是 UTF-8 文本（{error}）", f"the file is not UTF-8 text ({error})"
        ) from None


def _notebook_cells(data: bytes) -> tuple[list[Cell], list[tuple[str, str]]]:
    text = _decode(data)
    if not text.strip():
        raise SubmissionError("empty", "文件是空的", "the file is empty")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as error:
        raise SubmissionError(
            "not_json",
            f"这不是有效的 Jupyter 笔记本（JSON 解析失败：第 {error.lineno} 行）",
            f"not a valid Jupyter notebook (JSON error at line {error.lineno})",
        ) from None
    except (ValueError, RecursionError):  # a number too long to convert, nesting too deep
        raise SubmissionError(
            "not_json", "这不是有效的 Jupyter 笔记本（JSON 无法解析）", "not a valid Jupyter notebook (the JSON cannot be read)"
        ) from None
    if not isinstance(raw, dict) or "nbformat" not in raw:
        raise SubmissionError("not_notebook", "JSON 中没有 nbformat 字段，不是笔记本", "the JSON has no nbformat field: not a notebook")
    notes: list[tuple[str, str]] = []
    major = raw.get("nbformat")
    if type(major) is not int or major not in (3, 4):
        shown = str(major)[:20]
        raise SubmissionError(
            "bad_notebook",
            f"不支持的笔记本格式 nbformat {shown}（支持 3 和 4）",
            f"unsupported notebook format nbformat {shown} (3 and 4 are supported)",
        )
    _drop_outputs(raw)
    import nbformat  # here: its import (jsonschema's) is a tenth of a second the worker's start need not wait for

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # nbformat's warnings about ids and minor versions
            notebook = nbformat.reads(json.dumps(raw), as_version=4)
    except Exception as error:  # nbformat raises many kinds; all mean "cannot read"
        message = str(error).splitlines()[0][:300] if str(error) else type(error).__name__
        raise SubmissionError("bad_notebook", f"无法读取笔记本：{message}", f"cannot read the notebook: {message}") from None
    if major != 4:
        notes.append((f"笔记本格式为 nbformat {major}，已转换为 4 后评分", f"notebook was nbformat {major}; converted to 4 for grading"))
    cells = []
    code_index = 0
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        code_index += 1
        source = cell.get("source", "")
        if isinstance(source, list):
            source = "".join(source)
        cells.append(Cell(code_index, str(source)))
    if not cells:
        raise SubmissionError("no_code", "笔记本里没有代码单元", "the notebook has no code cells")
    return cells, notes


def _drop_outputs(raw: dict) -> None:
    """Outputs are never graded; dropping them first keeps a notebook full of them fast to read."""
    cells = raw.get("cells")
    sheets = raw.get("worksheets")
    if isinstance(sheets, list):  # nbformat 3
        cells = [c for sheet in sheets if isinstance(sheet, dict) and isinstance(sheet.get("cells"), list) for c in sheet["cells"]]
    if isinstance(cells, list):
        for cell in cells:
            if isinstance(cell, dict) and isinstance(cell.get("outputs"), list):
                cell["outputs"] = []


def _python_cells(text: str) -> list[Cell]:
    if not text.strip():
        raise SubmissionError("empty", "文件是空的", "the file is empty")
    chunks: list[list[str]] = [[]]
    for line in text.splitlines():
        if PY_CELL_MARKER.match(line) and any(x.strip() for x in chunks[-1]):
            chunks.append([])
        chunks[-1].append(line)
    return [Cell(i, "\n".join(chunk)) for i, chunk in enumerate(chunks, start=1)]
