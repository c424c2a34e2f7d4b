"""The requester's side of a fork server (forkserver.py): a child it did not fork, handled like a Popen.

`request()` asks the server for a child and returns a `Forked`, which has what the batch
and the sandbox use of `subprocess.Popen`: `pid`, `poll()`, `wait(timeout)` (raising
`subprocess.TimeoutExpired`), `returncode`, `kill()`.  Signals go through a pidfd, so they
never reach another process that got the pid later; the pid itself stays taken until
`wait()` has seen the exit (the server reaps only then), so `os.killpg(pid, ...)` is as safe
as for a Popen child.  If the server dies, the pidfd still says when the child ends; its
exit status is then unknown (-1).
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import threading
import time

from grader.sandbox import forkserver


class ForkRefused(OSError):
    """The server is gone, or could not fork."""


class Forked:
    def __init__(self, reply: socket.socket, pid: int, pidfd: int, args: object = None):
        self.pid = pid
        self.args = args
        self.returncode: int | None = None
        self._reply: socket.socket | None = reply
        self._pidfd: int | None = pidfd
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        return self._wait(0.0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._wait(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(str(self.args), timeout or 0.0)
        return code

    def _wait(self, timeout: float | None) -> int | None:
        if self.returncode is not None:
            return self.returncode
        assert self._pidfd is not None
        ready, _, _ = select.select([self._pidfd], [], [], timeout)
        if not ready:
            return None
        with self._lock:  # one thread reads the server's word; the others see its returncode
            if self.returncode is None:
                self.returncode = self._exit_status()
                self._release()
            return self.returncode

    def _exit_status(self) -> int:
        """Ended.  The server says how, right after (unless it died with the child: -1)."""
        code = -1
        if self._reply is not None:
            deadline = time.monotonic() + 2.0
            while (left := deadline - time.monotonic()) > 0:
                if not select.select([self._reply], [], [], left)[0]:
                    break
                try:
                    message, fds = forkserver.receive(self._reply)
                except (OSError, ValueError):
                    break
                for fd in fds:
                    os.close(fd)
                if message is None:
                    break
                if type(message.get("exit")) is int:
                    code = message["exit"]
                    break
        return code

    def send_signal(self, sig: int) -> None:
        if self._pidfd is not None and self.returncode is None:  # a pidfd: never another process
            try:
                signal.pidfd_send_signal(self._pidfd, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def killpg(self, sig: int) -> None:
        """Signal the child's process group (a child that called setsid) while it runs.  Once it has
        ended, nothing: its pid may go to another process when its server is gone."""
        if self.poll() is not None:
            return
        with self._lock:  # not ended a moment ago, and not released since: still its pid
            if self.returncode is not None or self._pidfd is None:
                return
            try:
                os.killpg(self.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def _release(self) -> None:
        """From here on the server may reap the child, and its pid may be used again.  (The pidfd
        stays open while this object lives: another thread may be waiting on it.)"""
        if self._reply is not None:
            self._reply.close()
            self._reply = None

    def __del__(self) -> None:
        try:
            if self._reply is not None:
                self._reply.close()
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None
        except Exception:
            pass


def request(server: socket.socket, message: dict[str, object], fds: list[int], timeout_s: float = 30.0) -> Forked:
    """Ask the fork server behind `server` for a child; `fds` go to the child alone."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        try:
            forkserver.send(server, message, [theirs.fileno(), *fds])
        except OSError as error:
            raise ForkRefused(f"the fork server is gone: {error}") from None
        finally:
            theirs.close()
        if not select.select([mine], [], [], timeout_s)[0]:
            raise ForkRefused("the fork server did not answer")
        try:
            answer, got = forkserver.receive(mine)
        except (OSError, ValueError) as error:
            raise ForkRefused(f"the fork server's answer: {error}") from None
        if answer is None or type(answer.get("pid")) is not int or len(got) != 1:
            for fd in got:
                os.close(fd)
            why = answer.get("error") if answer else "no answer"
            raise ForkRefused(f"the fork server could not fork: {why}")
    except BaseException:
        mine.close()
        raise
    return Forked(mine, answer["pid"], got[0], message.get("label"))
