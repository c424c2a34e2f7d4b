"""What a skipped line produces or changes, for grader/skipped_values.py: its value (`x = !cmd`,
`_exit_code`), the files it may write, the output it prints where the notebook catches it
(grader/skipped_output.py), the exception it may raise in Jupyter, the modules a removed
grader call loads: each a `Source` with where it may be read.  Nothing here runs student code."""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
import sys
from dataclasses import dataclass

from grader.skipped_cells import (
    ALIASES,
    DISPLAYED,
    FILE_READS,
    IMPORT_ERRORS,
    SHELL_CELL_MAGICS,
    SHELL_LINE_MAGICS,
    SHELL_METHODS,
    VALUE_ALIASES,
    Source,
    _base_name,
    _bound,
    _called,
    _constant,
    _is_ipython_call,
    _is_method_call,
    _out_names,
    _runs_shell,
    _scoped,
    _value_source,
    line_text,
)
from grader.skipped_output import _output_catcher
from grader.submission import Cell


def _sources(cells: list[Cell], statements: list[tuple[int, ast.stmt]]) -> list[Source]:
    lines = {cell.index: (cell.source or "").split("\n") for cell in cells}
    found: list[Source] = []
    shell: tuple[int, int] | None = None
    aliases = _aliases(statements)
    for index, statement in statements:
        called = {id(n.func) for n in ast.walk(statement) if isinstance(n, ast.Call)}
        for node in ast.walk(statement):
            outs, line = _out_names(node) | _sc_names(node), getattr(node, "lineno", 1)
            text = line_text(lines, index, node)
            if _value_source(node) or _value_method(node, called):
                # A displayed value (`!!cmd` alone on a cell's last line) is kept as `_` and in Out.
                # Also where it is part of what is shown (`len(get_ipython().getoutput('ls'))`: red team 36).
                shown = DISPLAYED if isinstance(statement, ast.Expr) and any(n is node for n in ast.walk(statement.value)) else set()
                found.append(Source(index, line, text[:200], node, set(shown)))
            elif outs:
                found.append(Source(index, line, text[:200], None, outs))
            if shell is None and (_runs_shell(node) or _writes(node, aliases)):  # an alias (`%ls`) sets it too (red team 36)
                shell = (index, line)
    if shell is not None:
        found.append(Source(shell[0], shell[1], "_exit_code", None, {"_exit_code"}))
    found += _expansions(cells, statements)
    command = _first_command(cells, statements)
    if command is not None:
        found.append(_writer(statements, command))
        catcher = _output_catcher(cells, statements, command)
        if catcher is not None:
            found.append(catcher)
    raisers = _raisers(cells, statements)
    if raisers is not None:
        found.append(raisers)
    kernel = _kernel_state(cells, statements, command)
    if kernel is not None:
        found.append(kernel)
    loader = _first_grader_line(cells, statements)
    if loader is not None:
        found.append(loader)
    return found


VALUE_METHODS = frozenset({"getoutput", "run_line_magic", "find_line_magic", "find_magic"})


def _value_method(node: ast.AST, called: set[int]) -> bool:
    """A shell method taken, not called (`go = get_ipython().getoutput`, then `go('echo ran')`: red
    team 36): what it is bound to gives a command's output."""
    return isinstance(node, ast.Attribute) and node.attr in VALUE_METHODS and isinstance(node.ctx, ast.Load) and id(node) not in called


MODULE_READS = frozenset({"find_spec", "import_module", "__import__", "iter_modules", "find_loader", "get_loader", "globals", "locals",
                          "vars", "dir"})


def _reads_modules(node: ast.AST) -> bool:
    """A read of which modules are loaded or which names are bound (`sys.modules`, `find_spec`,
    `globals()`): what a grader call taken out before grading changes in Jupyter (red team 24
    branched on `'grader' in sys.modules`)."""
    if isinstance(node, ast.Attribute) and node.attr == "modules":
        return True
    if isinstance(node, ast.Call):
        function = node.func
        name = function.id if isinstance(function, ast.Name) else function.attr if isinstance(function, ast.Attribute) else ""
        # `vars(self)`, `dir(obj)`: an object's own attributes, not the notebook's names (a correct class may show them)
        return name in MODULE_READS and not (name in OWN_NAMESPACE and node.args)
    return False


