"""The judge's side of the sandbox: start the worker, load the cells, fork sessions, kill on limits.

Only length-prefixed JSON crosses the boundary (never pickle), so nothing the worker sends
can run code here.  Every wait has a timeout; whatever the worker does, the judge goes on.
"""

from __future__ import annotations

import base64
import json
import os
import resource
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.config import Limits
from grader.submission import Cell

WORKER = Path(__file__).with_name("worker.py")
MAX_FRAME = 256 << 20
TOKEN_VAR = "PA_GRADER_SANDBOX"


class WorkerLost(Exception):
    """The session child is gone: it exited, crashed, hung past a limit or broke the protocol."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason  # "timeout", "exited", "protocol", "too_large"
        self.detail = detail


class BudgetExceeded(BaseException):
    """An item's time budget is spent.  A BaseException so that hypothesis stops at once."""


@dataclass
class CellOutcome:
    index: int
    status: str  # "ok", "error", "timeout", "crashed", "not_run"
    error: dict[str, Any] | None = None


@dataclass
class LoadReport:
    cells: list[CellOutcome]
    names: dict[str, dict[str, Any]]
    blocked_imports: list[str]
    cuda_initialized: bool
    restarts: int
    failed: str | None = None  # why loading never finished, if it did not


@dataclass
class Reply:
    ok: bool
    value: Any = None
    error: dict[str, Any] | None = None
    state: dict[str, Any] | None = None


class OutputCapture:
    """Drains a pipe on a thread, keeping the first `limit` bytes and counting the rest."""

    def __init__(self, stream: Any, limit: int):
        self.limit = limit
        self.kept = bytearray()
        self.total = 0
        self._thread = threading.Thread(target=self._drain, args=(stream,), daemon=True)
        self._thread.start()

    def _drain(self, stream: Any) -> None:
        while True:
            chunk = stream.read1(1 << 16) if hasattr(stream, "read1") else stream.read(1 << 16)
            if not chunk:
                return
            self.total += len(chunk)
            room = self.limit - len(self.kept)
            if room > 0:
                self.kept += chunk[:room]

    def text(self) -> str:
        return bytes(self.kept).decode("utf-8", errors="replace")


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    data = json.dumps(message).encode()
    sock.sendall(struct.pack(">I", len(data)) + data)


def _recv(sock: socket.socket, deadline: float) -> dict[str, Any]:
    (size,) = struct.unpack(">I", _read_exact(sock, 4, deadline))
    if size > MAX_FRAME:
        raise WorkerLost("too_large", f"a reply of {size} bytes")
    try:
        message = json.loads(_read_exact(sock, size, deadline).decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise WorkerLost("protocol", str(error)) from None
    if not isinstance(message, dict):
        raise WorkerLost("protocol", "reply is not an object")
    return message


def _read_exact(sock: socket.socket, size: int, deadline: float) -> bytes:
    chunks = []
    while size:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WorkerLost("timeout")
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(min(size, 1 << 20))
        except TimeoutError:
            raise WorkerLost("timeout") from None
        except OSError as error:
            raise WorkerLost("exited", str(error)) from None
        if not chunk:
            raise WorkerLost("exited")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _limit_resources(pid: int, memory_mb: int | None) -> None:
    """Caps set from outside (no preexec_fn: the judge has threads); before any cell is sent."""
    resource.prlimit(pid, resource.RLIMIT_CORE, (0, 0))
    resource.prlimit(pid, resource.RLIMIT_FSIZE, (64 << 20, 64 << 20))
    if memory_mb:
        resource.prlimit(pid, resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))


