"""What confined a submission, as GradeResult.isolation records it, and what this machine offers.

`report()` builds the dict the JSON and the scorecards show (keys fixed: namespaces, uid,
cgroup, limits, landlock, devices, summary).  `probe()` says what a sandbox started now would
get; tests use it to skip, with the reason, what a kernel cannot show.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

NAMESPACES_SWITCH = "PA_GRADER_NAMESPACES"  # "0" in the judge's environment: no namespaces (Landlock and rlimits only)
USER_NAMESPACE_SWITCH = "PA_GRADER_USER_NAMESPACE"  # "0": as root, the other namespaces without a user namespace
CGROUP_SWITCH = "PA_GRADER_CGROUPS"  # "0": no cgroup (rlimits only)
LANDLOCK_SWITCH = "PA_GRADER_LANDLOCK"  # "0": no Landlock
SECCOMP_SWITCH = "PA_GRADER_SECCOMP"  # "0": no seccomp filter
ALL_NAMESPACES = ["user", "pid", "ipc", "net", "mount", "uts", "cgroup"]


def switched_on(name: str) -> bool:
    return os.environ.get(name, "1") != "0"


def report(
    *,
    namespaces: list[str],
    uid: int | None,
    cgroup: Any,
    rlimits: dict[str, int | None],
    landlock: int,
    devices: list[str],
    seccomp: int = 0,
    keyring: bool = False,
    proc: str = "host",
    sys: str = "host",
    readonly: bool = False,
    disk: dict[str, int] | None = None,
    wall_backstop: float | None = None,
) -> dict[str, Any]:
    """The isolation dict.  `cgroup` is a cgroups.Cgroup or None; `rlimits` what the zygote set.

    `seccomp`: how many system calls the filter denies (0: no filter); `keyring`: a session
    keyring of its own; `proc`: "masked" (its own, the machine-wide entries covered), "own",
    "narrowed" (the host's, Landlock keeps other processes out) or "host"; `sys`: "cpus"
    (the CPU lists only) or "host"; `readonly`: the machine's files are mounted read-only in its
    mount namespace (no write, no access time); `disk`: the work folder's tmpfs caps, None without one;
    `wall_backstop`: the limits count CPU time, and this many times them in wall-clock time.
    """
    limits = {
        "memory_mb": cgroup.memory_mb if cgroup is not None else None,
        "pids": (cgroup.pids if cgroup is not None else None) or rlimits.get("nproc"),
        "nofile": rlimits.get("nofile"),
        "fsize_mb": rlimits.get("file_mb"),
        "address_space_mb": rlimits.get("memory_mb"),
        "disk_mb": (disk or {}).get("disk_mb"),
        "inodes": (disk or {}).get("inodes"),
    }
    result = {
        "namespaces": [n for n in ALL_NAMESPACES if n in namespaces],
        "uid": uid,
        "cgroup": cgroup.version if cgroup is not None else None,
        "cpu": dict(cgroup.cpu) if cgroup is not None and getattr(cgroup, "cpu", None) else None,
        "limits": limits,
        "clock": {"counts": "cpu", "wall_backstop": wall_backstop} if wall_backstop else None,
        "landlock": landlock,
        "seccomp": seccomp,
        "keyring": keyring,
        "proc": proc,
        "sys": sys,
        "readonly": readonly,
        "devices": list(devices),
    }
    result["summary"] = summary(result)
    return result


def summary(iso: dict[str, Any]) -> dict[str, str]:
    """One line per language, e.g. "namespaces user+pid+ipc+net+mount+uts+cgroup, uid 1200000042, cgroup v1 (...)"."""
    limits = iso["limits"]
    names = "+".join(iso["namespaces"])
    zh = [f"命名空间 {names}" if names else "无命名空间"]
    en = [f"namespaces {names}" if names else "no namespaces"]
    if iso["uid"] is not None:
        zh.append(f"uid {iso['uid']}")
        en.append(f"uid {iso['uid']}")
    whole_zh, whole_en = [], []
    if limits["memory_mb"]:
        whole_zh.append(f"内存 {limits['memory_mb']} MiB")
        whole_en.append(f"memory {limits['memory_mb']} MiB")
    if limits["pids"]:
        whole_zh.append(f"{limits['pids']} 个进程")
        whole_en.append(f"{limits['pids']} processes")
    cpu = iso.get("cpu") or {}
    if cpu:
        share = next(iter(cpu.values()))
        whole_zh.append(f"CPU 份额 {share}（每个评分相同）")
        whole_en.append(f"CPU share {share}, the same for every grading")
    if iso["cgroup"]:
        zh.append(f"cgroup {iso['cgroup']}（{'，'.join(whole_zh)}）")
        en.append(f"cgroup {iso['cgroup']} ({', '.join(whole_en)})")
    else:
        zh.append("无 cgroup（内存按进程限制，无 CPU 份额）")
        en.append("no cgroup (memory capped per process, no CPU share)")
    each_zh, each_en = [], []
    if limits["address_space_mb"]:
        each_zh.append(f"每个进程地址空间 {limits['address_space_mb']} MiB")
        each_en.append(f"address space {limits['address_space_mb']} MiB per process")
    if not iso["cgroup"] and limits["pids"]:
        each_zh.append(f"{limits['pids']} 个进程")
        each_en.append(f"{limits['pids']} processes")
    if limits["nofile"]:
        each_zh.append(f"{limits['nofile']} 个打开的文件")
        each_en.append(f"{limits['nofile']} open files")
    if limits["fsize_mb"]:
        each_zh.append(f"单个文件 {limits['fsize_mb']} MiB")
        each_en.append(f"{limits['fsize_mb']} MiB per file")
    if each_en:
        zh.append(f"rlimit（{'，'.join(each_zh)}）")
        en.append(f"rlimits ({', '.join(each_en)})")
    if limits.get("disk_mb"):
        zh.append(f"磁盘 tmpfs {limits['disk_mb']} MiB、{limits['inodes']} 个文件")
        en.append(f"disk: a tmpfs of {limits['disk_mb']} MiB and {limits['inodes']} files")
    else:
        zh.append("磁盘总量不限（只限单个文件）")
        en.append("disk total not capped (per file only)")
    proc_zh = {"masked": "/proc 只见自己，全机计数已遮蔽", "own": "/proc 只见自己", "narrowed": "/proc 由 Landlock 收窄", "host": "/proc 为主机的"}
    proc_en = {"masked": "/proc its own, machine-wide counters masked", "own": "/proc its own", "narrowed": "/proc narrowed by Landlock", "host": "the host's /proc"}
    zh.append(proc_zh.get(iso.get("proc", "host"), proc_zh["host"]))
    en.append(proc_en.get(iso.get("proc", "host"), proc_en["host"]))
    zh.append("/sys 仅 CPU 列表" if iso.get("sys") == "cpus" else "/sys 为主机的")
    en.append("/sys: CPU lists only" if iso.get("sys") == "cpus" else "the host's /sys")
    if iso.get("readonly"):
        zh.append("本机文件只读（不留访问时间）")
        en.append("the machine's files read-only (no access times)")
    if iso.get("seccomp"):
        zh.append(f"seccomp（禁止 {iso['seccomp']} 个系统调用）")
        en.append(f"seccomp ({iso['seccomp']} system calls denied)")
    else:
        zh.append("无 seccomp")
        en.append("no seccomp")
    if iso.get("keyring"):
        zh.append("独立的密钥环")
        en.append("a keyring of its own")
    zh.append(f"Landlock ABI {iso['landlock']}" if iso["landlock"] else "无 Landlock")
    en.append(f"Landlock ABI {iso['landlock']}" if iso["landlock"] else "no Landlock")
    clock = iso.get("clock") or {}
    if clock.get("wall_backstop"):
        zh.append(f"时限按 CPU 时间计（墙钟上限 ×{clock['wall_backstop']:g}）")
        en.append(f"time limits in CPU time (wall clock ×{clock['wall_backstop']:g})")
    return {"zh": "，".join(zh), "en": ", ".join(en)}


def landlock_abi() -> int:
    """The Landlock ABI this kernel offers (0 when it has none)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        abi = libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
        return int(abi) if abi > 0 else 0
    except (OSError, AttributeError):
        return 0


_PROBE = """
import importlib.util, json, os, sys
def load(path):
    spec = importlib.util.spec_from_file_location("probe_" + os.path.basename(path)[:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
ns, seccomp = load(sys.argv[1]), load(sys.argv[2])
names = ns.names(ns.unshare_what_we_can(os.geteuid() == 0, sys.argv[3] != "0"))
try:
    denied = seccomp.install() if sys.argv[4] != "0" else 0
except (OSError, ValueError):
    denied = 0
print(json.dumps({"namespaces": names, "seccomp": denied}))
"""


@functools.cache
def mseal_available() -> bool:
    """Whether this kernel seals mappings (mseal, Linux 6.10+): the worker seals its mappings of the
    judge's shared files, so that no call can map other memory over them (answers.seal)."""
    import ctypes
    import mmap

    page = mmap.mmap(-1, mmap.PAGESIZE)
    try:
        view = (ctypes.c_char * mmap.PAGESIZE).from_buffer(page)
        syscall = ctypes.CDLL(None, use_errno=True).syscall
        syscall.restype = ctypes.c_long
        sealed = syscall(462, ctypes.c_void_p(ctypes.addressof(view)), ctypes.c_size_t(mmap.PAGESIZE), ctypes.c_ulong(0)) == 0
        del view
        return sealed
    finally:
        page.close()  # a sealed page stays mapped until the process ends: one page


def probe() -> dict[str, Any]:
    """What a sandbox started now would get here: {"root", "namespaces", "cgroup", "cpu", "landlock", "seccomp"}."""
    from grader.sandbox import cgroups

    found: dict[str, Any] = {"namespaces": [], "seccomp": 0}
    try:
        here = Path(__file__).parent
        out = subprocess.run(
            [
                sys.executable,
                "-S",
                "-c",
                _PROBE,
                str(here / "namespaces.py"),
                str(here / "seccomp.py"),
                os.environ.get(USER_NAMESPACE_SWITCH, "1") if switched_on(NAMESPACES_SWITCH) else "0",
                "1" if switched_on(SECCOMP_SWITCH) else "0",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        found = json.loads(out) if out.strip() else found
    except (OSError, subprocess.SubprocessError, ValueError):
        pass
    if not switched_on(NAMESPACES_SWITCH):
        found["namespaces"] = []
    cgroup, cpu = None, {}
    if switched_on(CGROUP_SWITCH):
        made = cgroups.create(f"{cgroups.PREFIX}{os.getpid()}-probe", 64, 16)
        if made is not None:
            cgroup, cpu = made.version, dict(made.cpu)
            made.remove()
    return {
        "root": os.geteuid() == 0,
        "namespaces": list(found.get("namespaces") or []),
        "cgroup": cgroup,
        "cpu": cpu,
        "landlock": landlock_abi() if switched_on(LANDLOCK_SWITCH) else 0,
        "seccomp": int(found.get("seccomp") or 0),
    }
