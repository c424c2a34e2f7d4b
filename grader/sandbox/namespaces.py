"""Linux namespaces for a submission: unshare, map its ids, build a private /dev, /proc and /tmp.

Standard library only, and no import of the grader: the worker loads this file by path
(spawn.py) before it imports torch, because unshare(CLONE_NEWUSER) refuses a process that
has more than one thread.  A process that already imported torch can still use all of it in
a child it forks (the child has one thread).

What the submission gets where the kernel allows it (no root needed: an unprivileged user
namespace is enough):

- user: inside, the submission is uid 0 with no capabilities; outside it is the uid the
  judge chose (a fresh uid per grading when the judge runs as root, else the judge's own);
- pid, with a /proc of its own: it sees only its own processes, and when the namespace's
  first process (init, in spawn.py) dies the kernel kills every other one;
- ipc: SysV and POSIX IPC objects live and die with the grading;
- net: no interface but a loopback that is down (no UDP, no TCP, no abstract Unix sockets
  reaching anything outside);
- mount: every file of the machine read-only (no write, and no access time a read would
  leave for another grading to see); /dev holds only null, zero, full, random, urandom (and
  the NVIDIA nodes when grading on CUDA), a small private /dev/shm and no /dev/pts; /tmp,
  /var/tmp, /run and the folder of the judge's private directory are empty tmpfs (other
  gradings' sockets and files are not there), with the judge's private directory bound back
  at its own path, writable.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import stat

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
ISOLATING = CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWPID | CLONE_NEWNET  # root may have these without a user namespace
VIEWS = CLONE_NEWCGROUP | CLONE_NEWUTS  # what the submission sees of its cgroup and of the host's name (Linux 4.6+)
NAMES = (
    (CLONE_NEWUSER, "user"),
    (CLONE_NEWPID, "pid"),
    (CLONE_NEWIPC, "ipc"),
    (CLONE_NEWNET, "net"),
    (CLONE_NEWNS, "mount"),
    (CLONE_NEWUTS, "uts"),
    (CLONE_NEWCGROUP, "cgroup"),
)
HOSTNAME = "sandbox"

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME, MS_STRICTATIME = 1024, 2048, 1 << 21, 1 << 24
MNT_DETACH = 2
SYS_MOUNT_SETATTR, AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = 442, -100, 0x8000, 0x1  # Linux 5.12, every architecture
# A mount's options as mountinfo shows them, and the flags a remount must repeat: in a user
# namespace the kernel locks them as they were (only read-only may be added).
KEPT_OPTIONS = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
                "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME, "strictatime": MS_STRICTATIME}

DEVICES = ("null", "zero", "full", "random", "urandom")
HIDDEN = ("/tmp", "/var/tmp", "/run")  # where other gradings' sockets and files, and the host's daemons' sockets, live
TMPFS_FLAGS = MS_NOSUID | MS_NODEV
SMALL_INODES = 1024  # files in each of /tmp, /var/tmp, /run, /dev/shm (the work folder has its own cap)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.unshare.argtypes = [ctypes.c_int]
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.syscall.restype = ctypes.c_long


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def names(flags: int) -> list[str]:
    return [name for flag, name in NAMES if flags & flag]


def unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


def unshare_what_we_can(root: bool, user: bool = True) -> int:
    """Unshare every namespace the kernel allows this process; returns the flags in force.

    All seven together (user, PID, IPC, network, mount, UTS, cgroup), else (as root, in a
    container that refuses user namespaces, or when `user` is False) all but the user
    namespace, else none: the caller falls back to Landlock and rlimits.  A kernel without
    cgroup namespaces (before 4.6) gets the same without cgroup and UTS.
    """
    user_flags = CLONE_NEWUSER | ISOLATING if user else 0
    root_flags = ISOLATING if root else 0
    for flags in (user_flags | VIEWS if user_flags else 0, user_flags, root_flags | VIEWS if root_flags else 0, root_flags):
        if not flags:
            continue
        try:
            unshare(flags)
            return flags
        except OSError as error:
            if error.errno not in (errno.EPERM, errno.EINVAL, errno.ENOSPC, errno.EACCES, errno.EUSERS, errno.ENOSYS):
                raise
    return 0


def map_ids(pid: int, outside_uid: int, outside_gid: int) -> None:
    """Make `pid` (just unshared into a user namespace) uid and gid 0 inside, the given ids outside.

    Written by the parent, which stays in the outer namespace: only there may root map a uid
    other than its own.  An unprivileged parent may map only itself, and must first give up
    setgroups() in the child (the kernel's rule, so that dropping a group cannot grant access).
    """
    if os.geteuid() != 0:
        _write(f"/proc/{pid}/setgroups", "deny")
    _write(f"/proc/{pid}/uid_map", f"0 {outside_uid} 1")
    _write(f"/proc/{pid}/gid_map", f"0 {outside_gid} 1")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def become(uid: int, gid: int, *, groups: bool) -> None:
    """Take these ids (real, effective, saved), with no supplementary group when allowed."""
    if groups:
        os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)


def _bytes(text: str | None) -> bytes | None:
    return text.encode() if text is not None else None


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(_bytes(source), target.encode(), _bytes(fstype), flags, _bytes(data)), f"mount {target}")


def umount(target: str, flags: int = 0) -> None:
    _check(_libc.umount2(target.encode(), flags), f"umount {target}")


def read_only(path: str, readonly: bool = True, recursive: bool = True) -> None:
    """Make the mount at `path` (and every mount below it) read-only, or writable again.

    Read-only also means no access time: a read of a file every grading can read would
    otherwise change what the next `stat` of it says, for any of them to see.  mount_setattr
    (Linux 5.12) does a whole tree at once; before it, each mount is remounted.
    """
    attr = _MountAttr(MOUNT_ATTR_RDONLY if readonly else 0, 0 if readonly else MOUNT_ATTR_RDONLY, 0, 0)
    flags = AT_RECURSIVE if recursive else 0
    result = _libc.syscall(ctypes.c_long(SYS_MOUNT_SETATTR), ctypes.c_int(AT_FDCWD), path.encode(), ctypes.c_uint(flags), ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)))
    if result == 0:
        return
    code = ctypes.get_errno()
    if code != errno.ENOSYS:
        raise OSError(code, f"mount_setattr {path}: {os.strerror(code)}")
    remount_each(path, readonly, recursive)


def remount_each(path: str, readonly: bool, recursive: bool) -> None:
    """read_only() before Linux 5.12: each mount remounted, repeating the options the kernel locked."""
    for point, options in _mounts_under(path) if recursive else [(path, _options_of(path))]:
        kept = sum(flag for name, flag in KEPT_OPTIONS.items() if name in options)
        mount(None, point, None, MS_REMOUNT | MS_BIND | kept | (MS_RDONLY if readonly else 0))


def _mounts_under(path: str) -> list[tuple[str, set[str]]]:
    """Mount points at or below `path`, with their per-mount options (/proc/self/mountinfo)."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])  # a space comes as \040
            if _under(point, path):
                found.append((point, set(fields[5].split(","))))
    return found


def _options_of(path: str) -> set[str]:
    options: set[str] = set()
    for point, found in _mounts_under(path):
        if point == path:
            options = found  # the last one listed is the one on top
    return options


def set_hostname(name: str) -> None:
    """The UTS namespace's name (the host's stays the host's)."""
    import socket

    socket.sethostname(name)


def bind(fd: int, target: str) -> None:
    """Bind what `fd` (an O_PATH descriptor opened before anything was covered) refers to onto `target`."""
    mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)


