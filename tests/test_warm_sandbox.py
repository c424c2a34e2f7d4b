"""Workers forked from a warm template (grader/sandbox/warm.py): each is what a cold worker is, and
nothing of one submission reaches the next.

Sandboxes are driven directly, as in test_sandbox_isolation.py; a module-wide template serves
every warm one.  What the machine offers is read once (isolation.probe()).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grader.config import load_config
from grader.sandbox import warm
from grader.sandbox.client import Sandbox, worker_env
from grader.sandbox.isolation import probe
from grader.submission import Cell, load_submission
from tests.conftest import ROOT

pytestmark = pytest.mark.slow

ISOLATION = probe()
CONFIG = load_config()
SOLUTION = load_submission(ROOT / "reference" / "paged_attention.py", 1 << 20).cells
SECRET = "pa-warm-secret-7c1e"  # what the first submission leaves everywhere it can


@pytest.fixture(scope="module")
def template() -> Iterator[warm.Template]:
    made = warm.start(worker_env(False))
    made.wait_ready()
    try:
        yield made
    finally:
        warm.use(None)
        made.close()


def _cell(source: str) -> Cell:
    return Cell(99, textwrap.dedent(source))


def _load(cells: list[Cell], template: warm.Template | None) -> tuple[str, dict[str, Any], bool, Sandbox]:
    """Load in a sandbox (warm from `template`, or cold); returns its output, isolation, warmth and itself."""
    warm.use(template)
    try:
        with Sandbox(cells, CONFIG.limits) as sandbox:
            report = sandbox.load()
            assert report.failed is None, (report.failed, sandbox.output()[0][-3000:])
            session = sandbox.session(time.monotonic() + 30)  # the loaded worker also forks sessions
            reply = session.call("ledger", kwargs={"num_blocks": 1, "block_size": 1, "num_layers": 1, "num_kv_heads": 1, "head_dim": 1})
            session.end()
            assert reply.ok, reply.error
            return sandbox.output()[0], sandbox.isolation_report(), sandbox.warm, sandbox
    finally:
        warm.use(None)


# What a submission can find out about the process it runs in, at its first cell.
PROBE = _cell(
    """
    import json, os, random, resource, signal, sys, tempfile, threading
    import torch

    def fds():
        found = {}
        for fd in range(1024):
            try:
                info = os.fstat(fd)
            except OSError:
                continue
            found[fd] = oct(info.st_mode)
        return found

    status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
    facts = {
        "modules": sorted(sys.modules),
        "environ": dict(os.environ),
        "argv": sys.argv,
        "orig_argv": sys.orig_argv,
        "cmdline": open("/proc/self/cmdline", "rb").read().decode().split("\\0"),
        "mountinfo": sorted(" ".join(line.split()[3:5]) for line in open("/proc/self/mountinfo")),
        "path": sys.path,
        "cwd": os.getcwd(),
        "flags": repr(sys.flags),
        "signals": {s.name: repr(signal.getsignal(s)) for s in signal.Signals if s not in (signal.SIGKILL, signal.SIGSTOP)},
        "blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "rlimits": {n: resource.getrlimit(getattr(resource, n)) for n in dir(resource) if n.startswith("RLIMIT_")},
        "umask": os.umask(0o022),
        "ids": [os.getuid(), os.geteuid(), os.getgid(), os.getegid(), os.getgroups()],
        "fds": fds(),
        "status": {k: status[k].strip() for k in ("NoNewPrivs", "Seccomp", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "Umask")},
        "cgroup": open("/proc/self/cgroup").read(),
        "mounts": sorted(line.split()[1] for line in open("/proc/self/mounts")),
        "tempdir": tempfile.gettempdir(),
        "hash": hash("paged attention"),
        "python_threads": threading.active_count(),
        "tasks": len(os.listdir("/proc/self/task")),
        "dumpable": __import__("ctypes").CDLL(None).prctl(3, 0, 0, 0, 0),
        "torch_threads": torch.get_num_threads(),
        "random": [random.random(), torch.rand(1).item()],
        "pids": [os.getpid(), os.getppid(), sorted(int(p) for p in os.listdir("/proc") if p.isdigit())],
        "dev": sorted(os.listdir("/dev")),
    }
    for path in ("/proc/1/environ", os.path.join(sys.prefix, "pyvenv.cfg"), "/etc/hostname", "/root", "/tmp"):
        try:
            if os.path.isdir(path):
                os.listdir(path)
            else:
                open(path, "rb").close()
            facts["open " + path] = "read"
        except OSError as error:
            facts["open " + path] = type(error).__name__
    print("FACTS" + json.dumps(facts, sort_keys=True))
    """
)


def _facts(output: str, sandbox: Sandbox) -> dict[str, Any]:
    line = next(line for line in output.splitlines() if line.startswith("FACTS"))
    text = line[len("FACTS") :]
    _nothing_of_the_judge(text, sandbox)
    return json.loads(text.replace(str(sandbox.tmp), "<tmp>").replace(sandbox.token, "<token>"))


def _strings(value: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """Every string in a JSON value (keys included), with where it was found."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield f"{where}/{key}", str(key)
            yield from _strings(item, f"{where}/{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{where}[{index}]")


