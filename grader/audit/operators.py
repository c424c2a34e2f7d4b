"""Mutation operators: the small, realistic mistakes the audit plants, one at a time.

Written on the stdlib ``ast`` rather than taken from a library, because:

- the mutations the audit needs are domain ones that the libraries lack: a wrong ``dim=``,
  other ``transpose`` axes, ``pop(0)`` -> ``pop()``, a dropped ``.float()``, keys read
  from the value cache, ``ceil`` -> ``floor``, slice bounds off by one or dropped.  cosmic-ray
  and mutmut bring comparison, arithmetic and constant operators, and each drives its own
  run over whole files (a session database, a trampoline import hook), not over the
  answer regions of one source file;
- the mutated text must be the reference module that ``assign`` builds, changed in one
  place only, so that the diff a survivor shows is the one line that changed: positions
  from ``ast`` plus ``ast.unparse`` of the one replaced node give that, and every splice
  is checked by parsing it again (see ``mutants``);
- a new dependency would be installed by every student and CI run of the grader, for a
  tool only the course staff run.  (libcst 1.9, mutmut 3.8 and cosmic-ray 8.7 all install
  here; libcst's lossless tree would spare the re-parse check, at the price of a compiled
  dependency for what is, here, always a one-node replacement.)

An operator looks at one node and yields replacements for it: a new node, or ``None`` to
drop a statement.  It never edits the tree it is given.  Operator names are part of each
mutant's id (grader/audit/mutants.py), so renaming one orphans its reviewed equivalents.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

CMP = (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)
ARITH = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod)
NON_COMMUTATIVE = (ast.Sub, ast.Div, ast.FloorDiv, ast.Mod, ast.MatMult, ast.Pow)
DIMS = (0, 1, -1, -2)
TRANSPOSE_AXES = ((0, 1), (0, 2), (1, 2))
# Functions and methods students mix up; each has the other's signature.
API_SWAPS = {"ceil": "floor", "floor": "ceil", "cat": "stack", "extend": "append"}
# Methods whose one argument is optional and changes what they do when left out.
OPTIONAL_ARG = ("pop", "squeeze")
EXCEPTIONS = {"RuntimeError": "ValueError", "ValueError": "RuntimeError"}


@dataclass
class Context:
    """What operators need to know beyond one node: parents, imported modules, name pairs."""

    tree: ast.Module
    parents: dict[ast.AST, ast.AST] = field(default_factory=dict)
    modules: set[str] = field(default_factory=set)
    _confusable: dict[ast.AST, dict[str, tuple[str, ...]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for parent in ast.walk(self.tree):
            for child in ast.iter_child_nodes(parent):
                self.parents[child] = parent
        for node in self.tree.body:
            if isinstance(node, ast.Import):
                self.modules.update((a.asname or a.name).split(".")[0] for a in node.names)

    def function_of(self, node: ast.AST) -> ast.AST | None:
        while node in self.parents:
            node = self.parents[node]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return node
        return None

    def confusable(self, node: ast.AST) -> tuple[str, ...]:
        """Other names of the enclosing function that one could write by mistake for this Name."""
        assert isinstance(node, ast.Name)
        function = self.function_of(node)
        if function is None:
            return ()
        if function not in self._confusable:
            self._confusable[function] = confusable_names(function)
        return self._confusable[function].get(node.id, ())

    def in_message(self, node: ast.AST) -> bool:
        """Inside an f-string: the wording of a message, which no contract fixes."""
        while node in self.parents:
            node = self.parents[node]
            if isinstance(node, ast.JoinedStr):
                return True
        return False

    def is_module(self, node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and node.id in self.modules


def confusable_names(function: ast.AST) -> dict[str, tuple[str, ...]]:
    """Pairs of names a student confuses: ``key_cache``/``value_cache`` (one word differs),
    ``num_heads``/``num_kv_heads`` (one word more), and twins assigned by the same expression
    up to names (``keys = key_cache[...]`` and ``values = value_cache[...]``)."""
    names: set[str] = set()
    twins: dict[str, set[str]] = {}
    assert isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
    names.update(a.arg for a in [*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs])
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            twins.setdefault(_skeleton(node.value), set()).add(node.targets[0].id)
    pairs: dict[str, set[str]] = {name: set() for name in names}
    for a in names:
        for b in names:
            if a != b and _one_word_apart(a.split("_"), b.split("_")):
                pairs[a].add(b)
    for group in twins.values():
        for a in group:
            pairs[a].update(group - {a})
    return {name: tuple(sorted(others)) for name, others in pairs.items() if others}


def _one_word_apart(a: list[str], b: list[str]) -> bool:
    if len(a) < 2 or len(b) < 2:
        return False  # single words (i, q, out) are not confusable by spelling
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b, strict=True)) == 1
    short, long = sorted((a, b), key=len)
    return len(long) == len(short) + 1 and any(long[:i] + long[i + 1 :] == short for i in range(len(long)))


def _skeleton(node: ast.AST) -> str:
    erased = copy.deepcopy(node)
    for sub in ast.walk(erased):
        if isinstance(sub, ast.Name):
            sub.id = "_"
    return ast.dump(erased)


# -- helpers ---------------------------------------------------------------------------


def _int(value: int) -> ast.expr:
    """An int literal as the parser builds it (a negative one is unary minus on a positive)."""
    return ast.UnaryOp(ast.USub(), ast.Constant(-value)) if value < 0 else ast.Constant(value)


def int_value(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = int_value(node.operand)
        return None if inner is None else -inner
    return None


def _plus(node: ast.expr, delta: int) -> ast.expr:
    value = int_value(node)
    if value is not None:
        return _int(value + delta)
    return ast.BinOp(copy.deepcopy(node), ast.Add() if delta > 0 else ast.Sub(), ast.Constant(abs(delta)))


def _method(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None


def _is_statement_call(node: ast.AST, ctx: Context) -> bool:
    """A call whose value is thrown away (``x.extend(y)`` on its own line)."""
    return isinstance(ctx.parents.get(node), ast.Expr)


# -- the operators -----------------------------------------------------------------------

Replacement = ast.AST | list[ast.stmt] | None  # a list: statements on the one's line (`a; b`)
Operator = Callable[[ast.AST, Context], Iterator[Replacement]]


def comparison(node: ast.AST, ctx: Context) -> Iterator[Replacement]:
    """``<`` for ``<=``, ``>`` for ``<``, ``==`` for ``!=``...: boundaries and directions."""
    if isinstance(node, ast.Compare):
        for index, op in enumerate(node.ops):
            if isinstance(op, CMP):
                for other in CMP:
                    if not isinstance(op, other):
                        new = copy.deepcopy(node)
                        new.ops[index] = other()
                        yield new


def negate_condition(node: ast.AST, ctx: Context) -> Iterator[Replacement]:
    """``if x`` for ``if not x`` and back."""
    parent = ctx.parents.get(node)
    if isinstance(parent, (ast.If, ast.While, ast.IfExp)) and parent.test is node:
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            yield copy.deepcopy(node.operand)
        else:
            yield ast.UnaryOp(ast.Not(), copy.deepcopy(node))


def arithmetic(node: ast.AST, ctx: Context) -> Iterator[Replacement]:
    """Each of ``+ - * / // %`` for each other; ``@`` for ``*`` (broadcasting instead of a product)."""
    if isinstance(node, ast.BinOp):
        others: tuple[type[ast.operator], ...] = ()
        if isinstance(node.op, ARITH):
            others = tuple(op for op in ARITH if not isinstance(node.op, op))
        elif isinstance(node.op, ast.MatMult):
            others = (ast.Mult,)
        for op in others:
            yield ast.BinOp(copy.deepcopy(node.left), op(), copy.deepcopy(node.right))


