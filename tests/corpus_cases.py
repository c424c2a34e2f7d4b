"""The corpus's files, what each expects, and the checks every corpus test module applies.

The corpus is graded in four test modules (test_corpus*.py), so that pytest-xdist's workers
share it (a module runs in one worker: --dist loadfile); each module grades its files side by
side once and checks their verdicts and their reproductions.  Both directions:

- buggy/: a single realistic mistake; it loses points in its own TODO and only there;
- correct/: written in other ways (custom OOM classes, SDPA, notebooks with magics...); 100;
- given/: only given code changed; every TODO point kept, and the scorecard says "given code";
- gaming/: work avoided (no-op methods, `return query`, pacing calls against the time
  budget); the TODO it games earns nothing.

Each file says what it expects on its first line (a notebook: its first code cell's).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import zlib
from pathlib import Path

from grader.config import load_config
from grader.results import ItemResult
from grader.submission import load_submission
from tests.conftest import CORPUS, ROOT, failing_todos, grade_all, graded
from tests.repro_runner import run_scripts


def _header(path: Path) -> list[str]:
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        source = next(c["source"] for c in cells if c["cell_type"] == "code")
        return ("".join(source) if isinstance(source, list) else source).splitlines()[:3]
    return path.read_text(encoding="utf-8").splitlines()[:3]


def expectation(path: Path) -> str:
    header = _header(path)[0]
    assert header.startswith("# corpus: "), path
    return header.removeprefix("# corpus: ")


def breaks(path: Path) -> set[str] | None:
    """The items the file's mistake breaks (`# breaks: item, ...`, its second line), if it says."""
    said = [line.removeprefix("# breaks:") for line in _header(path)[1:] if line.startswith("# breaks:")]
    return {item.strip() for item in said[0].split(",")} if said else None


def _files(kind: str) -> list[Path]:
    """Submissions: files, and folders holding one notebook with the files it reads or runs (graded
    in a copy of that folder, as a batch grades students/alice/notebook.ipynb)."""
    return sorted(
        [p for p in (CORPUS / kind).iterdir() if p.suffix in (".py", ".ipynb")]
        + [nb for d in (CORPUS / kind).iterdir() if d.is_dir() for nb in d.glob("*.ipynb")]
    )


BUGGY = [p for p in _files("buggy") if not expectation(p).endswith(" cuda")]  # the CUDA ones: scripts/gpu-check
CORRECT, GIVEN, GAMING = _files("correct"), _files("given"), _files("gaming")

# What ./run-tests grades of buggy/ and correct/: every notebook (a kernel's ways show only
# there), every file a test below names, and one .py file in SAMPLE_EVERY, picked by a hash of its
# name (the same files every run, whatever is added).  Gaming and given files: all of them.
# PA_FULL_CORPUS=1 grades every file (docs/maintainers.md: before merging a change of the checks).
# Why: a grading costs 8 to 10 s of a core, and the whole corpus (385 files) took 70 of the
# suite's minutes on two cores; CI stops at 90.
SAMPLE_EVERY = 1 if os.environ.get("PA_FULL_CORPUS") == "1" else 3
NAMED = {"todo5_gqa_head_modulo", "todo5_gqa_repeat_tile", "todo5_no_scale", "todo5_double_scale", "todo5_ignores_seq_lens",
         "todo5_drops_last_token", "todo5_returns_float32", "todo1_no_kv_factor", "todo3_seq_len_not_stored", "todo3_mod_eq_one",
         # one mistake, one item where several features are on; a cache keyed by id() of a dropped request
         "todo5_rt13_position_mask_in_query_dtype", "todo3_rt9_capacity_cache_by_object_id",
         # the last block dropped at exact multiples is truncation's; the first block alone, table order's
         "todo4_rt3_tail_mod", "todo4_first_block_only",
         # scale 0 over a padded batch, a negative scale over logits in the hundreds
         "todo5_rt14_mask_before_scale_padded", "todo5_rt14_max_of_unscaled_logits",
         # an OOM that sorts a shuffled free list; a cap of 1,024 blocks a sequence (the huge pool's last prefill)
         "todo2_sorts_free_list_before_checking", "todo2_rt15_max_blocks_1024", "todo2_rt2_rollback_sorts"}