class Sandbox:
    """One submission's worker.  Use as a context manager: everything it started dies on exit."""

    def __init__(self, cells: list[Cell], limits: Limits, *, allow_cuda: bool = False, python: str | None = None):
        self.cells = cells
        self.limits = limits
        self.allow_cuda = allow_cuda
        self.python = python or sys.executable
        self.token = secrets.token_hex(8)
        self.tmp = Path(tempfile.mkdtemp(prefix="pa-grade-"))
        self.workdir = self.tmp / "work"
        self.workdir.mkdir()
        self.socket_path = str(self.tmp / "judge.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.socket_path)
        self.listener.listen(16)
        self.process: subprocess.Popen[bytes] | None = None
        self.control: socket.socket | None = None
        self.stdout: OutputCapture | None = None
        self.stderr: OutputCapture | None = None
        self.report: LoadReport | None = None
        self._sessions = 0
        self._skip: dict[int, CellOutcome] = {}

    # -- lifecycle -----------------------------------------------------------------
    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stop_worker()
        self._kill_strays()
        self.listener.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _env(self) -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.workdir),
            "TMPDIR": str(self.workdir),
            "LANG": "C.UTF-8",
            "PYTHONHASHSEED": "0",
            "PYTHONDONTWRITEBYTECODE": "1",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "PYTORCH_NVML_BASED_CUDA_CHECK": "1",
            TOKEN_VAR: self.token,
        }
        if self.allow_cuda:
            for name in ("CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "CUDA_HOME"):
                if name in os.environ:
                    env[name] = os.environ[name]
        else:
            env["CUDA_VISIBLE_DEVICES"] = ""
        return env

    def _start_worker(self) -> None:
        memory = None if self.allow_cuda else self.limits.memory_mb  # CUDA maps more address space than it uses
        self.process = subprocess.Popen(
            [self.python, "-u", "-s", "-P", str(WORKER), self.socket_path],
            cwd=self.workdir,
            env=self._env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        _limit_resources(self.process.pid, memory)
        limit = self.limits.output_kb << 10
        self.stdout = OutputCapture(self.process.stdout, limit)
        self.stderr = OutputCapture(self.process.stderr, limit)
        self.control = self._accept(time.monotonic() + 60)

    def _accept(self, deadline: float) -> socket.socket:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WorkerLost("timeout", "the worker did not connect")
            self.listener.settimeout(min(remaining, 0.5))
            try:
                conn, _ = self.listener.accept()
                return conn
            except TimeoutError:
                if self.process is not None and self.process.poll() is not None and self.control is None:
                    raise WorkerLost("exited", "the worker exited before connecting") from None

    def _stop_worker(self) -> None:
        if self.control is not None:
            self.control.close()
            self.control = None
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.process.wait()
            for stream in (self.process.stdout, self.process.stderr):
                if stream is not None:
                    stream.close()
            self.process = None

    def _kill_strays(self) -> None:
        """Kill anything still carrying this sandbox's token (e.g. a process that called setsid)."""
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
                    self.report = LoadReport(self._outcomes({}), {}, [], False, restarts, failed="restarts")
                    return self.report
            except WorkerLost as lost:
                self._stop_worker()
                self.report = LoadReport(self._outcomes({}), {}, [], False, restarts, failed=str(lost))
                return self.report

    def _outcomes(self, seen: dict[int, CellOutcome]) -> list[CellOutcome]:
        return [seen.get(c.index) or self._skip.get(c.index) or CellOutcome(c.index, "not_run") for c in self.cells]

    def _try_load(self, total_deadline: float) -> LoadReport:
        self._start_worker()
        assert self.control is not None
        runnable = [{"index": c.index, "source": c.source} for c in self.cells if c.index not in self._skip]
        _send(self.control, {"op": "load", "cells": runnable})
        seen: dict[int, CellOutcome] = {}
        current: int | None = None
        while True:
            deadline = min(time.monotonic() + self.limits.cell_timeout_s, total_deadline)
            try:
                event = _recv(self.control, deadline)
            except WorkerLost as lost:
                if current is None:
                    raise
                status = "timeout" if lost.reason == "timeout" else "crashed"
                raise _CellKilled(CellOutcome(current, status, {"type": status, "message": lost.detail})) from None
            kind = event.get("event")
            if kind == "cell_start":
                current = int(event["index"])
            elif kind == "cell_done":
                error = event.get("error")
                seen[int(event["index"])] = CellOutcome(int(event["index"]), "error" if error else "ok", error)
                current = None
            elif kind == "loaded":
                return LoadReport(
                    cells=self._outcomes(seen),
                    names=dict(event.get("names") or {}),
                    blocked_imports=[str(x) for x in event.get("blocked_imports") or []][:20],
                    cuda_initialized=bool(event.get("cuda_initialized")),
                    restarts=0,
                )

    # -- sessions ------------------------------------------------------------------
    def session(self, deadline: float) -> Session:
        """A fresh child forked from the loaded worker, with the cells' definitions in place."""
        if self.control is None or self.process is None or self.process.poll() is not None:
            # The loaded worker itself was killed by an earlier session; start it again.
            self._stop_worker()
            self._skip = {o.index: o for o in (self.report.cells if self.report else []) if o.status in ("timeout", "crashed")}
            self._try_load(time.monotonic() + self.limits.total_budget_s)
        assert self.control is not None
        self._sessions += 1
        _send(self.control, {"op": "fork", "session": self._sessions})
        conn = self._accept(min(deadline, time.monotonic() + 30))
        hello = _recv(conn, time.monotonic() + 30)
        pid = _peer_pid(conn)
        if hello.get("session") != self._sessions:
            conn.close()
            raise WorkerLost("protocol", "unexpected session greeting")
        return Session(conn, pid, self.limits.call_timeout_s, deadline)

    def output(self) -> tuple[str, int]:
        """What the submission printed (first bytes, on stdout then stderr) and how much in all."""
        if self.stdout is None or self.stderr is None:
            return "", 0
        return self.stdout.text() + self.stderr.text(), self.stdout.total + self.stderr.total


class _CellKilled(Exception):
    def __init__(self, outcome: CellOutcome):
        super().__init__(outcome.status)
        self.outcome = outcome


def _peer_pid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, _, _ = struct.unpack("3i", creds)
    return pid


@dataclass
class Session:
    """One forked child.  `call` sends one operation and waits for its reply within the limits."""

    conn: socket.socket
    pid: int
    call_timeout_s: float
    deadline: float
    alive: bool = True
    _next_id: int = field(default=0)

    def call(self, op: str, timeout: float | None = None, **fields: Any) -> Reply:
        if not self.alive:
            raise WorkerLost("exited", "the session already ended")
        now = time.monotonic()
        if now >= self.deadline:
            self.kill()
            raise BudgetExceeded()
        self._next_id += 1
        message = {"op": op, "id": self._next_id, **fields}
        call_deadline = min(now + (timeout or self.call_timeout_s), self.deadline)
        try:
            _send(self.conn, message)
            while True:
                reply = _recv(self.conn, call_deadline)
                if reply.get("id") == self._next_id:
                    break
        except WorkerLost as lost:
            self.kill()
            if lost.reason == "timeout" and time.monotonic() >= self.deadline:
                raise BudgetExceeded() from None
            raise
        except OSError as error:
            self.kill()
            raise WorkerLost("exited", str(error)) from None
        error = reply.get("error")
        return Reply(
            ok=bool(reply.get("ok")),
            value=reply.get("value"),
            error=error if isinstance(error, dict) else None,
            state=reply.get("state") if isinstance(reply.get("state"), dict) else None,
        )

    def kill(self) -> None:
        if self.alive:
            self.alive = False
            try:
                os.kill(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.conn.close()

    def end(self) -> None:
        if self.alive:
            try:
                _send(self.conn, {"op": "end"})
            except OSError:
                pass
            self.kill()


# -- tensors across the boundary ------------------------------------------------------

def encode_tensor(tensor: Any) -> dict[str, Any]:
    import torch

    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    data = flat.view(torch.uint8).numpy().tobytes()
    return {"dtype": str(tensor.dtype).replace("torch.", ""), "shape": list(tensor.shape), "data": base64.b64encode(data).decode()}


ALLOWED_DTYPES = ("float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool")


def decode_tensor(payload: Any) -> Any:
    """A tensor from an untrusted payload; TypeError when it is not a well-formed one."""
    import torch

    if not isinstance(payload, dict):
        raise TypeError("not a tensor payload")
    dtype_name, shape, data = payload.get("dtype"), payload.get("shape"), payload.get("data")
    if dtype_name not in ALLOWED_DTYPES or not isinstance(shape, list) or not isinstance(data, str):
        raise TypeError("malformed tensor payload")
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape) or len(shape) > 8:
        raise TypeError("malformed tensor shape")
    dtype = getattr(torch, dtype_name)
    raw = bytearray(base64.b64decode(data.encode(), validate=True))
    count = 1
    for d in shape:
        count *= d
    if len(raw) != count * torch.empty(0, dtype=dtype).element_size():
        raise TypeError("tensor payload size does not match its shape")
    if count == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(raw, dtype=dtype).reshape(shape).clone()
