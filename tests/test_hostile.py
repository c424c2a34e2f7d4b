"""Hostile submissions (tests/corpus/hostile/): exits, hangs, resource bombs, forgery, cheating.

Each file's first line says what it does and what to expect; EXPECT below holds the same in
checkable form.  Every case must end in a scorecard with concrete outcomes, within a time
bound, with nothing of the submission left running and no file written outside the grader's
private directory, and the judge (this process) healthy afterwards.

The cases are graded with tightened limits, as an instructor would tighten them
(call 2 s, item 8 s, cell 5 s, total 60 s), and fewer hypothesis examples.  Time bound per
case on a 2-core machine: 30 s, 40-45 s for the cases that wait out several timeouts
(Expect.seconds); the whole file runs in about five minutes.  (A notebook case carries its
header on the first line of its first cell.)

Cases that need the kernel's help (Landlock) to be safe to run are skipped without it:
kill_judge.ipynb would kill this very process, the forge_fake_output cases would write into
/tmp and the working directory.  Some cases are graded with something around them (SURROUNDINGS):
listeners the network case aims at, a terminal with a line typed in, another grading running at
the same time; what reached them is checked after.  What this machine's kernel offers (namespaces,
a cgroup, Landlock) decides which of those checks apply; the others skip and say why.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import json
import os
import re
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from grader.config import Config, load_config
from grader.grade import grade_path
from grader.results import GradeResult
from grader.sandbox import cgroups
from grader.sandbox.client import Sandbox
from grader.sandbox.isolation import mseal_available, probe
from grader.sandbox.reaping import descendants
from grader.submission import load_submission
from tests import hostile_surroundings as surroundings
from tests.conftest import ROOT

pytestmark = pytest.mark.slow

HOSTILE = ROOT / "tests" / "corpus" / "hostile"
ISOLATION = probe()  # what a sandbox gets on this machine: namespaces, cgroup, Landlock ABI
FILES = ISOLATION["landlock"] >= 1  # Landlock confines file access (Linux 5.13+)
SIGNALS = ISOLATION["landlock"] >= 6  # Landlock scopes signals (Linux 6.12+)
PID_NS = "pid" in ISOLATION["namespaces"]
IPC_NS = "ipc" in ISOLATION["namespaces"]
NET_NS = "net" in ISOLATION["namespaces"]
MOUNT_NS = "mount" in ISOLATION["namespaces"]
CGROUP = ISOLATION["cgroup"]
MSEAL = mseal_available()  # the worker's mappings of the judge's files sealed (Linux 6.10+)
# A forked process cannot read its own /proc entry where Landlock narrows the host's /proc.
FORKS_BLIND = ("error",) if FILES and not (PID_NS and MOUNT_NS) else ()
needs_files = pytest.mark.skipif(not FILES, reason="needs Landlock (Linux 5.13+) to confine file access")
needs_signals = pytest.mark.skipif(not SIGNALS, reason="needs Landlock signal scoping (Linux 6.12+)")
MARKERS = ("4242.4242", "4243.4243", "4244.4244", "4246.4246")  # the sleeps hang_orphans.py and resource_fork_bomb.py start


def fast_config() -> Config:
    config = load_config()
    limits = dataclasses.replace(config.limits, call_timeout_s=2, item_budget_s=8, cell_timeout_s=5, total_budget_s=60)
    hypothesis = dataclasses.replace(config.hypothesis, max_examples=20, stateful_examples=10, attention_examples=8)
    return dataclasses.replace(config, limits=limits, hypothesis=hypothesis)


CONFIG = fast_config()
CPU_ITEMS = [item for item in CONFIG.items if item.device == "cpu"]
CPU_IDS = {item.id for item in CPU_ITEMS}
TODO = {n: [i.id for i in CPU_ITEMS if i.todo == n] for n in ("todo1", "todo2", "todo3", "todo4", "todo5")}
KEYWORDS = {  # a failure of this kind says so in both languages (one of these pairs)
    "crashed": (("退出或崩溃", "exit or crash"), ("数据过大", "too large"), ("干扰", "interfered")),
    "timeout": (("没有返回", "without returning"),),
    "integrity": (("不计分", "no credit"),),
    "missing": (("没有找到", "not defined"),),
}


@dataclass
class Expect:
    failed: dict[str, tuple[str, ...]] = field(default_factory=dict)  # item id -> the failure kinds allowed
    cells: dict[int, str] = field(default_factory=dict)  # cell index -> status
    cell_types: dict[int, str] = field(default_factory=dict)  # cell index -> error type
    flagged: bool = False
    seconds: float = 60.0  # bound on this 2-core machine with CONFIG's limits (its total budget is 60 s; far cases made a grading 13 s of CPU)
    words: dict[str, str | tuple[str, str]] = field(default_factory=dict)  # item id -> a word its messages hold (zh, en)
    limits: dict[str, Any] = field(default_factory=dict)  # [limits] changed for this case only
    unchecked: bool = False  # its own items and score are its business (a hog): only what it leaves is checked
    tampered: tuple[str, ...] = ()  # kinds of tampering with the grader's machinery it must be recorded with (grader/tampering.py)


SLOW_LISTS = {"call_timeout_s": 10, "item_budget_s": 40, "total_budget_s": 170}


def fail(ids: list[str], *kinds: str) -> dict[str, tuple[str, ...]]:
    return dict.fromkeys(ids, kinds)


EVERYTHING = [i.id for i in CPU_ITEMS]
SCALED = ["todo5.scale_and_stability", "todo5.inputs_unchanged"]  # the todo5 items that pass a scale

EXPECT: dict[str, Expect] = {
    # sys.exit() stops the run there, as Run All does; KeyboardInterrupt and the rest would not
    "exit_in_cells.py": Expect(cells={2: "error", 3: "not_run", 4: "not_run"}, cell_types={2: "SystemExit"}),
    "exit_os_exit_cell.py": Expect(cells={2: "crashed", 3: "ok"}),
    "exit_os_exit_in_decode.py": Expect(failed=fail(TODO["todo3"], "crashed")),
    "exit_sys_exit_in_ledger.py": Expect(failed=fail(TODO["todo1"], "error"), words={"todo1.per_token": "SystemExit"}),
    "exit_in_methods.ipynb": Expect(
        failed=fail(TODO["todo4"] + TODO["todo5"], "error", "not_exercised"),
        cells={2: "error", 3: "ok"},
        cell_types={2: "KeyboardInterrupt"},
        words={"todo4.table_order": "KeyboardInterrupt", "todo5.mha_fp32": "Bail"},
    ),
    "hang_loop_cell.py": Expect(cells={2: "timeout", 3: "ok"}),
    "hang_loop_in_prefill.py": Expect(failed=fail(TODO["todo2"], "timeout"), seconds=40),
    "hang_sleep_in_attention.py": Expect(failed=fail(TODO["todo5"], "timeout"), seconds=45),
    "hang_deadlock.py": Expect(failed=fail(TODO["todo4"], "timeout"), seconds=40),
    "hang_threads_left_running.py": Expect(),
    "hang_orphans.py": Expect(),
    "resource_big_alloc.py": Expect(
        failed=fail(TODO["todo5"], "error", "not_exercised"),
        cells={2: "error", 3: "error", 4: "error", 5: "error"},
        cell_types={2: "MemoryError", 3: "RuntimeError", 4: "ValueError", 5: "MemoryError"},
    ),
    "resource_recursion.py": Expect(
        failed={**fail(TODO["todo2"], "timeout", "crashed", "error"), **fail(TODO["todo4"], "error", "not_exercised")},
        cells={2: "crashed"},
        words={"todo4.table_order": "RecursionError"},
        # Building and repr()ing the list takes about 1.3 s alone; under a loaded CI it ran past a 5 s
        # cell limit (a timeout, not the crash this case is about).
        limits={"cell_timeout_s": 30},
        seconds=45,
    ),
    "resource_output_flood.py": Expect(),
    # The base items fail on the answer itself; the others cannot check their property without one.
    "resource_giant_tensor.py": Expect(failed=fail(TODO["todo4"] + TODO["todo5"], "wrong", "not_exercised"), words={"todo5.mha_fp32": "too large"}),
    "forge_fake_output.py": Expect(),
    "forge_fake_output_buggy.py": Expect(failed=fail(["todo1.per_token"], "wrong")),  # per block from its own per-token figure: right
    # A base mistake is wrong on every case: every attention item needs right values on its own (issue 15).
    # The default scale is wrong with every feature off: the base item's mistake alone (one mistake, one item).
    "forge_monkeypatch.py": Expect(failed=fail(["todo5.mha_fp32"], "wrong")),
    "forge_lying_digests.py": Expect(failed=fail(["todo5.inputs_unchanged"], "wrong"), words={"todo5.inputs_unchanged": "key_cache"}),
    "forge_lying_objects.py": Expect(failed=fail(["todo1.per_token", "todo4.table_order"], "wrong")),
    # Where Landlock narrows the host's /proc (no namespaces), a session child cannot list its
    # own /proc/self/fd: these attacks stop there, with an error, before they reach a socket.
    "forge_protocol.py": Expect(
        failed=fail(TODO["todo1"], "crashed", *FORKS_BLIND, *(("wrong",) if FORKS_BLIND else ())),  # wrong: PermissionError, not ValueError
        cells={2: "crashed", 3: "crashed", 4: "crashed", 5: "ok"},
        words={"todo1.per_token": ("过大", "too large")} if not FORKS_BLIND else {},
    ),
    "fd_tamper.py": Expect(failed=fail(TODO["todo4"], "crashed", *FORKS_BLIND), cells={2: "crashed"}),
    # In a PID namespace the "grandparent" cell 3 finds is pid 0, and kill(0) is its own process group.
    "kill_judge.ipynb": Expect(
        cells={2: "error", 3: "crashed" if PID_NS else "error", 4: "crashed", 5: "ok"},
        cell_types={2: "PermissionError", **({} if PID_NS else {3: "PermissionError"})},
    ),
    "cheat_import_reference.py": Expect(failed=fail(EVERYTHING, "missing"), flagged=True, cells={1: "error"}, cell_types={1: "ImportError"}),
    "cheat_import_grader.py": Expect(failed=fail(EVERYTHING, "integrity"), flagged=True),
    "cheat_obfuscated.py": Expect(failed=fail(EVERYTHING, "missing", "integrity"), flagged=True),  # integrity: read the key (no Landlock)
    "ipc_sysv_leak.py": Expect(),
    "ipc_sysv_read.py": Expect(failed=fail(EVERYTHING, "missing")),
    "resource_memfd_children.py": Expect(limits={"memory_mb": 1536, "cell_timeout_s": 40}, seconds=75),
    "resource_fork_bomb.py": Expect(cells={3: "timeout"}, seconds=45),
    "spy_proc.py": Expect(),
    "spy_terminal.py": Expect(),
    "net_sockets.py": Expect(),
    # Round 3 (tests/test_deny_by_default.py checks what each saw and left)
    "sys_denied_calls.py": Expect(),
    "keyring_read_plant.py": Expect(),
    "spy_sys_cgroups.py": Expect(),
    # Its cells sleep about 50 s (the message, page by page): the grading needs time after them,
    # as the kernel sender's does (a total budget of 60 s left too little once far cases came).
    "collude_sender.py": Expect(limits={"cell_timeout_s": 60, "total_budget_s": 120}, seconds=100),
    "collude_receiver.py": Expect(failed=fail(TODO["todo5"], "not_implemented"), limits={"cell_timeout_s": 60}, seconds=60),
    # tests/test_term_secret.py: it found the planted secret and read nothing (its walk takes a few seconds)
    "secret_hunt.py": Expect(limits={"cell_timeout_s": 30, "total_budget_s": 120}, seconds=60),
    # Each holds or listens for 35-45 s (tests/test_kernel_objects.py grades them side by side).
    # The sender's ctypes syscalls are denied by the audit hook before seccomp sees them (listed as tampering).
    "collude_kernel_sender.py": Expect(limits={"cell_timeout_s": 60, "total_budget_s": 120}, seconds=100, tampered=("memory",)),
    "collude_kernel_receiver.py": Expect(failed=fail(TODO["todo5"], "not_implemented"), limits={"cell_timeout_s": 60, "total_budget_s": 120}, seconds=100),
    "cpu_hog.py": Expect(unchecked=True, limits={"cell_timeout_s": 60}, seconds=90),
    "disk_filler.py": Expect(),
    # Red team 9: the grader's worker-side observers (issue 19), each hunted for by every route Python
    # offers; the mistake each hides is caught as without the hunt, and every audited route is denied and listed.
    "tamper_kept_ledger.py": Expect(failed=fail(TODO["todo1"], "wrong"), tampered=("gc",)),
    "tamper_hook_frame.py": Expect(failed=fail(TODO["todo1"], "wrong"), tampered=("gc",)),
    "tamper_inputs_copied.py": Expect(failed=fail(["todo5.inputs_unchanged"], "wrong"), words={"todo5.inputs_unchanged": "query"}, tampered=("frames",)),
    "tamper_pool_view_traced.py": Expect(failed=fail(["todo4.table_order"], "wrong"), words={"todo4.table_order": ("之前返回", "returned earlier")}, tampered=("trace",)),
    "tamper_out_buffer_frozen.py": Expect(failed=fail(["todo5.mha_fp32"], "wrong"), words={"todo5.mha_fp32": ("之前返回", "earlier call returned")}, tampered=("frames",)),
    # A fork hook of the submission's runs after the grader's, before the session's grader thread claims itself (red team 18).
    "tamper_atfork_kept_ledger.py": Expect(failed=fail(["todo1.per_token", "todo1.per_block_and_total"], "wrong"), tampered=("frames",)),
    "tamper_atfork_kept_view.py": Expect(failed=fail(["todo4.table_order"], "wrong"), tampered=("frames",)),
    "tamper_atfork_judge_key.py": Expect(tampered=("frames",)),
    # The judge's shared files were on its disk (red team 18): sealed memfds now, a write past their end fails.
    "shared_file_grown.py": Expect(),
    # A kernel of the submission's registered over an ATen operator (torch.library) runs on the grader thread where
    # it runs one: readings take a CPU tensor's memory instead, views of the judge's files are checked to be views,
    # and a replaced kernel found before any other operator there is listed (red team 20).
    "rt20_library_detach.py": Expect(failed=fail(TODO["todo5"], "wrong", "integrity"), tampered=("kernel",)),
    "rt20_library_detach_todo4.py": Expect(failed={"todo4.table_order": ("wrong",), **fail(TODO["todo5"], "wrong", "integrity")},
                                           tampered=("kernel",)),
    "rt20_library_view_inputs.py": Expect(failed=fail(TODO["todo2"] + TODO["todo3"] + TODO["todo4"] + TODO["todo5"], "error", "not_exercised", "integrity"),
                                          tampered=("kernel",)),
    # A tensor that dispatches to Python answers its size or device with its class's code, even with __torch_dispatch__
    # switched off: the grader thread refuses it as a return value before asking it anything (red team 21).
    "rt21_sizes_policy_buffer.py": Expect(failed=fail(TODO["todo5"], "wrong", "not_exercised")),
    "rt21_sizes_policy_plain_type.py": Expect(failed=fail(TODO["todo5"], "wrong", "not_exercised")),
    "rt21_sizes_policy_query.py": Expect(failed=fail(TODO["todo5"], "wrong", "not_exercised")),
    "rt21_sizes_policy_todo4.py": Expect(failed=fail(TODO["todo4"], "wrong", "not_exercised")),
    # The grader thread looks things up in the submission's class dicts, dicts and names: a key whose hash matches the
    # name looked up, or a str subclass as a class's __name__, ran the submission's code there (red team 22).
    "rt22_classdict_eq_buffer.py": Expect(failed=fail(["todo4.table_order"], "wrong"), limits=SLOW_LISTS, seconds=180),  # its lists are read on the caller thread
    "rt22_exception_name_rollback.py": Expect(failed=fail(["todo2.oom_atomic"], "wrong")),
    "rt22_qualname_radd_ledger.py": Expect(failed=fail(TODO["todo1"], "wrong")),
    # A thread of the submission's changed a shared ledger between the reply and the kept digests (red team 23):
    # results sharing a dict, a list or tensor memory are now found in one pass, by identity and addresses.
    "rt23_race_ledger.py": Expect(failed=fail(TODO["todo1"], "wrong")),
    "rt23_race_shared_ledger.py": Expect(failed=fail(TODO["todo1"], "wrong")),
    # What Jupyter runs is what is graded (red team 24): a marker file read in a module a cell writes, an alias of %sx,
    # `'grader' in sys.modules` after the lab cell that grading takes out: the TODO that depends on it gets no points.
    "rt24_nb_writefile_marker.ipynb": Expect(failed=fail(TODO["todo5"], "skipped_value")),
    "rt24_nb_alias_magic_sx.ipynb": Expect(failed=fail(TODO["todo5"], "skipped_value")),
    "rt24_nb_stripped_import_grader.ipynb": Expect(failed=fail(TODO["todo5"], "skipped_value")),
    # A set-up step refused by the submission's own objects dropped the case, and with it the bug it would show (red
    # team 27): a changed given release is now replaced by the state the template's leaves, and a list operation the
    # contract allows on free_blocks, refused, fails every item of the TODO.
    "rt27_place_refused_bs1.py": Expect(failed=fail(TODO["todo3"], "wrong")),
    "rt27_permute_refused_sorts.py": Expect(failed=fail(TODO["todo2"] + TODO["todo3"], "wrong")),
    "rt27_release_refused_registry.py": Expect(failed=fail(["todo2.block_count", "todo2.oom_atomic"], "wrong", "error")),
    "rt27_release_refused_idcache.py": Expect(failed=fail(["todo3.growth", "todo3.oom_rollback"], "wrong", "error")),
    # Set-up steps that did not take (red team 29): a property that ignores the grader's write or shows another list;
    # the state read back after each set-up step is checked against what the step makes.
    # A property on free_blocks makes the 100,000-block pools slow (each pop reads it on the caller thread): the
    # configured call limit, not the suite's 2 s.
    "rt29_other_manager_empty_getter.py": Expect(failed=fail(TODO["todo3"], "wrong"), limits=SLOW_LISTS, seconds=180),
    "rt29_release_repair_ignored.py": Expect(failed=fail(TODO["todo2"] + TODO["todo3"], "wrong")),
    "rt29_big_pools_start_empty.py": Expect(failed=fail(["todo2.block_count", "todo2.oom_atomic"], "wrong", "error"), limits=SLOW_LISTS, seconds=180),
    "tamper_forged_replies.py": Expect(failed=fail(TODO["todo4"], "crashed", "integrity"), tampered=("forged",)),
    # Red team 37: a cached ledger the caller cannot edit, or whose footprint cannot be read; an input changed under private pages
    "rt37_lru_ledger_decoy_keys.py": Expect(failed=fail(TODO["todo1"], "wrong")),
    "rt37_shared_ledger_sparse_value.py": Expect(failed=fail(TODO["todo1"], "wrong")),
    "rt37_inplace_query_private_pages.py": Expect(failed=fail(["todo5.inputs_unchanged"], "wrong")),
}
CASES = sorted(EXPECT)
NEEDS_FILES = ("forge_fake_output.py", "forge_fake_output_buggy.py")  # they write wherever they can
# Without a cgroup the memory cap is per process: this case would hold 3 GiB of the machine's memory.
NEEDS_CGROUP = ("resource_memfd_children.py",)
LEAK_KEY = 0x50414745  # the SysV key ipc_sysv_leak.py leaves its source under
LEAK_FILES = ("/dev/shm/pa-leak-source.py", "/tmp/pa-leak-source.py", "/var/tmp/pa-leak-source.py")
UDP_PORT = 47913
ABSTRACT = "\0pa-hostile-abstract"
TYPED = b"typed-by-the-ta"


def _skip_reason(name: str) -> str | None:
    """Why this case cannot be graded safely on this machine, or None."""
    if name == "kill_judge.ipynb" and not SIGNALS:
        return "without Landlock signal scoping this submission would kill the test run itself"
    if name in NEEDS_FILES and not FILES:
        return "without Landlock this submission would write into /tmp and the judge's directory"
    if name == "rt37_inplace_query_private_pages.py" and not MSEAL:
        return "this kernel has no mseal (Linux 6.10 and later): the judge's shared pages can be mapped over"
    if name in NEEDS_CGROUP and not CGROUP:
        return "no cgroup can be made here (needs root, or a delegated cgroup v2 subtree): the memory cap would be per process"
    return None


# --- what is around a grading: set up before, observed after --------------------------

@contextlib.contextmanager
def _listeners() -> Iterator[dict[str, Any]]:
    """What net_sockets.py aims at: a UDP port on 127.0.0.1, a Unix socket anyone may open, an abstract one.

    After the grading each says "reached" or "nothing" (None: it could not listen here).
    """
    seen: dict[str, Any] = {"udp": None, "unix": None, "abstract": None}
    folder = Path(tempfile.mkdtemp(prefix="pa-hostile-listen-", dir="/tmp"))
    folder.chmod(0o755)
    opened: dict[str, socket.socket] = {}
    for kind, family, kind_type, address in (
        ("udp", socket.AF_INET, socket.SOCK_DGRAM, ("127.0.0.1", UDP_PORT)),
        ("unix", socket.AF_UNIX, socket.SOCK_STREAM, str(folder / "probe.sock")),
        ("abstract", socket.AF_UNIX, socket.SOCK_STREAM, ABSTRACT),
    ):
        sock = socket.socket(family, kind_type)
        try:
            sock.bind(address)
        except OSError:  # in use by another test run: this one cannot tell
            sock.close()
            continue
        if kind_type == socket.SOCK_STREAM:
            sock.listen(8)
        if kind == "unix":
            os.chmod(address, 0o777)  # as open as a socket can be: only the sandbox keeps a submission out
        sock.setblocking(False)
        opened[kind] = sock
    try:
        yield seen
    finally:
        for kind, sock in opened.items():
            try:
                if kind == "udp":
                    sock.recv(100)
                else:
                    sock.accept()[0].close()
                seen[kind] = "reached"
            except BlockingIOError:
                seen[kind] = "nothing"
            sock.close()
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def _terminal() -> Iterator[dict[str, Any]]:
    """A terminal anyone may open with a line typed into it; after, whether the line is still unread."""
    master, slave = os.openpty()
    name = os.ttyname(slave)
    os.chmod(name, 0o666)
    os.write(master, TYPED + b"\n")
    seen: dict[str, Any] = {"name": name}
    try:
        yield seen
    finally:
        ready, _, _ = select.select([slave], [], [], 1.0)
        seen["unread"] = bool(ready) and TYPED in os.read(slave, 200)
        os.close(master)
        os.close(slave)


@contextlib.contextmanager
def _neighbour(path: Path) -> Iterator[dict[str, Any]]:
    """Another grading, loaded and running while this one is graded (its paths a spy must not find)."""
    cells = load_submission(path, CONFIG.limits.max_file_mb << 20).cells
    with Sandbox(cells, CONFIG.limits) as other:
        report = other.load()
        assert report.failed is None, report.failed
        yield {"paths": [str(other.tmp), other.socket_path], "isolation": other.isolation_report()}


def _leaking_neighbour() -> contextlib.AbstractContextManager[dict[str, Any]]:
    """ipc_sysv_leak.py loaded while ipc_sysv_read.py is graded, where an IPC namespace can keep them apart.

    Without one, gradings at the same time share SysV IPC (docs/trust.md): only the leak of a finished
    grading is tested then (swept by the judge).
    """
    return _neighbour(HOSTILE / "ipc_sysv_leak.py") if IPC_NS else contextlib.nullcontext({})


SURROUNDINGS: dict[str, Callable[[], contextlib.AbstractContextManager[dict[str, Any]]]] = {
    "net_sockets.py": _listeners,
    "spy_terminal.py": _terminal,
    "spy_proc.py": lambda: _neighbour(ROOT / "reference" / "paged_attention.py"),
    "ipc_sysv_read.py": _leaking_neighbour,
    "spy_sys_cgroups.py": lambda: _neighbour(ROOT / "reference" / "paged_attention.py"),
    "keyring_read_plant.py": surroundings.ta_secret_key,
    "collude_receiver.py": lambda: surroundings.colluding_sender(
        {**{k: getattr(CONFIG.limits, k) for k in ("call_timeout_s", "item_budget_s", "total_budget_s")}, **EXPECT["collude_receiver.py"].limits}
    ),
    "secret_hunt.py": surroundings.planted_secret,
    "collude_kernel_receiver.py": lambda: surroundings.colluding_sender(
        {**{k: getattr(CONFIG.limits, k) for k in ("call_timeout_s", "item_budget_s")}, **EXPECT["collude_kernel_receiver.py"].limits},
        "collude_kernel_sender.py",
    ),
}


def _marked_processes(marker: str) -> list[int]:
    """Processes whose command line or environment mentions `marker`."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        if marker.encode() in cmdline or marker.encode() in environ:
            found.append(int(entry.name))
    return found


