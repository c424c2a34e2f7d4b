"""Request traces: who arrives when, with how long a prompt, for how many output tokens.

Time is counted in scheduler steps (one step decodes one token for every running request;
on a GPU serving a 13B model a step takes some tens of milliseconds).  Synthetic traces are
seeded: the same name, size, rate and seed give the same trace on every machine (Python's
own `random.Random`, no numpy).  Their lengths follow the datasets of the vLLM paper (Kwon
et al., SOSP 2023, Figure 11): ShareGPT prompts average about 161 tokens and outputs about
338, with long tails; Alpaca about 19 and 58.  Log-normal lengths give the long tail; an
output that would not fit `max_model_len` after its prompt is cut short, as a serving
engine stops a generation at the model's length.
"""

from __future__ import annotations

import csv
import io
import math
import random
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist

MAX_CSV_BYTES = 64 << 20
MAX_REQUESTS = 1_000_000
MAX_ARRIVAL = 1e9  # steps; anything later is a typo (seconds in microseconds?)


class TraceError(ValueError):
    """A trace that cannot be served as given (the message says where and why)."""


@dataclass(frozen=True)
class TraceRequest:
    arrival: float  # the step it arrives at (it may be admitted from that step on)
    prompt_len: int
    output_len: int

    @property
    def final_len(self) -> int:
        """The tokens its cache holds when it finishes: the prompt and every output token."""
        return self.prompt_len + self.output_len


@dataclass(frozen=True)
class Shape:
    """A dataset's length statistics: log-normal means and spreads (sigma of the log)."""

    prompt_mean: float
    prompt_sigma: float
    output_mean: float
    output_sigma: float


SHAPES = {
    "sharegpt": Shape(prompt_mean=161.0, prompt_sigma=1.0, output_mean=338.0, output_sigma=0.9),
    "alpaca": Shape(prompt_mean=19.0, prompt_sigma=0.6, output_mean=58.0, output_sigma=0.8),
}


@dataclass(frozen=True)
class Trace:
    name: str
    requests: tuple[TraceRequest, ...]  # in arrival order (ties: as given)

    def stats(self) -> dict[str, float | int | str]:
        n = len(self.requests)
        prompts = [r.prompt_len for r in self.requests]
        outputs = [r.output_len for r in self.requests]
        return {
            "name": self.name,
            "requests": n,
            "mean_prompt": round(sum(prompts) / n, 2) if n else 0.0,
            "mean_output": round(sum(outputs) / n, 2) if n else 0.0,
            "max_final": max((r.final_len for r in self.requests), default=0),
            "last_arrival": round(max((r.arrival for r in self.requests), default=0.0), 2),
        }


def _stratified_lognormal(rng: random.Random, n: int, mean: float, sigma: float) -> list[float]:
    """`n` log-normal draws, one from each of n equally likely strata, shuffled: a long tail,
    and a sample mean close to `mean` even for a few hundred requests."""
    mu = math.log(mean) - sigma * sigma / 2  # so that the mean is `mean`
    normal = NormalDist()
    draws = [math.exp(mu + sigma * normal.inv_cdf((i + rng.random()) / n)) for i in range(n)]
    rng.shuffle(draws)
    return draws


def _fit(prompts: list[float], outputs: list[float], max_model_len: int) -> list[tuple[int, int]]:
    """Whole token counts, at least 1 each, and prompt + output <= max_model_len (the output is
    cut short, as a server stops a generation at the model's length)."""
    pairs = []
    for p, o in zip(prompts, outputs, strict=True):
        prompt = min(max(1, round(p)), max_model_len - 1)
        pairs.append((prompt, min(max(1, round(o)), max_model_len - prompt)))
    return pairs