def swap_operands(node: ast.AST, ctx: Context) -> Iterator[Replacement]:
    """``b - a`` for ``a - b`` where order matters."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, NON_COMMUTATIVE):
        yield ast.BinOp(copy.deepcopy(node.right), copy.deepcopy(node.op), copy.deepcopy(node.left))


def drop_term(node: ast.AST, ctx: Context) -> Iterator[Replacement]:
    """``a * b`` -> ``a`` and -> ``b``: a factor or a term forgotten."""
    if isinstance(node, ast.BinOp):
        yield copy.deepcopy(node.left)
        yield copy.deepcopy(node.right)


def constant(node: ast.AST, ctx: Context) -> Iterator[Replacement]:
    """Integer literals one up and one down (``-1`` counts as one literal)."""
    parent = ctx.parents.get(node)
    if isinstance(node, ast.Constant) and isinstance(parent, ast.UnaryOp) and int_value(parent) is not None:
        return  # the minus and its literal are mutated together, as one number
    value = int_value(node)
    if value is not None:
        yield _int(value + 1)
        yield _int(value - 1)


def slice_bounds(node: ast.AST, ctx: Context) -> Iterator[Replacement]:
    """Each bound of each slice one up, one down, or left out; a missing start becomes 1.

    The whole subscript is replaced: a slice on its own does not unparse inside a tuple."""
    if not isinstance(node, ast.Subscript):
        return
    parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    for index, part in enumerate(parts):
        if not isinstance(part, ast.Slice):
            continue
        for bound in ("lower", "upper"):
            value = getattr(part, bound)
            if value is None:
                options = [ast.Constant(1)] if bound == "lower" else []
            else:
                options = [_plus(value, 1), _plus(value, -1), None]
            for option in options:
                new = copy.deepcopy(node)
                new_parts = new.slice.elts if isinstance(new.slice, ast.Tuple) else [new.slice]
                setattr(new_parts[index], bound, option)
                yield new


def swap_arguments(node: ast.AST, ctx: Context) -> Iterator[Replacement]:
    """Two neighbouring positional arguments of a call in each other's place."""
    if isinstance(node, ast.Call) and not any(isinstance(a, ast.Starred) for a in node.args):
        for index in range(len(node.args) - 1):
            new = copy.deepcopy(node)
            new.args[index], new.args[index + 1] = new.args[index + 1], new.args[index]
            yield new