def _nothing_of_the_judge(text: str, sandbox: Sandbox) -> None:
    """Not the judge's pid, its cgroups' names, the uid's lock, the plan: only its private directory's
    path (a random name) and the sandbox's token, in what the submission sees of its own process."""
    judge = str(os.getpid())
    facts = json.loads(text.replace(str(sandbox.tmp), "").replace(sandbox.token, ""))
    assert os.getpid() not in [*facts["pids"][:2], *facts["pids"][2]], facts["pids"]
    for where, value in _strings(facts):
        # A file mode ("0o600") or a capability mask is a number that may read as the pid (CI's judge was 600).
        if not re.fullmatch(r"0o[0-7]+|[0-9a-f]{16}", value):
            assert not re.search(rf"(?<![0-9]){judge}(?![0-9])", value), (judge, where, value)
    for trace in [*(sandbox.cgroup.paths if sandbox.cgroup else []), *([sandbox.uid.path] if sandbox.uid else [])]:
        assert trace not in text and os.path.basename(trace) not in text, trace
    for key in ("uid_lock", "cgroups", "lifeline", "memory_mb", "tmpfs_mb"):  # the plan's, as JSON or a repr would show them
        assert not re.search(rf"""\\?["']{key}\\?["']: """, text), key
    assert re.fullmatch(r"pa-grade-[a-z0-9_]{8}", sandbox.tmp.name), sandbox.tmp.name


def test_a_warm_worker_is_what_a_cold_one_is(template: warm.Template) -> None:
    """Same isolation report, and the same process as the submission sees it: modules, environment,
    arguments, limits, signals, descriptors, capabilities, mounts, random state ...  Known and
    documented differences (warm.py): torch's import-time helper thread is not there."""
    cold_out, cold_iso, cold_warm, cold_box = _load([*SOLUTION, PROBE], None)
    warm_out, warm_iso, warm_warm, warm_box = _load([*SOLUTION, PROBE], template)
    assert (cold_warm, warm_warm) == (False, True)
    assert template.broken is None
    for iso in (cold_iso, warm_iso):
        if iso["uid"] is not None and ISOLATION["root"]:
            iso["summary"] = {k: v.replace(str(iso["uid"]), "<uid>") for k, v in iso["summary"].items()}
            iso["uid"] = "<uid>"
    assert warm_iso == cold_iso
    cold, warmed = _facts(cold_out, cold_box), _facts(warm_out, warm_box)
    assert cold.pop("tasks") >= warmed.pop("tasks") == 1  # a forked process has one thread
    # The command line /proc shows: a cold worker's; the template's a cold worker's and its socket's number.
    command = [sys.executable, "-u", "-s", "-P", str(ROOT / "grader" / "sandbox" / "worker.py")]
    assert cold.pop("cmdline") == [*command, ""] and cold["argv"] == command[-1:] and cold["orig_argv"] == command
    cmdline = warmed.pop("cmdline")
    assert cmdline[:5] == command and cmdline[5] == "--template" and cmdline[6].isdigit() and cmdline[7:] == [""], cmdline
    assert set(cold) == set(warmed)
    differing = sorted(k for k in cold if cold[k] != warmed[k])
    assert differing == [], {k: _difference(cold[k], warmed[k]) for k in differing}


def test_what_the_judge_ignores_or_blocks_is_not_the_cells() -> None:
    """SIG_IGN and the signal mask pass through exec: a judge that ignores SIGHUP and blocks SIGUSR1
    (nohup, a batch runner, a test harness) must not give its cells a process that does too."""
    ignored = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
    try:
        out, _, _, box = _load([*SOLUTION, PROBE], None)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        signal.signal(signal.SIGHUP, ignored)
    facts = _facts(out, box)
    assert facts["blocked"] == []
    assert facts["signals"]["SIGHUP"] == repr(signal.SIG_DFL)
    assert facts["signals"]["SIGINT"] == repr(signal.default_int_handler)
    assert facts["signals"]["SIGPIPE"] == facts["signals"]["SIGXFSZ"] == repr(signal.SIG_IGN)


def _difference(cold: object, warmed: object) -> object:
    """Of two dictionaries, only the keys whose values differ (a long one is cut in the report)."""
    if isinstance(cold, dict) and isinstance(warmed, dict):
        return {k: (cold.get(k), warmed.get(k)) for k in sorted(set(cold) | set(warmed), key=str) if cold.get(k) != warmed.get(k)}
    return (cold, warmed)


