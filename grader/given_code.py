"""Given code: the parts of the exercise students are handed, not asked to write.

`fingerprint` reads the student template (at `grader assign` time) and keeps, per contract
name, the source of every given statement: whole methods (`release_request`, ...) and the
statements before and after each TODO (`raise NotImplementedError`).  `changed` compares a
submission's last definition of each name with it, statement by statement on the AST (so
formatting, comments, docstrings and type annotations do not count).  The grade then checks
the given behaviour too (grader/checks/given.py); an edit of given code never goes unsaid.
"""

from __future__ import annotations

import ast
import base64
import binascii
import dis
import hashlib
import json
import textwrap
import types
from functools import cache
from pathlib import Path
from typing import Any

from grader.cells import parse_cell
from grader.results import Text

CONTRACT = ("estimate_kv_cache_bytes", "Request", "KVCacheManager", "paged_attention")
FINGERPRINT = Path(__file__).with_name("given_code.json")


def fingerprint(template_source: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for node in ast.parse(template_source).body:
        if isinstance(node, ast.FunctionDef) and node.name in CONTRACT:
            found[node.name] = _function(node)
        elif isinstance(node, ast.ClassDef) and node.name in CONTRACT:
            found[node.name] = {"methods": {m.name: _function(m) for m in node.body if isinstance(m, ast.FunctionDef)}}
    return found


def _function(node: ast.FunctionDef) -> dict[str, Any]:
    body = _body(node)
    entry: dict[str, Any] = {"args": ast.unparse(_strip(node.args))}
    todo = next((i for i, stmt in enumerate(body) if _is_todo(stmt)), None)
    if todo is None:
        entry["whole"] = [ast.unparse(s) for s in body]
    else:
        entry["before"] = [ast.unparse(s) for s in body[:todo]]
        entry["after"] = [ast.unparse(s) for s in body[todo + 1 :]]
    return entry


def _is_todo(stmt: ast.stmt) -> bool:
    if not isinstance(stmt, ast.Raise) or stmt.exc is None:
        return False
    exc = stmt.exc.func if isinstance(stmt.exc, ast.Call) else stmt.exc
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"


def _body(node: ast.FunctionDef) -> list[ast.stmt]:
    """Statements that do something: no docstring, no bare `pass`."""
    body = list(node.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
        body = body[1:]
    return [s for s in body if not isinstance(s, ast.Pass)]


class _NoAnnotations(ast.NodeTransformer):
    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        if node.value is None:
            return ast.Pass()
        return ast.Assign(targets=[node.target], value=node.value, lineno=node.lineno)

    def visit_arg(self, node: ast.arg) -> ast.AST:
        node.annotation = None
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.returns = None
        return self.generic_visit(node)


def _strip(node: ast.AST) -> ast.AST:
    return _NoAnnotations().visit(node)


def _shape(source_or_node: str | ast.AST) -> str:
    """A statement (or its source) as a comparable string: the AST, without annotations."""
    try:
        node = ast.parse(source_or_node).body[0] if isinstance(source_or_node, str) else source_or_node
        return ast.dump(_strip(node))
    except (RecursionError, MemoryError):  # nested past Python's recursion limit: never the template's
        return "<nested too deeply to compare>"


@cache
def _load() -> dict[str, Any]:
    try:
        return json.loads(FINGERPRINT.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def changed(sources: list[str], reference: dict[str, Any] | None = None) -> list[Text]:
    """Where a submission's given code differs from the template's, in both languages."""
    given = _load() if reference is None else reference
    definitions: dict[str, ast.AST] = {}
    classes: dict[str, ast.ClassDef] = {}
    trees: list[ast.Module] = []
    for source in sources:
        try:
            tree = parse_cell(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        trees.append(tree)
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                classes[node.name] = node
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in CONTRACT:
                definitions[node.name] = node  # the last definition is the one that counts
    notes: list[Text] = _replaced_from_outside(trees, given)
    for name, spec in given.items():
        node = definitions.get(name)
        if node is None:
            continue  # a missing definition is reported by the items that need it
        if "methods" in spec:
            if not isinstance(node, ast.ClassDef):
                notes.append(_note(name, "不再是类", "is no longer a class"))
                continue
            methods = _methods(node, classes)
            for method, expected in spec["methods"].items():
                where = f"{name}.{method}"
                if method not in methods:
                    notes.append(_note(where, "被删除了", "was removed"))
                else:
                    notes.extend(_compare(where, methods[method], expected))
        elif isinstance(node, ast.FunctionDef):
            notes.extend(_compare(name, node, spec))
        else:
            notes.append(_note(name, "不再是函数", "is no longer a function"))
    return notes


def _replaced_from_outside(trees: list[ast.Module], given: dict[str, Any]) -> list[Text]:
    """Given methods rebound from outside their class: `Request.__init__ = f`, `setattr(...)`."""
    # Wholly given methods only: a TODO method written outside its class is the student's own way.
    given_methods = {name: {m for m, part in spec["methods"].items() if "whole" in part} for name, spec in given.items() if "methods" in spec}
    found: list[str] = []
    for tree in trees:
        for node in ast.walk(tree):
            targets: list[tuple[ast.expr, str | None]] = []
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                for target in node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]:
                    if isinstance(target, ast.Attribute):
                        targets.append((target.value, target.attr))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr") and len(node.args) >= 2:
                attr = node.args[1].value if isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str) else None
                targets.append((node.args[0], attr))
            for owner, attr in targets:
                if isinstance(owner, ast.Name) and owner.id in given_methods and (attr is None or attr in given_methods[owner.id]):
                    where = f"{owner.id}.{attr}" if attr else owner.id
                    if where not in found:
                        found.append(where)
    return [_note(where, "在类外被替换", "is replaced from outside the class") for where in found]


def _methods(node: ast.ClassDef, classes: dict[str, ast.ClassDef], seen: frozenset[str] = frozenset()) -> dict[str, ast.FunctionDef]:
    """A class's methods, with those it inherits from classes the submission defines (a mixin)."""
    found: dict[str, ast.FunctionDef] = {}
    for base in reversed(node.bases):  # the first base wins, as in Python's lookup
        name = base.id if isinstance(base, ast.Name) else ""
        if name in classes and name not in seen:
            found.update(_methods(classes[name], classes, seen | {node.name}))
    found.update({m.name: m for m in node.body if isinstance(m, ast.FunctionDef)})
    return found


def _compare(where: str, node: ast.FunctionDef, expected: dict[str, Any]) -> list[Text]:
    notes = []
    args = ast.parse(f"def f({expected['args']}): pass").body[0].args  # type: ignore[attr-defined]
    if _shape(args) != _shape(node.args):
        notes.append(_note(where, "的参数与模板不同", "has parameters other than the template's"))
    body = [_shape(s) for s in _body(node)]
    if "whole" in expected:
        if body != [_shape(s) for s in expected["whole"]]:
            notes.append(_note(where, "与模板不同", "differs from the template"))
        return notes
    before, after = [_shape(s) for s in expected["before"]], [_shape(s) for s in expected["after"]]
    if body[: len(before)] != before:
        notes.append(_note(where, "中 TODO 之前的给定语句与模板不同", "differs from the template in the statements before the TODO"))
    if after and body[-len(after) :] != after:
        notes.append(_note(where, "中 TODO 之后的给定语句与模板不同", "differs from the template in the statements after the TODO"))
    return notes


def _note(where: str, zh: str, en: str) -> Text:
    return Text(
        f"给定代码被修改：{where} {zh}（仍按提交的代码评分，给定代码的行为另行检查）",
        f"given code changed: {where} {en} (graded as submitted; the given behaviour is checked separately)",
    )


# -- what runs: the given methods as bound at grading time ----------------------------------------


def wholly_given(reference: dict[str, Any] | None = None) -> dict[str, list[str]]:
    """Per contract class, its methods that are given whole (no TODO in them)."""
    given = _load() if reference is None else reference
    return {name: [m for m, part in spec["methods"].items() if "whole" in part] for name, spec in given.items() if "methods" in spec}


@cache
def template_code() -> dict[str, str]:
    """The digest of each wholly given method's code as the template has it (see code_fingerprint)."""
    out: dict[str, str] = {}
    given = _load()
    for name, methods in wholly_given(given).items():
        for method in methods:
            part = given[name]["methods"][method]
            body = "\n".join(part["whole"]) or "pass"
            source = f"def {method}({part['args']}):\n" + textwrap.indent(body, "    ") + "\n"
            namespace: dict[str, Any] = {}
            exec(compile(source, "<template>", "exec", dont_inherit=True), namespace)  # the template's own text
            out[f"{name}.{method}"] = hashlib.sha256(code_fingerprint(namespace[method].__code__).encode()).hexdigest()
    return out


class _Shown:
    """A constant of a code object the worker read, standing for itself by the repr it had there."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


MAX_CODE_BYTES = 1 << 20


def _names(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) > 4096 or not all(isinstance(n, str) and 0 < len(n) <= 200 for n in value):
        raise ValueError("names that are not short strings")
    return tuple(value)


def rebuilt_code(parts: Any, depth: int = 0) -> types.CodeType:
    """A code object made from the parts the worker's grader thread read of a bound method
    (machinery.code_parts), only for its fingerprint to be taken (never run); ValueError when
    they are not parts of a code object."""
    if depth > 8 or not isinstance(parts, dict):
        raise ValueError("not the parts of a code object")
    args = parts.get("args")
    if not isinstance(args, list) or len(args) != 4 or not all(type(a) is int and 0 <= a < 1 << 31 for a in args):
        raise ValueError("argument counts that are not small ints")
    try:
        bytecode = base64.b64decode(str(parts.get("code")), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("bytecode that is not base64") from None
    if len(bytecode) % 2 or len(bytecode) > MAX_CODE_BYTES:
        raise ValueError("bytecode of an impossible length")
    consts: list[Any] = []
    for const in parts.get("consts") if isinstance(parts.get("consts"), list) else []:
        if isinstance(const, dict) and "code" in const:
            consts.append(rebuilt_code(const["code"], depth + 1))
        elif isinstance(const, dict) and isinstance(const.get("repr"), str):
            consts.append(_Shown(const["repr"][:2000]))
        else:
            consts.append(_Shown("<a constant the worker could not show>"))
    varnames = _names(parts.get("varnames"))
    argcount, posonly, kwonly, flags = args
    return types.CodeType(argcount, posonly, kwonly, len(varnames), 1 << 16, flags, bytecode, tuple(consts), _names(parts.get("names")),
                          varnames, "<bound>", "bound", "bound", 1, b"", b"", _names(parts.get("freevars")), _names(parts.get("cellvars")))


def bound_digest(parts: Any) -> str:
    """The digest of a method's code as bound when graded (see template_code), from its parts;
    or what the worker found instead ("missing", "not a class", ...)."""
    if isinstance(parts, str):
        return parts[:100]
    try:
        return hashlib.sha256(code_fingerprint(rebuilt_code(parts)).encode()).hexdigest()
    except (ValueError, TypeError, IndexError, KeyError, RecursionError, SystemError):
        return "unreadable"


def code_fingerprint(code: types.CodeType, depth: int = 0) -> str:
    """What a function's code does, independent of where it was written: the instructions with
    their arguments resolved (constants, names, nested code), the argument counts and locals.
    Line numbers, file, qualified name and docstring are left out, and compiler flags other
    than the code's own kind (a `from __future__` import), so the template's method compiled
    by the judge and the same method in a notebook cell compare equal.  Taken by the judge only:
    of the template's code, and of the bound code's parts the worker sends (`rebuilt_code`)."""
    if depth > 8:
        return "<too deep>"
    parts = [
        f"args {code.co_argcount} {code.co_posonlyargcount} {code.co_kwonlyargcount} flags {code.co_flags & 0xFFFF}",
        f"locals {code.co_varnames!r} free {code.co_freevars!r} cells {code.co_cellvars!r}",
    ]
    for instruction in dis.get_instructions(code):
        if instruction.opname in ("CACHE", "RESUME", "NOP"):
            continue
        arg = instruction.argval
        if type(arg) is type(code):
            arg = "{" + code_fingerprint(arg, depth + 1) + "}"
        else:
            arg = repr(arg)
        # A call of an imported module's function compiles to LOAD_ATTR when the import is in the
        # same cell or module (CPython 3.11's is_import_originated), to LOAD_METHOD otherwise.
        name = "LOAD_ATTR" if instruction.opname == "LOAD_METHOD" else instruction.opname
        parts.append(f"{name} {arg}")
    return "\n".join(parts)


def bound_changes(bound: dict[str, str], noted: list[Text]) -> list[Text]:
    """Given methods whose code, as bound when graded, is not the template's; not those the
    source comparison already named."""
    template = template_code()
    said = " ".join(note.en for note in noted)
    notes = []
    for where, digest in bound.items():
        if where not in template or digest == template[where] or f" {where} " in said:
            continue
        how_zh = {"missing": "不存在", "not a class": "所在的名字不再是类"}.get(digest, "与模板的代码不同")
        how_en = {"missing": "is missing", "not a class": "belongs to a name that is no longer a class"}.get(digest, "is not the template's code")
        notes.append(Text(
            f"给定代码被修改：评分时实际绑定的 {where} {how_zh}（装饰器、子类、setattr 或之后的赋值？仍按提交的代码评分，给定代码的行为另行检查）",
            f"given code changed: {where}, as bound when graded, {how_en} (a decorator, a subclass, setattr or a later assignment? graded as submitted; the given behaviour is checked separately)",
        ))
    return notes