OWN_NAMESPACE = frozenset({"globals", "locals", "vars", "dir"})  # the caller's names when called with no argument


def _first_grader_line(cells: list[Cell], statements: list[tuple[int, ast.stmt]]) -> Source | None:
    """The first grader call taken out of the notebook (checkcalls), with the reads of loaded
    modules and bound names that may follow it; None where none was taken out."""
    first = next((cell for cell in cells if cell.stripped is not None), None)
    if first is None or first.stripped is None:
        return None
    ordinal = sum(1 for index, _ in statements if index < first.index)
    reads = {id(node) for position, (_, statement) in enumerate(statements) for node, nested in _scoped(statement)
             if _reads_modules(node) and (nested or position >= ordinal)}
    return Source(first.index, first.stripped[0], first.stripped[1], None, file_reads=reads, grader_line=True)


def _sc_names(node: ast.AST) -> set[str]:
    """`%sc -l x=cmd`: the name it binds to the command's output."""
    if not (_is_ipython_call(node, "run_line_magic") and len(node.args) >= 2 and _constant(node.args[0]) == "sc"):  # type: ignore[attr-defined]
        return set()
    words = [w for w in (_constant(node.args[1]) or "").split() if not w.startswith("-")]  # type: ignore[attr-defined]
    name = words[0].split("=")[0] if words and "=" in words[0] else ""
    return {name} if name.isidentifier() else set()


def _writes(node: ast.AST, aliases: set[str]) -> bool:
    """A skipped line that runs a command, which in Jupyter may write files (any command: its text is not parsed)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SHELL_METHODS:
        return True  # get_ipython().system(...), also through a name bound to the shell
    if _runs_shell(node):
        return True
    if not (_is_method_call(node, "run_line_magic") and node.args):  # type: ignore[attr-defined]
        return False
    name = _constant(node.args[0])  # type: ignore[attr-defined]
    return name is None or name in SHELL_LINE_MAGICS | aliases | VALUE_ALIASES or "*" in VALUE_ALIASES


def _aliases(statements: list[tuple[int, ast.stmt]]) -> set[str]:
    """IPython's aliases and those the notebook defines (`%alias t touch %s`): each runs a command."""
    names = set(ALIASES)
    for _, statement in statements:
        for node in ast.walk(statement):
            if _is_ipython_call(node, "run_line_magic") and len(node.args) >= 2 and _constant(node.args[0]) == "alias":  # type: ignore[attr-defined]
                words = (_constant(node.args[1]) or "").split()  # type: ignore[attr-defined]
                names |= {words[0]} if words else set()
    return names


# Modules whose calls touch the file system (any of them may fail, or answer, by what a command wrote:
# `os.rmdir`, `shutil.which`, `importlib.metadata.version`: red team 35).
FILE_SYSTEM_MODULES = frozenset({"os", "shutil", "pathlib", "glob", "importlib", "pkgutil", "site", "sysconfig", "tempfile", "fnmatch",
                                 "subprocess", "filecmp", "fileinput", "linecache", "runpy", "zipfile", "tarfile", "sqlite3", "shelve",
                                 "dbm", "mmap", "ctypes", "posix"})  # subprocess runs `test -e` (red team 36)
FILE_MAGICS = frozenset({"run", "load", "loadpy", "pycat", "pfile", "psource", "cat"})  # line magics that read a file (`%run m.py`)


NOT_FILES = frozenset({"getenv", "getpid", "getppid", "cpu_count", "sched_getaffinity", "urandom", "getcwd", "fspath", "fsencode",
                       "fsdecode", "join", "basename", "dirname", "splitext", "split", "normpath", "abspath", "expanduser", "sep",
                       "get_terminal_size", "times", "getloadavg", "strerror", "umask"})  # os calls that read no file a command writes


def _through(node: ast.AST, attribute: str) -> bool:
    """Whether an attribute chain passes through `attribute` (`os.environ.get`)."""
    while isinstance(node, ast.Attribute):
        if node.attr == attribute:
            return True
        node = node.value
    return False


