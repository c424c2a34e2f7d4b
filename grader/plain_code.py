"""What plain code is: a statement that uses only what is known to be inert (constants, the
notebook's own names, the standard numeric modules less their file and system parts, a list of
builtins), for grader/skipped_plain.py.  `_Checker` walks one top-level statement and says the
global names it reads or binds and the first thing in it that is not plain.  Nothing of the shell
(`get_ipython`, `_`, `Out`, `_exit_code`), of the files (`open`, `os.listdir`, `subprocess`), of
the namespace (`globals`, `exec`) or of the interpreter's insides (`__globals__`, frames) is.
Nothing here runs student code.
"""

from __future__ import annotations

import ast
import builtins
import re

# Modules whose contents are computation only, less DENIED_ATTRIBUTES (their file and system parts).
INERT_MODULES = frozenset({
    "math", "cmath", "torch", "numpy", "functools", "itertools", "operator", "collections", "typing", "typing_extensions",
    "dataclasses", "enum", "abc", "heapq", "bisect", "copy", "numbers", "fractions", "decimal", "statistics", "random",
    "warnings", "time", "datetime", "logging", "string", "re", "json", "pprint", "array", "einops", "tqdm", "matplotlib", "pandas",
    "scipy", "seaborn",
    "__future__",
})
INERT_SUBMODULES = frozenset({"IPython.display"})  # display only, of a module that is not inert as a whole
# Attributes that reach files, the system or the interpreter's insides from an inert module (or anything else).
DENIED_ATTRIBUTES = frozenset({
    "os", "sys", "subprocess", "builtins", "importlib", "io", "pathlib", "shutil", "glob", "ctypes", "socket", "pickle",
    "marshal", "gc", "inspect", "threading", "multiprocessing", "signal", "resource", "tempfile", "IPython", "ipykernel",
    "site", "runpy", "pkgutil", "linecache", "putenv", "system", "popen",
    "load", "save", "savez", "savez_compressed", "from_file", "fromfile", "tofile", "loadtxt", "savetxt", "genfromtxt",
    "memmap", "fromregex", "DataSource", "ctypeslib", "f2py", "hub", "utils", "ops", "classes", "library",
    "package", "serialization", "jit", "compile", "distributed", "cpp_extension", "imread", "imsave", "savefig", "read_csv",
    "read_json", "read_pickle", "read_parquet", "to_csv", "to_pickle", "user_ns", "user_global_ns", "shell", "modules",
    "f_globals", "f_locals", "f_back", "f_code", "gi_frame", "cr_frame", "ag_frame", "tb_frame", "tb_next", "open", "exec", "eval",
    "execfile", "open_memmap", "npyio", "read_array",
})
# Dunders that lead from an object to the interpreter's insides (a function's globals, every class,
# a builtin's module, frames, code): nothing reaches the notebook's names, a module or a file but
# through one of these.  `__dict__` is an object's own attributes, but a module's names or a
# class's functions: allowed on a local name only (`self.__dict__`).
GATEWAY_DUNDERS = frozenset({
    "__globals__", "__builtins__", "__subclasses__", "__subclasshook__", "__code__", "__closure__", "__func__", "__self__",
    "__module__", "__bases__", "__base__", "__mro__", "__import__", "__loader__", "__spec__", "__getattribute__", "__getattr__",
    "__reduce__", "__reduce_ex__", "__wrapped__", "__traceback__", "__context__", "__cause__", "__defaults__", "__kwdefaults__",
    "__objclass__", "__weakref__", "__getstate__", "__setstate__", "__getnewargs__", "__getnewargs_ex__", "__signature__",
    "__file__", "__path__", "__cached__", "__package__", "__all__", "__warningregistry__", "__init_subclass__", "__set_name__",
    "__class_getitem__", "__annotations__", "__orig_bases__", "__parameters__", "__type_params__",
})
DENIED_BUILTINS = frozenset({
    "open", "exec", "eval", "compile", "__import__", "globals", "locals", "input", "breakpoint", "help",
    "exit", "quit", "memoryview", "__build_class__", "__loader__", "__spec__", "__builtins__", "__file__", "copyright",
    "credits", "license",
})
ALLOWED_BUILTINS = frozenset(name for name in dir(builtins) if name not in DENIED_BUILTINS and not name.startswith("_")) | {
    "display", "__name__", "__doc__"}
# Names the shell binds in the notebook: a skipped line's value, or the kernel's state, is read through them.
SHELL_NAMES = frozenset({"_", "__", "___", "_i", "_ii", "_iii", "_oh", "_ih", "_dh", "In", "Out", "_exit_code", "get_ipython",
                         "__main__"})  # `from __main__ import x` is read as `__main__.x`
