"""The KV-utilisation lab (grader/kvlab): its scheduler step by step on hand-worked traces, its
accounting on long ones, its traces, its failures (a leak, a miscount, an unfinished TODO),
the picture, the notebook's entry point and the `kv-lab` verb in this process."""

from __future__ import annotations

import importlib
import json
import random
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from grader import cli
from grader.checkcalls import PLACEHOLDER, strip_source
from grader.kvlab.drivers import LocalDriver
from grader.kvlab.lab import POLICIES, LabConfig, run_lab
from grader.kvlab.memory import PagedMemory, ReservationMemory, Unfinished
from grader.kvlab.notebook import FINISH_FIRST, kv_lab, plot_lab
from grader.kvlab.simulate import Run, simulate
from grader.kvlab.svg import lab_html, lab_svg
from grader.kvlab.trace import Trace, TraceError, TraceRequest, parse_csv, synthetic
from tests.conftest import ROOT, STUDENT_NB

reference = importlib.import_module("reference.paged_attention")
template = importlib.import_module("student_template.paged_attention")


def _driver(manager: Any = None, request: Any = None) -> Any:
    return lambda blocks, size: LocalDriver(manager or reference.KVCacheManager, request or reference.Request, blocks, size)


def _paged(trace: Trace, blocks: int, size: int, manager: Any = None, **options: Any) -> Run:
    memory = PagedMemory(_driver(manager)(blocks, size), blocks, size)
    return simulate(trace, memory, **options)


def _trace(*rows: tuple[float, int, int]) -> Trace:
    return Trace("hand", tuple(TraceRequest(*row) for row in rows))


HAND = _trace((0, 2, 2), (0, 1, 3), (0, 1, 1))  # prompts and outputs of three requests, all arriving at once
SMALL = LabConfig(pool_blocks=256, max_model_len=512)  # 4096 slots: static reservation runs 8 requests


def _small(requests: int, seed: int = 0, rate: float = 1.0) -> Trace:
    return synthetic("sharegpt", requests, seed=seed, rate=rate, max_model_len=512)


# --- the scheduler, step by step, on traces worked out by hand -------------------------------

def test_static_and_oracle_reserve_and_admit_as_worked_out_by_hand() -> None:
    static = simulate(HAND, ReservationMemory("static", 8, 4))
    line = static.timeline
    # Step 0: two requests of 4 slots fill the pool; step 2: the first finishes and the third takes its 4.
    assert line.step == [0, 1, 2, 3]
    assert line.token == [3, 5, 4, 0] and line.reserved == [5, 3, 4, 0] and line.never == [0, 0, 2, 0]
    assert line.free == [0, 0, 0, 8] and line.running == [2, 2, 2, 0] and line.waiting == [1, 1, 0, 0]
    assert line.prefill == [3, 0, 1, 0] and line.decode == [0, 2, 2, 2]
    oracle = simulate(HAND, ReservationMemory("oracle", 8, 4))
    assert oracle.timeline.token == [3, 5, 4, 0] and oracle.timeline.free == [0, 0, 2, 8]  # the third reserves 2, not 4
    assert oracle.timeline.never == [0, 0, 0, 0]
    assert static.finished == oracle.finished == 3 and static.preemptions == 0


def test_paging_takes_a_block_only_when_a_token_needs_one() -> None:
    run = _paged(HAND, blocks=4, size=2)
    line = run.timeline
    assert line.token == [4, 5, 3, 0]
    assert line.tail == [2, 1, 1, 0]  # empty slots in the last blocks
    assert line.free == [2, 2, 4, 8] and line.running == [3, 2, 1, 0] and line.leaked == [0, 0, 0, 0]
    assert line.entries == [3, 3, 2, 0]
    assert run.finished == 3 and run.preemptions == 0 and run.error is None and run.leaked_at_end == 0