@dataclass
class Graded:
    result: GradeResult
    seconds: float
    leftovers: list[int]  # processes of the submission still alive after grading
    children: list[int]  # processes this process started that are still there
    private_dirs: list[str]  # what grading left in its temporary directory
    maxrss_growth_mb: float
    around: dict[str, Any] = field(default_factory=dict)  # what SURROUNDINGS saw


@functools.cache
def graded(name: str) -> Graded:
    """Grade once per session, in a temporary directory of its own (tempfile.tempdir)."""
    private = Path(tempfile.mkdtemp(prefix="hostile-"))
    config = dataclasses.replace(CONFIG, limits=dataclasses.replace(CONFIG.limits, **EXPECT[name].limits)) if name in EXPECT else CONFIG
    with SURROUNDINGS.get(name, contextlib.nullcontext)() as around:
        before_children = set(descendants(os.getpid()))
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        saved, tempfile.tempdir = tempfile.tempdir, str(private)
        try:
            started = time.monotonic()
            result = grade_path(HOSTILE / name, config, "cpu")
            seconds = time.monotonic() - started
        finally:
            tempfile.tempdir = saved
    time.sleep(0.2)  # a process killed a moment ago may still be on its way out
    leftovers = _marked_processes(str(private)) + [p for m in MARKERS for p in _marked_processes(m)]
    children = sorted(set(descendants(os.getpid())) - before_children)
    left = sorted(p.name for p in private.iterdir())
    if not left:
        private.rmdir()
    growth = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    return Graded(result, seconds, leftovers, children, left, growth, dict(around or {}))