def test_nothing_of_one_submission_reaches_the_next(template: warm.Template) -> None:
    """The first submission leaves its secret in the worker's memory, modules, builtins, environment,
    torch's settings, files everywhere it may write, IPC, a socket and a process left running; the
    next one, forked from the same template, finds none of it.  Nor does the template hold it."""
    leave = _cell(
        f"""
        import builtins, ctypes, os, socket, subprocess, sys, types, torch
        SECRET = {SECRET!r}
        builtins.pa_leak = SECRET
        torch.pa_leak = SECRET
        sys.modules["pa_leak"] = types.ModuleType("pa_leak", SECRET)
        sys.path.append("/" + SECRET)
        os.environ["PA_LEAK"] = SECRET
        torch.set_default_dtype(torch.float64)
        torch.manual_seed(1234)
        for folder in (".", os.environ["HOME"], os.environ["TMPDIR"], "/tmp", "/var/tmp", "/dev/shm", "/run"):
            try:
                with open(os.path.join(folder, "pa-leak.txt"), "w") as f:
                    f.write(SECRET)
            except OSError:
                pass
        libc = ctypes.CDLL(None, use_errno=True)
        libc.shmget.restype = ctypes.c_int
        shm = libc.shmget(0x5041574D, 4096, 0o1000 | 0o666)
        if shm >= 0:
            libc.shmat.restype = ctypes.c_void_p
            address = libc.shmat(shm, None, 0)
            ctypes.memmove(address, SECRET.encode(), len(SECRET))
        libc.mq_open.restype = ctypes.c_int
        libc.mq_open(b"/pa-leak", 0o100 | 0o2, 0o666, None)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind("\\0pa-leak")
        listener.listen(1)
        # A daemon that outlives the cells, holding the secret.
        subprocess.Popen(["sleep", "3600", SECRET], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print("LEFT")
        """
    )
    look = _cell(
        f"""
        import builtins, ctypes, os, socket, sys, torch
        SECRET = {SECRET!r}
        found = []
        if hasattr(builtins, "pa_leak") or hasattr(torch, "pa_leak") or "pa_leak" in sys.modules:
            found.append("memory")
        if any(SECRET in p for p in sys.path) or SECRET in os.environ.get("PA_LEAK", ""):
            found.append("environment")
        if torch.get_default_dtype() != torch.float32:
            found.append("torch settings")
        for folder in (".", os.environ["HOME"], os.environ["TMPDIR"], "/tmp", "/var/tmp", "/dev/shm", "/run"):
            if os.path.exists(os.path.join(folder, "pa-leak.txt")):
                found.append("file in " + folder)
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.shmget(0x5041574D, 0, 0) >= 0:
            found.append("sysv segment")
        libc.mq_open.restype = ctypes.c_int
        if libc.mq_open(b"/pa-leak", 0o2) >= 0:
            found.append("posix queue")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect("\\0pa-leak")
            found.append("abstract socket")
        except OSError:
            pass
        for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
            try:
                if SECRET.encode() in open(f"/proc/{{pid}}/cmdline", "rb").read():
                    found.append("process")
            except OSError:
                pass
        print("FOUND", sorted(set(found)))
        """
    )
    first_out, _, first_warm, _ = _load([*SOLUTION, leave], template)
    assert first_warm and "LEFT" in first_out, first_out
    second_out, _, second_warm, _ = _load([*SOLUTION, look], template)
    assert second_warm
    assert "FOUND []" in second_out, second_out
    assert template.process.poll() is None and template.broken is None
    assert SECRET.encode() not in _memory(template.process.pid), "the template holds the first submission's secret"
    assert not any(SECRET.encode() in _cmdline(p) for p in _pids()), "its daemon outlived it"


def test_a_submission_cannot_stop_the_template(template: warm.Template) -> None:
    """Killing every process it can see, or its parent, ends that grading's worker at most."""
    kill = _cell(
        """
        import os, signal
        for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()] + [os.getppid()]:
            if pid != os.getpid():
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        print("KILLED AROUND")
        """
    )
    out, _, was_warm, _ = _load([*SOLUTION, kill], template)
    assert was_warm and "KILLED AROUND" in out
    assert template.process.poll() is None
    out, _, was_warm, _ = _load(SOLUTION, template)
    assert was_warm


def test_a_template_that_cannot_fork_leaves_a_cold_worker() -> None:
    broken = warm.start(worker_env(False))
    broken.wait_ready()
    broken.process.send_signal(signal.SIGKILL)
    broken.process.wait()
    try:
        out, iso, was_warm, _ = _load(SOLUTION, broken)
        assert not was_warm and broken.broken
        assert iso["namespaces"] == ISOLATION["namespaces"]
        out, iso, was_warm, _ = _load(SOLUTION, broken)  # not tried again
        assert not was_warm
    finally:
        broken.close()


