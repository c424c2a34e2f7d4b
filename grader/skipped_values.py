"""What Jupyter runs is what is graded: the value of a line that does not run while grading.

Shell lines do not run while grading (grader/sandbox/shell.py): `x = !cmd` gives `[]` here and
the command's output in Jupyter; `%sx`, `getoutput`, `!!`, `%%bash --out x` likewise, and
`_exit_code` is 0 here whatever the command would have returned.  A notebook that only shows
such a value is graded as Jupyter runs it; one whose definitions depend on it may take a path
here that Jupyter does not take (the red team's notebook was all stubs in Jupyter, whose
`if not x:` found a solution only while graded).

This runs in the judge, on the cells as IPython compiles them (`Cell.python`), so nothing the
submission runs can change it.  It follows, over the whole notebook, which names may hold
such a value (assigned from one, from an expression that reads one, bound in a loop over one
or under a test that reads one, in a `try` whose body reads one, an object a call handed one
to, a later statement of a cell a statement reading one may stop) and which definitions read
them (a function or class whose body reads one, a name bound from one).  It is an
over-approximation by design: a value that could reach a definition counts as reaching it.

A skipped command's printed output counts as its value where the notebook catches output
(`%%capture c`, `redirect_stdout(buf)`, `sys.stdout = buf`: red team 30); see _output_catcher.

A skipped command's effect on the files counts as a value it produced: `!touch marker` makes
a file in Jupyter and none here, so `os.path.exists('marker')` is such a value too (red team
10).  Any skipped command may write (installs too; its text is not parsed); every read of the
file system (`open`, `os.path.exists`, `Path(...).read_text()`, `listdir`, `glob`, `stat`,
`find_spec`, an `import` under `except ImportError`, ...) after the first such line, or in a
function that may run after it, is read as that line's value.  Only the definitions that may
depend on it are reported: a notebook that installs a package and reads its data files into
what it only shows is graded as usual, without a note.
What it reports:

- every skipped line whose value is read, with where it is read (a note);
- the TODOs whose definitions (the contract's names, and what they read, transitively) may
  depend on one: their items get no points (`apply`), since no grading can say what Jupyter
  would have computed.
"""

from __future__ import annotations
import __future__

import ast
import re
from dataclasses import dataclass, field

from grader.cells import cell_magic, parse_cell, python_view
from grader.results import FAILED, PASSED, Failure, ItemResult, Text
from grader.submission import Cell

VALUE_MAGICS = frozenset({"sx", "system"})  # line magics whose value is a command's output
SHELL_CELL_MAGICS = frozenset({"bash", "sh", "script", "perl", "ruby", "python", "python2", "python3", "pypy", "sx", "system", "!"})
DISPLAYED = frozenset({"_", "__", "___", "Out", "_oh"})  # what a displayed value is kept as
DISPLAY_NUMBER = re.compile(r"_\d+")  # and as `_N`, N the cell's execution count
# Ways to the notebook's namespace or its output history (red teams 14 and 32): a name a skipped line binds
# (`_`, `_exit_code`, `--out x`) is read through any of them.
NAMESPACE_ATTRIBUTES = frozenset({"user_ns", "user_global_ns", "output_hist", "displayhook", "_oh", "__main__", "ns_table",
                                  "user_module", "all_ns_refs", "user_ns_hidden", "f_globals", "f_locals", "__globals__",
                                  "history_manager"})
SHOWN_ONLY = frozenset({"print", "display", "pprint", "repr", "str", "len", "type", "format", "sorted", "list", "tuple", "bool", "int"})
EVERYTHING = frozenset({"exec", "eval", "compile", "__import__", "runpy"})  # a call of one of these with such a value may bind any name
NAMESPACES = frozenset({"globals", "locals", "vars"})  # globals()[k] = v, globals().update(...)
SHELL_LINE_MAGICS = frozenset({"sx", "system", "sc", "pip", "conda", "mamba", "micromamba", "uv"})  # skipped commands
ALIASES = frozenset({"cat", "cp", "ldir", "lf", "lk", "ll", "ls", "lx", "man", "mkdir", "mv", "rm", "rmdir"})  # IPython's, run as shell
SHELL_METHODS = frozenset({"system", "system_raw", "system_piped", "getoutput"})  # get_ipython()'s, however it is reached
# Calls that read the file system (by the called name's last part: os.path.exists, Path(p).exists, exists).
FILE_READS = frozenset({
    "open", "exists", "lexists", "isfile", "isdir", "islink", "ismount", "listdir", "scandir", "walk", "glob", "iglob", "rglob",
    "stat", "lstat", "access", "getsize", "getmtime", "getatime", "getctime", "samefile", "realpath", "readlink", "read_text",
    "read_bytes", "is_file", "is_dir", "is_symlink", "iterdir", "load", "loadtxt", "genfromtxt", "fromfile", "read_csv",
    "read_json", "read_pickle", "read_parquet", "spec_from_file_location", "find_spec", "import_module", "run_path", "getline",
    "getlines",
})
SAFE_CALLS = SHOWN_ONLY | {"exists", "lexists", "isfile", "isdir", "islink", "ismount", "is_file", "is_dir", "is_symlink", "access",
                            "Path", "join"}  # calls that do not raise on a missing file
IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})
EXITS = frozenset({"exit", "quit", "_exit", "abort"})  # sys.exit(), os._exit(): no later cell runs
CONTRACT = ("estimate_kv_cache_bytes", "Request", "KVCacheManager", "paged_attention")


@dataclass
class Source:
    """A skipped line whose value a notebook can read: where, its text, and where it is read."""

    cell: int
    line: int
    text: str
    node: ast.AST | None  # the expression whose value it is (None: a name the line binds, `--out x`, `_exit_code`)
    names: set[str] = field(default_factory=set)  # names it binds itself
    reads: list[tuple[int, int]] = field(default_factory=list)
    depends: set[str] = field(default_factory=set)  # contract names that may depend on it ("*": any)
    file_reads: set[int] | None = None  # a command's effect on the files: the reads of them (node ids) that may follow it
    grader_line: bool = False  # a grader call taken out before grading (it loads the grader in Jupyter): file_reads are module reads
    output: bool = False  # a command's printed output, which the notebook captures: names and file_reads are where it is caught
    raises: bool = False  # commands that may raise in Jupyter (file_reads: those lines), never here


@dataclass
class Finding:
    sources: list[Source]  # those whose value is read

    @property
    def depends(self) -> list[str]:
        names = set().union(*(s.depends for s in self.sources)) if self.sources else set()
        return ["*"] if "*" in names else sorted(names)


def _is_ipython_call(node: ast.AST, method: str) -> bool:
    """`get_ipython().<method>(...)`."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == method
        and isinstance(node.func.value, ast.Call)
        and isinstance(node.func.value.func, ast.Name)
        and node.func.value.func.id == "get_ipython"
    )


def _is_method_call(node: ast.AST, method: str) -> bool:
    """`<anything>.<method>(...)`: the shell reached through a name bound to it (`ip = get_ipython()`)."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == method


# Set by _analyse for the notebook at hand: line magics the notebook aliases to a value magic
# (`%alias_magic -l probe sx`: red team 24), each as good as the magic itself.
VALUE_ALIASES: set[str] = set()


def _magic_aliases(statements: list[tuple[int, ast.stmt]]) -> set[str]:
    """Names `%alias_magic` binds to a magic whose value is a command's output."""
    names: set[str] = set()
    for _, statement in statements:
        for node in ast.walk(statement):
            if _is_method_call(node, "run_line_magic") and len(node.args) >= 2 and _constant(node.args[0]) == "alias_magic":  # type: ignore[attr-defined]
                words = [w for w in (_constant(node.args[1]) or "").split() if not w.startswith("-")]  # type: ignore[attr-defined]
                if len(words) >= 2 and words[1].lstrip("%") in VALUE_MAGICS | {"sc"}:
                    names.add(words[0].lstrip("%"))
                elif len(words) >= 2 or _constant(node.args[1]) is None:
                    names.add(words[0].lstrip("%") if words else "*")  # an alias of what cannot be told: any magic
    return names


