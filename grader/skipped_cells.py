"""The syntax of skipped lines, for grader/skipped_values.py: how the judge reads a notebook's
cells (as IPython compiles them, with the bodies of cell magics that run code), what a skipped
line looks like there (`!cmd`, `%sx`, `getoutput`, `%%bash --out x`), and the record of one
(`Source`).  Nothing here runs student code."""

from __future__ import annotations
import __future__

import ast
import re
from dataclasses import dataclass, field

from grader.cells import cell_magic, magic_statement, parse_cell, python_view
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
    "getlines", "fromregex", "to_filehandle", "FileHandler", "FrameSummary", "checkcache", "lazycache", "read_table", "read_fwf",
    "read_excel", "read_html", "read_xml", "read_sql", "read_hdf", "read_feather", "read_orc", "read_sas", "read_spss", "read_stata",
    "read_clipboard", "imread", "loadmat", "open_memmap", "memmap",
})  # red team 39 read the marker through traceback, matplotlib.cbook, logging and pandas
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
    kernel: bool = False  # the shell's state a skipped line changes (file_reads: the reads of it)



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


def alias_magic_lines(statements: list[tuple[int, ast.stmt]]) -> list[str | None]:
    """The argument line of each `%alias_magic` (None where it is made at run time)."""
    return [_constant(node.args[1]) for _, statement in statements for node in ast.walk(statement)  # type: ignore[attr-defined]
            if _is_method_call(node, "run_line_magic") and len(node.args) >= 2 and _constant(node.args[0]) == "alias_magic"]  # type: ignore[attr-defined]


def _magic_aliases(statements: list[tuple[int, ast.stmt]]) -> set[str]:
    """Names `%alias_magic` binds to a magic whose value is a command's output."""
    names: set[str] = set()
    for text in alias_magic_lines(statements):
        words = [w for w in (text or "").split() if not w.startswith("-")]
        if len(words) >= 2 and words[1].lstrip("%") in VALUE_MAGICS | {"sc"}:
            names.add(words[0].lstrip("%"))
        elif len(words) >= 2 or text is None:
            names.add(words[0].lstrip("%") if words else "*")  # an alias of what cannot be told: any magic
    return names


def line_text(lines: dict[int, list[str]], index: int, node: ast.AST) -> str:
    """The line of cell `index` a node starts on, as typed (its code where the cell has no such line)."""
    line = getattr(node, "lineno", 1)
    return lines[index][line - 1].strip() if 0 < line <= len(lines[index]) else ast.unparse(node)


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
        tree = _plain_attributes(tree)
        out += [(cell.index, statement) for statement in tree.body]
        written = cell.written_python
        if written is not None:
            # A module the cell writes (`%%writefile m.py`), which a later cell may import or %run:
            # read as if it ran here, its names as the notebook's (an over-approximation; red team 24
            # hid a skipped line's marker file read in one).
            try:
                module = parse_cell(written).body
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                module = []
            out += [(cell.index, statement) for statement in module]
            # Its name as a later `import m` binds it: made of every name it binds, so that `m.x` reads x.
            name = _written_module_name(cell)
            names = sorted(set().union(*(_bound(statement) for statement in module))) if module else []
            if name and names:
                out += [(cell.index, statement) for statement in ast.parse(f"{name} = ({', '.join(names)},)").body]
        out += [(cell.index, statement) for statement in _magic_bodies(tree)]
    trees = _canonical_names([ast.Module(body=[statement], type_ignores=[]) for _, statement in out])
    return [(index, statement) for (index, _), tree in zip(out, trees, strict=True) for statement in tree.body]