def sampled(paths: list[Path]) -> list[Path]:
    return [p for p in paths if p.suffix != ".py" or p.stem in NAMED or zlib.crc32(p.name.encode()) % SAMPLE_EVERY == 0]


def todo_of(path: Path) -> str:
    return expectation(path).split()[1]


def buggy_in(*todos: str) -> list[Path]:
    return sampled([p for p in BUGGY if todo_of(p) in todos])


def file_id(path: Path) -> str:
    return path.parent.name if path.parent.parent.parent == CORPUS else path.stem


def pacing_config():
    """Calls that sleep just under the 10 s call limit meet a short item budget: the corner
    cases cannot all finish, and that is a failure, not a pass."""
    config = load_config()
    return dataclasses.replace(config, limits=dataclasses.replace(config.limits, item_budget_s=6), digest=config.digest + "-pacing")


def grade_side_by_side(paths: list[Path]) -> None:
    """A module's files, graded at once on every core (the pacing ones all together: they sleep)."""
    grade_all([p for p in paths if not p.stem.startswith("slow_")])
    slow = [p for p in paths if p.stem.startswith("slow_")]
    if slow:
        grade_all(slow, pacing_config(), processes=len(slow))


def graded_as_in_the_corpus(path: Path):
    return graded(path, pacing_config()) if path.stem.startswith("slow_") else graded(path)


# -- the verdicts ------------------------------------------------------------------------------

def check_buggy(path: Path) -> None:
    """Caught in its own TODO and only there; every failed item says why, in both languages, with
    a reproduction; a `# breaks:` line names exactly the items it loses on cases of their own."""
    expected = expectation(path)
    assert expected.startswith("expect-fail ")
    todo = expected.split()[1]
    result = graded(path)
    assert result.tampering == [], [r.message.en for r in result.tampering]
    assert failing_todos(result) == {todo}, [(i.id, i.failure.message.en) for i in result.items if i.failure and i.status == "failed"]
    for item in result.items:
        if item.status == "failed":
            assert item.failure is not None and item.failure.message.en and item.failure.message.zh
            assert item.failure.kind in ("wrong", "error", "not_exercised", "not_implemented", "missing")
            assert item.failure.repro, f"{item.id} failed without a reproduction"
    # One mistake, one item: it loses the items it breaks, each on a case of its own; any other
    # item it loses could not be judged, and says which of those blocks it (docs/grading.md).
    declared = breaks(path)
    if declared is not None:
        own = {i.id for i in result.items if i.status == "failed" and not i.blocked_by}
        blocked = {i.id: i.blocked_by for i in result.items if i.status == "failed" and i.blocked_by}
        assert own == declared, [(i.id, i.failure.kind, i.failure.message.en) for i in result.items if i.status == "failed" and i.failure]
        assert set(blocked.values()) <= declared, blocked


def check_correct(path: Path) -> None:
    assert expectation(path) == "expect-pass"
    result = graded(path)
    assert result.score == 100, [(i.id, i.failure.message.en, i.failure.repro) for i in result.items if i.status == "failed"]
    # Nothing a correct notebook does touches the grader's own code (docs/trust.md, "Trust map").
    assert result.tampering == [], [r.message.en for r in result.tampering]


def check_given(path: Path) -> None:
    assert expectation(path) == "expect-fail given"
    result = graded(path)
    assert result.tampering == [], [r.message.en for r in result.tampering]
    findings = [g.message.en for g in result.given_code]
    assert any(f.startswith("given code changed") for f in findings), findings
    assert any(f.startswith("given code:") for f in findings), findings  # and how it behaves differently
    assert result.score == 100, [(i.id, i.failure.message.en) for i in result.items if i.status == "failed"]


def check_gaming(path: Path) -> None:
    expected = expectation(path)
    assert expected.startswith("expect-fail ")
    todo = expected.split()[1]
    result = graded_as_in_the_corpus(path)
    scores = result.todo_scores()
    assert scores[todo][0] == 0, [(i.id, i.status, i.failure and i.failure.message.en) for i in result.items if i.todo == todo]
    if path.stem.startswith("slow_"):
        kinds = {i.failure.kind for i in result.items if i.todo == todo and i.failure}
        assert kinds & {"too_slow", "timeout"}, kinds


# -- the reproductions -------------------------------------------------------------------------

