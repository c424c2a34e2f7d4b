"""`grader.kv_lab(KVCacheManager, Request)`: the lab in a student's kernel, on their own classes.

The same simulator as `python -m grader kv-lab` (this package, installed with the grader),
paging through the classes the notebook defined, in the kernel's own process: it is the
student's code serving the student's eyes, nothing is graded.  An allocator whose TODO 2 or 3
is not done yet gets a message, never a traceback that would stop Run All.  While grading,
the call never runs: grader/checkcalls.py replaces every statement that uses the grader.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from grader.kvlab.drivers import LocalDriver
from grader.kvlab.lab import POLICIES, LabConfig, LabResult, run_lab
from grader.kvlab.memory import Unfinished
from grader.kvlab.trace import SHAPES, Trace, TraceError, TraceRequest, synthetic
from grader.kvlab.words import COLOURS, PARTS, headline, table, w

DEFAULT_RATES = {"sharegpt": 1.0, "alpaca": 10.0}
FINISH_FIRST = "先完成 TODO 2 和 TODO 3，再运行这个实验 / finish TODO 2 and TODO 3 first, then run this lab"


def kv_lab(manager_cls: Any, request_cls: Any, *, trace: str = "sharegpt", requests: int = 1000, rate: float | None = None,
           seed: int = 0, block_size: int = 16, pool_blocks: int = 2048, max_model_len: int = 2048, max_running: int = 256,
           sweep: Sequence[int] = (), lang: str = "zh", plot: bool = True) -> LabResult | None:
    """Serve a synthetic trace under static, power-of-two and oracle reservation and under
    paging through `manager_cls`/`request_cls`; print the figures and plot them (matplotlib).

    Returns the LabResult (`.summary()` holds every figure), or None when the allocator
    cannot be used yet (the message says why)."""
    if trace not in SHAPES:
        print(f"trace: {' / '.join(SHAPES)}")
        return None
    config = LabConfig(block_size=block_size, pool_blocks=pool_blocks, max_model_len=max_model_len,
                       max_running=max_running, sweep=tuple(sorted(set(sweep))))

    def driver(blocks: int, size: int) -> LocalDriver:
        return LocalDriver(manager_cls, request_cls, blocks, size)

    try:
        served = synthetic(trace, requests, seed=seed, rate=DEFAULT_RATES[trace] if rate is None else rate, max_model_len=max_model_len)
        config.check(served)
        # A few requests first: an unfinished TODO shows at once, not after the other policies ran.
        tiny = Trace("smoke", (TraceRequest(0.0, block_size + 1, block_size + 1), TraceRequest(0.0, 1, 2)))
        smoke = run_lab(tiny, LabConfig(block_size=block_size, pool_blocks=pool_blocks, max_model_len=max_model_len),
                        driver, policies=("paged",))
    except TraceError as error:
        print(f"kv_lab: {error}")
        return None
    if isinstance(smoke.error, Unfinished):
        print(FINISH_FIRST)
        return None
    if smoke.error is not None:  # it would fail the same way on the whole trace
        print(f"{smoke.error.text('zh')}\n{smoke.error.text('en')}")
        return None
    result = run_lab(served, config, driver, allocator="your KVCacheManager", policies=POLICIES, progress=_progress())
    summary = result.summary()
    print("\r" + " " * 40 + "\r", end="")
    print("\n".join(table(summary, lang)))
    other = headline(summary, "en" if lang == "zh" else "zh")
    if other:
        print(other)
    if result.error is not None:
        print(f"\n{result.error.text('zh')}\n{result.error.text('en')}")
    if plot:
        plot_lab(result, lang)
    return result


def _progress() -> Any:
    """One line, rewritten in place, while the trace is served (a slow allocator shows it is working)."""
    shown = {"at": 0.0}

    def report(policy: str, done: int, total: int) -> None:
        now = time.monotonic()
        if done >= total or now - shown["at"] >= 0.5:
            shown["at"] = now
            print(f"\r{policy:<16} {done:>6} / {total}", end="", flush=True)

    return report


def plot_lab(result: LabResult, lang: str = "zh") -> Any:
    """The picture with matplotlib: a stacked area per policy, and the sweep's bars if any."""
    import matplotlib.pyplot as plt

    summary = result.summary()
    runs = list(result.runs.items())
    rows = len(runs) + (1 if summary["sweep"] else 0)
    figure, axes = plt.subplots(rows, 1, figsize=(10, 2.1 * rows + 0.6), squeeze=False)
    span = max((run.timeline.step[-1] + 1 for _, run in runs if len(run.timeline)), default=1)

    def label(key: str) -> str:
        return w(key, "en")  # a kernel rarely has a CJK font: the markdown above names the colours in both languages

    for ax, (name, run) in zip(axes[:, 0], runs, strict=False):
        line, pool = run.timeline, run.pool_slots
        layers = {
            "token": line.token, "tail": line.tail,
            "later": [r - n for r, n in zip(line.reserved, line.never, strict=True)], "never": line.never,
            "leaked": line.leaked, "free": line.free,
        }
        ax.stackplot(line.step, *[[v / pool * 100 for v in layers[p]] for p in PARTS], colors=[COLOURS[p] for p in PARTS],
                     labels=[label(p) for p in PARTS], linewidth=0)
        row = summary["policies"][name]
        ax.set_title(f"{label(name)}: token states {100 * row['token_state_fraction']:.1f}%, {row['mean_running']:.1f} running",
                     fontsize=10, loc="left")
        ax.set_xlim(0, span)
        ax.set_ylim(0, 100)
        ax.set_ylabel("% of pool")
        if row["error"]:  # a run cut short is a sliver at the left: say why on it, as the SVG does
            ax.text(0.01, 0.06, row["error"][:110], transform=ax.transAxes, color="#d9534f", fontsize=9, fontweight="bold")
        twin = ax.twinx()
        twin.plot(line.step, line.running, color="#1d2430", linewidth=0.9, label=label("running"))
        twin.set_ylim(0, max(max((max(r.timeline.running, default=0) for _, r in runs), default=1), 1) * 1.05)
        twin.set_ylabel("running")
    axes[0, 0].legend(loc="upper center", bbox_to_anchor=(0.5, 1.55), ncol=3, fontsize=8, frameon=False)
    if summary["sweep"]:
        ax = axes[-1, 0]
        sizes = [str(r["block_size"]) for r in summary["sweep"]]
        bottom = [0.0] * len(sizes)
        for part, key in (("token", "token_state_fraction"), ("tail", "tail_waste_fraction"), ("leaked", "leaked_fraction"), ("free", "free_fraction")):
            values = [100 * r[key] for r in summary["sweep"]]
            ax.bar(sizes, values, bottom=bottom, color=COLOURS[part], width=0.6)
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        ax.set_ylim(0, 100)
        ax.set_xlabel("block size")
        ax.set_ylabel("% of pool (busy steps)")
        twin = ax.twinx()
        twin.plot(sizes, [r["mean_table_length"] or 0 for r in summary["sweep"]], "o-", color="#4a7bd0")
        twin.set_ylabel("block-table entries / request", color="#4a7bd0")
    axes[len(runs) - 1, 0].set_xlabel("step")  # the last panel over time (the sweep's bars, if any, come after it)
    figure.tight_layout()
    plt.show()
    return figure
