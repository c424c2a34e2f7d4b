"""Every reproduction the corpus produces reproduces, both ways.

Pasted after the submission's code in a fresh interpreter it fails (an assert with the
expected and actual value, or the submission's own error); pasted after the reference
solution it runs clean.  The Chinese version is the same code with other comments.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.submission import load_submission
from tests.conftest import CORPUS, ROOT, grade_all, graded
from tests.repro_runner import run_scripts
from tests.test_corpus import BUGGY, GAMING

pytestmark = pytest.mark.slow

REFERENCE = (ROOT / "reference" / "paged_attention.py").read_text(encoding="utf-8")


def _code(text: str) -> list[str]:
    """The code without comments and without assert messages (those are in the report's language)."""
    lines = [line.split("  # ")[0].rstrip() for line in text.splitlines() if not line.lstrip().startswith("#")]
    return [line.split(', f"')[0] if line.lstrip().startswith("assert ") else line for line in lines]


def test_reproductions_fail_on_the_submission_and_pass_on_the_reference() -> None:
    cases: list[tuple[str, str, str]] = []  # (label, submission code, reproduction)
    missing: list[str] = []
    paths = [*BUGGY, *(p for p in GAMING if not p.stem.startswith("slow_"))]
    grade_all(paths)
    may_be_silent: set[str] = set()
    for path in paths:
        result = graded(path)
        submission = "\n\n".join(c.source for c in load_submission(path, 1 << 24).cells)
        # The declaration sits in the header of the code (a notebook's first cell), not the file's bytes.
        if path in GAMING or any(line.startswith("# repro: ") for line in submission.splitlines()[:5]):
            may_be_silent.add(path.stem)
        failed = [i for i in result.items if i.status == "failed" and i.failure is not None]
        assert failed, f"{path.name} lost no points"
        for item in failed:
            if item.failure.kind == "integrity":
                continue  # no credit for using the answer key: nothing of the code's to reproduce
            repro = item.failure.repro
            if not repro:
                missing.append(f"{path.name} {item.id}")
                continue
            assert _code(repro) == _code(item.failure.repro_zh), f"{path.name} {item.id}: the two languages differ in code"
            cases.append((f"{path.stem} {item.id}", submission, repro))
    assert not missing, f"failed without a reproduction: {missing}"
    scripts = [f"{submission}\n\n{repro}\n" for _, submission, repro in cases] + [f"{REFERENCE}\n\n{repro}\n" for *_, repro in cases]
    outcomes = run_scripts(scripts)
    on_submission, on_reference = outcomes[: len(cases)], outcomes[len(cases) :]
    # Gaming submissions may lie to the asserts, spot the grader or keep state between calls, and
    # a buggy one may declare that its mistake needs what earlier calls left in the process: for
    # those, a reproduction must exist and run clean on the reference, and may be silent.
    silent = [label for (label, *_), (code, _) in zip(cases, on_submission, strict=True) if code == 0 and label.split()[0] not in may_be_silent]
    noisy = [(label, line) for (label, *_), (code, line) in zip(cases, on_reference, strict=True) if code != 0]
    assert not silent, f"these reproductions run clean on the submission they came from: {silent}"
    assert not noisy, f"these reproductions fail on the reference solution: {noisy}"


def test_a_reproduction_ends_in_an_assert_stating_expected_and_actual() -> None:
    item = next(i for i in graded(CORPUS / "buggy" / "todo3_mod_eq_one.py").items if i.status == "failed")
    last = item.failure.repro.rstrip().splitlines()[-1]
    assert last.startswith("assert ") and ", f\"" in last, last


LOSES_A_BLOCK_ON_OOM = """        if needed > len(self.free_blocks):
            self.free_blocks.pop(0)  # the mistake: a block lost on the way out of an OOM
"""


def test_a_block_lost_on_oom_costs_the_oom_item_alone(tmp_path: Path) -> None:
    """A prefill that loses a block when it runs out of memory: one mistake, the OOM item's.  The
    ownership item does not blame a later call for the block (issue 20: one mistake, its own
    item); the OOM card draws the call that lost it, and its reproduction hides no exception."""
    check = "        if needed > len(self.free_blocks):\n"
    assert check in REFERENCE
    path = tmp_path / "loses_a_block_on_oom.py"
    path.write_text(REFERENCE.replace(check, LOSES_A_BLOCK_ON_OOM), encoding="utf-8")
    items = {i.id: i for i in graded(path).items}
    assert items["todo2.ownership"].status == "passed", items["todo2.ownership"].failure
    failure = items["todo2.oom_atomic"].failure
    assert items["todo2.oom_atomic"].status == "failed" and failure is not None and failure.picture is not None
    assert failure.picture["step"].startswith("m.allocate_for_prefill(")
    assert "OOM" in failure.message.en and failure.expected != failure.actual  # the call itself: its own OOM went wrong
    repro = failure.repro
    assert "except Exception" not in repro, repro
    code = path.read_text(encoding="utf-8")
    (on_submission, line), (on_reference, _) = run_scripts([f"{code}\n\n{repro}\n", f"{REFERENCE}\n\n{repro}\n"])
    assert on_submission == 1 and line.startswith("AssertionError"), line
    assert on_reference == 0
