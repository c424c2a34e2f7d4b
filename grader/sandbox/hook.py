"""The worker's audit hook (PEP 578): what reaches the grader's objects or the process's memory
is denied, with a RuntimeError at the call, and recorded for the judge.

Part of the grader's code in the graded process (machinery.py says how it is loaded: never a
module a cell can find).  Installed before the first cell; no Python code can remove an audit
hook.  Denied:

- the garbage collector's lists (gc.get_objects, get_referrers, get_referents), which reach
  every object, the grader's included;
- every thread's frames (sys._current_frames) in a session child, from its fork on (before its
  grader thread starts: a fork hook of the submission's runs after the grader's);
- a frame of the grader's code (sys._getframe, walking f_back: a frame whose chain holds one, 32
  frames down, is refused), and on a thread whose chain holds one, any frame from a traceback,
  generator, coroutine or async generator (tb_frame, gi_frame, cr_frame, ag_frame); on the
  grader thread, every frame access (no code of the submission's runs there);
- assigning the code, defaults or anything else of a function of the grader's;
- tracing and profiling (sys.settrace, sys.setprofile, so %prun and cProfile too): a trace or
  profile function may rewrite the locals of any frame of its thread;
- a second audit hook (it would be handed every audited object, the grader's among them);
- a process's memory through a path (/proc/<pid>/mem, map_files) or through ctypes reading an
  address (from_address, string_at, PyObj_FromPtr, the interpreter's own C functions through
  ctypes.pythonapi).  Code objects made from bytes (code.__new__, code.replace) are not denied:
  torch.compile makes them, and raw memory is within reach anyway (docs/trust.md).

The hook's own frame is reachable: a signal handler is handed whatever frame runs when the
signal is handled, the hook's among them, and a denial's traceback holds it.  So it holds
nothing a submission could use: every variable it reads is a closure cell holding an immutable
value (a frame's f_locals shows the values, never the cells), and the cells it rebinds (whether
it is armed, the grader thread, the denials recorded) belong to the hook function alone, which
nothing reaches.  The grader's other code talks to it through sys.audit() (`arm`,
`claim_grader_thread`, `recorded` below): a cell may do the same, and gains nothing by it
(arming is one-way, reading the records is harmless, and a claim of the grader thread without
the judge's key, which only its digest in the hook stands for, is denied and recorded).  A function sharing those cells would hand them out
(__closure__, cell_contents: neither is audited).  The hook reads no frame or attribute that
CPython audits (no recursion into itself to tell apart, which would need state a submission
could set), except sys._getframe(1) to say where a denial was made, checked like any other.

What CPython does not audit, and the hook therefore cannot see, is listed in docs/trust.md
(frame.f_back, f_locals, function.__globals__, object.__subclasses__(), a signal handler's
frame, and raw memory through numpy's array interface or ctypes unions); the grader's code is
laid out so that none of them leads to it (machinery.py).
"""

import dis
from _hashlib import compare_digest, openssl_sha256
from _thread import get_ident
from operator import is_
from os import getcwd, getpid
from sys import _getframe, audit, getprofile, gettrace, setprofile, settrace
from types import (
    AsyncGeneratorType,
    CoroutineType,
    FrameType,
    FunctionType,
    GeneratorType,
    TracebackType,
)

# The hook's controls: audit events it answers (before anything else, armed or not).
ARM, CLAIM, RECORDED, FORKED = "pa_grader.arm", "pa_grader.claim", "pa_grader.recorded", "pa_grader.forked"
# sys.settrace and sys.setprofile as grading has them (make_quiet_setters), filled by make_hook.
QUIET = {}

WATCHED = frozenset((
    "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames", "sys._getframe",
    "object.__getattr__", "object.__setattr__", "object.__delattr__", "sys.settrace", "sys.setprofile",
    "sys.addaudithook", "open", "ctypes.cdata", "ctypes.cdata/buffer", "ctypes.string_at", "ctypes.wstring_at",
    "ctypes.PyObj_FromPtr", "ctypes.dlsym", ARM, CLAIM, RECORDED, FORKED,
))
FRAME_GETTERS = frozenset(("tb_frame", "gi_frame", "cr_frame", "ag_frame"))
MARK_KEY = "__pa_grader__"  # each namespace of the grader's code holds the hook's mark under this key
# A frame's chain is looked at this far down: outside the grader thread no frame of the grader's
# is ever below the submission's, so a walk finds none, and it stays linear in a deep traceback.
WALK = 32
MAX_RECORDS = 1000


