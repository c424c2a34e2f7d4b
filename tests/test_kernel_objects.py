"""No kernel object shared between sandboxes (issue 19; docs/trust.md, "Kernel objects shared
between sandboxes").

A colluding pair graded side by side (collude_kernel_sender.py, collude_kernel_receiver.py)
tries every channel at once: byte-range locks on a file every grading can read (the payload),
an OFD lock, a flock, a lease, an AF_VSOCK port, a futex keyed by that file, inotify and
dnotify, access times, the page cache.  With the sandbox as it is, nothing gets through; with
the seccomp filter switched off, the same pair passes TODO 5 across (the channels are real:
run as plain processes of the host, all ten carry).  Access times are closed by the mount
namespace instead (the machine's files read-only), tested on their own; and what a notebook
needs of locks, futexes and sockets still works.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import re
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from grader.grade import grade_path
from grader.results import GradeResult
from grader.sandbox.client import Sandbox
from grader.submission import Cell
from tests import hostile_surroundings as surroundings
from tests.test_hostile import CONFIG, EXPECT, HOSTILE, ISOLATION, MOUNT_NS, expected_score, graded

pytestmark = pytest.mark.slow

SECCOMP = ISOLATION["seccomp"] > 0
RECEIVER = "collude_kernel_receiver.py"
SENDER = "collude_kernel_sender.py"
# Marked by the receiver when a channel carried something (the payload comes through POSIX LOCKS).
# The futex is not among them: the sender's wait reads the mapped word through ctypes, which the
# audit hook denies whatever the filter (ctypes reading an address; docs/trust.md).
CHANNELS = ("POSIX LOCKS", "OFD LOCK", "FLOCK", "INOTIFY", "DNOTIFY", "PAGE CACHE")
REFUSED_BY_THE_HOOK = "not available while grading: it reaches the grader's own objects or the process's memory (ctypes.cdata)"


def _marks(excerpt: str) -> dict[str, str]:
    return dict(re.findall(r"^MARK ([A-Z ]+): (.*)$", excerpt, re.M))


def _refused(excerpt: str) -> dict[str, str]:
    line = re.search(r"^REFUSED:(.*)$", excerpt, re.M)
    assert line, excerpt[-2000:]
    return dict(pair.strip().split("=", 1) for pair in line.group(1).split(";") if pair.strip())


def _sender_output(around: dict[str, Any]) -> str:
    assert around.get("returncode") == 0, around.get("stderr")
    sender = around["sender"]
    assert sender["score"] == 100, sender.get("output", "")[-2000:]
    return str(sender["extra_data"]["grade_result"]["output_excerpt"])


@pytest.mark.skipif(not SECCOMP, reason="no seccomp filter on this machine (kernel or architecture)")
def test_a_colluding_pair_shares_no_kernel_object() -> None:
    run = graded(RECEIVER)
    excerpt, sent = run.result.output_excerpt, _sender_output(run.around)
    # The sender did its part: its locks "held" (taken as no-ops); its futex wait was refused by the hook.
    assert "POSIX LOCKS: " in sent and "bytes held" in sent and "SENT" in sent, sent[-2000:]
    assert "futex_waiter" in sent and REFUSED_BY_THE_HOOK in sent, sent[-2000:]
    assert "VSOCK: OSError 97" in sent and "LEASE: PermissionError 1" in sent, sent[-2000:]
    assert _marks(excerpt) == {}, excerpt[-2000:]
    assert "RECEIVED: NOTHING" in excerpt, excerpt[-2000:]
    refused = _refused(excerpt)
    assert refused.get("VSOCK") == "EAFNOSUPPORT" and refused.get("INOTIFY") == "EPERM" and refused.get("DNOTIFY") == "EPERM", refused
    assert refused.get("PAGE CACHE") == errno.errorcode[errno.EOPNOTSUPP] and refused.get("MINCORE") == "ENOSYS", refused
    assert run.around["left_in_tmp"] == []
    assert run.result.score == expected_score(EXPECT[RECEIVER])  # as when graded alone: TODO 5 missing


def _graded_beside_sender(env: dict[str, str]) -> tuple[GradeResult, dict[str, Any]]:
    """The receiver graded here, the sender by a `grade` process beside it, both with `env` set."""
    limits = {k: getattr(CONFIG.limits, k) for k in ("call_timeout_s", "item_budget_s")} | EXPECT[RECEIVER].limits
    config = dataclasses.replace(CONFIG, limits=dataclasses.replace(CONFIG.limits, **EXPECT[RECEIVER].limits))
    private = Path(tempfile.mkdtemp(prefix="hostile-"))
    saved_env = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    saved, tempfile.tempdir = tempfile.tempdir, str(private)
    try:
        with surroundings.colluding_sender(limits, SENDER, env) as around:
            result = grade_path(HOSTILE / RECEIVER, config, "cpu")
    finally:
        tempfile.tempdir = saved
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        with contextlib.suppress(OSError):
            private.rmdir()
    return result, around


@pytest.mark.skipif(not SECCOMP, reason="no seccomp filter on this machine: nothing to switch off")
def test_without_the_filter_the_same_pair_passes_the_todo_across() -> None:
    """The channels are real: with PA_GRADER_SECCOMP=0 (namespaces, Landlock and the rest still on)
    the receiver gets the sender's paged_attention through byte-range locks and is paid for it."""
    result, around = _graded_beside_sender({"PA_GRADER_SECCOMP": "0"})
    _sender_output(around)
    marks = _marks(result.output_excerpt)
    assert set(CHANNELS) <= set(marks), (marks, result.output_excerpt[-2000:])
    assert "FUTEX" not in marks, marks  # closed by the audit hook, not by the filter
    if _vsock_port_space():
        assert marks.get("VSOCK") == "port taken", marks
    if MOUNT_NS:
        assert "ATIME" not in marks  # closed by the read-only mounts, not by the filter
    assert re.search(r"RECEIVED paged_attention: \d+ characters", result.output_excerpt)
    assert result.isolation["seccomp"] == 0
    assert result.score == 100 > expected_score(EXPECT[RECEIVER])  # TODO 5's items, paid for a classmate's code