def test_a_decode_without_a_block_preempts_the_latest_and_recomputes_it() -> None:
    run = _paged(HAND, blocks=3, size=2)
    line = run.timeline
    # Step 1: request 0 needs a block, none is free: request 2 (the latest) goes back to the queue.
    # Step 2: request 1 needs one and is itself the latest: it goes; request 0 finishes.
    # Step 3: both come back, request 1 with its 2 tokens so far (prompt 1 + 1 generated) prefilled again.
    assert line.preempted == [0, 1, 1, 0, 0, 0]
    assert line.running == [3, 2, 0, 2, 1, 0] and line.waiting == [0, 1, 2, 0, 0, 0]
    assert line.prefill == [4, 0, 0, 3, 0, 0]
    assert line.decode == [0, 2, 1, 0, 2, 1]
    assert run.preemptions == 2 and run.recomputed_tokens == 3 and run.finished == 3  # 2 + 1 prefilled again
    assert sum(line.decode) == sum(r.output_len for r in HAND.requests)  # no token lost, none twice


def test_idle_steps_are_skipped_and_arrivals_wait_for_their_step() -> None:
    trace = _trace((0, 1, 1), (1000, 1, 1))
    line = simulate(trace, ReservationMemory("oracle", 8, 4)).timeline
    assert line.step == [0, 1, 1000, 1001]


def test_nobody_overtakes_the_head_of_the_queue() -> None:
    trace = _trace((0, 2, 2), (0, 3, 3), (0, 1, 1))  # the second does not fit beside the first; the third would
    line = simulate(trace, ReservationMemory("oracle", 8, 8)).timeline
    assert line.running[0] == 1 and line.waiting[0] == 2 and line.free[0] == 4


# --- the accounting, on long traces ----------------------------------------------------------

class Witness(LocalDriver):
    """The reference allocator, with the pool's state read from its objects after every step."""

    seen: list[tuple[int, int, int]] = []  # (slots in tables, free slots, tokens) per completed step

    def step(self, plan: Any) -> Any:
        outcome, observed = super().step(plan)
        if observed is not None:
            bs = self.manager.block_size
            tables = sum(len(req.block_table) for req in self.live.values()) * bs
            self.seen.append((tables, len(self.manager.free_blocks) * bs, sum(req.seq_len for req in self.live.values())))
        return outcome, observed


@pytest.mark.parametrize("policy", POLICIES)
def test_the_parts_add_up_to_the_pool_at_every_step(policy: str) -> None:
    trace = synthetic("sharegpt", 300, seed=3, rate=2.0)
    config = LabConfig(block_size=16, pool_blocks=512, max_model_len=2048)
    Witness.seen = []
    run = run_lab(trace, config, lambda b, s: Witness(reference.KVCacheManager, reference.Request, b, s), policies=(policy,)).runs[policy]
    line = run.timeline
    assert run.error is None and run.finished == 300 and len(line) > 300
    for i in range(len(line)):
        parts = (line.token[i], line.reserved[i], line.tail[i], line.leaked[i], line.free[i])
        assert min(parts) >= 0 and 0 <= line.never[i] <= line.reserved[i]
        assert sum(parts) == config.pool_slots, i
    if policy == "paged":
        # Every figure is what the allocator's own objects held after that step.
        seen = Witness.seen[: len(line)]
        assert [s[2] for s in seen] == line.token
        assert [s[0] - s[2] for s in seen] == line.tail
        assert [s[1] for s in seen] == line.free
        assert run.preemptions > 0  # the pool was tight enough to preempt
    else:
        assert line.tail == line.leaked == [0] * len(line) and run.preemptions == 0


def _random_trace(rng: random.Random, n: int, max_len: int) -> Trace:
    rows = []
    for _ in range(n):
        prompt = rng.randint(1, max_len - 1)
        rows.append(TraceRequest(rng.choice([0, rng.uniform(0, 50)]), prompt, rng.randint(1, max_len - prompt)))
    return Trace("random", tuple(sorted(rows, key=lambda r: r.arrival)))


