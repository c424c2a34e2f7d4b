"""How the judge's model of an allocator (grader/checks/pool.py) writes its reproduction.

Each step is written as it ran.  A step where the submission broke another item's property,
and every step after it, is wrapped in try/except, so that the script runs on to the failing
step on the student's code, and runs clean after a correct solution (whose state may differ
from there on).  No except swallows what the student's code raised: the class it raised is
caught by name and printed, and a comment says what went wrong there; after a step that
raised nothing, only what a correct solution may raise there is caught (an OOM, or refusing
a request its own state holds blocks for).  The failing step's checks are written relative to
the state right before it, as the model checks them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from grader.checks.pool_state import State
from grader.checks.script import Line
from grader.results import Text

if TYPE_CHECKING:
    from grader.checks.pool import Pool, Req

Assert = tuple[str, ...]  # (condition, f-string message in English[, in Chinese])


@dataclass
class Outcome:
    """One TODO call as the model saw it, with what the reproduction needs to show it."""

    step: str  # the call, as code
    start: int  # where its lines begin in the script
    capture: str  # code saving the state the checks compare with
    before: State
    after: State
    req: Req
    others_changed: list[str]
    error: dict[str, Any] | None = None  # what the call raised (the reply's error), None: it returned
    oom_expected: bool = False  # too few blocks free: the contract asks for an OOM here

PICTURED = 256  # blocks: a larger pool gets no picture (a report draws none that large)


class PoolScript:
    """Methods of Pool that write its reproduction and its failures."""

    def _begin(self: Pool, step: str, comment: tuple[str, str] = ("", "")) -> int:
        """Write the call before making it (a hang or crash shows the script up to here)."""
        start = len(self.script.lines)
        self.script.add(step, *comment)
        return start

    def _finish(self: Pool, start: int, lines: list[Line]) -> None:
        del self.script.lines[start:]
        self.script.lines.extend(lines)

    def _guarded(self: Pool, step: str, error: str, en: str, zh: str) -> list[Line]:
        return [Line("try:"), Line(f"    {step}"), Line(f"except {error}:", en, zh), Line("    pass")]

    def _written(self: Pool, o: Outcome, expected_oom: bool) -> list[Line]:
        """A step that broke nothing graded here, as the script keeps it (the student's code
        returned, or raised the OOM expected: nothing of its own is caught)."""
        if expected_oom:
            return self._guarded(o.step, "RuntimeError", "an OOM is expected here", "这里应当 OOM")
        if self.diverged:
            return self._guarded(o.step, "(RuntimeError, ValueError)", *DIVERGED)
        return [Line(o.step)]

    def _went_on(self: Pool, o: Outcome, prop: str, what: Text) -> list[Line]:
        """A step that broke `prop` (another item's), written so that the script runs past it on the
        student's code and on a correct one, and hides nothing the student's code raised there:
        its exception class is caught by name and printed, a comment says what went wrong, and an
        OOM the contract asks for is asserted where both the code and a correct solution raise."""
        said = Text(f"你的代码在这里已经违反了 {prop}：{_short(what.zh)}", f"here your code already breaks {prop}: {_short(what.en)}")
        catch: list[str] = []
        if o.error is not None:
            catch.append(_builtin_class(o.error))
        if o.oom_expected or self.diverged:
            catch.append("RuntimeError")  # a correct solution runs out of blocks here (or may: its state differs)
        if self.diverged:
            catch.append("ValueError")  # and may refuse a request its own state has blocks for
        catch = list(dict.fromkeys(catch))
        if not catch:  # it returned, and so does a correct solution here
            return [Line(o.step, said.en, said.zh)]
        if o.error is not None:
            did = (f"your code raised {_named(o.error)} here", f"你的代码在这里抛出了 {_named(o.error)}")
        elif self.diverged:
            did = (f"your code returned here; {DIVERGED[0]}", f"你的代码在这里正常返回；{DIVERGED[1]}")
        else:
            did = ("your code returned here; a correct solution raises an OOM", "你的代码在这里正常返回；正确的实现在这里抛出 OOM")
        caught = catch[0] if len(catch) == 1 else "(" + ", ".join(catch) + ")"
        lines = [Line("", said.en, said.zh), Line("try:"), Line(f"    {o.step}"), Line(f"except {caught} as error:", *did),
                 Line(f'    print(f"{o.step}: {{error!r}}")')]
        if o.oom_expected and o.error is not None and not self.diverged:  # both raise here: the OOM asserted
            lines += [Line("else:"), Line(f'    raise AssertionError("{o.step}: RuntimeError (OOM) expected")',
                                          code_zh=f'    raise AssertionError("{o.step}：应抛出 RuntimeError（OOM）")')]
        return lines

    def _violation(self: Pool, prop: str, o: Outcome, asserts: list[Assert], zh: str, en: str, *, expected: str | Text, actual: str | Text,
                   highlight: list[int], call: list[Line] | None = None) -> None:
        """Fail the graded item if `prop` is its property; otherwise note it and go on."""
        if not self.ctx.focused(prop):
            self.ctx.record(prop, zh, en)
            if prop not in self.ctx.witness:  # if the item ends up unchecked, this step shows why
                witness = self.script.copy()
                del witness.lines[o.start :]
                witness.lines += [Line(o.capture), *(call or [Line(o.step)])]
                for check in asserts:
                    witness.expect(*check)
                self.ctx.missed(prop, witness)
            # Another item's failure (or a survey): the script must run past this step on the student's code
            # (it may have raised) and on a correct solution (which may raise here, or later).
            self._finish(o.start, self._went_on(o, prop, Text(zh, en)))
            self.diverged = True
            return
        self._finish(o.start, [Line(o.capture), *(call or [Line(o.step)])])
        for check in asserts:
            self.script.expect(*check)
        picture = None if self.num_blocks > PICTURED else {
            "kind": "pool", "num_blocks": self.num_blocks, "step": o.step, "before": o.before.picture(), "after": o.after.picture(), "highlight": sorted(set(highlight))}
        raise self.ctx.fail("wrong", zh, en, expected=expected, actual=actual, picture=picture)

    def _missed(self: Pool, key: str, o: Outcome, asserts: list[Assert], call: list[Line] | None = None) -> None:
        """A case where `key`'s property should have been exercised and was not: kept as its witness."""
        if key in self.ctx.witness:
            return
        witness = self.script.copy()
        del witness.lines[o.start:]
        witness.add(o.capture)
        witness.lines += call or [Line(o.step)]
        for check in asserts:
            witness.expect(*check)
        self.ctx.missed(key, witness)

    def _given(self: Pool, key: str, zh: str, en: str, expected: str | Text, actual: str | Text, asserts: list[Assert] = (), start: int | None = None) -> None:
        """Given code behaved otherwise than the template's: a finding (no points), and go on."""
        self.diverged = True
        script = self.script.copy()
        if start is not None:
            step = script.lines[start].code
            del script.lines[start:]
            script.add("free_before, table_before = list(m.free_blocks), list(" + step[step.index("(") + 1 : -1] + ".block_table)")
            script.add(step)
        for check in asserts:
            script.expect(*check)
        self.ctx.given_finding(key, zh, en, expected=expected, actual=actual, script=script)


# The comment on a step after the state has diverged from a correct solution's.
DIVERGED = ("the state differs from a correct solution's from here on: it may refuse this call",
            "从这里起状态与正确实现不同：它可能拒绝这次调用")
# Built-in exception classes a reproduction can name (grader/sandbox/wire.py EXCEPTION_CLASSES), the
# most general last: a student's own class is caught by its most specific built-in base.
_GENERAL = ("Exception", "LookupError", "ArithmeticError")


def _builtin_class(error: dict[str, Any]) -> str:
    isa = [str(name) for name in error.get("isa") or [] if str(name).isidentifier()]
    if str(error.get("type")) in isa:
        return str(error.get("type"))
    specific = [name for name in isa if name not in _GENERAL]
    return (specific or [name for name in isa if name != "Exception"] or ["Exception"])[0]


def _named(error: dict[str, Any]) -> str:
    """The class the code raised, for a comment (a class may be given any __name__: only an identifier is written)."""
    name = str(error.get("type"))
    return name if name.isidentifier() else _builtin_class(error)




def _short(text: str, limit: int = 160) -> str:
    """A message as one line of a comment."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
