"""Confinement of the worker: resource limits, Landlock, capabilities, the devices left, and
last a session keyring of its own and the seccomp filter (seccomp.py).

Part of the worker (worker.py loads it by path); standard library only.  Applied before
any cell runs (confine), and again in each session child (scope_session).
"""

# Bound before any cell can reassign them in the builtins module (worker.py says why).
from builtins import (  # noqa: I001, UP029
    IndexError,
    KeyError,
    OSError,
    ValueError,
    any,
    dict,
    int,
    list,
    set,
    sorted,
    tuple,
)
import ctypes
import os
import resource
import stat
import sys

# Loaded by worker.py before this module, by path (in the worker the sandbox is no package).
from _pa_sandbox_wire import _safe_str  # noqa: I001
import _pa_sandbox_seccomp as seccomp  # noqa: I001


BLOCKED_TOP_LEVEL = ("reference", "student_template", "grader", "notebooks")


# --- confinement: resource limits and Landlock -----------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
PR_SET_NO_NEW_PRIVS = 38
PR_SET_DUMPABLE = 4
SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_RULE_PATH_BENEATH = 1

# Filesystem rights by the Landlock ABI version that introduced them.
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_ABI1 = (1 << 13) - 1  # execute .. make_sym
FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1
READ_ONLY = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV

# Of /sys only the CPU lists (the C library and torch count CPUs there): the rest shows the
# machine's cgroups (other gradings' counters), network interfaces and devices.  Under CUDA
# the driver reads the PCI tree: all of /sys then.
SYSTEM_READ = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/opt", "/sys/devices/system/cpu")
DEVICE_FILES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
PROC_HIDDEN = ("net", "sysvipc")  # every socket path and IPC object on the machine, when /proc is the host's
# What of the host's machine-wide /proc entries a submission may read when it has no /proc of
# its own: fixed descriptions only (torch needs cpuinfo), never the counters that move with
# other processes (stat, meminfo, loadavg, keys, locks, pressure, ...); views.py says why.
PROC_READABLE = ("cpuinfo", "version", "filesystems", "crypto", "execdomains")


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi():
    abi = _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return int(abi) if abi > 0 else 0


def _handled_fs(abi):
    handled = FS_ABI1
    if abi >= 2:
        handled |= FS_REFER
    if abi >= 3:
        handled |= FS_TRUNCATE
    if abi >= 5:
        handled |= FS_IOCTL_DEV
    return handled


def _private_entry(name):
    """An entry of an import directory that belongs to the grader or the answer key."""
    lowered = name.lower()
    return lowered.startswith(BLOCKED_TOP_LEVEL) or "paged_attention" in lowered or lowered.startswith("__editable__")


def _read_roots():
    """The folders the submission reads from: the Python installation, its libraries, system files."""
    roots = set()
    libraries = [p for name in ("LD_LIBRARY_PATH", "CUDA_HOME") for p in os.environ.get(name, "").split(os.pathsep) if p]
    for root in (*SYSTEM_READ, sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable)), *libraries, *sys.path):
        if root and os.path.isdir(root):
            roots.add(os.path.realpath(root))
    return sorted(r for r in roots if not any(r != o and r.startswith(o + os.sep) for o in roots))


def _read_rules(excluded=()):
    """Paths the submission may read: the Python installation and system files, less the grader.

    An import directory that holds the grader or the answer key (site-packages with the grader
    installed in it) is never allowed whole: each of its other entries is, one by one, and so
    are the siblings of every directory on the way down to it.  So is the folder of each path
    of `excluded` (the term secret's file), less that file.
    """
    roots, import_dirs = set(_read_roots()), set()
    excluded = {os.path.realpath(p) for p in excluded}
    for item in sys.path:
        if not item or not os.path.isdir(item):
            continue
        real = os.path.realpath(item)
        try:
            if any(_private_entry(n) for n in os.listdir(real)):
                import_dirs.add(real)
        except OSError:
            continue
    private = import_dirs | {os.path.dirname(p) for p in excluded}  # folders allowed entry by entry
    rules = []

    def walk(directory):
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            return
        for name in names:
            path = os.path.join(directory, name)
            real = os.path.realpath(path)
            if real in excluded or (directory in import_dirs and _private_entry(name)):
                continue
            if real in private or any(p.startswith(real + os.sep) for p in private):
                walk(real)
            else:
                rules.append(path)

    for root in sorted(roots):
        if root in private or any(p.startswith(root + os.sep) for p in private):
            walk(root)
        else:
            rules.append(root)
    return rules