def synthetic(name: str, requests: int, *, seed: int = 0, rate: float = 1.0, max_model_len: int = 2048) -> Trace:
    """`requests` requests shaped like dataset `name`, arriving as a Poisson process of `rate`
    requests per step (rate <= 0: all at step 0).

    Rounding and the cut at `max_model_len` pull the means down; the draws are scaled back
    up (a few rounds, at most 1.5 times in all) so that the trace keeps the dataset's means."""
    if name not in SHAPES:
        raise TraceError(f"unknown trace {name!r}: one of {', '.join(SHAPES)} or a CSV file")
    if not 1 <= requests <= MAX_REQUESTS:
        raise TraceError(f"requests must be between 1 and {MAX_REQUESTS}, got {requests}")
    if max_model_len < 2:
        raise TraceError(f"max_model_len must be at least 2, got {max_model_len}")
    shape = SHAPES[name]
    rng = random.Random(f"kv-lab:{name}:{seed}")  # a str seed hashes the same on every machine
    prompts = _stratified_lognormal(rng, requests, shape.prompt_mean, shape.prompt_sigma)
    outputs = _stratified_lognormal(rng, requests, shape.output_mean, shape.output_sigma)
    scale_p = scale_o = 1.0
    for _ in range(4):
        pairs = _fit([p * scale_p for p in prompts], [o * scale_o for o in outputs], max_model_len)
        scale_p = min(1.5, scale_p * shape.prompt_mean * requests / sum(p for p, _ in pairs))
        scale_o = min(1.5, scale_o * shape.output_mean * requests / sum(o for _, o in pairs))
    pairs = _fit([p * scale_p for p in prompts], [o * scale_o for o in outputs], max_model_len)
    clock, out = 0.0, []
    for prompt, output in pairs:
        out.append(TraceRequest(arrival=round(clock, 3), prompt_len=prompt, output_len=output))
        if rate > 0:
            clock += rng.expovariate(rate)
    return Trace(name, tuple(out))


def _number(text: str, what: str, line: int, *, integer: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TraceError(f"line {line}: {what} {text.strip()[:40]!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise TraceError(f"line {line}: {what} must be a finite number >= 0, got {text.strip()[:40]}")
    if integer and value != int(value):
        raise TraceError(f"line {line}: {what} must be a whole number of tokens, got {text.strip()[:40]}")
    return value


def parse_csv(text: str, name: str = "csv") -> Trace:
    """Rows of `arrival,prompt_len,output_len` (arrival in steps); a header row is optional;
    blank lines and lines starting with # are skipped.  Sorted by arrival (stably)."""
    rows: list[TraceRequest] = []
    for line, fields in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not fields or not "".join(fields).strip() or fields[0].lstrip().startswith("#"):
            continue
        if len(fields) != 3:
            raise TraceError(f"line {line}: expected 3 columns (arrival, prompt_len, output_len), got {len(fields)}")
        if not rows and fields[0].strip().lower() == "arrival":
            continue  # the header
        arrival = _number(fields[0], "arrival", line, integer=False)
        prompt = _number(fields[1], "prompt_len", line, integer=True)
        output = _number(fields[2], "output_len", line, integer=True)
        if arrival > MAX_ARRIVAL:
            raise TraceError(f"line {line}: arrival {arrival:g} is past {MAX_ARRIVAL:g} steps")
        if prompt < 1 or output < 1:
            raise TraceError(f"line {line}: prompt_len and output_len must be at least 1")
        rows.append(TraceRequest(arrival=arrival, prompt_len=int(prompt), output_len=int(output)))
        if len(rows) > MAX_REQUESTS:
            raise TraceError(f"more than {MAX_REQUESTS} requests")
    if not rows:
        raise TraceError("the trace has no requests")
    return Trace(name, tuple(sorted(rows, key=lambda r: r.arrival)))


def read_csv(path: Path) -> Trace:
    try:
        with path.open("rb") as f:
            data = f.read(MAX_CSV_BYTES + 1)
    except OSError as error:
        raise TraceError(f"cannot read {path}: {error.strerror or error}") from None
    if len(data) > MAX_CSV_BYTES:
        raise TraceError(f"{path} is larger than {MAX_CSV_BYTES >> 20} MiB")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise TraceError(f"{path} is not UTF-8 text") from None
    return parse_csv(text, name=path.name)


def check_fits(trace: Trace, max_model_len: int, pool_slots: int) -> None:
    """Every request must fit the model's context and, alone, the pool."""
    if max_model_len > pool_slots:
        raise TraceError(f"max_model_len {max_model_len} is larger than the pool ({pool_slots} slots): "
                         "static reservation could never admit a request")
    for index, req in enumerate(trace.requests):
        if req.final_len > max_model_len:
            raise TraceError(f"request {index} needs {req.final_len} tokens (prompt {req.prompt_len} + output "
                             f"{req.output_len}), more than max_model_len {max_model_len}")
