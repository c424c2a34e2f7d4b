"""The process that runs a submission's code.  Started as a script, never imported by the judge.

    python -u -s -P worker.py                  (the plan, JSON, on standard input)
    python -u -s -P worker.py --template REQUESTS_FD

The plan (client.Sandbox._plan: the judge's socket, the lifeline's descriptor, the cgroups,
the uid and its lock, ...) comes on standard input, never in the arguments or the
environment, which the submission can read (/proc/self/cmdline); once the sandbox is built
the worker keeps only the socket's path.  The second form is a batch's warm *template*
(warm.py): it imports what the first form imports before it connects (torch, spawn.py),
once, and then forks on request a child that takes the grading's descriptors, environment,
directory and plan and goes on exactly as the first form would.  It never runs submission code.

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
  ptrace to anything outside the sandbox, no TCP), goes into its copy of the notebook's
  folder, runs the notebook's cells once through IPython and then waits for "fork" orders;
- *session children*, one per order, each answering operations (call this method, run that
  function) one at a time over its own connection, each shut into a Landlock domain of its
  own so that it cannot signal the zygote or another session.

It uses only the standard library, torch and IPython (shell.py: the cells run through IPython's
InteractiveShell as in a Jupyter kernel), and the judge trusts nothing it says: every
answer is an observation to be checked, never a verdict.  What the judge measures itself
(whether paged_attention changed its inputs) it reads from memory it shares with the child.

What the grader's own code in this process observes (earlier results, the caller's edits, the
views of the judge's files, the given code as bound) is done by machinery.py, which this file
reads now and arms before the first cell, out of every cell's reach: an audit hook, and a
grader thread in each session child that signs what it tells the judge (docs/trust.md).
"""

# Bound here, before any cell can reassign them in the builtins module: the worker's own code
# keeps working whatever a submission does to `builtins`.
from builtins import (  # noqa: I001, UP029
    BaseException,
    EOFError,
    SystemExit,
    ImportError,
    any,
    bool,
    dict,
    int,
    isinstance,
    len,
    str,
    type,
)
import _thread
import builtins
import ctypes
import json
import os
import random
import signal
import socket
import sys
import time
import types
import warnings

CONTRACT = ("estimate_kv_cache_bytes", "Request", "KVCacheManager", "paged_attention")
_exit = os._exit
_fork = os.fork
blocked_attempts = []


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


# The worker's other rooms, loaded by path once (a warm template already has them).
wire = _sandbox_module("wire")
_sandbox_module("seccomp")  # confine.py's
confinement = _sandbox_module("confine")
# IPython, which runs the cells (its import is a tenth of torch's; it starts no thread, so spawn.py
# can still unshare).  Read now: in the worker's mount namespace the grader's files may be hidden.
shell_module = _sandbox_module("shell")
# The grader's own code in the graded process (machinery.py and the two modules it imports),
# compiled now, while its files can be read, and executed before the first cell (arm_machinery).
MACHINERY = {}
for _name in ("hook", "readings", "answers", "machinery"):
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{_name}.py"), encoding="utf-8") as _source:
        MACHINERY[_name] = compile(_source.read(), f"<grader {_name}>", "exec", dont_inherit=True)
BLOCKED_TOP_LEVEL = confinement.BLOCKED_TOP_LEVEL
send, recv, connect, describe_error, _safe_str, _dumps = wire.send, wire.recv, wire.connect, wire.describe_error, wire._safe_str, wire._dumps
confine, scope_session, _read_roots = confinement.confine, confinement.scope_session, confinement._read_roots
_libc, PR_SET_DUMPABLE = confinement._libc, confinement.PR_SET_DUMPABLE


# --- import guard: the answer key and the grader are not importable from here ----------

class _BlockAnswerKey:
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in BLOCKED_TOP_LEVEL:
            blocked_attempts.append(fullname)
            raise ImportError(f"import of {fullname!r} is not allowed in a graded submission")
        return None


