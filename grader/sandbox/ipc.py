"""Remove the IPC objects and shared-memory files a submission left, where no namespace did.

With an IPC and a mount namespace (namespaces.py) everything here dies with the grading and
this finds nothing.  Without them a SysV segment or a /dev/shm file outlives the grading and
is a channel to the next one, so the judge sweeps after every grading (the worker's keeper
does if the judge died):

- when the submission ran under a uid of its own (the judge is root), whatever that uid
  owns is the submission's: SysV shared memory, message queues and semaphores, files in
  /dev/shm, /dev/mqueue, /tmp and /var/tmp;
- when it ran as the judge's own uid, only what appeared during the grading (absent from the
  snapshot taken before it, changed since it began) and, for a segment, whose creator is no
  longer alive.  Files in /tmp are then left alone: they cannot be told apart from the
  user's own (and where Landlock is active the submission could not write there).

Standard library only: the worker's keeper loads it by path.
"""

from __future__ import annotations

import ctypes
import os
import shutil
from typing import Any

SYSV = ("shm", "msg", "sem")
POSIX_DIRS = ("/dev/shm", "/dev/mqueue")
TEMP_DIRS = ("/tmp", "/var/tmp")
IPC_RMID = 0

_libc = ctypes.CDLL(None, use_errno=True)


def _sysv(kind: str) -> list[dict[str, int]]:
    """The rows of /proc/sysvipc/<kind> (this IPC namespace's objects), as dicts of ints."""
    try:
        with open(f"/proc/sysvipc/{kind}") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    if not lines:
        return []
    header = lines[0].split()
    rows = []
    for line in lines[1:]:
        values = line.split()
        try:
            rows.append({name: int(value) for name, value in zip(header, values, strict=False)})
        except ValueError:
            continue
    return rows


def _id(kind: str, row: dict[str, int]) -> int:
    return row.get({"shm": "shmid", "msg": "msqid", "sem": "semid"}[kind], -1)


def _entries(directory: str) -> list[os.DirEntry[str]]:
    try:
        return list(os.scandir(directory))
    except OSError:
        return []


def snapshot() -> frozenset[tuple[str, Any]]:
    """What exists now: SysV ids and POSIX names (taken before a grading with a shared uid)."""
    found: set[tuple[str, Any]] = {(kind, _id(kind, row)) for kind in SYSV for row in _sysv(kind)}
    for directory in POSIX_DIRS:
        found |= {(directory, e.name) for e in _entries(directory)}
    return frozenset(found)


def _alive(pid: int) -> bool:
    """Whether `pid` still runs (a process killed a moment ago may linger as a zombie: not running)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :][:1] not in (b"Z", b"X")


def _remove_sysv(kind: str, ident: int) -> bool:
    if kind == "shm":
        result = _libc.shmctl(ident, IPC_RMID, None)
    elif kind == "msg":
        result = _libc.msgctl(ident, IPC_RMID, None)
    else:
        result = _libc.semctl(ident, 0, IPC_RMID)
    return result == 0


def _remove_path(path: str) -> bool:
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
        return True
    except OSError:
        return False


def sweep(uid: int, before: frozenset[tuple[str, Any]] | None = None, since: float | None = None) -> list[str]:
    """Remove what `uid` left; with `before`, only what is new since then.  Returns what went."""
    if uid == 0 and before is None:
        return []  # never everything root owns: a uid of a grading's own is never 0
    removed = []
    for kind in SYSV:
        for row in _sysv(kind):
            ident = _id(kind, row)
            if uid not in (row.get("uid"), row.get("cuid")):
                continue
            if before is not None:
                if (kind, ident) in before or (since is not None and row.get("ctime", 0) < int(since) - 1):
                    continue
                if kind == "shm" and _alive(row.get("cpid", 0)):
                    continue  # its creator still runs, and every process of the submission is dead
            if _remove_sysv(kind, ident):
                removed.append(f"{kind} {ident}")
    for directory in POSIX_DIRS + (TEMP_DIRS if before is None else ()):
        for entry in _entries(directory):
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if info.st_uid != uid:
                continue
            if before is not None and ((directory, entry.name) in before or (since is not None and info.st_ctime < since - 1)):
                continue
            if _remove_path(entry.path):
                removed.append(entry.path)
    return removed
