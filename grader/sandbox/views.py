"""What the submission sees of the machine: a masked /proc, a minimal /sys, its own work tmpfs.

Built by the worker's init (spawn.py) in the grading's mount namespace, before any code of
the submission exists; standard library only.  Deny by default, after runc's maskedPaths:

- /proc (the PID namespace's own) keeps the processes' folders and what a Python process
  and torch read: cpuinfo (torch's cpuinfo library crashes without it), version,
  filesystems, crypto, execdomains, sysvipc (the grading's own IPC namespace), and the
  links self, thread-self, mounts and net (its own network namespace).  stat, meminfo,
  loadavg and uptime are replaced by fixed files (the CPUs, the grading's memory cap, no
  load, no idle time); /proc/sys by a read-only copy of a few fixed settings.  Everything else (keys, locks, vmstat, diskstats, pressure, cgroups,
  interrupts, the kernel's symbols and logs, ...) is covered by an empty file or folder:
  those counters move with what other gradings do, and some name them.
- /sys is an empty read-only tmpfs with the CPU list files only (the C library and torch
  count CPUs from them); no cgroup counters, no network interfaces, no boot id.  Under CUDA
  the host's /sys stays (the driver reads the PCI tree), less /sys/fs/cgroup.
- the work folder is a tmpfs of `disk_mb` and `inodes`, its pages charged to the grading's
  memory cgroup; what the judge put there before the worker started is copied in.
"""

from __future__ import annotations

import os
import stat

if __package__:
    from grader.sandbox import namespaces as ns
else:  # in the worker: loaded by path after namespaces.py (spawn.py)
    import _pa_sandbox_namespaces as ns  # type: ignore[import-not-found,no-redef]

PROC_KEPT = frozenset({"self", "thread-self", "mounts", "net", "cpuinfo", "version", "filesystems", "crypto", "execdomains", "sysvipc"})
PROC_SYNTHETIC = ("stat", "meminfo", "loadavg", "uptime")
SYSCTL_KEPT = (  # fixed settings the C library and Python may read; nothing that counts anything
    "kernel/ngroups_max",
    "kernel/osrelease",
    "kernel/ostype",
    "kernel/pid_max",
    "kernel/overflowuid",
    "kernel/overflowgid",
    "kernel/cap_last_cap",
    "kernel/hostname",
    "kernel/domainname",
    "vm/overcommit_memory",
    "vm/max_map_count",
    "fs/nr_open",
    "fs/pipe-max-size",
)
CPU_FILES = ("online", "possible", "present", "kernel_max")
HOST_IDS = ("/etc/machine-id", "/var/lib/dbus/machine-id")  # the machine's identity, as the boot id is
STAGE = "/dev/.pa-stage"  # a tmpfs for the replacement files while they are bound; detached after


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _write(path: str, text: str, mode: int = 0o444) -> None:
    os.makedirs(os.path.dirname(path), mode=0o555, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _cpus() -> list[int]:
    text = (_read("/sys/devices/system/cpu/online") or "").strip()
    found: list[int] = []
    for part in text.split(","):
        if "-" in part:
            low, high = part.split("-", 1)
            found += range(int(low), int(high) + 1)
        elif part.strip().isdigit():
            found.append(int(part))
    return found or [0]


def synthetic(memory_mb: int | None, cpus: list[int], btime: int, uptime: float = 0.0) -> dict[str, str]:
    """The fixed stat, meminfo, loadavg and uptime a submission reads instead of the machine's
    (uptime's second number, the machine's idle time, moves with every other process's load)."""
    zeros = " 0" * 10
    stat_text = f"cpu {zeros}\n" + "".join(f"cpu{n}{zeros}\n" for n in cpus)
    stat_text += f"intr 0\nctxt 0\nbtime {btime}\nprocesses 0\nprocs_running 1\nprocs_blocked 0\nsoftirq 0\n"
    total = (memory_mb << 10) if memory_mb else _host_memory_kb()
    meminfo = "".join(
        f"{name + ':':<16}{value:>8} kB\n"
        for name, value in (("MemTotal", total), ("MemFree", total), ("MemAvailable", total), ("Buffers", 0), ("Cached", 0), ("SwapCached", 0), ("SwapTotal", 0), ("SwapFree", 0), ("Shmem", 0))
    )
    return {"stat": stat_text, "meminfo": meminfo, "loadavg": "0.00 0.00 0.00 1/1 1\n", "uptime": f"{uptime:.2f} 0.00\n"}


def _host_memory_kb() -> int:
    for line in (_read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1])
    return 0


