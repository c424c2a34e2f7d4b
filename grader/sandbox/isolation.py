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
USER_NAMESPACE_SWITCH = "PA_GRADER_USER_NAMESPACE"  # "0": as root, PID/IPC/net/mount namespaces without a user namespace
CGROUP_SWITCH = "PA_GRADER_CGROUPS"  # "0": no cgroup (rlimits only)
LANDLOCK_SWITCH = "PA_GRADER_LANDLOCK"  # "0": no Landlock
ALL_NAMESPACES = ["user", "pid", "ipc", "net", "mount"]


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
) -> dict[str, Any]:
    """The isolation dict.  `cgroup` is a cgroups.Cgroup or None; `rlimits` what the zygote set."""
    limits = {
        "memory_mb": cgroup.memory_mb if cgroup is not None else None,
        "pids": (cgroup.pids if cgroup is not None else None) or rlimits.get("nproc"),
        "nofile": rlimits.get("nofile"),
        "fsize_mb": rlimits.get("file_mb"),
        "address_space_mb": rlimits.get("memory_mb"),
    }
    result = {
        "namespaces": [n for n in ALL_NAMESPACES if n in namespaces],
        "uid": uid,
        "cgroup": cgroup.version if cgroup is not None else None,
        "limits": limits,
        "landlock": landlock,
        "devices": list(devices),
    }
    result["summary"] = summary(result)
    return result


def summary(iso: dict[str, Any]) -> dict[str, str]:
    """One line per language, e.g. "namespaces user+pid+ipc+net+mount, uid 1200000042, cgroup v1 (...)"."""
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
    if iso["cgroup"]:
        zh.append(f"cgroup {iso['cgroup']}（{'，'.join(whole_zh)}）")
        en.append(f"cgroup {iso['cgroup']} ({', '.join(whole_en)})")
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
    zh.append(f"Landlock ABI {iso['landlock']}" if iso["landlock"] else "无 Landlock")
    en.append(f"Landlock ABI {iso['landlock']}" if iso["landlock"] else "no Landlock")
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
spec = importlib.util.spec_from_file_location("probe_namespaces", sys.argv[1])
ns = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ns)
print(json.dumps(ns.names(ns.unshare_what_we_can(os.geteuid() == 0, sys.argv[2] != "0"))))
"""


@functools.cache
def probe() -> dict[str, Any]:
    """What a sandbox started now would get here: {"root", "namespaces", "cgroup", "landlock"}."""
    from grader.sandbox import cgroups

    namespaces: list[str] = []
    if switched_on(NAMESPACES_SWITCH):
        try:
            out = subprocess.run(
                [sys.executable, "-S", "-c", _PROBE, str(Path(__file__).with_name("namespaces.py")), os.environ.get(USER_NAMESPACE_SWITCH, "1")],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout
            namespaces = json.loads(out) if out.strip() else []
        except (OSError, subprocess.SubprocessError, ValueError):
            namespaces = []
    cgroup = None
    if switched_on(CGROUP_SWITCH):
        made = cgroups.create(f"{cgroups.PREFIX}{os.getpid()}-probe", 64, 16)
        if made is not None:
            cgroup = made.version
            made.remove()
    return {
        "root": os.geteuid() == 0,
        "namespaces": namespaces,
        "cgroup": cgroup,
        "landlock": landlock_abi() if switched_on(LANDLOCK_SWITCH) else 0,
    }