def _vsock_port_space() -> bool:
    import socket

    try:
        with socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM) as sock:
            sock.bind((socket.VMADDR_CID_ANY, 0x50410F00))
        return True
    except (OSError, AttributeError):
        return False


def _cell(index: int, source: str) -> Cell:
    return Cell(index, textwrap.dedent(source))


def _loaded_output(source: str) -> str:
    with Sandbox([_cell(0, source)], CONFIG.limits) as sandbox:
        report = sandbox.load()
        assert report.failed is None, report.failed
        output = sandbox.output()[0]
        assert [c.status for c in report.cells] == ["ok"], (report.cells, output[-2000:])
        return output


def test_a_read_leaves_no_access_time_for_another_grading(tmp_path: Path) -> None:
    """A file every grading can read (here, one in the Python installation) keeps its access time
    when a submission reads it: the machine's files are read-only in the mount namespace.  Read by
    a plain process of the host, the same file's access time moves (relatime): the channel is real."""
    if not MOUNT_NS:
        pytest.skip("no mount namespace here: reads of the machine's files leave access times (docs/trust.md)")
    import sys

    folder = Path(tempfile.mkdtemp(prefix="pa-atime-", dir=sys.prefix))
    folder.chmod(0o755)  # as the installation's own folders: any grading's uid may read it
    try:
        probe = folder / "probe.txt"
        probe.write_text("read me\n")
        probe.chmod(0o644)
        old = time.time() - 3 * 86400
        os.utime(probe, (old, old))  # older than a day: a read updates it under relatime
        output = _loaded_output(f"print('READ', open({str(probe)!r}).read().strip())")
        assert "READ read me" in output, output[-1000:]
        assert probe.stat().st_atime == pytest.approx(old, abs=1)
        probe.read_text()
        assert probe.stat().st_atime > old + 86400  # the host's own read does move it
    finally:
        for path in folder.iterdir():
            path.unlink()
        folder.rmdir()


def test_what_a_notebook_needs_of_locks_futexes_and_sockets_still_works() -> None:
    """sqlite (its file locks), a C function called through ctypes, threads, forks, subprocesses,
    AF_UNIX sockets and name lookups of /etc/hosts work; another socket family fails with a clean
    OSError.  (A semaphore two processes share needs ctypes over a mapped address, which the audit
    hook denies, or multiprocessing's, which needs a file in /dev/shm: docs/trust.md.)"""
    output = _loaded_output(
        """
        import fcntl, os, socket, sqlite3, subprocess, threading, time

        for mode in ("delete", "wal"):
            db = sqlite3.connect(f"notes-{mode}.db")
            db.execute(f"pragma journal_mode={mode}")
            db.execute("create table t (x)")
            db.executemany("insert into t values (?)", [(i,) for i in range(100)])
            db.commit()
            other = sqlite3.connect(f"notes-{mode}.db")
            print("SQLITE", mode, other.execute("select sum(x) from t").fetchone()[0])
            other.close()
            db.close()
        with open("lock", "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            print("LOCKS ok")

        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        print("CTYPES getpid", libc.getpid() == os.getpid())
        child = os.fork()
        if child == 0:
            os._exit(7)
        print("FORK", os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]))
        thread = threading.Thread(target=time.sleep, args=(0.1,))
        thread.start()
        thread.join()
        print("SUBPROCESS", subprocess.run(["true"]).returncode)
        a, b = socket.socketpair()
        a.sendall(b"x")
        print("SOCKETPAIR", b.recv(1))
        print("LOOKUP", socket.getaddrinfo("localhost", 80, socket.AF_INET)[0][4])
        try:
            socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        except OSError as error:
            print("AF_INET", type(error).__name__, error.errno)
        """
    )
    for line in ("SQLITE delete 4950", "SQLITE wal 4950", "LOCKS ok", "CTYPES getpid True", "FORK 7", "SUBPROCESS 0", "SOCKETPAIR b'x'", "LOOKUP ('127.0.0.1', 80)"):
        assert line in output, (line, output[-2000:])
    if SECCOMP:
        assert "AF_INET OSError 97" in output, output[-1000:]
