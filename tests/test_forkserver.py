"""The fork server (grader/sandbox/forkserver.py) and its requester's handle (forked.py): a child
forked on request behaves, for its requester, as a Popen child does."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from grader.sandbox.forked import ForkRefused, request
from tests.conftest import ROOT

SERVER = textwrap.dedent(
    """
    import os, socket, sys, time
    sys.path.insert(0, sys.argv[2])
    from grader.sandbox import forkserver

    def is_open(fd):
        try:
            os.fstat(fd)
            return True
        except OSError:
            return False

    def child(message, fds):
        for fd in fds:  # a passed descriptor: write our pid into it, as a worker writes its output
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
        if message.get("report_fds"):
            print([fd for fd in range(1024) if is_open(fd)], flush=True)
        time.sleep(message.get("sleep", 0))
        os._exit(message.get("code", 0))

    forkserver.Server(socket.socket(fileno=int(sys.argv[1])), child).serve()
    """
)


@pytest.fixture
def server() -> Iterator[tuple[socket.socket, subprocess.Popen[str]]]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    process = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(theirs.fileno()), str(ROOT)], pass_fds=(theirs.fileno(),), stdout=subprocess.PIPE, text=True
    )
    theirs.close()
    try:
        yield ours, process
    finally:
        ours.close()  # the server ends when its last requester has gone
        assert process.wait(timeout=30) == 0
        if process.stdout is not None:
            process.stdout.close()


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "gone"
    return stat[stat.rfind(")") + 2]


def test_exit_status_passed_descriptors_and_a_pid_kept_until_waited(server: tuple[socket.socket, subprocess.Popen[str]]) -> None:
    requests, _ = server
    read_end, write_end = os.pipe()
    child = request(requests, {"code": 3}, [write_end])
    os.close(write_end)
    assert os.read(read_end, 100) == str(child.pid).encode()  # the descriptor reached the child, and only it
    os.close(read_end)
    deadline = time.monotonic() + 10
    while _state(child.pid) != "Z":  # exited, but not reaped: the pid cannot go to another process yet
        assert time.monotonic() < deadline, _state(child.pid)
        time.sleep(0.02)
    time.sleep(0.2)
    assert _state(child.pid) == "Z"
    os.kill(child.pid, 0)  # still its pid (a zombie): signalling by pid reaches nobody else
    assert child.poll() == 3 and child.wait() == 3 and child.returncode == 3
    deadline = time.monotonic() + 10
    while _state(child.pid) == "Z":  # released: the server reaps it
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_timeout_and_kill_as_for_a_popen(server: tuple[socket.socket, subprocess.Popen[str]]) -> None:
    requests, _ = server
    child = request(requests, {"sleep": 60}, [])
    assert child.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(timeout=0.2)
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=10) == -signal.SIGTERM
    child.kill()  # after the end: nothing, and no error
    assert child.returncode == -signal.SIGTERM


def test_children_hold_nothing_of_the_server(server: tuple[socket.socket, subprocess.Popen[str]]) -> None:
    """Not the requests socket (it could read other requests), nor other children's descriptors."""
    requests, process = server
    first = request(requests, {"sleep": 30}, [])
    second = request(requests, {"report_fds": True}, [])
    assert second.wait(timeout=10) == 0
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "[0, 1, 2]"
    first.kill()
    assert first.wait(timeout=10) == -signal.SIGKILL


def test_a_server_that_is_gone_refuses() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    theirs.close()
    with pytest.raises(ForkRefused):
        request(ours, {}, [])
    ours.close()
