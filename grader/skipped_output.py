"""What catches a cell's printed output, for grader/skipped_effects.py: a command's output is
printed in Jupyter, so a notebook that catches it (`%%capture`, `redirect_stdout`, a swapped
`sys.stdout`) holds the command's value there and nothing here.  Nothing here runs student code."""

from __future__ import annotations

import ast
import builtins
from typing import TYPE_CHECKING

from grader.cells import cell_magic
from grader.skipped_cells import Source, _bound, _called, _constant, _loads, _scoped, alias_magic_lines
from grader.submission import Cell

if TYPE_CHECKING:
    from grader.skipped_effects import Command


# What catches a cell's printed output (a command's too: IPython prints it through `print`, to
# `sys.stdout`), and what reads what was caught.
CATCHERS = frozenset({"redirect_stdout", "redirect_stderr", "capture_output", "capture"})
STREAMS = frozenset({"stdout", "stderr", "print", "displayhook"})  # `sys.stdout = buf`, `builtins.print = keep`, `sys.displayhook = f`
CAUGHT_READS = frozenset({"getvalue", "getbuffer", "read", "readline", "readlines", "tell", "truncate"})  # `buf.getvalue()`
STREAM_USES = frozenset({"write", "writelines", "flush", "fileno", "isatty"})  # `sys.stdout.write(...)` reads nothing caught
WRITERS = frozenset({"write", "writelines"})  # a class with one of these may be handed the output


def _output_catcher(cells: list[Cell], statements: list[tuple[int, ast.stmt]], command: Command) -> Source | None:
    """The command's printed output, where the notebook may catch it (red team 30): `%%capture c`, `with
    redirect_stdout(buf)`, `capture_output()`, `sys.stdout = buf`, `builtins.print = f`, also through
    `setattr`, `vars(sys)[...]` or `__dict__`.  In Jupyter the catcher holds the output; here it holds
    nothing.  What it is handed (names; a class with a `write` method; the globals such a function
    or class sets) holds the command's value, as do reads of caught text after the command
    (`getvalue()`, `read()`, `tell()`, `sys.stdout` itself but to write or flush it).  None where the
    notebook catches no output."""
    modules = {name for _, s in statements if isinstance(s, (ast.Import, ast.ImportFrom)) for name in _bound(s)}
    catchers = _catcher_names(statements)
    harmless = _stream_uses(statements)
    captures = {"capture"} | {alias for alias, magic in _cell_magic_aliases(statements).items() if magic == "capture"}
    names: set[str] = set()
    catches = False
    for cell in cells:
        magic = cell_magic(cell.source or "")
        if magic is not None and magic[0] in captures:
            catches = True
            names |= set([w for w in magic[1].split() if not w.startswith("-") and w.isidentifier()][:1])  # `%%capture --no-stderr c`
    for _, statement in statements:
        for node in ast.walk(statement):
            handed: list[ast.expr] = []
            if isinstance(node, ast.Call) and _called(node) in catchers:
                catches = True  # `capture_output()` is handed nothing: what it returns holds the output
                handed = [*node.args, *(k.value for k in node.keywords)]
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                for item in node.items:
                    if isinstance(item.context_expr, ast.Call) and _called(item.context_expr) in catchers and item.optional_vars:
                        names |= _bound(item.optional_vars)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                handed = [value for target, value in _pairs(targets, node.value) if _stream_target(target)]
            elif isinstance(node, ast.Call) and _called(node) in ("setattr", "__setattr__") and len(node.args) >= 2 and (
                    _constant(node.args[-2]) is None or _constant(node.args[-2]) in STREAMS):
                handed = [node.args[-1]]  # setattr(sys, "stdout", buf), sys.__setattr__("stdout", buf), or a name made at run time
            elif isinstance(node, ast.Call) and _called(node) == "update" and isinstance(node.func, ast.Attribute) and _namespace_of(node.func.value):
                handed = [*node.args, *(k.value for k in node.keywords)]  # vars(sys).update(stdout=buf)
            elif isinstance(node, ast.ClassDef) and any(isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef)) and b.name in WRITERS for b in node.body):
                names.add(node.name)  # a writer: whatever it sets when handed output (red team 30's class with `write`)
            if isinstance(node, (ast.For, ast.AsyncFor)) and _mentions_stream(node.target, harmless):
                handed.append(node.iter)  # `for sys.stdout in [buf]:` (red team 33)
            elif isinstance(node, ast.stmt) and not isinstance(node, COMPOUND) and _mentions_stream(node, harmless):
                handed.append(node)  # any other statement that does more with a stream than write to it
            if handed:
                catches = True
                names |= {n for value in handed for n in _loads(value)}
    if not catches:
        return None
    names -= modules | BUILTIN_NAMES
    definitions = {s.name: s for _, s in statements if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    names |= {g for name in names & set(definitions) for n in ast.walk(definitions[name]) if isinstance(n, ast.Global) for g in n.names}
    reads = {id(node) for position, (_, statement) in enumerate(statements) for node, nested in _scoped(statement)
             if _reads_caught(node, harmless) and command.follows(position, nested)}
    return Source(command.cell, command.line, command.text[:200], None, names, file_reads=reads, output=True)


COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, getattr(ast, "TryStar", ast.Try),
            ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, getattr(ast, "Match", ast.If))
