"""A seccomp filter for the submission: what a notebook never needs fails, and no kernel object
is shared with another sandbox.

Part of the worker (confine.py loads it by path, and tests import it); standard library only.
The filter is a small classic-BPF program of our own, installed with seccomp(2), rather than
libseccomp: the worker imports nothing but the standard library and torch (libseccomp's
Python binding is not on PyPI, and libseccomp.so is not on every machine that grades, e.g. a
slim container), the list is a deny list of some seventy numbers and a few argument tests,
and the two points where a library would help (foreign architectures, the x32 ABI) are two
instructions here.

What it does, in order, for every system call of the zygote and everything it starts:

- a call made with another architecture's convention (int 0x80 on x86-64, whose numbers mean
  other calls) fails with EPERM, as does every x32 call (numbers with bit 30 set);
- the calls in DENIED fail with EPERM: the kernel keyrings, another process's memory
  (ptrace, process_vm_*, pidfd_getfd, process_madvise, kcmp), kernel attack surface a
  notebook has no use for (bpf, perf_event_open, userfaultfd, io_uring), mounts and
  namespaces, modules and kexec, the machine's clock, swap, accounting, quotas, reboot, and
  file watches (inotify: another sandbox's reads of a shared file would show as events);
- those in ABSENT fail with ENOSYS, as on a kernel without them (callers fall back): clone3,
  whose flags sit in memory the filter cannot read (the C library then uses clone, and
  threads and subprocesses work as before), the futex2 calls (their flags are in memory
  too), cachestat and mincore (which pages of a shared file are in the page cache), and
  pidfd_open (a pidfd's inode number counts every process the machine started);
- and, by argument (ARGUMENT_RULES says why, rule by rule): sockets of any family but
  AF_UNIX fail with EAFNOSUPPORT (AF_VSOCK's ports, like netlink's and a few others, are the
  machine's whatever the network namespace); file locks (flock, fcntl F_SETLK, F_SETLKW and
  their OFD forms) succeed without being taken, so that no lock on a file every sandbox can
  read is ever held, while sqlite and torch's file locks still work in one process; leases
  and directory notifications (F_SETLEASE, F_NOTIFY) fail with EPERM; a futex operation
  without FUTEX_PRIVATE_FLAG (keyed by the file when the memory maps one: a library every
  sandbox maps) returns at once, a spurious wake-up that every waiter allows, and the
  priority-inheritance ones fail with ENOSYS; evicting a file's pages from the page cache
  (fadvise DONTNEED, madvise MADV_COLD and MADV_PAGEOUT) does nothing, and asking whether
  they are there (preadv2 RWF_NOWAIT) fails with EOPNOTSUPP; SO_COOKIE and SO_NETNS_COOKIE
  (machine-wide counters) fail with ENOPROTOOPT; clone with a namespace flag or CLONE_PIDFD,
  and personality other than a query, fail with EPERM;
- everything else is allowed.

An errno rather than a kill: the cell gets an ordinary Python error (PermissionError,
OSError) and the grading goes on.  Installed with SECCOMP_FILTER_FLAG_TSYNC, so that a thread
torch started at import is filtered too.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct

# Calls no notebook needs, by name; the numbers per architecture are below.  They fail with EPERM.
DENIED = (
    # the kernel keyrings: another user's secrets, keys planted to outlive the grading
    "keyctl", "add_key", "request_key",
    # other processes' memory and kernel objects
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "process_madvise", "process_mrelease", "kcmp",
    # kernel attack surface
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "lookup_dcookie", "fanotify_init", "fanotify_mark", "open_by_handle_at", "name_to_handle_at",
    # file watches: events from another sandbox's reads of a file both can see
    "inotify_init", "inotify_init1", "inotify_add_watch",
    # mounts and namespaces (the sandbox's own are built before the filter goes on)
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
    "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "open_tree", "open_tree_attr", "mount_setattr",
    "listmount", "statmount",
    # the machine itself
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "reboot", "swapon", "swapoff", "acct", "syslog", "quotactl", "quotactl_fd", "vhangup",
    "settimeofday", "clock_settime", "sethostname", "setdomainname",
    # x86 only: the LDT, I/O ports, vm86
    "modify_ldt", "iopl", "ioperm", "vm86", "vm86old",
    # gone from the kernel; refused whatever a kernel still has
    "uselib", "nfsservctl", "_sysctl", "create_module", "get_kernel_syms", "query_module",
)  # fmt: skip
# Calls that fail with ENOSYS, as on a kernel that lacks them: their callers fall back.
ABSENT = (
    "clone3",  # its flags are in memory the filter cannot read; the C library falls back to clone
    "futex_waitv", "futex_wake", "futex_wait", "futex_requeue",  # futex2: the private flag is in memory too
    "cachestat", "mincore",  # which pages of a (shared) file are in the page cache
    "pidfd_open",  # a pidfd's inode number counts the processes of the whole machine
)  # fmt: skip

# Checked against the kernel's headers by tests/test_deny_by_default.py where they are installed.
# 451 and up are newer than most headers (cachestat 6.5, futex2 6.7, listmount 6.8,
# open_tree_attr 6.15); the number is the same on every architecture since 5.1.
_COMMON = {
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428, "move_mount": 429,
    "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "pidfd_open": 434, "clone3": 435, "pidfd_getfd": 438,
    "process_madvise": 440, "mount_setattr": 442, "quotactl_fd": 443, "process_mrelease": 448, "futex_waitv": 449,
    "cachestat": 451, "futex_wake": 454, "futex_wait": 455, "futex_requeue": 456,
    "statmount": 457, "listmount": 458, "open_tree_attr": 467,
}  # fmt: skip
X86_64 = {
    **_COMMON,
    "keyctl": 250, "add_key": 248, "request_key": 249, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
    "kcmp": 312, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "lookup_dcookie": 212, "fanotify_init": 300,
    "fanotify_mark": 301, "open_by_handle_at": 304, "name_to_handle_at": 303, "mount": 165, "umount2": 166,
    "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308, "kexec_load": 246, "kexec_file_load": 320,
    "init_module": 175, "finit_module": 313, "delete_module": 176, "reboot": 169, "swapon": 167, "swapoff": 168,
    "acct": 163, "syslog": 103, "quotactl": 179, "vhangup": 153, "settimeofday": 164, "clock_settime": 227,
    "sethostname": 170, "setdomainname": 171, "modify_ldt": 154, "iopl": 172, "ioperm": 173, "uselib": 134,
    "nfsservctl": 180, "_sysctl": 156, "create_module": 174, "get_kernel_syms": 177, "query_module": 178,
    "inotify_init": 253, "inotify_init1": 294, "inotify_add_watch": 254, "mincore": 27,
    "clone": 56, "personality": 135, "seccomp": 317, "socket": 41, "socketpair": 53, "flock": 73, "fcntl": 72,
    "futex": 202, "fadvise64": 221, "madvise": 28, "preadv2": 327, "pwritev2": 328, "getsockopt": 55,
}  # fmt: skip
AARCH64 = {  # the generic table (asm-generic/unistd.h)
    **_COMMON,
    "keyctl": 219, "add_key": 217, "request_key": 218, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
    "kcmp": 272, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282, "lookup_dcookie": 18, "fanotify_init": 262,
    "fanotify_mark": 263, "open_by_handle_at": 265, "name_to_handle_at": 264, "mount": 40, "umount2": 39,
    "pivot_root": 41, "chroot": 51, "unshare": 97, "setns": 268, "kexec_load": 104, "kexec_file_load": 294,
    "init_module": 105, "finit_module": 273, "delete_module": 106, "reboot": 142, "swapon": 224, "swapoff": 225,
    "acct": 89, "syslog": 116, "quotactl": 60, "vhangup": 58, "settimeofday": 170, "clock_settime": 112,
    "sethostname": 161, "setdomainname": 162, "nfsservctl": 42,
    "inotify_init1": 26, "inotify_add_watch": 27, "mincore": 232,
    "clone": 220, "personality": 92, "seccomp": 277, "socket": 198, "socketpair": 199, "flock": 32, "fcntl": 25,
    "futex": 98, "fadvise64": 223, "madvise": 233, "preadv2": 286, "pwritev2": 287, "getsockopt": 209,
}  # fmt: skip
AUDIT_ARCH_X86_64, AUDIT_ARCH_AARCH64 = 0xC000003E, 0xC00000B7
ARCHES = {"x86_64": (AUDIT_ARCH_X86_64, X86_64), "aarch64": (AUDIT_ARCH_AARCH64, AARCH64)}
X32_SYSCALL_BIT = 0x40000000

CLONE_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000  # NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
CLONE_PIDFD = 0x00001000
PERSONALITY_QUERY = 0xFFFFFFFF
AF_UNIX = 1
F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW, F_SETLEASE, F_NOTIFY = 6, 7, 37, 38, 1024, 1026
FUTEX_PRIVATE_FLAG, FUTEX_CMD_MASK = 128, 127  # the command is the low 7 bits (FUTEX_CLOCK_REALTIME is 256)
FUTEX_PI = (6, 7, 8, 11, 12, 13)  # LOCK_PI, UNLOCK_PI, TRYLOCK_PI, WAIT_REQUEUE_PI, CMP_REQUEUE_PI, LOCK_PI2
POSIX_FADV_DONTNEED, MADV_COLD, MADV_PAGEOUT, RWF_NOWAIT = 4, 20, 21, 0x8
SOL_SOCKET, SO_COOKIE, SO_NETNS_COOKIE = 1, 57, 71

# Classic BPF, as seccomp reads it (linux/filter.h, linux/seccomp.h).
BPF_LD_W_ABS, BPF_JEQ_K, BPF_JGE_K, BPF_JSET_K, BPF_RET_K, BPF_AND_K = 0x20, 0x15, 0x35, 0x45, 0x06, 0x54
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
OFFSET_NR, OFFSET_ARCH = 0, 4
SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC = 1, 1
PR_SET_NO_NEW_PRIVS = 38

# Where each call goes: the returns at the end of the program.  "noop" is SECCOMP_RET_ERRNO
# with errno 0: the call returns 0 without being run.
RETURNS = {
    "allow": SECCOMP_RET_ALLOW,
    "deny": SECCOMP_RET_ERRNO | errno.EPERM,
    "enosys": SECCOMP_RET_ERRNO | errno.ENOSYS,
    "noop": SECCOMP_RET_ERRNO | 0,
    "eafnosupport": SECCOMP_RET_ERRNO | errno.EAFNOSUPPORT,
    "eopnotsupp": SECCOMP_RET_ERRNO | errno.EOPNOTSUPP,
    "enoprotoopt": SECCOMP_RET_ERRNO | errno.ENOPROTOOPT,
}

# The calls decided by an argument: (call, argument index, [(test, value, where)], otherwise).
# A test is "eq" (the argument's low 32 bits equal value) or "set" (any bit of value set);
# "and" masks the argument for the tests after it.  The rules, and why (docs/trust.md,
# "Kernel objects shared between sandboxes"):
ARGUMENT_RULES = (
    # AF_UNIX alone: the empty network namespace needs nothing else, and AF_VSOCK's ports (like
    # a few other families') belong to the machine whatever the namespace.
    ("socket", 0, [("eq", AF_UNIX, "allow")], "eafnosupport"),
    ("socketpair", 0, [("eq", AF_UNIX, "allow")], "eafnosupport"),
    # A lock taken on a file every sandbox can read is seen by all of them: taking one does
    # nothing and says it worked (one process's sqlite and torch's file locks work; no process
    # waits, none sees another's).  F_GETLK runs: no sandbox holds a lock, so it says so.
    ("fcntl", 1, [("eq", F_SETLK, "noop"), ("eq", F_SETLKW, "noop"), ("eq", F_OFD_SETLK, "noop"),
                  ("eq", F_OFD_SETLKW, "noop"), ("eq", F_SETLEASE, "deny"), ("eq", F_NOTIFY, "deny")], "allow"),
    # A shared futex on a file mapping is keyed by the file: a wait in one sandbox would be
    # woken by another's wake.  Private ones (every thread lock) run; a shared wait returns at
    # once (a spurious wake-up: the caller checks its word and waits again).
    ("futex", 1, [("set", FUTEX_PRIVATE_FLAG, "allow"), ("and", FUTEX_CMD_MASK, ""),
                  *[("eq", command, "enosys") for command in FUTEX_PI]], "noop"),
    # The page cache is the machine's: another sandbox's pages are not evicted on request, and
    # whether a page is cached is not asked without reading it.
    ("fadvise64", 3, [("eq", POSIX_FADV_DONTNEED, "noop")], "allow"),
    ("madvise", 2, [("eq", MADV_COLD, "noop"), ("eq", MADV_PAGEOUT, "noop")], "allow"),
    ("preadv2", 5, [("set", RWF_NOWAIT, "eopnotsupp")], "allow"),
    ("pwritev2", 5, [("set", RWF_NOWAIT, "eopnotsupp")], "allow"),
    # Socket cookies come from a machine-wide counter.
    ("getsockopt", 1, [("eq", SOL_SOCKET, "next")], "allow"),
    ("clone", 0, [("set", CLONE_NAMESPACES | CLONE_PIDFD, "deny")], "allow"),
    ("personality", 0, [("eq", PERSONALITY_QUERY, "allow")], "deny"),
)  # fmt: skip
# getsockopt's second test, on its option name once the level is SOL_SOCKET.
SOCKET_OPTIONS = (2, [("eq", SO_COOKIE, "enoprotoopt"), ("eq", SO_NETNS_COOKIE, "enoprotoopt")], "allow")


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def machine():
    """This machine's architecture, as ARCHES names it (None: no filter for it)."""
    name = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(name, name)


