"""A process that forks children on request and answers for them as a parent would.

Used twice by a warm batch: the worker *template* (worker.py, torch imported once) forks one
sandboxed worker per submission, and the *judge server* (grader/judge_server.py, the checks
imported once) forks one judge per submission.  Each is a single-threaded loop, so that a
fork never copies a lock some other thread held.

A request is one SOCK_SEQPACKET message on the server's socket (a socketpair end, never a
name in the file system that a submission could dial): JSON, and descriptors passed with it,
the first of which is the *reply* socket of that request alone.  On it the server sends
`{"pid": N}` with a pidfd of the child, then `{"exit": code}` when it ends; it reaps the
child only once the requester has closed the reply socket.  Until then the pid stays taken
(a zombie at worst), so the requester may signal the child's process group by its pid as it
would a Popen child's.

Standard library only: the worker loads this file by path, before any submission exists.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MAX_MESSAGE = 1 << 20
MAX_FDS = 16

# A child runs this with the request and the descriptors passed after the reply socket; it
# must never return (it ends with os._exit).
ChildMain = Callable[[dict[str, Any], list[int]], None]


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] | tuple[int, ...] = ()) -> None:
    data = json.dumps(message).encode()
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.send(data)


def receive(sock: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """One message and its descriptors; (None, []) at end of file.  A malformed one raises ValueError."""
    data, fds, flags, _ = socket.recv_fds(sock, MAX_MESSAGE, MAX_FDS)
    if not data and not fds:
        return None, []
    try:
        if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
            raise ValueError("message truncated")
        message = json.loads(data.decode())
        if not isinstance(message, dict):
            raise ValueError("message is not an object")
    except (ValueError, UnicodeDecodeError):
        for fd in fds:
            os.close(fd)
        raise ValueError("malformed request") from None
    return message, fds


def exit_code(status: Any) -> int:
    """Popen's returncode from a waitid() result: the exit status, or minus the signal."""
    if status.si_code == os.CLD_EXITED:
        return int(status.si_status)
    return -int(status.si_status)


@dataclass
class _Child:
    pid: int
    pidfd: int
    reply: socket.socket | None
    exited: bool = False


class Server:
    """The loop.  `serve()` returns when every requester has closed its end of `requests`."""

    def __init__(self, requests: socket.socket, child_main: ChildMain):
        self.requests = requests
        self.child_main = child_main
        self.children: dict[int, _Child] = {}  # by pidfd

    def serve(self) -> list[int]:
        """Answer requests; returns the pids of children still running when the last requester left."""
        while True:
            watched: list[Any] = [self.requests]
            for child in self.children.values():
                if not child.exited:
                    watched.append(child.pidfd)
                if child.reply is not None:
                    watched.append(child.reply)
            ready, _, _ = select.select(watched, [], [])
            for item in ready:
                if item is self.requests:
                    if not self._request():
                        return [c.pid for c in self.children.values() if not c.exited]
                elif isinstance(item, int):
                    self._exited(self.children[item])
                else:
                    self._released(next(c for c in self.children.values() if c.reply is item))

    def _request(self) -> bool:
        try:
            message, fds = receive(self.requests)
        except ValueError:
            return True  # not from a requester of ours (there is none other): ignore it
        except OSError:
            return False
        if message is None:
            return False
        if not fds:
            return True
        reply = socket.socket(fileno=fds[0])
        passed = fds[1:]
        try:
            pid = os.fork()
        except OSError as error:
            self._refuse(reply, passed, f"fork: {error}")
            return True
        if pid == 0:
            self._become_child(reply, message, passed)
        for fd in passed:  # only the child holds them now: the requester sees their ends close with it
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        self.children[pidfd] = _Child(pid, pidfd, reply)
        try:
            send(reply, {"pid": pid}, [pidfd])
        except OSError:
            self._released(self.children[pidfd])
        return True

    def _refuse(self, reply: socket.socket, passed: list[int], why: str) -> None:
        for fd in passed:
            os.close(fd)
        try:
            send(reply, {"error": why[:500]})
        except OSError:
            pass
        reply.close()

    def _become_child(self, reply: socket.socket, message: dict[str, Any], passed: list[int]) -> None:
        try:
            # Nothing of the server's goes on in the child: not the requests socket (a child
            # holding it could read other requests), not the other children's replies or pidfds.
            for sock in [self.requests, reply, *(c.reply for c in self.children.values() if c.reply is not None)]:
                os.close(sock.detach())
            for child in self.children.values():
                os.close(child.pidfd)
            self.children.clear()
            self.child_main(message, passed)
        except BaseException as error:  # never back into the server's loop
            try:
                os.write(2, f"forkserver child: {type(error).__name__}: {error}\n".encode(errors="replace"))
            except OSError:
                pass
        os._exit(70)

    def _exited(self, child: _Child) -> None:
        try:
            status = os.waitid(os.P_PIDFD, child.pidfd, os.WEXITED | os.WNOWAIT)
            code = exit_code(status) if status is not None else -1
        except ChildProcessError:
            code = -1
        child.exited = True
        if child.reply is not None:
            try:
                send(child.reply, {"exit": code})
            except OSError:
                self._released(child)
                return
        else:
            self._reap(child)

    def _released(self, child: _Child) -> None:
        """The requester closed its reply socket: it will not signal the child by pid any more."""
        if child.reply is not None:
            child.reply.close()
            child.reply = None
        if child.exited:
            self._reap(child)

    def _reap(self, child: _Child) -> None:
        try:
            os.waitid(os.P_PIDFD, child.pidfd, os.WEXITED)
        except ChildProcessError:
            pass
        os.close(child.pidfd)
        del self.children[child.pidfd]


def stop(pids: list[int], grace_s: float = 5.0) -> None:
    """SIGINT to each child's process group, then SIGKILL to whatever is left after `grace_s`."""
    import time

    for pid in pids:
        _killpg(pid, signal.SIGINT)
    deadline = time.monotonic() + grace_s
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    break
            except ChildProcessError:
                break
            time.sleep(0.05)
        _killpg(pid, signal.SIGKILL)
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def _killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
