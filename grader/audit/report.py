"""What the audit found: kill rates per TODO, the survivors with their diffs, the JSON report.

Every mutant lands in exactly one column, so the columns of a row add up to its mutants:
invalid (does not compile or import), error (the grader gave no verdict), equivalent (on
the reviewed list), killed or survived.  The kill rate is killed / (killed + survived).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from grader.audit import TARGET
from grader.audit.equivalents import Equivalent
from grader.audit.run import ERROR, INVALID, KILLED, SURVIVED, Outcome

COLUMNS = ("mutants", "invalid", "error", "equivalent", "killed", "survived")


@dataclass
class Tally:
    mutants: int = 0
    invalid: int = 0
    error: int = 0
    equivalent: int = 0
    killed: int = 0
    survived: int = 0

    @property
    def rate(self) -> float | None:
        counted = self.killed + self.survived
        return self.killed / counted if counted else None

    def meets(self, target: float) -> bool:
        return self.rate is None or self.rate >= target

    def as_dict(self) -> dict[str, Any]:
        return {**{c: getattr(self, c) for c in COLUMNS}, "kill_rate": self.rate}


@dataclass
class Audit:
    outcomes: list[Outcome]
    equivalents: dict[str, Equivalent]
    seconds: float = 0.0
    jobs: int = 1
    scope: str = ""  # what part of the mutants was graded ("" for all of them)
    target: float = TARGET
    per_todo: dict[str, Tally] = field(default_factory=dict)
    overall: Tally = field(default_factory=Tally)

    def __post_init__(self) -> None:
        for outcome in self.outcomes:
            column = self.column(outcome)
            for tally in (self.per_todo.setdefault(outcome.mutant.todo, Tally()), self.overall):
                tally.mutants += 1
                setattr(tally, column, getattr(tally, column) + 1)
        self.per_todo = dict(sorted(self.per_todo.items()))

    def column(self, outcome: Outcome) -> str:
        if outcome.status in (INVALID, ERROR):
            return outcome.status
        return "equivalent" if outcome.mutant.id in self.equivalents else outcome.status

    @property
    def survivors(self) -> list[Outcome]:
        return [o for o in self.outcomes if self.column(o) == SURVIVED]

    @property
    def errors(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == ERROR]

    @property
    def equivalent_but_killed(self) -> list[Outcome]:
        """Listed as equivalent, yet the grader took points: a wrong reason, or a grader that
        punishes behaviour the contract allows.  Either needs a look."""
        return [o for o in self.outcomes if o.mutant.id in self.equivalents and o.status == KILLED]

    def stale(self, generated_ids: set[str]) -> list[Equivalent]:
        """Listed equivalents no mutant has any more (the source changed): to be removed or re-reviewed."""
        return [e for i, e in self.equivalents.items() if i not in generated_ids]

    @property
    def passed(self) -> bool:
        todos_ok = all(t.meets(self.target) for t in self.per_todo.values())
        return todos_ok and not self.errors and not self.equivalent_but_killed


def _pct(rate: float | None) -> str:
    return "-" if rate is None else f"{100 * rate:.1f}%"


def render(audit: Audit, stale: Sequence[Equivalent] = ()) -> str:
    lines = [
        f"Mutation audit{f' ({audit.scope})' if audit.scope else ''}: {audit.overall.mutants} mutants, "
        f"-j {audit.jobs}, {audit.seconds:.0f} s; target {_pct(audit.target)} killed in every TODO",
        "",
    ]
    header = f"{'TODO':<8}" + "".join(f"{c:>11}" for c in COLUMNS) + f"{'kill rate':>11}"
    lines.append(header)
    rows = [*audit.per_todo.items(), ("overall", audit.overall)]
    for name, tally in rows:
        mark = "" if name == "overall" or tally.meets(audit.target) else "  < target"
        cells = "".join(f"{getattr(tally, c):>11}" for c in COLUMNS)
        lines.append(f"{name:<8}{cells}{_pct(tally.rate):>11}{mark}")
    if audit.survivors:
        lines += [
            "",
            f"Survivors ({len(audit.survivors)}): the grader gave these 100. Kill each with a better "
            "strategy, or list it in the equivalents file with a reason.",
        ]
        for outcome in audit.survivors:
            m = outcome.mutant
            lines += ["", f"{m.id}  [{m.todo}, {m.operator}, source line {m.line}]", m.diff]
    if audit.equivalent_but_killed:
        lines += ["", "Listed as equivalent but killed (a wrong reason, or the grader punishes allowed behaviour):"]
        lines += [f"  {o.mutant.id}: {', '.join(o.failed_items)}: {o.reason}" for o in audit.equivalent_but_killed]
    if audit.errors:
        lines += ["", "No verdict (the grader failed or hung; a bug to look at):"]
        lines += [f"  {o.mutant.id}: {o.reason}" for o in audit.errors]
    invalid = [o for o in audit.outcomes if o.status == INVALID]
    if invalid:
        lines += ["", "Invalid (not counted):"] + [f"  {o.mutant.id}: {o.reason}" for o in invalid]
    equivalent = [o for o in audit.outcomes if audit.column(o) == "equivalent"]
    if equivalent:
        lines += ["", "Equivalent (reviewed, not counted):"]
        lines += [f"  {o.mutant.id}: {audit.equivalents[o.mutant.id].reason}" for o in equivalent]
    if stale:
        lines += ["", "In the equivalents file but no longer generated (remove, or review again):"]
        lines += [f"  {e.id}: {e.reason}" for e in stale]
    verdict = "target met" if audit.passed else "target NOT met"
    lines += [
        "",
        f"{verdict}: {_pct(audit.overall.rate)} of {audit.overall.killed + audit.overall.survived} "
        "counted mutants killed",
    ]
    return "\n".join(lines) + "\n"


def to_json(audit: Audit) -> dict[str, Any]:
    return {
        "target": audit.target,
        "passed": audit.passed,
        "scope": audit.scope or "all",
        "jobs": audit.jobs,
        "seconds": round(audit.seconds, 1),
        "todos": {todo: tally.as_dict() for todo, tally in audit.per_todo.items()},
        "overall": audit.overall.as_dict(),
        "mutants": [
            {
                "id": o.mutant.id,
                "todo": o.mutant.todo,
                "operator": o.mutant.operator,
                "source_line": o.mutant.line,
                "status": o.status,
                "column": audit.column(o),
                "equivalent_reason": audit.equivalents[o.mutant.id].reason
                if o.mutant.id in audit.equivalents
                else None,
                "score": o.score,
                "failed_items": o.failed_items,
                "reason": o.reason,
                "seconds": o.seconds,
                "diff": o.mutant.diff,
            }
            for o in audit.outcomes
        ],
    }
