"""What crosses from the worker to the judge: length-prefixed JSON frames (never pickle), the
replies and reports made of them, and the worker's output.  Nothing a worker sends can run
code here; a frame too large or malformed ends the session as "protocol" or "too_large"."""

from __future__ import annotations

import array
import fcntl
import hashlib
import hmac
import json
import os
import select
import socket
import struct
import termios
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

MAX_FRAME = 16 << 20  # no correct reply is near this; a larger one is refused unread
MAX_SKIPPED = 50  # lines reported as not run while grading, per submission
SKIP_REASONS = ("shell", "install", "debugger", "network", "program")


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
class SkippedLine:
    """A line of a cell that did not run while grading (a shell command, an install, a debugger)."""

    index: int  # the cell
    line: int | None  # its line, when the worker could tell
    text: str  # the line as typed (the student's text: sanitised with the rest)
    reason: str  # one of SKIP_REASONS


@dataclass
class LoadReport:
    cells: list[CellOutcome]
    names: dict[str, dict[str, Any]]
    blocked_imports: list[str]
    cuda_initialized: bool
    restarts: int
    failed: str | None = None  # why loading never finished, if it did not
    landlock: int = 0  # the Landlock ABI the submission runs under (0: none)
    skipped: list[SkippedLine] = field(default_factory=list)


@dataclass
class Reply:
    ok: bool
    value: Any = None
    error: dict[str, Any] | None = None
    state: dict[str, Any] | None = None


class OutputCapture:
    """Drains a pipe on a thread, keeping the first `limit` bytes and counting the rest.

    The thread owns the descriptor: it reads with select() so that stop() ends it even when
    some stray process still holds the pipe open, and it closes the descriptor itself.
    """

    def __init__(self, fd: int, limit: int):
        self.limit = limit
        self.kept = bytearray()
        self.total = 0
        self._fd = fd
        self._reading = threading.Lock()  # held from a read to its bytes kept
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drain, args=(fd,), daemon=True, name="pa-grade-output")
        self._thread.start()

    def _drain(self, fd: int) -> None:
        try:
            while not self._stop.is_set():
                ready, _, _ = select.select([fd], [], [], 0.2)
                if not ready:
                    continue
                with self._reading:
                    try:
                        chunk = os.read(fd, 1 << 20)
                    except OSError:
                        return
                    if not chunk:
                        return
                    self.total += len(chunk)
                    room = self.limit - len(self.kept)
                    if room > 0:
                        self.kept += chunk[:room]
        finally:
            with self._reading:
                os.close(fd)
                self._fd = -1

    def settle(self, wait: float = 2.0) -> None:
        """Wait (at most `wait` s) until what is in the pipe now is kept: the worker writes unbuffered
        before it replies, so a live sandbox's output is read whole, however busy the machine."""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            with self._reading:
                if self._fd < 0:
                    return
                try:
                    pending = struct.unpack("i", fcntl.ioctl(self._fd, termios.FIONREAD, b"\0\0\0\0"))[0]
                except OSError:
                    return
            if pending == 0:
                return
            time.sleep(0.005)

    def stop(self, wait: float = 1.0) -> None:
        """Take what is already in the pipe, then end the thread."""
        self._thread.join(timeout=wait)  # at EOF it ends by itself
        self._stop.set()
        self._thread.join(timeout=1.0)

    def text(self) -> str:
        return bytes(self.kept).decode("utf-8", errors="replace")


