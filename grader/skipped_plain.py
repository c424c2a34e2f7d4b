"""Whether the definitions a TODO is graded on can be vouched for, in a notebook with lines that
do not run while grading: the reverse of grader/skipped_values.py's reading, which looks for the
ways a skipped line's value, files, output or state may be read (an enumeration that every red
team widened).  Here the burden is the notebook's: the contract's names, and every top-level
statement that mentions one of them or a name such a statement reads (a fixpoint), may use only
what is known to be inert: constants, the notebook's own names, the standard numeric modules
(torch, math, numpy, ...) less their file and system parts, and a list of builtins.  Nothing of
the shell (`get_ipython`, `_`, `Out`, `_exit_code`), of the files (`open`, `os`, `subprocess`),
of the namespace (`globals`, `exec`) or of the process (`sys`, frames, dunders) can reach them,
so no skipped line can change what they are or do.  A statement that is not plain costs its
TODO, with a message saying which one; a notebook without skipped lines is not read here.
Nothing here runs student code.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

from grader.plain_code import ALLOWED_BUILTINS, RUNNING_MAGICS, _base, _Checker, _targets, module_names

# Line magics that do not run while grading (grader/sandbox/shell.py), and those that may bind any name.
SKIPPED_MAGICS = frozenset({"sx", "system", "sc", "pip", "conda", "mamba", "micromamba", "uv", "debug", "pdb", "pastebin", "qtconsole"})
NAMESPACE_MAGICS = frozenset({"run", "store", "macro", "rerun", "recall", "load", "loadpy", "edit", "reset", "reset_selective",
                              "xdel", "load_ext", "reload_ext", "aimport"})
# Skipped lines that never raise in Jupyter: before a plain statement of the same cell, they cannot stop it.
QUIET_METHODS = frozenset({"system", "getoutput"})
QUIET_MAGICS = frozenset({"pip", "uv", "sx", "system"})
IPYTHON_LINE = re.compile(r"^\s*([%!]|[A-Za-z_][\w, ]*=\s*[%!])")  # a magic, a shell line, or a name bound to one


@dataclass
class Unvouched:
    """The first statement a TODO's definitions depend on that is not plain, and why."""

    cell: int
    line: int
    text: str
    why: str  # what in it is not plain (a name, an attribute, a call)


def unvouched(statements: list[tuple[int, ast.stmt]], lines: dict[int, list[str]], todos: dict[str, tuple[str, ...]],
              may_stop: Callable[[int], bool], first_skipped: tuple[int, int] | None = None) -> dict[str, Unvouched]:
    """For each TODO whose definitions cannot be vouched for, the statement that stops it.
    `may_stop(position)`: whether a statement may raise here and not in Jupyter, or the other way
    round (skipped_values' reading of the skipped lines' values): one that comes before a
    relevant statement in its cell and may stop it there costs that statement's TODO too.
    `first_skipped`: (cell, line) of the notebook's first skipped line: a statement before it may
    read files at top level (no skipped line has written one yet)."""
    notebook = _Notebook(statements, may_stop, first_skipped)
    statements = notebook.statements
    magic_words, anything = _magic_words(statements)
    for cell_lines in lines.values():  # a cell magic's own line (`%%capture c`) is no call in the Python view
        magic_words |= {w for line in cell_lines if IPYTHON_LINE.match(line) for w in re.findall(r"[A-Za-z_]\w*", line)}
    out: dict[str, Unvouched] = {}
    for todo, contract in todos.items():
        found = (anything, "a line that may bind any name") if anything is not None else notebook.first_unplain(contract, magic_words)
        if found is not None:
            position, why = found
            index, statement = statements[position]
            line = getattr(statement, "lineno", 1)
            text = lines.get(index, [""])[line - 1].strip() if 0 < line <= len(lines.get(index, [])) else ""
            out[todo] = Unvouched(index, line, text[:200], why)
    return out