def _add_rule(ruleset, path, access, abi):
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        if not os.path.isdir(path):
            access &= FILE_RIGHTS
        access &= _handled_fs(abi)
        attr = _PathBeneathAttr(access, fd)
        if _libc.syscall(SYS_LANDLOCK_ADD_RULE, ruleset, LANDLOCK_RULE_PATH_BENEATH, ctypes.byref(attr), 0) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
    finally:
        os.close(fd)


def _proc_rules():
    """What of the host's /proc a submission may read when it has no /proc of its own.

    Not the folders of other processes (other gradings' command lines and socket paths), not
    the machine-wide socket and IPC tables, not the counters: the fixed descriptions of
    PROC_READABLE, and this process's own folder, less its net/ (a process forked later
    cannot read its own folder then).
    """
    rules = []
    own = os.path.realpath("/proc/self")
    for folder, names in (("/proc", [n for n in PROC_READABLE if os.path.exists(f"/proc/{n}")]), (own, os.listdir(own))):
        for name in names:
            path = os.path.join(folder, name)
            # Never a link: a rule follows it, and /proc/self/root leads to "/", cwd and exe elsewhere.
            if name not in PROC_HIDDEN and not os.path.islink(path):
                rules.append(path)
    return rules


def landlock(writable, shared, extra_devices=(), own_proc=False, own_dev=False, excluded=()):
    """Shut this process (and all it forks) in; returns the ABI used, or 0 without Landlock.

    `own_proc` and `own_dev`: /proc and /dev are the sandbox's own (namespaces.py) and may be
    read whole; otherwise only what _proc_rules() and the device files allow.  `excluded`:
    files never to be read (the term secret's), wherever they are.
    """
    abi = landlock_abi()
    if abi <= 0:
        return 0
    attr = _RulesetAttr(_handled_fs(abi), (NET_BIND_TCP | NET_CONNECT_TCP) if abi >= 4 else 0, (SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if abi >= 6 else 0)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    try:
        reads = _read_rules(excluded) + (["/proc"] if own_proc else _proc_rules()) + (["/dev"] if own_dev else []) + (["/sys"] if extra_devices else [])
        for path in reads:
            try:
                _add_rule(ruleset, path, READ_ONLY, abi)
            except OSError:
                continue  # a dangling link, a file that vanished: it is simply not allowed
        for path in DEVICE_FILES + tuple(extra_devices):
            if os.path.exists(path):
                _add_rule(ruleset, path, FS_READ_FILE | FS_WRITE_FILE | FS_IOCTL_DEV, abi)
        for path in shared:  # files the judge shares (the inputs of paged_attention): read and write, never create or delete
            _add_rule(ruleset, path, FS_READ_FILE | FS_WRITE_FILE | FS_READ_DIR, abi)
        for path in writable:
            _add_rule(ruleset, path, _handled_fs(abi), abi)
        if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(NO_NEW_PRIVS)")
        if _libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    finally:
        os.close(ruleset)
    return abi


def scope_session():
    """A nested domain for a session child: it can no longer signal the zygote or its siblings."""
    abi = landlock_abi()
    if abi < 6:
        return
    attr = _RulesetAttr(0, 0, SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL)
    ruleset = _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(_RulesetAttr)), ctypes.c_uint32(0))
    if ruleset >= 0:
        _libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0)
        os.close(ruleset)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities():
    """Give up every capability, for good (the bounding set too, so exec cannot bring them back).

    A judge running as root would otherwise hand root's powers to the submission: raising its
    own memory cap (CAP_SYS_RESOURCE), raw sockets, mounts.  Returns False if some remain.
    """
    PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == 22:  # EINVAL: no such cap
            break
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    _libc.capset(ctypes.byref(header), data)
    with open("/proc/self/status") as f:
        caps = {line.split(":")[0]: int(line.split(":")[1], 16) for line in f if line.startswith("Cap")}
    return caps.get("CapEff", 1) == 0 and caps.get("CapPrm", 1) == 0 and caps.get("CapBnd", 1) == 0


def _tasks_of(uid):
    """Processes and threads of `uid` now (what RLIMIT_NPROC counts where no user namespace resets it)."""
    count = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                fields = dict(line.split(":", 1) for line in f if line.startswith(("Uid:", "Threads:")))
            if int(fields["Uid:"].split()[0]) == uid:
                count += int(fields["Threads:"])
        except (OSError, KeyError, ValueError, IndexError):
            continue
    return count


