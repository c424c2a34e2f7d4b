"""A cgroup per grading: one memory cap, one process cap and one CPU share over all of a
submission's processes.

Memory here counts what RLIMIT_AS cannot: pages written to memfd and tmpfs files, and the
sum over forked children.  The judge makes the cgroup where it may (the v1 `memory` and
`pids` hierarchies, as root; or a v2 directory with both controllers, as root or inside a
delegated subtree named by PA_GRADER_CGROUP), the worker's nest joins it before any other
process of the submission exists, and the judge removes it after grading; the worker's
keeper does if the judge died.  Where none can be made, the caller falls back to rlimits.

Standard library only: the worker's keeper loads it by path.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from dataclasses import dataclass, field

PREFIX = "pa-grade-"
ROOT_VAR = "PA_GRADER_CGROUP"  # a v2 directory the grader may create cgroups in (a delegated subtree)


CPU_SHARES = 1024  # v1 cpu.shares of every grading: the same for all, so each gets an equal part
CPU_WEIGHT = 100  # v2 cpu.weight, likewise


@dataclass
class Cgroup:
    version: str  # "v1" or "v2"
    memory_mb: int | None  # None: no memory controller here
    pids: int | None  # None: no pids controller here
    paths: list[str] = field(default_factory=list)  # one directory per hierarchy
    cpu: dict[str, int] = field(default_factory=dict)  # {"shares": 1024} (v1) or {"weight": 100} (v2); empty: no CPU controller
    usage_file: str | None = None  # where its CPU time is counted (v1 cpuacct.usage, v2 cpu.stat)

    def remove(self) -> bool:
        kill(self.paths)
        return remove(self.paths)

    def cpu_seconds(self) -> float | None:
        """CPU time used by every process that was ever in it (None: not counted here)."""
        if self.usage_file is None:
            return None
        try:
            text = _read(self.usage_file)
        except OSError:
            return None
        if self.usage_file.endswith("cpuacct.usage"):
            return int(text) / 1e9
        for line in text.splitlines():
            if line.startswith("usage_usec "):
                return int(line.split()[1]) / 1e6
        return None


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, filesystem type, options) of every cgroup filesystem."""
    found = []
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
                    found.append((parts[1].replace("\\040", " "), parts[2], set(parts[3].split(","))))
    except OSError:
        pass
    return found


def _own() -> dict[str, str]:
    """This process's cgroup per v1 controller ('memory', 'pids') and for v2 (key '')."""
    own = {}
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _id, controllers, path = line.rstrip("\n").split(":", 2)
                for controller in controllers.split(",") if controllers else [""]:
                    own[controller] = path
    except (OSError, ValueError):
        pass
    return own


def create(name: str, memory_mb: int, pids: int) -> Cgroup | None:
    """Make a cgroup for one grading, or None where this process may not."""
    _sweep_stale()
    mounts, own = _mounts(), _own()
    return _create_v1(name, memory_mb, pids, mounts, own) or _create_v2(name, memory_mb, pids, mounts, own)


def _create_v1(name: str, memory_mb: int, pids: int, mounts: list[tuple[str, str, set[str]]], own: dict[str, str]) -> Cgroup | None:
    made: dict[str, str] = {}
    for controller in ("memory", "pids", "cpu", "cpuacct"):
        point = next((m for m, kind, opts in mounts if kind == "cgroup" and controller in opts), None)
        if point is None:
            continue
        # Below the judge's own cgroup, so that whatever limits the judge also limits the submission.
        path = os.path.join(point + own.get(controller, "/"), name)
        if path not in made.values():  # cpu and cpuacct are often one hierarchy
            try:
                os.mkdir(path, 0o755)
            except OSError:
                continue
        made[controller] = path
    if "memory" not in made and "pids" not in made:
        remove(list(dict.fromkeys(made.values())))
        return None
    cpu: dict[str, int] = {}
    try:
        if "memory" in made:
            _write(os.path.join(made["memory"], "memory.limit_in_bytes"), str(memory_mb << 20))
            swap = os.path.join(made["memory"], "memory.memsw.limit_in_bytes")
            if os.path.exists(swap):  # no escaping the cap into swap
                _write(swap, str(memory_mb << 20))
        if "pids" in made:
            _write(os.path.join(made["pids"], "pids.max"), str(pids))
        if "cpu" in made:
            _write(os.path.join(made["cpu"], "cpu.shares"), str(CPU_SHARES))
            cpu = {"shares": CPU_SHARES}
    except OSError:
        remove(list(dict.fromkeys(made.values())))
        return None
    usage = os.path.join(made["cpuacct"], "cpuacct.usage") if "cpuacct" in made else None
    return Cgroup(
        "v1", memory_mb if "memory" in made else None, pids if "pids" in made else None, list(dict.fromkeys(made.values())), cpu, usage
    )