def _constant(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _value_source(node: ast.AST) -> bool:
    """An expression whose value is a command's output in Jupyter and empty while grading: also
    through a name bound to the shell, a magic named at run time, an alias of a value magic, or
    a magic looked up (`find_line_magic('sx')`) to be called later."""
    if _is_method_call(node, "getoutput"):
        return True
    if _is_method_call(node, "run_line_magic") and node.args:  # type: ignore[attr-defined]
        name = _constant(node.args[0])  # type: ignore[attr-defined]
        return name is None or name in VALUE_MAGICS or name in VALUE_ALIASES or "*" in VALUE_ALIASES
    if _is_method_call(node, "find_line_magic") or _is_method_call(node, "find_magic"):
        name = _constant(node.args[0]) if node.args else None  # type: ignore[attr-defined]
        return name is None or name in VALUE_MAGICS or name in VALUE_ALIASES
    return False


def _out_names(node: ast.AST) -> set[str]:
    """`%%bash --out x --err y --proc p`: the names a shell cell magic binds."""
    if not (_is_ipython_call(node, "run_cell_magic") and len(node.args) >= 2):  # type: ignore[attr-defined]
        return set()
    if _constant(node.args[0]) not in SHELL_CELL_MAGICS:  # type: ignore[attr-defined]
        return set()
    words = (_constant(node.args[1]) or "").split()  # type: ignore[attr-defined]
    return {words[i + 1] for i, word in enumerate(words[:-1]) if word in ("--out", "--err", "--proc") and words[i + 1].isidentifier()}


def _runs_shell(node: ast.AST) -> bool:
    return _is_ipython_call(node, "system") or (_is_ipython_call(node, "run_cell_magic") and bool(node.args)  # type: ignore[attr-defined]
                                                 and _constant(node.args[0]) in SHELL_CELL_MAGICS)  # type: ignore[attr-defined]


def _loads(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _bound(node: ast.AST) -> set[str]:
    """Names a statement binds in the notebook's namespace (assignments, loops, with, defs, classes,
    imports; not the locals of the functions and classes it defines)."""
    names: set[str] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            names.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
            continue
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in n.names)
        stack.extend(ast.iter_child_nodes(n))
    return names


def _base_name(target: ast.AST) -> str | None:
    while isinstance(target, (ast.Attribute, ast.Subscript, ast.Starred)):
        target = target.value
    return target.id if isinstance(target, ast.Name) else None


def _statements(cells: list[Cell]) -> list[tuple[int, ast.stmt]]:
    """The notebook's top-level statements, in order, with the cell of each (cells that do not parse left out)."""
    out = []
    flags = 0  # `from __future__ import ...` of earlier cells, as IPython's compiler keeps them
    for cell in cells:
        try:
            tree = compile(cell.python or "", "<cell>", "exec", ast.PyCF_ONLY_AST | flags, dont_inherit=True)
        except SyntaxError:
            try:
                tree = parse_cell(cell.python or "")
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                continue
        except (ValueError, RecursionError, MemoryError):
            continue
        for statement in tree.body:
            if isinstance(statement, ast.ImportFrom) and statement.module == "__future__":
                flags |= sum(getattr(getattr(__future__, a.name, None), "compiler_flag", 0) for a in statement.names)
        out += [(cell.index, statement) for statement in tree.body]
        written = cell.written_python
        if written is not None:
            # A module the cell writes (`%%writefile m.py`), which a later cell may import or %run:
            # read as if it ran here, its names as the notebook's (an over-approximation; red team 24
            # hid a skipped line's marker file read in one).
            try:
                out += [(cell.index, statement) for statement in parse_cell(written).body]
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                pass
        out += [(cell.index, statement) for statement in _magic_bodies(tree)]
    return out


NOT_PYTHON_BODIES = SHELL_CELL_MAGICS | {"writefile", "file", "html", "HTML", "javascript", "js", "latex", "markdown", "svg"}


def _magic_bodies(tree: ast.Module) -> list[ast.stmt]:
    """The bodies of a cell's other cell magics, read as Python where they parse: an alias
    (`%alias_magic cap capture`, then `%%cap c`: red team 32) or a magic the notebook registers
    runs its body as code, which IPython's transformer leaves a string."""
    out: list[ast.stmt] = []
    for node in ast.walk(tree):
        if _is_ipython_call(node, "run_cell_magic") and len(node.args) >= 3:  # type: ignore[attr-defined]
            name, body = _constant(node.args[0]), _constant(node.args[2])  # type: ignore[attr-defined]
            if name is not None and name not in NOT_PYTHON_BODIES and body is not None:
                try:
                    parsed = parse_cell(python_view(body))
                except (SyntaxError, ValueError, RecursionError, MemoryError):
                    continue
                ast.increment_lineno(parsed, 1)  # the body starts on the cell's second line
                out += parsed.body
    return out


def _sources(cells: list[Cell], statements: list[tuple[int, ast.stmt]]) -> list[Source]:
    lines = {cell.index: (cell.source or "").split("\n") for cell in cells}
    found: list[Source] = []
    shell: tuple[int, int] | None = None
    for index, statement in statements:
        for node in ast.walk(statement):
            outs, line = _out_names(node) | _sc_names(node), getattr(node, "lineno", 1)
            text = lines[index][line - 1].strip() if 0 < line <= len(lines[index]) else ast.unparse(node)
            if _value_source(node):
                # A displayed value (`!!cmd` alone on a cell's last line) is kept as `_` and in Out.
                shown = DISPLAYED if isinstance(statement, ast.Expr) and statement.value is node else set()
                found.append(Source(index, line, text[:200], node, set(shown)))
            elif outs:
                found.append(Source(index, line, text[:200], None, outs))
            if shell is None and _runs_shell(node):
                shell = (index, line)
    if shell is not None:
        found.append(Source(shell[0], shell[1], "_exit_code", None, {"_exit_code"}))
    command = _first_command(cells, statements)
    if command is not None:
        found.append(_writer(statements, command))
        catcher = _output_catcher(cells, statements, command)
        if catcher is not None:
            found.append(catcher)
    raisers = _raisers(cells, statements)
    if raisers is not None:
        found.append(raisers)
    loader = _first_grader_line(cells, statements)
    if loader is not None:
        found.append(loader)
    return found


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
        return (function.id if isinstance(function, ast.Name) else function.attr if isinstance(function, ast.Attribute) else "") in MODULE_READS
    return False


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


def _scoped(statement: ast.stmt) -> list[tuple[ast.AST, bool]]:
    """Each node of a statement, with whether it is inside a function (which may run at any later time)."""
    out: list[tuple[ast.AST, bool]] = []
    stack: list[tuple[ast.AST, bool]] = [(statement, False)]
    while stack:
        node, inside = stack.pop()
        out.append((node, inside))
        inner = inside or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        stack.extend((child, inner) for child in ast.iter_child_nodes(node))
    return out


def _reads_files(node: ast.AST) -> bool:
    if isinstance(node, ast.Call):
        function = node.func
        name = function.id if isinstance(function, ast.Name) else function.attr if isinstance(function, ast.Attribute) else ""
        return name in FILE_READS
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
                text = lines[index][line - 1].strip() if 0 < line <= len(lines[index]) else ast.unparse(node)
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


def _raisers(cells: list[Cell], statements: list[tuple[int, ast.stmt]]) -> Source | None:
    """The skipped lines that may raise in Jupyter and never do here: a shell cell magic run as a
    call (`%%bash` raises on a failed command), and every command once the notebook sets
    `system_raise_on_error` (red team 32: `try: !nvidia-smi` / `except: no_gpu = True`).  A `try`
    around one, and the rest of a cell after one, depend on whether it raised."""
    aliases = _aliases(statements)
    lines = {cell.index: (cell.source or "").split("\n") for cell in cells}
    raising = any("raise_on_error" in (cell.source or "") for cell in cells)
    found = [(index, node) for index, statement in statements for node in ast.walk(statement)
             if _is_method_call(node, "run_cell_magic") and node.args and _constant(node.args[0]) in SHELL_CELL_MAGICS  # type: ignore[attr-defined]
             or raising and _writes(node, aliases)]
    if not found:
        return None
    index, first = found[0]
    line = getattr(first, "lineno", 1)
    text = lines[index][line - 1].strip() if 0 < line <= len(lines[index]) else ast.unparse(first)
    return Source(index, line, text[:200], None, file_reads={id(n) for _, n in found}, raises=True)


def _writer(statements: list[tuple[int, ast.stmt]], command: Command) -> Source:
    """The first command, with the reads of the file system that may come after it, and of the
    modules loaded (running a command imports what IPython runs it with: red team 32 read
    `'pexpect' in sys.modules`)."""
    reads = {id(node) for position, (_, statement) in enumerate(statements) for node, nested in _scoped(statement)
             if (_reads_files(node) or _reads_modules(node)) and command.follows(position, nested)}
    return Source(command.cell, command.line, command.text[:200], None, file_reads=reads)


# What catches a cell's printed output (a command's too: IPython prints it through `print`, to
# `sys.stdout`), and what reads what was caught.
CATCHERS = frozenset({"redirect_stdout", "redirect_stderr", "capture_output", "capture"})
STREAMS = frozenset({"stdout", "stderr", "print"})  # `sys.stdout = buf`, `builtins.print = keep`
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
            if handed:
                catches = True
                names |= {n for value in handed for n in _loads(value)}
    if not catches:
        return None
    names -= modules
    definitions = {s.name: s for _, s in statements if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    names |= {g for name in names & set(definitions) for n in ast.walk(definitions[name]) if isinstance(n, ast.Global) for g in n.names}
    harmless = _stream_uses(statements)
    reads = {id(node) for position, (_, statement) in enumerate(statements) for node, nested in _scoped(statement)
             if _reads_caught(node, harmless) and command.follows(position, nested)}
    return Source(command.cell, command.line, command.text[:200], None, names, file_reads=reads, output=True)


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
    for _, statement in statements:
        for node in ast.walk(statement):
            if _is_method_call(node, "run_line_magic") and len(node.args) >= 2 and _constant(node.args[0]) == "alias_magic":  # type: ignore[attr-defined]
                text = _constant(node.args[1]) or ""  # type: ignore[attr-defined]
                words = [w.lstrip("%") for w in text.split() if not w.startswith("-")]
                if len(words) >= 2 and "-l" not in text.split() and "--line" not in text.split():
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


def analyse(cells: list[Cell]) -> Finding:
    """Which skipped lines' values are read, and which contract names may depend on each.  Code
    nested past what Python can walk recursively (a chain of a thousand `+` parses) makes every
    skipped value one that anything may depend on: the grading never fails on it (red team 13)."""
    try:
        return _analyse(cells)
    except (RecursionError, MemoryError):
        try:
            sources = _sources(cells, _statements(cells))
        except (RecursionError, MemoryError):
            sources = []
        for source in sources:
            source.reads, source.depends = [(source.cell, source.line)], {"*"}
        return Finding(sources)


def _names_system_exit(node: ast.AST) -> bool:
    """Whether an expression names SystemExit (walked without recursion: it may be nested deep)."""
    return any(isinstance(n, ast.Name) and n.id == "SystemExit" or isinstance(n, ast.Attribute) and n.attr == "SystemExit"
               or isinstance(n, ast.Constant) and isinstance(n.value, str) and "SystemExit" in n.value for n in ast.walk(node))


def _analyse(cells: list[Cell]) -> Finding:
    statements = _statements(cells)
    VALUE_ALIASES.clear()
    VALUE_ALIASES.update(_magic_aliases(statements))
    functions = {s.name: s for _, s in statements if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
    read = []
    for source in _sources(cells, statements):
        tainted, everything = set(source.names), False
        changed = True
        while changed:  # a fixpoint: a name may be read before a later cell binds it (flow-insensitive)
            changed = False
            for position, (_, statement) in enumerate(statements):
                found, all_names = _taints(statement, source, tainted, functions)
                found |= _stopped(statements, position, source, tainted)
                everything |= all_names
                if not found <= tainted:
                    tainted |= found
                    changed = True
        source.reads = _reads(statements, source, _direct(statements, source))
        if source.reads:
            source.depends = {"*"} if everything else {name for name in CONTRACT if name in tainted}
            if source.file_reads is None or source.depends:  # reads of files only shown or used elsewhere: not worth a note
                read.append(source)
    return Finding(read)


def _stopped(statements: list[tuple[int, ast.stmt]], position: int, source: Source, tainted: set[str]) -> set[str]:
    """What the later statements of a cell bind, when a statement that reads such a value may stop the cell (an
    `assert`, `x[0]` of an empty list, `open` of a missing file); every later cell's, when it may stop them all (`sys.exit`)."""
    index, statement = statements[position]
    if not _may_stop(statement, source, tainted):
        return set()
    exits = any(isinstance(n, ast.Call) and (isinstance(n.func, ast.Name) and n.func.id in EXITS or isinstance(n.func, ast.Attribute)
                                              and n.func.attr in EXITS) or isinstance(n, ast.Raise) and n.exc is not None
                and _names_system_exit(n.exc) for n in ast.walk(statement))
    later = statements[position + 1:]
    return {name for i, s in later if exits or i == index for name in _bound(s)}


def _may_stop(statement: ast.stmt, source: Source, tainted: set[str]) -> bool:
    """Whether a statement may raise (or exit) depending on such a value: it computes with one, or raises under a test of one."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Import, ast.ImportFrom)) or _only_shown(statement):
        return False
    if isinstance(statement, (ast.Expr, ast.Assign)) and statement.value is source.node:
        return False  # the skipped line itself gives its empty value without raising
    headers: list[ast.AST] = []
    if isinstance(statement, (ast.If, ast.While)):
        headers = [statement.test]
    elif isinstance(statement, (ast.For, ast.AsyncFor)):
        headers = [statement.iter]
    elif isinstance(statement, (ast.With, ast.AsyncWith)):
        headers = [item.context_expr for item in statement.items]
    elif not isinstance(statement, (ast.Try, getattr(ast, "TryStar", ast.Try))):
        return _tainting(statement, source, tainted)
    body = [s for field in ("body", "orelse", "finalbody") for s in getattr(statement, field, [])]
    body += [s for handler in getattr(statement, "handlers", []) for s in handler.body]
    if any(_may_stop(s, source, tainted) for s in body):
        return True
    if not any(_tainting(h, source, tainted) for h in headers):
        return isinstance(statement, ast.Try) and _reads_files(statement) and _tainting(statement, source, tainted)
    stops = any(isinstance(n, (ast.Raise, ast.Assert)) or isinstance(n, ast.Call) and _called(n) in EXITS for s in body for n in ast.walk(s))
    return stops or not all(_safe(h) for h in headers)


def _called(call: ast.Call) -> str:
    return call.func.id if isinstance(call.func, ast.Name) else call.func.attr if isinstance(call.func, ast.Attribute) else ""


def _safe(node: ast.AST) -> bool:
    """An expression that does not raise on an empty value or a missing file (`not x`, `len(x) > 0`, `os.path.exists(p)`)."""
    if isinstance(node, (ast.Name, ast.Constant)):
        return True
    if isinstance(node, ast.Attribute):
        return _safe(node.value)
    if isinstance(node, (ast.BoolOp, ast.UnaryOp, ast.Compare)):
        return all(_safe(n) for n in ast.iter_child_nodes(node) if isinstance(n, ast.expr))
    return isinstance(node, ast.Call) and _called(node) in SAFE_CALLS and all(_safe(a) for a in node.args) and not node.keywords


def _only_shown(statement: ast.stmt) -> bool:
    """`print(files)`, `display(len(gpu))`: a statement that only shows names (it does not raise on an empty value)."""
    def shown(node: ast.AST) -> bool:
        return isinstance(node, (ast.Name, ast.Constant)) or (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in SHOWN_ONLY
            and all(shown(a) for a in node.args) and not node.keywords)
    return isinstance(statement, ast.Expr) and shown(statement.value)


def _tainting(expression: ast.AST | None, source: Source, tainted: set[str]) -> bool:
    if expression is None:
        return False
    reads = source.file_reads or set()
    return any(n is source.node or id(n) in reads or _reads_displayed(n, source) for n in ast.walk(expression)) or bool(
        _loads(expression) & tainted)


def _reads_displayed(node: ast.AST, source: Source) -> bool:
    """A read of a name the skipped line binds (`_`, `_exit_code`, `--out x`) by another way than
    the name itself (red teams 14 and 32): `_3` (IPython keeps the value of cell 3's display as
    `_3`, whatever number Jupyter gives it), the namespace (`get_ipython().user_ns`, `ns_table`,
    `user_module`, `globals()`, `vars()`, `dir()`, `sys.modules`, `__main__`, a frame's
    `f_globals`, a function's `__globals__`), the output history (`displayhook`, `output_hist`,
    `history_manager`) or code run from a string (`eval("_1")`)."""
    if not source.names:
        return False
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
        return ("_" in source.names and DISPLAY_NUMBER.fullmatch(node.id) is not None) or node.id == "__main__"
    if isinstance(node, ast.Attribute):
        return node.attr in NAMESPACE_ATTRIBUTES or _namespace(node)
    if isinstance(node, ast.Call):
        return isinstance(node.func, ast.Name) and (node.func.id in NAMESPACES | EVERYTHING or node.func.id == "dir" and not node.args)
    return False


def _taints(statement: ast.stmt, source: Source, tainted: set[str], functions: dict[str, ast.AST]) -> tuple[set[str], bool]:
    """The names this statement may make hold the source's value, and whether it may bind any name (exec)."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        # A definition that reads such a name (or runs that line itself) may behave as Jupyter's would not.
        return ({statement.name} if _tainting(statement, source, tainted) else set()), False
    found: set[str] = set()
    everything = False
    for node in ast.walk(statement):
        if isinstance(node, (ast.If, ast.While, ast.IfExp)) and _tainting(node.test, source, tainted):
            found |= _bound(node)  # whatever is bound under such a test depends on it
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)) and _tainting(node.iter, source, tainted):
            found |= _bound(node)
        elif isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))) and (
                any(_tainting(b, source, tainted) for b in node.body) or _tainting(node, source, tainted) and _reads_files(node)):
            found |= _bound(node)  # whether the body raised (`x[0]` of an empty list, a missing file) picks what is bound
        elif isinstance(node, (ast.With, ast.AsyncWith)) and any(_tainting(item.context_expr, source, tainted) for item in node.items):
            found |= _bound(node)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and _tainting(node.value, source, tainted):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if source.output:  # `sys.stdout = buf` swaps the stream, which only the reads of caught text see (_reads_caught), not `sys`
                targets = [t for t in targets if not _stream_target(t)]
            found |= {name for t in targets for name in (*_bound(t), _base_name(t)) if name}
            everything |= any(_namespace(t) for t in targets)
        elif isinstance(node, ast.NamedExpr) and _tainting(node.value, source, tainted):
            found.add(node.target.id)
        elif isinstance(node, ast.Call) and any(_tainting(arg, source, tainted) for arg in [*node.args, *(k.value for k in node.keywords)]):
            function = node.func
            if isinstance(function, ast.Name) and function.id in EVERYTHING or _namespace(function):
                everything = True
            elif isinstance(function, ast.Name) and function.id in ("setattr", "delattr") and node.args:
                found.add(_base_name(node.args[0]) or "")  # setattr(KVCacheManager, name, value)
            elif isinstance(function, ast.Attribute) and _base_name(function.value):
                found.add(_base_name(function.value) or "")  # a method handed the value may keep it (x.append(v))
            elif isinstance(function, ast.Name) and function.id in functions:
                found |= {g for n in ast.walk(functions[function.id]) if isinstance(n, ast.Global) for g in n.names}
    return found - {""}, everything