REFERENCE = (ROOT / "reference" / "paged_attention.py").read_text(encoding="utf-8")


def _code(text: str) -> list[str]:
    """The code without comments and without assert messages (those are in the report's language)."""
    lines = [line.split("  # ")[0].rstrip() for line in text.splitlines() if not line.lstrip().startswith("#")]
    return [line.split(', f"')[0] if line.lstrip().startswith("assert ") else line for line in lines]


def check_reproductions(paths: list[Path]) -> None:
    """Every reproduction of `paths` (graded already) reproduces, both ways: pasted after the
    submission's code in a fresh interpreter it fails (an assert with the expected and actual
    value, or the submission's own error); pasted after the reference solution it runs clean.
    The Chinese version is the same code with other comments."""
    cases: list[tuple[str, str, str]] = []  # (label, submission code, reproduction)
    missing: list[str] = []
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
            if item.failure.kind in ("integrity", "skipped_value"):
                # No credit for using the answer key, or for definitions that hang on a line
                # Jupyter runs and grading does not: nothing of the code's to reproduce.
                continue
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


# -- the cards --------------------------------------------------------------------------------

def _failed(paths: list[Path]) -> list[tuple[str, ItemResult]]:
    out = []
    for path in paths:
        result = graded_as_in_the_corpus(path)
        out += [(f"{path.name} {item.id}", item) for item in result.items if item.status == "failed" and item.failure is not None]
    return out


def check_no_card_shows_the_same_expected_and_actual(paths: list[Path]) -> None:
    """A card whose expected and actual read the same says nothing (issue 21: a decode that raised
    seq_len before its OOM showed one free list and table twice): each shows the fields that differ."""
    same = []
    for label, item in _failed(paths):
        failure = item.failure
        assert failure is not None
        if failure.expected or failure.actual:
            same += [f"{label} ({lang}): {failure.expected_for(lang)!r}" for lang in ("en", "zh") if failure.expected_for(lang) == failure.actual_for(lang)]
    assert not same, same


# A word of English in a Chinese card, once code (identifiers, calls, values) is taken out.
_CODE = re.compile(r"[\w.]*[_.(\[=\d][\w.()\[\]=,:'\-+*/ ]*")
_NAMES = {"OOM", "RuntimeError", "ValueError", "TypeError", "IndexError", "MemoryError", "NotImplementedError", "AssertionError",
          "NaN", "inf", "KV", "GQA", "TODO", "int", "list", "dict", "tuple", "torch", "Tensor", "True", "False", "None", "dtype", "cpu", "cuda",
          "prefill", "decode", "token", "query", "softmax", "logits", "scale", "GPU", "CUDA", "SDPA"}  # the course's own terms


def english_words(text: str) -> list[str]:
    text = _CODE.sub(" ", re.sub(r"\{[^{}]*\}|\|[^|]*\|", " ", text))  # f-string fields and |a - b| are code too
    return [w for w in re.findall(r"[A-Za-z]{2,}", text) if w not in _NAMES and not re.fullmatch(r"[A-Z]\w*(Error|Exception)", w)]  # exception names are code


def check_chinese_cards_say_expected_actual_and_comments_in_chinese(paths: list[Path]) -> None:
    """Everything of ours in a Chinese card is Chinese: expected, actual (less the submission's own
    exception text), and the reproduction's comments and assert messages."""
    found = []
    for label, item in _failed(paths):
        failure = item.failure
        assert failure is not None
        raised = failure.actual_zh == "" and re.match(r"^[A-Za-z_][\w.]*: ", failure.actual)  # the submission's exception, as it said it
        raised = raised or failure.kind == "skipped_value"  # the notebook's own line, quoted
        for what, text in (("expected", failure.expected_for("zh")), ("actual", "" if raised else failure.actual_for("zh"))):
            if english_words(text):
                found.append(f"{label} {what}: {text[:120]!r}")
        for line in failure.repro_for("zh").splitlines():
            said = line.split("  # ", 1)[1] if "  # " in line else line[2:] if line.startswith("# ") else ""
            said += " ".join(re.findall(r'f"([^"]*)"', line)) if line.lstrip().startswith("assert ") else ""
            if english_words(said):
                found.append(f"{label} repro: {line.strip()[:120]!r}")
    assert not found, sorted(set(found))[:40]