def _create_v2(name: str, memory_mb: int, pids: int, mounts: list[tuple[str, str, set[str]]], own: dict[str, str]) -> Cgroup | None:
    point = next((m for m, kind, _ in mounts if kind == "cgroup2"), None)
    if point is None:
        return None
    mine = os.path.normpath(point + own.get("", "/"))
    # A process may not sit in a cgroup whose controllers are handed to children, so the
    # judge's own cgroup serves only if it is the root; otherwise its parent, or the
    # directory the instructor delegated.
    candidates = [os.environ[ROOT_VAR]] if os.environ.get(ROOT_VAR) else []
    candidates += [os.path.dirname(mine)] if mine != os.path.normpath(point) else [mine]
    for parent in candidates:
        path = os.path.join(parent, name)
        try:
            os.mkdir(path, 0o755)
        except OSError:
            continue
        try:
            if not {"memory", "pids"} <= set(_read(os.path.join(path, "cgroup.controllers")).split()):
                _write(os.path.join(parent, "cgroup.subtree_control"), "+memory +pids")
            _write(os.path.join(path, "memory.max"), str(memory_mb << 20))
            if os.path.exists(os.path.join(path, "memory.swap.max")):
                _write(os.path.join(path, "memory.swap.max"), "0")
            _write(os.path.join(path, "pids.max"), str(pids))
        except OSError:
            remove([path])
            continue
        return Cgroup("v2", memory_mb, pids, [path], _v2_cpu(parent, path), os.path.join(path, "cpu.stat"))
    return None


def _v2_cpu(parent: str, path: str) -> dict[str, int]:
    """An equal cpu.weight where the cpu controller can be had (cpu.stat counts CPU time without it)."""
    try:
        if "cpu" not in _read(os.path.join(path, "cgroup.controllers")).split():
            _write(os.path.join(parent, "cgroup.subtree_control"), "+cpu")
        _write(os.path.join(path, "cpu.weight"), str(CPU_WEIGHT))
    except OSError:
        return {}
    return {"weight": CPU_WEIGHT}


def kill(paths: list[str], rounds: int = 200) -> None:
    """SIGKILL every process in these cgroups until none is left (or `rounds` passes)."""
    for _round in range(rounds):
        pids = set()
        for path in paths:
            kill_file = os.path.join(path, "cgroup.kill")
            if os.path.exists(kill_file):  # v2, Linux 5.14+: the kernel does it at once
                try:
                    _write(kill_file, "1")
                except OSError:
                    pass
            try:
                pids |= {int(p) for p in _read(os.path.join(path, "cgroup.procs")).split()}
            except (OSError, ValueError):
                continue
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.005)


def remove(paths: list[str], timeout: float = 10.0) -> bool:
    """Remove these cgroup directories; a moment's wait while killed processes finish exiting
    (a killed tree may take seconds to exit on a busy machine; 10 s bounds the wait, where 2 s
    could leave the cgroup behind its grading)."""
    deadline = time.monotonic() + timeout
    left = [p for p in paths if os.path.isdir(p)]
    while left:
        for path in list(left):
            try:
                os.rmdir(path)
                left.remove(path)
            except FileNotFoundError:
                left.remove(path)
            except OSError as error:
                if error.errno != errno.EBUSY:
                    left.remove(path)
        if left:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
    return True


def _parents() -> set[str]:
    """Where this process would make its gradings' cgroups."""
    mounts, own = _mounts(), _own()
    parents = set()
    for point, kind, opts in mounts:
        controller = next((c for c in ("memory", "pids", "cpu", "cpuacct") if c in opts), None)
        if kind == "cgroup" and controller is not None:
            parents.add(os.path.normpath(point + own.get(controller, "/")))
        elif kind == "cgroup2":
            mine = os.path.normpath(point + own.get("", "/"))
            parents.add(mine if mine == os.path.normpath(point) else os.path.dirname(mine))
    if os.environ.get(ROOT_VAR):
        parents.add(os.environ[ROOT_VAR])
    return parents


def existing(judge_pid: int | None = None) -> list[str]:
    """The gradings' cgroups that exist now (those of one judge, if given), where this process makes them."""
    prefix = f"{PREFIX}{judge_pid}-" if judge_pid is not None else PREFIX
    found = []
    for parent in _parents():
        try:
            found += [os.path.join(parent, e) for e in os.listdir(parent) if e.startswith(prefix)]
        except OSError:
            continue
    return sorted(found)


def _sweep_stale() -> None:
    """Remove empty cgroups left by gradings whose judge and keeper both died (named by the judge's pid)."""
    for path in existing():
        owner = os.path.basename(path)[len(PREFIX) :].split("-", 1)[0]
        if owner.isdigit() and not alive(int(owner)):
            try:
                os.rmdir(path)  # refused while it holds a process: left alone
            except OSError:
                pass


def alive(pid: int) -> bool:
    """Whether a process with this pid exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