RUNNING_MAGICS = frozenset({"time", "timeit", "prun", "matplotlib", "autoreload", "config", "precision", "env", "set_env", "who",
                            "whos", "who_ls", "lsmagic", "pwd", "history", "xmode", "colors", "pprint", "page", "magic",
                            "quickref", "notebook", "dhist", "dirs", "bookmark", "pinfo", "pinfo2", "pdef", "pdoc", "psource",
                            "pfile", "psearch", "tb", "doctest_mode", "automagic", "autocall", "autoawait", "logstate", "gui",
                            "pylab"})
RUNNING_CELL_MAGICS = frozenset({"writefile", "file", "capture", "time", "timeit", "prun", "html", "HTML", "markdown", "latex",
                                 "svg", "javascript", "js"})
DUNDER = re.compile(r"__\w+?__")
# Modules of which only some parts are inert: each allowed chain of attributes (None: anything after it).
PARTIAL_MODULES: dict[str, dict[tuple[str, ...], bool]] = {
    "os": {("environ",): True, ("getenv",): False, ("cpu_count",): False, ("sched_getaffinity",): False, ("getpid",): False,
           ("sep",): False, ("linesep",): False, ("name",): False, **{("path", f): False for f in (
               "join", "basename", "dirname", "splitext", "split", "normpath", "sep", "abspath", "expanduser")}},
    "sys": {("stdout", "write"): False, ("stdout", "flush"): False, ("stderr", "write"): False, ("stderr", "flush"): False,
            ("maxsize",): False, ("float_info",): True, ("version_info",): True, ("getrecursionlimit",): False, ("byteorder",): False,
            ("getsizeof",): False},
}
STREAMS = (("stdout",), ("stderr",))  # `print(..., file=sys.stderr)`
# What a statement before the notebook's first skipped line may read besides: files no skipped line wrote yet.
EARLY_NAMES = frozenset({"open"})
EARLY_ATTRIBUTES = frozenset({"load", "loadtxt", "genfromtxt", "fromfile", "memmap", "from_file", "read_csv", "read_json",
                              "read_pickle", "read_parquet", "imread"})
EARLY_MODULES = frozenset({"pathlib", "glob", "os"})


