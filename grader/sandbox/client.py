"""The judge's side of the sandbox: start the worker, load the cells, fork sessions, kill on limits.

Only length-prefixed JSON crosses the boundary (never pickle), so nothing the worker sends
can run code here; a frame over 16 MiB, malformed JSON or an event of the wrong shape ends
the session (or the cell) as "crashed", never the judge.  Every wait has a timeout;
whatever the worker does, the judge goes on.

What a submission runs under (defaults from grader/config.toml [limits]):

- time: `cell_timeout_s` (60) per cell at load time, `call_timeout_s` (10) of CPU per graded
  call, `item_budget_s` (60) of CPU per rubric item (clock.py; `wall_backstop` (3) times each
  in wall-clock time ends one that uses no CPU), `total_budget_s` (600) for the whole
  submission; a cell that hangs or kills its process is skipped when the cells are run again;
- memory: `memory_mb` (2048 MiB) for the whole submission in a cgroup (cgroups.py, which also
  gives it an equal CPU share) where the judge can make one, and RLIMIT_AS of as much on each process (not under CUDA, which maps
  far more than it uses); `pids` (128) processes; `open_files` per process; no core dumps;
- output: the first `output_kb` (64 KiB) of stdout+stderr kept, the rest counted and dropped;
- files: RLIMIT_FSIZE of `file_mb` (64 MiB) per file, and `disk_mb` and `inodes` in all (its
  work folder a tmpfs, views.py);
- namespaces where the kernel allows them (spawn.py, namespaces.py): user, PID (with its own
  /proc, its machine-wide counters masked), IPC, network (none), mount (a bare /dev, empty
  /tmp and /run, a /sys of CPU lists), UTS and cgroup; a uid of its own per grading when the
  judge runs as root (uids.py);
- a session keyring of its own and a seccomp filter (seccomp.py);
- processes: everything the submission starts stays below the worker's keeper and is killed
  when the sandbox closes, or when the judge dies (a lifeline pipe); the private directory
  (pa-grade-*), the cgroup and, where no IPC namespace took them, the IPC objects the
  submission made (ipc.py) are removed either way;
- Landlock, where the kernel has it: reads only of the Python installation, its import
  directories (less the grader) and system directories, writes only in the private work
  directory; no TCP; no signal or ptrace to any process outside the sandbox, and no signal
  from one graded session to the loaded process or another session.

`isolation_report()` says which of these were in force (GradeResult.isolation).  Switches in
the judge's environment: PA_GRADER_NAMESPACES=0, PA_GRADER_USER_NAMESPACE=0, PA_GRADER_CGROUPS=0,
PA_GRADER_LANDLOCK=0, PA_GRADER_SECCOMP=0.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from grader import seeds
from grader.config import Limits
from grader.sandbox import cgroups, ipc, isolation, uids
from grader.sandbox.clock import Budget
from grader.sandbox.isolation import (
    CGROUP_SWITCH,
    LANDLOCK_SWITCH,
    NAMESPACES_SWITCH,
    SECCOMP_SWITCH,
    USER_NAMESPACE_SWITCH,
    switched_on,
)
from grader.sandbox.protocol import (
    HELLO,
    MAX_SKIPPED,
    CellOutcome,
    Forged,
    LoadReport,
    OutputCapture,
    SkippedLine,
    WorkerLost,
    _clean_error,
    _index,
    _recv,
    _recv_signed,
    _send,
    _skipped_line,
)
from grader.sandbox.reaping import _parent_of, _peer_pid, _peer_uid, kill_descendants, make_private_dir
from grader.sandbox.session import Session
from grader.submission import Cell

if TYPE_CHECKING:
    from grader.folder import FolderCopy

    # Never imported by a `grade` process: only a warm batch's judges have them.
    from grader.sandbox.forked import Forked


class WorkerTemplate(Protocol):
    """What a Sandbox asks of a warm worker template (warm.Template, which depends on this
    module, never the other way round)."""

    def fits(self, python: str, env: dict[str, str], token_var: str) -> bool: ...

    def spawn(self, *, socket_path: str, cwd: str, env: dict[str, str], plan: dict[str, Any], fds: list[int]) -> Forked: ...

WORKER = Path(__file__).with_name("worker.py")
TOKEN_VAR = "PA_GRADER_SANDBOX"
FORK_TIMEOUT_S = 5.0  # the loaded submission answers a fork order within this, or is restarted
CONTRACT_NAMES = ("estimate_kv_cache_bytes", "Request", "KVCacheManager", "paged_attention")


def worker_env(allow_cuda: bool) -> dict[str, str]:
    """The worker's whole environment, less what is the grading's own (HOME, TMPDIR, the token)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYTORCH_NVML_BASED_CUDA_CHECK": "1",
    }
    if allow_cuda:
        for name in ("CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "CUDA_HOME"):
            if name in os.environ:
                env[name] = os.environ[name]
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


class Sandbox:
    """One submission's worker.  Use as a context manager: everything it started dies on exit."""

    # A warm template to fork workers from (warm.py; set by warm.use() in a batch's judge server).
    template: ClassVar[WorkerTemplate | None] = None

    def __init__(self, cells: list[Cell], limits: Limits, *, allow_cuda: bool = False, python: str | None = None,
                 folder: FolderCopy | None = None, notebook: bool = True):
        self.cells = cells
        self.folder = folder  # the notebook's folder, copied into work/ before the worker starts (folder.py)
        self.notebook = notebook  # False: a .py submission (a cell's last expression is not displayed)
        self.limits = limits
        self.allow_cuda = allow_cuda
        self.python = python or sys.executable
        self.token = secrets.token_hex(8)
        # The key the worker's grader threads sign their frames with (machinery.py): given before
        # any cell runs, kept where no cell reaches it.
        self.key = secrets.token_bytes(32)
        self.tamper: list[list[Any]] = []  # what the worker denied or the judge refused (worker-side lists)
        self.since = time.time()
        self.ipc_before = ipc.snapshot()
        # As root, a uid of this grading's own: nothing of it can touch another grading's.
        self.uid = uids.claim()
        private, self._private_lock = make_private_dir()
        self.tmp = Path(private)
        self.workdir = self.tmp / "work"
        self.workdir.mkdir()
        self.socket_path = str(self.tmp / "judge.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.socket_path)
        self.listener.listen(16)
        if self.uid is not None:
            # The judge's directory: the submission's uid may pass through (group), open the
            # socket, and write only in work/.  Nobody else may enter.  (The judge's files it
            # maps are memfds handed over the socket: session.sealed_file.)
            os.chown(self.tmp, 0, self.uid.gid)
            os.chmod(self.tmp, 0o710)
            os.chown(self.socket_path, 0, self.uid.gid)
            os.chmod(self.socket_path, 0o660)
            os.chown(self.workdir, self.uid.uid, self.uid.gid)
            os.chmod(self.workdir, 0o700)
        try:
            self.cwd = self._copy_folder()
        except BaseException:  # Ctrl-C while copying: nothing started yet that would remove it
            self.listener.close()
            shutil.rmtree(self.tmp, ignore_errors=True)
            os.close(self._private_lock)
            if self.uid is not None:
                self.uid.release()
            raise
        self.cgroup = cgroups.create(f"{cgroups.PREFIX}{os.getpid()}-{self.token}", limits.memory_mb, limits.pids) if switched_on(CGROUP_SWITCH) else None
        self._confined: dict[str, Any] = {}
        self._peer_uid: int | None = None
        self._ipc_namespaced = True  # every worker so far had an IPC namespace (else: sweep after)
        self.process: subprocess.Popen[bytes] | Forked | None = None
        self.warm = False  # whether the worker was forked from a warm template (warm.py)
        self.control: socket.socket | None = None
        self.report: LoadReport | None = None
        self.landlock = 0
        self._lifeline: int | None = None
        self._zygote_pid = 0
        self._captures: list[tuple[OutputCapture, OutputCapture]] = []
        self._sessions = 0
        self._session_lock: AbstractContextManager[Any] = threading.Lock()
        self.copy = False  # in a forked copy of the judge (grader/judge_fork.py), which never owns the worker
        self.copy_lost = False  # that copy found the loaded worker gone (the judge restarts it, not the copy)
        self._skip: dict[int, CellOutcome] = {}
        self._total_deadline: float | None = None
        self._early: threading.Thread | None = None  # the worker's start, begun before the cells were read (start_early)
        self._early_error: BaseException | None = None
        self._closed = False

    def _copy_folder(self) -> Path | None:
        """The notebook's folder, copied into work/ (its current directory), owned by the submission."""
        if self.folder is None:
            return None
        cwd = self.folder.copy_into(self.workdir, self.limits.file_mb << 20)
        if self.uid is not None:
            for path in [cwd, *cwd.rglob("*")]:
                os.lchown(path, self.uid.uid, self.uid.gid)
        return cwd

    # -- lifecycle -----------------------------------------------------------------
    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._early is not None:  # a worker still starting: let it connect, then stop it as any other
            self._early.join()
            self._early = None
        self._stop_worker()
        self._kill_strays()
        self.listener.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        if self._private_lock >= 0:
            os.close(self._private_lock)
            self._private_lock = -1
        if self.cgroup is not None:
            self.cgroup.remove()
        if self.uid is not None:
            ipc.sweep(self.uid.uid)  # this grading's uid alone: whatever it owns was the submission's
            self.uid.release()
            self.uid = None
        elif not self._ipc_namespaced:
            ipc.sweep(os.geteuid(), self.ipc_before, self.since)

    def isolation_report(self) -> dict[str, Any]:
        """What confined the submission (GradeResult.isolation), as the worker put it in force.

        The worker's word is taken only for what it set up before any cell ran (its first
        message), and only in the shapes expected.
        """
        confined = self._confined
        namespaces = [n for n in confined.get("namespaces", []) if isinstance(n, str)]
        disk = confined.get("disk")
        if not (isinstance(disk, dict) and all(type(disk.get(k)) is int for k in ("disk_mb", "inodes"))):
            disk = None
        if confined.get("proc") is True:
            proc = "masked" if type(confined.get("proc_masked")) is int and confined["proc_masked"] > 0 else "own"
        else:
            proc = "narrowed" if self.landlock else "host"
        return isolation.report(
            namespaces=namespaces,
            uid=self._peer_uid if self._peer_uid is not None else (self.uid.uid if self.uid is not None else None),
            cgroup=self.cgroup,
            rlimits={k: v for k, v in (confined.get("limits") or {}).items() if type(v) is int},
            landlock=self.landlock,
            devices=[d for d in confined.get("devices", []) if isinstance(d, str)][:64],
            seccomp=confined["seccomp"] if type(confined.get("seccomp")) is int else 0,
            keyring=confined.get("keyring") is True,
            proc=proc,
            sys="cpus" if confined.get("sys") == "cpus" else "host",
            readonly=confined.get("readonly") is True,
            disk={"disk_mb": disk["disk_mb"], "inodes": disk["inodes"]} if disk else None,
            wall_backstop=self.limits.wall_backstop,
        )

    def _plan(self, lifeline: int) -> dict[str, Any]:
        """What the worker's first processes set up before any cell (spawn.enter).

        Given on the worker's standard input (or in a warm template's request), never in its
        arguments or environment: the submission could read those (/proc/self/cmdline), and
        the plan names the judge's cgroups and the uid's lock.  The worker keeps only the
        socket's path once its sandbox is built.
        """
        return {
            "socket": self.socket_path,
            "lifeline": lifeline,
            "namespaces": switched_on(NAMESPACES_SWITCH),
            "user_namespace": switched_on(USER_NAMESPACE_SWITCH),
            "uid": self.uid.uid if self.uid is not None else None,
            "gid": self.uid.gid if self.uid is not None else None,
            "cgroups": self.cgroup.paths if self.cgroup is not None else [],
            "uid_lock": self.uid.fd if self.uid is not None else None,
            "uid_lock_path": self.uid.path if self.uid is not None else None,
            "cuda": self.allow_cuda,
            "tmpfs_mb": self.limits.file_mb,
            "since": self.since,
            "memory_mb": self.limits.memory_mb,
            "workdir": str(self.workdir),
            "disk_mb": self.limits.disk_mb,
            "inodes": self.limits.inodes,
            "hidden_files": seeds.secret_paths(),  # the term secret's file: never the submission's to open
        }

    def _env(self) -> dict[str, str]:
        return {**worker_env(self.allow_cuda), "HOME": str(self.workdir), "TMPDIR": str(self.workdir), TOKEN_VAR: self.token}

    def _memory_mb(self) -> int | None:
        return None if self.allow_cuda else self.limits.memory_mb  # CUDA maps more address space than it uses

    def _start_worker(self) -> None:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        life_r, life_w = os.pipe()  # the worker's reaper kills everything when this closes
        lock = (self.uid.fd,) if self.uid is not None and self.uid.fd is not None else ()
        plan_r = -1
        try:
            plan = self._plan(life_r)
            forked = self._fork_warm(out_w, err_w, life_r, lock, plan)
            self.warm = forked is not None
            if forked is None:
                plan_r = _pipe_holding(json.dumps(plan).encode())
            self.process = forked or subprocess.Popen(
                [self.python, "-u", "-s", "-P", str(WORKER)],
                cwd=self.workdir,
                env=self._env(),
                stdin=plan_r,
                stdout=out_w,
                stderr=err_w,
                pass_fds=(life_r, *lock),
                start_new_session=True,
            )
        except BaseException:
            for fd in (out_r, err_r, life_w):
                os.close(fd)
            raise
        finally:
            for fd in (out_w, err_w, life_r, plan_r):
                if fd >= 0:
                    os.close(fd)
        self._lifeline = life_w
        limit = self.limits.output_kb << 10
        self._captures.append((OutputCapture(out_r, limit), OutputCapture(err_r, limit)))
        self.control = self._accept(time.monotonic() + 60, starting=True)
        self._zygote_pid = _peer_pid(self.control)
        self._peer_uid = _peer_uid(self.control)

    def _fork_warm(self, out_w: int, err_w: int, life_r: int, lock: tuple[int, ...], plan: dict[str, Any]) -> Forked | None:
        """The same worker forked from this process's warm template (warm.py), or None: start it cold."""
        template = Sandbox.template
        env = self._env()
        if template is None or not template.fits(self.python, env, TOKEN_VAR):
            return None
        try:
            forked = template.spawn(socket_path=self.socket_path, cwd=str(self.workdir), env=env, plan=plan, fds=[out_w, err_w, life_r, *lock])
        except OSError as error:  # forked.ForkRefused
            print(f"grader: the warm worker template failed ({error}); starting a worker of its own", file=sys.stderr)
            return None
        return forked

    def _accept(self, deadline: float, starting: bool = False) -> socket.socket:
        """The next connection from the zygote (starting: keeper -> nest -> init -> zygote) or a child of it.

        Anything else waiting in the backlog (a session child of a zygote killed a moment ago,
        a process of the submission dialling in) is dropped.
        """
        parent = self.process.pid if starting and self.process is not None else self._zygote_pid
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WorkerLost("timeout", "the worker did not connect")
            self.listener.settimeout(min(remaining, 0.2))
            try:
                conn, _ = self.listener.accept()
                above = [_parent_of(_peer_pid(conn))]
                if starting:  # keeper -> nest -> init -> zygote; init is the keeper's child if the nest died
                    above += [_parent_of(above[-1]), _parent_of(_parent_of(above[-1]))]
                if parent in above:
                    return conn
                conn.close()
            except TimeoutError:
                if self._exited():
                    raise WorkerLost("exited", f"the worker exited before connecting{self._last_words() if not self.copy else ''}") from None
                if not starting and not self._zygote_alive():
                    raise WorkerLost("exited", "the loaded submission is gone") from None

    def _last_words(self) -> str:
        """The worker's exit status and last line on stderr, for a start that failed (never student code)."""
        if self.process is None or not self._captures:
            return ""
        err = self._captures[-1][1]
        err.stop(wait=0.5)
        lines = [line for line in err.text().splitlines() if line.strip()]
        return f" (status {self.process.returncode}{': ' + lines[-1][:300] if lines else ''})"

    def _exited(self) -> bool:
        """Whether the worker's process has ended.  A forked copy of the judge does not ask (the
        process is not its child, and reaping is the judge's): its control connection tells."""
        return self.process is None or (not self.copy and self.process.poll() is not None)

    def _zygote_alive(self) -> bool:
        """Whether the process that ran the cells is still there (its control connection is open)."""
        if self.control is None or self._exited():
            return False
        try:
            self.control.settimeout(0)
            return bool(self.control.recv(1, socket.MSG_PEEK))
        except BlockingIOError:
            return True
        except OSError:
            return False
        finally:
            self.control.settimeout(FORK_TIMEOUT_S)

    def _stop_worker(self) -> None:
        if self.control is not None:
            self.control.close()
            self.control = None
        if self.process is not None:
            if self.process.poll() is None:  # once it has exited and been reaped its pid may be reused
                kill_descendants(self.process.pid)
                try:
                    os.killpg(self.process.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                self.process.kill()
            self.process.wait()
            self.process = None
        if self.cgroup is not None:
            cgroups.kill(self.cgroup.paths)  # anything that left the process tree is still in the cgroup
        if self._lifeline is not None:
            os.close(self._lifeline)
            self._lifeline = None
        for out, err in self._captures:
            out.stop()
            err.stop()

    def _kill_strays(self) -> None:
        """Kill anything still carrying this sandbox's token (a last resort: the reaper finds the rest).

        A worker forked from a warm template carries it in os.environ only, not in the
        environment block /proc shows: there the cgroup, the PID namespace and the keeper
        (a child subreaper, below which every orphan of the submission lands) are what is left.
        """
        marker = f"{TOKEN_VAR}={self.token}".encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                if marker in (entry / "environ").read_bytes().split(b"\0"):
                    os.kill(int(entry.name), signal.SIGKILL)
            except (OSError, ValueError):
                continue

    # -- loading -------------------------------------------------------------------
    def load(self) -> LoadReport:
        """Run the cells once.  A cell that hangs or kills the process is skipped on a restart."""
        restarts = 0
        total_deadline = time.monotonic() + self.limits.total_budget_s
        if self._total_deadline is None:
            self._total_deadline = total_deadline
        while True:
            try:
                self.report = self._try_load(total_deadline)
                self.report.restarts = restarts
                return self.report
            except _CellKilled as killed:
                self._stop_worker()
                self._skip[killed.outcome.index] = killed.outcome
                restarts += 1
                if restarts > len(self.cells) or time.monotonic() > total_deadline:
                    self.report = LoadReport(self._outcomes({}), {}, [], False, restarts, failed="restarts", landlock=self.landlock)
                    return self.report
            except WorkerLost as lost:
                self._stop_worker()
                self.report = LoadReport(self._outcomes({}), {}, [], False, restarts, failed=str(lost), landlock=self.landlock)
                return self.report
            except Exception as error:  # the machine, not the submission (no Python, no fork): still a report
                self._stop_worker()
                failed = f"the sandbox could not start: {type(error).__name__}: {error}"
                self.report = LoadReport(self._outcomes({}), {}, [], False, restarts, failed=failed, landlock=self.landlock)
                return self.report

    def _outcomes(self, seen: dict[int, CellOutcome]) -> list[CellOutcome]:
        return [seen.get(c.index) or self._skip.get(c.index) or CellOutcome(c.index, "not_run") for c in self.cells]

    def start_early(self) -> None:
        """Start the worker now (keeper, namespaces, torch's import: most of a load), in a thread,
        while the judge is still reading the submission; load() then sends it the cells.  No
        cell is needed before the worker connects, and nothing of the submission's runs sooner."""
        if self._early is None and self.process is None and not (self.uid is None and os.geteuid() == 0):
            self._early = threading.Thread(target=self._start_early, name="pa-grade-worker-start", daemon=True)
            self._early.start()

    def _start_early(self) -> None:
        try:
            self._start_worker()
        except BaseException as error:  # raised again where load() would have met it
            self._early_error = error

    def _started_early(self) -> bool:
        """Whether the worker was started by start_early (its failure raised here, as _start_worker's)."""
        early, self._early = self._early, None
        if early is None:
            return False
        early.join()
        error, self._early_error = self._early_error, None
        if error is not None:
            raise error
        return True

    def _try_load(self, total_deadline: float) -> LoadReport:
        if self.uid is None and os.geteuid() == 0:
            # Never run a submission as root: it would own every root-owned file.
            raise SandboxBroken(f"the grader runs as root but could not claim a uid for the submission (no lock directory among {uids.LOCK_DIRS})")
        if not self._started_early():
            self._start_worker()
        assert self.control is not None
        runnable = [{"index": c.index, "source": c.source} for c in self.cells if c.index not in self._skip]
        load = {
            "op": "load",
            "key": self.key.hex(),
            "cells": runnable,
            "workdir": str(self.workdir),
            "cwd": str(self.cwd) if self.cwd is not None else None,
            "notebook": self.notebook,
            "cuda": self.allow_cuda,
            "landlock": switched_on(LANDLOCK_SWITCH),
            "seccomp": switched_on(SECCOMP_SWITCH),
            "limits": {
                "memory_mb": self._memory_mb(),
                "file_mb": self.limits.file_mb,
                "nofile": self.limits.open_files,
                "nproc": self.limits.pids,
                "own_uid": self.uid is not None,
            },
        }
        try:
            _send(self.control, load)
        except OSError as error:
            raise WorkerLost("exited", str(error)) from None
        seen: dict[int, CellOutcome] = {}
        skipped: list[SkippedLine] = []
        current: int | None = None
        confined = False
        while True:
            deadline = min(time.monotonic() + self.limits.cell_timeout_s, total_deadline)
            try:
                event = _recv(self.control, deadline)
                kind = event.get("event")
                if not confined:
                    # The first event comes before any cell runs, so it is the worker's own word.
                    if kind != "confined":
                        raise WorkerLost("protocol", "the worker did not report its confinement")
                    if event.get("fatal"):
                        raise SandboxBroken(str(event["fatal"])[:2000])
                    if event.get("secret_exposed") is True:
                        raise SandboxBroken(
                            "the term secret's file would be readable by the submission (no mount namespace to cover it, no"
                            " Landlock to keep it out): grade on a machine that has either (docs/trust.md), or with --public-seed"
                        )
                    self.landlock = event.get("landlock") if type(event.get("landlock")) is int else 0
                    self._confined = event
                    if "ipc" not in event.get("namespaces", []):
                        self._ipc_namespaced = False
                    confined = True
                elif kind == "cell_start":
                    current = _index(event)
                elif kind == "cell_done":
                    index = _index(event)
                    error = _clean_error(event.get("error"))
                    seen[index] = CellOutcome(index, "error" if error else "ok", error)
                    current = None
                elif kind == "skipped":
                    line = _skipped_line(event, {c.index for c in self.cells})
                    if line is not None and len(skipped) < MAX_SKIPPED:
                        skipped.append(line)
                elif kind == "loaded":
                    return self._loaded(event, seen, skipped)
            except WorkerLost as lost:
                if current is None:
                    raise
                status = "timeout" if lost.reason == "timeout" else "crashed"
                raise _CellKilled(CellOutcome(current, status, {"type": status, "message": lost.detail})) from None

    def _loaded(self, event: dict[str, Any], seen: dict[int, CellOutcome], skipped: list[SkippedLine]) -> LoadReport:
        names = event.get("names")
        blocked = event.get("blocked_imports")
        return LoadReport(
            cells=self._outcomes(seen),
            names={k: v for k, v in names.items() if k in CONTRACT_NAMES and isinstance(v, dict)} if isinstance(names, dict) else {},
            blocked_imports=[str(x)[:200] for x in blocked][:20] if isinstance(blocked, list) else [],
            cuda_initialized=event.get("cuda_initialized") is True,
            restarts=0,
            landlock=self.landlock,
            skipped=skipped,
        )

    def _reload(self, deadline: float) -> None:
        """Start the submission again after an earlier session killed or froze it."""
        self._stop_worker()
        self._skip = {o.index: o for o in (self.report.cells if self.report else []) if o.status in ("timeout", "crashed")}
        total = self._total_deadline or time.monotonic() + self.limits.total_budget_s
        try:
            self._try_load(min(deadline, total))
        except _CellKilled as killed:
            self._stop_worker()
            raise WorkerLost("exited", f"restarting the submission, cell {killed.outcome.index} {killed.outcome.status}") from None
        except WorkerLost:
            self._stop_worker()
            raise

    # -- sessions ------------------------------------------------------------------
    def session(self, budget: Budget | float) -> Session:
        """A fresh child forked from the loaded worker, with the cells' definitions in place.

        `budget`: the item's (clock.Budget), whose limits its calls count against; a plain
        number is a wall-clock deadline (time.monotonic()).  Threads may ask at once (the
        judge grades TODOs side by side): one fork order and its connection at a time, so
        that each thread gets the child it asked for.
        """
        if not isinstance(budget, Budget):
            budget = Budget.wall(float(budget))
        with self._session_lock:
            return self._new_session(budget)

    def share_sessions(self, lock: AbstractContextManager[Any]) -> None:
        """Take `lock` around a fork order and its connection: one a forked copy of the judge shares."""
        self._session_lock = lock

    def become_copy(self, first_session: int) -> None:
        """In a forked copy of the judge: session numbers from `first_session` on (the judge's stay
        below), and the worker never restarted or stopped here (`copy_lost` says it would have been)."""
        self.copy, self._sessions = True, first_session

    def _new_session(self, budget: Budget) -> Session:
        deadline = budget.wall_deadline
        if self.copy and (self.copy_lost or not self._zygote_alive()):
            self.copy_lost = True
            raise WorkerLost("exited", "the loaded submission is gone (the judge restarts it)")
        if not self._zygote_alive():
            self._reload(deadline)
        assert self.control is not None
        self._sessions += 1
        try:
            _send(self.control, {"op": "fork", "session": self._sessions})
        except OSError as error:
            self._stop_worker()
            raise WorkerLost("exited", str(error)) from None
        limit = min(deadline, time.monotonic() + max(FORK_TIMEOUT_S, self.limits.call_timeout_s))
        try:
            while True:
                conn = self._accept(limit)
                try:
                    hello = _recv_signed(conn, limit, self.key, 0, HELLO)
                except Forged as forged:  # the child's connection, but not its grader thread's frame
                    self._note_tamper([["forged", forged.detail, "", False, False]])
                    conn.close()
                    continue
                except WorkerLost:
                    conn.close()
                    raise
                if hello.get("session") == self._sessions:
                    break
                conn.close()  # not the child we asked for: someone else connected
        except WorkerLost:
            # The loaded submission did not fork (stopped, hung or dead): start it again next time.
            if self.copy:
                self.copy_lost = True
            else:
                self._stop_worker()
            raise
        listed = hello.get("tamper") if isinstance(hello.get("tamper"), list) else []
        self._note_tamper([e for e in listed if isinstance(e, list) and e[3:4] == [True]])  # while the cells ran
        session = Session(
            conn,
            _peer_pid(conn),
            self.limits.call_timeout_s,
            budget,
            shares_files=True,
            wall_backstop=self.limits.wall_backstop,
            key=self.key,
        )
        session._note_tamper([e for e in listed if isinstance(e, list) and e[3:4] != [True]])  # in the child, before its hello
        return session

    def _note_tamper(self, listed: Any) -> None:
        """Denials the worker's audit hook made while the cells ran (each session's hello repeats
        them; kept once) or a frame refused before a session began."""
        for event in listed[:50]:
            if event not in self.tamper and len(self.tamper) < 200:
                self.tamper.append(event)

    def output(self) -> tuple[str, int]:
        """What the submission printed (first bytes, on stdout then stderr) and how much in all."""
        limit = self.limits.output_kb << 10
        for out_capture, err_capture in self._captures:
            out_capture.settle()
            err_capture.settle()
        out = "".join(o.text() for o, _ in self._captures) + "".join(e.text() for _, e in self._captures)
        return out[:limit], sum(o.total + e.total for o, e in self._captures)


def _pipe_holding(data: bytes) -> int:
    """The read end of a pipe that holds `data` and then ends (the worker's standard input)."""
    if len(data) > 4096:  # a pipe holds one page at least: the write never waits for a reader
        raise ValueError("the worker's plan is too long")
    read, write = os.pipe()
    try:
        os.write(write, data)
    finally:
        os.close(write)
    return read


class SandboxBroken(Exception):
    """The worker could not build its confinement (the machine's doing, not the submission's)."""


class _CellKilled(Exception):
    def __init__(self, outcome: CellOutcome):
        super().__init__(outcome.status)
        self.outcome = outcome
