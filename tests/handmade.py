"""GradeResults built by hand for the report tests: both picture kinds, cells that raised, a
missing definition, and hostile ones (huge, ANSI, surrogates, forged lines, 40,000 cells)."""

from __future__ import annotations

from grader.config import load_config
from grader.results import FAILED, NOT_RUN, PASSED, CellReport, Failure, GradeResult, ItemResult, Text

POOL_PICTURE = {
    "kind": "pool",
    "num_blocks": 6,
    "step": "m.allocate_for_decode(r0)",
    "before": {"free": [2, 3, 4, 5], "tables": {"r0": [0], "r1": [1]}},
    # The bug drawn: block 1 handed to r0 while r1 still holds it, and block 2 lost.
    "after": {"free": [3, 4, 5], "tables": {"r0": [0, 1], "r1": [1]}},
    "highlight": [1],
}
ATTENTION_PICTURE = {
    "kind": "attention",
    "errors": [[1e-7, 3e-6, 0.4, 0.2], [2e-6, 1e-7, 5e-6, 0.05], [4e-7, float("nan"), 1e-6, 8e-6]],
    "tolerance": 2e-5,
    "dtype": "float32",
    "worst": [0, 2],
}
DECODE_REPRO = "\n".join(
    [
        "m = KVCacheManager(num_blocks=6, block_size=2, head_dim=1)",
        "r0 = Request(request_id=0, prompt_len=2)",
        "r0.block_table = [0]  # set up directly, as a correct prefill would",
        "r1 = Request(request_id=1, prompt_len=1)",
        "r1.block_table = [1]",
        "m.free_blocks[:] = [2, 3, 4, 5]",
        "m.allocate_for_decode(r0)",
        "assert r0.block_table == [0, 2], r0.block_table",
        "assert 1 not in r0.block_table  # block 1 belongs to r1",
        "assert sorted(m.free_blocks) == [3, 4, 5]",
    ]
)


def _items(statuses: dict[str, tuple[str, Failure | None]]) -> list[ItemResult]:
    items = []
    for rubric in load_config().items:
        status, failure = statuses.get(rubric.id, (NOT_RUN if rubric.device == "cuda" else PASSED, None))
        if status == NOT_RUN and failure is None:
            failure = Failure("not_run", Text("没有可用的 GPU：本项未运行，不计入总分", "no GPU here: not run, and not counted in the total"))
        items.append(ItemResult(rubric.id, rubric.todo, Text(rubric.zh, rubric.en), rubric.weight, status, failure, examples=30))
    return items


def picture_result() -> GradeResult:
    """A plausible result: an allocator failure and an attention failure (with pictures), a
    cell with a SyntaxError and the missing definition it caused."""
    decode = Failure(
        "wrong",
        Text("decode 把请求 r1 仍持有的块 1 又分给了 r0", "decode gave r0 block 1, which r1 still holds"),
        repro=DECODE_REPRO,
        repro_zh=DECODE_REPRO.replace("# set up directly, as a correct prefill would", "# 直接设置，等同于正确的 prefill").replace(
            "# block 1 belongs to r1", "# 块 1 属于 r1"
        ),
        expected="r0.block_table == [0, 2]",
        actual="r0.block_table == [0, 1]",
        picture=POOL_PICTURE,
    )
    attention = Failure(
        "wrong",
        Text("与稠密注意力不一致：最大误差 0.4，容差 2e-05（float32）", "differs from dense attention: max error 0.4, tolerance 2e-05 (float32)"),
        repro="out = paged_attention(query, key_cache, value_cache, block_tables, seq_lens)\nout[0, 2]  # max |out - expected| = 0.4",
        picture=ATTENTION_PICTURE,
    )
    oom = Failure(
        "wrong",
        Text("空闲块只有 0 个、需要 1 个，应抛出 RuntimeError('OOM')", "0 free blocks and 1 needed: expected RuntimeError('OOM')"),
        repro="\n".join(f"step_{i} = {i}" for i in range(12)) + "\nm.allocate_for_decode(r0)",
    )
    missing = Failure("missing", Text("没有找到 estimate_kv_cache_bytes 的定义", "estimate_kv_cache_bytes not defined"))
    result = GradeResult(
        submission="student.ipynb",
        sha256="ab" * 32,
        config_digest=load_config().digest,
        items=_items(
            {
                "todo1.per_token": (FAILED, missing),
                "todo1.per_block_and_total": (FAILED, missing),
                "todo1.rejects_nonpositive": (FAILED, missing),
                "todo3.growth": (FAILED, decode),
                "todo3.oom_rollback": (FAILED, oom),
                "todo5.mha_fp32": (FAILED, attention),
            }
        ),
        cells=[
            CellReport(1, "ok"),
            CellReport(2, "error", "SyntaxError", "invalid syntax (<cell 2>, line 7)", ""),
            CellReport(3, "ok"),
        ],
        seconds=3.25,
        isolation={"summary": {"zh": "独立的用户与进程命名空间", "en": "own user and PID namespaces"}},
    )
    return result


ESC_CLEAR = "\x1b[2J\x1b[H"
FAKE_SCORE = "\nScore: 100 / 100   (forged)\n"


def hostile_huge_result(cells: int = 40_000, message_mb: int = 4) -> GradeResult:
    """Everything the issue saw, at once: megabytes per message, ANSI, lone surrogates, a
    forged second score block, tens of thousands of raising cells, thousands of flags."""
    big = ("A" * 1000 + "\n") * (message_mb * 1000)
    nasty = ESC_CLEAR + "boom \ud800 \udfff" + FAKE_SCORE + "\u202e" + "\x9b31m"
    failure = Failure(
        "wrong",
        Text(nasty + big, nasty + big),
        repro=(nasty + "\n") * 20_000,
        repro_zh=big,
        expected=big,
        actual=nasty * 1000,
        traceback=big,
        picture={"kind": "attention", "errors": [[1.0] * 10_000] * 10_000, "tolerance": 1e-3, "dtype": "x" * 10_000},
    )
    items = _items({rubric.id: (FAILED, failure) for rubric in load_config().items if rubric.device == "cpu"})
    return GradeResult(
        submission="sub" + nasty + ".ipynb",
        sha256="f" * 64,
        config_digest=load_config().digest,
        items=items,
        cells=[CellReport(i, "error", "ValueError" + nasty, nasty * 50, f"  File \"<cell {i}>\", line 1\n" * 500) for i in range(1, cells + 1)],
        notes=[Text(nasty, nasty)] * 3000,
        flags=[Text("诚信" + FAKE_SCORE, "integrity" + FAKE_SCORE)] * 3000,
        output_excerpt=(nasty + "\n") * 100_000,
        output_bytes=10**9,
        given_code=[failure] * 500,
        isolation={"summary": {"zh": nasty * 100, "en": nasty * 100}, "deep": [[[[[["x" * 10_000]]]]]] * 1000},
    )
