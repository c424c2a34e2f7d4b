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
(`%%capture c`, `redirect_stdout(buf)`, `sys.stdout = buf`: red team 30); see grader/skipped_effects.py.

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

import ast
from dataclasses import dataclass

from grader.results import FAILED, PASSED, Failure, ItemResult, Text
from grader.skipped_cells import (
    CONTRACT,
    DISPLAY_NUMBER,
    EVERYTHING,
    EXITS,
    NAMESPACE_ATTRIBUTES,
    NAMESPACES,
    SAFE_CALLS,
    SHOWN_ONLY,
    VALUE_ALIASES,
    Source,
    _base_name,
    _bound,
    _called,
    _loads,
    _magic_aliases,
    _statements,
)
from grader.skipped_effects import _is_shell, _reads_files, _sources
from grader.skipped_output import _stream_target
from grader.submission import Cell


@dataclass
class Finding:
    sources: list[Source]  # those whose value is read

    @property
    def depends(self) -> list[str]:
        names = set().union(*(s.depends for s in self.sources)) if self.sources else set()
        return ["*"] if "*" in names else sorted(names)


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
    if isinstance(statement, (ast.Import, ast.ImportFrom)):
        return id(statement) in (source.file_reads or ())  # a module a command may have written: missing here (red team 36)
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)) or _only_shown(statement):
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
    elif isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None:
        # `ip = get_ipython()`, `ip.user_ns[k] = v`: taking the shell, or storing into a namespace, raises
        # alike in Jupyter and here; computing with a value (`1 / (1 - ip.call_pdb)`, `x[0] = 1` on an
        # empty `x`) may not
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        parts = [] if source.kernel and _is_shell(statement.value) else [statement.value]
        return any(_tainting(part, source, tainted) for part in parts + [p for t in targets for p in _stored(t, source)])
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


def _stored(target: ast.AST, source: Source) -> list[ast.AST]:
    """What a store target computes (`x[i].y[j] = v`: x, i, j), less a namespace or the shell it stores into."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return [p for t in target.elts for p in _stored(t, source)]
    if isinstance(target, ast.Starred):
        return _stored(target.value, source)
    if not isinstance(target, (ast.Subscript, ast.Attribute)):
        return []
    indices = [target.slice] if isinstance(target, ast.Subscript) else []
    base = target.value
    if (isinstance(base, ast.Attribute) and base.attr in NAMESPACE_ATTRIBUTES or isinstance(base, ast.Call) and _called(base) in NAMESPACES
            or _is_shell(base) or source.kernel and isinstance(base, ast.Name) and base.id in source.names):
        return indices + (_stored(base, source) if isinstance(base, (ast.Subscript, ast.Attribute)) else [])
    return [*indices, base]


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
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.strip() in source.names:
        return True  # the name in a string read at run time: `getattr(m, '_exit_code')`, an annotation `'_exit_code'` (red team 39)
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
        return ("_" in source.names and DISPLAY_NUMBER.fullmatch(node.id) is not None) or node.id == "__main__"
    if isinstance(node, ast.Attribute):
        return node.attr in NAMESPACE_ATTRIBUTES or _namespace(node)
    if isinstance(node, ast.Call):
        # `vars(self)` reads an object's attributes; `vars()`, `globals()`, `dir()` the notebook's names
        return isinstance(node.func, ast.Name) and (node.func.id in EVERYTHING or node.func.id in NAMESPACES | {"dir"} and not node.args)
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
            found |= _bound(node) | _changed(node)  # whatever is bound or changed under such a test depends on it
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)) and _tainting(node.iter, source, tainted):
            found |= _bound(node) | _changed(node)
        elif isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))) and (
                any(_tainting(b, source, tainted) for b in node.body) or _tainting(node, source, tainted) and _reads_files(node)):
            found |= _bound(node) | _changed(node)  # whether the body raised (`x[0]` of an empty list, a missing file) picks what is bound
        elif isinstance(node, (ast.With, ast.AsyncWith)) and (any(_tainting(item.context_expr, source, tainted) for item in node.items)
                                                             or id(node) in (source.file_reads or set())):  # `with suppress(ImportError): import m`
            found |= _bound(node)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and _tainting(node.value, source, tainted):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if source.output:  # `sys.stdout = buf` swaps the stream, which only the reads of caught text see (_reads_caught), not `sys`
                targets = [t for t in targets if not _stream_target(t)]
            found |= {name for t in targets for name in (*_bound(t), _base_name(t)) if name}
            everything |= any(_namespace(t) for t in targets)
        elif isinstance(node, ast.NamedExpr) and _tainting(node.value, source, tainted):
            found.add(node.target.id)
        elif id(node) in (source.file_reads or ()) and _runs_script(node):
            everything = True  # `%run m.py` of a script a command may have written binds any name (red team 36)
        elif isinstance(node, ast.Call) and any(_tainting(arg, source, tainted) and not isinstance(arg, ast.Constant)
                                                for arg in [*node.args, *(k.value for k in node.keywords)]):
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


def _runs_script(node: ast.AST) -> bool:
    """`%run m.py` (also `%run -i`): the script's names become the notebook's."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "run_line_magic" and bool(node.args) and (
        isinstance(node.args[0], ast.Constant) and node.args[0].value == "run")


def _changed(node: ast.AST) -> set[str]:
    """The names whose objects a block may change without binding them (red team 39: `setattr(math,
    'sqrt', f)`, `[math][0].sqrt = f` under a test of a skipped value): every name in a store's
    target, setattr's and delattr's object, and a method's receiver (`torch.set_default_dtype`)."""
    names: set[str] = set()
    if isinstance(node, ast.IfExp):
        block: list[ast.AST] = [node.body, node.orelse]
    else:
        block = [s for field in ("body", "orelse", "finalbody") for s in getattr(node, field, []) if isinstance(s, ast.AST)]
        block += [s for handler in getattr(node, "handlers", []) for s in handler.body]
    for n in (m for statement in block for m in _walk_here(statement)):
        if isinstance(n, (ast.Attribute, ast.Subscript)) and isinstance(n.ctx, (ast.Store, ast.Del)):
            names |= {m.id for m in ast.walk(n.value) if isinstance(m, ast.Name)}
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("setattr", "delattr") and n.args:
            names |= {m.id for m in ast.walk(n.args[0]) if isinstance(m, ast.Name)}
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and _base_name(n.func.value):
            names.add(_base_name(n.func.value) or "")
    return names - {"", "print", "sys"}


def _walk_here(node: ast.AST) -> list[ast.AST]:
    """The nodes that run where the block runs: not the bodies of the functions and classes it defines."""
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        out.append(n)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stack.extend([*n.decorator_list, *getattr(n, "bases", [])])
        elif not isinstance(n, ast.Lambda):
            stack.extend(ast.iter_child_nodes(n))
    return out


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
        if source.kernel:
            out.append(Text(
                f"第 {source.cell} 个代码单元第 {source.line} 行 `{source.text}` 起，内核的状态与 Jupyter 中不同（评分时不运行的行在 Jupyter 中会改变它），"
                f"而之后读取了内核的状态（{reads_zh}）",
                f"from code cell {source.cell}, line {source.line} (`{source.text}`) on, the kernel's state differs from Jupyter's (lines that "
                f"do not run while grading change it there), and it is read after that ({reads_en})",
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
    elif source.kernel:
        what_zh, what_en = "对内核状态的改变", "the kernel state changed by"
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
