"""Finding and killing a worker's processes, telling who is on the other end of a socket, and
the private directories judges that died left behind."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import signal
import socket
import struct
import tempfile
import time

from grader.sandbox.cgroups import alive


def _process_table() -> dict[int, list[int]]:
    """Parent pid -> live child pids, from /proc (zombies left out: they are already dead)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1 and fields[0] != b"Z":
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def descendants(root: int) -> list[int]:
    table = _process_table()
    found, todo = [], [root]
    while todo:
        for child in table.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def kill_descendants(root: int) -> int:
    """SIGKILL everything below `root` until nothing is left; returns how many were killed.

    The worker's first process is a child subreaper, so an orphan of the submission (a
    daemon, a double fork, a setsid) is re-parented to it and is found on the next round.
    """
    killed = 0
    for _round in range(200):
        below = descendants(root)
        if not below:
            break
        for pid in below:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.002)
    return killed


def _parent_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return int(stat[stat.rfind(b")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def _peer_pid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, _, _ = struct.unpack("3i", creds)
    return pid


def _peer_uid(conn: socket.socket) -> int:
    """The uid the peer runs as, as this process sees it (outside the worker's user namespace)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _, uid, _ = struct.unpack("3i", creds)
    return uid


PRIVATE_PREFIX = "pa-grade-"  # + random letters: a grading's private directory in the temp dir
STALE_AFTER_S = 60.0  # a directory younger than this is never swept (its judge may be locking it)
_OLD_NAME = re.compile(re.escape(PRIVATE_PREFIX) + r"(\d+)-\w+")  # pa-grade-<judge pid>-*, before the lock


def make_private_dir() -> tuple[str, int]:
    """A grading's private directory, and a descriptor holding a lock on it while its judge lives.

    Its name carries nothing of the judge (the submission sees it: its mounts, its working
    directory): whether a judge still needs it is the lock, which the kernel releases when the
    judge dies however it dies.  First removes those whose judge died before its keeper could (a
    SIGKILL between making it and starting the worker).
    """
    parent = tempfile.gettempdir()
    try:
        entries = list(os.scandir(parent))
    except OSError:
        entries = []
    for entry in entries:
        if entry.name.startswith(PRIVATE_PREFIX) and _abandoned(entry):
            shutil.rmtree(entry.path, ignore_errors=True)
    path = tempfile.mkdtemp(prefix=PRIVATE_PREFIX)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    fcntl.flock(fd, fcntl.LOCK_EX)  # made a moment ago by us: nobody else holds it
    return path, fd


def _abandoned(entry: os.DirEntry[str]) -> bool:
    """Whether this private directory is ours (never a link, never another user's) and its judge is gone."""
    try:
        info = entry.stat(follow_symlinks=False)
    except OSError:
        return False
    if not entry.is_dir(follow_symlinks=False) or info.st_uid != os.geteuid():
        return False
    old = _OLD_NAME.fullmatch(entry.name)
    if old is not None:  # made by a grader before the lock: named by its judge's pid
        return not alive(int(old.group(1)))
    if time.time() - info.st_mtime < STALE_AFTER_S:
        return False
    try:
        fd = os.open(entry.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True  # nobody holds it: its judge is dead (closed when this descriptor closes)
    except OSError:
        return False
    finally:
        os.close(fd)