def _argument(index):
    return 16 + 8 * index  # struct seccomp_data: args[index]'s low word (little endian)


def program(arch):
    """The filter for `arch` ("x86_64" or "aarch64"): a list of (code, jt, jf, k)."""
    audit, numbers = ARCHES[arch]
    # Each entry: (code, jt, jf, k), a jump given as a label or an offset; every jump is forward.
    body = []
    labels = {}

    def op(code, k, jt=0, jf=0):
        body.append((code, jt, jf, k))

    def tests(index, rules, otherwise):
        op(BPF_LD_W_ABS, _argument(index))
        for kind, value, target in rules:
            if kind == "and":
                op(BPF_AND_K, value)
            else:
                op(BPF_JEQ_K if kind == "eq" else BPF_JSET_K, value, target, 0)
        op(BPF_JEQ_K, 0, otherwise, otherwise)  # an unconditional jump, as a jump both ways

    op(BPF_LD_W_ABS, OFFSET_ARCH)
    op(BPF_JEQ_K, audit, 0, "deny")
    op(BPF_LD_W_ABS, OFFSET_NR)
    if arch == "x86_64":
        op(BPF_JGE_K, X32_SYSCALL_BIT, "deny", 0)
    for number in sorted({numbers[name] for name in DENIED if name in numbers}):
        op(BPF_JEQ_K, number, "deny", 0)
    for number in sorted({numbers[name] for name in ABSENT if name in numbers}):
        op(BPF_JEQ_K, number, "enosys", 0)
    op(BPF_JEQ_K, numbers["flock"], "noop", 0)
    for name, *_ in ARGUMENT_RULES:
        op(BPF_JEQ_K, numbers[name], f"rule {name}", 0)
    op(BPF_JEQ_K, 0, "allow", "allow")
    for name, index, rules, otherwise in ARGUMENT_RULES:
        labels[f"rule {name}"] = len(body)
        tests(index, [(k, v, "sockopt" if t == "next" else t) for k, v, t in rules], otherwise)
    labels["sockopt"] = len(body)
    tests(*SOCKET_OPTIONS)
    for offset, name in enumerate(RETURNS):
        labels[name] = len(body) + offset
    code = []
    for index, (c, jt, jf, k) in enumerate(body):
        offsets = [labels[j] - index - 1 if isinstance(j, str) else j for j in (jt, jf)]
        if not all(0 <= o <= 255 for o in offsets):
            raise ValueError("a jump out of range")
        code.append((c, offsets[0], offsets[1], k))
    return code + [(BPF_RET_K, 0, 0, value) for value in RETURNS.values()]