def _reads_files(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and _base_name(node) in FILE_SYSTEM_MODULES and (
            node.attr not in NOT_FILES and not _through(node, "environ") and node.attr not in FILE_SYSTEM_MODULES | {"path"}):
        return True  # a function of theirs taken, to be called later (`map(os.path.exists, names)`: red team 36)
    if _is_method_call(node, "run_line_magic") and node.args and _constant(node.args[0]) in FILE_MAGICS:  # type: ignore[attr-defined]
        return True  # `%run m.py` of a script a command wrote (red team 36)
    if isinstance(node, (ast.Import, ast.ImportFrom)) and not all(_findable(name) for name in _imported_modules(node)):
        return True  # a module no one installed: a command may have written it (red team 36: `import helper`)
    if isinstance(node, ast.Call):
        function = node.func
        name = function.id if isinstance(function, ast.Name) else function.attr if isinstance(function, ast.Attribute) else ""
        return name in FILE_READS or (isinstance(function, ast.Attribute) and _base_name(function) in FILE_SYSTEM_MODULES
                                      and name not in NOT_FILES and not _through(function, "environ"))
    if isinstance(node, (ast.With, ast.AsyncWith)) and any(
            isinstance(i.context_expr, ast.Call) and _called(i.context_expr) == "suppress" for i in node.items):  # suppress(ImportError): import m
        return any(isinstance(n, (ast.Import, ast.ImportFrom)) for b in node.body for n in ast.walk(b))
    if isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))):  # `try: import marker` / `except ImportError:`
        caught = {n.id if isinstance(n, ast.Name) else n.attr for h in node.handlers if h.type is not None
                  for n in ast.walk(h.type) if isinstance(n, (ast.Name, ast.Attribute))}
        bare = any(h.type is None for h in node.handlers)
        return (bare or bool(caught & IMPORT_ERRORS)) and any(isinstance(n, (ast.Import, ast.ImportFrom)) for b in node.body for n in ast.walk(b))
    return False


@dataclass
class Command:
    """The first skipped line that runs a command (which in Jupyter may write files and prints its output)."""

    ordinal: int  # of its statement among the notebook's
    line: int
    text: str
    inside: bool  # inside a function (which may run at any later time)
    cell: int

    def follows(self, position: int, nested: bool) -> bool:
        """Whether a node (of the statement at `position`, in a function or not) may run after the command."""
        return self.inside or nested or position >= self.ordinal


def _first_command(cells: list[Cell], statements: list[tuple[int, ast.stmt]]) -> Command | None:
    aliases = _aliases(statements)
    lines = {cell.index: (cell.source or "").split("\n") for cell in cells}
    parsed = {index for index, _ in statements}
    at: Command | None = None
    for ordinal, (index, statement) in enumerate(statements):
        for node, inside in _scoped(statement):
            if _writes(node, aliases):
                line = getattr(node, "lineno", 1)
                text = line_text(lines, index, node)
                at = Command(ordinal, line, text, inside, index)
                break
        if at is not None:
            break
    for cell in cells:  # a cell IPython runs with automagic (`mkdir marker` alone): not Python, not seen above
        words = (cell.source or "").split()
        if cell.index not in parsed and words and words[0].lstrip("%") in aliases and (at is None or cell.index < at.cell):
            ordinal = sum(1 for index, _ in statements if index < cell.index)
            at = Command(ordinal, 1, (cell.source or "").strip().split("\n")[0], False, cell.index)
    return at


SKIPPED_MAGICS = frozenset({"pdb", "debug", "pastebin", "qtconsole"})  # skipped line magics that are not commands
# Skipped line magics that raise in Jupyter where they cannot work (red team 36: `%pastebin -z 1` a
# UsageError, `%conda` outside conda a ValueError, `%debug` asks for input a kernel refuses).
RAISING_MAGICS = frozenset({"pastebin", "conda", "mamba", "micromamba", "debug", "qtconsole"})
RUNS_A_LINE = frozenset({"run_line_magic", "run_cell_magic", "system", "system_piped", "system_raw", "getoutput", "magic"})