def test_a_template_for_another_environment_is_not_used(template: warm.Template) -> None:
    assert template.fits(template.python, {**worker_env(False), "HOME": "/x", "TMPDIR": "/x", "PA_GRADER_SANDBOX": "t"}, "PA_GRADER_SANDBOX")
    assert not template.fits(template.python, worker_env(True) | {"CUDA_VISIBLE_DEVICES": "0"}, "PA_GRADER_SANDBOX")
    assert not template.fits("/usr/bin/python3-other", worker_env(False), "PA_GRADER_SANDBOX")


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # ended since it was listed (the machine runs other processes)
        return b""


def _memory(pid: int) -> bytes:
    """The template's writable memory (heap, stacks, anonymous maps), where anything it received lives."""
    chunks = []
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for line in maps:
            fields = line.split()
            if "w" not in fields[1] or (len(fields) > 5 and fields[5].startswith("/")):
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if end - start > 512 << 20:
                continue
            try:
                mem.seek(start)
                chunks.append(mem.read(end - start))
            except (OSError, ValueError, OverflowError):
                continue
    return b"".join(chunks)


def test_a_warm_worker_counts_the_memory_a_cold_one_counts(template: warm.Template) -> None:
    """Under the same cap the same room: torch's import is counted in the grading's cgroup either way."""
    if not ISOLATION["cgroup"]:
        pytest.skip("no cgroup can be made here (needs root, or a delegated cgroup v2 subtree)")
    peaks = {}
    for mode in ("cold", "warm"):
        warm.use(template if mode == "warm" else None)
        try:
            with Sandbox([*SOLUTION, _cell("import torch\nx = torch.ones(32 << 20, dtype=torch.uint8)\n")], CONFIG.limits) as sandbox:
                assert sandbox.load().failed is None and sandbox.warm == (mode == "warm")
                assert sandbox.cgroup is not None
                counted = [Path(p, name) for p in sandbox.cgroup.paths for name in ("memory.max_usage_in_bytes", "memory.peak")]
                peaks[mode] = max(int(f.read_text()) for f in counted if f.exists())
        finally:
            warm.use(None)
    assert abs(peaks["warm"] - peaks["cold"]) < 0.1 * peaks["cold"], peaks


def test_nothing_left_when_a_warm_judge_is_killed() -> None:
    """SIGKILL the judge while its warm worker holds a child: the keeper cleans up as for a cold one,
    and the template, whose last requester is gone, ends too."""
    marker = "4246.4246"
    judge = textwrap.dedent(
        f"""
        import json, os, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from pathlib import Path
        from grader.config import load_config
        from grader.sandbox import warm
        from grader.sandbox.client import Sandbox, worker_env
        from grader.submission import Cell, load_submission
        template = warm.start(worker_env(False))
        print(template.process.pid, flush=True)
        template.wait_ready()
        warm.use(template)
        cells = load_submission(Path({str(ROOT / "reference" / "paged_attention.py")!r}), 1 << 20).cells
        cells.append(Cell(99, f"import subprocess\\nsubprocess.Popen(['sleep', '{{os.environ['PA_TEST_MARKER']}}'])\\n"))
        sandbox = Sandbox(cells, load_config().limits)
        print(json.dumps([str(sandbox.tmp), sandbox.cgroup.paths if sandbox.cgroup else [], sandbox.uid.path if sandbox.uid else None]), flush=True)
        sandbox.load()
        print(json.dumps(sandbox.warm), flush=True)
        time.sleep(3600)
        """
    )
    env = {**os.environ, "PA_TEST_MARKER": marker}
    process = subprocess.Popen([sys.executable, "-c", judge], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        template_pid = int(process.stdout.readline())
        private_text, cgroup_paths, uid_lock = json.loads(process.stdout.readline())
        assert json.loads(process.stdout.readline()) is True  # the worker was forked from the template
        deadline = time.monotonic() + 60
        while not _marked(marker):
            assert time.monotonic() < deadline and process.poll() is None, "the submission never started"
            time.sleep(0.1)
    finally:
        process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()
    traces = [private_text, *cgroup_paths, *([uid_lock] if uid_lock else [])]
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and (_marked(marker) or _running(template_pid) or any(os.path.exists(p) for p in traces)):
        time.sleep(0.1)
    assert _marked(marker) == [] and not _running(template_pid)  # the submission's child; the template
    assert [p for p in traces if os.path.exists(p)] == []


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] != b"Z"


def _marked(marker: str) -> list[int]:
    found = []
    for pid in _pids():
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found
