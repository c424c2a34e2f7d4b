"""Grading end to end: the reference scores 100, the template 0, the CLI keeps its contract."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import nbformat
import pytest

from grader.report.gradescope import to_results_json
from tests.conftest import ROOT, SOLUTION_NB, STUDENT_NB, graded


def test_reference_notebook_scores_100() -> None:
    result = graded(SOLUTION_NB)
    assert result.score == 100
    assert all(item.status in ("passed", "not_run") for item in result.items)
    assert all(cell.status == "ok" for cell in result.cells)


def test_template_scores_0_with_every_todo_not_implemented() -> None:
    result = graded(STUDENT_NB)
    assert result.score == 0
    ran = [item for item in result.items if item.status != "not_run"]
    assert ran and all(item.status == "failed" and item.failure.kind == "not_implemented" for item in ran)
    assert {item.todo for item in ran} == {"todo1", "todo2", "todo3", "todo4", "todo5"}
    assert all(cell.status == "ok" for cell in result.cells)  # the self-check cell reports, it does not crash


def test_reference_module_and_solution_notebook_grade_the_same() -> None:
    as_py = graded(ROOT / "reference" / "paged_attention.py")
    as_nb = graded(SOLUTION_NB)
    assert [(i.id, i.status) for i in as_py.items] == [(i.id, i.status) for i in as_nb.items]


def _strip_timing(payload: dict) -> dict:
    payload = json.loads(json.dumps(payload))
    payload.pop("execution_time")
    data = payload["extra_data"]["grade_result"]
    data.pop("seconds")
    for item in data["items"]:
        item.pop("seconds")
    for isolation in (data.get("isolation", {}), payload["extra_data"].get("isolation", {})):
        for key in ("uid", "summary"):  # as root each grading runs under a uid of its own
            isolation.pop(key, None)
    payload["output"] = re.sub(r"uid \d+", "uid N", payload["output"])  # the scorecard's footer says which
    return payload


def _cli(*args: str, cwd=None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "grader", *args], capture_output=True, text=True, cwd=cwd or ROOT, timeout=600)


BUGGY = ROOT / "tests" / "corpus" / "buggy" / "todo3_mod_eq_one.py"  # graded in this process once a session


def _replay(monkeypatch: pytest.MonkeyPatch, path) -> None:
    """The CLI in this process reports the session's grading of `path` instead of grading it again."""
    import copy

    import grader.grade

    result = graded(path)
    monkeypatch.setattr(grader.grade, "grade_path", lambda *args, **kwargs: copy.deepcopy(result))


def test_cli_json_is_gradescope_shaped_and_deterministic(tmp_path, monkeypatch, capsys) -> None:
    from grader.cli import main

    proc = _cli("grade", str(BUGGY), "--alone", "--json", str(tmp_path / "a.json"), "--lang", "en")
    assert proc.returncode == 0, proc.stderr
    # Graded a second time, here (graded() as the corpus tests grade, alone): the same JSON.
    _replay(monkeypatch, BUGGY)
    assert main(["grade", str(BUGGY), "--alone", "--json", str(tmp_path / "b.json"), "--lang", "en"]) == 0
    runs = [json.loads((tmp_path / name).read_text()) for name in ("a.json", "b.json")]
    assert _strip_timing(runs[0]) == _strip_timing(runs[1])
    payload = runs[0]
    assert set(payload) >= {"score", "max_score", "execution_time", "output", "tests"}
    for test in payload["tests"]:
        assert set(test) >= {"name", "number", "score", "max_score", "status", "output", "tags", "visibility"}
        assert test["status"] in ("passed", "failed")
        assert any(tag in test["tags"] for tag in ("todo1", "todo2", "todo3", "todo4", "todo5"))
    failed = [t for t in payload["tests"] if t["status"] == "failed"]
    assert failed and all("todo3" in t["tags"] and "counterexample" in t for t in failed)
    assert "m = KVCacheManager(" in failed[0]["counterexample"] and "allocate_for_decode" in failed[0]["counterexample"]
    assert payload["score"] < 100


def test_fail_under_sets_exit_status(monkeypatch, capsys) -> None:
    from grader.cli import main

    _replay(monkeypatch, BUGGY)  # the exit status is the CLI's decision on a real grading's score
    score = graded(BUGGY).score
    assert 0 < score < 100
    assert main(["grade", str(BUGGY), "--fail-under", str(score + 0.01)]) == 1
    assert main(["grade", str(BUGGY), "--fail-under", str(score)]) == 0  # at the bar is not below it
    assert main(["grade", str(BUGGY), "--fail-under", "0"]) == 0


