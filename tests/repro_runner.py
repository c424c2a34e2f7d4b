"""Run reproductions as a student would: pasted after their code, in a fresh interpreter.

One process imports torch once, then forks a child per script: each child starts from that
clean state (nothing of another script), runs the code in a new `__main__` namespace, and
exits 0 when it ran clean, 1 when it raised.  Used by tests/test_reproductions.py.

    python tests/repro_runner.py < scripts.json   # [code, ...] -> [[exit, last error line], ...]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from pathlib import Path

RUNNER = Path(__file__).resolve()


def run_scripts(scripts: list[str], timeout: float = 600) -> list[tuple[int, str]]:
    """Each script's exit status (0 clean, 1 raised, 2 timed out) and its last error line."""
    proc = subprocess.run(
        [sys.executable, str(RUNNER)],
        input=json.dumps(scripts),
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"},
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the runner failed: {proc.stderr[-2000:]}")
    return [(int(code), str(line)) for code, line in json.loads(proc.stdout.splitlines()[-1])]


def _namespace() -> dict:
    """What a notebook kernel gives a cell (get_ipython, display), as the grader's worker does."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("pa_worker", RUNNER.parent.parent / "grader" / "sandbox" / "worker.py")
    assert spec and spec.loader
    worker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(worker)
    return worker.notebook_namespace()


def _child(code: str, write_fd: int) -> None:
    import signal

    signal.alarm(60)
    try:
        exec(compile(code, "<reproduction>", "exec"), _namespace())
    except BaseException as error:  # report it, whatever it is
        line = traceback.format_exception_only(type(error), error)[-1].strip()
        os.write(write_fd, line[:500].encode())
        os._exit(1)
    os._exit(0)


def main() -> None:
    import torch  # noqa: F401  (loaded once, before the forks)

    scripts = json.loads(sys.stdin.read())
    results = []
    for code in scripts:
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_fd)
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (what the script prints is not ours)
            _child(code, write_fd)
        os.close(write_fd)
        _, status = os.waitpid(pid, 0)
        message = os.read(read_fd, 1000).decode(errors="replace")
        os.close(read_fd)
        code_ = os.waitstatus_to_exitcode(status)
        results.append([0 if code_ == 0 else (2 if code_ < 0 else 1), message])
    print(json.dumps(results))


if __name__ == "__main__":
    main()
