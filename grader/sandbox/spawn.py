"""The worker's processes, from the judge's start to the end of the submission.

    keeper -> nest -> init -> zygote (-> the session children the zygote forks)

keeper  the process the judge started.  It stays outside every namespace and holds the read
        end of the judge's lifeline: when that closes (the judge exited or was killed, however)
        it kills everything below itself and removes what the grading left behind: the
        judge's private directory, the cgroup, IPC objects no namespace took away.
nest    joins the cgroup, then unshares the namespaces (the cgroup namespace's root is then the
        grading's cgroup; the keeper, still outside, writes its uid and gid maps).  Then it
        only waits for init.
init    the first process of the new PID namespace (PID 1): it mounts the private /proc, /dev
        and /tmp, masks /proc and replaces /sys and the work folder (views.py), takes the
        submission's uid where no user namespace gave it one, forks the zygote and reaps.
        When it dies the kernel kills every process in the namespace.
        Without a PID namespace it is a child subreaper instead: orphans of the submission
        (daemons, double forks) become its children, where the keeper and the judge find them.
zygote  returns from enter() with what is in force ("facts"), imports torch, runs the cells.

Standard library only, loaded by path by the worker (and imported normally by tests).  Every
step runs in a process with one thread, before torch is imported, as unshare(CLONE_NEWUSER)
requires; a process that already holds torch can call enter() in a child it forks.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import os
import select
import shutil
import signal
import sys
import time
from types import ModuleType
from typing import Any

PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 4, 36
IGNORED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def _sibling(name: str) -> ModuleType:
    """A module next to this one, whether this file was imported (tests) or loaded by path (the worker)."""
    if __package__:
        return importlib.import_module(f"{__package__}.{name}")
    qualified = f"_pa_sandbox_{name}"
    if qualified not in sys.modules:
        spec = importlib.util.spec_from_file_location(qualified, os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[qualified] = module
        spec.loader.exec_module(module)
    return sys.modules[qualified]


ns = _sibling("namespaces")  # ipc and cgroups only when the judge died and the keeper cleans up
views = _sibling("views")


def enter(plan: dict[str, Any], lifeline: int | None, private_dir: str, roots: list[str]) -> dict[str, Any]:
    """Split into keeper, nest, init and zygote; returns (in the zygote only) what is in force.

    `plan` comes from the judge: "socket" (its path), "lifeline" (the descriptor), "namespaces"
    (False: the instructor turned them off),
    "user_namespace" (False: as root, the others without one, as some containers allow), "uid"
    and "gid" (the submission's ids outside, when the judge runs as root), "cgroups" (the
    directories to join), "uid_lock" and "uid_lock_path" (the uid's lock, kept by the keeper alone),
    "cuda", "tmpfs_mb", "since" (when the grading began), "memory_mb" (what /proc/meminfo
    says), "workdir", "disk_mb" and "inodes" (the work folder's tmpfs), and "hidden_files" (the
    term secret's: covered in the mount namespace, left out of Landlock's rules by the zygote).
    `roots` are the paths the submission must be able to read (the Python installation).
    """
    root = os.geteuid() == 0
    uid, gid = plan.get("uid"), plan.get("gid")
    drop = root and uid is not None and gid is not None
    wanted = plan.get("namespaces", True) is not False
    facts: dict[str, Any] = {
        "namespaces": [],
        "proc": False,
        "dev": False,
        "devices": [],
        "hidden": [],
        "proc_masked": [],
        "sys": "host",
        "disk": None,
        "view_errors": [],
        "readonly": False,
        "covered": [],
        "hidden_files": list(plan.get("hidden_files") or []),
        "fatal": None,
    }
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # Opened now: init rebuilds /dev in the mount namespace the nest shares, and an open of
    # /dev/null by the nest at that moment would find nothing there.
    devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    hidden: list[str] = []
    keep: dict[str, int] = {}
    up_r, up_w = os.pipe()  # nest -> keeper: "unshared these"
    down_r, down_w = os.pipe()  # keeper -> nest: "your ids are mapped"
    nest = os.fork()
    if nest:
        for fd in (up_w, down_r):
            os.close(fd)
        _never_return(_keeper, nest, lifeline, private_dir, plan, up_r, down_w, drop, devnull)
    for fd in (up_r, down_w, lifeline, plan.get("uid_lock")):  # only the keeper holds these
        if fd is not None:
            os.close(fd)
    flags = 0
    try:
        for path in plan.get("cgroups") or []:  # into the grading's cgroup, before any other process of it exists
            _write(os.path.join(path, "cgroup.procs"), "0")
        flags = ns.unshare_what_we_can(root, plan.get("user_namespace", True) is not False) if wanted else 0
        if flags & ns.CLONE_NEWNS:
            # Opened here: a bind mount's source must belong to this mount namespace, and this
            # process still has the judge's ids, which can reach everything the judge can.
            hidden, keep = ns.plan_hidden(private_dir, roots, uid if drop else None, gid if drop else None)
        os.write(up_w, f"{flags}\n".encode())
        answer = os.read(down_r, 4096)
        if answer != b"ok":
            raise OSError(f"mapping the submission's uid: {answer.decode(errors='replace') or 'no answer'}")
        if flags & ns.CLONE_NEWUSER:
            ns.become(0, 0, groups=drop)  # root inside: the mapped uid outside, no supplementary group
        facts["namespaces"] = ns.names(flags)
    except OSError as error:
        facts["fatal"] = f"setting up namespaces: {error}"
    finally:
        os.close(up_w)
        os.close(down_r)
    init = os.fork()
    if init:
        _never_return(_nest, init, keep, devnull)
    try:
        if not facts["fatal"]:
            _build(facts, flags, plan, hidden, keep, roots, private_dir)
            if drop and not flags & ns.CLONE_NEWUSER:
                ns.become(uid, gid, groups=True)
    except OSError as error:
        facts["fatal"] = f"preparing the sandbox: {error}"
    for fd in keep.values():
        os.close(fd)
    if not flags & ns.CLONE_NEWPID:
        _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    zygote = os.fork()
    if zygote == 0:
        os.close(devnull)
        return facts
    _never_return(_init, zygote, devnull)
    raise AssertionError("unreachable")


def _never_return(role: Any, *args: Any) -> None:
    """Run a process's role; whatever happens, it ends here and never goes on as the zygote would."""
    try:
        role(*args)
    except BaseException as error:  # the process must end whatever went wrong
        try:
            os.write(2, f"sandbox {role.__name__}: {type(error).__name__}: {error}\n".encode(errors="replace"))
        except OSError:
            pass
    os._exit(70)


def _build(facts: dict[str, Any], flags: int, plan: dict[str, Any], hidden: list[str], keep: dict[str, int], roots: list[str], private_dir: str) -> None:
    """Init's mounts: the machine's files read-only, its own /proc, a bare /dev, empty /tmp,
    /var/tmp, /run and judge's folder (the private directory bound back, writable)."""
    size = int(plan.get("tmpfs_mb") or 64)
    if flags & ns.CLONE_NEWNS:
        ns.mount(None, "/", None, ns.MS_REC | ns.MS_PRIVATE)  # nothing mounted here shows outside
        try:
            # First: what is mounted from here on (/proc, /dev, the tmpfs) is the grading's own.
            ns.read_only("/")
            facts["readonly"] = True
        except OSError as error:
            facts["view_errors"].append(f"read-only: {error}")
        facts["proc"] = bool(flags & ns.CLONE_NEWPID) and ns.private_proc()
        extra = sorted(f"/dev/{n}" for n in os.listdir("/dev") if n.startswith("nvidia")) if plan.get("cuda") else []
        facts["devices"] = ns.private_dev(extra, size)
        facts["dev"] = True
        writable = (os.path.realpath(private_dir),)
        for directory in hidden:
            ns.hide(directory, keep, 0o1777 if directory in ("/tmp", "/var/tmp") else 0o755, size, writable)
        facts["hidden"] = hidden
        facts["covered"] = views.cover_files(list(plan.get("hidden_files") or []))  # an error here is fatal
        _views(facts, flags, plan)
    elif plan.get("uid") is not None and os.geteuid() == 0:
        # No mount namespace to show a Python installation that the new uid cannot reach.
        blocked = sorted({b for p in roots for b in [ns.blocked_ancestor(p, plan["uid"], plan["gid"])] if b})
        if blocked:
            raise OSError(
                f"the submission runs as uid {plan['uid']}, which cannot read {blocked[0]} (where Python or the"
                " grader lives), and this machine allows no mount namespace to show it: make it readable by"
                " other users (chmod o+rx), or run the grader as an unprivileged user"
            )


def _views(facts: dict[str, Any], flags: int, plan: dict[str, Any]) -> None:
    """The host's name, /proc, /sys and the work folder as the submission sees them (views.py).

    Each one that the kernel refuses is left as it was and said in `facts` (the isolation
    summary shows it); none of them stops the grading.
    """
    if flags & ns.CLONE_NEWUTS:
        try:
            ns.set_hostname(ns.HOSTNAME)
        except OSError as error:
            facts["view_errors"].append(f"hostname: {error}")
    if facts["proc"]:
        try:
            facts["proc_masked"] = views.mask_proc(plan.get("memory_mb"), bool(plan.get("cuda")))
        except OSError as error:
            facts["view_errors"].append(f"/proc: {error}")
    try:
        facts["sys"] = views.replace_sys(bool(plan.get("cuda")))
    except OSError as error:
        facts["view_errors"].append(f"/sys: {error}")
    workdir = plan.get("workdir")
    if workdir and plan.get("disk_mb"):
        uid, gid = plan.get("uid"), plan.get("gid")
        owner = (uid, gid) if uid is not None and gid is not None and not flags & ns.CLONE_NEWUSER and os.geteuid() == 0 else None
        try:
            facts["disk"] = views.private_work(workdir, int(plan["disk_mb"]), int(plan.get("inodes") or 10000), owner)
            os.chdir(workdir)  # the zygote's folder is the tmpfs, not the folder it covers
        except OSError as error:
            facts["view_errors"].append(f"work folder: {error}")


def _quiet(devnull: int) -> None:
    """What a process that runs no submission code does once its child is started."""
    for sig in IGNORED:
        signal.signal(sig, signal.SIG_IGN)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)  # the judge reads the submission's output until every writer is gone