class _PlainAttributes(ast.NodeTransformer):
    """`getattr(x, "name")` read as `x.name`, so that every rule that names an attribute sees it
    however it is written (red team 34: `getattr(get_ipython(), 'getoutput')('echo ran')`)."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if (isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(node.args) == 2 and not node.keywords
                and _constant(node.args[1]) is not None and str(_constant(node.args[1])).isidentifier()):
            return ast.copy_location(ast.Attribute(value=node.args[0], attr=str(_constant(node.args[1])), ctx=ast.Load()), node)
        return node


def _plain_attributes(tree: ast.Module) -> ast.Module:
    try:
        return _PlainAttributes().visit(tree)
    except RecursionError:  # nested past what a recursive walk can follow: read as written
        return tree


class _ImportedNames(ast.NodeTransformer):
    """A name an import binds, read as the module's own (red team 35): `import threading as th`
    makes `th.active_count()` read `threading.active_count()`; `from sys import modules`,
    `modules` read `sys.modules`; `from IPython... import InteractiveShell as S`, `S` read
    `InteractiveShell`; `from __main__ import _exit_code as x` is `x = __main__._exit_code`."""

    def __init__(self, modules: dict[str, str], members: dict[str, tuple[str, str]]):
        self.modules, self.members = modules, members

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if not isinstance(node.ctx, ast.Load):
            return node
        if node.id in self.members:
            module, name = self.members[node.id]
            base = ast.copy_location(ast.Name(id=module.split(".")[-1], ctx=ast.Load()), node)
            return ast.copy_location(ast.Attribute(value=base, attr=name, ctx=ast.Load()), node) if module in DIRECT_MODULES else (
                ast.copy_location(ast.Name(id=name, ctx=ast.Load()), node))
        if node.id in self.modules:
            return ast.copy_location(ast.Name(id=self.modules[node.id], ctx=ast.Load()), node)
        return node

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST:
        if node.module != "__main__":
            return node
        return [ast.copy_location(ast.Assign(targets=[ast.Name(id=a.asname or a.name, ctx=ast.Store())],
                                             value=ast.Attribute(value=ast.Name(id="__main__", ctx=ast.Load()), attr=a.name, ctx=ast.Load())),
                                  node) for a in node.names if a.name != "*"] or node  # type: ignore[return-value]


# Modules whose members the rules name with the module (`sys.modules`, `os.path`); of others, the
# member's own name is what they know (`InteractiveShell`, `redirect_stdout`).
DIRECT_MODULES = frozenset({"sys", "os", "os.path", "threading", "builtins", "__main__", "shutil", "importlib", "io", "contextlib"})


def _canonical_names(trees: list[ast.Module]) -> list[ast.Module]:
    modules: dict[str, str] = {}
    members: dict[str, tuple[str, str]] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules.update({a.asname: a.name.split(".")[0] for a in node.names if a.asname and a.asname != a.name.split(".")[0]})
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                members.update({a.asname or a.name: (node.module, a.name) for a in node.names
                                if a.name != "*" and (node.module in DIRECT_MODULES or a.asname and a.asname != a.name)})
    if not modules and not members:
        return trees
    out = []
    for tree in trees:
        try:
            out.append(ast.fix_missing_locations(_ImportedNames(modules, members).visit(tree)))
        except RecursionError:
            out.append(tree)
    return out


NOT_PYTHON_BODIES = SHELL_CELL_MAGICS | {"writefile", "file", "html", "HTML", "javascript", "js", "latex", "markdown", "svg"}


def _magic_bodies(tree: ast.Module) -> list[ast.stmt]:
    """The bodies of a cell's other cell magics, and the statements of its `%time`-like line
    magics, read as Python where they parse: an alias
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
        elif (statement := magic_statement(node)) is not None:  # `%time out = !cmd` runs its statement here (red team 36)
            try:
                parsed = parse_cell(python_view(statement))
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                continue
            ast.increment_lineno(parsed, getattr(node, "lineno", 1) - 1)
            out += parsed.body
    return out


def _called(call: ast.Call) -> str:
    return call.func.id if isinstance(call.func, ast.Name) else call.func.attr if isinstance(call.func, ast.Attribute) else ""


def _scoped(statement: ast.stmt) -> list[tuple[ast.AST, bool]]:
    """Each node of a statement, with whether it is inside a function (which may run at any later time)."""
    out: list[tuple[ast.AST, bool]] = []
    stack: list[tuple[ast.AST, bool]] = [(statement, False)]
    while stack:
        node, inside = stack.pop()
        out.append((node, inside))
        inner = inside or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.GeneratorExp))  # a generator runs when consumed (red team 36)
        stack.extend((child, inner) for child in ast.iter_child_nodes(node))
    return out


def _written_module_name(cell: Cell) -> str | None:
    """`m` for a cell `%%writefile m.py` (the name `import m` binds), else None."""
    magic = cell_magic(cell.source or "")
    words = magic[1].split() if magic is not None else []
    stem = words[-1].rsplit("/", 1)[-1].removesuffix(".py") if words else ""
    return stem if stem.isidentifier() else None