def _btime() -> int:
    for line in (_read("/proc/stat") or "").splitlines():
        if line.startswith("btime "):
            return int(line.split()[1])
    return 0


def mask_proc(memory_mb: int | None, cuda: bool = False) -> list[str]:
    """Cover /proc's machine-wide entries (init, on the PID namespace's own /proc).  Returns them.

    Under CUDA /proc/driver stays: the NVIDIA driver's library reads its parameters there."""
    cpus, btime = _cpus(), _btime()
    sysctls = {name: _read(f"/proc/sys/{name}") for name in SYSCTL_KEPT}
    sysctls["kernel/hostname"] = ns.HOSTNAME + "\n"
    os.mkdir(STAGE, 0o700)
    ns.mount("tmpfs", STAGE, "tmpfs", ns.TMPFS_FLAGS | ns.MS_NOEXEC, "mode=555,size=1m,nr_inodes=64")
    try:
        uptime = float((_read("/proc/uptime") or "0").split()[0])
        for name, text in synthetic(memory_mb, cpus, btime, uptime).items():
            _write(f"{STAGE}/{name}", text)
        _write(f"{STAGE}/empty", "")
        os.mkdir(f"{STAGE}/none", 0o555)
        ns.mount(None, STAGE, None, ns.MS_REMOUNT | ns.TMPFS_FLAGS | ns.MS_NOEXEC | ns.MS_RDONLY)
        masked = _mask_proc(PROC_KEPT | ({"driver"} if cuda else set()))
        for path in HOST_IDS:
            if os.path.isfile(path) and not os.path.islink(path):
                ns.mount(f"{STAGE}/empty", path, None, ns.MS_BIND)
                masked.append(path)
    finally:
        ns.umount(STAGE, ns.MNT_DETACH)  # the bound files live on; the folder goes
        os.rmdir(STAGE)
    _tmpfs_with("/proc/sys", {name: text for name, text in sysctls.items() if text is not None})
    return masked


def cover_files(paths: list[str]) -> list[str]:
    """Bind an empty file that nobody may open over each of `paths` that is a file here (the term
    secret's): in this mount namespace the path leads nowhere.  Returns the paths covered."""
    present = [p for p in paths if os.path.isfile(p) and not os.path.islink(p)]
    if not present:
        return []
    stage = STAGE + "-cover"
    os.mkdir(stage, 0o700)
    ns.mount("tmpfs", stage, "tmpfs", ns.TMPFS_FLAGS | ns.MS_NOEXEC, "mode=555,size=4k,nr_inodes=4")
    try:
        _write(f"{stage}/none", "", 0o000)
        ns.mount(None, stage, None, ns.MS_REMOUNT | ns.TMPFS_FLAGS | ns.MS_NOEXEC | ns.MS_RDONLY)
        for path in present:
            ns.mount(f"{stage}/none", path, None, ns.MS_BIND)
    finally:
        ns.umount(stage, ns.MNT_DETACH)
        os.rmdir(stage)
    return present


