"""Benchmark: what the KV-utilisation lab costs (grader/kvlab, docs/kv-lab.md).

    .venv/bin/python benchmarks/kv_lab.py [--requests N] [--repeat N] [--sandbox] [--notebook]

Times, on the default ShareGPT-like trace and pool, each policy served through the
reference allocator in this process, then (with --notebook) `grader.kv_lab(...)` as the
notebook's lab cell calls it, plot included (matplotlib's Agg backend), and (with --sandbox)
the paged policy through the reference run as a submission in the sandbox: loading it, then
the run, in the judge's CPU and the judge's plus the session's (the lab's budget).  CPU
seconds are what the lab costs; wall-clock seconds depend on what else the machine runs.
Prints each measure's median.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.kvlab.drivers import LocalDriver  # noqa: E402
from grader.kvlab.lab import POLICIES, LabConfig, run_lab  # noqa: E402
from grader.kvlab.trace import synthetic  # noqa: E402


def _timed(work: Callable[[], object], repeat: int) -> tuple[float, float]:
    cpu, wall = [], []
    for _ in range(repeat):
        c, w = time.process_time(), time.perf_counter()
        work()
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    return statistics.median(cpu), statistics.median(wall)


def _show(label: str, cpu: float, wall: float) -> None:
    print(f"{label:<44} {cpu:7.2f} s CPU {wall:8.2f} s wall")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sandbox", action="store_true", help="also page through the reference run as a submission in the sandbox")
    parser.add_argument("--notebook", action="store_true", help="also time grader.kv_lab(...) as the notebook's lab cell calls it")
    args = parser.parse_args()
    reference = importlib.import_module("reference.paged_attention")

    def driver(blocks: int, size: int) -> LocalDriver:
        return LocalDriver(reference.KVCacheManager, reference.Request, blocks, size)

    _show("trace (synthetic sharegpt)", *_timed(lambda: synthetic("sharegpt", args.requests), args.repeat))
    trace = synthetic("sharegpt", args.requests)
    total = 0.0
    for policy in POLICIES:
        cpu, wall = _timed(lambda policy=policy: run_lab(trace, LabConfig(), driver, policies=(policy,)), args.repeat)
        total += cpu
        _show(f"{policy}, {args.requests} requests", cpu, wall)
    _show("every policy", total, float("nan"))
    for size in (8, 32, 64, 128):  # a sweep's other runs (the pool keeps its 32768 slots)
        _show(f"paged, block size {size}", *_timed(lambda size=size: _sweep_one(trace, size, driver), args.repeat))
    if args.notebook:
        os.environ.setdefault("MPLBACKEND", "Agg")
        import grader

        cpu, wall = _timed(lambda: grader.kv_lab(reference.KVCacheManager, reference.Request, block_size=16, sweep=(8, 16, 32, 64, 128)), 1)
        _show("notebook cell (4 policies, sweep of 5, plot)", cpu, wall)
    if args.sandbox:
        _sandboxed(trace)
    return 0


def _sweep_one(trace: object, size: int, driver: Callable[[int, int], LocalDriver]) -> object:
    blocks = LabConfig().pool_slots // size
    return run_lab(trace, LabConfig(block_size=size, pool_blocks=blocks), driver, policies=("paged",))  # type: ignore[arg-type]


def _sandboxed(trace: object) -> None:
    from grader.config import load_config
    from grader.kvlab.sandboxed import sandboxed_allocator

    c, w = time.process_time(), time.perf_counter()
    with sandboxed_allocator(ROOT / "reference" / "paged_attention.py", load_config()) as allocator:
        _show("sandbox: load the submission (judge)", time.process_time() - c, time.perf_counter() - w)
        c, w = time.process_time(), time.perf_counter()
        before = allocator.budget.spent()
        result = run_lab(trace, LabConfig(), allocator, policies=("paged",))  # type: ignore[arg-type]
        both = allocator.budget.spent() - before
        assert result.error is None, result.error
        _show("sandbox: paged run (judge)", time.process_time() - c, time.perf_counter() - w)
        _show("sandbox: paged run (judge + session)", both, float("nan"))


if __name__ == "__main__":
    raise SystemExit(main())