def make_hook(protected, key):
    """The audit hook; it answers three events of its own: ARM (armed from then on), CLAIM with
    `key` (the calling thread is this process's grader thread; without the key, denied and
    recorded) and RECORDED (appends the denials so far, a tuple of (what, detail, where, pid, in
    the grader thread), to the list it is handed).  `protected`: the namespaces of the grader's
    own code (a frame with one of them as its globals is the grader's: each gets a mark only the
    hook holds).  `key`: the judge's key for this worker; the hook keeps its digest only (its
    frame shows its values).

    Everything the hook uses is a closure cell of this scope and it runs with globals of its own
    that hold nothing, so its frame (which a signal handler may be given) shows only immutable
    values.  Its arguments may come from sys.audit() itself, so nothing of theirs is used before
    its exact type is known (no __hash__, __eq__ or attribute of the submission's runs here).
    """
    _type, _is, _len, _str, _bytes, _dict_get = type, is_, len, str, bytes, dict.get
    _runtime_error, _base_exception, _list, _append = RuntimeError, BaseException, list, list.append
    _sha256, _same = openssl_sha256, compare_digest
    key_digest = openssl_sha256(b"pa-grader-claim" + key).digest()
    _gettrace, _getprofile, _get_ident, _getframe_, _getcwd, _getpid = gettrace, getprofile, get_ident, _getframe, getcwd, getpid
    _frame, _function, _traceback, _generator, _coroutine, _async_generator = (
        FrameType, FunctionType, TracebackType, GeneratorType, CoroutineType, AsyncGeneratorType)
    watched, frame_getters, mark_key, walk, max_records = WATCHED, FRAME_GETTERS, MARK_KEY, WALK, MAX_RECORDS
    arm_event, claim_event, recorded_event, forked_event = ARM, CLAIM, RECORDED, FORKED
    mark = object()  # a frame whose globals hold it is the grader's (a dict lookup: id() is itself an audited call)
    for grader_namespace in (*protected, globals()):
        grader_namespace[mark_key] = mark
    QUIET.update(make_quiet_setters())
    quiet_codes = (QUIET["settrace"].__code__, QUIET["setprofile"].__code__)
    denied = "not available while grading: it reaches the grader's own objects or the process's memory ("
    # Rebound by the hook alone (nonlocal): no other function holds these cells, and a frame shows their values only.
    armed, grader_thread, records = False, -1, ()

    def hook(event, args):
        nonlocal armed, grader_thread, records
        if not _is(_type(event), _str) or event not in watched:
            return
        if event == recorded_event:
            if _len(args) == 1 and _is(_type(args[0]), _list):
                _append(args[0], records)
            return
        if event == arm_event:
            armed = True
            return
        if _gettrace() is not None or _getprofile() is not None:
            # Never the case (both are denied below): a trace function could rewrite this frame's locals.
            raise _runtime_error("auditing under a trace or profile function: denied while grading")
        if armed is not True:
            return
        if event == forked_event:
            # A session child, its grader thread not started yet: frames are denied from now on
            # (0 is no thread's ident), so a fork hook of the submission's, which runs after the
            # grader's, cannot read the waiting grader thread's frames.  One-way: a claimed
            # thread stays the grader's, and a cell sending it in the parent denies itself only.
            if grader_thread == -1:
                grader_thread = 0
            return
        if event == claim_event:
            claim = args[0] if _len(args) == 1 else None
            if _is(_type(claim), _bytes) and _same(_sha256(b"pa-grader-claim" + claim).digest(), key_digest):
                grader_thread = _get_ident()
                return
        grader = _get_ident() == grader_thread
        what = None
        located = None  # the frame a denial is said to be made at, when known without sys._getframe
        if event == "sys._getframe":
            if grader:
                what = ("frame", event)
            frame = args[0] if _len(args) else None
            if not grader and _is(_type(frame), _frame) and _dict_get(frame.f_globals, mark_key) is not mark:
                located = frame  # the frame asked for, the caller's or one below it (the hook's own call, below, is one)
            depth = 0
            while what is None and depth < walk and _is(_type(frame), _frame):
                if _dict_get(frame.f_globals, mark_key) is mark:
                    what = ("frame", event)
                frame = frame.f_back
                depth += 1
        elif event == "object.__getattr__":
            name = args[1] if _len(args) > 1 else None
            if _is(_type(name), _str) and name in frame_getters:
                kind = _type(args[0])
                if _is(kind, _traceback) or _is(kind, _generator) or _is(kind, _coroutine) or _is(kind, _async_generator):
                    if grader:
                        what = ("frame", name)
                    else:
                        # Refused where the thread's own chain holds a frame of the grader's (the
                        # sys._getframe below is checked as above; the object's frame itself is
                        # not read: that read would be audited in turn).
                        try:
                            _getframe_(1)
                        except _runtime_error as error:  # not a RecursionError: the hook's own denial, recorded
                            if _is(_type(error), _runtime_error):
                                what = ("frame", name)
                                grader = None  # where: the record just made says
                        except _base_exception:  # no Python frame below (C code reading it): nothing to walk
                            pass
        elif event == "object.__setattr__" or event == "object.__delattr__":
            if _is(_type(args[0]), _function) and _dict_get(args[0].__globals__, mark_key) is mark:
                what = ("code", args[1] if _is(_type(args[1]), _str) else "?")
        elif event == "gc.get_objects" or event == "gc.get_referrers" or event == "gc.get_referents":
            what = ("gc", event)
        elif event == "sys._current_frames":
            if grader_thread != -1:
                what = ("frames", event)
        elif event == "sys.settrace" or event == "sys.setprofile":
            what = ("trace", event)
        elif event == "sys.addaudithook":
            what = ("audit", event)
        elif event == claim_event:
            what = ("audit", "claiming the grader thread")
        elif event == "open":
            path = args[0] if _len(args) else None
            if _is(_type(path), _bytes):
                path = path.decode("utf-8", "replace")
            if _is(_type(path), _str):
                if not path.startswith("/"):
                    path = _getcwd() + "/" + path
                parts = path.split("/")
                if "proc" in parts and ("mem" in parts or "map_files" in parts):
                    what = ("memory", path[:200])
        elif event == "ctypes.dlsym":
            name = args[1] if _len(args) > 1 else None
            if _is(_type(name), _str) and (name.startswith("Py") or name.startswith("_Py")):
                what = ("memory", "ctypes.pythonapi." + name[:80])
        else:  # ctypes reading or writing an address
            what = ("memory", event)
        if what is None:
            return
        where = ""
        if grader is False:
            try:
                # Where the denied call was made: for sys._getframe the frame asked for (a
                # sys._getframe here would be checked in turn, and denied again); else its caller.
                frame = located if located is not None else _getframe_(1)
                code = frame.f_code
                if code is quiet_codes[0] or code is quiet_codes[1]:  # sys.settrace as grading has it: its caller's line
                    frame = frame.f_back
                    code = frame.f_code
                where = code.co_filename[:200] + ":" + _str(frame.f_lineno)
            except _base_exception:
                pass
        if _len(records) < max_records:
            records = records + ((what[0], what[1], where, _getpid(), grader is True),)
        raise _runtime_error(denied + what[1] + ")")

    loads = {i.opname for i in dis.get_instructions(hook)} & {"LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL", "DELETE_GLOBAL"}
    if loads:
        raise AssertionError(f"the audit hook reads through its globals: {sorted(loads)}")
    return FunctionType(hook.__code__, {"__builtins__": {}}, "hook", None, hook.__closure__)