def become_reaper(plan):
    """Split into the worker's keeper, nest and init (spawn.py: they never return) and the zygote.

    `plan["lifeline"]` is the read end of a pipe whose write end only the judge holds: when the
    judge goes away, however it dies, the keeper sees end-of-file, kills everything below itself
    and removes the judge's private directory (the one holding the socket) and the cgroup.
    Returns, in the zygote, what spawn.enter() put in force.
    """
    private_dir = os.path.dirname(plan["socket"])
    return _sandbox_module("spawn").enter(plan, plan.get("lifeline"), private_dir, _read_roots())


def read_plan():
    """The plan on standard input (all of it: the judge closed its end), then /dev/null there."""
    data = b""
    while chunk := os.read(0, 65536):
        data += chunk
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return json.loads(data)


# --- start-up: run the cells, then serve forks ----------------------------------------

def notebook_namespace(notebook=True):
    """The namespace cells run in: IPython's user namespace, as a Jupyter kernel has it (shell.py)."""
    return shell_module.make_shell(notebook).user_ns


def enter_notebook_folder(load):
    """Go where a kernel started next to the notebook would be: the judge's copy of its folder
    (a folder of the work directory), with '' on sys.path where IPython puts it."""
    cwd = load.get("cwd")
    workdir = os.path.realpath(load["workdir"])
    if isinstance(cwd, str) and os.path.realpath(cwd).startswith(workdir + os.sep) and os.path.isdir(cwd):
        os.chdir(cwd)
        wire.SOURCE_ROOTS[:] = [os.path.realpath(cwd) + os.sep]
    shell_module.add_working_directory()


def run_cells(sock, cells, shell):
    """Every cell in order, each as a kernel runs it (shell.execute); one that raises is reported
    and the next still runs (so a broken scratch cell costs only itself), except sys.exit():
    the author asked to stop there, and Jupyter's Run All stops there too.  Lines that were not
    run (shell commands, installs, debuggers) are reported as they happen."""
    import asyncio

    execute = shell_module.execute

    def report_skipped(index, line, text, reason):
        # Only this kind of event, built here: the shell is the notebook's (get_ipython()).
        send(sock, {"event": "skipped", "index": int(index), "line": line if type(line) is int else None,
                    "text": _safe_str(text)[:300], "reason": _safe_str(reason)[:20]})

    shell.on_skip = report_skipped

    async def run_all():
        for index, source in cells:
            if not source.strip():
                continue  # a kernel is never sent an empty cell (nbclient skips it)
            send(sock, {"event": "cell_start", "index": index})
            try:
                error = await execute(shell, index, source)
            except BaseException as raised:  # what even IPython let through
                error = raised
            if error is None:
                send(sock, {"event": "cell_done", "index": index})
                continue
            send(sock, {"event": "cell_done", "index": index, "error": describe_error(error)})
            if isinstance(error, SystemExit):
                return

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(run_all())
    finally:
        shell.on_skip = None
        asyncio.set_event_loop(None)
        loop.close()  # its descriptors go before the session children are forked


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
    """Every random state as at the start (before the first cell; each example starts so too)."""
    import torch

    random.seed(0)
    torch.manual_seed(0)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed(0)


def arm_machinery(key, path, namespace):
    """Execute machinery.py and its companions as modules that no sys.modules entry keeps, and arm
    them (the audit hook; a grader thread started by every fork): the last thing before the first
    cell.  What this returns is the main thread's part in a session child: the lock that lets its
    grader thread start and the list it reads the session's number from."""
    import torch

    modules = {}
    try:
        for name, code in MACHINERY.items():
            module = types.ModuleType(f"_pa_grader_{name}")
            module.__builtins__ = dict(builtins.__dict__)  # its own: a cell may rebind the builtins module's names
            sys.modules[module.__name__] = module
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                exec(code, module.__dict__)
            modules[name] = module
    finally:
        for name in MACHINERY:
            sys.modules.pop(f"_pa_grader_{name}", None)
        # The compiled code is the grader's own: once executed, nothing of this module keeps it
        # (a cell walking frames to main()'s globals found it, and wrote its bytes; red team 14).
        MACHINERY.clear()
    ready, number = _thread.allocate_lock(), [None]
    ready.acquire()
    # torch's CPU generator seeded by its own C method: torch.manual_seed also queues a seed for
    # CUDA devices not yet started, with a formatted stack each time (0.3 ms of every example).
    # A CUDA grading seeds the devices too.
    seeds = [random.seed, torch.random.default_generator.manual_seed]
    if os.environ.get("CUDA_VISIBLE_DEVICES") != "":
        seeds.append(torch.cuda.manual_seed_all)
    seeds += [sys.modules["numpy"].random.seed] if "numpy" in sys.modules else []
    modules["machinery"].install(bytes.fromhex(key), path, namespace, seeds, wire.traceback_text, ready, number,
                                 [vars(m) for m in modules.values()])
    return ready, number


