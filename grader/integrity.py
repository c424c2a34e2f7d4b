"""Static look at a submission for use of the answer key or the grader.

This runs in the judge on the source text, so a submission cannot switch it off; the
worker also refuses such imports at run time and reports the attempts (as a hint only).
"""

from __future__ import annotations

import ast
import re

from grader.cells import parse_cell
from grader.results import Text
from grader.submission import Submission

FORBIDDEN = ("reference", "student_template", "grader")
# A path into the answer key or the grader: the name next to a separator, never the bare word
# (a dict key "reference" in a student's self-check is not a path).
PATH_HINT = re.compile(
    r"(^|[/\\])(reference|student_template|grader)[/\\]"
    r"|[/\\](reference|student_template|grader)$"
    r"|paged_attention_solution|notebooks[/\\]source"
)
# The worker refuses those imports through sys.meta_path; code that edits the import machinery
# is working around that refusal.
IMPORT_MACHINERY = ("meta_path", "path_hooks", "path_importer_cache")


def scan(submission: Submission) -> list[Text]:
    findings: list[Text] = []
    for cell in submission.cells:
        # The cell as the kernel compiles it, and a module it writes (%%writefile x.py) for a later import.
        trees = []
        for code in (cell.python, cell.written_python):
            if code is None:
                continue
            try:
                trees.append(parse_cell(code))
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                continue  # the worker reports the cell; nothing here can be flagged from it
        seen: set[tuple[str, str]] = set()
        for node in (node for tree in trees for node in ast.walk(tree)):
            finding = _finding(node)
            if finding is None or finding in seen:
                continue
            seen.add(finding)
            kind, what = finding
            if kind == "import":
                findings.append(Text(f"第 {cell.index} 个代码单元导入了 {what}", f"code cell {cell.index} imports {what}"))
            elif kind == "path":
                findings.append(Text(f"第 {cell.index} 个代码单元引用了路径 {what!r}", f"code cell {cell.index} refers to the path {what!r}"))
            else:
                findings.append(
                    Text(
                        f"第 {cell.index} 个代码单元修改了 Python 的导入机制（sys.{what}），以绕过对答案与评分器的导入限制",
                        f"code cell {cell.index} changes Python's import machinery (sys.{what}), which is how the block on importing the answer key and the grader is worked around",
                    )
                )
    return findings


def _finding(node: ast.AST) -> tuple[str, str] | None:
    name = _imported(node)
    if name and name.split(".")[0] in FORBIDDEN:
        return ("import", name)
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and PATH_HINT.search(node.value):
        return ("path", node.value[:80])
    if isinstance(node, ast.Attribute) and node.attr in IMPORT_MACHINERY:
        return ("machinery", node.attr)
    return None


def _imported(node: ast.AST) -> str | None:
    if isinstance(node, ast.Import):
        return next((alias.name for alias in node.names if alias.name.split(".")[0] in FORBIDDEN), None)
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return node.module
    if isinstance(node, ast.Call):
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if called in ("__import__", "import_module") and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                return first.value
    return None