def open_path(path: str) -> int:
    return os.open(path, os.O_PATH | os.O_CLOEXEC)


def private_proc() -> bool:
    """A /proc for this PID namespace (called by its first process).  False if the kernel refuses."""
    try:
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        return True
    except OSError:
        return False  # a container's /proc with masked files cannot be mounted again: Landlock narrows it instead


def private_dev(extra: list[str], shm_mb: int) -> list[str]:
    """A tmpfs /dev with the harmless devices bound in, a small /dev/shm, no pts; returns the devices."""
    wanted = [f"/dev/{n}" for n in DEVICES] + list(extra)
    sources = {}
    for path in wanted:
        try:
            sources[path] = open_path(path)
        except OSError:
            continue
    try:
        mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=755,size=1m")
        for path, fd in sources.items():
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                os.makedirs(path, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600))
            bind(fd, path)
    finally:
        for fd in sources.values():
            os.close(fd)
    os.symlink("/proc/self/fd", "/dev/fd")
    for number, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{number}", f"/dev/{name}")
    os.mkdir("/dev/shm")
    mount("tmpfs", "/dev/shm", "tmpfs", TMPFS_FLAGS, f"mode=1777,size={shm_mb}m,nr_inodes={SMALL_INODES}")
    return sorted(sources)


def hide(directory: str, keep: dict[str, int], mode: int, size_mb: int, writable: tuple[str, ...] = ()) -> None:
    """Cover `directory` with an empty tmpfs, then bind back the paths of `keep` found under it.

    `keep` maps a path to an O_PATH descriptor of it, opened before anything was covered (the
    judge's private directory, the Python installation where it lives in a covered folder).
    A path of `writable` (the private directory) is made writable again once bound; the rest
    stay as read-only as everything else of the machine.
    """
    mount("tmpfs", directory, "tmpfs", TMPFS_FLAGS, f"mode={mode:o},size={size_mb}m,nr_inodes={SMALL_INODES}")
    for path, fd in sorted(keep.items()):
        if not _under(path, directory) or any(_under(path, other) and other != path for other in keep if _under(other, directory)):
            continue  # elsewhere, or inside another kept path that brings it along
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            os.makedirs(path, mode=0o755, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600))
        bind(fd, path)
        if path in writable:
            read_only(path, False, recursive=False)


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def blocked_ancestor(path: str, uid: int, gid: int) -> str | None:
    """The first folder on the way to `path` that `uid` may not search (say /root, mode 0700).

    Used when the judge runs as root and the submission gets a fresh uid: the Python
    installation may live in such a folder, and the mount namespace then shows it through.
    """
    current = "/"
    for part in [p for p in path.split("/") if p]:
        current = os.path.join(current, part)
        try:
            info = os.stat(current)
        except OSError:
            return None
        if not stat.S_ISDIR(info.st_mode):
            return None
        if info.st_uid == uid:
            allowed = info.st_mode & stat.S_IXUSR
        elif info.st_gid == gid:
            allowed = info.st_mode & stat.S_IXGRP
        else:
            allowed = info.st_mode & stat.S_IXOTH
        if not allowed:
            return current
    return None


def plan_hidden(private_dir: str, roots: list[str], uid: int | None, gid: int | None) -> tuple[list[str], dict[str, int]]:
    """Which folders to cover, and the paths (with O_PATH descriptors) to show through them.

    Opened now, by the process that can still reach them all, before any uid change.
    """
    parent = os.path.dirname(os.path.realpath(private_dir))
    hidden = [os.path.realpath(d) for d in HIDDEN if os.path.isdir(d) and not os.path.islink(d)]
    if parent != "/" and not any(_under(parent, d) for d in hidden):
        hidden.append(parent)
    kept = [os.path.realpath(private_dir)]
    for root in roots:
        real = os.path.realpath(root)
        if any(_under(real, d) for d in hidden):
            kept.append(real)
        elif uid is not None and gid is not None:
            blocked = blocked_ancestor(real, uid, gid)
            if blocked is not None:
                if blocked not in hidden:
                    hidden.append(blocked)
                kept.append(real)
    hidden = sorted(d for d in set(hidden) if not any(d != o and _under(d, o) for o in hidden))
    keep = {}
    for path in kept:
        try:
            keep[path] = open_path(path)
        except OSError:
            continue
    return hidden, keep
