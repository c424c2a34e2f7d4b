"""Frame conditions: what a call may change, and the judge's means of seeing that nothing else did.

    call                 may change                                   never changes
    prefill, decode      the free list; that request's seq_len        KV data (the pool); other requests;
                         and block table                              earlier results
    get_physical_cache   nothing (a read)                             the pool, the request, earlier results
    paged_attention      nothing                                      its inputs, earlier results

What a call returns belongs to its caller: a later call, or a later write to the pool, never
changes an earlier result.

Two means, by what a forgery could buy:

- the pool lives in a file the judge made and the session child maps shared (`SharedPool`,
  as paged_attention's inputs do): its bytes are read by the judge itself, so no submission
  can hide a write into it;
- earlier results live in the child; a later call's reply says what their digests are after
  it (the snapshot's `kept`, taken with a hash function bound before any cell ran), and the
  judge compares them with digests it took itself of what it received.  A forged "unchanged" could only hide the submission's own
  mistake in its own grading, and a forged "changed" only costs itself.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from grader.sandbox.session import Session, sealed_file


class SharedPool:
    """A pool tensor's bytes in a sealed memfd of the judge's that the session child maps shared
    (handed over with the request: session.with_fds); the judge reads and writes it."""

    def __init__(self, session: Session, data: bytes):
        assert session.shares_files
        self.size = len(data)
        self.fd = sealed_file("pa-pool", data, self.size)
        self.data = data  # what the judge last wrote: what the pool must hold
        self.closed = False

    @property
    def spec(self) -> dict[str, Any]:
        return {"memfd": self.fd, "size": self.size}

    def read(self) -> bytes:
        return os.pread(self.fd, self.size, 0)

    def changed(self) -> bool:
        return self.read() != self.data

    def write(self, data: bytes) -> None:
        assert len(data) == self.size
        os.pwrite(self.fd, data, 0)
        self.data = data

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            os.close(self.fd)
        except OSError:
            pass


def tensor_digest(payload: dict[str, Any]) -> str:
    """As the worker's `_digest` takes it of a tensor: dtype, shape and the base64 of its bytes."""
    return hashlib.sha256((str(payload["dtype"]) + str(payload["shape"]) + str(payload["data"])).encode()).hexdigest()


def plain_digest(value: Any) -> str:
    """As the worker's `_digest` takes it of plain data (a dict, a list, a number)."""
    return hashlib.sha256(json.dumps(value, allow_nan=True, sort_keys=True).encode()).hexdigest()


class Kept:
    """What an example's calls returned, as digests the judge took of what it received."""

    def __init__(self) -> None:
        self.digests: dict[int, str] = {}
        self.labels: dict[int, str] = {}
        self._next = 0

    def key(self) -> int:
        """The key to send with a call (`keep=`): the child keeps what the call returns under it."""
        self._next += 1
        return self._next

    def last(self) -> int:
        """The key the last call was sent with."""
        return self._next

    def add(self, key: int, digest: str, label: str) -> None:
        self.digests[key] = digest
        self.labels[key] = label

    def forget(self, key: int) -> None:
        """The caller changed this result itself (its own to change): it is no longer compared."""
        self.digests.pop(key, None)
        self.labels.pop(key, None)

    def spec(self) -> list[int] | None:
        """What to add to a call's snapshot (`kept=`) for its reply to say how the kept results are
        after it; None when nothing is kept yet."""
        return sorted(self.digests) or None

    def changed_in(self, state: dict[str, Any] | None, asked: list[int] | None) -> list[str]:
        """The labels of the results asked about (`spec()` before the call) that are not what
        their call returned any more, as the reply's snapshot says."""
        if not asked:
            return []
        now = (state or {}).get("kept")
        if not isinstance(now, list):
            return [self.labels[k] for k in asked]  # the child cannot say: nothing earned from it
        return [self.labels[k] for k, digest in zip(asked, now, strict=False) if digest != self.digests[k]] + [
            self.labels[k] for k in asked[len(now):]
        ]