def _direct(statements: list[tuple[int, ast.stmt]], source: Source) -> set[str]:
    """The names the source's line binds its value to (what a later line reads it through)."""
    names = set(source.names)
    for _, statement in statements:
        for node in ast.walk(statement):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.NamedExpr)) and node.value is source.node:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names |= {name for t in targets for name in (*_bound(t), _base_name(t)) if name}
    return names


def _namespace(node: ast.AST) -> bool:
    """An expression that writes into a namespace: `globals()[k]`, `vars(m).update`, `sys.modules[...]`."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute) and node.attr == "modules" and _base_name(node.value) == "sys":
            return True
        node = node.value
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in NAMESPACES


def _reads(statements: list[tuple[int, ast.stmt]], source: Source, tainted: set[str]) -> list[tuple[int, int]]:
    """Where the source's value (or a name holding it) is read: not the bare line, nor its plain assignment."""
    found: list[tuple[int, int]] = []
    for index, statement in statements:
        plain = isinstance(statement, (ast.Expr, ast.Assign)) and statement.value is source.node
        for node in ast.walk(statement):
            if id(node) in (source.file_reads or set()) or (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in tainted) or (
                    node is source.node and not plain) or _reads_displayed(node, source):
                where = (index, getattr(node, "lineno", 0))
                if where not in found:
                    found.append(where)
    return found[:10]