def _send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> bytes:
    """Send one frame; returns its bytes (a signed reply names the digest of the request it answers).
    `fds`: descriptors handed over with it (SCM_RIGHTS, on its first bytes: the worker receives
    them with the frame's length)."""
    data = json.dumps(message).encode()
    frame = struct.pack(">I", len(data)) + data
    if fds:
        sent = sock.sendmsg([frame], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        frame = frame[sent:]
    if frame:
        sock.sendall(frame)
    return data


HELLO = hashlib.sha256(b"hello").digest()
MAC_BYTES = 32


class Forged(WorkerLost):
    """A frame on a grader thread's connection that the grader thread did not write (its signature is wrong)."""

    def __init__(self, detail: str):
        super().__init__("protocol", detail)


def signature(key: bytes, number: int, request: bytes, body: bytes) -> bytes:
    """What the worker's grader thread signs a frame with (machinery.signature): HMAC-SHA256 over
    the frame's number, the digest of the request it answers and its bytes."""
    return hmac.digest(key, b"pa-grader-frame" + struct.pack(">Q", number) + request + body, "sha256")


def _recv_signed(sock: socket.socket, deadline: float | Waiter, key: bytes, number: int, request: bytes) -> dict[str, Any]:
    """The next frame of a grader thread, which must be its `number`th and answer `request` (a
    digest): anything else on the connection (a frame the submission wrote there, one replayed,
    one answering another request) raises Forged."""
    (size,) = struct.unpack(">I", _read_exact(sock, 4, deadline))
    if size > MAX_FRAME:
        raise WorkerLost("too_large", f"a reply of {size} bytes")
    if size < MAC_BYTES:
        raise Forged("a frame too short to be signed")
    frame = _read_exact(sock, size, deadline)
    mac, body = frame[:MAC_BYTES], frame[MAC_BYTES:]
    if not hmac.compare_digest(mac, signature(key, number, request, body)):
        raise Forged("a frame the grader's code did not write")
    try:
        message = json.loads(body.decode())
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise WorkerLost("protocol", str(error)[:200]) from None
    if not isinstance(message, dict):
        raise WorkerLost("protocol", "reply is not an object")
    return message


class Waiter(Protocol):
    """A limit that is not a fixed moment (clock.CallClock): how long to wait before asking
    again; 0 when it is reached."""

    def next_wait(self) -> float: ...


def _recv(sock: socket.socket, deadline: float | Waiter) -> dict[str, Any]:
    (size,) = struct.unpack(">I", _read_exact(sock, 4, deadline))
    if size > MAX_FRAME:
        raise WorkerLost("too_large", f"a reply of {size} bytes")
    try:
        message = json.loads(_read_exact(sock, size, deadline).decode())
    except (UnicodeDecodeError, ValueError, RecursionError) as error:  # ValueError: bad JSON, huge ints
        raise WorkerLost("protocol", str(error)[:200]) from None
    if not isinstance(message, dict):
        raise WorkerLost("protocol", "reply is not an object")
    return message


def _read_exact(sock: socket.socket, size: int, deadline: float | Waiter) -> bytes:
    chunks = []
    while size:
        remaining = deadline - time.monotonic() if isinstance(deadline, float | int) else deadline.next_wait()
        if remaining <= 0:
            raise WorkerLost("timeout")
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(min(size, 1 << 20))
        except TimeoutError:
            continue  # the limit says whether to wait longer
        except OSError as error:
            raise WorkerLost("exited", str(error)) from None
        if not chunk:
            raise WorkerLost("exited")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _clean_error(raw: Any) -> dict[str, Any] | None:
    """An error description from the worker, reduced to the fields and types the judge reads."""
    if not isinstance(raw, dict):
        return None
    return {
        "type": str(raw.get("type", ""))[:200],
        "message": str(raw.get("message", ""))[:2000],
        "traceback": str(raw.get("traceback", ""))[:4000],
        "not_implemented": raw.get("not_implemented") is True,
        "rejected_return": raw.get("rejected_return") is True,
        "isa": [str(name)[:40] for name in raw.get("isa", [])][:20] if isinstance(raw.get("isa"), list) else [],
    }


def _skipped_line(event: dict[str, Any], cells: set[int]) -> SkippedLine | None:
    """A skipped-line event, if it names a cell of this submission and a known reason (else ignored)."""
    index, line, text, reason = event.get("index"), event.get("line"), event.get("text"), event.get("reason")
    if type(index) is not int or index not in cells or reason not in SKIP_REASONS or not isinstance(text, str):
        return None
    return SkippedLine(index, line if type(line) is int and 0 < line < 1 << 20 else None, text[:300], reason)


def _index(event: dict[str, Any]) -> int:
    index = event.get("index")
    if type(index) is not int:
        raise WorkerLost("protocol", "a cell event without a cell index")
    return index
