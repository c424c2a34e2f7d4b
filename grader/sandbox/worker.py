"""The process that runs a submission's code.  Started as a script, never imported by the judge.

    python -u -s -P worker.py SOCKET_PATH LIFELINE_FD PLAN_JSON
    python -u -s -P worker.py --template REQUESTS_FD [LABEL]

The second form is a batch's warm *template* (warm.py): it imports what the first form
imports before it connects (torch, spawn.py), once, and then forks on request a child that
takes the grading's descriptors, environment, directory and arguments and goes on exactly
as the first form would.  It never runs submission code.

The processes that come from it, all in one new session started by the judge (or by the
template's child):

- the *keeper*, *nest* and *init* (spawn.py, in a process with one thread): the keeper stays
  outside and holds the judge's lifeline; the nest joins the grading's cgroup and unshares
  the user, PID, IPC, network and mount namespaces; init, PID 1 of the new namespace,
  builds a private /proc, /dev and /tmp and then only reaps.  Whatever the submission
  starts and orphans stays in its namespace (without one, below init as a child subreaper),
  and dies with it;
- the *zygote*: it caps its own resources, shuts itself in (Landlock, when the kernel has
  it: no file outside the Python installation and its own work directory, no signal or
  ptrace to anything outside the sandbox, no TCP), runs the notebook's cells once and then
  waits for "fork" orders;
- *session children*, one per order, each answering operations (call this method, run that
  function) one at a time over its own connection, each shut into a Landlock domain of its
  own so that it cannot signal the zygote or another session.

It uses only the standard library and torch, and the judge trusts nothing it says: every
answer is an observation to be checked, never a verdict.  What the judge measures itself
(whether paged_attention changed its inputs) it reads from memory it shares with the child.
"""

# Bound here, before any cell can reassign them in the builtins module: the worker's own code
# keeps working whatever a submission does to `builtins`.
from builtins import (  # noqa: I001, UP029
    ArithmeticError,
    AssertionError,
    AttributeError,
    BaseException,
    EOFError,
    Exception,
    IndexError,
    KeyError,
    LookupError,
    MemoryError,
    OSError,
    RecursionError,
    RuntimeError,
    SystemExit,
    ZeroDivisionError,
    ImportError,
    NotImplementedError,
    TypeError,
    ValueError,
    any,
    bool,
    bytearray,
    compile,
    dict,
    exec,
    float,
    getattr,
    hasattr,
    int,
    isinstance,
    issubclass,
    len,
    list,
    min,
    repr,
    set,
    sorted,
    str,
    tuple,
    type,
)
import base64
import builtins
import ctypes
import json
import mmap
import os
import random
import resource
import signal
import socket
import stat
import struct
import sys
import traceback

CONTRACT = ("estimate_kv_cache_bytes", "Request", "KVCacheManager", "paged_attention")
BLOCKED_TOP_LEVEL = ("reference", "student_template", "grader", "notebooks")
MAX_FRAME = 256 << 20
MAX_REPLY_TENSOR = 8 << 20  # bytes; the judge refuses replies over 16 MiB, and no correct answer is near
MAX_INT_BITS = 8192  # a returned int larger than this is described, not sent (JSON and the judge stay small)
MAX_STR = 1 << 16
TENSOR_DTYPES = ("float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool")

_pack = struct.pack  # bound before any cell runs, so a cell cannot swap the framing out
_unpack = struct.unpack
_dumps = json.dumps
_loads = json.loads
_exit = os._exit
_fork = os.fork
blocked_attempts = []


# --- framing -------------------------------------------------------------------------

def send(sock, message):
    data = _dumps(message, allow_nan=True).encode()
    sock.sendall(_pack(">I", len(data)) + data)


def recv(sock):
    (size,) = _unpack(">I", _read_exact(sock, 4))
    if size > MAX_FRAME:
        raise ValueError("frame too large")
    return _loads(_read_exact(sock, size).decode())


