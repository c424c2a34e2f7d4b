"""The sandbox's confinement itself: what is reported, what two gradings share, what is left after.

The attacks themselves are hostile corpus files (tests/test_hostile.py); here the Sandbox is
driven directly.  What this machine's kernel offers is read once (isolation.probe()); a check
that needs something the machine lacks skips and says what.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from grader.config import load_config
from grader.sandbox import cgroups, ipc, namespaces, reaping, uids
from grader.sandbox.client import Sandbox
from grader.sandbox.isolation import probe
from grader.submission import Cell, load_submission
from tests.conftest import ROOT

pytestmark = pytest.mark.slow

ISOLATION = probe()
ROOT_USER = os.geteuid() == 0
MOUNT_NS = "mount" in ISOLATION["namespaces"]
IPC_NS = "ipc" in ISOLATION["namespaces"]
CONFIG = load_config()
SOLUTION = load_submission(ROOT / "reference" / "paged_attention.py", 1 << 20).cells
LEAK = load_submission(ROOT / "tests" / "corpus" / "hostile" / "ipc_sysv_leak.py", 1 << 20).cells
LEAK_KEY = 0x50414745
LEAK_FILES = ("/dev/shm/pa-leak-source.py", "/tmp/pa-leak-source.py", "/var/tmp/pa-leak-source.py")
MARKER = "4245.4245"  # the sleep a cell leaves running while the judge is killed
IPC_CREAT = 0o1000


def _python_hidden_from_a_fresh_uid() -> str | None:
    """The folder (say /root, 0700) that keeps Python from a uid other than root's, if any."""
    probe_uid = uids.UID_BASE - 1
    for path in (sys.base_prefix, sys.prefix, os.path.realpath(sys.executable)):
        blocked = namespaces.blocked_ancestor(os.path.realpath(path), probe_uid, probe_uid)
        if blocked:
            return blocked
    return None


HIDDEN_PYTHON = _python_hidden_from_a_fresh_uid() if ROOT_USER else None
FALLBACK_CANNOT_RUN = (
    f"as root without namespaces the submission's own uid cannot reach Python ({HIDDEN_PYTHON} is closed to other users):"
    " the fallback is tested as an unprivileged user"
    if HIDDEN_PYTHON
    else None
)


def _sysv_keys() -> set[int]:
    with open("/proc/sysvipc/shm") as f:
        return {int(line.split()[0]) for line in f.read().splitlines()[1:]}


def _cell(index: int, source: str) -> Cell:
    return Cell(index, textwrap.dedent(source))


def _loaded(sandbox: Sandbox) -> None:
    report = sandbox.load()
    assert report.failed is None, (report.failed, sandbox.output()[0][-4000:])
    assert all(c.status == "ok" for c in report.cells), [(c.index, c.status, c.error) for c in report.cells]


def test_report_says_what_was_in_force() -> None:
    with Sandbox(SOLUTION, CONFIG.limits) as sandbox:
        _loaded(sandbox)
        report = sandbox.isolation_report()
    assert set(report) == {"namespaces", "uid", "cgroup", "cpu", "limits", "clock", "landlock", "seccomp", "keyring", "proc", "sys", "readonly", "devices", "summary"}
    assert set(report["limits"]) == {"memory_mb", "pids", "nofile", "fsize_mb", "address_space_mb", "disk_mb", "inodes"}
    assert report["namespaces"] == ISOLATION["namespaces"]
    assert report["cgroup"] == ISOLATION["cgroup"]
    assert (report["cpu"] or {}) == ISOLATION["cpu"]
    assert report["landlock"] == ISOLATION["landlock"]
    assert report["seccomp"] == ISOLATION["seccomp"]
    limits = CONFIG.limits
    assert report["limits"] == {
        "memory_mb": limits.memory_mb if ISOLATION["cgroup"] else None,
        "pids": limits.pids,
        "nofile": limits.open_files,
        "fsize_mb": limits.file_mb,
        "address_space_mb": limits.memory_mb,
        "disk_mb": limits.disk_mb if MOUNT_NS else None,
        "inodes": limits.inodes if MOUNT_NS else None,
    }
    assert report["clock"] == {"counts": "cpu", "wall_backstop": limits.wall_backstop}
    assert report["proc"] == ("masked" if MOUNT_NS and "pid" in ISOLATION["namespaces"] else "narrowed" if ISOLATION["landlock"] else "host")
    assert report["sys"] == ("cpus" if MOUNT_NS else "host")
    assert report["readonly"] is MOUNT_NS and ("the machine's files read-only" in report["summary"]["en"]) is MOUNT_NS
    assert report["keyring"] is True
    en = report["summary"]["en"]
    assert ("seccomp (" in en) == bool(ISOLATION["seccomp"]) and ("CPU share" in en) == bool(ISOLATION["cpu"])
    assert ("disk: a tmpfs of" in en) == MOUNT_NS and ("disk total not capped" in en) == (not MOUNT_NS)
    if ROOT_USER:
        assert report["uid"] is not None and report["uid"] >= uids.UID_BASE
    else:
        assert report["uid"] == os.geteuid()
    if MOUNT_NS:
        assert report["devices"] == [f"/dev/{n}" for n in sorted(namespaces.DEVICES)]
    for line in report["summary"].values():
        assert line and "\n" not in line
    assert report["summary"]["zh"] != report["summary"]["en"]
    assert ("namespaces " + "+".join(report["namespaces"]) if report["namespaces"] else "no namespaces") in report["summary"]["en"]