@pytest.mark.parametrize("seed", range(12))
def test_preemption_loses_no_request_and_no_token(seed: int) -> None:
    rng = random.Random(seed)
    size = rng.choice([1, 2, 3, 4, 8])
    blocks = rng.randint(8, 24)
    trace = _random_trace(rng, rng.randint(5, 40), min(blocks * size, 24))
    run = _paged(trace, blocks, size, max_running=rng.choice([2, 5, 256]))
    line = run.timeline
    assert run.error is None and run.finished == len(trace.requests)
    assert sum(line.decode) == sum(r.output_len for r in trace.requests)
    assert sum(line.prefill) == sum(r.prompt_len for r in trace.requests) + run.recomputed_tokens
    assert run.leaked_at_end == 0 and set(line.leaked) == {0}
    assert all(t + r + ta + lk + f == blocks * size for t, r, ta, lk, f in zip(line.token, line.reserved, line.tail, line.leaked, line.free, strict=True))


def test_preemption_happens_in_the_seeded_cases() -> None:
    preempted = 0
    for seed in range(12):
        rng = random.Random(seed)
        size, blocks = rng.choice([1, 2, 3, 4, 8]), rng.randint(8, 24)
        trace = _random_trace(rng, rng.randint(5, 40), min(blocks * size, 24))
        preempted += _paged(trace, blocks, size, max_running=rng.choice([2, 5, 256])).preemptions
    assert preempted > 20  # the test above exercised preemption, not only easy schedules


# --- traces ------------------------------------------------------------------------------------

def test_the_same_seed_gives_the_same_trace_and_figures() -> None:
    one = run_lab(_small(120, seed=7), SMALL, _driver()).summary()
    two = run_lab(_small(120, seed=7), SMALL, _driver()).summary()
    other = run_lab(_small(120, seed=8), SMALL, _driver()).summary()
    assert one == two
    assert one["policies"]["paged"] != other["policies"]["paged"]


