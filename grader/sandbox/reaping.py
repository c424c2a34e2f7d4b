"""Finding and killing a worker's processes, telling who is on the other end of a socket, and
the private directories judges that died left behind."""

from __future__ import annotations

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


PRIVATE_PREFIX = "pa-grade-"  # + the judge's pid + "-": a grading's private directory in the temp dir


def make_private_dir() -> str:
    """A grading's private directory, named by its judge's pid, after removing those whose judge
    died before its keeper could (a SIGKILL between making it and starting the worker)."""
    parent = tempfile.gettempdir()
    try:
        entries = list(os.scandir(parent))
    except OSError:
        entries = []
    for entry in entries:
        found = re.fullmatch(re.escape(PRIVATE_PREFIX) + r"(\d+)-\w+", entry.name)
        if found is None or alive(int(found.group(1))):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if entry.is_dir(follow_symlinks=False) and info.st_uid == os.geteuid():  # ours, never a link
            shutil.rmtree(entry.path, ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"{PRIVATE_PREFIX}{os.getpid()}-")