def expected_score(expect: Expect) -> float:
    passed = sum(i.weight for i in CPU_ITEMS if i.id not in expect.failed)
    return round(100.0 * passed / sum(i.weight for i in CPU_ITEMS), 2)


def test_every_case_has_a_header_and_an_expectation() -> None:
    files = sorted(p.name for p in HOSTILE.iterdir() if not p.name.startswith("input_"))
    assert files == CASES
    for path in HOSTILE.iterdir():
        first = path.read_bytes().split(b"\n", 1)[0].decode(errors="replace")
        if path.suffix == ".ipynb" and not path.name.startswith("input_not_json"):
            notebook = json.loads(path.read_text())
            cells = notebook["cells"] if "cells" in notebook else notebook["worksheets"][0]["cells"]
            source = cells[0].get("source", cells[0].get("input"))
            first = ("".join(source) if isinstance(source, list) else source).split("\n", 1)[0]
        assert first.startswith("# hostile: ") and "expect" in first, path.name


@pytest.mark.parametrize("name", CASES)
def test_hostile_case(name: str) -> None:
    reason = _skip_reason(name)
    if reason:
        pytest.skip(reason)
    expect = EXPECT[name]
    run = graded(name)
    result = run.result
    assert result.error is None, result.error
    outcome = {i.id: (i.status, i.failure.kind if i.failure else "") for i in result.items}
    for item in [] if expect.unchecked else result.items:
        if item.id not in CPU_IDS:
            assert item.status == "not_run"
            continue
        if item.id in expect.failed:
            assert item.status == "failed", (item.id, outcome)
            assert item.failure is not None and item.failure.kind in expect.failed[item.id], (item.id, item.failure)
            message = item.failure.message
            assert message.zh and message.en and message.zh != message.en
            pairs = KEYWORDS.get(item.failure.kind, (("", ""),))
            assert any(zh in message.zh and en in message.en for zh, en in pairs), message
            if item.id in expect.words:
                word = expect.words[item.id]
                zh, en = word if isinstance(word, tuple) else (word, word)
                assert en in message.en, message.en
                assert zh in message.zh, message.zh
        else:
            assert item.status == "passed", (item.id, item.failure)
    if expect.unchecked:
        pass
    elif not expect.flagged:
        assert result.score == expected_score(expect), outcome
    else:
        assert result.score == 0
        assert result.flags and all(f.zh and f.en and f.zh != f.en for f in result.flags)
    if not expect.flagged:
        assert result.flags == [], [f.en for f in result.flags]
    assert sorted({r.kind for r in result.tampering}) == sorted(set(expect.tampered)), [r.message.en for r in result.tampering]
    assert all(r.message.zh and r.message.en and r.message.zh != r.message.en for r in result.tampering)
    cells = {c.index: c for c in result.cells}
    for index, status in expect.cells.items():
        assert cells[index].status == status, (index, cells[index])
    for index, error_type in expect.cell_types.items():
        assert cells[index].error_type == error_type, (index, cells[index])
    for index, cell in cells.items():
        if index not in expect.cells:
            assert cell.status == "ok", cell
    # Under ./run-tests two test files grade side by side on the cores (pytest-xdist): twice the bound.
    bound = expect.seconds * (2 if os.environ.get("PYTEST_XDIST_WORKER") else 1)
    assert run.seconds < bound, f"{name} took {run.seconds:.1f} s"
    assert run.leftovers == [], f"still running after grading: {run.leftovers}"
    assert run.children == [], f"children of the judge left behind: {run.children}"
    assert run.private_dirs == [], f"left in the temporary directory: {run.private_dirs}"