def _nest(init: int, keep: dict[str, int], devnull: int) -> None:
    for fd in keep.values():
        os.close(fd)
    _quiet(devnull)
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # nothing below may ptrace or read it
    os.closerange(3, 1 << 16)
    while True:
        try:
            pid, status = os.waitpid(init, 0)
        except ChildProcessError:
            os._exit(0)
        if pid == init:
            os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def _init(zygote: int, devnull: int) -> None:
    _quiet(devnull)
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    os.closerange(3, 1 << 16)
    code = 0
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(code)  # nothing left below: as PID 1 its exit ends the namespace
        if pid == zygote:
            code = os.waitstatus_to_exitcode(status) & 0xFF


def _keeper(nest: int, lifeline: int | None, private_dir: str, plan: dict[str, Any], up: int, down: int, drop: bool, devnull: int) -> None:
    flags = _read_flags(up)
    # What IPC objects exist before any submission code runs, for the sweep should the judge
    # die: needed only where no IPC namespace and no uid of its own set the submission apart.
    before = _sibling("ipc").snapshot() if not flags & ns.CLONE_NEWIPC and not drop else None
    answer = b"ok"
    if flags & ns.CLONE_NEWUSER:
        try:
            outside = (plan["uid"], plan["gid"]) if drop else (os.geteuid(), os.getegid())
            ns.map_ids(nest, *outside)
        except OSError as error:
            answer = str(error).encode()[:4000] or b"failed"
    try:
        os.write(down, answer)
    except OSError:
        pass
    os.close(up)
    os.close(down)
    _quiet(devnull)
    keep = {fd for fd in (lifeline, plan.get("uid_lock")) if fd is not None}  # the uid stays taken until the keeper is gone
    for fd in range(3, 1 << 10):
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
    status = 0
    while True:
        if lifeline is not None:
            ready, _, _ = select.select([lifeline], [], [], 0.25)
            if ready and not os.read(lifeline, 1):
                _clean_up_and_exit(private_dir, plan, before, drop)
        else:
            time.sleep(0.25)
        while True:
            try:
                pid, code = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                os._exit(status)
            if pid == 0:
                break
            if pid == nest:
                status = os.waitstatus_to_exitcode(code) & 0xFF


