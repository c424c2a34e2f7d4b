"""A batch's warm judge: what `grade` imports, loaded once, and one judge forked per submission.

    python -m grader.judge_server FD DEVICE [LABEL]        (started by grade-batch, not by hand)

The processes of a warm batch, and who forks whom:

    grade-batch (threads; the gradebook)
      └─ judge server            imports the checks (hypothesis, numpy) and the reports
           ├─ worker template    worker.py --template: torch and IPython imported; never runs submission code
           │    └─ keeper -> nest -> init -> zygote -> sessions     one tree per submission
           └─ judge              one per submission: its GradeJob (grader/job.py), what `grade` runs

Each judge is a fresh fork of the server, in a session of its own, so a crash or a hang ends
that judge alone (the batch stops it as it would a `grade` process), and nothing one grading
does in the judge (hypothesis' caches, a half-built model) is there for the next: every
judge starts from the server's state, in which nothing was ever graded.  A judge's sandbox
forks its worker from the template (grader/sandbox/warm.py) and applies every isolation per
submission, as a cold worker does.

Both servers are fork servers on socketpairs (grader/sandbox/forkserver.py): nothing with a
name in the file system, so no submission can reach either.  Both fork from one thread: the
server's only other one is numpy's OpenBLAS pool, which that library stops before a fork and
starts again in the child (its pthread_atfork handlers), as under multiprocessing's fork.
The server ends when the batch closes its end (the batch exited, or was killed): it stops
the judges still running, then lets the template go.
"""

from __future__ import annotations

import atexit
import gc
import os
import select
import signal
import socket
import subprocess
import sys
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from grader.sandbox import forkserver
from grader.sandbox.forked import Forked, ForkRefused, request

if TYPE_CHECKING:
    from grader.job import GradeJob

READY_TIMEOUT_S = 180.0  # torch's and hypothesis' imports on a machine busy with other work


def main(argv: list[str]) -> int:
    requests = socket.socket(fileno=int(argv[0]))
    device = argv[1]  # argv[2], the batch's label, only names this process in `ps`
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # the batch stops it by closing its end, after stopping the judges
    from grader.grade import resolve_device
    from grader.sandbox import warm
    from grader.sandbox.client import worker_env

    # The template's torch import and this process's own imports overlap (two cores or more).
    template = warm.start(worker_env(resolve_device(device) == "cuda"))  # no label: its workers would show it
    _import_judge()
    why = ""
    try:
        template.wait_ready()
        warm.use(template)
    except OSError as error:
        why = str(error)  # the judges start cold workers: slower, the same grades
    # What is loaded now lives as long as the server: out of the collector's sight, so that no
    # judge's collection walks (and copies, page by page) the memory it shares with the server.
    gc.freeze()
    forkserver.send(requests, {"ready": os.getpid(), "template": not why, "why": why})
    left = forkserver.Server(requests, _judge).serve()
    forkserver.stop(left)
    template.close()
    return 0


def _import_judge() -> None:
    """What a grading imports (hypothesis, numpy, torch-free checks, the reports), so that no judge
    pays for it.  Hypothesis draws no constants from whatever modules are loaded (grader/draws.py),
    so a judge draws the examples a `grade` process draws, whatever either has imported."""
    import grader.checks  # noqa: F401  hypothesis, numpy and every check
    import grader.checks.base  # noqa: F401
    import grader.checks.given  # noqa: F401
    import grader.config  # noqa: F401
    import grader.grade  # noqa: F401
    import grader.job  # noqa: F401
    import grader.report.github  # noqa: F401
    import grader.report.gradescope  # noqa: F401
    import grader.report.html  # noqa: F401
    import grader.report.markdown  # noqa: F401
    import grader.report.text  # noqa: F401
    import grader.sanitize  # noqa: F401
    from grader import rules
    from grader.config import grader_fingerprint
    from grader.draws import pin_local_constants

    pin_local_constants()
    grader_fingerprint()  # every config's digest hashes the grader's files: once here, not in each judge
    rules.for_item("", "")  # the scorecards' rules (grader/rules.toml), parsed once here too


def _judge(message: dict[str, Any], fds: list[int]) -> None:
    """In a fresh fork of the server: what `python -m grader grade ...` started by the batch would do."""
    (stderr,) = fds
    os.setsid()  # its own process group, which the batch stops on a timeout or Ctrl-C
    null = os.open(os.devnull, os.O_RDWR)
    for fd, target in ((null, 0), (null, 1), (stderr, 2)):
        os.dup2(fd, target)
    os.close(null)
    os.close(stderr)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as Python starts: KeyboardInterrupt
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    os.chdir(str(message["cwd"]))
    os._exit(_run(message.get("job")))


def _run(job: Any) -> int:
    """The job's exit status, as a `grade` process would end with it."""
    from grader.job import GradeJob, run_job

    try:
        code = run_job(GradeJob.from_dict(job))
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:  # what the interpreter would print, and its exit status
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    return code


# -- the batch's side ---------------------------------------------------------------------------


@dataclass
class JudgeServer:
    """A running judge server, as the batch holds it."""

    process: subprocess.Popen[bytes]
    requests: socket.socket
    template: bool  # whether its judges fork their workers from a warm template
    why_cold: str  # if not, why

    @classmethod
    def start(cls, *, python: str, env: dict[str, str], device: str, label: str, cwd: str) -> JudgeServer:
        """Start one in the folder `cwd` (its log: judge-server.log there) and wait until it takes
        requests.  Raises OSError if it cannot."""
        log_path = os.path.join(cwd, "judge-server.log")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with open(log_path, "wb") as log:
                process = subprocess.Popen(
                    [python, "-m", "grader.judge_server", str(theirs.fileno()), device, label],
                    cwd=cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                    pass_fds=(theirs.fileno(),),
                    start_new_session=True,  # Ctrl-C goes to the batch, which stops the judges itself
                )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        server = cls(process, ours, False, "")
        try:
            ready, _, _ = select.select([ours], [], [], READY_TIMEOUT_S)
            message, fds = forkserver.receive(ours) if ready else (None, [])
            for fd in fds:
                os.close(fd)
            if message is None or "ready" not in message:
                process.kill()
                process.wait()
                with open(log_path, "rb") as log:
                    err = log.read()[-4000:].decode(errors="replace").strip().splitlines()
                raise OSError(f"the judge server did not start (status {process.returncode}){': ' + err[-1][:300] if err else ''}")
        except BaseException:  # Ctrl-C while it starts: it has served nobody, it can go at once
            process.kill()
            server.close()
            raise
        server.template = message.get("template") is True
        server.why_cold = str(message.get("why") or "")
        return server

    def grade(self, job: GradeJob, *, cwd: str, stderr: int) -> Forked:
        """A judge forked for one grading (what `grade` does with these options).  Raises ForkRefused."""
        return request(self.requests, {"label": "judge", "job": job.to_dict(), "cwd": cwd}, [stderr])

    def close(self, timeout_s: float = 15.0) -> None:
        """Stop it: it stops the judges still running, then lets the template go."""
        self.requests.close()
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


__all__ = ["ForkRefused", "JudgeServer", "main"]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