def notes(finding: Finding, todos: dict[str, tuple[str, ...]]) -> list[Text]:
    """What the scorecard says: each skipped line whose value is read, and what depends on it."""
    out = []
    for source in finding.sources[:10]:
        reads_zh = "、".join(f"第 {c} 个代码单元第 {line} 行" for c, line in source.reads)
        reads_en = ", ".join(f"code cell {c}, line {line}" for c, line in source.reads)
        if source.grader_line:
            out.append(Text(
                f"第 {source.cell} 个代码单元第 {source.line} 行 `{source.text}` 调用评分器，评分时被去掉（Jupyter 中它会载入评分器），"
                f"而之后读取了已载入的模块或已绑定的名字（{reads_zh}）",
                f"code cell {source.cell}, line {source.line}: `{source.text}` calls the grader and is taken out while grading (in "
                f"Jupyter it loads the grader), and which modules are loaded or which names are bound is read after it ({reads_en})",
            ))
            continue
        if source.raises:
            out.append(Text(
                f"第 {source.cell} 个代码单元第 {source.line} 行 `{source.text}` 在评分时不运行（Jupyter 中命令失败时它会抛出异常，这里从不抛出），"
                f"而之后的代码取决于它是否抛出（{reads_zh}）",
                f"code cell {source.cell}, line {source.line}: `{source.text}` does not run while grading (in Jupyter it raises when the "
                f"command fails, here it never does), and what follows depends on whether it raised ({reads_en})",
            ))
            continue
        if source.output:
            out.append(Text(
                f"第 {source.cell} 个代码单元第 {source.line} 行 `{source.text}` 在评分时不运行（Jupyter 中它会打印输出，这里不打印），"
                f"而笔记本捕获了输出并读取了它（{reads_zh}）",
                f"code cell {source.cell}, line {source.line}: `{source.text}` does not run while grading (in Jupyter it prints its output, "
                f"here it prints nothing), and the notebook catches printed output and reads it ({reads_en})",
            ))
            continue
        if source.file_reads is not None:
            out.append(Text(
                f"第 {source.cell} 个代码单元第 {source.line} 行 `{source.text}` 在评分时不运行（Jupyter 中它可能写文件，这里不写），"
                f"而之后读取了文件系统（{reads_zh}）",
                f"code cell {source.cell}, line {source.line}: `{source.text}` does not run while grading (in Jupyter it may write files, "
                f"here it writes none), and the file system is read after it ({reads_en})",
            ))
            continue
        out.append(Text(
            f"第 {source.cell} 个代码单元第 {source.line} 行 `{source.text}` 在评分时不运行（Jupyter 中是命令的输出，这里为空），"
            f"而它的值被读取（{reads_zh}）",
            f"code cell {source.cell}, line {source.line}: `{source.text}` does not run while grading (its value is the command's output in "
            f"Jupyter, empty here), and that value is read ({reads_en})",
        ))
    if finding.sources and not finding.depends:
        out.append(Text("评分的定义都不依赖这些值：照常评分", "none of the graded definitions depends on those values: graded as usual"))
    affected = affected_todos(finding, todos)
    if affected:
        names = "all of them (exec, globals() or setattr with such a value)" if finding.depends == ["*"] else ", ".join(finding.depends)
        names_zh = "全部（exec、globals() 或 setattr 用了这样的值）" if finding.depends == ["*"] else ", ".join(finding.depends)
        out.append(Text(
            f"{names_zh} 的定义可能依赖评分时不运行的行的值（或它写下的文件、打印的输出）：评分所走的路径未必是 Jupyter 所走的，{', '.join(affected)} 的项目不计分",
            f"the definitions of {names} may depend on the value of a line that does not run while grading (or on the files it may "
            f"have written, or the output it prints): what is graded may not be "
            f"what Jupyter runs, so the items of {', '.join(affected)} get no points",
        ))
    return out