def test_output_flood_is_counted_not_kept() -> None:
    result = graded("resource_output_flood.py").result
    assert result.output_bytes >= 40 << 20
    assert len(result.output_excerpt) <= CONFIG.limits.output_kb << 10


def test_giant_tensor_does_not_reach_the_judge() -> None:
    run = graded("resource_giant_tensor.py")
    assert run.maxrss_growth_mb < 300, f"the judge grew by {run.maxrss_growth_mb:.0f} MB"


@needs_files
def test_fake_lines_reach_only_the_excerpt() -> None:
    result = graded("forge_fake_output.py").result
    assert result.score == 100
    assert "Score: 100 / 100" in result.output_excerpt  # printed, kept as the submission's output, and nothing more


@needs_files
def test_forgery_cannot_write_outside_its_directory() -> None:
    excerpt = graded("forge_fake_output.py").result.output_excerpt
    # It runs in the copy of its folder, in the grading's private work directory (".."): above that, nothing.
    for folder in ("../..", "../../..", "/tmp"):
        for name in ("results.json", "scorecard.json", "grader.py"):
            assert f"blocked: {folder} {name} PermissionError" in excerpt
    assert "blocked: the judge's directory PermissionError" in excerpt
    assert not (Path.cwd() / "scorecard.json").exists()


