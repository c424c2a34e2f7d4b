"""The judge's side of a warm worker template: start it, and fork sandboxed workers from it.

A cold worker is `python -u -s -P worker.py`, its plan on standard input: a new interpreter
that imports torch (about a second of CPU) before the submission's first cell.  A template is
the same script started once with `--template`: it imports what every worker imports before
it connects (torch, spawn.py, the answer-key guard) and then only forks.  Each child takes the
grading's descriptors, environment, working directory and plan, exactly as Popen and the
pipe would have given them, and runs `main` from there: spawn.enter() builds the keeper, the nest
(cgroup, namespaces, uid), init (/proc, /dev, /tmp) and the zygote (rlimits, Landlock, the
cells), per grading, as for a cold worker.  The template itself never runs submission code:
no cell, no data and no connection of a submission ever reaches it (it is a fork server on a
socketpair; forkserver.py).

Differences from a cold worker that a submission could see, none of which grading reads: the
process's initial environment block and command line (/proc/self/environ and cmdline) are the
template's (its environment holds no secret: the worker's own, less the grading's paths and
token; its command line a cold worker's with `--template` and a descriptor's number; sys.argv
and sys.orig_argv are a cold worker's), and torch's import-time helper thread is not there (a forked process has one thread,
as the session children always had).  Memory: the pages torch's import wrote are shared with
the template, so the worker first takes its own copy of them (worker.own_inherited_memory),
and its grading's cgroup counts what a cold worker's counts, under the same caps.

`use(template)` makes every Sandbox started afterwards in this process (and in processes it
forks) try the template first (a `grade` process never imports this module); when the
template cannot fork (gone, refused, another Python, another environment) the Sandbox starts
a cold worker, with the same result.
"""

from __future__ import annotations

import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.sandbox import forkserver
from grader.sandbox.client import Sandbox
from grader.sandbox.forked import Forked, ForkRefused, request

WORKER = Path(__file__).with_name("worker.py")
PER_GRADING = ("HOME", "TMPDIR")  # with the sandbox token: set per grading in the forked child
READY_TIMEOUT_S = 120.0  # torch's import on a machine busy with other gradings


@dataclass
class Template:
    process: subprocess.Popen[bytes]
    requests: socket.socket
    python: str
    env: dict[str, str]  # what it imported torch under, less the per-grading variables
    home: Path
    broken: str | None = None  # why it stopped being used, once it failed
    _closed: bool = field(default=False, repr=False)

    def fits(self, python: str, env: dict[str, str], token_var: str) -> bool:
        """Whether a cold worker for this grading would have started like the template did."""
        base = {k: v for k, v in env.items() if k not in PER_GRADING and k != token_var}
        return self.broken is None and python == self.python and base == self.env

    def spawn(self, *, socket_path: str, cwd: str, env: dict[str, str], plan: dict[str, Any], fds: list[int]) -> Forked:
        """A fresh worker forked from the template: its keeper, as Popen would have returned it.

        `fds`: stdout, stderr, the lifeline's read end and the uid's lock (if any); the caller
        closes its copies as after a Popen.  Raises ForkRefused (and is not used again).
        """
        message = {"label": "worker", "socket": socket_path, "cwd": cwd, "env": env, "plan": plan}
        try:
            return request(self.requests, message, fds)
        except ForkRefused as error:
            self.broken = str(error)
            raise

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Wait until torch is imported and the template takes requests; raises OSError (and closes it) if it never does."""
        try:
            ready, _, _ = select.select([self.requests], [], [], timeout_s)
            message, fds = forkserver.receive(self.requests) if ready else (None, [])
            for fd in fds:
                os.close(fd)
            if message is None or "ready" not in message:
                raise OSError(f"the worker template did not start: {_last_words(self.process)}")
        except BaseException:
            self.process.kill()
            self.close()
            raise
        assert self.process.stderr is not None
        self.process.stderr.close()  # its children write to their gradings' pipes; it has nothing more to say
        # Its HOME and TMPDIR served the import only (each worker gets its grading's): gone now,
        # so that a batch killed outright leaves no folder behind.
        shutil.rmtree(self.home, ignore_errors=True)

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop taking requests; the template ends once no process holds the other end."""
        if self._closed:
            return
        self._closed = True
        self.requests.close()
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.home, ignore_errors=True)


def start(env: dict[str, str], *, python: str | None = None) -> Template:
    """Start a template that imports torch under `env` (the worker's environment, Sandbox._env
    less the per-grading variables), without waiting for it: see Template.wait_ready().

    Its command line is a cold worker's and a descriptor's number, nothing more: every worker
    forked from it shows it as its own (/proc/self/cmdline), and a label (the class folder)
    would tell a submission where the TA keeps the grades."""
    python = python or sys.executable
    home = Path(tempfile.mkdtemp(prefix="pa-template-"))  # HOME and TMPDIR while torch imports: empty
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        process = subprocess.Popen(
            [python, "-u", "-s", "-P", str(WORKER), "--template", str(theirs.fileno())],
            cwd="/",
            env={**env, "HOME": str(home), "TMPDIR": str(home)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            pass_fds=(theirs.fileno(),),
            start_new_session=True,  # a terminal's Ctrl-C is the batch's to handle
        )
    except BaseException:
        ours.close()
        shutil.rmtree(home, ignore_errors=True)
        raise
    finally:
        theirs.close()
    return Template(process, ours, python, dict(env), home)


def _last_words(process: subprocess.Popen[bytes]) -> str:
    process.kill()
    process.wait()
    err = process.stderr.read().decode(errors="replace").strip().splitlines() if process.stderr else []
    return f"status {process.returncode}" + (f": {err[-1][:300]}" if err else "")


def use(template: Template | None) -> None:
    """Sandboxes of this process (and of processes it forks from now on) try `template` first."""
    Sandbox.template = template


def current() -> Template | None:
    template = Sandbox.template
    return template if isinstance(template, Template) else None


__all__ = ["Forked", "ForkRefused", "Template", "current", "start", "use"]
