"""A session child as the judge sees it: one operation at a time, within the time limits, and
paged_attention's inputs in a file both map (what the submission writes there, the judge reads
back itself)."""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
import signal
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.sandbox.clock import Budget, CallClock
from grader.sandbox.protocol import BudgetExceeded, Reply, WorkerLost, _clean_error, _recv, _send

ATTENTION_INPUTS = ("query", "key_cache", "value_cache", "block_tables", "seq_lens")


@dataclass
class Session:
    """One forked child.  `call` sends one operation and waits for its reply within the limits.

    The limits count CPU time (clock.py): a call may use `call_timeout_s` of the session's
    CPU, or run `wall_backstop` times that in wall-clock time; the item's `budget` holds its
    CPU and wall-clock limits and counts this session's CPU until it ends.
    """

    conn: socket.socket
    pid: int
    call_timeout_s: float
    budget: Budget
    alive: bool = True
    shared_dir: Path | None = None
    shared_gid: int | None = None  # the submission's group, when it runs under a uid of its own
    wall_backstop: float = 3.0
    _next_id: int = field(default=0)

    def __post_init__(self) -> None:
        self.budget.session_started(self.pid)

    @property
    def deadline(self) -> float:
        """The wall-clock moment the item's budget ends at the latest (monotonic)."""
        return self.budget.wall_deadline

    def call(self, op: str, timeout: float | None = None, **fields: Any) -> Reply:
        if not self.alive:
            raise WorkerLost("exited", "the session already ended")
        if self.budget.expired():
            self.kill()
            raise BudgetExceeded()
        self._next_id += 1
        shared = None
        if op == "attention" and fields.get("device", "cpu") == "cpu" and self.shared_dir is not None:
            fields, shared = _share_inputs(fields, self.shared_dir, self.shared_gid)
        message = {"op": op, "id": self._next_id, **fields}
        clock = CallClock(self.pid, timeout or self.call_timeout_s, self.wall_backstop, self.budget)
        try:
            # The socket keeps the last wait's timeout (milliseconds, maybe): a large request (a
            # permutation of 100,000 blocks) that fills the socket's buffer needs the call's own.
            self.conn.settimeout(max(0.1, clock.wall_deadline - time.monotonic()))
            try:
                _send(self.conn, message)
            except TimeoutError:
                clock.reason = "wall"  # the worker did not read it in the call's time
                raise WorkerLost("timeout") from None
            while True:
                reply = _recv(self.conn, clock)
                if reply.get("id") == self._next_id:
                    break
            if shared is not None and reply.get("ok") is True and isinstance(reply.get("value"), dict):
                # What the judge reads back from its own file, not what the submission says.
                reply["value"]["input_digests"] = shared.digests()
        except WorkerLost as lost:
            self.kill()
            if lost.reason == "timeout" and clock.reason == "budget":
                raise BudgetExceeded() from None
            if lost.reason == "timeout":
                raise WorkerLost("timeout", clock.describe()) from None
            raise
        except OSError as error:
            self.kill()
            raise WorkerLost("exited", str(error)) from None
        finally:
            if shared is not None:
                shared.close()
        return Reply(
            ok=reply.get("ok") is True,
            value=reply.get("value"),
            error=_clean_error(reply.get("error")),
            state=reply.get("state") if isinstance(reply.get("state"), dict) else None,
        )

    def kill(self) -> None:
        if self.alive:
            self.alive = False
            self.budget.session_ended(self.pid)  # its CPU, read before it goes
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


class _SharedInputs:
    """paged_attention's inputs in a file the session maps shared: in-place writes land here."""

    def __init__(self, fd: int, path: Path, regions: dict[str, tuple[int, int]]):
        self.fd, self.path, self.regions = fd, path, regions

    def digests(self) -> dict[str, str]:
        return {name: hashlib.sha256(os.pread(self.fd, size, offset)).hexdigest() for name, (offset, size) in self.regions.items()}

    def close(self) -> None:
        os.close(self.fd)
        try:
            self.path.unlink()
        except OSError:
            pass


def _share_inputs(fields: dict[str, Any], directory: Path, gid: int | None = None) -> tuple[dict[str, Any], _SharedInputs | None]:
    blobs: dict[str, bytes] = {}
    for name in ATTENTION_INPUTS:
        payload = fields.get(name)
        if not isinstance(payload, dict) or not isinstance(payload.get("data"), str):
            return fields, None
        blobs[name] = base64.b64decode(payload["data"])
    layout, regions, offset = {}, {}, 0
    for name, blob in blobs.items():
        regions[name] = (offset, len(blob))
        layout[name] = {"dtype": fields[name]["dtype"], "shape": fields[name]["shape"], "offset": offset}
        offset += (len(blob) + 63) // 64 * 64
    if offset == 0:
        return fields, None
    path = directory / f"inputs-{secrets.token_hex(8)}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    if gid is not None:  # the submission's own uid reads and writes it through its group
        os.fchown(fd, -1, gid)
        os.fchmod(fd, 0o660)
    for name, blob in blobs.items():
        os.pwrite(fd, blob, regions[name][0])
    os.ftruncate(fd, offset)
    return {**fields, **layout, "shared": {"path": str(path), "size": offset}}, _SharedInputs(fd, path, regions)
