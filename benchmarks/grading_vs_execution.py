"""Benchmark: grading a notebook vs merely executing it once with nbclient.

    .venv/bin/python benchmarks/grading_vs_execution.py [NOTEBOOK] [--repeat N] [--against CHECKOUT]

Both are measured the way a user meets them, as a fresh process from the command line,
alternating so that machine noise hits both alike.  Prints each run, the medians, the
ratio (target, issue 20: grading <= 1.3x executing) and where grading spends its time.
`--against CHECKOUT` also grades with another checkout's grader (its own package, this
interpreter) in the same rounds, and prints its ratio beside this one's.
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


def timed(command: list[str], cwd: Path = ROOT) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebook", nargs="?", default=str(ROOT / "notebooks" / "paged_attention_solution.ipynb"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--against", type=Path, help="another checkout, graded in the same rounds")
    args = parser.parse_args()
    notebook = str(Path(args.notebook).resolve())
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "results.json"
        execute_cmd = [sys.executable, "-c", EXECUTE, notebook]
        grade_cmd = [sys.executable, "-m", "grader", "grade", notebook, "--json", str(report)]
        other_cmd = [sys.executable, "-m", "grader", "grade", notebook, "--json", str(Path(tmp) / "other.json")]
        timed(execute_cmd)  # warm the page cache for both
        timed(grade_cmd)
        if args.against:
            timed(other_cmd, args.against)
        executes: list[float] = []
        grades: list[float] = []
        others: list[float] = []
        other_head = f" {'other (s)':>10} {'ratio':>6}" if args.against else ""
        print(f"{'run':>4} {'execute (s)':>12} {'grade (s)':>10} {'ratio':>6}{other_head}")
        for run in range(1, args.repeat + 1):
            executes.append(timed(execute_cmd))
            grades.append(timed(grade_cmd))
            other = ""
            if args.against:
                others.append(timed(other_cmd, args.against))
                other = f" {others[-1]:>10.2f} {others[-1] / executes[-1]:>6.2f}"
            print(f"{run:>4} {executes[-1]:>12.2f} {grades[-1]:>10.2f} {grades[-1] / executes[-1]:>6.2f}{other}")
        execute, grade = statistics.median(executes), statistics.median(grades)
        other = f" {statistics.median(others):>10.2f} {statistics.median(others) / execute:>6.2f}" if others else ""
        print(f"{'med':>4} {execute:>12.2f} {grade:>10.2f} {grade / execute:>6.2f}{other}   (target: ratio <= 1.30)")
        if args.against:
            print(f"other: {args.against}")
        result = json.loads(report.read_text())["extra_data"]["grade_result"]
        items = sorted(result["items"], key=lambda item: -item["seconds"])
        checks = sum(item["seconds"] for item in items)
        print(f"\ngrading breakdown (last run): total {result['seconds']:.2f} s in-process, checks {checks:.2f} s")
        for item in items[:6]:
            print(f"  {item['id']:<28} {item['seconds']:>6.2f} s  {item['examples']:>4} examples")
    return 0


if __name__ == "__main__":
    sys.exit(main())