@needs_files
def test_obfuscated_cheat_reaches_nothing() -> None:
    result = graded("cheat_obfuscated.py").result
    assert "ANSWER KEY NOT REACHABLE" in result.output_excerpt
    assert any("meta_path" in f.en for f in result.flags)


def test_runtime_import_is_refused_and_flagged() -> None:
    for name in ("cheat_import_reference.py", "cheat_import_grader.py"):
        result = graded(name).result
        assert any("at run time" in f.en and "运行时" in f.zh for f in result.flags), [f.en for f in result.flags]


def test_lying_objects_get_no_points_for_the_lie() -> None:
    items = {i.id: i for i in graded("forge_lying_objects.py").result.items}
    # The int that equals everything is read as the int it holds (1), never as the lie.
    assert "expected 2, got 1" in items["todo1.per_token"].failure.message.en or "exact int" in items["todo1.per_token"].failure.message.en
    assert "block-table order" in items["todo4.table_order"].failure.message.en


def test_judge_stays_healthy() -> None:
    """After every hostile case: no stray thread or descriptor, and a correct submission still scores 100."""
    for name in CASES:
        if _skip_reason(name) is None:
            graded(name)
    threads = {t.name for t in threading.enumerate() if t.is_alive()}
    assert not [t for t in threads if t.startswith("pa-grade")], threads
    fds_before = len(os.listdir("/proc/self/fd"))
    result = grade_path(ROOT / "reference" / "paged_attention.py", CONFIG, "cpu")
    assert result.score == 100
    assert len(os.listdir("/proc/self/fd")) <= fds_before
    assert not [t for t in threading.enumerate() if t.name.startswith("pa-grade")]