def arm():
    """From now on the hook denies (install: the last thing before the first cell)."""
    audit(ARM)


def forked():
    """This process is a session child whose grader thread is about to start: every thread's
    frames denied from now on (the grader's fork hook, before it starts the thread)."""
    audit(FORKED)


def claim_grader_thread(key):
    """The calling thread is this process's grader thread (every frame access denied there);
    `key`: the one make_hook was given."""
    audit(CLAIM, key)


def recorded():
    """The denials recorded in this process so far (none where the hook is not installed)."""
    box = []
    audit(RECORDED, box)
    return box[0] if box else ()


def make_quiet_setters():
    """sys.settrace and sys.setprofile as grading has them: setting none where none is set changes
    nothing and raises no audit event (doctest restores the trace function it found this way);
    anything else goes to the real one, which the hook denies.  A scope of their own: they are the
    submission's to reach (sys's attributes), and no cell of theirs is one of the hook's."""
    _gettrace, _getprofile, _settrace, _setprofile = gettrace, getprofile, settrace, setprofile

    def quiet_settrace(function):
        if function is None and _gettrace() is None:
            return None
        return _settrace(function)

    def quiet_setprofile(function):
        if function is None and _getprofile() is None:
            return None
        return _setprofile(function)

    namespace = {"__builtins__": {}}
    return {
        "settrace": FunctionType(quiet_settrace.__code__, namespace, "settrace", None, quiet_settrace.__closure__),
        "setprofile": FunctionType(quiet_setprofile.__code__, namespace, "setprofile", None, quiet_setprofile.__closure__),
    }