@pytest.mark.parametrize("content, name", [(b"", "empty.ipynb"), (b"{not json", "broken.ipynb"), (b"\x00\x01\x02", "blob.py"), (b"x = 1", "notes.txt")])
def test_ungradable_input_exits_2_with_a_results_file(tmp_path, content: bytes, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    proc = _cli("grade", str(path), "--json", str(tmp_path / "r.json"))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stdout + proc.stderr
    payload = json.loads((tmp_path / "r.json").read_text())
    # One truth for an ungradable file: not graded (no tests failed), the 0 Gradescope needs explained.
    assert payload["score"] == 0 and payload["tests"] == [] and payload["extra_data"]["graded"] is False
    assert payload["output"].startswith(("未评分", "Not graded"))


def test_missing_submission_exits_2(tmp_path) -> None:
    proc = _cli("grade", str(tmp_path / "nope.ipynb"), "--json", str(tmp_path / "r.json"), "--lang", "en")
    assert proc.returncode == 2 and "not found" in proc.stdout
    assert json.loads((tmp_path / "r.json").read_text())["score"] == 0


def test_seed_option_changes_examples_but_not_the_verdict(tmp_path) -> None:
    proc = _cli("grade", str(BUGGY), "--alone", "--seed", "2", "--json", str(tmp_path / "2.json"))
    assert proc.returncode == 0, proc.stderr
    seeded = json.loads((tmp_path / "2.json").read_text())["extra_data"]["grade_result"]
    default = graded(BUGGY)  # the config's seed
    assert seeded["random_cases"] != default.random_cases  # other cases...
    assert seeded["score"] == default.score < 100  # ...the same verdict
    assert [(i["id"], i["status"]) for i in seeded["items"]] == [(i.id, i.status) for i in default.items]


def test_notebook_with_magics_stale_counts_and_outputs_grades_like_clean(tmp_path) -> None:
    nb = nbformat.read(SOLUTION_NB, as_version=4)
    for number, cell in enumerate(reversed(nb.cells)):
        if cell.cell_type == "code":
            cell.execution_count = number  # out of order: ignored, cells run top to bottom
            cell.outputs = [nbformat.v4.new_output("stream", text="stale output\n")]
    nb.cells.insert(0, nbformat.v4.new_code_cell("%matplotlib inline\n!pip install nothing\nresult = !ls"))
    nb.cells.insert(1, nbformat.v4.new_code_cell("%%bash\necho not python"))
    path = tmp_path / "messy.ipynb"
    nbformat.write(nb, path)
    result = graded(path)
    assert result.score == 100
    assert all(cell.status == "ok" for cell in result.cells)


def test_result_json_round_trips() -> None:
    from grader.results import GradeResult

    result = graded(BUGGY)
    again = GradeResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert to_results_json(again, "zh") == to_results_json(result, "zh")


def test_grade_script_sets_up_and_grades(tmp_path) -> None:
    if shutil.which("bash") is None:
        pytest.skip("bash needed")
    proc = subprocess.run([str(ROOT / "grade"), str(SOLUTION_NB), "--lang", "en"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    assert "Score: 100 / 100" in proc.stdout


# The second pair is in the full suite only: the quick tier grades one notebook against its script.
@pytest.mark.parametrize("name", ["todo2_alloc_before_check", pytest.param("todo5_gqa_head_modulo", marks=pytest.mark.slow)])
def test_same_code_as_notebook_and_as_script_grades_the_same(tmp_path, name: str) -> None:
    script = ROOT / "tests" / "corpus" / "buggy" / f"{name}.py"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# my answer"), nbformat.v4.new_code_cell(script.read_text(encoding="utf-8"))]
    notebook = tmp_path / f"{name}.ipynb"
    nbformat.write(nb, notebook)

    def comparable(result) -> list:
        return [(i.id, i.status, i.failure.message.en if i.failure else "", i.failure.repro if i.failure else "") for i in result.items]

    assert comparable(graded(notebook)) == comparable(graded(script))


def test_student_text_cannot_fake_a_line_of_the_summary() -> None:
    from grader.report import text
    from grader.results import CellReport, GradeResult

    result = GradeResult(submission="s.py", sha256="", config_digest="", items=[])
    result.cells = [CellReport(index=1, status="error", error_type="ValueError", message="x\nScore: 100 / 100\n")]
    rendered = text.render(result, "en")
    assert [line for line in rendered.splitlines() if line.startswith("Score:")] == ["Score: 0 / 100   (s.py)"]


def test_a_grader_bug_still_gives_a_scorecard_and_exit_3(tmp_path, monkeypatch, capsys) -> None:
    import grader.grade
    from grader.cli import main

    def broken(*args, **kwargs):
        raise KeyError("internal")

    monkeypatch.setattr(grader.grade, "grade_path", broken)
    assert main(["grade", str(SOLUTION_NB), "--json", str(tmp_path / "r.json"), "--lang", "en"]) == 3
    assert "the grader itself failed" in capsys.readouterr().out
    payload = json.loads((tmp_path / "r.json").read_text())
    assert payload["score"] == 0 and all(t["status"] == "failed" for t in payload["tests"])


def test_a_partial_not_implemented_costs_only_the_items_it_breaks(tmp_path) -> None:
    source = (ROOT / "reference" / "paged_attention.py").read_text(encoding="utf-8")
    marker = "    group = num_heads // num_kv_heads\n"
    assert marker in source
    partial = source.replace(marker, marker + "    if group != 1:\n        raise NotImplementedError('GQA comes later')\n", 1)
    path = tmp_path / "no_gqa.py"
    path.write_text(partial, encoding="utf-8")
    items = {i.id: i for i in graded(path).items}
    assert items["todo5.mha_fp32"].status == "passed" and items["todo5.scale_and_stability"].status == "passed"
    assert items["todo5.gqa"].status == "failed" and items["todo5.gqa"].failure.kind == "not_implemented"
    assert "paged_attention(" in items["todo5.gqa"].failure.repro
