"""A seccomp filter for the submission: the system calls a notebook never needs fail with EPERM.

Part of the worker (confine.py loads it by path, and tests import it); standard library only.
The filter is a small classic-BPF program of our own, installed with seccomp(2), rather than
libseccomp: the worker imports nothing but the standard library and torch (libseccomp's
Python binding is not on PyPI, and libseccomp.so is not on every machine that grades, e.g. a
slim container), the list is a deny list of some sixty numbers, and the two points where a
library would help (foreign architectures, the x32 ABI) are two instructions here.

What it does, in order, for every system call of the zygote and everything it starts:

- a call made with another architecture's convention (int 0x80 on x86-64, whose numbers mean
  other calls) fails with EPERM, as does every x32 call (numbers with bit 30 set);
- `clone` with any namespace flag fails with EPERM; `clone3`, whose flags sit in memory the
  filter cannot read, fails with ENOSYS, on which the C library falls back to `clone`
  (threads and subprocesses work as before); `personality` may only be queried;
- the calls in DENIED fail with EPERM: the kernel keyrings, another process's memory
  (ptrace, process_vm_*, pidfd_getfd, process_madvise, kcmp), kernel attack surface a
  notebook has no use for (bpf, perf_event_open, userfaultfd, io_uring), mounts and
  namespaces, modules and kexec, the machine's clock, swap, accounting, quotas, reboot;
- everything else is allowed.

EPERM rather than a kill: the cell gets an ordinary Python error (PermissionError) and the
grading goes on.  Installed with SECCOMP_FILTER_FLAG_TSYNC, so that a thread torch started
at import is filtered too.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct

# Calls no notebook needs, by name; the numbers per architecture are below.
DENIED = (
    # the kernel keyrings: another user's secrets, keys planted to outlive the grading
    "keyctl", "add_key", "request_key",
    # other processes' memory and kernel objects
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "process_madvise", "process_mrelease", "kcmp",
    # kernel attack surface
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "lookup_dcookie", "fanotify_init", "fanotify_mark", "open_by_handle_at", "name_to_handle_at",
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
)

# Checked against the kernel's headers by tests/test_seccomp.py where they are installed.
# 457, 458 and 467 are newer than most headers (Linux 6.8 and 6.15); the number is the same
# on every architecture since 5.1.
_COMMON = {
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428, "move_mount": 429,
    "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "clone3": 435, "pidfd_getfd": 438,
    "process_madvise": 440, "mount_setattr": 442, "quotactl_fd": 443, "process_mrelease": 448,
    "statmount": 457, "listmount": 458, "open_tree_attr": 467,
}
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
    "clone": 56, "personality": 135, "seccomp": 317,
}
AARCH64 = {  # the generic table (asm-generic/unistd.h)
    **_COMMON,
    "keyctl": 219, "add_key": 217, "request_key": 218, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
    "kcmp": 272, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282, "lookup_dcookie": 18, "fanotify_init": 262,
    "fanotify_mark": 263, "open_by_handle_at": 265, "name_to_handle_at": 264, "mount": 40, "umount2": 39,
    "pivot_root": 41, "chroot": 51, "unshare": 97, "setns": 268, "kexec_load": 104, "kexec_file_load": 294,
    "init_module": 105, "finit_module": 273, "delete_module": 106, "reboot": 142, "swapon": 224, "swapoff": 225,
    "acct": 89, "syslog": 116, "quotactl": 60, "vhangup": 58, "settimeofday": 170, "clock_settime": 112,
    "sethostname": 161, "setdomainname": 162, "nfsservctl": 42,
    "clone": 220, "personality": 92, "seccomp": 277,
}
AUDIT_ARCH_X86_64, AUDIT_ARCH_AARCH64 = 0xC000003E, 0xC00000B7
ARCHES = {"x86_64": (AUDIT_ARCH_X86_64, X86_64), "aarch64": (AUDIT_ARCH_AARCH64, AARCH64)}
X32_SYSCALL_BIT = 0x40000000

CLONE_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000  # NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
PERSONALITY_QUERY = 0xFFFFFFFF

# Classic BPF, as seccomp reads it (linux/filter.h, linux/seccomp.h).
BPF_LD_W_ABS, BPF_JEQ_K, BPF_JGE_K, BPF_JSET_K, BPF_RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
OFFSET_NR, OFFSET_ARCH, OFFSET_ARG0 = 0, 4, 16  # struct seccomp_data; arg0's low word (little endian)
SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC = 1, 1
PR_SET_NO_NEW_PRIVS = 38


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def machine():
    """This machine's architecture, as ARCHES names it (None: no filter for it)."""
    name = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(name, name)


def program(arch):
    """The filter for `arch` ("x86_64" or "aarch64"): a list of (code, jt, jf, k)."""
    audit, numbers = ARCHES[arch]
    denied = sorted({numbers[name] for name in DENIED if name in numbers})
    eperm = SECCOMP_RET_ERRNO | errno.EPERM
    # Written back to front: every jump is forward, to one of the three returns at the end.
    tail = [
        (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
        (BPF_RET_K, 0, 0, eperm),
        (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.ENOSYS),
    ]
    body = []  # each entry: (code, jt label or offset, jf label or offset, k)

    def op(code, k, jt=0, jf=0):
        body.append((code, jt, jf, k))

    op(BPF_LD_W_ABS, OFFSET_ARCH)
    op(BPF_JEQ_K, audit, 0, "deny")
    op(BPF_LD_W_ABS, OFFSET_NR)
    if arch == "x86_64":
        op(BPF_JGE_K, X32_SYSCALL_BIT, "deny", 0)
    for number in denied:
        op(BPF_JEQ_K, number, "deny", 0)
    op(BPF_JEQ_K, numbers["clone3"], "enosys", 0)
    op(BPF_JEQ_K, numbers["clone"], 0, 2)  # not clone: on to personality
    op(BPF_LD_W_ABS, OFFSET_ARG0)
    op(BPF_JSET_K, CLONE_NAMESPACES, "deny", "allow")
    op(BPF_JEQ_K, numbers["personality"], 0, "allow")
    op(BPF_LD_W_ABS, OFFSET_ARG0)
    op(BPF_JEQ_K, PERSONALITY_QUERY, "allow", "deny")
    targets = {"allow": len(body), "deny": len(body) + 1, "enosys": len(body) + 2}
    code = []
    for index, (c, jt, jf, k) in enumerate(body):
        offsets = [targets[j] - index - 1 if isinstance(j, str) else j for j in (jt, jf)]
        if not all(0 <= o <= 255 for o in offsets):
            raise ValueError("a jump out of range")
        code.append((c, offsets[0], offsets[1], k))
    return code + tail


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
    return len({ARCHES[arch][1][n] for n in DENIED if n in ARCHES[arch][1]})


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
