"""The grader's own code in the worker (grader/sandbox/hook.py, readings.py, answers.py, machinery.py) and what
the judge makes of tampering with it (grader/tampering.py): quick tests, no grading.

The audit hook is installed in a fresh interpreter (an audit hook cannot be removed, so never in
this one), armed as the worker arms it, and every route to the grader's objects that CPython
audits is tried there: each must raise, be recorded, and leave the hook in force; the routes
CPython does not audit must lead nowhere (docs/trust.md, "Trust map").
"""

from __future__ import annotations

import base64
import dis
import hashlib
import json
import os
import socket
import struct
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grader import tampering
from grader.checks.frame import plain_digest, tensor_digest
from grader.results import FAILED, PASSED, ItemResult, Text
from grader.sandbox import protocol, wire
from grader.sandbox.clock import Budget
from grader.sandbox.session import Session, _share_inputs, with_fds
from tests import machinery_kit
from tests.conftest import ROOT

KIT = machinery_kit.machinery()
READINGS = KIT.MODULES["readings"]


# --- the hook, armed in a fresh interpreter ---------------------------------------------------

ATTACKS = r'''
import ctypes, gc, json, os, signal, sys, threading, types
sys.path.insert(0, ROOT)
from tests import machinery_kit
kit = machinery_kit.machinery()
ready = __import__("_thread").allocate_lock(); ready.acquire()
kit.install(b"k" * 32, "/nonexistent", {}, [], None, ready, [None], [vars(m) for m in kit.MODULES.values()])
out = {}

def attempt(name, action):
    try:
        action()
        out[name] = "allowed"
    except RuntimeError as error:
        out[name] = "denied" if "not available while grading" in str(error) else f"RuntimeError {error}"
    except Exception as error:
        out[name] = type(error).__name__

# A function of the grader's (its globals: the machinery's namespace) that calls what it is given,
# as the grader's thread would if it ever ran the submission's code.
grader_call = types.FunctionType((lambda f: f()).__code__, vars(kit), "grader_call")

def grader_generator():
    yield 1
grader_generator = types.FunctionType(grader_generator.__code__, vars(kit), "grader_generator")

attempt("gc.get_objects", gc.get_objects)
attempt("gc.get_referrers", lambda: gc.get_referrers(os.fork))
attempt("gc.get_referents", lambda: gc.get_referents(kit))
attempt("sys.settrace", lambda: sys.settrace(lambda *a: None))
attempt("sys.setprofile", lambda: sys.setprofile(lambda *a: None))
recorded = kit.MODULES["hook"].recorded
hooks_before = len(recorded())
sys.addaudithook(lambda *a: None)  # a RuntimeError from the hook: the new hook silently not added
out["sys.addaudithook"] = "denied" if len(recorded()) == hooks_before + 1 else "allowed"
attempt("open /proc/self/mem", lambda: open("/proc/self/mem", "rb"))
attempt("os.open /proc/self/task/x/mem", lambda: os.open(f"/proc/self/task/{threading.get_native_id()}/mem", os.O_RDONLY))
attempt("ctypes.string_at", lambda: ctypes.string_at(id(out), 8))
attempt("ctypes.pythonapi", lambda: ctypes.pythonapi.PyEval_GetFrame)
attempt("code.replace", lambda: (lambda: 0).__code__.replace(co_name="renamed"))  # torch.compile makes code objects
attempt("getframe below grader code", lambda: grader_call(lambda: sys._getframe()))
attempt("getframe of the caller's own frame", lambda: sys._getframe())
def own_traceback_frame():
    try:
        1 / 0
    except ZeroDivisionError as error:
        return error.__traceback__.tb_frame
attempt("tb_frame above grader code", lambda: grader_call(own_traceback_frame))
def own_traceback():
    try:
        raise ValueError("x")
    except ValueError as error:
        return error.__traceback__.tb_frame
attempt("tb_frame of the caller's own", own_traceback)
gen = grader_generator()
attempt("gi_frame above grader code", lambda: grader_call(lambda: gen.gi_frame))
attempt("gi_frame of the caller's own", lambda: (x for x in ()).gi_frame)
attempt("__code__ of a grader function", lambda: kit.answer.__code__)  # read: code is no way in
attempt("__code__ of the caller's own", lambda: attempt.__code__)
attempt("__code__ assigned to a grader function", lambda: setattr(kit.answer, "__code__", (lambda s, m: None).__code__))
caught = []
def handler(signum, frame):
    caught.append(frame)
signal.signal(signal.SIGALRM, handler)
def spin():
    signal.setitimer(signal.ITIMER_REAL, 0.01)
    while not caught:
        sum(range(100))
grader_call(spin)
attempt("f_code of the frame a signal handler got", lambda: caught[0].f_code)  # spin's, the submission's own
attempt("f_code of a grader frame reached by f_back", lambda: caught[0].f_back.f_code)  # f_back itself is not audited
# Arguments a submission hands to sys.audit() itself: nothing of theirs runs in the hook.
class Evil:
    def __getattr__(self, name): raise SystemExit("the hook read an attribute")
    def __hash__(self): raise SystemExit("the hook hashed")
    def __eq__(self, other): raise SystemExit("the hook compared")
for number, (event, args) in enumerate((("object.__getattr__", (Evil(), "gi_frame")), ("object.__getattr__", (Evil(), Evil())),
                    ("sys._getframe", (Evil(),)), ("open", (Evil(), "r", 0)), ("object.__setattr__", (Evil(), "__code__", 1)))):
    attempt(f"sys.audit {number} {event}", lambda: sys.audit(event, *args))
attempt("sys._current_frames before a grader thread", sys._current_frames)
# The grader thread is claimed with the judge's key only: a claim without it is denied, changes nothing.
attempt("claiming the grader thread without the key", lambda: sys.audit("pa_grader.claim", b"x" * 32))
attempt("sys._current_frames after a refused claim", sys._current_frames)
# A session child before its grader thread claims itself: the grader's fork hook has said so, and
# a fork hook of the submission's (which runs after it) finds frames denied (red team 18).
sys.audit("pa_grader.forked")
attempt("sys._current_frames after a fork, before the grader thread", sys._current_frames)
claimer = threading.Thread(target=kit.MODULES["hook"].claim_grader_thread, args=(b"k" * 32,))
claimer.start()
claimer.join()  # as in a session child
attempt("sys._current_frames in a session", sys._current_frames)
def down(n):
    return down(n + 1) if n < 900 else 1 / 0
import time, traceback
try:
    down(0)
except ZeroDivisionError as error:
    started = time.perf_counter()
    traceback.extract_tb(error.__traceback__)
    out["deep traceback seconds"] = time.perf_counter() - started
# sys.settrace(None) where none is set (doctest restores what it found so): nothing to deny.
before = len(recorded())
attempt("settrace(None) with none set", lambda: sys.settrace(None))
attempt("setprofile(None) with none set", lambda: sys.setprofile(None))
out["settrace(None) recorded"] = len(recorded()) - before
attempt("settrace through sys as grading has it", lambda: sys.settrace(print))
out["settrace where"] = recorded()[-1][2]
# A denial's traceback, formatted: its last frame is the hook's, which holds nothing and is readable.
before = len(recorded())
try:
    gc.get_objects()
except RuntimeError:
    import traceback as _traceback
    out["denial traceback"] = _traceback.format_exc()
out["denial traceback records"] = len(recorded()) - before
# The hook's frame, handed to a signal handler while it runs on this thread: nothing in it changes
# what the hook decides or what it recorded.
hook_frames = []
def grab(signum, frame):
    if frame.f_code.co_name == "hook":
        hook_frames.append(frame)
signal.signal(signal.SIGALRM, grab)
signal.setitimer(signal.ITIMER_REAL, 0.0001, 0.0001)
started = time.perf_counter()
while not hook_frames and time.perf_counter() - started < 20:
    for _ in range(200):
        sys._getframe()
signal.setitimer(signal.ITIMER_REAL, 0)
signal.signal(signal.SIGALRM, signal.SIG_DFL)
if hook_frames:
    frame = hook_frames[0]
    shown = frame.f_locals
    out["hook frame free variables"] = sorted({type(shown[name]).__name__ for name in frame.f_code.co_freevars if name in shown})
    out["hook frame globals"] = sorted(frame.f_globals)
    kept = len(recorded())
    for name, value in list(shown.items()):
        for method in ("clear", "__delitem__", "pop"):
            try:
                getattr(value, method)()
            except Exception:
                pass
        shown[name] = None
    attempt("gc.get_objects after the hook frame was tampered with", gc.get_objects)
    out["records kept after tampering with the hook frame"] = len(recorded()) == kept + 1
out["events"] = [list(e[:2]) for e in recorded()]
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def attacks() -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", f"ROOT = {str(ROOT)!r}\n" + ATTACKS], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", [
    "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys.settrace", "sys.setprofile", "sys.addaudithook",
    "open /proc/self/mem", "os.open /proc/self/task/x/mem", "ctypes.string_at", "ctypes.pythonapi",
    "getframe below grader code", "tb_frame above grader code", "gi_frame above grader code",
    "__code__ assigned to a grader function", "sys._current_frames in a session", "settrace through sys as grading has it",
    "sys._current_frames after a fork, before the grader thread",
    "claiming the grader thread without the key",
    "gc.get_objects after the hook frame was tampered with",
])
def test_every_audited_route_to_the_grader_is_denied(attacks: dict[str, Any], name: str) -> None:
    assert attacks[name] == "denied"


@pytest.mark.parametrize("name", [
    "getframe of the caller's own frame", "tb_frame of the caller's own", "gi_frame of the caller's own", "__code__ of the caller's own",
    "sys._current_frames before a grader thread", "f_code of the frame a signal handler got", "code.replace",
    "__code__ of a grader function", "f_code of a grader frame reached by f_back", "settrace(None) with none set",
    "setprofile(None) with none set", "sys._current_frames after a refused claim",
])
def test_the_same_operations_on_the_submissions_own_objects_work(attacks: dict[str, Any], name: str) -> None:
    assert attacks[name] == "allowed"


def test_arguments_handed_to_sys_audit_run_nothing_of_theirs(attacks: dict[str, Any]) -> None:
    outcomes = {k: v for k, v in attacks.items() if k.startswith("sys.audit ")}
    assert len(outcomes) == 5 and all(v in ("allowed", "TypeError", "IndexError") for v in outcomes.values()), outcomes


def test_each_denial_is_recorded(attacks: dict[str, Any]) -> None:
    kinds = {kind for kind, _ in attacks["events"]}
    assert {"gc", "trace", "audit", "memory", "code", "frame", "frames"} <= kinds
    assert ["trace", "sys.settrace"] in attacks["events"] and ["frames", "sys._current_frames"] in attacks["events"]
    assert ["audit", "claiming the grader thread"] in attacks["events"]


def test_the_hook_reads_nothing_through_a_name() -> None:
    hook = KIT.MODULES["hook"].make_hook([vars(m) for m in KIT.MODULES.values()], b"k" * 32)
    assert sorted(hook.__globals__) == ["__builtins__"] and hook.__globals__["__builtins__"] == {}
    assert not {i.opname for i in dis.get_instructions(hook)} & {"LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL"}


def test_no_function_of_the_hooks_module_shares_its_state() -> None:
    """A cell that held the hook's module could set any closure cell of a function it finds there
    (__closure__ and cell_contents are not audited): none of them is one the hook rebinds."""
    module = KIT.MODULES["hook"]
    hook = module.make_hook([vars(m) for m in KIT.MODULES.values()], b"k" * 32)
    cells = dict(zip(hook.__code__.co_freevars, hook.__closure__, strict=True))
    state = {id(cells[name]) for name in ("armed", "grader_thread", "records")}
    found = list(vars(module).values()) + [v for d in vars(module).values() if isinstance(d, dict) for v in d.values()]
    functions = [f for f in found if isinstance(f, types.FunctionType)]
    assert len(functions) >= 6  # make_hook, make_quiet_setters, arm, claim_grader_thread, recorded, the quiet setters
    assert not {id(cell) for f in functions for cell in f.__closure__ or ()} & state


def test_setting_no_trace_where_none_is_set_is_not_denied(attacks: dict[str, Any]) -> None:
    """doctest ends with sys.settrace(what it found): None, changing nothing.  Setting a function
    is denied, and the denial names the caller's line, not the stand-in's."""
    assert attacks["settrace(None) recorded"] == 0
    assert attacks["settrace where"].startswith("<string>:"), attacks["settrace where"]


def test_a_denials_traceback_reads_without_more_denials(attacks: dict[str, Any]) -> None:
    """The traceback of a denial ends in the hook's frame; formatting it (IPython does) is no second denial."""
    assert "not available while grading" in attacks["denial traceback"]
    assert attacks["denial traceback records"] == 1


def test_the_hooks_frame_holds_only_immutable_values(attacks: dict[str, Any]) -> None:
    """A signal handler is handed the hook's frame when the signal is handled while it runs: what
    it shows is values (no dict, list, mapping proxy, lock or function of the hook's to change),
    its globals hold nothing, and changing what it shows changes neither what the hook decides
    nor what it recorded (the cells it rebinds are reached through no frame)."""
    assert "hook frame free variables" in attacks, "no signal was handled while the hook ran"
    assert set(attacks["hook frame free variables"]) <= {
        "bool", "int", "str", "bytes", "tuple", "frozenset", "object", "type", "builtin_function_or_method", "method_descriptor", "code"}
    assert attacks["hook frame globals"] == ["__builtins__"]
    assert attacks["records kept after tampering with the hook frame"] is True


def test_a_deep_traceback_is_read_in_linear_time(attacks: dict[str, Any]) -> None:
    """Every tb_frame of a 900-frame RecursionError read under the armed hook (traceback.extract_tb):
    each read walks a bounded part of its chain, so the whole costs milliseconds, not seconds."""
    assert attacks["deep traceback seconds"] < 2.0, attacks["deep traceback seconds"]


def test_the_grader_code_defines_no_class() -> None:
    """object.__subclasses__() would find it, and its methods would lead to the grader's namespace."""
    for module in KIT.MODULES.values():
        assert not [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == module.__name__], module.__name__


# --- the caller thread -----------------------------------------------------------------------

def test_the_submissions_code_sees_only_the_guard_below_it() -> None:
    def walk() -> list[tuple[str, list[str]]]:
        frame, seen = sys._getframe(1), []
        while frame is not None:
            seen.append((frame.f_code.co_name, sorted(frame.f_globals)))
            frame = frame.f_back
        return seen

    ok, seen = READINGS.call({"caller": machinery_kit.caller(), "grave": []}, walk)
    assert ok and seen == [("guard", ["__builtins__"])]


def test_what_a_call_returned_is_the_object_itself() -> None:
    made = {"a": 1}
    ok, value = READINGS.call({"caller": machinery_kit.caller(), "grave": []}, lambda: made)
    assert ok and value is made
    ok, error = READINGS.call({"caller": machinery_kit.caller(), "grave": []}, lambda: 1 / 0)
    assert not ok and isinstance(error, ZeroDivisionError)


# --- readings: the judge's digests, taken of the object itself ----------------------------------

plain_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=10)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.tuples(inner, inner), st.dictionaries(st.text(max_size=5), inner, max_size=4)),
    max_leaves=10,
)


@settings(max_examples=60, deadline=None)
@given(plain_values)
def test_a_plain_reading_is_what_the_judge_receives(value: Any) -> None:
    session = {"caller": machinery_kit.caller(), "grave": []}
    assert READINGS.plain_reading(session, value) == wire.plain(value)
    assert READINGS.digest(session, value) == plain_digest(json.loads(json.dumps(wire.plain(value), allow_nan=True)))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int64", "int32", "bool"])
def test_a_tensor_reading_is_what_the_judge_receives(dtype: str) -> None:
    tensor = (torch.arange(24) % 5).to(getattr(torch, dtype)).reshape(2, 3, 4).transpose(0, 2)  # not contiguous
    payload = wire.tensor_payload(tensor)
    assert READINGS.tensor_reading(tensor) == payload
    assert READINGS.digest({"caller": machinery_kit.caller(), "grave": []}, tensor) == tensor_digest(payload)


def test_a_tensor_subclass_is_read_as_its_data() -> None:
    class Liar(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return torch.zeros(3)

    tensor = torch.ones(3).as_subclass(Liar)
    assert base64.b64decode(READINGS.tensor_reading(tensor)["data"]) == torch.ones(3).numpy().tobytes()
    assert READINGS.tensor_reading([1, 2])["rejected_return"] is True


def test_the_callers_edit_is_made_on_the_object() -> None:
    class Ledger(dict):
        def __setitem__(self, key: Any, value: Any) -> None:  # a subclass that would refuse the edit
            pass

    kept, listed = Ledger(a=1, b=2), [1, 2, 3]
    READINGS.edit({"caller": machinery_kit.caller(), "grave": []}, kept)
    READINGS.edit({"caller": machinery_kit.caller(), "grave": []}, listed)
    assert dict(kept) == {"a": 0, "b": 0} and listed == [0, 0, 0]


# --- signed frames -----------------------------------------------------------------------------

def test_the_judge_and_the_worker_sign_alike() -> None:
    assert protocol.signature(b"k", 3, b"r" * 32, b"{}") == KIT.signature(b"k", 3, b"r" * 32, b"{}")


@pytest.fixture
def stand_in() -> Any:
    """A process of this test's own for a session to stand for (a refused frame kills its session's process)."""
    proc = subprocess.Popen(["sleep", "60"])
    yield proc.pid
    proc.kill()
    proc.wait()


def _session(conn: socket.socket, key: bytes, pid: int) -> Session:
    return Session(conn, pid, 5.0, Budget.wall(1e12), key=key)


def test_a_frame_the_grader_thread_did_not_sign_is_refused_and_recorded(stand_in: int) -> None:
    judge, worker = socket.socketpair()
    session = _session(judge, b"k" * 32, stand_in)
    sink: list[tuple[str, list[Any]]] = []
    session.attach(sink, "todo4")
    body = json.dumps({"id": 1, "ok": True, "value": None}).encode()
    worker.sendall(struct.pack(">I", 32 + len(body)) + b"\0" * 32 + body)
    with pytest.raises(protocol.Forged):
        session.call("observe")
    assert sink and sink[0][0] == "todo4" and sink[0][1][0] == "forged"
    worker.close()


def test_a_signed_reply_to_another_request_is_refused(stand_in: int) -> None:
    judge, worker = socket.socketpair()
    session = _session(judge, b"k" * 32, stand_in)
    body = json.dumps({"id": 1, "ok": True, "value": None}).encode()
    mac = protocol.signature(b"k" * 32, 1, hashlib.sha256(b"another request").digest(), body)
    worker.sendall(struct.pack(">I", 32 + len(body)) + mac + body)
    with pytest.raises(protocol.Forged):
        session.call("observe")
    worker.close()


def test_a_signed_reply_is_taken_with_what_the_worker_denied(stand_in: int) -> None:
    judge, worker = socket.socketpair()
    session = _session(judge, b"k" * 32, stand_in)
    sink: list[tuple[str, list[Any]]] = []
    session.attach(sink, "todo1")
    body = json.dumps({"id": 1, "ok": True, "value": None, "tamper": [["gc", "gc.get_objects", "<cell 2>:3", False, False]]}).encode()
    expected = json.dumps({"op": "observe", "id": 1}).encode()
    mac = protocol.signature(b"k" * 32, 1, hashlib.sha256(expected).digest(), body)
    worker.sendall(struct.pack(">I", 32 + len(body)) + mac + body)
    assert session.call("observe").ok
    assert sink == [("todo1", ["gc", "gc.get_objects", "<cell 2>:3", False, False])]
    worker.close()


# --- a decode step's caches, written in place where the worker maps them -------------------------

def _payload(array: np.ndarray) -> dict[str, Any]:
    return {"dtype": str(array.dtype), "shape": list(array.shape), "data": base64.b64encode(array.tobytes()).decode()}


def _open_fds() -> set[int]:
    return {int(n) for n in os.listdir("/proc/self/fd")}


def test_reused_caches_are_written_into_the_file_that_holds_them(stand_in: int) -> None:
    judge, _ = socket.socketpair()
    session = _session(judge, b"", stand_in)
    session.shares_files = True
    before = _open_fds()
    names = ("query", "key_cache", "value_cache", "block_tables", "seq_lens")
    first = {n: _payload(np.full((2, 4), i, dtype=np.float32)) for i, n in enumerate(names)}
    fields, shared = session._share_attention_inputs(first)
    assert shared is session._caches
    second = {n: _payload(np.full((2, 4), 10 + i, dtype=np.float32)) for i, n in enumerate(names)}
    fields2, shared2 = session._share_attention_inputs({**second, "reuse_caches": True})
    assert fields2["key_cache"] == {"dtype": "float32", "shape": [2, 4], "reused": True}
    assert shared2 is not None and shared2 is not shared
    digests = shared2.digests()
    assert digests["key_cache"] == hashlib.sha256(np.full((2, 4), 11, dtype=np.float32).tobytes()).hexdigest()
    assert digests["query"] == hashlib.sha256(np.full((2, 4), 10, dtype=np.float32).tobytes()).hexdigest()
    shared2.close_unless(session._caches)
    session._drop_caches()
    assert _open_fds() == before  # every memfd closed


def test_inputs_of_no_bytes_still_get_a_file() -> None:
    empty = _payload(np.zeros((0, 4), dtype=np.float32))
    fields, shared = _share_inputs({n: empty for n in ("query", "key_cache", "value_cache", "block_tables", "seq_lens")})
    assert shared is not None and fields["shared"]["size"] >= 64
    shared.close()


def test_the_judges_files_cannot_grow_or_shrink_and_have_no_path() -> None:
    """Red team 18 grew a shared file by 60 MiB on the judge's disk (a channel between gradings):
    the files are sealed memfds now, handed over with the request that maps them."""
    payload = _payload(np.arange(8, dtype=np.float32).reshape(2, 4))
    fields, shared = _share_inputs({n: payload for n in ("query", "key_cache", "value_cache", "block_tables", "seq_lens")})
    assert shared is not None and set(fields["shared"]) == {"memfd", "size"}
    size = os.fstat(shared.fd).st_size
    with pytest.raises(PermissionError):
        os.pwrite(shared.fd, b"x" * 4096, size)  # past the end
    with pytest.raises(PermissionError):
        os.ftruncate(shared.fd, size + 1)
    with pytest.raises(PermissionError):
        os.ftruncate(shared.fd, 0)
    os.pwrite(shared.fd, b"\0\0\0\0", 0)  # within it: writable, as a view's in-place write must be
    assert os.readlink(f"/proc/self/fd/{shared.fd}").startswith("/memfd:")
    message, fds = with_fds({"op": "batch", "id": 3, "ops": [{"op": "share_pool", "shared": {"memfd": 41, "size": 8}}, {"op": "attention", **fields}]})
    assert fds == [41, shared.fd]
    assert message["ops"][0]["shared"] == {"fd": 0, "size": 8} and message["ops"][1]["shared"] == {"fd": 1, "size": size}
    shared.close()


def test_descriptors_come_with_their_frame() -> None:
    """The judge's descriptors travel on a frame's first bytes; the grader thread takes them with
    its length, and a frame without any gets none."""
    judge, child = socket.socketpair()
    fd = os.memfd_create("t")
    try:
        os.write(fd, b"pool")
        protocol._send(judge, {"op": "share_pool", "shared": {"fd": 0, "size": 4}}, [fd])
        protocol._send(judge, {"op": "observe"})
        raw, fds = KIT.receive(child)
        assert json.loads(raw)["op"] == "share_pool" and len(fds) == 1
        assert os.pread(fds[0], 4, 0) == b"pool"
        os.close(fds[0])
        raw, fds = KIT.receive(child)
        assert json.loads(raw)["op"] == "observe" and fds == []
    finally:
        os.close(fd)
        judge.close()
        child.close()


# --- records and what they cost ----------------------------------------------------------------

def _items() -> list[ItemResult]:
    return [ItemResult(i, i.split(".")[0], Text(i, i), 5, PASSED) for i in ("todo1.a", "todo4.b", "todo4.c", "todo5.d")]


def test_records_say_where_and_what_in_both_languages() -> None:
    records = tampering.collect(
        [["gc", "gc.get_objects", "<cell 3>:12", True, False]],
        [("todo5.d", ["frames", "sys._current_frames", "<cell 1>:9", False, False]), ("given", ["frames", "sys._current_frames", "<cell 1>:9", False, False]),
         ("todo5.d", ["junk"]), ("todo5.d", "junk")],
    )
    assert [(r.kind, r.scopes, r.denied) for r in records] == [("gc", ["cells"], True), ("frames", ["todo5.d", "given"], True)]
    assert records[0].message.en.startswith("code cell 3, line 12 (while the cells ran): gc.get_objects() denied")
    assert records[0].message.zh.startswith("第 3 个代码单元第 12 行（运行代码单元时）")


def test_a_denied_operation_costs_nothing_by_default() -> None:
    records = tampering.collect([["gc", "gc.get_objects", "", True, False]], [])
    assert tampering.apply(_items(), records, "zero_items") == _items()
    assert all(i.status == FAILED for i in tampering.apply(_items(), records, "zero_all"))
    assert tampering.apply(_items(), records, "flag") == _items()


def test_a_forged_frame_costs_the_items_of_its_session() -> None:
    records = tampering.collect([], [("todo4", ["forged", "a frame the grader's code did not write", "", False, False])])
    items = tampering.apply(_items(), records, "zero_items")
    assert [i.status for i in items] == [PASSED, FAILED, FAILED, PASSED]
    assert items[1].failure is not None and items[1].failure.kind == "integrity" and "no credit" in items[1].failure.message.en
    assert records[0].cost == ["todo4.b", "todo4.c"]
    cells = tampering.collect([["forged", "x", "", True, False]], [])
    assert all(i.status == FAILED for i in tampering.apply(_items(), cells, "zero_items"))


def test_a_record_survives_the_results_json_and_the_sanitiser() -> None:
    from grader.results import GradeResult
    from grader.sanitize import sanitize_result

    result = GradeResult("x.py", "", "", _items(), tampering=tampering.collect([["memory", "/proc/self/mem\x1b[2J", "<cell 1>:1", True, False]], []))
    again = sanitize_result(GradeResult.from_dict(json.loads(json.dumps(result.to_dict()))))
    assert again.tampering[0].kind == "memory" and "\x1b" not in again.tampering[0].detail and "\x1b" not in again.tampering[0].message.en


def test_the_policy_is_read_from_the_config(tmp_path: Path) -> None:
    from grader.config import DEFAULT_PATH, load_config

    assert load_config().tamper_policy == "zero_items"
    text = DEFAULT_PATH.read_text(encoding="utf-8").replace('tamper = "zero_items"', 'tamper = "zero_all"')
    (tmp_path / "c.toml").write_text(text, encoding="utf-8")
    assert load_config(tmp_path / "c.toml").tamper_policy == "zero_all"
    (tmp_path / "d.toml").write_text(text.replace('"zero_all"', '"lenient"'), encoding="utf-8")
    with pytest.raises(ValueError):
        load_config(tmp_path / "d.toml")



# --- where a TA sees it --------------------------------------------------------------------------

def test_tampering_is_on_every_scorecard_the_csv_and_the_dashboard() -> None:
    from grader import standing
    from grader.commands.export import rows
    from grader.config import TODOS
    from grader.gradebook import GRADED, Entry
    from grader.report import dashboard, html, markdown, text
    from grader.results import GradeResult

    records = tampering.collect([["gc", "gc.get_objects", "<cell 4>:2", True, False]], [("todo4", ["forged", "x", "", False, False])])
    items = tampering.apply(_items(), records, "zero_items")
    result = GradeResult("alice.ipynb", "ab" * 32, "c", items, tampering=records)
    for lang, words in (("en", ("code cell 4, line 2", "denied")), ("zh", ("第 4 个代码单元第 2 行", "被拒绝"))):
        for page in (text.render(result, lang), text.render(result, lang, quiet=True), markdown.render(result, lang), html.render(result, lang)):
            assert all(word in page for word in words), page
    entry = Entry(1, "alice", "ab" * 32, "c", "batch", "alice.ipynb", None, "2026-01-01T00:00:00+00:00", GRADED, result)
    table = list(rows(standing.all_of([entry], "en"), TODOS))
    assert table[0][-1] == "tampering" and table[1][-1] == "2 (forged, gc), 1 cost points"
    page = dashboard.render([entry], "en")
    assert 'class="badge tampering"' in page and "2 (forged, gc), 1 cost points" in page


# --- the given code as bound: parts read in the worker, fingerprint taken by the judge ---------------

def test_the_given_methods_parts_give_the_templates_fingerprint() -> None:
    from grader import given_code

    namespace: dict[str, Any] = {}
    exec(compile((ROOT / "reference" / "paged_attention.py").read_text(encoding="utf-8"), "<cell 1>", "exec"), namespace)
    template = given_code.template_code()
    for name, methods in given_code.wholly_given().items():
        for method in methods:
            parts = READINGS.bound_code(namespace[name], method)
            assert given_code.bound_digest(json.loads(json.dumps(parts))) == template[f"{name}.{method}"], (name, method)
    assert READINGS.bound_code(namespace["paged_attention"], "x") == "not a class"
    assert READINGS.bound_code(namespace["Request"], "nowhere") == "missing"


@pytest.mark.parametrize("parts", [{}, {"args": [1, 0, 0, 3], "code": "!!", "consts": [], "names": [], "varnames": [], "freevars": [], "cellvars": []},
                                   {"args": [1, 0, 0, 3], "code": "AAA=", "consts": [{"code": {}}], "names": [1], "varnames": [], "freevars": [], "cellvars": []},
                                   "missing"])
def test_parts_that_are_not_a_code_object_are_said_so(parts: Any) -> None:
    from grader import given_code

    assert given_code.bound_digest(parts) in ("unreadable", "missing")


# --- plain attributes: read and written by the grader thread itself, nothing of the submission's run ---

class _Plain:
    shared = 5

    def __init__(self) -> None:
        self.free_blocks = [1, 2]


class _Property(_Plain):
    @property
    def free_blocks(self) -> list[int]:
        return [9]

    @free_blocks.setter
    def free_blocks(self, value: list[int]) -> None:
        pass


class _Hooked(_Plain):
    def __getattribute__(self, name: str) -> Any:
        return [7]

    def __setattr__(self, name: str, value: Any) -> None:
        pass


class _Slotted:
    __slots__ = ("free_blocks",)


def test_a_plain_attribute_is_read_and_written_here_and_nothing_else_is() -> None:
    plain = _Plain()
    assert READINGS.plain_attribute(plain, "free_blocks") == (True, [1, 2]) and READINGS.plain_attribute(plain, "shared") == (True, 5)
    assert READINGS.plain_assign(plain, "free_blocks", [3]) and plain.free_blocks == [3]
    assert READINGS.plain_attribute(plain, "missing") == (False, None)
    assert READINGS.plain_attribute(plain, "__init__") == (False, None)  # a function: bound on the way out
    for other in (_Property(), _Hooked.__new__(_Hooked), _Slotted()):
        assert READINGS.plain_attribute(other, "free_blocks") == (False, None), type(other)
        assert READINGS.plain_assign(other, "free_blocks", [3]) is False, type(other)
    strange = _Plain()
    setattr(strange, type("Name", (str,), {})("x"), 1)  # a key that is not a plain str: not read here
    assert READINGS.plain_attribute(strange, "free_blocks") == (False, None)


def test_a_broken_edit_costs_the_items_of_its_session() -> None:
    records = tampering.collect([], [("todo1", ["broken", "edit_kept", "", False, True])])
    assert [(r.kind, r.scopes, r.denied) for r in records] == [("broken", ["todo1"], False)]
    assert "edit_kept" in records[0].message.en and "edit_kept" in records[0].message.zh


@pytest.mark.slow
def test_the_callers_edit_failing_is_tampering_not_nothing_to_see(monkeypatch: pytest.MonkeyPatch) -> None:
    """Red team 14 wrote the bytes of the worker's `edit` (raw memory), so that the caller's edit of a
    ledger failed, and a cached ledger kept its points ("nothing to see").  The edit runs none of
    the submission's code: a failure there is the grader's code changed, flagged, and TODO 1 pays nothing."""
    from grader.config import load_config
    from grader.grade import grade_path
    from grader.sandbox import session as session_module
    from grader.sandbox.protocol import Reply

    real = session_module.Session.call

    def broken_edit(self: Any, op: str, timeout: float | None = None, **fields: Any) -> Reply:
        reply = real(self, op, timeout, **fields)
        return Reply(ok=False, error={"type": "RuntimeError", "message": "x"}) if op == "edit_kept" else reply

    monkeypatch.setattr(session_module.Session, "call", broken_edit)
    result = grade_path(Path(__file__).parent.parent / "reference" / "paged_attention.py", load_config(), "cpu", alone=True)
    assert [t.kind for t in result.tampering] == ["broken"], result.tampering
    todo1 = [i for i in result.items if i.todo == "todo1"]
    assert todo1 and all(i.status == "failed" and i.failure and i.failure.kind == "integrity" for i in todo1)
    assert all(i.status == "passed" for i in result.items if i.todo in ("todo4", "todo5") and i.id != "todo5.cuda")
