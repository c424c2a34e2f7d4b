"""`grader.check()` lines in a notebook are feedback, never part of what is graded.

The student notebook ends with `import grader` / `grader.check()`. Graded as written, that
cell would import the grader (an integrity flag, and no credit) and would grade the notebook
inside its own grading. So, before anything runs, these top-level statements are replaced by
`pass` (line numbers kept):

* `import grader`, `import grader as g`, `from grader import check [as c]` (and `grader` out of
  `import grader, time`), also inside a
  `try`/`if`/`def` (the whole statement goes: `try: import grader ... else: grader.check()`);
* any statement that calls `<that name>.check(...)` or `c(...)`;
* any later statement that uses a name bound by the two above (`r = grader.check(); print(r.score)`).

Nothing else of a cell is touched: a definition in the same cell as a check call is still
graded. What is replaced never runs, so hiding code there gains nothing; any other import of
the grader (`import grader.checks`, `from grader.grade import ...`) stays, and is flagged.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from dataclasses import replace

from grader.cells import PYTHON_BODY_MAGICS, Cell, cell_magic, ipython_transform, magic_head, magic_statement, parses

PLACEHOLDER = "pass  # grader.check(): not run while grading"


def _check_names(node: ast.stmt) -> set[str] | None:
    """The names a statement binds to the grader's entry point (`import grader`, `from grader
    import check`, also inside a try/if/def), or None: it imports nothing of the grader, or
    something besides the entry point (that import stays, and is flagged)."""
    names: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Import):
            ours = [alias for alias in sub.names if alias.name.split(".")[0] == "grader"]
            if ours and (len(ours) != len(sub.names) or any(alias.name != "grader" for alias in ours)):
                return None
            names |= {alias.asname or "grader" for alias in ours}
        elif isinstance(sub, ast.ImportFrom) and sub.level == 0 and (sub.module or "").split(".")[0] == "grader":
            if sub.module != "grader" or any(alias.name != "check" for alias in sub.names):
                return None
            names |= {alias.asname or "check" for alias in sub.names}
    return names or None


def _without_grader(node: ast.stmt) -> tuple[str, set[str]] | None:
    """For `import grader, time as t`: (`import time as t`, the names the grader was bound to)."""
    if not isinstance(node, ast.Import) or len(node.names) < 2:
        return None
    ours = [alias for alias in node.names if alias.name == "grader"]
    if not ours or len(ours) == len(node.names) or any(a.name.startswith("grader.") for a in node.names):
        return None
    kept = [alias.name + (f" as {alias.asname}" if alias.asname else "") for alias in node.names if alias not in ours]
    return "import " + ", ".join(kept), {alias.asname or "grader" for alias in ours}


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    """Every node, and those of the statement a `%time stmt` line runs (a string to the AST)."""
    for sub in ast.walk(node):
        yield sub
        statement = magic_statement(sub)
        if statement is not None:
            try:
                yield from ast.walk(ast.parse(statement))
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                pass


def _loads(node: ast.AST) -> set[str]:
    return {n.id for n in _walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _stores(node: ast.AST) -> set[str]:
    out = {n.id for n in _walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
    out |= {n.name for n in _walk(node) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    return out


def _blank(lines: list[str], node: ast.stmt, replacement: str = "pass") -> None:
    """Replace one top-level statement (by `pass`), keeping every other line where it was."""
    start, end = node.lineno - 1, (node.end_lineno or node.lineno) - 1
    col, end_col = node.col_offset, node.end_col_offset or len(lines[end])
    head, tail = lines[start][:col], lines[end][end_col:]
    if start == end:
        lines[start] = head + replacement + tail
        return
    lines[start] = head + replacement + (" \\" if tail.strip() and not tail.lstrip().startswith("#") else "")
    for i in range(start + 1, end):
        lines[i] = ""
    lines[end] = tail if tail.strip() and not tail.lstrip().startswith("#") else ""


def strip_source(source: str, tainted: set[str]) -> str:
    """`source` (as typed, magics included) without its check statements; `tainted` (updated)
    holds the names bound to the grader or to a check's result so far.

    Python is stripped as Python.  A cell magic whose body is Python (`%%time`) has its body
    stripped; another (`%%bash`) is left as it is.  Python with IPython lines (`%time`, `!ls`)
    is stripped on IPython's transformation of it, which keeps it line for line: the lines
    that change were Python lines, and are changed in the cell as typed; a magic line that
    used the grader (`%time grader.check()`) becomes `pass`.
    """
    if parses(source):
        return _strip_python(source, tainted)
    magic = cell_magic(source)
    if magic is not None:
        name, _, body = magic
        if name not in PYTHON_BODY_MAGICS:
            return source
        stripped = strip_source(body, tainted)
        return source if stripped == body else magic_head(source, body) + stripped
    view = ipython_transform(source)
    if view is None or not parses(view):
        return source  # the worker reports the cell
    typed = source.split("\n")
    lines = view.split("\n")
    if len(lines) == len(typed) + 1 and lines[-1] == "":
        lines.pop()  # IPython ends a cell with a newline
    if len(lines) != len(typed):
        _strip_python("\n".join(lines), tainted)  # only to follow the names
        return source
    stripped = _strip_python("\n".join(lines), tainted)
    if stripped == PLACEHOLDER:
        return PLACEHOLDER
    out = []
    for raw, before, after in zip(typed, lines, stripped.split("\n"), strict=True):
        if before == after:
            out.append(raw)
        elif raw == before:
            out.append(after)
        else:
            out.append(raw[: len(raw) - len(raw.lstrip())] + "pass")
    return "\n".join(out)


def _strip_python(source: str, tainted: set[str]) -> str:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return source  # the worker reports the cell; nothing here can run
    doomed: list[ast.stmt] = []
    rewrites: dict[int, str] = {}  # id(node) -> what replaces it, when not `pass`
    for node in tree.body:
        split = _without_grader(node)
        if split is not None:  # `import grader, time`: the grader goes, time stays
            rewrites[id(node)], names = split
            tainted |= names
            doomed.append(node)
            continue
        names = _check_names(node)
        if names is not None:
            tainted |= names | _stores(node)
        elif _loads(node) & tainted:
            tainted |= _stores(node)  # r = grader.check(): r is the grader's too
        else:
            tainted -= _stores(node)  # rebound to something of the student's own
            continue
        doomed.append(node)
    if not doomed:
        return source
    if len(doomed) == len(tree.body) and not rewrites:
        return PLACEHOLDER
    lines = source.split("\n")
    for node in reversed(doomed):  # from the end: earlier columns stay valid on shared lines
        _blank(lines, node, rewrites.get(id(node), "pass"))
    stripped = "\n".join(lines)
    try:
        ast.parse(stripped)
    except SyntaxError:  # an odd layout (several statements per line): drop nothing rather than break code
        return source
    return stripped


def strip_check_calls(cells: Sequence[Cell]) -> list[Cell]:
    """Every cell, in order, with its grader.check() statements replaced by `pass`."""
    tainted: set[str] = set()
    out = []
    for cell in cells:
        source = strip_source(cell.source, tainted)
        if source == cell.source:
            out.append(cell)
            continue
        typed, now = cell.source.split("\n"), source.split("\n")
        differing = [i for i in range(len(typed)) if i >= len(now) or typed[i] != now[i]] or [len(typed) - 1]
        code = [i for i in differing if typed[i].strip() and not typed[i].strip().startswith("#")]  # the call, not a comment
        line = ([i for i in code if "grader" in typed[i]] or code or differing)[0]
        out.append(replace(cell, source=source, stripped=(line + 1, typed[min(line, len(typed) - 1)].strip()[:200])))
    return out
