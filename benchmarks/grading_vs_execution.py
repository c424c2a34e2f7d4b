"""Benchmark: grading a notebook vs merely executing it once with nbclient.

    .venv/bin/python benchmarks/grading_vs_execution.py [NOTEBOOK] [--repeat N]

Both are measured the way a user meets them, as a fresh process from the command line,
alternating so that machine noise hits both alike.  Prints each run, the medians, the
ratio (target: grading <= 1.5x executing) and where grading spends its time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The notebook's own grader.check() cell would grade it inside the run: it is taken out (as
# grading takes it out), so that "execute" is the student's code alone.
EXECUTE = """
import sys, nbformat
from nbclient import NotebookClient
from grader.checkcalls import strip_source
nb = nbformat.read(sys.argv[1], as_version=4)
tainted = set()
for cell in nb.cells:
    if cell.cell_type == "code":
        cell.source = strip_source(cell.source, tainted)
NotebookClient(nb, timeout=600, kernel_name="python3").execute()
"""


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebook", nargs="?", default=str(ROOT / "notebooks" / "paged_attention_solution.ipynb"))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "results.json"
        execute_cmd = [sys.executable, "-c", EXECUTE, args.notebook]
        grade_cmd = [sys.executable, "-m", "grader", "grade", args.notebook, "--json", str(report)]
        timed(execute_cmd)  # warm the page cache for both
        timed(grade_cmd)
        executes, grades = [], []
        print(f"{'run':>4} {'execute (s)':>12} {'grade (s)':>10} {'ratio':>6}")
        for run in range(1, args.repeat + 1):
            executes.append(timed(execute_cmd))
            grades.append(timed(grade_cmd))
            print(f"{run:>4} {executes[-1]:>12.2f} {grades[-1]:>10.2f} {grades[-1] / executes[-1]:>6.2f}")
        execute, grade = statistics.median(executes), statistics.median(grades)
        print(f"{'med':>4} {execute:>12.2f} {grade:>10.2f} {grade / execute:>6.2f}   (target: ratio <= 1.50)")
        result = json.loads(report.read_text())["extra_data"]["grade_result"]
        items = sorted(result["items"], key=lambda item: -item["seconds"])
        checks = sum(item["seconds"] for item in items)
        print(f"\ngrading breakdown (last run): total {result['seconds']:.2f} s in-process, checks {checks:.2f} s")
        for item in items[:6]:
            print(f"  {item['id']:<28} {item['seconds']:>6.2f} s  {item['examples']:>4} examples")
    return 0


if __name__ == "__main__":
    sys.exit(main())