def affected_todos(finding: Finding, todos: dict[str, tuple[str, ...]]) -> list[str]:
    if not finding.depends:
        return []
    if finding.depends == ["*"]:
        return sorted(todos)
    return sorted(todo for todo, names in todos.items() if set(names) & set(finding.depends))


def apply(items: list[ItemResult], finding: Finding, todos: dict[str, tuple[str, ...]]) -> list[ItemResult]:
    """The items of the TODOs whose definitions may depend on a skipped line's value, failed."""
    affected = set(affected_todos(finding, todos))
    if not affected or not finding.sources:
        return items
    source = finding.sources[0]
    what_zh, what_en = "的值", "the value of"
    if source.grader_line:
        what_zh, what_en = "所载入的模块", "the modules loaded by"
    elif source.raises:
        what_zh, what_en = "是否抛出异常", "whether an exception was raised by"
    elif source.output:
        what_zh, what_en = "所打印并被捕获的输出", "the captured printed output of"
    elif source.file_reads is not None:
        what_zh, what_en = "可能写下的文件", "the files written by"
    out = []
    for item in items:
        if item.todo not in affected or item.status != PASSED:
            out.append(item)
            continue
        failure = Failure(
            "skipped_value",
            Text(
                f"本项不计分：定义依赖第 {source.cell} 个代码单元第 {source.line} 行 `{source.text}` {what_zh}，该行在评分时不运行"
                f"（Jupyter 中它会运行）：无法评分 Jupyter 实际运行的代码",
                f"no credit for this item: the definitions depend on {what_en} `{source.text}` (code cell {source.cell}, line {source.line}), "
                f"which does not run while grading (in Jupyter it does): what Jupyter runs cannot be graded",
            ),
            actual=source.text,
        )
        out.append(ItemResult(item.id, item.todo, item.title, item.weight, FAILED, failure, item.examples, item.seconds,
                              item.exercised, item.random_cases))
    return out
