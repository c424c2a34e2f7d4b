"""A session child as the judge sees it: one operation at a time, within the time limits, and
paged_attention's inputs in a file both map (what the submission writes there, the judge reads
back itself).  The judge's files are memfds sealed against growing and shrinking, handed to the
child with the request that maps them (SCM_RIGHTS): no path names them, and a write past their
end fails.

The child's grader thread (worker-side machinery.py) answers; every frame it sends is signed
with the grading's key, numbered, and names the digest of the request it answers, so a frame
the submission wrote on the connection, replayed or reordered is refused (protocol.Forged) and
counted as tampering.  Each reply lists what the worker's audit hook denied since the last."""

from __future__ import annotations

import base64
import fcntl
import hashlib
import os
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from grader.sandbox.clock import Budget, CallClock
from grader.sandbox.protocol import BudgetExceeded, Forged, Reply, WorkerLost, _clean_error, _recv_signed, _send

ATTENTION_INPUTS = ("query", "key_cache", "value_cache", "block_tables", "seq_lens")
JUDGE_HANDLES = 1 << 24  # handles the judge chooses start above this; the worker's own count from 1


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
    shares_files: bool = False  # the judge's files mapped by the child (sealed memfds): inputs, pools
    wall_backstop: float = 3.0
    key: bytes = b""  # the grading's signing key (client.Sandbox); the hello was frame 0
    tamper: list[list[Any]] = field(default_factory=list)  # denials and forgeries seen, until attached to a sink
    sink: list[tuple[str, list[Any]]] | None = None  # where they go, with the scope they served (attach)
    scope: str = ""
    _next_id: int = field(default=0)
    _frames: int = field(default=1)
    _caches: _SharedInputs | None = field(default=None)  # the file holding the current example's caches
    # Requests sent with the next call, in its frame (defer), each with what reads its reply.
    _pending: list[tuple[dict[str, Any], Callable[[Reply], None] | None]] = field(default_factory=list)
    _handles: int = field(default=JUDGE_HANDLES)  # the last object handle the judge chose (new_handle)
    _lists: dict[str, list[int]] = field(default_factory=dict)  # the lists the worker last sent, by key (expand_lists)

    def __post_init__(self) -> None:
        self.budget.session_started(self.pid)

    @property
    def deadline(self) -> float:
        """The wall-clock moment the item's budget ends at the latest (monotonic)."""
        return self.budget.wall_deadline

    def new_handle(self) -> int:
        """A handle for an object a deferred constructor makes (the worker numbers its own below these)."""
        self._handles += 1
        return self._handles

    def defer(self, op: str, on_reply: Callable[[Reply], None] | None = None, **fields: Any) -> None:
        """Send `op` in the next call's frame, ahead of it, instead of a round trip of its own:
        for a request nothing waits on (a reseed; a constructor whose handle the judge chose).
        Its reply goes to `on_reply` before that call returns; if it failed, the worker runs
        nothing after it (`must_succeed`), and `on_reply` is expected to raise."""
        if op in ("attention", "batch"):
            raise ValueError(f"{op} cannot be deferred")
        self._next_id += 1
        if op == "reseed":
            self._drop_caches()  # a new example: the worker lets go of its caches too
        message = {"op": op, "id": self._next_id, **fields}
        if on_reply is not None:
            message["must_succeed"] = True
        self._pending.append((message, on_reply))

    def call(self, op: str, timeout: float | None = None, **fields: Any) -> Reply:
        if not self.alive:
            raise WorkerLost("exited", "the session already ended")
        if self.budget.expired():
            self.kill()
            raise BudgetExceeded()
        self._next_id += 1
        shared = None
        if op == "reseed":
            self._drop_caches()  # a new example: the worker lets go of its caches too
        if op == "attention" and fields.get("device", "cpu") == "cpu" and self.shares_files:
            fields, shared = self._share_attention_inputs(fields)
        message = {"op": op, "id": self._next_id, **fields}
        pending, self._pending = self._pending, []
        if pending:
            self._next_id += 1
            message = {"op": "batch", "id": self._next_id, "ops": [m for m, _ in pending] + [message]}
        clock = CallClock(self.pid, timeout or self.call_timeout_s, self.wall_backstop, self.budget)
        try:
            # The socket keeps the last wait's timeout (milliseconds, maybe): a large request (a
            # permutation of 100,000 blocks) that fills the socket's buffer needs the call's own.
            self.conn.settimeout(max(0.1, clock.wall_deadline - time.monotonic()))
            message, fds = with_fds(message)
            try:
                sent = _send(self.conn, message, fds)
            except TimeoutError:
                clock.reason = "wall"  # the worker did not read it in the call's time
                raise WorkerLost("timeout") from None
            request = hashlib.sha256(sent).digest()
            reply = _recv_signed(self.conn, clock, self.key, self._frames, request)
            self._frames += 1
            self._note_tamper(reply.get("tamper"))
            expand_lists(reply, self._lists, batch=bool(pending))
            if pending:
                reply = self._unbatch(reply, pending)
            if shared is not None and reply.get("ok") is True and isinstance(reply.get("value"), dict):
                # What the judge reads back from its own files, not what the submission says.
                reply["value"]["input_digests"] = shared.digests()
        except Forged as forged:
            self._note_tamper([["forged", forged.detail, "", False, False]])
            self.kill()
            raise
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
                shared.close_unless(self._caches)
        return _reply(reply)

    def _unbatch(self, reply: dict[str, Any], pending: list[tuple[dict[str, Any], Callable[[Reply], None] | None]]) -> dict[str, Any]:
        """The deferred requests' replies handed to their readers, in order; the waited-for call's returned."""
        replies = reply.get("value") if reply.get("ok") is True else None
        if not isinstance(replies, list) or not 0 < len(replies) <= len(pending) + 1 or not all(isinstance(r, dict) for r in replies):
            raise WorkerLost("protocol", "a batch's replies of the wrong form")
        for (_, on_reply), sub in zip(pending, replies, strict=False):
            if on_reply is not None:
                on_reply(_reply(sub))  # raises where the request failed
        if len(replies) <= len(pending):
            raise WorkerLost("protocol", "a batch cut short after a request that did not fail")
        return replies[-1]

    def note_broken(self, detail: str) -> None:
        """The grader's own code in the worker failed where no code of the submission's runs and
        nothing can fail: it was changed (its memory written).  Tampering ("broken"), in this
        session's scope."""
        self._note_tamper([["broken", detail, "", False, True]])

    def attach(self, sink: list[tuple[str, list[Any]]], scope: str) -> None:
        """Send what was and will be denied or refused in this session to `sink`, as `scope`'s (an item, a TODO)."""
        self.sink, self.scope = sink, scope
        self._note_tamper(self.tamper)
        self.tamper = []

    def _note_tamper(self, listed: Any) -> None:
        """What the worker's audit hook denied since its last frame (a list of small lists), kept as
        the worker gave it (grader/tampering.py reads it)."""
        if not isinstance(listed, list):
            return
        events = [e for e in listed[:50] if isinstance(e, list)]
        if self.sink is None:
            self.tamper += events[: max(0, 200 - len(self.tamper))]
        else:
            self.sink += [(self.scope, e) for e in events][: max(0, 1000 - len(self.sink))]

    def _share_attention_inputs(self, fields: dict[str, Any]) -> tuple[dict[str, Any], _SharedInputs | None]:
        """paged_attention's inputs in a new file; a decode step's caches (`reuse_caches`) written in
        place in the file that already holds the example's caches, which the worker maps still."""
        previous = self._caches
        reuse = bool(fields.get("reuse_caches")) and previous is not None and all(
            isinstance(fields.get(name), dict) and previous.fits(name, fields[name]) for name in CACHES)
        shared_fields, shared = _share_inputs(fields, skip=CACHES if reuse else ())
        if shared is None:
            return fields, None
        if reuse:
            assert previous is not None
            for name in CACHES:
                previous.write(name, base64.b64decode(fields[name]["data"]))
                shared_fields[name] = {"dtype": fields[name]["dtype"], "shape": fields[name]["shape"], "reused": True}
            shared.adopt(previous, CACHES)
        else:
            self._drop_caches()
            self._caches = shared
        return shared_fields, shared

    def _drop_caches(self) -> None:
        if self._caches is not None:
            self._caches.close()
            self._caches = None

    def kill(self) -> None:
        self._pending = []
        if self.alive:
            self.alive = False
            self.budget.session_ended(self.pid)  # its CPU, read before it goes
            try:
                os.kill(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.conn.close()
            self._drop_caches()

    def end(self) -> None:
        if self.alive:
            try:
                _send(self.conn, {"op": "end"})
            except OSError:
                pass
            self.kill()


CACHES = ("key_cache", "value_cache")


def expand_lists(reply: dict[str, Any], memory: dict[str, list[int]], batch: bool) -> None:
    """The allocator's lists in a reply's states (a batch's, in order) made whole again.

    The worker sends a list as what changed from a list it sent before (answers._sent_list);
    `memory` holds the last list sent under each key, as the worker's does: a state's lists
    are rebuilt from what was remembered before it, then remembered.  Only states the worker's
    own code wrote are read (a reply's, or a batch's sub-replies'), never a value a call
    returned.  A change that does not fit the list it names is the protocol broken."""
    subs = reply.get("value") if batch and reply.get("ok") is True else [reply]
    for sub in subs if isinstance(subs, list) else []:
        state = sub.get("state") if isinstance(sub, dict) else None
        if not isinstance(state, dict):
            continue
        requests = state.get("requests")
        entries = [state.get("free_blocks")] + ([r.get("block_table") for r in requests.values() if isinstance(r, dict)]
                                                if isinstance(requests, dict) else [])
        sent = {}
        for entry in entries:
            if isinstance(entry, dict) and "key" in entry:
                key, whole = _expand_list(entry, memory)
                sent[key] = whole
        memory.update(sent)


def _expand_list(entry: dict[str, Any], memory: dict[str, list[int]]) -> tuple[str, list[int]]:
    key, delta = entry.pop("key"), entry.pop("delta", None)
    if not isinstance(key, str) or not key:
        raise WorkerLost("protocol", "a list under a key that is not a string")
    if delta is None:
        whole = entry.get("ok")
        if not isinstance(whole, list):
            raise WorkerLost("protocol", "a remembered list that is not a list")
        return key, list(whole)
    base = memory.get(delta[4]) if isinstance(delta, list) and len(delta) == 5 and isinstance(delta[4], str) else None
    if not (base is not None and isinstance(delta[1], list) and all(type(n) is int and n >= 0 for n in (delta[0], delta[2], delta[3]))
            and delta[3] == len(base) and delta[0] + delta[2] <= len(base)):
        raise WorkerLost("protocol", "a list's change that does not fit the list it changes")
    kept, middle, ending = delta[0], delta[1], delta[2]
    entry["ok"] = base[:kept] + middle + base[len(base) - ending:]
    return key, list(entry["ok"])


def _reply(raw: dict[str, Any]) -> Reply:
    return Reply(
        ok=raw.get("ok") is True,
        value=raw.get("value"),
        error=_clean_error(raw.get("error")),
        state=raw.get("state") if isinstance(raw.get("state"), dict) else None,
    )


class _SharedInputs:
    """paged_attention's inputs in a file the session maps shared: in-place writes land here.

    A call that reuses the caches of the example (a decode step) reads them from the file that
    holds them (`adopt`), which stays open until the example ends."""

    def __init__(self, fd: int, regions: dict[str, tuple[int, int]], layout: dict[str, tuple[str, list[int]]], size: int = 64):
        self.fd, self.regions, self.layout, self.size = fd, regions, layout, size
        self.borrowed: dict[str, _SharedInputs] = {}
        self.closed = False

    def fits(self, name: str, payload: dict[str, Any]) -> bool:
        """Whether `payload` has the dtype and shape of the tensor this file holds under `name`."""
        return self.layout.get(name) == (payload.get("dtype"), payload.get("shape"))

    def write(self, name: str, data: bytes) -> None:
        offset, size = self.regions[name]
        assert len(data) == size
        os.pwrite(self.fd, data, offset)

    def adopt(self, other: _SharedInputs, names: tuple[str, ...]) -> None:
        for name in names:
            self.borrowed[name] = other

    def digests(self) -> dict[str, str]:
        out = {name: hashlib.sha256(os.pread(self.fd, size, offset)).hexdigest() for name, (offset, size) in self.regions.items()}
        for name, other in self.borrowed.items():
            out.update({k: v for k, v in other.digests().items() if k == name})
        return out

    def close_unless(self, keep: _SharedInputs | None) -> None:
        if self is not keep:
            self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        os.close(self.fd)


def sealed_file(name: str, data: bytes | dict[int, bytes], size: int) -> int:
    """A memfd of `size` bytes holding `data` (at offset 0, or at each offset of a dict), sealed so
    that it can neither grow nor shrink (a write past its end fails: no disk, no channel)."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, size)
        for offset, blob in (data.items() if isinstance(data, dict) else [(0, data)]):
            os.pwrite(fd, blob, offset)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
    except BaseException:
        os.close(fd)
        raise
    return fd


def with_fds(message: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
    """The message as sent, and the descriptors that go with it: each judge's file it names
    (`"shared": {"memfd": fd, "size": n}`, in it or in a batch's requests) becomes
    `{"fd": i, "size": n}`, i its place in the list handed over with the frame."""
    fds: list[int] = []

    def sent(one: dict[str, Any]) -> dict[str, Any]:
        shared = one.get("shared")
        if not isinstance(shared, dict) or "memfd" not in shared:
            return one
        fds.append(shared["memfd"])
        return {**one, "shared": {"fd": len(fds) - 1, "size": shared["size"]}}

    if message.get("op") == "batch":
        return {**message, "ops": [sent(m) for m in message["ops"]]}, fds
    return sent(message), fds


def _share_inputs(fields: dict[str, Any], skip: tuple[str, ...] = ()) -> tuple[dict[str, Any], _SharedInputs | None]:
    blobs: dict[str, bytes] = {}
    for name in ATTENTION_INPUTS:
        payload = fields.get(name)
        if not isinstance(payload, dict) or not isinstance(payload.get("data"), str):
            return fields, None
        if name not in skip:
            blobs[name] = base64.b64decode(payload["data"])
    layout, regions, shapes, offset = {}, {}, {}, 0
    for name, blob in blobs.items():
        regions[name] = (offset, len(blob))
        layout[name] = {"dtype": fields[name]["dtype"], "shape": fields[name]["shape"], "offset": offset}
        shapes[name] = (fields[name]["dtype"], fields[name]["shape"])
        offset += (len(blob) + 63) // 64 * 64
    size = max(offset, 64)
    fd = sealed_file("pa-inputs", {regions[name][0]: blob for name, blob in blobs.items()}, size)
    return {**fields, **layout, "shared": {"memfd": fd, "size": size}}, _SharedInputs(fd, regions, shapes, size)