def _kernel_state(cells: list[Cell], statements: list[tuple[int, ast.stmt]], command: Command | None) -> Source | None:
    """The kernel's own state, which a skipped line changes in Jupyter only (red team 33: `%pdb on`
    sets `get_ipython().call_pdb`; `%%script --bg` lists its process in the magics' registry):
    every use of the shell after the first skipped line, but running a magic or a command as
    IPython writes it (`get_ipython().run_line_magic(...)`), is a read of it, however the shell is
    reached or named (red team 34: `getattr(get_ipython(), 'call_pdb')`, a loop over
    `[get_ipython()]`, a default argument, `sys.displayhook.shell`).  A call of something taken
    from the shell (`ip.magics_manager.magics['line']['sx'](...)`) may itself be a skipped
    line, so it counts as one."""
    uses = _shell_uses(statements)
    lines = {cell.index: (cell.source or "").split("\n") for cell in cells}
    first = command
    for ordinal, (index, statement) in enumerate(statements):
        if first is not None and ordinal >= first.ordinal:
            break
        for node, inside in _scoped(statement):
            magic = _constant(node.args[0]) if _is_method_call(node, "run_line_magic") and node.args else ""  # type: ignore[attr-defined]
            if magic in SKIPPED_MAGICS or magic is None or isinstance(node, ast.Call) and (
                    _called(node) in ("breakpoint", "set_trace") or any(id(n) in uses for n in ast.walk(node.func))):
                line = getattr(node, "lineno", 1)
                text = line_text(lines, index, node)
                first = Command(ordinal, line, text, inside, index)
                break
    if first is None:
        return None
    reads = {id(node) for position, (_, statement) in enumerate(statements) for node, nested in _scoped(statement)
             if id(node) in uses and first.follows(position, nested)}
    return Source(first.cell, first.line, first.text[:200], None, _shell_holders(statements, uses), file_reads=reads, kernel=True)


def _shell_holders(statements: list[tuple[int, ast.stmt]], uses: set[int]) -> set[str]:
    """The names that hold the shell, bound before or after the skipped line (its state is read
    through them later): `ip = get_ipython()`, `for ip in [get_ipython()]`, `with ... as ip`, a
    function with `ip=get_ipython()` as a default (red team 34)."""
    def uses_shell(node: ast.AST | None) -> bool:
        return node is not None and any(id(n) in uses for n in ast.walk(node))

    names: set[str] = set()
    for _, statement in statements:
        for node in ast.walk(statement):
            if isinstance(node, (ast.For, ast.AsyncFor)) and uses_shell(node.iter):
                names |= _bound(node.target)
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                names |= {n for item in node.items if uses_shell(item.context_expr) and item.optional_vars for n in _bound(item.optional_vars)}
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                if any(uses_shell(d) for d in [*node.args.defaults, *node.args.kw_defaults, *getattr(node, "decorator_list", [])]):
                    names |= {node.name} if not isinstance(node, ast.Lambda) else set()
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and uses_shell(node.value):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names |= {n for t in targets for n in _bound(t)}
    return names


def _shell_uses(statements: list[tuple[int, ast.stmt]]) -> set[int]:
    """The nodes that reach the shell other than to run a magic or a command the way IPython's
    transformer writes them: `get_ipython()` used otherwise, `get_ipython` itself passed on, a
    `.shell` attribute (the display hook's, a magic's)."""
    running = {id(node.func.value) for _, statement in statements for node in ast.walk(statement)
               if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in RUNS_A_LINE and _is_shell(node.func.value)}
    callees = {id(node.func) for _, statement in statements for node in ast.walk(statement) if isinstance(node, ast.Call)}
    uses: set[int] = set()
    for _, statement in statements:
        for node in ast.walk(statement):
            if _is_shell(node) and id(node) not in running:
                uses.add(id(node))
            elif (isinstance(node, ast.Name) and node.id == "get_ipython" or isinstance(node, ast.Attribute) and node.attr == "get_ipython") and (
                    isinstance(node.ctx, ast.Load) and id(node) not in callees):
                uses.add(id(node))  # `f = get_ipython`
            elif isinstance(node, ast.Attribute) and node.attr == "shell" and isinstance(node.ctx, ast.Load):
                uses.add(id(node))
    return uses


def _is_shell(node: ast.AST) -> bool:
    """`get_ipython()` (also `IPython.get_ipython()`), `InteractiveShell.instance()`, the singleton's
    `InteractiveShell._instance` (red team 35): the notebook's shell."""
    if isinstance(node, ast.Attribute) and node.attr == "_instance" and isinstance(node.ctx, ast.Load):
        return True
    if not isinstance(node, ast.Call):
        return False
    if _called(node) == "get_ipython":
        return True
    owner = node.func.value if isinstance(node.func, ast.Attribute) else None
    name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
    return _called(node) == "instance" and name.endswith("Shell")