def park():
    """A session child's main thread, once its grader thread runs: nothing (signal handlers the
    cells installed still run here, in frames that lead to nothing of the grader's)."""
    while True:
        time.sleep(3600)


def main(plan, forked=False):
    """Run one grading's worker; `forked`: this process is a child of a warm template."""
    path = plan["socket"]
    facts = become_reaper(plan)
    plan.clear()  # nothing of the judge's stays where a cell could find it (the socket's path aside)
    if facts.get("fatal"):  # never run a cell in a sandbox that could not be built
        control = connect(path)
        recv(control)
        send(control, {"event": "confined", "fatal": facts["fatal"]})
        return
    if forked:
        own_inherited_memory()
    _prepare()
    _signals_as_python_starts()
    import torch

    control = connect(path)
    load = recv(control)
    key = load.pop("key", None)
    send(control, {"event": "confined", **confine(load, facts)})
    enter_notebook_folder(load)
    shell = shell_module.make_shell(load.get("notebook", True) is not False)
    reseed()
    ready, number = arm_machinery(key if isinstance(key, str) else "00", path, shell.user_ns)
    del key
    run_cells(control, [(c["index"], c["source"]) for c in load["cells"]], shell)
    namespace = shell.user_ns
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
        if _fork() == 0:  # the fork started this child's grader thread (machinery.py); it waits for `ready`
            try:
                control.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                scope_session()
                number[0] = order.get("session")
                ready.release()
                park()
            finally:
                _exit(0)


def _signals_as_python_starts():
    """Every signal as a fresh Python has it under a parent that ignores and blocks nothing.  What
    the judge ignored or blocked passes through exec and what the template set through fork: the
    cells must see neither (a cold and a warm worker alike)."""
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    for sig in signal.valid_signals():
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            try:
                signal.signal(sig, signal.SIG_DFL)
            except (OSError, ValueError):
                pass  # one the C library keeps for itself
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.default_int_handler)


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
    spawn.py and torch; IPython with the worker's own modules), and nothing else.  No submission's code or data ever reaches this
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
                return  # an older kernel: the pages stay shared (docs/speed.md)
            i = j


def _as_fresh_worker(request, fds):
    """In a child of the template: become what `python -u -s -P worker.py` started by the judge
    would be (client.Sandbox._start_worker), then run as it does."""
    out, err, lifeline, *lock = fds
    _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # as a process that Popen started
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    for fd, target in ((null, 0), (out, 1), (err, 2)):
        os.dup2(fd, target)
        os.close(fd)
    plan = dict(request["plan"])
    plan["uid_lock"] = lock[0] if lock else None  # the lock's descriptor here, not the judge's
    plan["lifeline"] = lifeline
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    request.clear()  # the request's frames stay below the cells': nothing of the judge's in them
    if "tempfile" in sys.modules:
        sys.modules["tempfile"].tempdir = None  # found again from TMPDIR, as in a fresh process
    sys.argv = [os.path.abspath(__file__)]
    sys.orig_argv[:] = sys.orig_argv[:5]  # python -u -s -P worker.py, less --template and its descriptor
    sys.modules.pop("_pa_sandbox_forkserver", None)
    try:
        main(plan, forked=True)
    except (EOFError, BrokenPipeError, ConnectionError):
        pass
    _exit(0)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--template"]:
        template(int(sys.argv[2]))
    try:
        main(read_plan())
    except (EOFError, BrokenPipeError, ConnectionError):
        pass
    _exit(0)