def packed(arch):
    """The program as the kernel takes it (struct sock_filter[]), for tests and for a look with a disassembler."""
    return b"".join(struct.pack("=HBBI", *insn) for insn in program(arch))


def install():
    """Filter this process and every thread of it, for good.  Returns the number of calls denied.

    Raises OSError where the kernel refuses (no seccomp) and ValueError on an architecture
    without a table here (the caller says so in what was in force).
    """
    arch = machine()
    if arch not in ARCHES:
        raise ValueError(f"no seccomp filter for {arch}")
    code = program(arch)
    filters = (_SockFilter * len(code))(*[_SockFilter(*insn) for insn in code])
    prog = _SockFprog(len(code), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:  # Landlock set it already, unless it is off
        raise OSError(ctypes.get_errno(), "prctl(NO_NEW_PRIVS)")
    result = libc.syscall(ctypes.c_long(ARCHES[arch][1]["seccomp"]), ctypes.c_ulong(SECCOMP_SET_MODE_FILTER), ctypes.c_ulong(SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(prog))
    if result != 0:
        error = ctypes.get_errno() if result < 0 else errno.EBUSY  # > 0: a thread that could not be synchronised
        raise OSError(error, f"seccomp: {os.strerror(error)}")
    return denied_count(arch)


def denied_count(arch):
    """How many calls the filter refuses outright (DENIED and ABSENT), as the isolation summary says."""
    numbers = ARCHES[arch][1]
    return len({numbers[n] for n in DENIED + ABSENT if n in numbers})


KEYCTL_JOIN_SESSION_KEYRING = 1
KEYCTL_NUMBERS = {"x86_64": 250, "aarch64": 219}


def fresh_session_keyring():
    """Leave the judge's session keyring for a new, empty, anonymous one (before the filter).

    The grading user's other keyrings stay out of reach because the filter refuses keyctl and
    add_key.  Returns the new keyring's serial number, or 0 where the kernel has no keyrings.
    """
    number = KEYCTL_NUMBERS.get(machine())
    if number is None:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    serial = libc.syscall(ctypes.c_long(number), ctypes.c_long(KEYCTL_JOIN_SESSION_KEYRING), None)
    return int(serial) if serial > 0 else 0
