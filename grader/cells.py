"""A code cell, as typed and as the kernel compiles it.

A cell is sent to the sandbox as the student typed it: IPython's own machinery runs it there
(grader/sandbox/shell.py), magics and all.  The judge reads it too, for what it finds on the
source (imports of the answer key, edits of given code): `Cell.python` is the cell as Python,
the way IPython's input transformer turns it into code before compiling it, with the Python
body of a `%%time`-like cell magic in place of the magic call (its code runs in the
notebook's namespace).  Nothing here runs student code.
"""

from __future__ import annotations
import __future__

import ast
import functools
import re
from dataclasses import dataclass
from functools import cached_property

BARRY = __future__.barry_as_FLUFL.compiler_flag  # the one future import that changes the syntax

# Cell magics whose body is Python run in the notebook's namespace (once, or many times).
PYTHON_BODY_MAGICS = frozenset({"time", "timeit", "capture", "prun"})
# Line magics whose argument is a Python statement run in the notebook's namespace.
PYTHON_LINE_MAGICS = frozenset({"time", "timeit", "prun"})
CELL_MAGIC = re.compile(r"^%%([A-Za-z_][\w!]*|!)[ \t]*(.*)$")


@dataclass(frozen=True)
class Cell:
    index: int  # position among the notebook's code cells, from 1, as a student counts them
    source: str  # as typed: what the sandbox runs
    stripped: tuple[int, str] | None = None  # the first line a grader call was taken out of (checkcalls), and its text

    @cached_property
    def python(self) -> str:
        """The cell as Python, line for line where IPython keeps lines (for the judge's analysis)."""
        return python_view(self.source)

    @property
    def written_python(self) -> str | None:
        """The Python a `%%writefile x.py` cell writes (code a later cell may import or %run), else None."""
        magic = cell_magic(self.source)
        if magic is None or magic[0] not in ("writefile", "file") or not magic[1].split() or not magic[1].split()[-1].endswith(".py"):
            return None
        return python_view(magic[2])


def cell_magic(source: str) -> tuple[str, str, str] | None:
    """(name, its line, body) when the cell starts with a cell magic (`%%time -n 3`), else None.
    Blank lines before it do not count, as IPython drops them (red team 36: `\n%%capture c`)."""
    first, _, body = source.partition("\n")
    while not first.strip() and body:
        first, _, body = body.partition("\n")
    match = CELL_MAGIC.match(first.strip()) if first.lstrip().startswith("%%") else None
    if match is None:
        return None
    return match.group(1), match.group(2).strip(), body


def magic_head(source: str, body: str) -> str:
    """A cell magic cell up to its body: the magic's line and any blank lines before it."""
    return source[: len(source) - len(body)]


def python_view(source: str) -> str:
    """The cell as Python code.

    Valid Python is never touched (`!= 0` or `% block_size` at the start of a wrapped line is
    an operator, not a shell escape).  A cell magic whose body is Python keeps that body as
    the cell's code behind a `pass` line (so line numbers hold and the definitions in it are
    seen); other lines go through IPython's own input transformer, as a kernel compiles them.
    What even IPython cannot read becomes `pass` line by line.
    """
    if parses(source):
        return source
    source = automagic(source)
    magic = cell_magic(source)
    if magic is not None and magic[0] in PYTHON_BODY_MAGICS:
        name, line, body = magic
        blank = "\n" * (magic_head(source, body).count("\n") - 1)  # the lines before the magic, kept for line numbers
        return blank + "pass  # %%" + name + (" " + line if line else "") + "\n" + python_view(body)
    transformed = ipython_transform(source)
    if transformed is not None and parses(transformed):
        return transformed
    return _blank_ipython_lines(source)


def automagic(source: str) -> str:
    """A one-line cell as IPython's automagic runs it: `sx echo ran` or `pdb on` is a line magic
    (red team 36), where the line is not Python and its first word names one.  IPython applies
    it to single-line cells only, unless the word is a name of the notebook's (not known here:
    a line that is not Python has none)."""
    lines = [line for line in source.split("\n") if line.strip()]
    if len(lines) != 1:
        return source
    line = lines[0]
    word = re.match(r"^\s*([A-Za-z_]\w*)(\s|$)", line)
    rest = line[word.end():].lstrip() if word else ""
    if word is None or word.group(1) not in _line_magics() or rest.startswith("=") and not rest.startswith("=="):
        return source
    return source.replace(line, line[: word.start(1)] + "%" + line[word.start(1):], 1)


@functools.cache
def _line_magics() -> frozenset[str]:
    """IPython's line magics and default aliases (`ls`, `cat`): the words automagic runs."""
    try:
        from IPython.core.alias import default_aliases
        from IPython.core.magics import BUILTIN_LAZY_MAGICS
    except ImportError:
        return frozenset()
    return frozenset(BUILTIN_LAZY_MAGICS.get("line", {})) | {alias[0] for alias in default_aliases()}


def ipython_transform(source: str) -> str | None:
    """IPython's transformation of a cell (what a kernel compiles), or None if it cannot."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:
        return None
    try:
        return TransformerManager().transform_cell(source)
    except Exception:  # IPython could not make sense of it either: the cell is reported as it is
        return None


def magic_statement(node: ast.AST) -> str | None:
    """The Python statement a transformed `%time stmt` line runs (`get_ipython().run_line_magic('time', 'stmt')`)."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute) or node.func.attr != "run_line_magic":
        return None
    args = node.args
    if len(args) >= 2 and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in args[:2]):
        name, line = args[0].value, args[1].value  # type: ignore[attr-defined]
        if name in PYTHON_LINE_MAGICS:
            return _strip_options(line)
    return None


def _strip_options(line: str) -> str:
    """`-n 3 -r 3 f(x)` -> `f(x)` (the options of %time/%timeit/%prun)."""
    words = line.split(" ")
    while words and words[0].startswith("-") and not parses(" ".join(words)):
        option = words.pop(0)
        if option in ("-n", "-r", "-p", "-s", "-l", "-T", "-D", "-q") and words and not words[0].startswith("-"):
            words.pop(0)
    return " ".join(words)


def _blank_ipython_lines(source: str) -> str:
    """Magics and shell escapes as `pass`, keeping line numbers and indentation."""
    out = []
    depth = 0  # open brackets before this line (strings and comments are rare enough to ignore here)
    for line in source.split("\n"):
        stripped = line.lstrip()
        indent = line[: len(line) - len(stripped)]
        if depth == 0 and (stripped.startswith(("%", "!")) or re.match(r"^[A-Za-z_][\w, ]*=\s*[!%]", stripped)):
            out.append(indent + "pass  # IPython line")
            continue
        out.append(line)
        code = line.split("#", 1)[0]
        depth = max(0, depth + sum(code.count(c) for c in "([{") - sum(code.count(c) for c in ")]}"))
    return "\n".join(out)


def parses(source: str) -> bool:
    try:
        parse_cell(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def parse_cell(source: str) -> ast.Module:
    """A cell's syntax tree.  A kernel keeps an earlier cell's `from __future__` imports, and
    `barry_as_FLUFL` changes the syntax (`<>` for `!=`): a cell that parses only that way is read
    that way, so that no check of the judge's loses sight of it (red team 13 hid a branch on a
    skipped shell value behind `<>`)."""
    try:
        return ast.parse(source)
    except SyntaxError:
        return compile(source, "<cell>", "exec", ast.PyCF_ONLY_AST | BARRY, dont_inherit=True)
