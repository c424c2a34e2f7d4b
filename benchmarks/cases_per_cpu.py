"""Benchmark: random cases per CPU-second, for each rubric item.

    .venv/bin/python benchmarks/cases_per_cpu.py [SUBMISSION] [--repeat N] [--against CHECKOUT]

Grades SUBMISSION (the solution notebook by default) with the public seed, as a fresh
`python -m grader grade` each time, and prints per item the random cases that completed and
checked it and the CPU seconds of its TODO (a TODO's items share one survey, so their CPU is
the TODO's), then cases per CPU-second: the figure that "making each case cheaper" moves.
Medians of the runs.  `--against CHECKOUT` grades with another checkout's grader too (its
own package, this interpreter), alternating, and prints both side by side with the ratio
(this / that: above 1, this checkout checks more cases per CPU-second).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def grade(checkout: Path, submission: str) -> dict[str, tuple[int, float]]:
    """Item -> (random cases, its TODO's CPU seconds), from one grading."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "results.json"
        env = {**os.environ, "PYTHONPATH": str(checkout), "PA_GRADER_SECRET_FILE": os.devnull}
        env.pop("PA_GRADER_SECRET", None)
        subprocess.run([sys.executable, "-m", "grader", "grade", submission, "--json", str(report)],
                       check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=checkout, env=env)
        items = json.loads(report.read_text())["extra_data"]["grade_result"]["items"]
    todo_cpu: dict[str, float] = defaultdict(float)
    for item in items:
        todo_cpu[item["todo"]] += item["seconds"]
    return {item["id"]: (item["random_cases"], todo_cpu[item["todo"]]) for item in items if item["status"] != "not_run"}


def medians(runs: list[dict[str, tuple[int, float]]]) -> dict[str, tuple[float, float, float]]:
    """Item -> (cases, CPU s, cases per CPU-second), each the median over the runs."""
    out = {}
    for item in runs[0]:
        cases = [run[item][0] for run in runs if item in run]
        cpu = [run[item][1] for run in runs if item in run]
        rates = [c / s for c, s in zip(cases, cpu, strict=True) if s > 0]
        out[item] = (statistics.median(cases), statistics.median(cpu), statistics.median(rates) if rates else 0.0)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("submission", nargs="?", default=str(ROOT / "notebooks" / "paged_attention_solution.ipynb"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--against", type=Path, help="another checkout, graded alternately, side by side")
    args = parser.parse_args()
    submission = str(Path(args.submission).resolve())
    checkouts = [ROOT] + ([args.against.resolve()] if args.against else [])
    runs: dict[Path, list[dict[str, tuple[int, float]]]] = {c: [] for c in checkouts}
    for _ in range(args.repeat):
        for checkout in checkouts:
            runs[checkout].append(grade(checkout, submission))
    this = medians(runs[ROOT])
    that = medians(runs[checkouts[-1]]) if args.against else {}
    head = f"{'item':<28} {'cases':>6} {'TODO CPU s':>10} {'cases/CPU-s':>11}"
    print(head + (f" | {'cases':>6} {'TODO CPU s':>10} {'cases/CPU-s':>11} {'ratio':>6}" if that else ""))
    for item, (cases, cpu, rate) in this.items():
        line = f"{item:<28} {cases:>6.0f} {cpu:>10.2f} {rate:>11.1f}"
        if item in that:
            c2, s2, r2 = that[item]
            line += f" | {c2:>6.0f} {s2:>10.2f} {r2:>11.1f} {rate / r2 if r2 else float('nan'):>6.2f}"
        print(line)
    total_cpu = sum({item.split(".")[0]: cpu for item, (_, cpu, _) in this.items()}.values())
    print(f"\nchecks' CPU (sum over TODOs, median runs): {total_cpu:.2f} s; medians of {args.repeat} gradings of {Path(submission).name}"
          + (f"; right: {args.against}" if args.against else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
