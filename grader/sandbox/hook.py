"""The worker's audit hook (PEP 578): what reaches the grader's objects or the process's memory
is denied, with a RuntimeError at the call, and recorded for the judge.

Part of the grader's code in the graded process (machinery.py says how it is loaded: never a
module a cell can find).  Installed before the first cell; no Python code can remove an audit
hook.  Denied:

- the garbage collector's lists (gc.get_objects, get_referrers, get_referents), which reach
  every object, the grader's included;
- every thread's frames (sys._current_frames), once a session child has a grader thread;
- a frame of the grader's code, however reached (sys._getframe, a traceback's tb_frame, a
  generator's gi_frame, a coroutine's cr_frame, an async generator's ag_frame, walking f_back
  from any of them: the walk is checked at the audited step), and the code of its functions
  or frames (__code__, f_code; assigning them);
- tracing and profiling (sys.settrace, sys.setprofile, so %prun and cProfile too): a trace or
  profile function may rewrite the locals of any frame of its thread, the hook's own among them;
- a second audit hook (it would be handed every audited object, the grader's among them);
- a process's memory through a path (/proc/<pid>/mem, map_files) or through ctypes reading an
  address (from_address, string_at, PyObj_FromPtr, the interpreter's own C functions through
  ctypes.pythonapi).  Code objects made from bytes (code.__new__, code.replace) are not denied:
  torch.compile makes them, and raw memory is within reach anyway (docs/trust.md).

What CPython does not audit, and the hook therefore cannot see, is listed in docs/trust.md
(frame.f_back, function.__globals__, object.__subclasses__(), a signal handler's frame, and
raw memory through numpy's array interface or ctypes unions); the grader's code is laid out so
that none of them leads to it (machinery.py).
"""

import dis
from _thread import get_ident
from operator import is_
from os import getcwd, getpid
from sys import _getframe, getprofile, gettrace
from types import (
    AsyncGeneratorType,
    CoroutineType,
    FrameType,
    FunctionType,
    GeneratorType,
    MappingProxyType,
    TracebackType,
)

# What the hook reads and the grader thread writes: whether it is armed, the grader thread's id.
HOOK_STATE = {"armed": False, "grader_thread": -1}
# Denials recorded by the hook: (what, detail, where, pid, in the grader thread).
EVENTS = []

WATCHED = frozenset((
    "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames", "sys._getframe",
    "object.__getattr__", "object.__setattr__", "object.__delattr__", "sys.settrace", "sys.setprofile",
    "sys.addaudithook", "open", "ctypes.cdata", "ctypes.cdata/buffer", "ctypes.string_at", "ctypes.wstring_at",
    "ctypes.PyObj_FromPtr", "ctypes.dlsym",
))
FRAME_GETTERS = frozenset(("tb_frame", "gi_frame", "cr_frame", "ag_frame"))
MARK_KEY = "__pa_grader__"  # each namespace of the grader's code holds the hook's mark under this key
# Outside the grader thread the only grader frame a chain can hold is the hook's own, near its
# top (the hook raised, or a signal handler interrupted it): a walk looks this far down.
WALK = 32
LOCATING = object()  # the hook's mark while it looks up where a denied call was made


