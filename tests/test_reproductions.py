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


def test_the_step_a_failure_depends_on_is_shown_not_swallowed(tmp_path: Path) -> None:
    """A prefill that loses a block when it runs out of memory: the ownership item finds the block
    missing at a later prefill.  The card draws the earlier call too, and the reproduction runs
    the earlier call catching only the RuntimeError it raised, printed, never `except Exception: pass`."""
    check = "        if needed > len(self.free_blocks):\n"
    assert check in REFERENCE
    path = tmp_path / "loses_a_block_on_oom.py"
    path.write_text(REFERENCE.replace(check, LOSES_A_BLOCK_ON_OOM), encoding="utf-8")
    item = next(i for i in graded(path).items if i.id == "todo2.ownership")
    failure = item.failure
    assert item.status == "failed" and failure is not None and failure.picture is not None
    earlier = failure.picture["earlier"]
    assert earlier["step"].startswith("m.allocate_for_prefill(") and earlier["step"] != failure.picture["step"]
    lost = sorted(set(earlier["before"]["free"]) - set(earlier["after"]["free"]))
    assert lost and earlier["highlight"] == lost  # the earlier call lost it: drawn where it happened
    assert f"first after {earlier['step']} (which raised RuntimeError" in failure.message.en
    assert (failure.expected, failure.actual) == (f"block(s) {lost} each in exactly one place (free_blocks or one block_table)",
                                                  "; ".join(f"block {b}: nowhere" for b in lost))
    repro = failure.repro
    assert "except Exception" not in repro, repro
    assert "here your code already breaks todo2.oom_atomic" in repro
    assert f'except RuntimeError as error:  # your code raised RuntimeError here\n    print(f"{earlier["step"]}: {{error!r}}")' in repro
    code = path.read_text(encoding="utf-8")
    (on_submission, line), (on_reference, _) = run_scripts([f"{code}\n\n{repro}\n", f"{REFERENCE}\n\n{repro}\n"])
    assert on_submission == 1 and line.startswith("AssertionError: every block must be free or in exactly one block_table"), line
    assert on_reference == 0