def _cli(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "grader", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _cli_env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(ROOT)}


@needs_files
def test_cli_writes_only_its_output(tmp_path: Path) -> None:
    """Grading from a scratch directory leaves only the --json file there and nothing in the parent."""
    cwd, tmp = tmp_path / "cwd", tmp_path / "tmp"
    cwd.mkdir()
    tmp.mkdir()
    before_parent = sorted(p.name for p in tmp_path.iterdir())
    proc = _cli("grade", str(HOSTILE / "forge_fake_output.py"), "--json", "out/results.json", "--lang", "en", cwd=cwd, env=_cli_env(tmp))
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    # The judge prints one score line, the genuine one; the submission's fake lines are not printed.
    scores = [line for line in stdout.splitlines() if line.startswith("Score:")]
    assert scores == [f"Score: 100 / 100   ({HOSTILE / 'forge_fake_output.py'})"], stdout[-3000:]
    assert json.loads((cwd / "out" / "results.json").read_text())["score"] == 100
    assert sorted(str(p.relative_to(cwd)) for p in cwd.rglob("*")) == ["out", "out/results.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == before_parent
    assert list(tmp.iterdir()) == [], "the private directory was not removed"


def test_killing_the_judge_kills_the_submission(tmp_path: Path) -> None:
    """SIGKILL the grader mid-grading: the worker's reaper takes everything down and cleans up."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = _cli("grade", str(HOSTILE / "hang_orphans.py"), "--lang", "en", cwd=tmp_path, env=_cli_env(tmp))
    try:
        deadline = time.monotonic() + 60
        while not any(p for m in MARKERS[:2] for p in _marked_processes(m)):  # the cell's orphans exist
            assert time.monotonic() < deadline, "the submission never started"
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        alive = _marked_processes(str(tmp)) + [p for m in MARKERS for p in _marked_processes(m)]
        if not alive and not list(tmp.iterdir()):
            break
        time.sleep(0.2)
    assert _marked_processes(str(tmp)) == []
    assert [p for m in MARKERS for p in _marked_processes(m)] == []
    assert list(tmp.iterdir()) == [], "the keeper should remove the private directory"
    assert cgroups.existing(proc.pid) == [], "the keeper should remove the cgroup"


def test_messages_name_the_limit() -> None:
    items = {i.id: i for i in graded("hang_loop_in_prefill.py").result.items}
    failure = items["todo2.block_count"].failure
    assert re.search(r"\b2 s\b", failure.message.en) and "2 秒" in failure.message.zh
    assert "allocate_for_prefill" in failure.repro


# --- what no grading may reach: other gradings, the machine, the TA's terminal ----------

def _sysv_keys() -> set[int]:
    """SysV shared-memory keys of this machine's (the judge's) IPC namespace."""
    with open("/proc/sysvipc/shm") as f:
        return {int(line.split()[0]) for line in f.read().splitlines()[1:]}


def _unlink_leaked_queue() -> None:
    """Without an IPC namespace the POSIX queue ipc_sysv_leak.py makes outlives it (docs/trust.md): remove it here."""
    ctypes.CDLL(None).mq_unlink(b"/pa-leak")


def test_sysv_channel_between_gradings_is_closed() -> None:
    """A correct submission leaves its source in shared memory; a later one with no solution looks for it."""
    leak = graded("ipc_sysv_leak.py")
    try:
        assert re.search(r"LEFT: .*sysv", leak.result.output_excerpt), leak.result.output_excerpt[-500:]  # the attack ran
        assert {LEAK_KEY, LEAK_KEY + 1}.isdisjoint(_sysv_keys()), "a SysV segment outlived its grading"
        assert [p for p in LEAK_FILES if os.path.exists(p)] == []
        read = graded("ipc_sysv_read.py")
        found = re.search(r"FOUND: (.*)", read.result.output_excerpt)
        assert found, read.result.output_excerpt[-500:]
        if IPC_NS:
            assert found.group(1) == "NOTHING FOUND"
        else:  # POSIX queues cannot be listed without a mount of mqueue: not defended without an IPC namespace
            assert found.group(1) in ("NOTHING FOUND", "mqueue")
        assert read.result.score == 0
    finally:
        if not IPC_NS:
            _unlink_leaked_queue()


def test_sysv_channel_closed_between_gradings_at_the_same_time() -> None:
    """The reader is graded while the leaking submission is loaded and holds its segment."""
    if not IPC_NS:
        pytest.skip("no IPC namespace here: gradings running at the same time share SysV IPC (docs/trust.md)")
    read = graded("ipc_sysv_read.py")
    assert "FOUND: NOTHING FOUND" in read.result.output_excerpt
    assert read.around["isolation"]["namespaces"] == ISOLATION["namespaces"]


def _held(excerpt: str, what: str) -> int:
    match = re.search(rf"{what} HELD (\d+) MiB \((\d+) killed\)", excerpt)
    assert match, excerpt[-1000:]
    return int(match.group(1))


def test_memory_cap_counts_memfd_and_every_child() -> None:
    """memfd pages never mapped, and forked children each under the cap, are all counted together."""
    if not CGROUP:
        pytest.skip("no cgroup can be made here: RLIMIT_AS caps each process, and memfd pages not at all")
    run = graded("resource_memfd_children.py")
    cap = EXPECT["resource_memfd_children.py"].limits["memory_mb"]
    assert run.result.isolation["limits"]["memory_mb"] == cap
    assert run.result.isolation["cgroup"] == CGROUP
    # Unbounded, the attacks would hold 3072 and 1800 MiB; each must have run, and been stopped under the cap.
    assert 128 <= _held(run.result.output_excerpt, "MEMFD") < cap
    assert 128 <= _held(run.result.output_excerpt, "CHILDREN") < cap


def test_fork_bomb_stops_at_the_process_limit() -> None:
    run = graded("resource_fork_bomb.py")
    counts = re.findall(r"FORKED (\d+) BEFORE REFUSAL \((\w+)\)", run.result.output_excerpt)
    assert counts, run.result.output_excerpt[-1000:]
    for count, refused in counts:
        assert refused == "BlockingIOError" and int(count) < CONFIG.limits.pids, (count, refused)
    assert run.result.isolation["limits"]["pids"] == CONFIG.limits.pids


def test_proc_shows_no_other_grading() -> None:
    """Another grading runs while the spy reads /proc: none of its paths or its socket may show."""
    run = graded("spy_proc.py")
    excerpt = run.result.output_excerpt
    assert "PROCESSES SEEN" in excerpt or "PROCESS LIST REFUSED" in excerpt, excerpt[-500:]
    if not (PID_NS or FILES):
        pytest.skip("no PID namespace and no Landlock here: every process's command line is readable")
    for path in run.around["paths"]:
        assert path not in excerpt
    if PID_NS:
        seen = re.search(r"PROCESSES SEEN: (\d+)", excerpt)
        assert seen and int(seen.group(1)) <= 4, excerpt[-500:]  # its init and its own processes
    else:
        assert "PROCESS LIST REFUSED" in excerpt and "SOCKET TABLE REFUSED" in excerpt


def test_terminals_are_out_of_reach() -> None:
    """A terminal anyone may open, with a line typed in: the submission neither opens nor reads it."""
    if not (MOUNT_NS or FILES):
        pytest.skip("no mount namespace and no Landlock here: the submission can open any terminal its uid may")
    run = graded("spy_terminal.py")
    assert "OPENED: NO TERMINAL" in run.result.output_excerpt, run.result.output_excerpt[-500:]
    assert run.around["unread"], "the line typed into the terminal was consumed"


def test_network_and_sockets_reach_nothing() -> None:
    """UDP to this machine, a Unix socket anyone may open, an abstract socket: the test listens on each."""
    run = graded("net_sockets.py")
    around, excerpt = run.around, run.result.output_excerpt
    assert "REACHED:" in excerpt, excerpt[-500:]
    checks = {
        "udp": (NET_NS, "no network namespace here: UDP is not confined (Landlock covers TCP only)"),
        "unix": (MOUNT_NS, "no mount namespace here: a Unix socket that the submission's uid may open is reachable by path"),
        "abstract": (NET_NS or SIGNALS, "no network namespace and no Landlock scoping here: abstract sockets are reachable"),
    }
    missing = []
    for kind, (defended, reason) in checks.items():
        if around.get(kind) is None:
            missing.append(f"{kind}: could not listen here")
        elif defended:
            assert around[kind] == "nothing", (kind, excerpt[-500:])
        else:
            missing.append(reason)
    if NET_NS and MOUNT_NS:
        assert "REACHED: NOTHING" in excerpt, excerpt[-500:]
    if missing:
        pytest.skip("; ".join(missing))