def apply_limits(limits, facts=None):
    """Resource caps of the zygote and everything it forks, set before any cell runs.

    Returns the caps in force.  RLIMIT_NPROC counts the processes of a uid in a user
    namespace, so it bounds the submission alone when it has a user namespace or a uid of its
    own; otherwise it counts all of the judge's user's, and the cap is that count plus `nproc`.
    """
    applied = {}
    memory_mb = limits.get("memory_mb")
    if memory_mb:
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
        applied["memory_mb"] = memory_mb
    fsize = limits.get("file_mb")
    if fsize:
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize << 20, fsize << 20))
        applied["file_mb"] = fsize
    nofile = limits.get("nofile")
    if nofile:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
        applied["nofile"] = nofile
    nproc = limits.get("nproc")
    if nproc:
        alone = "user" in (facts or {}).get("namespaces", ()) or limits.get("own_uid")
        cap = nproc if alone else nproc + _tasks_of(os.getuid())
        resource.setrlimit(resource.RLIMIT_NPROC, (cap, cap))
        applied["nproc"] = nproc
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return applied


def _devices(own_dev, abi, granted):
    """The devices the submission can open: its own /dev's, those Landlock grants, or all of /dev."""
    if own_dev:
        found = []
        for name in sorted(os.listdir("/dev")):
            path = os.path.join("/dev", name)
            try:
                mode = os.lstat(path).st_mode  # not /dev/stdin and its kin, links to /proc/self/fd
            except OSError:
                continue
            if stat.S_ISCHR(mode) or (stat.S_ISDIR(mode) and name.startswith("nvidia")):
                found.append(path)
        return found
    if abi:
        return [p for p in granted if os.path.exists(p)]
    return ["/dev"]


def confine(load, facts=None):
    """Limits, then Landlock.  Returns what the judge is told (before any cell runs, so it is true)."""
    facts = facts or {}
    report = {"limits": apply_limits(load.get("limits") or {}, facts)}
    devices = []
    if load.get("cuda"):
        devices = [os.path.join("/dev", n) for n in os.listdir("/dev") if n.startswith("nvidia")]
    report["landlock"] = 0
    if load.get("landlock") is False:  # switched off by the instructor (PA_GRADER_LANDLOCK=0)
        report["error"] = "switched off"
    else:
        try:
            # The term secret's files the mount namespace did not cover: Landlock leaves them out
            # (their folders then allowed entry by entry, which cannot be listed).
            uncovered = [p for p in facts.get("hidden_files", ()) if p not in facts.get("covered", ())]
            # No folder of the judge's: the files it shares come as descriptors (session.sealed_file).
            report["landlock"] = landlock([load["workdir"]], [], devices, facts.get("proc", False), facts.get("dev", False), uncovered)
        except OSError as error:
            report["error"] = _safe_str(error)[:300]
    report["namespaces"] = list(facts.get("namespaces", ()))
    report["proc"] = bool(facts.get("proc"))
    report["proc_masked"] = len(facts.get("proc_masked", ()))
    report["sys"] = facts.get("sys", "host")
    report["readonly"] = bool(facts.get("readonly"))
    report["disk"] = facts.get("disk")
    report["view_errors"] = [_safe_str(e)[:300] for e in facts.get("view_errors", ())][:5]
    report["devices"] = _devices(facts.get("dev", False), report["landlock"], list(DEVICE_FILES) + devices)
    report["capabilities_dropped"] = drop_capabilities()
    # The term secret's file, where neither the mount namespace covered it nor Landlock keeps it
    # out and this process (capabilities gone) may read it: the judge refuses to grade (client.py).
    uncovered = [p for p in facts.get("hidden_files", ()) if p not in facts.get("covered", ())]
    report["secret_exposed"] = bool(uncovered) and not report["landlock"] and any(os.access(p, os.R_OK) for p in uncovered)
    # Last, once nothing of ours needs a call it denies: a keyring of its own, then the filter.
    report["keyring"] = bool(seccomp.fresh_session_keyring())
    report["seccomp"] = 0
    if load.get("seccomp") is False:  # switched off by the instructor (PA_GRADER_SECCOMP=0)
        report["seccomp_error"] = "switched off"
    else:
        try:
            report["seccomp"] = seccomp.install()
        except (OSError, ValueError) as error:
            report["seccomp_error"] = _safe_str(error)[:300]
    return report
