"""Static look at a submission for use of the answer key or the grader.

This runs in the judge on the source text, so a submission cannot switch it off; the
worker also refuses such imports at run time and reports the attempts (as a hint only).
"""

from __future__ import annotations

import ast
import re

from grader.results import Text
from grader.submission import Submission

FORBIDDEN = ("reference", "student_template", "grader")
PATH_HINT = re.compile(r"(^|[/\\])(reference|student_template|grader)([/\\]|$)|paged_attention_solution")


def scan(submission: Submission) -> list[Text]:
    findings: list[Text] = []
    for cell in submission.cells:
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            name = _imported(node)
            if name and name.split(".")[0] in FORBIDDEN:
                findings.append(Text(f"第 {cell.index} 个代码单元导入了 {name}", f"code cell {cell.index} imports {name}"))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and PATH_HINT.search(node.value):
                findings.append(
                    Text(f"第 {cell.index} 个代码单元引用了路径 {node.value[:80]!r}", f"code cell {cell.index} refers to the path {node.value[:80]!r}")
                )
    return findings


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