class _Checker(ast.NodeVisitor):
    """Walks one top-level statement: the globals it reads or binds, and the first thing not plain."""

    def __init__(self, modules: frozenset[str], early: bool = False) -> None:
        self.early = early  # before the first skipped line: files may be read at top level
        self.chained: set[int] = set()  # nodes of an attribute chain already checked whole
        self.scopes: list[tuple[set[str], bool]] = []  # the names of each scope around the node, and whether it is a class's
        self.modules = modules
        self.globals_read: set[str] = set()
        self.why = ""

    def deny(self, what: str) -> None:
        if not self.why:
            self.why = what

    # -- names ------------------------------------------------------------------------------
    def _early_here(self) -> bool:
        return self.early and not any(not is_class for _, is_class in self.scopes)

    def visit_Name(self, node: ast.Name) -> None:
        if self.scopes and node.id in self.scopes[-1][0]:
            return
        if any(node.id in names for names, is_class in self.scopes[:-1] if not is_class):
            return  # a name of an enclosing function (a class's names are not seen from its methods)
        denied = node.id in SHELL_NAMES or node.id in DENIED_BUILTINS and not (node.id in EARLY_NAMES and self._early_here()) or (
            DUNDER.fullmatch(node.id) is not None and node.id not in ("__name__", "__doc__", "__class__"))
        if isinstance(node.ctx, ast.Load) and (denied or _history_name(node.id)):
            self.deny(node.id)
        elif node.id in PARTIAL_MODULES and id(node) not in self.chained and not (self._early_here() and node.id in EARLY_MODULES):
            self.deny(node.id)  # the module itself, handed on: every part of it within reach
        self.globals_read.add(node.id)

    def visit_Global(self, node: ast.Global) -> None:
        self.deny("global " + ", ".join(node.names))

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.deny("nonlocal " + ", ".join(node.names))

    # -- imports ----------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            top = alias.name.split(".")[0]
            if alias.name in INERT_SUBMODULES or alias.name in PARTIAL_MODULES and not alias.asname or (
                    self._early_here() and top in EARLY_MODULES):
                self._bind(alias.asname or top)  # the module's parts are checked where it is used
                continue
            if top not in INERT_MODULES or any(part in DENIED_ATTRIBUTES or part.startswith("_") and top != "__future__"
                                               for part in alias.name.split(".")[1:]):
                self.deny("import " + alias.name)
            self._bind(alias.asname or top)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if module in INERT_SUBMODULES or self._early_here() and module.split(".")[0] in EARLY_MODULES or _partial_names(module, node):
            for alias in node.names:
                self._bind(alias.asname or alias.name)
            return
        if node.level or module.split(".")[0] not in INERT_MODULES or any(p in DENIED_ATTRIBUTES for p in module.split(".")[1:]):
            self.deny("from " + ("." * node.level) + module + " import")
        for alias in node.names:
            if alias.name == "*" or alias.name in DENIED_ATTRIBUTES or alias.name.startswith("_") and module != "__future__":
                self.deny(f"from {module} import {alias.name}")
            self._bind(alias.asname or alias.name)

    def _bind(self, name: str) -> None:
        if self.scopes:
            self.scopes[-1][0].add(name)
        else:
            self.globals_read.add(name)

    # -- attributes and calls ---------------------------------------------------------------
    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = node.attr
        if id(node) not in self.chained:
            self._check_chain(node)
        early = self._early_here() and name in EARLY_ATTRIBUTES
        if (name in DENIED_ATTRIBUTES and not early) or name in GATEWAY_DUNDERS or (
                name == "__dict__" and not (isinstance(node.value, ast.Name) and self._local(node.value.id))):
            self.deny("." + name)
        elif name.startswith("_") and not name.startswith("__") and _base(node) in self.modules:
            self.deny("." + name)  # a module's private part (torch._C)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        # A name in a string reaches the same insides at run time: `"{0.__init__.__globals__}".format(f)`,
        # `operator.attrgetter("__globals__")`, `getattr(m, "os")`.
        if isinstance(node.value, str) and len(node.value) < 10_000:
            dunders = [d for d in DUNDER.findall(node.value) if d in GATEWAY_DUNDERS or d == "__dict__"]
            if dunders or node.value in DENIED_ATTRIBUTES and node.value not in ("load", "save", "compile", "system", "open"):
                self.deny(repr(node.value)[:60])

    def _check_chain(self, node: ast.Attribute, stream: bool = False) -> None:
        """An attribute chain on a module of which only some parts are inert (`os.environ.get`), whole."""
        parts: list[str] = []
        inner: list[ast.AST] = []
        value: ast.expr = node
        while isinstance(value, ast.Attribute):
            parts.insert(0, value.attr)
            inner.append(value)
            value = value.value
        if not (isinstance(value, ast.Name) and value.id in PARTIAL_MODULES) or self._local(value.id):
            return
        if self._early_here() and value.id in EARLY_MODULES:
            allowed = True
        else:
            chains = PARTIAL_MODULES[value.id]
            allowed = (stream and tuple(parts) in STREAMS) or any(
                tuple(parts[:len(chain)]) == chain and (len(parts) == len(chain) or rest) for chain, rest in chains.items())
        if not allowed:
            self.deny(value.id + "." + ".".join(parts))
        self.chained |= {id(n) for n in inner} | {id(value)}

    def _local(self, name: str) -> bool:
        return bool(self.scopes) and (name in self.scopes[-1][0] or any(name in n for n, is_class in self.scopes[:-1] if not is_class))

    def visit_Call(self, node: ast.Call) -> None:
        if _running_magic(node):
            return  # `%time`, `%env`, `%matplotlib`: runs here as in Jupyter (a `%time` statement is read on its own)
        for keyword in node.keywords:
            if keyword.arg == "file" and isinstance(keyword.value, ast.Attribute):
                self._check_chain(keyword.value, stream=True)
        function = node.func
        called = function.id if isinstance(function, ast.Name) else function.attr if isinstance(function, ast.Attribute) else ""
        if called in ("attrgetter", "methodcaller", "__getattribute__", "__getattr__") and not all(
                isinstance(a, ast.Constant) for a in node.args):
            self.deny(called + "(a name made at run time)")
        if called in ("format", "format_map") and isinstance(function, ast.Attribute) and not isinstance(
                function.value, (ast.Constant, ast.JoinedStr)):
            self.deny(".format of a text made at run time")  # `fmt.format(f)`: its fields reach attributes by name
        if called in ("Formatter", "vformat"):
            self.deny(called)
        if isinstance(function, ast.Name) and function.id in ("vars", "dir") and not self._local(function.id):
            if not node.args or function.id == "vars" and not (isinstance(node.args[0], ast.Name) and self._local(node.args[0].id)):
                self.deny(function.id + "(...)")  # the namespace itself, or a module's or a class's names
            for argument in [*node.args, *(k.value for k in node.keywords)]:
                self.visit(argument)  # an object's own attributes
            return
        if isinstance(function, ast.Name) and function.id in ("getattr", "hasattr", "setattr", "delattr"):
            name = node.args[1] if len(node.args) > 1 else None
            text = name.value if isinstance(name, ast.Constant) and isinstance(name.value, str) else None
            if text is None or text in DENIED_ATTRIBUTES or text in GATEWAY_DUNDERS or text == "__dict__":
                self.deny(f"{function.id}(..., {ast.unparse(name) if name is not None else ''})"[:80])
        self.generic_visit(node)

    # -- scopes -----------------------------------------------------------------------------
    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        args = node.args
        annotations = [a.annotation for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
                       if a is not None and a.annotation is not None]
        for expression in [*args.defaults, *(d for d in args.kw_defaults if d is not None), *annotations]:
            self.visit(expression)  # evaluated where the function is defined
        if not isinstance(node, ast.Lambda):
            for expression in [*node.decorator_list, *([node.returns] if node.returns is not None else [])]:
                self.visit(expression)
            self._bind(node.name)
        self.scopes.append((_locals(node), False))
        body = [node.body] if isinstance(node, ast.Lambda) else node.body
        for statement in body:
            self.visit(statement)
        self.scopes.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._function(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._function(node)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._function(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for expression in [*node.bases, *(k.value for k in node.keywords), *node.decorator_list]:
            self.visit(expression)
        self._bind(node.name)
        # A class body's names are its own (its methods reach them through self or the class).
        self.scopes.append(({n for s in node.body for n in _targets(s)}, True))
        for statement in node.body:
            self.visit(statement)
        self.scopes.pop()

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp) -> None:
        local = {n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
        self.scopes.append((local | (self.scopes[-1][0] if self.scopes else set()), False))
        self.generic_visit(node)
        self.scopes.pop()

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension  # type: ignore[assignment]


def _locals(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """A function's own names: parameters and what its body binds (not its nested functions' locals)."""
    args = node.args
    names = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
    names |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    body = [node.body] if isinstance(node, ast.Lambda) else node.body
    for statement in body:
        names |= _targets(statement)
    return names


def _targets(statement: ast.AST) -> set[str]:
    """Names a statement binds in its own scope (not inside nested functions and classes)."""
    names: set[str] = set()
    stack = [statement]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        elif isinstance(node, ast.Lambda):
            continue
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.NamedExpr):
            names.add(node.target.id)
        stack.extend(ast.iter_child_nodes(node))
    return names


def _base(node: ast.Attribute) -> str:
    """The name an attribute chain starts at (`torch` for `torch.nn._x`), or ""."""
    value: ast.expr = node.value
    while isinstance(value, ast.Attribute):
        value = value.value
    return value.id if isinstance(value, ast.Name) else ""


def module_names(statements: list[tuple[int, ast.stmt]]) -> frozenset[str]:
    """Names the notebook binds to modules (`import torch as T`, `from torch import nn`)."""
    names: set[str] = set()
    for _, statement in statements:
        for node in ast.walk(statement):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return frozenset(names)


def _history_name(name: str) -> bool:
    """IPython's output and input history names: `_3`, `_i3`."""
    return (name.startswith("_i") and name[2:].isdigit()) or (name.startswith("_") and name[1:].isdigit())


def _running_magic(node: ast.Call) -> bool:
    """`get_ipython().run_line_magic('time', ...)` of a magic that runs while grading as in Jupyter."""
    function = node.func
    if not (isinstance(function, ast.Attribute) and function.attr in ("run_line_magic", "run_cell_magic") and isinstance(function.value, ast.Call)
            and isinstance(function.value.func, ast.Name) and function.value.func.id == "get_ipython"):
        return False
    texts = [a.value if isinstance(a, ast.Constant) and isinstance(a.value, str) else None for a in node.args]
    if not texts or None in texts:
        return False
    if function.attr == "run_cell_magic":  # writes a file or shows text, here as in Jupyter (a Python body is read on its own)
        return texts[0] in RUNNING_CELL_MAGICS
    return texts[0] in RUNNING_MAGICS or texts[0] == "load_ext" and texts[1:2] == ["autoreload"]


def _partial_names(module: str, node: ast.ImportFrom) -> bool:
    """`from os import environ`, `from os.path import join`: names of allowed parts of a module."""
    top, *rest = module.split(".")
    chains = PARTIAL_MODULES.get(top)
    if chains is None or node.level:
        return False
    return all(alias.name != "*" and (*rest, alias.name) in chains for alias in node.names)