def test_two_gradings_cannot_reach_each_other() -> None:
    """Two sandboxes at once: distinct uids (as root), and neither sees the other's files."""
    if not (ROOT_USER or MOUNT_NS or ISOLATION["landlock"]):
        pytest.skip("no namespaces, no Landlock and not root: two gradings run as one user with the same view")
    write = _cell(99, 'with open("secret.txt", "w") as f:\n    f.write("the first grading\'s secret")\n')
    with Sandbox([*SOLUTION, write], CONFIG.limits) as first:
        _loaded(first)
        # Where the worker has a mount namespace its folder is a tmpfs there: seen through its root.
        seen = Path(f"/proc/{first._zygote_pid}/root{first.workdir}") if MOUNT_NS else first.workdir
        assert (seen / "secret.txt").exists()
        spy = _cell(
            99,
            f"""
            import os
            for path in ({str(first.tmp)!r}, {str(first.workdir)!r}, {str(first.workdir / "secret.txt")!r}):
                try:
                    print("SEEN", path, os.listdir(path) if os.path.isdir(path) else open(path).read())
                except OSError as error:
                    print("REFUSED", path, type(error).__name__)
            """,
        )
        with Sandbox([*SOLUTION, spy], CONFIG.limits) as second:
            _loaded(second)
            output, _ = second.output()
            uids_seen = (first.isolation_report()["uid"], second.isolation_report()["uid"])
    assert "SEEN" not in output and output.count("REFUSED") == 3, output
    if ROOT_USER:
        assert uids_seen[0] != uids_seen[1]


def test_cgroup_holds_the_limits_and_goes_away() -> None:
    if not ISOLATION["cgroup"]:
        pytest.skip("no cgroup can be made here (needs root, or a delegated cgroup v2 subtree)")
    with Sandbox(SOLUTION, CONFIG.limits) as sandbox:
        _loaded(sandbox)
        assert sandbox.cgroup is not None
        paths = sandbox.cgroup.paths
        values = {}
        for path in paths:
            for name in ("memory.limit_in_bytes", "memory.max", "pids.max"):
                if os.path.exists(os.path.join(path, name)):
                    values[name] = int(Path(path, name).read_text())
            # The zygote is one of the cgroup's processes (the worker's keeper stays out of it).
            assert sandbox._zygote_pid in {int(p) for p in Path(path, "cgroup.procs").read_text().split()}
    assert values.get("memory.limit_in_bytes", values.get("memory.max")) == CONFIG.limits.memory_mb << 20
    assert values["pids.max"] == CONFIG.limits.pids
    assert [p for p in paths if os.path.exists(p)] == []


def _left_behind(sandbox: Sandbox, uid: int | None) -> list[str]:
    found = []
    if sandbox.tmp.exists():
        found.append(str(sandbox.tmp))
    found += [p for p in (sandbox.cgroup.paths if sandbox.cgroup else []) if os.path.exists(p)]
    found += [f"sysv {k:#x}" for k in {LEAK_KEY, LEAK_KEY + 1} & _sysv_keys()]
    found += [p for p in LEAK_FILES if os.path.exists(p)]
    if uid is not None:
        found += [f"lock of uid {uid}" for d in uids.LOCK_DIRS if os.path.exists(os.path.join(d, f"{uid}.lock"))]
    return found