def _read_exact(sock, size):
    chunks = []
    while size:
        chunk = sock.recv(min(size, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def connect(path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    return sock


# --- import guard: the answer key and the grader are not importable from here ----------

class _BlockAnswerKey:
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in BLOCKED_TOP_LEVEL:
            blocked_attempts.append(fullname)
            raise ImportError(f"import of {fullname!r} is not allowed in a graded submission")
        return None


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

SYSTEM_READ = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/opt", "/sys")
DEVICE_FILES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
PROC_HIDDEN = ("net", "sysvipc")  # every socket path and IPC object on the machine, when /proc is the host's


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


def _read_rules():
    """Paths the submission may read: the Python installation and system files, less the grader.

    An import directory that holds the grader or the answer key (site-packages with the grader
    installed in it) is never allowed whole: each of its other entries is, one by one, and so
    are the siblings of every directory on the way down to it.
    """
    roots, private = set(_read_roots()), set()
    for item in sys.path:
        if not item or not os.path.isdir(item):
            continue
        real = os.path.realpath(item)
        try:
            if any(_private_entry(n) for n in os.listdir(real)):
                private.add(real)
        except OSError:
            continue
    rules = []

    def walk(directory):
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            return
        if directory in private:
            rules.extend(os.path.join(directory, n) for n in names if not _private_entry(n))
            return
        for name in names:
            path = os.path.join(directory, name)
            real = os.path.realpath(path)
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

    Not the folders of other processes (other gradings' command lines and socket paths), and
    not the machine-wide socket and IPC tables: the system-wide files, and this process's own
    folder, less its net/ (a process forked later cannot read its own folder then).
    """
    rules = []
    own = os.path.realpath("/proc/self")
    for folder, names in (("/proc", [n for n in os.listdir("/proc") if not n.isdigit()]), (own, os.listdir(own))):
        for name in names:
            path = os.path.join(folder, name)
            # Never a link: a rule follows it, and /proc/self/root leads to "/", cwd and exe elsewhere.
            if name not in PROC_HIDDEN and not os.path.islink(path):
                rules.append(path)
    return rules


def landlock(writable, shared, extra_devices=(), own_proc=False, own_dev=False):
    """Shut this process (and all it forks) in; returns the ABI used, or 0 without Landlock.

    `own_proc` and `own_dev`: /proc and /dev are the sandbox's own (namespaces.py) and may be
    read whole; otherwise only what _proc_rules() and the device files allow.
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
        reads = _read_rules() + (["/proc"] if own_proc else _proc_rules()) + (["/dev"] if own_dev else [])
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
            shared = [load["shared"]] if load.get("shared") else []
            report["landlock"] = landlock([load["workdir"]], shared, devices, facts.get("proc", False), facts.get("dev", False))
        except OSError as error:
            report["error"] = _safe_str(error)[:300]
    report["namespaces"] = list(facts.get("namespaces", ()))
    report["devices"] = _devices(facts.get("dev", False), report["landlock"], list(DEVICE_FILES) + devices)
    report["capabilities_dropped"] = drop_capabilities()
    return report


def become_reaper(lifeline, private_dir, plan):
    """Split into the worker's keeper, nest and init (spawn.py: they never return) and the zygote.

    `lifeline` is the read end of a pipe whose write end only the judge holds: when the judge
    goes away, however it dies, the keeper sees end-of-file, kills everything below itself
    and removes the judge's private directory (the one holding the socket) and the cgroup.
    Returns, in the zygote, what spawn.enter() put in force.
    """
    return _sandbox_module("spawn").enter(plan, lifeline, private_dir, _read_roots())


def _sandbox_module(name):
    """A standard-library module next to this file, loaded by path once (a warm template already has it)."""
    import importlib.util

    qualified = f"_pa_sandbox_{name}"
    if qualified not in sys.modules:
        here = os.path.dirname(os.path.abspath(__file__))
        spec = importlib.util.spec_from_file_location(qualified, os.path.join(here, f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[qualified] = module
        spec.loader.exec_module(module)
    return sys.modules[qualified]


# --- errors and plain data -------------------------------------------------------------

# The contract says "raises RuntimeError": any subclass counts (torch.OutOfMemoryError, a
# student's own class).  The judge cannot call isinstance across processes, so the worker
# names the built-in classes the error is an instance of.
EXCEPTION_CLASSES = (
    ("ArithmeticError", ArithmeticError), ("AssertionError", AssertionError), ("AttributeError", AttributeError),
    ("Exception", Exception), ("IndexError", IndexError), ("KeyError", KeyError), ("LookupError", LookupError),
    ("MemoryError", MemoryError), ("NotImplementedError", NotImplementedError), ("OSError", OSError),
    ("RecursionError", RecursionError), ("RuntimeError", RuntimeError), ("TypeError", TypeError),
    ("ValueError", ValueError), ("ZeroDivisionError", ZeroDivisionError),
)


def describe_error(error):
    try:
        frames = [f for f in traceback.extract_tb(error.__traceback__) if str(f.filename).startswith("<cell")]
        shown = "".join(traceback.format_list(frames[-6:]))[-4000:]
    except BaseException:
        shown = ""
    return {
        "type": _safe_str(type.__dict__["__name__"].__get__(type(error)))[:200],
        "message": _safe_str(error)[:2000],
        "not_implemented": isinstance(error, NotImplementedError),
        "rejected_return": isinstance(error, ReturnRejected),
        "isa": [name for name, cls in EXCEPTION_CLASSES if isinstance(error, cls)],
        "traceback": shown,
    }


def _safe_str(value):
    try:
        text = str(value)
        return text if type(text) is str else f"<unprintable {type(value).__name__}>"
    except BaseException:  # a hostile __str__ must not take the worker down
        return f"<unprintable {type(value).__name__}>"


def _as_int(value):
    """The int an integer-like value stands for (an int subclass, a numpy integer), else None.

    bool is not an integer here, and neither is a float with an integral value: the contract
    asks for exact integers.  torch tensors are left alone (they are not plain data).
    """
    kind = type(value)
    if kind is bool or issubclass(kind, bool):
        return None
    if issubclass(kind, int):
        return int.__index__(value)
    if kind.__module__ == "numpy" and hasattr(kind, "__index__") and not hasattr(kind, "is_integer"):
        try:
            return int(value.__index__())
        except BaseException:
            return None
    return None


def plain(value, depth=0):
    """Turn a returned object into JSON data; anything that is not plain data is described."""
    kind = type(value)
    if value is None or kind is bool:
        return value
    as_int = _as_int(value)
    if as_int is not None:
        return as_int if as_int.bit_length() <= MAX_INT_BITS else {"__object__": "builtins.int", "repr": f"<int of {as_int.bit_length()} bits>"}
    if kind is str:
        return value if len(value) <= MAX_STR else {"__object__": "builtins.str", "repr": value[:200] + "..."}
    if kind is float:
        return value if value == value and value not in (float("inf"), float("-inf")) else {"__float__": repr(value)}
    if depth < 4 and isinstance(value, dict):  # an OrderedDict is a dict too
        return {"__dict__": [[plain(k, depth + 1), plain(v, depth + 1)] for k, v in list(dict.items(value))[:64]]}
    if depth < 4 and kind in (list, tuple):
        return {"__" + kind.__name__ + "__": [plain(v, depth + 1) for v in list(value)[:4096]]}
    return {"__object__": _safe_str(kind.__module__) + "." + _safe_str(kind.__qualname__), "repr": _safe_str(value)[:200]}


def int_list(value, what):
    """A list of ints read from a list, tuple or deque (subclasses too) of integers."""
    kind = type(value)
    if not (issubclass(kind, (list, tuple)) or (kind.__module__ == "collections" and kind.__name__ == "deque")):
        raise TypeError(f"{what} should be a list, got {kind.__name__}")
    out = []
    for item in list(value):
        as_int = _as_int(item)
        if as_int is None:
            raise TypeError(f"{what} should hold ints, got {type(item).__name__}: {_safe_str(item)[:50]}")
        out.append(as_int)
    return out


# --- tensors -------------------------------------------------------------------------

class SharedInputs:
    """The judge's file of input tensors, mapped shared: what the submission writes, the judge sees."""

    def __init__(self, spec):
        fd = os.open(spec["path"], os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            self.map = mmap.mmap(fd, spec["size"], mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)

    def tensor(self, payload):
        import torch

        dtype = getattr(torch, payload["dtype"])
        count = 1
        for d in payload["shape"]:
            count *= d
        if count == 0:
            return torch.empty(payload["shape"], dtype=dtype)
        return torch.frombuffer(self.map, dtype=dtype, count=count, offset=payload["offset"]).view(payload["shape"])


def tensor_from(payload, device="cpu", shared=None):
    import torch

    if shared is not None and "offset" in payload:
        return shared.tensor(payload)
    dtype = getattr(torch, payload["dtype"])
    raw = bytearray(base64.b64decode(payload["data"]))
    flat = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
    return flat.reshape(payload["shape"]).clone().to(device)


class ReturnRejected(Exception):
    """A returned value this worker will not send (wrong kind, too large): the student's answer, not their crash."""


def tensor_payload(value):
    import torch

    if not isinstance(value, torch.Tensor):
        raise ReturnRejected(f"expected a torch.Tensor, got {type(value).__name__}")
    if type(value) is not torch.Tensor:
        with torch._C.DisableTorchFunction():
            value = torch.Tensor.as_subclass(value, torch.Tensor)
    dtype = str(value.dtype).replace("torch.", "")
    meta = {"dtype": dtype, "shape": list(value.shape), "device": value.device.type}
    if dtype not in TENSOR_DTYPES:
        raise ReturnRejected(f"unsupported dtype {dtype}")
    if value.numel() * value.element_size() > MAX_REPLY_TENSOR:
        raise ReturnRejected(f"the returned tensor is too large ({list(value.shape)}, {dtype})")
    data = value.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    meta["data"] = base64.b64encode(data).decode()
    return meta


# --- the session child: one operation per request -------------------------------------

class Session:
    def __init__(self, namespace):
        self.ns = namespace
        self.handles = {}
        self.example = {}  # what one example keeps between its calls (cleared by reseed)

    def new_handle(self, obj):
        handle = len(self.handles) + 1
        self.handles[handle] = obj
        return handle

    def snapshot(self, spec):
        state = {}
        if spec.get("manager") is not None:
            manager = self.handles[spec["manager"]]
            state["free_blocks"] = _observe(lambda: int_list(manager.free_blocks, "free_blocks"))
        requests = {}
        for handle in spec.get("requests", []):
            req = self.handles[handle]
            requests[str(handle)] = {
                "seq_len": _observe(lambda req=req: _plain_int(req.seq_len, "seq_len")),
                "block_table": _observe(lambda req=req: int_list(req.block_table, "block_table")),
            }
        state["requests"] = requests
        return state

    # Operations -------------------------------------------------------------------
    def op_observe(self, msg):
        return None  # the reply's snapshot is the point

    def op_reseed(self, msg):
        reseed()  # each example starts from the same random state, whatever ran before it
        self.example = {}
        return None

    def op_permute(self, msg):
        """Reorder the free list (any order is legal): what the reproduction writes."""
        manager = self.handles[msg["manager"]]
        manager.free_blocks[:] = [manager.free_blocks[i] for i in msg["order"]]
        return None

    def op_first_output(self, msg):
        """A digest of the tensor the example's first attention call returned, as it is now."""
        import hashlib

        first = self.example.get("first_output")
        return None if first is None else hashlib.sha256(base64.b64decode(tensor_payload(first)["data"])).hexdigest()

    def op_ledger(self, msg):
        return plain(self.ns["estimate_kv_cache_bytes"](*msg.get("args", []), **msg.get("kwargs", {})))

    def op_new(self, msg):
        return self.new_handle(self.ns[msg["cls"]](**msg["kwargs"]))

    def op_method(self, msg):
        target = self.handles[msg["target"]]
        args = [self.handles[h] for h in msg.get("args", [])]
        return plain(getattr(target, msg["name"])(*args))

    def op_place(self, msg):
        """Give a request blocks the way a correct prefill would: exactly what the reproduction
        writes, `r.block_table = [m.free_blocks.pop(i) for i in indices]`."""
        manager, req = self.handles[msg["manager"]], self.handles[msg["request"]]
        req.block_table = [manager.free_blocks.pop(i) for i in msg["indices"]]
        return None

    def op_set_table(self, msg):
        req = self.handles[msg["request"]]
        req.block_table = list(msg["table"])
        req.seq_len = msg["seq_len"]
        return None

    def op_set_pool(self, msg):
        manager = self.handles[msg["manager"]]
        if msg.get("rebind"):  # a new tensor object, as `m.physical_kv_cache = ...` makes
            manager.physical_kv_cache = tensor_from(msg["tensor"])
        else:
            manager.physical_kv_cache.copy_(tensor_from(msg["tensor"]))
        return None

    def op_get_cache(self, msg):
        manager, req = self.handles[msg["manager"]], self.handles[msg["request"]]
        return tensor_payload(manager.get_physical_cache(req))

    def op_attention(self, msg):
        import torch

        device = msg.get("device", "cpu")
        shared = SharedInputs(msg["shared"]) if msg.get("shared") else None
        names = ("query", "key_cache", "value_cache", "block_tables", "seq_lens")
        inputs = {name: tensor_from(msg[name], device, shared) for name in names}
        previous = self.example.get("caches")
        if msg.get("reuse_caches") and previous is not None:
            # The caches of the previous call, written in place, as a decode step writes them.
            for name, tensor in zip(("key_cache", "value_cache"), previous, strict=True):
                if tensor.shape == inputs[name].shape and tensor.dtype == inputs[name].dtype:
                    tensor.copy_(inputs[name])
                    inputs[name] = tensor
        self.example["caches"] = (inputs["key_cache"], inputs["value_cache"])
        args = [inputs[name] for name in names]
        # The reproduction calls it the same way: positionally, plus scale as the grader passes it.
        if msg.get("scale_style") == "positional":
            out = self.ns["paged_attention"](*args, msg["scale"])
        elif msg.get("scale_style") == "keyword":
            out = self.ns["paged_attention"](*args, scale=msg["scale"])
        else:
            out = self.ns["paged_attention"](*args)
        self.example.setdefault("first_output", out)
        if device == "cuda":
            torch.cuda.synchronize()
        # Whether the inputs changed, the judge reads from the shared file itself.
        return {"output": tensor_payload(out)}

    def serve(self, sock):
        while True:
            msg = recv(sock)
            if msg.get("op") == "end":
                return
            reply = {"id": msg.get("id")}
            try:
                reply["value"] = getattr(self, "op_" + msg["op"])(msg)
                reply["ok"] = True
            except BaseException as error:  # report it; the judge decides what it means
                reply["ok"] = False
                reply["error"] = describe_error(error)
            if msg.get("snapshot"):
                try:
                    reply["state"] = self.snapshot(msg["snapshot"])
                except BaseException as error:
                    reply["state_error"] = describe_error(error)
            try:
                data = _dumps(reply, allow_nan=True).encode()
            except BaseException as error:  # a value JSON cannot carry: say so instead of dying
                data = _dumps({"id": msg.get("id"), "ok": False, "error": describe_error(error)}).encode()
            sock.sendall(_pack(">I", len(data)) + data)


def _plain_int(value, what):
    as_int = _as_int(value)
    if as_int is None:
        raise TypeError(f"{what} should be an int, got {type(value).__name__}")
    return as_int


def _observe(read):
    try:
        return {"ok": read()}
    except BaseException as error:
        return {"error": describe_error(error)}


# --- start-up: run the cells, then serve forks ----------------------------------------

PYTHON_CELL_MAGICS = ("time", "timeit", "capture", "prun", "debug")


class NotebookShell:
    """What notebook code finds behind `get_ipython()`: IPython's calls, run as Jupyter runs them.

    The judge turns magics and `!` lines into these calls with IPython's own input
    transformer.  Magics whose body is Python run it once in the notebook's namespace; shell
    escapes and the rest (%matplotlib, %pip, %load_ext, ...) do nothing while grading.
    """

    def __init__(self, namespace):
        self.user_ns = namespace
        self.config = {}
        self.kernel = None

    def _run(self, source, name):
        if source.strip():
            exec(compile(source, f"<%{name}>", "exec"), self.user_ns)

    def run_line_magic(self, magic_name, line, _stack_depth=1):
        if magic_name in PYTHON_CELL_MAGICS:
            self._run(line, magic_name)
        return None

    def run_cell_magic(self, magic_name, line, cell):
        if magic_name in PYTHON_CELL_MAGICS:
            self._run(cell, magic_name)
        elif magic_name == "writefile" and line.split():  # a file a later cell may import
            words = line.split()
            with open(words[-1], "a" if "-a" in words[:-1] else "w") as f:
                f.write(cell)
        return None

    def magic(self, arg_s):
        name, _, line = arg_s.lstrip("%").partition(" ")
        return self.run_line_magic(name, line)

    def system(self, cmd):
        return None

    def getoutput(self, cmd, split=True, depth=0):
        return []

    def push(self, variables, interactive=True):
        self.user_ns.update(variables)

    def register_magic_function(self, *args, **kwargs):
        return None


def display(*objs, **kwargs):
    """IPython's display(): shown as text when grading (the output is kept for feedback only)."""
    for obj in objs:
        print(_safe_str(repr(obj))[:2000])


def notebook_namespace():
    """The namespace the cells run in, with what a Jupyter kernel provides."""
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    shell = NotebookShell(namespace)
    namespace["get_ipython"] = lambda: shell
    namespace["display"] = display
    return namespace


def run_cells(sock, cells, namespace):
    """Every cell in order; one that raises is reported and the next still runs (so a broken
    scratch cell costs only itself), except sys.exit(): the author asked to stop there, and
    Jupyter's Run All stops there too."""
    for index, source in cells:
        send(sock, {"event": "cell_start", "index": index})
        try:
            exec(compile(source, f"<cell {index}>", "exec"), namespace)
        except BaseException as error:  # SystemExit and KeyboardInterrupt included
            send(sock, {"event": "cell_done", "index": index, "error": describe_error(error)})
            if isinstance(error, SystemExit):
                return
        else:
            send(sock, {"event": "cell_done", "index": index})


def describe_names(namespace):
    import inspect

    found = {}
    for name in CONTRACT:
        if name not in namespace:
            continue
        try:
            obj = namespace[name]
            kind = "class" if isinstance(obj, type) else _safe_str(type(obj).__name__)
        except BaseException:
            continue
        try:
            signature = _safe_str(inspect.signature(obj))[:500]
        except BaseException:  # no signature, or a hostile __signature__
            signature = None
        found[name] = {"kind": kind, "signature": signature}
    return found


def reseed():
    import torch

    random.seed(0)
    torch.manual_seed(0)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed(0)


def main(path, lifeline=None, plan=None, forked=False):
    """Run one grading's worker; `forked`: this process is a child of a warm template."""
    facts = become_reaper(lifeline, os.path.dirname(path), plan or {})
    if facts.get("fatal"):  # never run a cell in a sandbox that could not be built
        control = connect(path)
        recv(control)
        send(control, {"event": "confined", "fatal": facts["fatal"]})
        return
    if forked:
        own_inherited_memory()
    _prepare()
    import torch

    control = connect(path)
    load = recv(control)
    send(control, {"event": "confined", **confine(load, facts)})
    namespace = notebook_namespace()
    reseed()
    run_cells(control, [(c["index"], c["source"]) for c in load["cells"]], namespace)
    send(
        control,
        {
            "event": "loaded",
            "names": describe_names(namespace),
            "blocked_imports": blocked_attempts[:20],
            "cuda_initialized": bool(torch.cuda.is_initialized()),
        },
    )
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forked sessions are reaped automatically
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM, signal.SIGVTALRM, signal.SIGPROF):
        signal.signal(sig, signal.SIG_DFL)  # whatever a cell installed
    signal.setitimer(signal.ITIMER_REAL, 0)
    while True:
        order = recv(control)
        if order.get("op") != "fork":
            return
        if _fork() == 0:
            try:
                control.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                scope_session()
                reseed()
                session_sock = connect(path)
                send(session_sock, {"event": "hello", "session": order.get("session")})
                Session(namespace).serve(session_sock)
            finally:
                _exit(0)


def _prepare():
    """What every worker does before its first cell, the same whether a template did it already or not."""
    if not any(isinstance(finder, _BlockAnswerKey) for finder in sys.meta_path):
        sys.meta_path.insert(0, _BlockAnswerKey())
    import torch

    torch.set_num_threads(1)  # small tensors; one thread also keeps fork() safe


# --- the warm template: a worker's imports, done once, forked per submission ----------------

def template(requests_fd):
    """Serve fork requests (forkserver.py) with children that go on as `main` would.

    Before the first request: what a worker does before it connects (the answer-key guard,
    spawn.py and torch), and nothing else.  No submission's code or data ever reaches this
    process: requests carry the judge's paths, environment and descriptors, and the cells
    go to the forked worker over the judge's own socket.
    """
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # stopped by its requesters closing their ends, not by a terminal
    # Nothing of the same user may ptrace it or read its memory (where no namespace or Landlock
    # keeps a submission from the grader's other processes): every later worker comes from it.
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    _sandbox_module("spawn")
    _prepare()
    requests = socket.socket(fileno=requests_fd)
    forkserver = _sandbox_module("forkserver")
    forkserver.send(requests, {"ready": os.getpid()})
    forkserver.Server(requests, _as_fresh_worker).serve()
    _exit(0)


MADV_POPULATE_WRITE = 23  # Linux 5.14


def own_inherited_memory():
    """In a worker forked from the template: take a copy of every page the template's imports wrote.

    A cold worker wrote those pages itself (importing torch), so its grading's memory cgroup
    counted them; shared with the template they would count nowhere, and a submission would
    have that much more room under the same cap.  Copied here, in the grading's cgroup, they
    count as they would have (about 140 MiB; some 80 ms).  Only pages present in memory are
    touched: untouched reservations stay unallocated, as in a cold worker.
    """
    page = os.sysconf("SC_PAGE_SIZE")
    mincore, madvise = _libc.mincore, _libc.madvise
    mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    with open("/proc/self/maps") as f:
        maps = f.read().splitlines()
    for line in maps:
        fields = line.split()
        # Private and writable, and anonymous (the heap, arenas, libraries' .bss): what a process writes.
        if not fields[1].startswith("rw") or fields[1][3] != "p" or (len(fields) > 5 and fields[5] != "[heap]"):
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        count = (end - start) // page
        present = ctypes.create_string_buffer(count)
        if mincore(start, end - start, present) != 0:
            continue
        flags, i = present.raw, 0
        while i < count:
            if not flags[i] & 1:
                i += 1
                continue
            j = i
            while j < count and flags[j] & 1:
                j += 1
            if madvise(start + i * page, (j - i) * page, MADV_POPULATE_WRITE) != 0:
                return  # an older kernel: the pages stay shared (README, "Speed")
            i = j


def _as_fresh_worker(request, fds):
    """In a child of the template: become what `python -u -s -P worker.py SOCKET LIFELINE PLAN`
    started by the judge would be (client.Sandbox._start_worker), then run as it does."""
    out, err, lifeline, *lock = fds
    _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # as a process that Popen started
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    for fd, target in ((null, 0), (out, 1), (err, 2)):
        os.dup2(fd, target)
        os.close(fd)
    plan = dict(request["plan"])
    plan["uid_lock"] = lock[0] if lock else None  # the lock's descriptor here, not the judge's
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    if "tempfile" in sys.modules:
        sys.modules["tempfile"].tempdir = None  # found again from TMPDIR, as in a fresh process
    sys.argv = [os.path.abspath(__file__), request["socket"], str(lifeline), _dumps(plan)]
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as Python starts
    sys.modules.pop("_pa_sandbox_forkserver", None)
    try:
        main(request["socket"], lifeline, plan, forked=True)
    except (EOFError, BrokenPipeError, ConnectionError):
        pass
    _exit(0)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--template"]:
        template(int(sys.argv[2]))
    try:
        main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None, json.loads(sys.argv[3]) if len(sys.argv) > 3 else None)
    except (EOFError, BrokenPipeError, ConnectionError):
        pass
    _exit(0)