class _Notebook:
    """The statements, what each binds, mentions and changes of a module's state, and the verdicts
    on them (shared by the TODOs)."""

    def __init__(self, statements: list[tuple[int, ast.stmt]], may_stop: Callable[[int], bool],
                 first_skipped: tuple[int, int] | None) -> None:
        # `import io, sys` as two statements: each binds a name of its own, and only the one a
        # definition reads is checked (io may stay unread).
        self.statements: list[tuple[int, ast.stmt]] = []
        self.origin: list[int] = []
        for position, (index, statement) in enumerate(statements):
            parts = [ast.copy_location(ast.Import(names=[alias]), statement) for alias in statement.names] if (
                isinstance(statement, ast.Import) and len(statement.names) > 1) else [statement]
            self.statements += [(index, part) for part in parts]
            self.origin += [position] * len(parts)
        self.may_stop, self.first_skipped = may_stop, first_skipped
        # `system_raise_on_error` (set however): a command raises in Jupyter when it fails, never here.
        self.raising = any("raise_on_error" in ast.unparse(statement) for _, statement in statements)
        self.modules = module_names(self.statements)
        self.bound = [_bound_names(statement) for _, statement in self.statements]
        self.mentioned = [_mentions(statement) for _, statement in self.statements]
        self.changes_modules = [_module_changes(statement) for _, statement in self.statements]
        self.dynamic = {position for position, (_, statement) in enumerate(self.statements) if _dynamic(statement)}
        self.binders: dict[str, list[int]] = {}
        for position, names in enumerate(self.bound):
            for name in names:
                self.binders.setdefault(name, []).append(position)
        self.imported = {name for (_, statement), names in zip(self.statements, self.bound, strict=True)
                         if isinstance(statement, (ast.Import, ast.ImportFrom)) for name in names}
        self.verdicts: dict[int, tuple[bool, set[str], str]] = {}

    def verdict(self, position: int) -> tuple[bool, set[str], str]:
        if position not in self.verdicts:
            index, statement = self.statements[position]
            early = self.first_skipped is None or (index, getattr(statement, "lineno", 1)) < self.first_skipped
            checker = _Checker(self.modules, early)
            checker.visit(self.statements[position][1])
            self.verdicts[position] = (checker.why == "", checker.globals_read, checker.why)
        return self.verdicts[position]

    def stops(self, position: int) -> str:
        """Why a statement before a relevant one in its cell may stop it here and not in Jupyter ("": it may not)."""
        statement = self.statements[position][1]
        if (_quiet_skipped(statement) and not self.raising) or _takes_the_shell(statement):
            return ""
        plain, _, why = self.verdict(position)
        return "" if plain or not self.may_stop(self.origin[position]) else why

    def first_unplain(self, contract: tuple[str, ...], magic_words: set[str]) -> tuple[int, str] | None:
        """The closure's first statement (in notebook order) that is not plain, with what in it is not."""
        closure = set(contract)
        relevant: set[int] = set()
        changed = True
        while changed:
            changed = False
            # A module's name joins a statement to the closure where it changes the module (a store into
            # it, `torch.set_default_dtype`); any other name where it is mentioned.  Builtins join nothing.
            tracked = {name for name in closure if name in self.binders and name not in self.imported} | set(contract)
            for position in range(len(self.statements)):
                if position in relevant:
                    continue
                if (self.bound[position] & closure or self.mentioned[position] & tracked or self.changes_modules[position] & closure
                        or position in self.dynamic):
                    relevant.add(position)
                    closure |= self.verdict(position)[1]
                    changed = True
        bad = sorted(p for p in relevant if not self.verdict(p)[0])
        if bad:
            return bad[0], self.verdict(bad[0])[2]
        for position in sorted(relevant):
            cell = self.statements[position][0]
            for earlier in range(position):
                if self.statements[earlier][0] == cell and earlier not in relevant:
                    why = self.stops(earlier)
                    if why:
                        return earlier, why
        unbound = sorted(name for name in closure - set(self.binders) if name in magic_words and name not in ALLOWED_BUILTINS)
        if unbound:  # read, and bound by no statement but maybe by a magic's line (`%%capture c`, `%%bash --out x`)
            return min(relevant, default=0), unbound[0]
        return None


def _takes_the_shell(statement: ast.stmt) -> bool:
    """`ip = get_ipython()`: raises nowhere (what is done with it is read where it is used)."""
    return (isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Call) and isinstance(statement.value.func, ast.Name)
            and statement.value.func.id == "get_ipython" and not statement.value.args)


def _quiet_skipped(statement: ast.stmt) -> bool:
    """A skipped line that never raises in Jupyter (`!cmd`, `x = !cmd`, `%pip install`)."""
    if not isinstance(statement, (ast.Expr, ast.Assign)) or not isinstance(statement.value, ast.Call):
        return False
    call = statement.value
    if not (isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Call)
            and isinstance(call.func.value.func, ast.Name) and call.func.value.func.id == "get_ipython"):
        return False
    if call.func.attr in QUIET_METHODS:
        return True
    first = call.args[0] if call.args else None
    name = first.value if isinstance(first, ast.Constant) else None
    return call.func.attr in ("run_line_magic", "run_cell_magic") and (name in QUIET_MAGICS or name in RUNNING_MAGICS or name == "capture")


def _bound_names(statement: ast.stmt) -> set[str]:
    """What a top-level statement binds in the notebook's namespace, functions' `global` names
    included; an import also binds its module's own name (skipped_cells reads `np.x` as `numpy.x`),
    and a store into the namespace under a constant key (`ip.user_ns['k'] = v`) binds that key."""
    names = _targets(statement)
    for node in ast.walk(statement):
        if isinstance(node, ast.Global):
            names |= set(node.names)
        elif isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
            names |= {a.name for a in node.names if a.name != "*"}  # `InteractiveShell as S` is read as InteractiveShell
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) and _namespace(node.value):
            key = node.slice
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                names.add(key.value)
    return names


