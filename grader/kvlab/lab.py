"""Every policy on one trace and one pool, a block-size sweep for paging, and their figures.

Figures are time averages over the steps when the pool is the bottleneck: steps after which
some arrived request still waits (`window: "busy"`).  Once the queue is empty every policy
only drains, holding less and less whatever it does; those steps are averaged separately
(`all_steps`).  A trace too light to ever queue has no busy step: then every step counts
(`window: "all"`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from grader.kvlab.memory import AllocatorError, Driver, PagedMemory, ReservationMemory
from grader.kvlab.simulate import Progress, Run, Timeline, simulate
from grader.kvlab.trace import Trace, TraceError, check_fits

RESERVATION = ("static", "pow2", "oracle")
POLICIES = (*RESERVATION, "paged")
DEFAULT_SWEEP = (4, 8, 16, 32, 64, 128)
DriverFactory = Callable[[int, int], Driver]  # (num_blocks, block_size) -> a fresh allocator


@dataclass(frozen=True)
class LabConfig:
    block_size: int = 16
    pool_blocks: int = 2048
    max_model_len: int = 2048
    max_running: int = 256
    sweep: tuple[int, ...] = ()  # block sizes; the pool keeps its size in slots

    @property
    def pool_slots(self) -> int:
        return self.block_size * self.pool_blocks

    def check(self, trace: Trace) -> None:
        for name in ("block_size", "pool_blocks", "max_model_len", "max_running"):
            if getattr(self, name) < 1:
                raise TraceError(f"{name} must be at least 1, got {getattr(self, name)}")
        if any(b < 1 or self.pool_slots // b < 1 for b in self.sweep):
            raise TraceError(f"every swept block size must be between 1 and the pool's {self.pool_slots} slots")
        check_fits(trace, self.max_model_len, self.pool_slots)


@dataclass
class LabResult:
    trace: Trace
    config: LabConfig
    allocator: str
    runs: dict[str, Run]
    sweep: list[Run] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # swept sizes left out, and why

    @property
    def error(self) -> AllocatorError | None:
        """The first failure of the allocator under test, if any (its run ended there)."""
        return next((run.error for run in [*self.runs.values(), *self.sweep] if run.error is not None), None)

    def summary(self) -> dict[str, Any]:
        return {
            "trace": self.trace.stats(),
            "pool": {"blocks": self.config.pool_blocks, "block_size": self.config.block_size, "slots": self.config.pool_slots},
            "max_model_len": self.config.max_model_len,
            "max_running": self.config.max_running,
            "allocator": self.allocator,
            "policies": {name: summarize(run) for name, run in self.runs.items()},
            "sweep": [summarize(run) for run in self.sweep],
            "sweep_skipped": self.skipped,
        }


def _mean(values: Sequence[int], window: Sequence[int]) -> float:
    return sum(values[i] for i in window) / len(window) if window else 0.0


def summarize(run: Run) -> dict[str, Any]:
    line = run.timeline
    busy = [i for i, waiting in enumerate(line.waiting) if waiting > 0]
    window = busy or range(len(line))
    pool = run.pool_slots

    def share(series: list[int], over: Sequence[int] = window) -> float:
        return round(_mean(series, over) / pool, 4) if over else 0.0

    running = _mean(line.running, window)
    entries = sum(line.entries[i] for i in window)
    held = sum(line.running[i] for i in window)
    everything = range(len(line))
    return {
        "policy": run.policy,
        "block_size": run.block_size,
        "pool_slots": pool,
        "window": "busy" if busy else "all",
        "steps": line.step[-1] + 1 if len(line) else 0,
        "busy_steps": len(busy),
        "token_state_fraction": share(line.token),
        "reserved_fraction": share(line.reserved),
        "never_used_fraction": share(line.never),
        "tail_waste_fraction": share(line.tail),
        "leaked_fraction": share(line.leaked),
        "free_fraction": share(line.free),
        "mean_running": round(running, 2),
        "peak_running": max(line.running, default=0),
        "tokens_per_step": round(_mean([p + d for p, d in zip(line.prefill, line.decode, strict=True)], window), 2),
        "decode_tokens_per_step": round(_mean(line.decode, window), 2),
        "mean_table_length": round(entries / held, 2) if held and entries else None,
        "preemptions": run.preemptions,
        "recomputed_tokens": run.recomputed_tokens,
        "requests": run.requests,
        "finished": run.finished,
        "leaked_slots_at_end": None if run.error is not None else run.leaked_at_end,
        "all_steps": {"token_state_fraction": share(line.token, everything), "mean_running": round(_mean(line.running, everything), 2)},
        "error": None if run.error is None else run.error.text("en"),
        "error_zh": None if run.error is None else run.error.text("zh"),
    }


def run_lab(trace: Trace, config: LabConfig, driver: DriverFactory, *, allocator: str = "reference",
            policies: Sequence[str] = POLICIES, progress: Progress | None = None) -> LabResult:
    """Serve `trace` under each policy; paging uses a fresh allocator from `driver` per run."""
    config.check(trace)
    runs: dict[str, Run] = {}
    for policy in policies:
        runs[policy] = _serve(trace, config, policy, config.block_size, driver, progress)
        if policy == "paged" and runs[policy].error is not None:
            return LabResult(trace, config, allocator, runs)  # the sweep would fail the same way
    result = LabResult(trace, config, allocator, runs)
    for size in config.sweep:
        blocks = config.pool_slots // size
        if blocks * size < config.max_model_len:
            result.skipped.append(f"block size {size}: {blocks} blocks hold fewer than max_model_len tokens")
            continue
        if size == config.block_size and "paged" in runs:
            result.sweep.append(runs["paged"])
            continue
        run = _serve(trace, config, "paged", size, driver, progress)
        result.sweep.append(run)
        if run.error is not None:
            break
    return result


def _serve(trace: Trace, config: LabConfig, policy: str, block_size: int, driver: DriverFactory, progress: Progress | None) -> Run:
    if policy in RESERVATION:
        memory: Any = ReservationMemory(policy, config.pool_slots, config.max_model_len)
    elif policy == "paged":
        blocks = config.pool_slots // block_size
        try:
            memory = PagedMemory(driver(blocks, block_size), blocks, block_size)
        except AllocatorError as error:  # the allocator could not even be built
            return Run(policy, block_size, blocks * block_size, len(trace.requests), Timeline(), error=error)
    else:
        raise ValueError(f"unknown policy {policy!r}")
    try:
        labelled = None if progress is None else (lambda _p, done, total: progress(_label(policy, block_size, config), done, total))
        return simulate(trace, memory, max_running=config.max_running, progress=labelled)
    finally:
        memory.close()


def _label(policy: str, block_size: int, config: LabConfig) -> str:
    return f"paged, block {block_size}" if policy == "paged" and block_size != config.block_size else policy