def swap_indices(node: ast.AST, ctx: Context) -> Iterator[Replacement]:
    """``x[j, i]`` for ``x[i, j]``."""
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple):
        for index in range(len(node.slice.elts) - 1):
            new = copy.deepcopy(node)
            elts = new.slice.elts
            elts[index], elts[index + 1] = elts[index + 1], elts[index]
            yield new


def wrong_dim(node: ast.AST, ctx: Context) -> Iterator[Replacement]:
    """Another ``dim=`` (0, 1, -1, -2) or none at all; ``transpose`` of other axes."""
    if not isinstance(node, ast.Call):
        return
    for index, keyword in enumerate(node.keywords):
        current = int_value(keyword.value)
        if keyword.arg != "dim" or current is None:
            continue
        for dim in DIMS:
            if dim != current:
                new = copy.deepcopy(node)
                new.keywords[index].value = _int(dim)
                yield new
        new = copy.deepcopy(node)
        del new.keywords[index]
        yield new
    if _method(node) == "transpose" and len(node.args) == 2:
        axes = tuple(int_value(a) for a in node.args)
        if None not in axes:
            for pair in TRANSPOSE_AXES:
                if set(pair) != set(axes):
                    new = copy.deepcopy(node)
                    new.args = [_int(pair[0]), _int(pair[1])]
                    yield new


def drop_method(node: ast.AST, ctx: Context) -> Iterator[Replacement]:
    """``x.float()`` -> ``x``, ``x.transpose(0, 1)`` -> ``x``: one step of a chain left out."""
    if _method(node) is None or _is_statement_call(node, ctx):
        return
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    if not ctx.is_module(node.func.value):  # torch.cat(x) -> torch is no mistake anyone makes
        yield copy.deepcopy(node.func.value)