def _raisers(cells: list[Cell], statements: list[tuple[int, ast.stmt]]) -> Source | None:
    """The skipped lines that may raise in Jupyter and never do here: a shell cell magic run as a
    call (`%%bash` raises on a failed command), and every command once the notebook sets
    `system_raise_on_error` (red team 32: `try: !nvidia-smi` / `except: no_gpu = True`).  A `try`
    around one, and the rest of a cell after one, depend on whether it raised."""
    aliases = _aliases(statements)
    lines = {cell.index: (cell.source or "").split("\n") for cell in cells}
    # Set in the source, or by a `%config` line IPython expands (`system_raise_{'on'}_error`: red team 39).
    raising = any("raise_on_error" in (cell.source or "") for cell in cells) or any(
        _is_method_call(node, "run_line_magic") and node.args and _constant(node.args[0]) == "config"  # type: ignore[attr-defined]
        and any(c in (_constant(node.args[1]) or "{") for c in "{$") for _, statement in statements for node in ast.walk(statement))
    found = [(index, node) for index, statement in statements for node in ast.walk(statement)
             if _is_method_call(node, "run_cell_magic") and node.args and _constant(node.args[0]) in SHELL_CELL_MAGICS  # type: ignore[attr-defined]
             or _is_method_call(node, "run_line_magic") and node.args and _constant(node.args[0]) in RAISING_MAGICS  # type: ignore[attr-defined]
             or raising and _writes(node, aliases)]
    if not found:
        return None
    index, first = found[0]
    line = getattr(first, "lineno", 1)
    text = line_text(lines, index, first)
    return Source(index, line, text[:200], None, file_reads={id(n) for _, n in found}, raises=True)


def _reads_threads(node: ast.AST) -> bool:
    """`threading.active_count()`, `threading.enumerate()`: a shell cell magic starts a thread of
    IPython's in Jupyter (red team 34)."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
        _base_name(node.func) == "threading" or node.func.attr in ("_current_frames", "active_count"))  # sys._current_frames() too


def _writer(statements: list[tuple[int, ast.stmt]], command: Command) -> Source:
    """The first command, with the reads of the file system that may come after it, and of the
    modules loaded (running a command imports what IPython runs it with: red team 32 read
    `'pexpect' in sys.modules`)."""
    reads = {id(node) for position, (_, statement) in enumerate(statements) for node, nested in _scoped(statement)
             if (_reads_files(node) or _reads_modules(node) or _reads_threads(node)) and command.follows(position, nested)}
    return Source(command.cell, command.line, command.text[:200], None, file_reads=reads)


def _imported_modules(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.ImportFrom):
        return [node.module.split(".")[0]] if node.module and not node.level else []
    return [alias.name.split(".")[0] for alias in node.names]


@functools.cache
def _findable(name: str) -> bool:
    """Whether a top-level module is there without any command (the standard library, or installed)."""
    if name in sys.stdlib_module_names or name in sys.builtin_module_names:
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


EXPANDED = re.compile(r"(?<!\{)\{([^{}]+)\}(?!\})")


def _expansions(cells: list[Cell], statements: list[tuple[int, ast.stmt]]) -> list[Source]:
    """A skipped line's `{expression}`: IPython evaluates it in the notebook's namespace when it runs
    the line, in Jupyter only (red team 39: `!echo {CFG.update(bug=True)}`).  What the expression
    names may be changed there: each is a name the line may set."""
    lines = {cell.index: (cell.source or "").split("\n") for cell in cells}
    found: list[Source] = []
    for index, statement in statements:
        for node in ast.walk(statement):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SHELL_METHODS | {
                    "run_line_magic", "run_cell_magic"}):
                continue
            texts = [t for t in (_constant(a) for a in node.args[:2]) if isinstance(t, str)]
            names: set[str] = set()
            for text in texts:
                for expression in EXPANDED.findall(text):
                    try:
                        parsed = ast.parse(expression.strip(), mode="eval")
                    except (SyntaxError, ValueError, RecursionError, MemoryError):
                        continue
                    if not isinstance(parsed.body, ast.Name):  # `{pkg}` only shows a value
                        names |= {n.id for n in ast.walk(parsed) if isinstance(n, ast.Name)}
            if names:
                found.append(Source(index, getattr(node, "lineno", 1), line_text(lines, index, node)[:200], None, names))
    return found
