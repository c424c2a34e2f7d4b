"""Finding and killing a worker's processes, and telling who is on the other end of a socket."""

from __future__ import annotations

import os
import signal
import socket
import struct
import time


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