def unwrap_call(node: ast.AST, ctx: Context) -> Iterator[Replacement]:
    """``int(x)`` -> ``x``, ``math.ceil(x)`` -> ``x``: a function of one argument left out."""
    if not isinstance(node, ast.Call) or node.keywords or len(node.args) != 1 or _is_statement_call(node, ctx):
        return
    if isinstance(ctx.parents.get(node), ast.Raise):
        return  # `raise "message"` is a TypeError, not a mistake about the contract
    func = node.func
    if isinstance(func, ast.Name) or (isinstance(func, ast.Attribute) and ctx.is_module(func.value)):
        if not isinstance(node.args[0], ast.Starred):
            yield copy.deepcopy(node.args[0])


def swap_api(node: ast.AST, ctx: Context) -> Iterator[Replacement]:
    """``floor`` for ``ceil``, ``stack`` for ``cat``, ``append`` for ``extend``."""
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if name in API_SWAPS:
            new = copy.deepcopy(node)
            if isinstance(new.func, ast.Attribute):
                new.func.attr = API_SWAPS[name]
            else:
                assert isinstance(new.func, ast.Name)
                new.func.id = API_SWAPS[name]
            yield new


def drop_argument(node: ast.AST, ctx: Context) -> Iterator[Replacement]:
    """``pop(0)`` -> ``pop()``, ``squeeze(1)`` -> ``squeeze()``."""
    if _method(node) in OPTIONAL_ARG:
        assert isinstance(node, ast.Call)
        if len(node.args) == 1 and not node.keywords:
            new = copy.deepcopy(node)
            new.args = []
            yield new


def exception_type(node: ast.AST, ctx: Context) -> Iterator[Replacement]:
    """``raise ValueError(...)`` where the contract says ``RuntimeError``, and back."""
    parent = ctx.parents.get(node)
    if (
        isinstance(node, ast.Name)
        and node.id in EXCEPTIONS
        and isinstance(parent, ast.Call)
        and parent.func is node
        and isinstance(ctx.parents.get(parent), ast.Raise)
    ):
        yield ast.Name(EXCEPTIONS[node.id], ast.Load())


def confused_name(node: ast.AST, ctx: Context) -> Iterator[Replacement]:
    """``key_cache`` where ``value_cache`` belongs, ``keys`` for ``values``, ``num_heads`` for ``num_kv_heads``."""
    parent = ctx.parents.get(node)
    if (
        isinstance(node, ast.Name)
        and isinstance(node.ctx, ast.Load)
        and not (isinstance(parent, ast.Call) and parent.func is node)
    ):
        for other in ctx.confusable(node):
            yield ast.Name(other, ast.Load())


def iteration_order(node: ast.AST, ctx: Context) -> Iterator[Replacement]:
    """``for b in sorted(table)``: the blocks walked in physical order instead of the table's."""
    parent = ctx.parents.get(node)
    if isinstance(parent, (ast.For, ast.comprehension)) and parent.iter is node:
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("range", "sorted")):
            yield ast.Call(ast.Name("sorted", ast.Load()), [copy.deepcopy(node)], [])


def drop_statement(node: ast.AST, ctx: Context) -> Iterator[Replacement]:
    """A statement left out (a whole ``if`` or loop included)."""
    if isinstance(node, ast.stmt):
        yield None


def _expr(code: str) -> ast.expr:
    return ast.parse(code, mode="eval").body


def _self_and_req(function: ast.AST | None) -> bool:
    if not isinstance(function, ast.FunctionDef):
        return False
    names = [a.arg for a in function.args.args]
    return names[:2] == ["self", "req"]


def _returns_tensor(function: ast.AST | None) -> bool:
    return isinstance(function, ast.FunctionDef) and isinstance(function.returns, ast.Attribute) and function.returns.attr == "Tensor"


SIMPLE = (ast.Expr, ast.Assign, ast.AugAssign, ast.Delete)