def _namespace(node: ast.expr) -> bool:
    """`globals()`, `vars()`, `x.user_ns`, `x.__dict__`: the notebook's names (or an object's) as a dict."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("globals", "vars", "locals")
            or isinstance(node, ast.Attribute) and node.attr in ("user_ns", "user_global_ns", "__dict__"))


def _mentions(statement: ast.stmt) -> set[str]:
    """Every name a top-level statement mentions, nested functions included."""
    return {n.id for n in ast.walk(statement) if isinstance(n, ast.Name)}


def _magic_words(statements: list[tuple[int, ast.stmt]]) -> tuple[set[str], int | None]:
    """The words of every IPython line (a name `%%capture c` or `%%bash --out x` binds is one), and the
    first line that may bind any name (`%run`, `%store -r`, `%load_ext`: the notebook's names are its)."""
    words: set[str] = set()
    anything: int | None = None
    for position, (_, statement) in enumerate(statements):
        for node in ast.walk(statement):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                    "run_line_magic", "run_cell_magic", "system", "getoutput", "magic"):
                texts = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                words |= {w for t in texts[:2] for w in re.findall(r"[A-Za-z_]\w*", t)}
                name = texts[0] if texts and node.func.attr != "system" else ""
                if (name in NAMESPACE_MAGICS and not (name == "load_ext" and texts[1:2] == ["autoreload"])) and anything is None:
                    anything = position
    return words, anything


def _dynamic(statement: ast.stmt) -> bool:
    """A statement that may bind names no reading of it can name: exec, eval, the namespace itself
    (`globals()`, `vars()`), a namespace written under a key made at run time (`x.user_ns[k] = v`,
    `sys.modules[k] = m`, `vars(m).update(...)`), setattr or delattr with a name made at run time.
    A constant key is a name like any other (_bound_names); reading a namespace binds nothing."""
    for node in ast.walk(statement):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            name, arguments = node.func.id, node.args
            if name in ("exec", "eval", "compile", "__import__", "globals", "locals") or name == "vars" and not arguments:
                return True
            if name in ("setattr", "delattr") and (len(arguments) < 2 or not isinstance(arguments[1], ast.Constant)):
                return True
        if isinstance(node, (ast.Subscript,)) and isinstance(node.ctx, (ast.Store, ast.Del)) and _namespace_like(node.value) and not (
                isinstance(node.slice, ast.Constant)):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                "update", "setdefault", "__setitem__", "pop", "popitem", "clear", "__delitem__") and _namespace_like(node.func.value):
            return True
    return False


def _namespace_like(node: ast.expr) -> bool:
    return _namespace(node) or isinstance(node, ast.Attribute) and node.attr == "modules"


SETTERS = ("set", "use_", "manual_seed", "seed", "filterwarnings", "simplefilter", "seterr", "enable", "disable", "register")


def _module_changes(statement: ast.stmt) -> set[str]:
    """Names a statement changes a module's state through: a store into an attribute chain
    (`torch.backends.cuda.matmul.allow_tf32 = True`), or a call of a setter (`torch.set_default_dtype`)."""
    names: set[str] = set()
    for node in ast.walk(statement):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)) and not (
                node.attr in ("stdout", "stderr") and _base(node) == "sys"):  # where printed output goes, not what is computed
            names.add(_base(node))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr.startswith(SETTERS):
            names.add(_base(node.func))
    return names - {""}


def first_skipped_line(statements: list[tuple[int, ast.stmt]]) -> tuple[int, int] | None:
    """(cell, line) of the first IPython line that may not run while grading as in Jupyter: a
    command, a magic that is not one of those known to run alike (an alias of `%sx` is one), a
    shell method of the shell's.  None: the notebook has none, and nothing here is read."""
    for index, statement in statements:
        for node in ast.walk(statement):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            owner = node.func.value
            if not (isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "get_ipython"):
                continue
            if node.func.attr in ("run_line_magic", "run_cell_magic") and not _skipped_magic(node):
                continue
            return index, getattr(node, "lineno", 1)
    return None


SHELL_CELL_MAGICS = frozenset({"bash", "sh", "script", "perl", "ruby", "python", "python2", "python3", "pypy", "sx", "system", "!", "debug"})


def _skipped_magic(node: ast.Call) -> bool:
    """A magic that does not run while grading (grader/sandbox/shell.py), an alias of IPython's (a
    command), or one IPython does not define (the notebook's own alias of one): as the name says."""
    name = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None
    if not isinstance(name, str):
        return True
    line, cell, aliases = _ipython_magics()
    if node.func.attr == "run_cell_magic":  # type: ignore[attr-defined]
        return name in SHELL_CELL_MAGICS or name not in cell
    return name in SKIPPED_MAGICS or name in aliases or name not in line


@functools.cache
def _ipython_magics() -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """IPython's own line and cell magics, and its default aliases (each a command)."""
    try:
        from IPython.core.alias import default_aliases
        from IPython.core.magics import BUILTIN_LAZY_MAGICS
    except ImportError:
        return frozenset(), frozenset(), frozenset()
    return (frozenset(BUILTIN_LAZY_MAGICS.get("line", {})), frozenset(BUILTIN_LAZY_MAGICS.get("cell", {})),
            frozenset(alias[0] for alias in default_aliases()))