BUILTIN_NAMES = frozenset(dir(builtins))


def _mentions_stream(node: ast.AST, harmless: set[int]) -> bool:
    """A stream named (`sys.stdout`, `"stderr"`, `builtins.print`) other than to write to it: a
    statement that may swap it or attach something to it (`sys.stdout.echo = buf`,
    `functools.partial(setattr, sys, "stdout")(buf)`: red team 33)."""
    return any(isinstance(n, ast.Attribute) and n.attr in STREAMS and id(n) not in harmless and not (n.attr == "print" and isinstance(n.ctx, ast.Load))
               or _constant(n) in STREAMS for n in ast.walk(node))


def _catcher_names(statements: list[tuple[int, ast.stmt]]) -> set[str]:
    """CATCHERS and the names bound to one (`from contextlib import redirect_stdout as grab`, `grab =
    contextlib.redirect_stdout`, `grab = getattr(contextlib, "redirect_stdout")`: red team 32)."""
    names = set(CATCHERS)
    changed = True
    while changed:
        changed = False
        for _, statement in statements:
            for node in ast.walk(statement):
                bound: set[str] = set()
                if isinstance(node, ast.ImportFrom):
                    bound = {a.asname for a in node.names if a.asname and a.name in names}
                elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None and any(
                        isinstance(n, ast.Name) and n.id in names or isinstance(n, ast.Attribute) and n.attr in names
                        or _constant(n) in names for n in ast.walk(node.value)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    bound = {name for t in targets for name in _bound(t)}
                if not bound <= names:
                    names |= bound
                    changed = True
    return names


def _cell_magic_aliases(statements: list[tuple[int, ast.stmt]]) -> dict[str, str]:
    """`%alias_magic [-c] new old`: the cell magics the notebook names anew, with what each runs."""
    found: dict[str, str] = {}
    for text in alias_magic_lines(statements):
        words = [w.lstrip("%") for w in (text or "").split() if not w.startswith("-")]
        if len(words) >= 2 and "-l" not in (text or "").split() and "--line" not in (text or "").split():
            found[words[0]] = words[1]
    return found


def _stream_target(target: ast.expr) -> bool:
    """`sys.stdout = ...`, `vars(sys)["stdout"] = ...`, `sys.__dict__[name] = ...` (a key made at run time)."""
    if isinstance(target, ast.Attribute):
        return target.attr in STREAMS
    if isinstance(target, ast.Subscript):
        key = _constant(target.slice)
        return key in STREAMS or key is None and _namespace_of(target.value)
    return False


def _namespace_of(node: ast.expr) -> bool:
    """`vars(x)`, `x.__dict__`: an object's attributes as a dict."""
    return (isinstance(node, ast.Call) and _called(node) == "vars") or (isinstance(node, ast.Attribute) and node.attr == "__dict__")


def _stream_uses(statements: list[tuple[int, ast.stmt]]) -> set[int]:
    """The stream reads that only write to it (`sys.stdout.write(s)`, `print(x, file=sys.stderr)`)."""
    out: set[int] = set()
    for _, statement in statements:
        for node in ast.walk(statement):
            if isinstance(node, ast.Attribute) and node.attr in STREAM_USES and isinstance(node.value, ast.Attribute):
                out.add(id(node.value))
            elif isinstance(node, ast.keyword) and node.arg == "file" and isinstance(node.value, ast.Attribute):
                out.add(id(node.value))
    return out


def _reads_caught(node: ast.AST, harmless: set[int]) -> bool:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CAUGHT_READS:
        return True
    return isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and node.attr in STREAMS - {"print"} and id(node) not in harmless


def _pairs(targets: list[ast.expr], value: ast.expr) -> list[tuple[ast.expr, ast.expr]]:
    """Each assigned target with the value it gets (`a, sys.stdout = x, buf` pairs sys.stdout with buf)."""
    out: list[tuple[ast.expr, ast.expr]] = []
    for target in targets:
        if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) and len(target.elts) == len(value.elts):
            for t, v in zip(target.elts, value.elts, strict=True):
                out += _pairs([t], v)
        else:
            out.append((target, value))
    return out
