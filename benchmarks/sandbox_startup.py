"""Benchmark: how long the sandbox takes to start and load a submission, and to fork a session.

    .venv/bin/python benchmarks/sandbox_startup.py [SUBMISSION] [--repeat N]

Times `Sandbox(cells, limits).load()` (start the worker, confine it, import torch, run the
cells) and then one `session()` (fork a child, connect), each in this process, alternating
nothing else.  Prints each run and the medians.  Used to check that confinement costs
nothing that matters next to the ~1 s of importing torch.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.config import load_config  # noqa: E402
from grader.sandbox.client import Sandbox  # noqa: E402
from grader.submission import load_submission  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("submission", nargs="?", default=str(ROOT / "reference" / "paged_attention.py"))
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    config = load_config()
    cells = load_submission(Path(args.submission), 20 << 20).cells
    loads, forks = [], []
    for run in range(args.repeat + 1):  # the first run warms the page cache and is not counted
        with Sandbox(cells, config.limits) as sandbox:
            started = time.perf_counter()
            report = sandbox.load()
            loaded = time.perf_counter()
            assert report.failed is None, report.failed
            session = sandbox.session(time.monotonic() + 30)
            forked = time.perf_counter()
            session.end()
        if run:
            loads.append(loaded - started)
            forks.append(forked - loaded)
            print(f"{run:>3} load {loads[-1] * 1000:7.1f} ms   session {forks[-1] * 1000:6.1f} ms")
    print(f"med load {statistics.median(loads) * 1000:7.1f} ms   session {statistics.median(forks) * 1000:6.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
