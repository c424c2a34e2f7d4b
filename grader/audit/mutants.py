"""Every mutant of the exercise: one operator applied once, in one solution region.

A mutation is made on the source text, not by unparsing the whole tree, so the mutant is the
reference module `assign` builds with exactly the replaced node changed (comments, layout
and the other lines as they were), and its diff is that line.  Each splice is parsed again
and compared with the tree the operator meant; a splice that differs is retried with
parentheses (``c - a + b`` must read ``c - (a + b)``) and dropped if it still differs.

A mutant's id is built from its operator, its TODO and the lines it changes, never from
line numbers, so it survives edits elsewhere in the source: the reviewed list of
equivalent mutants refers to mutants by it.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import hashlib
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from grader.audit import tamper
from grader.audit.operators import Context, Replacement, mutations
from grader.audit.regions import GIVEN, Region, find_regions, given_regions, reference_module

DIFF_CONTEXT = 2  # lines of context around a survivor's change
# Families planted in answers only: the frame conditions they break are the TODO calls' (docs/contract.md).
ANSWER_ONLY = ("pool-write", "alias", "container")


@dataclass(frozen=True)
class Mutant:
    id: str
    todo: str
    operator: str
    line: int  # where in the source (for the reader; not part of the id)
    removed: tuple[str, ...]  # the reference module's lines this mutant changes
    added: tuple[str, ...]  # what they become
    diff: str  # unified diff against the reference module
    module: str  # the whole mutant module
    invalid: str = ""  # why it cannot be graded (it does not compile); empty when it can
    graded_by: str = ""  # a given mutant: the TODO whose items it is graded with

    @property
    def summary(self) -> str:
        """The change on one line: ``old -> new`` (the first line of each side)."""
        old = self.removed[0].strip() if self.removed else ""
        new = self.added[0].strip() if self.added else "(line removed)"
        more = " ..." if max(len(self.removed), len(self.added)) > 1 else ""
        return f"{old}  ->  {new}{more}"


def generate(source_text: str) -> list[Mutant]:
    """All distinct mutants of the source, in source order and then operator order."""
    reference = reference_module(source_text)
    tree = ast.parse(source_text)
    ctx = Context(tree)
    lines = source_text.splitlines(keepends=True)
    regions = find_regions(source_text)
    regions += given_regions(source_text, regions)  # given code: its mutants are killed by a finding, not by points
    seen: set[str] = {reference}
    occurrences: dict[str, int] = {}
    out: list[Mutant] = []
    for node, region in _nodes_in(tree, regions):
        for operator, replacement in mutations(node, ctx):
            if region.todo == GIVEN and operator in ANSWER_ONLY:
                continue
            text = splice(source_text, lines, tree, ctx, node, replacement)
            if text is None:
                continue
            module = reference_module(text)
            if module in seen:  # the same program as the answer or as an earlier mutant
                continue
            seen.add(module)
            mutant = _mutant(reference, module, operator, region.todo, node.lineno, occurrences)
            out.append(dataclasses.replace(mutant, graded_by=region.graded_by) if region.graded_by else mutant)
    return out + _tamper_twins(out, reference)


def _tamper_twins(found: list[Mutant], reference: str) -> list[Mutant]:
    """A `tamper` twin of each mutant of the frame families: its module with tamper.HUNT at the end."""
    out = []
    for mutant in found:
        if mutant.operator not in tamper.FAMILIES or mutant.invalid:
            continue
        module = mutant.module.rstrip("\n") + "\n" + tamper.HUNT
        diff = difflib.unified_diff(reference.splitlines(), module.splitlines(), "reference/paged_attention.py", "mutant", n=DIFF_CONTEXT, lineterm="")
        digest = hashlib.sha1(f"{tamper.OPERATOR}\x1f{mutant.id}".encode()).hexdigest()[:8]
        out.append(dataclasses.replace(mutant, id=f"{mutant.todo}-{tamper.OPERATOR}-{digest}", operator=tamper.OPERATOR,
                                       added=(*mutant.added, "(and the hunt for the grader's observers)"), diff="\n".join(diff), module=module))
    return out


def _nodes_in(tree: ast.Module, regions: list[Region]) -> Iterator[tuple[ast.AST, Region]]:
    found = []
    for index, node in enumerate(ast.walk(tree)):
        first, last = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        if first is None or last is None:
            continue
        for region in regions:
            if region.holds(first, last):
                # Outer nodes before inner ones at the same place; walk order breaks ties.
                found.append(((first, node.col_offset, -last, -(node.end_col_offset or 0), index), node, region))
    for _, node, region in sorted(found, key=lambda item: item[0]):
        yield node, region


def _mutant(reference: str, module: str, operator: str, todo: str, line: int, occurrences: dict[str, int]) -> Mutant:
    diff_lines = list(
        difflib.unified_diff(
            reference.splitlines(),
            module.splitlines(),
            "reference/paged_attention.py",
            "mutant",
            n=DIFF_CONTEXT,
            lineterm="",
        )
    )
    body = [d for d in diff_lines if not d.startswith(("---", "+++", "@@"))]
    removed = tuple(d[1:] for d in body if d.startswith("-"))
    added = tuple(d[1:] for d in body if d.startswith("+"))
    key = "\x1f".join((operator, todo, "\n".join(r.strip() for r in removed), "\n".join(a.strip() for a in added)))
    # Two mutants can change the same lines the same way at two places; number them.
    occurrence = occurrences.get(key, 0)
    occurrences[key] = occurrence + 1
    digest = hashlib.sha1(f"{key}\x1f{occurrence}".encode()).hexdigest()[:8]
    try:
        compile(module, "mutant.py", "exec")
        invalid = ""
    except (SyntaxError, ValueError) as error:
        invalid = f"does not compile: {error}"
    return Mutant(
        f"{todo}-{operator}-{digest}", todo, operator, line, removed, added, "\n".join(diff_lines), module, invalid
    )


# -- splicing one replacement into the source text ------------------------------------------------


def splice(
    text: str, lines: list[str], tree: ast.Module, ctx: Context, node: ast.AST, replacement: Replacement
) -> str | None:
    """The source with `node` replaced (or, for None, the statement dropped), or None when the
    text cannot say exactly that."""
    top = _top_statement(tree, ctx, node)
    expected = _expected_dump(tree, ctx, node, replacement, top or tree)
    if expected is None:
        return None
    if replacement is None:
        candidates = [_drop_lines(lines, ctx, node)]
    elif isinstance(replacement, list):  # statements on the statement's own line: `a; b`
        candidates = [_replace_span(lines, node, "; ".join(ast.unparse(s) for s in replacement))]
    else:
        new = ast.unparse(replacement)
        candidates = [_replace_span(lines, node, new), _replace_span(lines, node, f"({new})")]
    for candidate in candidates:
        if candidate is None:
            continue
        try:
            parsed = ast.parse(candidate)
        except SyntaxError:
            continue
        if top is None:
            if ast.dump(parsed) == expected:
                return candidate
        elif _others_in_place(parsed, tree, top, candidate.count("\n") - text.count("\n")):
            # Every other top-level statement is the same text at the same place, so the two
            # trees are equal exactly when the changed statement is: dump that one alone.
            if ast.dump(parsed.body[tree.body.index(top)]) == expected:
                return candidate
        elif ast.dump(parsed) == _expected_dump(tree, ctx, node, replacement, tree):
            return candidate
    return None


def _top_statement(tree: ast.Module, ctx: Context, node: ast.AST) -> ast.stmt | None:
    """The module-level statement that holds `node`; None when `node` is one itself."""
    parent = ctx.parents.get(node)
    if parent is None or parent is tree:
        return None
    while ctx.parents.get(parent) is not tree:
        parent = ctx.parents.get(parent)
        if parent is None:
            return None
    return parent  # type: ignore[return-value]


def _others_in_place(parsed: ast.Module, tree: ast.Module, top: ast.stmt, shift: int) -> bool:
    """The splice changed text inside `top` only; the other statements begin and end where they
    did (`shift` lines later after it), so each parsed from the same text as before."""
    if len(parsed.body) != len(tree.body):
        return False
    after = False
    for old, new in zip(tree.body, parsed.body, strict=True):
        if old is top:
            after = True
            continue
        delta = shift if after else 0
        if (new.lineno, new.end_lineno, new.col_offset, new.end_col_offset) != (
            old.lineno + delta, (old.end_lineno or 0) + delta, old.col_offset, old.end_col_offset
        ):
            return False
    return True


def _expected_dump(tree: ast.Module, ctx: Context, node: ast.AST, replacement: Replacement, root: ast.AST) -> str | None:
    """The tree the operator means, dumped from `root` (the module, or the statement holding the
    node): the node swapped in place, dumped, swapped back."""
    parent = ctx.parents.get(node)
    if parent is None:
        return None
    for name, value in ast.iter_fields(parent):
        if value is node:
            if replacement is None or isinstance(replacement, list):
                return None  # only statements in a body can be dropped or added to
            setattr(parent, name, replacement)
            try:
                return ast.dump(root)
            finally:
                setattr(parent, name, node)
        if isinstance(value, list) and any(item is node for item in value):
            index, saved = next(i for i, item in enumerate(value) if item is node), list(value)
            if replacement is None:
                # A body left empty is not Python: the dropped statement becomes `pass`.
                value[index : index + 1] = [] if len(value) > 1 else [ast.Pass()]
            elif isinstance(replacement, list):
                value[index : index + 1] = replacement
            else:
                value[index] = replacement
            try:
                return ast.dump(root)
            finally:
                value[:] = saved
    return None


def _replace_span(lines: list[str], node: ast.AST, new: str) -> str | None:
    # ast columns count UTF-8 bytes; the source has Chinese text in its messages.
    first, last = node.lineno - 1, node.end_lineno - 1  # type: ignore[attr-defined]
    head = lines[first].encode()[: node.col_offset].decode()  # type: ignore[attr-defined]
    tail = lines[last].encode()[node.end_col_offset :].decode()  # type: ignore[attr-defined]
    return "".join(lines[:first]) + head + new + tail + "".join(lines[last + 1 :])


def _drop_lines(lines: list[str], ctx: Context, node: ast.AST) -> str | None:
    first, last = node.lineno - 1, node.end_lineno - 1  # type: ignore[attr-defined]
    indent = lines[first][: len(lines[first]) - len(lines[first].lstrip())]
    if len(indent.encode()) != node.col_offset:  # type: ignore[attr-defined]
        return None  # not alone at the start of its line (`a = 1; b = 2`)
    rest = lines[last].encode()[node.end_col_offset :].decode().strip()  # type: ignore[attr-defined]
    if rest and not rest.startswith("#"):
        return None
    parent = ctx.parents[node]
    alone = any(isinstance(v, list) and len(v) == 1 and v[0] is node for _, v in ast.iter_fields(parent))
    middle = [indent + "pass\n"] if alone else []
    return "".join(lines[:first] + middle + lines[last + 1 :])


# -- choosing mutants ------------------------------------------------------------------------


def select(mutants: Iterable[Mutant], todo: str | None = None) -> list[Mutant]:
    return [m for m in mutants if todo is None or m.todo == todo]


def sample(mutants: list[Mutant], size: int, seed: int) -> list[Mutant]:
    """A fixed sample: the same mutants, seed and size give the same sample, in source order.

    The TODOs take turns (each in its own seeded shuffle), so a small sample still has
    mutants of every TODO, which a plain random pick of 30 from hundreds would not promise."""
    rng = random.Random(seed)
    by_todo: dict[str, list[Mutant]] = {}
    for mutant in mutants:
        by_todo.setdefault(mutant.todo, []).append(mutant)
    queues = []
    for todo in sorted(by_todo):
        queue = list(by_todo[todo])
        rng.shuffle(queue)
        queues.append(queue)
    chosen: set[str] = set()
    while len(chosen) < min(size, len(mutants)):
        for queue in queues:
            if queue and len(chosen) < size:
                chosen.add(queue.pop().id)
    return [m for m in mutants if m.id in chosen]
