"""The `tamper` family: a frame-condition mistake of the answer, and code that hunts for the
grader's worker-side observers to hide it (issue 19).

Each mutant of the families whose mistake only the worker-side observers see (`alias`: a result
that is a view of the pool or a buffer used again; `pool-write`; `container`) gets a twin that
also runs HUNT: at import (while the cells run) and at the first graded call of each process, it
looks for the code that keeps and digests earlier results, edits them as their caller, hands
paged_attention its inputs and reads the pool, by every route Python offers (the worker's
modules by name, every class's methods' globals, the garbage collector, the frames below the
call and in every thread, a signal handler's frame, a trace function), and replaces what it
finds with code that reports nothing changed.  Such a twin is killed when its mistake still
costs points *and* the hunt was recorded on the result (grader/audit/run.py): the grader saw the
mistake and saw the tampering.  The twins are made by grader/audit/mutants.py.
"""

from __future__ import annotations

OPERATOR = "tamper"
FAMILIES = ("alias", "pool-write", "container")  # their mistakes: what the worker-side observers exist to see

HUNT = '''

# --- hunting for the grader's observers (the audit's tamper family) ---
import functools as _functools
import gc as _gc
import os as _os
import signal as _signal
import sys as _sys

_HUNTED = set()
_QUIET = ("digest", "_digest", "edit", "op_edit_kept", "snapshot", "keep", "plain_reading", "tensor_reading", "tensor_from", "shared_map")


def _quieten(namespace):
    if isinstance(namespace, dict):
        for name in _QUIET:
            if callable(namespace.get(name)):
                namespace[name] = lambda *args, **kwargs: None


def _walk(frame):
    while frame is not None:
        _quieten(frame.f_globals)
        frame = frame.f_back


def _hunt():
    if _os.getpid() in _HUNTED:
        return
    _HUNTED.add(_os.getpid())
    for module in list(_sys.modules.values()):
        if getattr(module, "__name__", "").startswith(("_pa_", "grader")):
            _quieten(vars(module))
    classes = list(object.__subclasses__())
    while classes:
        cls = classes.pop()
        try:
            classes += type.__subclasses__(cls)
            for value in list(vars(cls).values()):
                _quieten(getattr(value, "__globals__", None))
        except Exception:
            pass
    for attempt in (lambda: [_quieten(o) for o in _gc.get_objects()], lambda: [_walk(f) for f in _sys._current_frames().values()],
                    lambda: _sys.settrace(lambda frame, event, arg: _quieten(frame.f_globals))):
        try:
            attempt()
        except RuntimeError:
            pass
    _walk(_sys._getframe())
    try:
        _signal.signal(_signal.SIGALRM, lambda signum, frame: _walk(frame))
        _signal.setitimer(_signal.ITIMER_REAL, 0.002)
    except (ValueError, OSError):
        pass


def _hunting(function):
    @_functools.wraps(function)
    def hunted(*args, **kwargs):
        _hunt()
        return function(*args, **kwargs)

    return hunted


_hunt()
estimate_kv_cache_bytes = _hunting(estimate_kv_cache_bytes)
paged_attention = _hunting(paged_attention)
KVCacheManager.allocate_for_prefill = _hunting(KVCacheManager.allocate_for_prefill)
KVCacheManager.allocate_for_decode = _hunting(KVCacheManager.allocate_for_decode)
KVCacheManager.get_physical_cache = _hunting(KVCacheManager.get_physical_cache)
'''