@pytest.mark.parametrize(("name", "prompt", "output"), [("sharegpt", 161, 338), ("alpaca", 19, 58)])
def test_synthetic_traces_have_the_datasets_means_and_a_long_tail(name: str, prompt: float, output: float) -> None:
    for requests in (200, 1000):
        trace = synthetic(name, requests, seed=requests, max_model_len=2048)
        stats = trace.stats()
        assert abs(stats["mean_prompt"] - prompt) / prompt < 0.02 and abs(stats["mean_output"] - output) / output < 0.02
        outputs = sorted(r.output_len for r in trace.requests)
        assert outputs[len(outputs) // 2] < output  # the median under the mean: a long tail
        assert all(r.final_len <= 2048 and r.prompt_len >= 1 and r.output_len >= 1 for r in trace.requests)
    arrivals = [r.arrival for r in synthetic(name, 500, rate=2.0).requests]
    assert arrivals == sorted(arrivals) and 150 < arrivals[-1] < 350  # about 500 / 2 steps


def test_csv_traces_are_read_and_their_mistakes_named() -> None:
    trace = parse_csv("arrival,prompt_len,output_len\n# a comment\n5,10,3\n0,4,2\n\n")
    assert trace.requests == (TraceRequest(0.0, 4, 2), TraceRequest(5.0, 10, 3))
    for text, words in [("0,1\n", "3 columns"), ("0,x,3\n", "line 1: prompt_len"), ("0,1.5,2\n", "whole number"),
                        ("-1,2,2\n", ">= 0"), ("0,0,2\n", "at least 1"), ("", "no requests"), ("nan,1,1\n", "finite")]:
        with pytest.raises(TraceError, match=words):
            parse_csv(text)
    with pytest.raises(TraceError, match="more than max_model_len"):
        LabConfig(max_model_len=8, pool_blocks=4, block_size=2).check(parse_csv("0,5,4\n"))


# --- an allocator that fails --------------------------------------------------------------------

class LeakyManager(reference.KVCacheManager):  # type: ignore[misc, name-defined]
    """Keeps the last block of every request it releases that holds more than one: neither free
    nor in any table afterwards."""

    def release_request(self, req: Any) -> None:
        if len(req.block_table) > 1:
            req.block_table.pop()
        super().release_request(req)


class NonAtomicManager(reference.KVCacheManager):  # type: ignore[misc, name-defined]
    """Takes blocks one by one and raises when they run out, keeping what it took (TODO 2's classic bug)."""

    def allocate_for_prefill(self, req: Any) -> None:
        for _ in range(-(-req.seq_len // self.block_size)):
            if not self.free_blocks:
                raise RuntimeError("OOM")
            req.block_table.append(self.free_blocks.pop(0))


def test_a_leaking_allocator_shows_memory_that_never_comes_back() -> None:
    trace = synthetic("sharegpt", 150, seed=1, rate=0.5)
    good = _paged(trace, 1024, 16)
    leaky = _paged(trace, 1024, 16, manager=LeakyManager)
    assert set(good.timeline.leaked) == {0} and good.leaked_at_end == 0
    lost = leaky.timeline.leaked
    assert lost == sorted(lost) and lost[-1] > 0  # it only grows
    assert leaky.error is None and leaky.leaked_at_end == lost[-1]  # never given back, not even at the end


def test_a_leak_that_starves_the_pool_stops_the_lab_with_the_reason() -> None:
    result = run_lab(_small(200, seed=2), SMALL, _driver(NonAtomicManager))
    run = result.runs["paged"]
    assert run.error is not None and result.error is run.error
    assert "lost" in run.error.text("en") and "丢失" in run.error.text("zh") and run.finished < 200
    assert run.timeline.leaked[-1] > 0.3 * run.pool_slots
    summary = result.summary()["policies"]["paged"]
    assert summary["error"].startswith(f"step {run.error.step}:") and summary["leaked_fraction"] > 0


def test_an_unfinished_todo_and_a_miscount_are_named() -> None:
    run = _paged(HAND, 4, 2, manager=template.KVCacheManager)
    assert isinstance(run.error, Unfinished) and "TODO 2 and TODO 3" in run.error.text("en")

    class Miscounts(reference.KVCacheManager):  # type: ignore[misc, name-defined]
        def allocate_for_decode(self, req: Any) -> None:
            super().allocate_for_decode(req)
            req.seq_len += req.request_id == 1

    run = _paged(HAND, 4, 2, manager=Miscounts)
    assert run.error is not None and run.error.request == 1 and "seq_len is 3" in run.error.text("en")

    class Shares(reference.KVCacheManager):  # type: ignore[misc, name-defined]
        def allocate_for_prefill(self, req: Any) -> None:
            req.block_table.append(self.free_blocks[0])  # taken but never removed from the free list

    assert "more blocks than the pool has" in _paged(HAND, 4, 2, manager=Shares).error.text("en")  # type: ignore[union-attr]

    class Floats(reference.KVCacheManager):  # type: ignore[misc, name-defined]
        def allocate_for_decode(self, req: Any) -> None:
            super().allocate_for_decode(req)
            req.seq_len = float(req.seq_len)

    run = _paged(HAND, 4, 2, manager=Floats)
    assert run.error is not None and "TypeError" in run.error.text("en")  # a seq_len must be an int, as the contract says


# --- the figures, the picture, the notebook, the verb --------------------------------------------

def test_paging_holds_token_states_static_reservation_does_not() -> None:
    """The issue's bar, on a shorter trace than the default (the default's run is in test_kv_lab_sandbox.py)."""
    policies = run_lab(synthetic("sharegpt", 400, seed=0), LabConfig(), _driver()).summary()["policies"]
    assert policies["paged"]["token_state_fraction"] >= 0.9 >= 0.45 >= policies["static"]["token_state_fraction"]
    assert policies["paged"]["mean_running"] >= 2 * policies["static"]["mean_running"]
    assert policies["static"]["token_state_fraction"] < policies["pow2"]["token_state_fraction"] < policies["oracle"]["token_state_fraction"]


def test_a_sweep_trades_tail_waste_for_table_length() -> None:
    config = LabConfig(pool_blocks=256, max_model_len=512, sweep=(8, 16, 64))
    result = run_lab(_small(150), config, _driver(), policies=("paged",))
    rows = result.summary()["sweep"]
    assert [r["block_size"] for r in rows] == [8, 16, 64] and {r["pool_slots"] for r in rows} == {4096}
    assert rows[0]["tail_waste_fraction"] < rows[1]["tail_waste_fraction"] < rows[2]["tail_waste_fraction"]
    assert rows[0]["mean_table_length"] > rows[1]["mean_table_length"] > rows[2]["mean_table_length"]
    assert result.sweep[1] is result.runs["paged"]  # the block size already served is not served again


def test_the_picture_is_self_contained_and_draws_every_part() -> None:
    leaky = run_lab(_small(100, seed=1), SMALL, _driver(LeakyManager))
    swept = run_lab(_small(60, seed=1), LabConfig(pool_blocks=256, max_model_len=512, sweep=(16, 32)), _driver())
    for lang, result in (("zh", leaky), ("en", leaky), ("en", swept)):
        svg = lab_svg(result, lang)
        root = ET.fromstring(svg)
        assert root.tag.endswith("svg")
        assert "<script" not in svg and "href" not in svg and "http" not in svg.replace('xmlns="http://www.w3.org/2000/svg"', "")
        policies = [g.get("data-policy") for g in root.iter("{http://www.w3.org/2000/svg}g") if g.get("data-policy")]
        assert policies == list(POLICIES)
        parts = {p.get("data-part") for p in root.iter("{http://www.w3.org/2000/svg}polygon")}
        assert {"token", "later", "never", "tail", "free"} <= parts and ("leaked" in parts) == (result is leaky)
        bars = {r.get("data-block-size") for r in root.iter("{http://www.w3.org/2000/svg}rect") if r.get("data-block-size")}
        assert bars == ({"16", "32"} if result is swept else set())
        page = lab_html(result, lang)
        assert page.startswith("<!DOCTYPE html>") and svg in page and "<script" not in page


def test_the_notebook_lab_runs_on_the_notebooks_classes_and_waits_for_todo_2_and_3(capsys: pytest.CaptureFixture[str]) -> None:
    assert kv_lab(template.KVCacheManager, template.Request, requests=50) is None
    assert FINISH_FIRST in capsys.readouterr().out
    result = kv_lab(reference.KVCacheManager, reference.Request, requests=80, pool_blocks=256, max_model_len=512, plot=False, lang="en")
    assert result is not None and result.error is None and "Paging keeps" in capsys.readouterr().out
    assert kv_lab(NonAtomicManager, reference.Request, requests=200, pool_blocks=256, max_model_len=512, plot=False) is not None
    shown = capsys.readouterr().out
    assert "lost" in shown and "丢失" in shown


def test_the_notebook_plot_has_a_panel_per_policy_and_the_sweep() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    result = run_lab(_small(40), LabConfig(pool_blocks=256, max_model_len=512, sweep=(8, 16)), _driver())
    figure = plot_lab(result)
    try:
        titles = [ax.get_title(loc="left") for ax in figure.axes if ax.get_title(loc="left")]
        assert len(titles) == 4 and all("token states" in t for t in titles)
        assert len(figure.axes) == 2 * 5  # four panels and the sweep, each with a twin axis
    finally:
        plt.close(figure)


def test_the_notebook_plot_says_on_the_panel_why_a_run_stopped() -> None:
    """A leak that starves the pool ends the paged run in a sliver at the left of the shared time axis:
    the reason is written on its panel (as the SVG does), and the time axis is labelled even above the sweep."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    result = run_lab(_small(200, seed=2), LabConfig(pool_blocks=256, max_model_len=512, sweep=(16, 32)), _driver(NonAtomicManager))
    assert result.error is not None
    figure = plot_lab(result, "en")
    try:
        [static] = [ax for ax in figure.axes if ax.get_title(loc="left").startswith("static:")]
        [paged] = [ax for ax in figure.axes if ax.get_title(loc="left").startswith("paging (block tables):")]
        said = [t.get_text() for t in paged.texts]
        assert said == [result.error.text("en")[:110]] and "lost" in said[0]
        assert not static.texts and paged.get_xlabel() == "step"
    finally:
        plt.close(figure)


def test_the_notebooks_lab_text_quotes_the_reservation_figures_the_defaults_give() -> None:
    """The lab's markdown compares the reservation policies with the paper's Figure 2 in both languages; its
    figures are the defaults' (they need no allocator), so a student reads what the cell below prints."""
    import nbformat

    policies = run_lab(synthetic("sharegpt", 1000, seed=0, rate=1.0), LabConfig(), _driver(), policies=("static", "pow2", "oracle"))
    shares = {name: round(100 * row["token_state_fraction"]) for name, row in policies.summary()["policies"].items()}
    nb = nbformat.read(STUDENT_NB, as_version=4)
    [text] = [c.source for c in nb.cells if c.cell_type == "markdown" and "Figure 2" in c.source and "图 2" in c.source]
    zh, en = text.split("**English**")
    assert f"约有 {shares['pow2']}% 和 {shares['oracle']}% 存着 token（论文为 26.8% 和 38.2%）" in zh
    assert f"约 {shares['static']}%（论文 20.4%）" in zh
    assert f"hold about {shares['pow2']}% and {shares['oracle']}% token\nstates (26.8% and 38.2% in the paper)" in en
    assert f"about {shares['static']}% (20.4%)" in en


def test_grading_never_runs_the_notebooks_lab_cell() -> None:
    import nbformat

    nb = nbformat.read(STUDENT_NB, as_version=4)
    [cell] = [c for c in nb.cells if "grader.kv_lab(" in c.source]
    assert "selfcheck" in cell.metadata["tags"]
    assert strip_source(cell.source, set()) == PLACEHOLDER


def test_the_verb_writes_the_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "lab.json"
    status = cli.main(["kv-lab", "--requests", "100", "--pool-blocks", "256", "--max-model-len", "512", "--block-size", "16,32", "--lang", "en",
                       "--json", str(out), "--svg", str(tmp_path / "lab.svg"), "--html", str(tmp_path / "lab.html")])
    assert status == 0
    figures = json.loads(out.read_text(encoding="utf-8"))
    for policy in ("static", "oracle", "paged", "pow2"):
        row = figures["policies"][policy]
        assert 0 < row["token_state_fraction"] <= 1 and row["mean_running"] > 0
    assert [r["block_size"] for r in figures["sweep"]] == [16, 32]
    assert figures["trace"]["requests"] == 100 and figures["pool"] == {"blocks": 256, "block_size": 16, "slots": 4096}
    ET.fromstring((tmp_path / "lab.svg").read_text(encoding="utf-8"))
    assert "Paging keeps" in capsys.readouterr().out


def test_the_verb_refuses_what_it_cannot_serve(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "trace.csv"
    bad.write_text("0,10,x\n", encoding="utf-8")
    for argv, words in [(["--block-size", "16,0"], "--block-size"), (["--trace", str(bad)], "line 1: output_len"),
                        (["--trace", str(tmp_path / "none.csv")], "cannot read"), (["--max-model-len", "99999"], "larger than the pool"),
                        (["--submission", str(tmp_path / "none.py")], "not found")]:
        assert cli.main(["kv-lab", "--requests", "20", *argv]) == 2, argv
        assert words in capsys.readouterr().err, argv
    from grader.commands import kv_lab as verb

    monkeypatch.setattr(verb, "reference_allocator", lambda: None)
    assert cli.main(["kv-lab", "--requests", "20"]) == 2 and "--submission" in capsys.readouterr().err


def test_the_verb_says_when_the_allocator_failed(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from grader.commands import kv_lab as verb

    monkeypatch.setattr(verb, "reference_allocator", lambda: (NonAtomicManager, reference.Request))
    out = tmp_path / "lab.json"
    assert cli.main(["kv-lab", "--requests", "200", "--pool-blocks", "256", "--max-model-len", "512", "--json", str(out), "--lang", "en"]) == 1
    assert "lost" in capsys.readouterr().err
    assert json.loads(out.read_text(encoding="utf-8"))["policies"]["paged"]["error"]


def test_every_file_the_labs_doc_names_exists() -> None:
    """docs/kv-lab.md points readers at the code (it named grader/sandbox/operations.py after issue 19 removed it)."""
    text = (ROOT / "docs" / "kv-lab.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`((?:grader|tests|benchmarks|notebooks|reference|student_template)/[\w./-]+)`", text))
    assert {"grader/commands/kv_lab.py", "tests/test_kv_lab_sandbox.py"} <= named
    assert sorted(path for path in named if not (ROOT / path).exists()) == []
