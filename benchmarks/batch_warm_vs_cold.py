"""Benchmark: a warm batch (grade-batch) against one `grade` process per submission (grade-batch --cold).

    .venv/bin/python benchmarks/batch_warm_vs_cold.py [--count 12] [--jobs 1 2 N] [--repeat 1]

Grades the same submissions from tests/corpus (correct and buggy ones of every TODO, as
notebooks would be) with `grade-batch --force` both ways, at each -j, alternating which goes
first, each as a fresh command as a TA runs it.  Prints, side by side per -j, the seconds
per submission (wall time of the whole command / submissions), the ratio cold / warm (target
at -j 2, issue 20: >= 1.6), and the CPU seconds per submission of everything the command started
(read from a cpuacct cgroup where this process may make one, as root on cgroup v1; else
"-").  Also checks that both ways gave every student the same score.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus"
CPUACCT = Path("/sys/fs/cgroup/cpuacct")


def pick(count: int) -> list[Path]:
    """A third correct submissions, the rest buggy ones spread over the five TODOs."""
    correct = sorted((CORPUS / "correct").glob("*.py"))
    buggy = sorted((CORPUS / "buggy").glob("*.py"))
    chosen = correct[: max(1, count // 3)]
    by_todo = [[p for p in buggy if p.name.startswith(f"todo{n}_")] for n in range(1, 6)]
    round_ = 0
    while len(chosen) < count:
        for todo in by_todo:
            if len(chosen) < count and round_ < len(todo):
                chosen.append(todo[round_])
        round_ += 1
    return chosen


class CpuMeter:
    """CPU seconds of a command and everything it starts, from a cpuacct cgroup of its own."""

    def __init__(self) -> None:
        self.path: Path | None = None
        if os.geteuid() == 0 and (CPUACCT / "cpuacct.usage").exists():
            path = CPUACCT / f"pa-bench-{os.getpid()}"
            try:
                path.mkdir()
                self.path = path
            except OSError:
                self.path = None

    def run(self, command: list[str]) -> tuple[float, float | None, subprocess.CompletedProcess[str]]:
        if self.path is None:
            started = time.perf_counter()
            proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
            return time.perf_counter() - started, None, proc
        (self.path / "cpuacct.usage").write_text("0")
        tasks = str(self.path / "tasks")
        started = time.perf_counter()
        # The child joins the cgroup before it execs, so everything it starts is counted.
        proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, preexec_fn=lambda: Path(tasks).write_text("0"))
        wall = time.perf_counter() - started
        return wall, int((self.path / "cpuacct.usage").read_text()) / 1e9, proc

    def close(self) -> None:
        if self.path is not None:
            for _ in range(50):
                try:
                    self.path.rmdir()
                    return
                except OSError:
                    time.sleep(0.1)


def scores(out: Path) -> dict[str, float]:
    with sqlite3.connect(out / "gradebook.sqlite") as db:
        return dict(db.execute("SELECT student_id, score FROM latest").fetchall())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cores = os.cpu_count() or 1
    parser.add_argument("--count", type=int, default=12, help="submissions (default 12)")
    parser.add_argument("--jobs", type=int, nargs="+", default=sorted({1, 2, cores}), help=f"-j values (default 1 2 {cores})")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each (median)")
    args = parser.parse_args()
    meter = CpuMeter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="pa-bench-") as tmp:
        subs = Path(tmp) / "subs"
        subs.mkdir()
        for path in pick(args.count):
            shutil.copy(path, subs / path.name)
        n = len(list(subs.iterdir()))
        print(f"{n} submissions from tests/corpus, {cores} cores; each figure: one whole grade-batch command\n")
        print(f"{'-j':>4} {'cold s/sub':>11} {'warm s/sub':>11} {'ratio':>6} {'cold cpu/sub':>13} {'warm cpu/sub':>13}")
        for jobs in args.jobs:
            measured: dict[str, list[tuple[float, float | None]]] = {"cold": [], "warm": []}
            for run in range(args.repeat):
                order = ("cold", "warm") if run % 2 == 0 else ("warm", "cold")
                for mode in order:
                    out = Path(tmp) / f"out-{mode}-{jobs}"
                    command = [sys.executable, "-m", "grader", "grade-batch", str(subs), "--out", str(out), "--force",
                               "-j", str(jobs), "--lang", "en", "--device", "cpu", "--public-seed",  # a benchmark, not grades of record
                               *(["--cold"] if mode == "cold" else [])]
                    wall, cpu, proc = meter.run(command)
                    if proc.returncode != 0:
                        print(proc.stderr[-3000:], file=sys.stderr)
                        raise SystemExit(f"grade-batch ({mode}, -j {jobs}) exited {proc.returncode}")
                    measured[mode].append((wall, cpu))
            cold_scores, warm_scores = scores(Path(tmp) / f"out-cold-{jobs}"), scores(Path(tmp) / f"out-warm-{jobs}")
            if cold_scores != warm_scores:
                raise SystemExit(f"different scores at -j {jobs}: cold {cold_scores}, warm {warm_scores}")
            cold = statistics.median(w for w, _ in measured["cold"]) / n
            warm = statistics.median(w for w, _ in measured["warm"]) / n
            cpus = [[c for _, c in measured[m] if c is not None] for m in ("cold", "warm")]
            cpu_text = [f"{statistics.median(c) / n:>13.2f}" if c else f"{'-':>13}" for c in cpus]
            rows.append((jobs, cold, warm))
            print(f"{jobs:>4} {cold:>11.2f} {warm:>11.2f} {cold / warm:>6.2f} {cpu_text[0]} {cpu_text[1]}", flush=True)
    meter.close()
    target = [r for r in rows if r[0] == 2]
    if target:
        print(f"\nat -j 2: warm is {target[0][1] / target[0][2]:.2f}x faster per submission (target, issue 20: >= 1.60); same scores both ways")
    return 0


if __name__ == "__main__":
    sys.exit(main())