def _read_flags(fd: int) -> int:
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(fd, 64)
        if not chunk:
            return 0  # the nest died before unsharing anything
        data += chunk
    try:
        return int(data)
    except ValueError:
        return 0


def descendants(root: int) -> list[int]:
    """Every live process below `root` (its children, theirs, ...), read from /proc."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1 and fields[0] != b"Z":
            children.setdefault(int(fields[1]), []).append(int(name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def _clean_up_and_exit(private_dir: str, plan: dict[str, Any], before: Any, drop: bool) -> None:
    """The judge is gone: kill everything below, then remove what the grading left."""
    for _round in range(200):
        below = descendants(os.getpid())
        if not below:
            break
        for pid in below:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        _reap()
        time.sleep(0.002)
    cgroups, ipc = _sibling("cgroups"), _sibling("ipc")
    cgroups.kill(plan.get("cgroups") or [])
    _reap()
    shutil.rmtree(private_dir, ignore_errors=True)
    cgroups.remove(plan.get("cgroups") or [])
    if plan.get("uid_lock_path"):
        try:
            os.unlink(plan["uid_lock_path"])  # still locked by this process: whoever opens the name next gets a new file
        except OSError:
            pass
    if drop:
        ipc.sweep(plan["uid"])  # a uid of this grading alone: whatever it owns is the submission's
    elif before is not None:
        ipc.sweep(os.geteuid(), before, plan.get("since"))
    os._exit(0)


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