def make_hook(protected):
    """The audit hook; `protected`: the namespaces of the grader's own code (a frame with one of
    them as its globals is the grader's: each gets a mark only the hook holds).

    Everything it uses is a variable of this function's scope (a closure cell: no Python code
    can rebind one without the hook function itself, which nothing reaches, or a trace function,
    which is denied), and it runs with globals of its own that hold nothing: the frame of a
    running hook (which a signal handler could be given) leads to nothing that changes what it
    decides.  Its arguments may come from sys.audit() itself, so nothing of theirs is used
    before its exact type is known (no __hash__, __eq__ or attribute of the submission's runs
    here).  In the grader thread no student code has any business walking frames: there every
    frame access is denied.
    """
    _type, _is, _len, _str, _bytes, _getattr, _dict_get = type, is_, len, str, bytes, getattr, dict.get
    _runtime_error, _base_exception = RuntimeError, BaseException
    _gettrace, _getprofile, _get_ident, _getframe_, _getcwd, _getpid = gettrace, getprofile, get_ident, _getframe, getcwd, getpid
    _frame, _function, _traceback, _generator, _coroutine, _async_generator = (
        FrameType, FunctionType, TracebackType, GeneratorType, CoroutineType, AsyncGeneratorType)
    watched, frame_getters, events, locating, mark_key, walk = WATCHED, FRAME_GETTERS, EVENTS, LOCATING, MARK_KEY, WALK
    state = MappingProxyType(HOOK_STATE)
    examining = {}  # per thread: the object the hook itself is reading (its own audited reads pass)
    namespace = {"__builtins__": {}}
    mark = object()  # a frame whose globals hold it is the grader's (a dict lookup: id() is itself an audited call)
    for grader_namespace in (*protected, globals(), namespace):
        grader_namespace[mark_key] = mark
    denied = "not available while grading: it reaches the grader's own objects or the process's memory ("

    def hook(event, args):
        if not _is(_type(event), _str) or event not in watched:
            return
        if _gettrace() is not None or _getprofile() is not None:
            # Never the case (both are denied below): a trace function could rewrite this frame's locals.
            raise _runtime_error("auditing under a trace or profile function: denied while grading")
        if state["armed"] is not True:
            return
        tid = _get_ident()
        mine = examining.get(tid)
        grader = tid == state["grader_thread"]
        what = None
        if event == "object.__getattr__" or event == "sys._getframe":
            holder = args[0]
            name = args[1] if event == "object.__getattr__" else "sys._getframe"
            if not grader and (holder is mine or (event == "sys._getframe" and mine is locating)):
                return  # the hook's own reads, below
            frame = None
            if not _is(_type(name), _str):
                pass
            elif event == "sys._getframe":
                frame = holder
            elif name in frame_getters:
                kind = _type(holder)
                if _is(kind, _traceback) or _is(kind, _generator) or _is(kind, _coroutine) or _is(kind, _async_generator):
                    if grader:
                        what = ("frame", name)
                    else:
                        examining[tid] = holder
                        try:
                            frame = _getattr(holder, name)
                        finally:
                            examining.pop(tid, None)
            elif name == "f_code":
                if _is(_type(holder), _frame) and _dict_get(holder.f_globals, mark_key) is mark:
                    what = ("code", "f_code")
            elif name == "__code__":
                if _is(_type(holder), _function) and _dict_get(holder.__globals__, mark_key) is mark:
                    what = ("code", "__code__")
            if grader and event == "sys._getframe":
                what = ("frame", name)
            depth = 0
            while what is None and depth < walk and _is(_type(frame), _frame):
                if _dict_get(frame.f_globals, mark_key) is mark:
                    what = ("frame", name)
                frame = frame.f_back
                depth += 1
        elif event == "object.__setattr__" or event == "object.__delattr__":
            if _is(_type(args[0]), _function) and _dict_get(args[0].__globals__, mark_key) is mark:
                what = ("code", args[1] if _is(_type(args[1]), _str) else "?")
        elif event == "gc.get_objects" or event == "gc.get_referrers" or event == "gc.get_referents":
            what = ("gc", event)
        elif event == "sys._current_frames":
            if state["grader_thread"] != -1:
                what = ("frames", event)
        elif event == "sys.settrace" or event == "sys.setprofile":
            what = ("trace", event)
        elif event == "sys.addaudithook":
            what = ("audit", event)
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
        if not grader:
            examining[tid] = locating
            try:
                frame = _getframe_(1)
                examining[tid] = frame
                where = frame.f_code.co_filename[:200] + ":" + _str(frame.f_lineno)
            except _base_exception:
                pass
            finally:
                examining.pop(tid, None)
        if _len(events) < 1000:
            events.append((what[0], what[1], where, _getpid(), grader))
        raise _runtime_error(denied + what[1] + ")")

    loads = {i.opname for i in dis.get_instructions(hook)} & {"LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL", "DELETE_GLOBAL"}
    if loads:
        raise AssertionError(f"the audit hook reads through its globals: {sorted(loads)}")
    return FunctionType(hook.__code__, namespace, "hook", None, hook.__closure__)