def test_nothing_left_when_the_judge_raises() -> None:
    """An exception in the judge mid-grading still kills everything and removes every trace."""
    sandbox = Sandbox(LEAK, CONFIG.limits)
    uid = sandbox.uid.uid if sandbox.uid else None
    with pytest.raises(RuntimeError), sandbox:
        _loaded(sandbox)
        assert "LEFT:" in sandbox.output()[0]
        raise RuntimeError("the judge fails")
    assert _left_behind(sandbox, uid) == []


@pytest.mark.parametrize("namespaces", ["1", "0"])
def test_nothing_left_when_the_judge_is_killed(tmp_path: Path, namespaces: str) -> None:
    """SIGKILL the judge while the submission holds IPC objects and a child: the keeper cleans up.

    Without namespaces the SysV segments are the machine's, and the keeper's sweep removes them.
    """
    if namespaces == "0" and FALLBACK_CANNOT_RUN:
        pytest.skip(FALLBACK_CANNOT_RUN)
    judge = textwrap.dedent(
        f"""
        import json, os, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from pathlib import Path
        from grader.config import load_config
        from grader.sandbox.client import Sandbox
        from grader.submission import Cell, load_submission
        cells = load_submission(Path({str(ROOT / "tests" / "corpus" / "hostile" / "ipc_sysv_leak.py")!r}), 1 << 20).cells
        # The marker comes from the environment: this script's own command line must not carry it.
        cells.append(Cell(99, f"import subprocess\\nsubprocess.Popen(['sleep', '{{os.environ['PA_TEST_MARKER']}}'])\\n"))
        sandbox = Sandbox(cells, load_config().limits)
        print(json.dumps([str(sandbox.tmp), sandbox.cgroup.paths if sandbox.cgroup else [], sandbox.uid.path if sandbox.uid else None]), flush=True)
        sandbox.load()
        time.sleep(3600)
        """
    )
    env = {**os.environ, "TMPDIR": str(tmp_path), "PA_TEST_MARKER": MARKER, "PA_GRADER_NAMESPACES": namespaces}
    process = subprocess.Popen([sys.executable, "-c", judge], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        private_text, cgroup_paths, uid_lock = json.loads(process.stdout.readline())
        private = Path(private_text)
        deadline = time.monotonic() + 60
        while not _marked(MARKER):
            assert time.monotonic() < deadline and process.poll() is None, "the submission never started"
            time.sleep(0.1)
        assert process.pid not in _marked(MARKER)
    finally:
        process.kill()
        process.wait()
        process.stdout.close()
    deadline = time.monotonic() + 15
    traces = [*cgroup_paths, *([uid_lock] if uid_lock else [])]
    while time.monotonic() < deadline and (_marked(MARKER) or private.exists() or any(os.path.exists(p) for p in traces)):
        time.sleep(0.1)
    assert _marked(MARKER) == []
    assert not private.exists()
    assert [p for p in cgroup_paths if os.path.exists(p)] == []
    assert cgroups.existing(process.pid) == []
    assert uid_lock is None or not os.path.exists(uid_lock)
    assert {LEAK_KEY, LEAK_KEY + 1}.isdisjoint(_sysv_keys())
    assert [p for p in LEAK_FILES if os.path.exists(p)] == []
    if not IPC_NS or namespaces == "0":
        ctypes.CDLL(None).mq_unlink(b"/pa-leak")  # POSIX queues: not defended without an IPC namespace (docs/trust.md)


def test_a_private_directory_whose_judge_died_first_is_swept_by_the_next_grading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A judge SIGKILLed before its keeper existed leaves its private directory: the next
    grading's sandbox removes it (its lock is free: its judge is gone), and nothing of a live
    judge's (locked, or made a moment ago), a link or a stranger's name.  The name carries
    nothing of the judge's (a submission sees it); older graders' names carried its pid."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    old = time.time() - 2 * reaping.STALE_AFTER_S
    stale = tmp_path / "pa-grade-k3x9q1zz"
    (stale / "work").mkdir(parents=True)
    (stale / "work" / "left.txt").write_text("x")
    (stale / "judge.sock").write_text("")
    live = tmp_path / "pa-grade-a1b2c3d4"  # a live judge's: it holds the lock
    live.mkdir()
    held = os.open(live, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(held, fcntl.LOCK_EX)
    young = tmp_path / "pa-grade-justmade"  # made a moment ago: its judge may be about to lock it
    young.mkdir()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale_old_name = tmp_path / f"pa-grade-{gone.pid}-k3x9q1zz"  # an older grader's, its judge dead
    stale_old_name.mkdir()
    live_old_name = tmp_path / f"pa-grade-{os.getppid()}-a1b2c3d4"
    live_old_name.mkdir()
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "pa-grade-linkname").symlink_to(target)
    for path in (stale, live, stale_old_name, live_old_name):
        os.utime(path, (old, old))
    sandbox = Sandbox(SOLUTION, CONFIG.limits)
    try:
        assert sandbox.tmp.parent == tmp_path and re.fullmatch(r"pa-grade-[a-z0-9_]{8}", sandbox.tmp.name), sandbox.tmp.name
        assert not stale.exists() and not stale_old_name.exists()
        assert live.is_dir() and young.is_dir() and live_old_name.is_dir() and target.is_dir()
        assert (tmp_path / "pa-grade-linkname").is_symlink()
        # This sandbox's own directory is locked for as long as it lives.
        probe = os.open(sandbox.tmp, os.O_RDONLY | os.O_DIRECTORY)
        with pytest.raises(BlockingIOError):
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(probe)
    finally:
        sandbox.close()
        os.close(held)
    assert not sandbox.tmp.exists()


def _marked(marker: str) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if marker.encode() in Path(entry.path, "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_ipc_sweep_removes_only_what_the_grading_left() -> None:
    """The fallback's sweep with a shared uid: new objects whose creator is gone go, the rest stay."""
    libc = ctypes.CDLL(None, use_errno=True)
    since, before = time.time(), None
    kept_key, gone_key = 0x50414700 + os.getpid() % 200, 0x50414900 + os.getpid() % 200
    old = libc.shmget(kept_key - 0x100, 4096, IPC_CREAT | 0o600)  # made before the grading began
    before = ipc.snapshot()
    mine = libc.shmget(kept_key, 4096, IPC_CREAT | 0o600)  # its creator (this process) still runs
    subprocess.run(
        [sys.executable, "-c", f"import ctypes; ctypes.CDLL(None).shmget({gone_key}, 4096, {IPC_CREAT | 0o600})"],
        check=True,
    )
    shm_file = Path("/dev/shm") / f"pa-sweep-test-{os.getpid()}"
    shm_file.write_text("left by a grading")
    try:
        removed = ipc.sweep(os.geteuid(), before, since)
        keys = _sysv_keys()
        assert gone_key not in keys and not shm_file.exists()
        assert kept_key in keys and kept_key - 0x100 in keys
        assert str(shm_file) in removed and len([r for r in removed if r.startswith("shm ")]) == 1
    finally:
        for segment in (old, mine):
            libc.shmctl(segment, 0, None)
        shm_file.unlink(missing_ok=True)


def test_root_without_namespaces_says_why_it_cannot_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """As root the submission never runs as root: without a mount namespace to show Python, it is refused clearly."""
    if not HIDDEN_PYTHON:
        pytest.skip("Python is readable by every uid here (or the grader is not root): the fallback runs")
    monkeypatch.setenv("PA_GRADER_NAMESPACES", "0")
    with Sandbox(SOLUTION, CONFIG.limits) as sandbox:
        report = sandbox.load()
    assert report.failed and "could not start" in report.failed and HIDDEN_PYTHON in report.failed and "chmod" in report.failed


def test_fallback_narrows_proc_and_dev_and_sweeps_ipc(monkeypatch: pytest.MonkeyPatch) -> None:
    """Namespaces switched off: Landlock hides other processes' /proc and the terminals; IPC left is swept."""
    if FALLBACK_CANNOT_RUN:
        pytest.skip(FALLBACK_CANNOT_RUN)
    if not ISOLATION["landlock"]:
        pytest.skip("no Landlock here: without namespaces nothing narrows /proc and /dev")
    monkeypatch.setenv("PA_GRADER_NAMESPACES", "0")
    spy = _cell(
        99,
        f"""
        import ctypes, os
        for path in ("/proc", "/dev/pts"):
            try:
                os.listdir(path)
                print("SEEN", path)
            except OSError:
                print("REFUSED", path)
        for path, mode in (("/proc/1/cmdline", "r"), ("/proc/net/unix", "r"), ("/dev/shm/pa-fallback", "w")):
            try:
                open(path, mode).close()
                print("SEEN", path)
            except OSError:
                print("REFUSED", path)
        print("OWN STATUS", open("/proc/self/status").read().startswith("Name:"))
        print("SEGMENT", ctypes.CDLL(None).shmget({LEAK_KEY + 7}, 4096, {IPC_CREAT | 0o666}) >= 0)
        """,
    )
    with Sandbox([*SOLUTION, spy], CONFIG.limits) as sandbox:
        _loaded(sandbox)
        output, _ = sandbox.output()
        report = sandbox.isolation_report()
    assert report["namespaces"] == []
    assert "SEEN" not in output and output.count("REFUSED") == 5, output
    assert "OWN STATUS True" in output and "SEGMENT True" in output
    assert LEAK_KEY + 7 not in _sysv_keys(), "the segment outlived its grading"


def test_killing_the_worker_mid_load_leaves_no_uid_lock() -> None:
    """A worker that dies at once (SIGKILL to its keeper) still hands its uid and cgroup back on close."""
    sandbox = Sandbox(SOLUTION, CONFIG.limits)
    uid = sandbox.uid.uid if sandbox.uid else None
    with sandbox:
        _loaded(sandbox)
        assert sandbox.process is not None
        os.kill(sandbox.process.pid, signal.SIGKILL)
    assert _left_behind(sandbox, uid) == []


def test_the_worker_survives_its_nest() -> None:
    """The nest only waits: if it dies, init (now the keeper's child) and the loaded submission go on."""
    with Sandbox(SOLUTION, CONFIG.limits) as sandbox:
        _loaded(sandbox)
        assert sandbox.process is not None
        nest = _children(sandbox.process.pid)
        assert len(nest) == 1
        os.kill(nest[0], signal.SIGKILL)
        time.sleep(0.3)
        session = sandbox.session(time.monotonic() + 30)
        reply = session.call("ledger", kwargs={"num_blocks": 1, "block_size": 1, "num_layers": 1, "num_kv_heads": 1, "head_dim": 1})
        session.end()
        assert reply.ok, reply.error
        assert sandbox.process.poll() is None


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(entry.path, "stat").read_bytes()
            except OSError:
                continue
            if int(stat[stat.rfind(b")") + 2 :].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def test_root_without_a_user_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a container that refuses user namespaces gives root: the other four, and the submission's own uid."""
    if not ROOT_USER:
        pytest.skip("only root may have PID, IPC, network and mount namespaces without a user namespace")
    monkeypatch.setenv("PA_GRADER_USER_NAMESPACE", "0")
    visible = Path("/tmp") / f"pa-visible-{os.getpid()}"  # on the host's /tmp, which the submission must not see
    visible.write_text("host")
    spy = _cell(
        99,
        f"""
        import os
        print("UID", os.getuid(), os.geteuid(), os.getgroups())
        print("PROCESSES", len([n for n in os.listdir("/proc") if n.isdigit()]))
        print("DEV", sorted(os.listdir("/dev")))
        print("HOST TMP", os.path.exists({str(visible)!r}))
        """,
    )
    try:
        with Sandbox([*SOLUTION, spy], CONFIG.limits) as sandbox:
            _loaded(sandbox)
            output, _ = sandbox.output()
            report = sandbox.isolation_report()
            uid = sandbox.uid.uid if sandbox.uid else None
    finally:
        visible.unlink()
    assert report["namespaces"] == ["pid", "ipc", "net", "mount", "uts", "cgroup"]
    assert report["uid"] == uid and uid is not None and uid >= uids.UID_BASE
    assert f"UID {uid} {uid} []" in output, output
    assert "PROCESSES 2" in output  # its init and itself
    assert "'pts'" not in output and "'shm'" in output and "HOST TMP False" in output, output


def test_the_keeper_keeps_the_uid_taken() -> None:
    """The uid's lock is also the keeper's, so a judge's death frees the uid only once the keeper has cleaned up."""
    if not ROOT_USER:
        pytest.skip("a uid of its own per grading is for a grader running as root")
    with Sandbox(SOLUTION, CONFIG.limits) as sandbox:
        _loaded(sandbox)
        assert sandbox.uid is not None and sandbox.process is not None
        lock = next(os.path.join(d, f"{sandbox.uid.uid}.lock") for d in uids.LOCK_DIRS if os.path.exists(os.path.join(d, f"{sandbox.uid.uid}.lock")))
        held = [os.readlink(f"/proc/{pid}/fd/{fd}") for pid in (sandbox.process.pid, sandbox._zygote_pid) for fd in os.listdir(f"/proc/{pid}/fd")]
        assert held.count(lock) == 1  # the keeper's; never the zygote's, where the submission could drop it