def pool_write(node: ast.AST, ctx: Context) -> Iterator[Replacement]:
    """A write into the pool from an allocator operation or a read: after a statement of a
    KVCacheManager method, the unused tail of the request's last block cleared (the K/V of
    tokens to come, which no read should see and no allocation or read should touch)."""
    if not isinstance(node, SIMPLE) or not _self_and_req(ctx.function_of(node)):
        return
    write = ast.parse("self.physical_kv_cache[req.block_table[-1], (req.seq_len - 1) % self.block_size + 1:] = 0").body[0]
    yield [copy.deepcopy(node), write]


def return_alias(node: ast.AST, ctx: Context) -> Iterator[Replacement]:
    """A returned tensor that is an internal buffer: the same storage every call (kept on the
    object or the function), so a later call changes what an earlier one returned; and a
    one-block fast path that returns a view of the pool instead of a copy."""
    if not isinstance(node, ast.Return) or node.value is None:
        return
    function = ctx.function_of(node)
    if not _returns_tensor(function):
        return
    assert isinstance(function, ast.FunctionDef)
    owner = "self" if _self_and_req(function) else function.name
    value = ast.unparse(node.value)
    yield ast.Return(_expr(f"(lambda v: {owner}.__dict__.setdefault('_result', v.clone()).resize_(v.shape).copy_(v))({value})"))
    inner = node.value
    if (
        isinstance(inner, ast.Subscript)
        and isinstance(inner.value, ast.Call)
        and _method(inner.value) == "cat"
        and inner.value.args
        and isinstance(inner.value.args[0], ast.Name)
    ):
        parts = inner.value.args[0].id
        view = ast.Subscript(ast.Subscript(ast.Name(parts, ast.Load()), ast.Constant(0), ast.Load()), copy.deepcopy(inner.slice), ast.Load())
        test = _expr(f"len({parts}) == 1")
        yield ast.Return(ast.IfExp(test, view, copy.deepcopy(inner)))


def container_type(node: ast.AST, ctx: Context) -> Iterator[Replacement]:
    """A list of the contract (a block table, the free list) left as a tuple: `t.append(x)` ->
    `t = (*t, x)`, `t.extend(xs)` -> `t = (*t, *xs)`."""
    if not isinstance(node, ast.Expr) or _method(node.value) not in ("append", "extend"):
        return
    call = node.value
    assert isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
    target = call.func.value
    if not isinstance(target, ast.Attribute) or len(call.args) != 1:
        return
    added = ast.Starred(copy.deepcopy(call.args[0]), ast.Load()) if call.func.attr == "extend" else copy.deepcopy(call.args[0])
    store = copy.deepcopy(target)
    store.ctx = ast.Store()
    yield ast.Assign([store], ast.Tuple([ast.Starred(copy.deepcopy(target), ast.Load()), added], ast.Load()), lineno=node.lineno)


# Order matters: it is the order of the mutants, and the first of two mutants that give the
# same module is the one kept.
OPERATORS: tuple[tuple[str, Operator], ...] = (
    ("cmp", comparison),
    ("negate", negate_condition),
    ("arith", arithmetic),
    ("swap-operands", swap_operands),
    ("drop-term", drop_term),
    ("const", constant),
    ("slice", slice_bounds),
    ("swap-args", swap_arguments),
    ("swap-index", swap_indices),
    ("dim", wrong_dim),
    ("drop-method", drop_method),
    ("unwrap", unwrap_call),
    ("api", swap_api),
    ("drop-arg", drop_argument),
    ("exception", exception_type),
    ("name", confused_name),
    ("order", iteration_order),
    ("drop-stmt", drop_statement),
    ("pool-write", pool_write),
    ("alias", return_alias),
    ("container", container_type),
)


def mutations(node: ast.AST, ctx: Context) -> Iterator[tuple[str, Replacement]]:
    """Every (operator name, replacement) for one node, in a fixed order."""
    if ctx.in_message(node):
        return
    for name, operator in OPERATORS:
        for replacement in operator(node, ctx):
            yield name, replacement
