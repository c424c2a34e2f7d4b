"""The exercise's four artefacts come from one source and are up to date."""

from __future__ import annotations

import json

import pytest

from grader import assign
from tests.conftest import ROOT


def test_generated_files_are_up_to_date() -> None:
    assert assign.stale_files(ROOT) == []


def test_regenerating_changes_nothing(tmp_path) -> None:
    files = assign.build(ROOT)
    for path, text in files.items():
        assert (ROOT / path).read_text(encoding="utf-8") == text


def test_stale_file_is_detected(tmp_path) -> None:
    (tmp_path / "notebooks" / "source").mkdir(parents=True)
    (tmp_path / assign.SOURCE).write_text((ROOT / assign.SOURCE).read_text(encoding="utf-8"), encoding="utf-8")
    assert len(assign.stale_files(tmp_path)) == 7  # nothing generated yet (modules, notebooks, the given-code fingerprint)
    assign.write_all(tmp_path)
    assert assign.stale_files(tmp_path) == []
    target = tmp_path / "reference" / "paged_attention.py"
    target.write_text(target.read_text(encoding="utf-8") + "# edited by hand\n", encoding="utf-8")
    assert assign.stale_files(tmp_path) == [target.relative_to(tmp_path)]


def test_template_keeps_given_code_and_drops_solutions() -> None:
    template = (ROOT / "student_template" / "paged_attention.py").read_text(encoding="utf-8")
    solution = (ROOT / "reference" / "paged_attention.py").read_text(encoding="utf-8")
    for given in ("def release_request", "def allocation_report", "class Request", "layout_shape = ["):
        assert given in template and given in solution
    for answer in ("2 * num_layers * num_kv_heads", "math.ceil(req.seq_len / self.block_size)", "repeat_interleave"):
        assert answer in solution
        assert answer not in template
    for todo in range(1, 6):
        assert f'raise NotImplementedError("TODO {todo} 未完成' in template
    assert ">>>" not in template + solution and "<<<" not in template + solution


def test_notebooks_have_tagged_cells_and_no_outputs() -> None:
    for name, answer_present in (("solution", True), ("student", False)):
        nb = json.loads((ROOT / "notebooks" / f"paged_attention_{name}.ipynb").read_text(encoding="utf-8"))
        code = [c for c in nb["cells"] if c["cell_type"] == "code"]
        assert all(c["outputs"] == [] and c["execution_count"] is None for c in code)
        assert {t for c in code for t in c["metadata"]["tags"]} == {"module", "selfcheck"}
        joined = "".join("".join(c["source"]) for c in code)
        assert ("repeat_interleave(group" in joined) is answer_present
        markdown = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
        assert "PagedAttention" in markdown and "块表" in markdown


@pytest.mark.parametrize(
    "text, error",
    [("# %% strange\nx = 1\n", "unknown cell marker"), ("# %% module\n# >>> solution\nx = 1\n", "unclosed")],
)
def test_malformed_source_is_rejected(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        cells = assign.parse_cells(text)
        for cell in cells:
            assign.render_code(cell.lines, "solution")