def replace_sys(cuda: bool) -> str:
    """/sys as the submission sees it: "cpus" (the CPU lists only) or, under CUDA, "host" less the cgroups."""
    if cuda:
        ns.mount("tmpfs", "/sys/fs/cgroup", "tmpfs", ns.TMPFS_FLAGS | ns.MS_NOEXEC | ns.MS_RDONLY, "mode=555,size=4k,nr_inodes=4")
        return "host"
    cpu_files = {name: _read(f"/sys/devices/system/cpu/{name}") for name in CPU_FILES}
    _tmpfs_with("/sys", {f"devices/system/cpu/{name}": text for name, text in cpu_files.items() if text is not None})
    return "cpus"


def _mask_proc(kept: frozenset[str] | set[str]) -> list[str]:
    """Cover every top-level entry of /proc but the kept ones; returns what was covered."""
    masked = []
    for name in sorted(os.listdir("/proc")):
        if name.isdigit() or name in kept:
            continue
        path = f"/proc/{name}"
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue
        if stat.S_ISLNK(mode):
            continue  # a mount would follow it; the kept links are all the links /proc has
        source = f"{STAGE}/{name}" if name in PROC_SYNTHETIC else f"{STAGE}/none" if stat.S_ISDIR(mode) else f"{STAGE}/empty"
        ns.mount(source, path, None, ns.MS_BIND)
        masked.append(name)
    return masked


def _tmpfs_with(target: str, files: dict[str, str]) -> None:
    """A read-only tmpfs over `target` holding just `files` (relative paths and contents)."""
    ns.mount("tmpfs", target, "tmpfs", ns.TMPFS_FLAGS | ns.MS_NOEXEC, "mode=555,size=1m,nr_inodes=256")
    for name, text in files.items():
        _write(os.path.join(target, name), text)
    ns.mount(None, target, None, ns.MS_REMOUNT | ns.TMPFS_FLAGS | ns.MS_NOEXEC | ns.MS_RDONLY)


def private_work(workdir: str, size_mb: int, inodes: int, owner: tuple[int, int] | None) -> dict[str, int]:
    """Put a tmpfs of `size_mb` and `inodes` over `workdir`, with what the folder held copied in.

    `owner`: the ids the files get (the submission's, where it has no user namespace to be
    root in); None: this process's.  Copies regular files and folders, never a link or a
    device; what does not fit is left out (the judge's copy is capped anyway).  Returns the
    size and inode limits in force.  The caller moves into the new folder (cwd).
    """
    source = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        options = f"mode=700,size={size_mb}m,nr_inodes={inodes}"
        if owner is not None:
            options += f",uid={owner[0]},gid={owner[1]}"
        ns.mount("tmpfs", workdir, "tmpfs", ns.TMPFS_FLAGS, options)
        target = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            _copy_tree(source, target, owner, depth=0)
        finally:
            os.close(target)
    finally:
        os.close(source)
    return {"disk_mb": size_mb, "inodes": inodes}


def _copy_tree(source: int, target: int, owner: tuple[int, int] | None, depth: int) -> None:
    if depth > 32:
        return
    for entry in os.scandir(source):
        try:
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                os.mkdir(entry.name, 0o700, dir_fd=target)
                inner_source = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=source)
                inner_target = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=target)
                try:
                    if owner is not None:
                        os.fchown(inner_target, *owner)
                    _copy_tree(inner_source, inner_target, owner, depth + 1)
                finally:
                    os.close(inner_source)
                    os.close(inner_target)
            elif stat.S_ISREG(info.st_mode):
                _copy_file(source, target, entry.name, info.st_mode & 0o700 | 0o600, owner)
        except OSError:
            continue  # full, or gone: the rest still comes


def _copy_file(source: int, target: int, name: str, mode: int, owner: tuple[int, int] | None) -> None:
    src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=source)
    try:
        dst = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=target)
        try:
            if owner is not None:
                os.fchown(dst, *owner)
            while chunk := os.read(src, 1 << 20):
                while chunk:
                    chunk = chunk[os.write(dst, chunk) :]
        except OSError:
            os.unlink(name, dir_fd=target)  # no half file: it did not fit
            raise
        finally:
            os.close(dst)
    finally:
        os.close(src)
