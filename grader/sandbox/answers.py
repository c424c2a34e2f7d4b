"""The operations a session child's grader thread answers (machinery.py): what the judge asks, and
the state after each call.  Part of the grader's code in the graded process (loaded as
machinery.py says: never a module a cell can find).  Each operation is the reproduction's
call, made on the caller thread (readings.py); what it returns is read here with C functions
only, kept here when the caller keeps it, and answered as plain data.
"""

import ctypes
from binascii import a2b_base64
from collections import deque
from functools import partial
from itertools import repeat
from mmap import MAP_SHARED, PROT_READ, PROT_WRITE
from mmap import mmap as map_file
from operator import call as apply
from operator import is_, itemgetter, setitem

import numpy
import torch
from _pa_grader_hook import recorded
from _pa_grader_readings import (
    BYTES_TYPE,
    DATA_PTR,
    DEVICE_OF,
    DICT_GET,
    DICT_ITEMS,
    DTYPE_OF,
    DTYPES,
    ELEMENT_SIZE,
    FOUND,
    KEYS_OF,
    LIST_COPY,
    LIST_GET,
    LIST_POP,
    LIST_SET,
    NUMEL,
    PLAIN_TENSOR,
    SIZE_OF,
    STRIDE_OF,
    TENSOR,
    TYPE_NAME,
    as_int,
    assign,
    attribute,
    bound_code,
    call,
    calls,
    described,
    digest,
    edit,
    found,
    has_base,
    int_list,
    memory_of,
    method,
    operators_intact,
    outcome,
    plain_attribute,
    plain_keys,
    plain_reading,
    python_keyed,
    refused,
    refused_type,
    student_error,
    tensor_facts,
    tensor_reading,
    with_builtin_errors,
)

CUDA_SYNC = torch.cuda.synchronize
FROM_BUFFER, EMPTY, COPY_TO, UINT8 = torch.frombuffer, torch.empty, numpy.copyto, torch.uint8
ATTENTION_INPUTS = ("query", "key_cache", "value_cache", "block_tables", "seq_lens")
SYSCALL = ctypes.CDLL(None, use_errno=True).syscall
SYSCALL.restype = ctypes.c_long
MSEAL = 462  # mseal(2), Linux 6.10 and later (the same number on every architecture)
PAGE = 4096


# --- what a call gives back -----------------------------------------------------------------------

def student_call(session, function, *args, **kwargs):
    """The value of `function(*args, **kwargs)` run on the caller thread; what it raised, described, raises."""
    return outcome(session, call(session, function, *args, **kwargs))


def _keep(session, msg, value):
    keep = msg.get("keep")
    if type(keep) is int:
        session["kept"][keep] = value
    return value


def _tensor_reply(value):
    reading = tensor_reading(value)
    if "data" not in reading:
        raise refused(reading)
    return reading


def _handle(session, value):
    if type(value) is not int or value not in session["handles"]:
        raise LookupError("an unknown handle")
    return session["handles"][value]


def _ints(value, what):
    if type(value) is not list or not only_ints(value):
        raise TypeError(f"{what} of the wrong form")
    return value


def only_ints(values):
    """Whether every item is exactly an int: C functions only (an identity test per type, never
    a comparison a metaclass could define), quick for 100,000 items."""
    return all(map(is_, map(type, values), repeat(int)))


def _items_at(values, indices):
    """`[values[i] for i in indices]` of a plain list, by C functions."""
    return list(map(LIST_GET, repeat(values, len(indices)), indices))


def _popped(values, indices):
    """`[values.pop(i) for i in indices]` of a plain list, by C functions (an IndexError stops it
    where the comprehension would stop, the blocks popped so far gone from the list)."""
    return list(map(LIST_POP, repeat(values, len(indices)), indices))


def _shape(payload):
    shape = payload.get("shape")
    if type(shape) is not list or not all(type(d) is int and d >= 0 for d in shape):
        raise TypeError("a tensor shape of the wrong form")
    count = 1
    for d in shape:
        count *= d
    return shape, count


def shared_map(session, spec):
    """A file of the judge's (a sealed memfd handed over with this request: its place in the
    request's descriptors), mapped shared (kept mapped until the example ends)."""
    fds = session.get("fds", [])
    if type(spec) is not dict or type(spec.get("fd")) is not int or type(spec.get("size")) is not int or not 0 <= spec["fd"] < len(fds):
        raise TypeError("a shared file of the wrong form")
    mapped = map_file(fds[spec["fd"]], spec["size"], MAP_SHARED, PROT_READ | PROT_WRITE)
    seal(mapped, spec["size"])
    session["maps"].append(mapped)
    return mapped


def seal(mapped, size):
    """The mapping sealed (mseal): nothing can map over it, move it or unmap it until the process
    ends, so the tensors on it stay the judge's file.  Without a seal, a call could map private
    memory over an input's pages, change the input there and leave the file as it was (red team
    37).  Kernels before 6.10 have no mseal: the mapping stays unsealed (docs/trust.md)."""
    if size <= 0:
        return
    start = DATA_PTR(FROM_BUFFER(mapped, dtype=UINT8, count=1))
    SYSCALL(MSEAL, ctypes.c_void_p(start), ctypes.c_size_t((size + PAGE - 1) // PAGE * PAGE), ctypes.c_ulong(0))


def _lied(op):
    """A torch operator the grader thread ran answered what it cannot: a kernel registered over it."""
    found("kernel", op)
    return refused({"type": "RuntimeError", "message": f"{op} answered the grader with a tensor it cannot make (a kernel registered over it?)",
                    "not_implemented": False, "rejected_return": False, "isa": ["Exception", "RuntimeError"], "traceback": ""})


def checked_view(flat, shape):
    """`flat` (a 1-D tensor over memory of the grader's: the judge's file, the bytes it sent) seen
    as `shape` by aten::view, and checked to be exactly that: a plain CPU tensor of its dtype,
    at its address, laid out contiguously.  A kernel registered over aten::view could hand over
    a copy instead, whose writes the judge would never see."""
    view = TENSOR.view(flat, shape)
    if type(view) is not PLAIN_TENSOR or KEYS_OF(view) != KEYS_OF(flat):  # first: a Python key would run code on a size asked
        raise _lied("aten::view")
    if DTYPE_OF(view) is not DTYPE_OF(flat) or DEVICE_OF(view).type != "cpu":
        raise _lied("aten::view")
    step, strides = 1, [1] * len(shape)
    for i in range(len(shape) - 1, -1, -1):
        strides[i] = step
        step *= shape[i]
    got_shape, got_strides = [int(d) for d in SIZE_OF(view)], [int(d) for d in STRIDE_OF(view)]
    if (got_shape != shape or DATA_PTR(view) != DATA_PTR(flat)
            or any(d > 1 and a != b for d, a, b in zip(shape, got_strides, strides, strict=True))):
        raise _lied("aten::view")
    return view


def tensor_from(payload, device="cpu", mapped=None):
    """A tensor the judge describes: a view of its shared file, or made from the bytes it sent."""
    if type(payload) is not dict or type(payload.get("dtype")) is not str or payload["dtype"] not in DTYPES:
        raise TypeError("a tensor of the wrong form")
    dtype = DTYPES[payload["dtype"]]
    shape, count = _shape(payload)
    if count == 0:
        operators_intact()
        empty = EMPTY(shape, dtype=dtype, device=device)
        if type(empty) is not PLAIN_TENSOR or python_keyed(empty) or DTYPE_OF(empty) is not dtype or [int(d) for d in SIZE_OF(empty)] != shape:
            raise _lied("aten::empty")
        return empty
    if mapped is not None and type(payload.get("offset")) is int:
        return checked_view(FROM_BUFFER(mapped, dtype=dtype, count=count, offset=payload["offset"]), shape)
    if type(payload.get("data")) is not str:
        raise TypeError("tensor bytes of the wrong form")
    tensor = checked_view(FROM_BUFFER(bytearray(a2b_base64(payload["data"])), dtype=dtype), shape)
    if device == "cpu":
        return tensor
    operators_intact()  # a copy to the device is torch's (docs/trust.md)
    return TENSOR.to(tensor, device)


# --- operations (what the judge asks; the reproduction writes the same calls) ------------------------

def op_observe(session, msg):
    return None


def op_reseed(session, msg):
    """A new example: its objects let go of on the caller thread; every random state as at the start."""
    old = [session["handles"], session["kept"], session["pools"], session["caches"], session["maps"], session["grave"], session["kv_lab"]]
    session.update(handles={}, made=0, kept={}, pools={}, caches={}, maps=[], grave=[], kv_lab={})
    if calls(session, (list.clear, old), *((seed, 0) for seed in session["seeds"])) is None:
        for seed in session["seeds"]:  # one raised (a seed function the cells replaced): said by the one that did
            student_call(session, seed, 0)
    return None


def op_new(session, msg):
    """A new object of the submission's class; `forget`: handles of objects the caller lets go of
    first (`del r`), with what the calls so far returned (the grave holds them), in the same job
    on the caller thread, so that the new object may be made at a forgotten one's address, as in
    a notebook (a cache keyed by `id()` shows there)."""
    cls, kwargs, forget, wanted = msg.get("cls"), msg.get("kwargs"), msg.get("forget", []), msg.get("handle")
    if type(cls) is not str or type(kwargs) is not dict or type(forget) is not list:
        raise TypeError("a constructor call of the wrong form")
    if wanted is not None and (type(wanted) is not int or not 0 < wanted < 1 << 31 or wanted in session["handles"]):
        raise TypeError("a handle of the wrong form")  # the judge's own numbering (a call sent before its reply is read)
    constructor = _contract(session, cls)
    for handle in forget:
        _handle(session, handle)
    made = None
    if forget:
        old = [[session["handles"].pop(handle) for handle in forget], session["grave"]]
        session["grave"] = []
        made = calls(session, (list.clear, old), (partial(constructor, **kwargs),))
    value = made[1] if made is not None else student_call(session, constructor, **kwargs)
    if wanted is None:
        session["made"] = handle = session.get("made", 0) + 1  # never one of a forgotten object's
    else:
        handle = wanted
    session["handles"][handle] = value
    return handle


def from_cells(session, name):
    """The cells' global `name`, or None: looked up here where every global's name is an exact
    str, else on the caller thread (a key of another type with the name's hash would have its
    __eq__ run by the lookup)."""
    ns = session["ns"]
    if plain_keys(ns):
        return DICT_GET(ns, name)
    ok, value = call(session, DICT_GET, ns, name)
    return value if ok else None


def _contract(session, name):
    function = from_cells(session, name)
    if function is None:
        raise refused({"type": "KeyError", "message": repr(name), "not_implemented": False, "rejected_return": False,
                       "isa": ["Exception", "KeyError", "LookupError"], "traceback": ""})
    return function


def op_ledger(session, msg):
    args, kwargs = msg.get("args", []), msg.get("kwargs", {})
    if type(args) is not list or type(kwargs) is not dict:
        raise TypeError("a ledger call of the wrong form")
    value = _keep(session, msg, student_call(session, _contract(session, "estimate_kv_cache_bytes"), *args, **kwargs))
    return plain_reading(session, value)


def op_method(session, msg):
    if type(msg.get("name")) is not str or type(msg.get("args", [])) is not list:
        raise TypeError("a method call of the wrong form")
    target = _handle(session, msg.get("target"))
    args = [_handle(session, h) for h in msg.get("args", [])]
    value = _keep(session, msg, student_call(session, method(msg["name"], *args), target))
    return plain_reading(session, value)


def op_get_cache(session, msg):
    manager, req = _handle(session, msg.get("manager")), _handle(session, msg.get("request"))
    return _tensor_reply(_keep(session, msg, student_call(session, method("get_physical_cache", req), manager)))


def op_attention(session, msg):
    device = msg.get("device", "cpu")
    if device not in ("cpu", "cuda"):
        raise TypeError("an unknown device")
    mapped = shared_map(session, msg["shared"]) if msg.get("shared") is not None else None
    inputs, previous = {}, session["caches"]
    for name in ATTENTION_INPUTS:
        payload = msg.get(name)
        if type(payload) is dict and payload.get("reused") is True:
            # The example's caches, which the judge wrote in place in the file that holds them (a decode step).
            if name not in previous:
                raise LookupError("no earlier caches to reuse")
            inputs[name] = previous[name]
        else:
            inputs[name] = tensor_from(payload, device, mapped)
    if msg.get("reuse_caches") is True and mapped is None:
        # No shared file (CUDA): the new caches copied into the previous call's tensors.
        for name in ("key_cache", "value_cache"):
            if name in previous and SIZE_OF(previous[name]) == SIZE_OF(inputs[name]) and DTYPE_OF(previous[name]) == DTYPE_OF(inputs[name]):
                operators_intact()
                TENSOR.copy_(previous[name], inputs[name])
                inputs[name] = previous[name]
    session["caches"] = {"key_cache": inputs["key_cache"], "value_cache": inputs["value_cache"]}
    style, scale = msg.get("scale_style"), msg.get("scale")
    args = [inputs[name] for name in ATTENTION_INPUTS]
    function = _contract(session, "paged_attention")
    if style == "positional":
        value = student_call(session, function, *args, scale)
    elif style == "keyword":
        value = student_call(session, function, *args, scale=scale)
    else:
        value = student_call(session, function, *args)
    if device == "cuda":
        student_call(session, CUDA_SYNC)
    return {"output": _tensor_reply(_keep(session, msg, value))}


def op_share_pool(session, msg):
    """The pool becomes a tensor on the judge's file, mapped shared: what any call writes into it,
    the judge reads back itself.  The reproduction writes it as `m.physical_kv_cache = ...`."""
    manager = _handle(session, msg.get("manager"))
    shape, count = _shape(msg)
    if msg.get("dtype") not in DTYPES or type(msg.get("shared")) is not dict:
        raise TypeError("a pool of the wrong form")
    mapped = shared_map(session, msg["shared"])
    pool = checked_view(FROM_BUFFER(mapped, dtype=DTYPES[msg["dtype"]], count=count), shape)
    session["pools"][msg["manager"]] = pool
    assign(session, manager, "physical_kv_cache", pool)
    return None


def op_set_pool(session, msg):
    manager, tensor = _handle(session, msg.get("manager")), tensor_from(msg.get("tensor"))
    if msg.get("rebind") is True:  # a new tensor object, as `m.physical_kv_cache = ...` makes
        assign(session, manager, "physical_kv_cache", tensor)
        return None
    pool = attribute(session, manager, "physical_kv_cache")
    if type(pool) is torch.Tensor and not python_keyed(pool):  # a plain tensor's copy_ is torch's own
        target = _same_memory_layout(pool, tensor)
        if target is not None:  # its bytes written by numpy: no torch operator (a kernel over copy_) runs
            COPY_TO(target, memory_of(tensor, BYTES_TYPE[ELEMENT_SIZE(tensor)]))
            return None
        operators_intact()
        with_builtin_errors(TENSOR.copy_, pool, tensor)
    else:
        student_call(session, method("copy_", tensor), pool)
    return None


def _same_memory_layout(pool, tensor):
    """The pool's memory, writable, where copy_ would only copy bytes (a CPU tensor of the tensor's
    dtype and shape); else None."""
    if DEVICE_OF(pool).type != "cpu" or DTYPE_OF(pool) is not DTYPE_OF(tensor) or SIZE_OF(pool) != SIZE_OF(tensor):
        return None
    return memory_of(pool, BYTES_TYPE[ELEMENT_SIZE(pool)], writable=True)


def op_edit_kept(session, msg):
    """The caller changes what a call gave it (its own to change): every entry set to 0.  A later
    call must not see that (a result kept and handed out again, an lru_cache)."""
    key = msg.get("key")
    if type(key) is int and key in session["kept"]:
        return edit(session, session["kept"][key])
    return None


def op_permute(session, msg):
    """Reorder the free list (any order is legal): `m.free_blocks[:] = [m.free_blocks[i] for i in order]`."""
    manager, order = _handle(session, msg.get("manager")), _ints(msg.get("order"), "an order")
    free = attribute(session, manager, "free_blocks")
    if type(free) is list:  # a plain list's items are read here, by C functions (100,000 of them)
        items = with_builtin_errors(_items_at, free, order)
    elif not order:
        items = []
    elif len(order) == 1:
        items = [student_call(session, method("__getitem__", order[0]), free)]
    else:
        items = list(student_call(session, itemgetter(*order), free))
    free = attribute(session, manager, "free_blocks")
    if type(free) is list:
        LIST_SET(free, slice(None), items)
    else:
        student_call(session, setitem, free, slice(None), items)
    return None


def op_set_free(session, msg):
    """The free list's items set (`m.free_blocks[:] = items`): the state the given release leaves."""
    manager, items = _handle(session, msg.get("manager")), _ints(msg.get("items"), "a free list")
    free = attribute(session, manager, "free_blocks")
    if type(free) is list:
        LIST_SET(free, slice(None), list(items))
    else:
        student_call(session, setitem, free, slice(None), list(items))
    return None


def op_place(session, msg):
    """Give a request blocks the way a correct prefill would: exactly what the reproduction
    writes, `r.block_table = [m.free_blocks.pop(i) for i in indices]`."""
    manager, req = _handle(session, msg.get("manager")), _handle(session, msg.get("request"))
    indices = _ints(msg.get("indices"), "indices")
    plain, free = plain_attribute(manager, "free_blocks")
    if plain and type(free) is list:
        # Read once: between two pops of a plain list nothing of the submission's runs, so
        # `m.free_blocks` is the same list each time (a pool of 100,000 blocks is placed at once).
        blocks = with_builtin_errors(_popped, free, indices)
        assign(session, req, "block_table", blocks)
        return None
    blocks = []
    for i in indices:
        free = attribute(session, manager, "free_blocks")
        blocks.append(with_builtin_errors(LIST_POP, free, i) if type(free) is list else student_call(session, method("pop", i), free))
    assign(session, req, "block_table", blocks)
    return None


def op_set_table(session, msg):
    req, table = _handle(session, msg.get("request")), _ints(msg.get("table"), "a table")
    if type(msg.get("seq_len")) is not int:
        raise TypeError("a length of the wrong form")
    assign(session, req, "block_table", list(table))
    assign(session, req, "seq_len", msg["seq_len"])
    return None


def op_manager_meta(session, msg):
    """What the given constructor sets up: the sizes it keeps and its pool (shape, dtype, all zero)."""
    manager = _handle(session, msg.get("manager"))
    sizes = [plain_reading(session, attribute(session, manager, name)) for name in ("num_blocks", "block_size", "head_dim")]
    pool = attribute(session, manager, "physical_kv_cache")
    if not has_base(type(pool), TENSOR):
        return {"__dict__": [["sizes", {"__list__": sizes}], ["pool", None]]}
    shape, dtype, zero = tensor_facts(pool)
    if shape is None:  # not read here: it dispatches to Python
        return {"__dict__": [["sizes", {"__list__": sizes}], ["pool", None]]}
    return {"__dict__": [["sizes", {"__list__": sizes}], ["pool", {"__list__": [{"__list__": shape}, dtype, zero]}]]}


def op_request_meta(session, msg):
    """The id a request keeps (the given constructor sets it)."""
    return plain_reading(session, attribute(session, _handle(session, msg.get("request")), "request_id"))


def op_given_methods(session, msg):
    """The code of each given method as bound now, reached the way a call reaches it (through
    the class bound to the contract's name, its bases, decorators, setattr, later assignments):
    its parts (the judge takes their fingerprint), or what else is bound there."""
    methods = msg.get("methods")
    if type(methods) is not dict:
        raise TypeError("methods of the wrong form")
    found = {}
    for name, names in methods.items():
        cls = from_cells(session, name)
        for name_of_method in names if type(names) is list else []:
            try:
                found[f"{name}.{name_of_method}"] = bound_code(cls, name_of_method)
            except BaseException:
                found[f"{name}.{name_of_method}"] = "unreadable"
    return found


def _attempt(session, function, *args, **kwargs):
    """(True, what `function` returned) or (False, what it raised, described), on the caller thread."""
    ok, value = call(session, function, *args, **kwargs)
    return (True, value) if ok else (False, student_error(session, value, session.get("traceback_of")))


def _kv_lab_count(session, value, what):
    # A plain list's length is read here (no code of the submission's runs); anything else's
    # len() on the caller thread.
    count = len(value) if type(value) is list else as_int(outcome(session, call(session, len, value)))
    if count is None:
        raise refused_type(f"len({what}) should be an int")
    return count


def op_kv_lab_step(session, msg):
    """One step of the KV-utilisation lab (grader/kvlab/sandboxed.py, which decides everything:
    this only makes the calls, in order, and reads back what they left).

    Releases `release_first`; room for one more token for each of `decode`, stopping at the first
    call that raises; then releases `release_after`, admits `admit` (a new Request each,
    prefilled) up to the first that raises, and reads the free list's length and each kept or
    admitted request's table length and seq_len (with `audit`, the lists).  A call that raises
    ends the step there and is described; the judge decides what it means.
    """
    live = session["kv_lab"]  # request id -> its Request (this example's)
    manager = _handle(session, msg.get("manager"))
    release_first, decode, release_after = (_ints(msg.get(k), k) for k in ("release_first", "decode", "release_after"))
    admit, keep = msg.get("admit"), _ints(msg.get("keep"), "keep")
    if type(admit) is not list or not all(type(a) is list and len(a) == 2 and all(type(x) is int for x in a) for a in admit):
        raise TypeError("admissions of the wrong form")
    if any(r not in live for r in (*release_first, *decode, *release_after, *keep)):
        raise LookupError("a request the lab never admitted")
    reply = {"decoded": 0, "admitted": 0}

    def failed(what, request, error):
        reply["failed"] = {"call": what, "request": request, "error": error}
        return reply

    for request in release_first:
        ok, error = _attempt(session, method("release_request", live.pop(request)), manager)
        if not ok:
            return failed("release_request", request, error)
    if decode:
        # Every decode of the step in one caller-thread job (C iterators only, so no frame of
        # ours is under the submission's), stopping at the first that raises: `done` counts
        # those that returned.
        done = []
        session["grave"].append(done)
        callers = [method("allocate_for_decode", live[request]) for request in decode]
        ok, error = call(session, deque, map(done.append, map(apply, callers, repeat(manager))), 0)
        reply["decoded"] = len(done)
        if not ok:
            return failed("allocate_for_decode", decode[len(done)], student_error(session, error, session.get("traceback_of")))
    for request in release_after:
        if request not in live:
            raise LookupError("a request the lab never admitted")
        ok, error = _attempt(session, method("release_request", live.pop(request)), manager)
        if not ok:
            return failed("release_request", request, error)
    make = _contract(session, "Request")
    admitted = []
    for request, length in admit:
        ok, req = _attempt(session, make, request_id=request, prompt_len=length)
        if ok:
            ok, error = _attempt(session, method("allocate_for_prefill", req), manager)
        else:
            error = req
        if not ok:
            reply["admit_stopped"] = {"request": request, "error": error}
            break
        live[request] = req
        admitted.append(request)
    reply["admitted"] = len(admitted)
    try:
        observed = [live[request] for request in keep] + [live[request] for request in admitted]
        reply["free"] = _kv_lab_count(session, attribute(session, manager, "free_blocks"), "free_blocks")
        tables = [attribute(session, req, "block_table") for req in observed]
        reply["tables"] = [_kv_lab_count(session, table, "block_table") for table in tables]
        reply["seqs"] = []
        for req in observed:
            seq_len = as_int(attribute(session, req, "seq_len"))
            if seq_len is None:
                raise refused_type("seq_len should be an int")
            reply["seqs"].append(seq_len)
        if msg.get("audit") is True:
            reply["free_list"] = int_list(session, attribute(session, manager, "free_blocks"), "free_blocks")
            reply["table_lists"] = [int_list(session, table, "block_table") for table in tables]
    except BaseException as error:
        return failed("reading free_blocks / block_table / seq_len", None, grader_error(error))
    return reply


def op_batch(session, msg):
    """Requests answered in order, in one frame: the calls the judge sent ahead without waiting
    (a constructor, a reseed), then the one it waits for.  Stops after a failed request marked
    `must_succeed` (what follows it would use what it made)."""
    ops = msg.get("ops")
    if type(ops) is not list or not 0 < len(ops) <= MAX_BATCH:
        raise TypeError("a batch of the wrong form")
    replies = []
    for sub in ops:
        if type(sub) is not dict or sub.get("op") == "batch":
            raise TypeError("a batch of the wrong form")
        reply = answer_one(session, sub)
        replies.append(reply)
        if reply["ok"] is not True and sub.get("must_succeed") is True:
            break
    return replies


MAX_BATCH = 64


OPERATIONS = {
    "observe": op_observe, "reseed": op_reseed, "new": op_new, "ledger": op_ledger, "method": op_method,
    "get_cache": op_get_cache, "attention": op_attention, "share_pool": op_share_pool, "set_pool": op_set_pool,
    "edit_kept": op_edit_kept, "permute": op_permute, "set_free": op_set_free, "place": op_place, "set_table": op_set_table,
    "manager_meta": op_manager_meta, "request_meta": op_request_meta, "given_methods": op_given_methods,
    "kv_lab_step": op_kv_lab_step, "batch": op_batch,
}


# --- the state after a call -------------------------------------------------------------------------

def _observed(session, read):
    """{"ok": value} or {"error": ...}, as a caller reading the submission's objects would see them."""
    try:
        return {"ok": read()}
    except BaseException as error:
        return {"error": described(error) or grader_error(error)}


def _shown_error(session, observed, value):
    """An observation that failed on a value it got: the value shown (str() of it, on the caller thread)."""
    if "error" in observed:
        ok, shown = call(session, str, value)
        observed["error"]["shown"] = shown[:200] if ok and type(shown) is str else "<unreadable>"
    return observed


def _observed_list(session, owner, name):
    """A list of ints the submission keeps (the contract says list; the judge decides), with its container's kind."""
    ok, value = call(session, getattr, owner, name)
    if not ok:
        return {"error": student_error(session, value, session.get("traceback_of"))}
    observed = _observed(session, lambda: int_list(session, value, name))
    if "ok" in observed:
        observed["type"] = "list" if has_base(type(value), list) else TYPE_NAME(type(value))[:40]
        return observed
    return _shown_error(session, observed, value)


def _seq_len(session, req):
    ok, value = call(session, getattr, req, "seq_len")
    if not ok:
        return {"error": student_error(session, value, session.get("traceback_of"))}
    number = as_int(value)
    if number is not None:
        return {"ok": number}
    message = f"seq_len should be an int, got {TYPE_NAME(type(value))}"
    return _shown_error(session, {"error": {"type": "TypeError", "message": message, "not_implemented": False, "rejected_return": False,
                                            "isa": ["Exception", "TypeError"], "traceback": ""}}, value)


def _read_at_once(session, manager, pool, requests, spec_manager):
    """The allocator's state in two jobs (every attribute, then every list), as `snapshot` reads it
    one call at a time; None when anything is not as a correct allocator leaves it (plain lists of
    ints, an int length), and `snapshot` then reads it one call at a time, to say what."""
    reads = [(manager, "free_blocks")] if manager is not None else []
    if pool is not None:
        reads.append((manager, "physical_kv_cache"))
    first = len(reads)  # the requests' (seq_len, block_table) pairs start here
    for req in requests.values():
        reads += [(req, "seq_len"), (req, "block_table")]
    plain = [plain_attribute(owner, name) for owner, name in reads]  # here, for a plain class: no job at all
    values = tuple(v for _, v in plain) if all(ok for ok, _ in plain) else calls(session, *((getattr, o, n) for o, n in reads))
    if values is None:
        return None
    listed = ([values[0]] if manager is not None else []) + [values[first + 2 * i + 1] for i in range(len(requests))]
    seq_lens = [values[first + 2 * i] for i in range(len(requests))]
    if not all(type(v) is list for v in listed) or not all(type(n) is int for n in seq_lens):
        return None
    items = [LIST_COPY(v) for v in listed]  # a plain list: copied here, nothing of the submission's runs
    if not all(map(only_ints, items)):
        return None
    state = {}
    if manager is not None:
        state["free_blocks"] = _sent_list(session, f"f{spec_manager}", items[0])
        if pool is not None:
            state["pool"] = {"same": {"ok": values[1] is pool}}
    tables = items[1:] if manager is not None else items
    state["requests"] = {handle: {"seq_len": {"ok": n}, "block_table": _sent_list(session, f"t{handle}", t)}
                         for handle, n, t in zip(requests, seq_lens, tables, strict=True)}
    return state


LIST_DELTA_MIN = 16  # a shorter list goes whole


def _sent_list(session, key, items):
    """A list of exact ints for the reply, under `key`: whole, or what changed since a list sent
    before ({"delta": [p, middle, s, n, base]}: the first p and last s items of the list last
    sent under `base`, n long, around `middle`).  `base` is `key` itself, or for a key not sent
    before the last long list of its kind (a new manager's free list is much like the last one's).
    A pool of hundreds of blocks changes by a few items a call; sent whole, such lists were
    most of a grading's bytes.  The judge rebuilds the list from its own copy
    (session.expand_lists); what is sent is remembered only once the whole state is read
    (`snapshot`), so that both sides remember the same, and a state's lists all change from
    what was remembered before it."""
    base = key if key in session["lists"] else session["latest"].get(key[0])
    old = session["lists"].get(base) if base is not None else None
    session["sending"][key] = items
    if old is not None and len(items) >= LIST_DELTA_MIN:
        kept, ending = _common_ends(old, items)
        if kept + ending >= LIST_DELTA_MIN // 2:
            return {"delta": [kept, items[kept:len(items) - ending], ending, len(old), base], "type": "list", "key": key}
    return {"ok": items, "type": "list", "key": key}


def _common_ends(old, new):
    """(p, s): the longest common prefix of two lists of exact ints, then the longest common suffix
    of what is left of both (list comparisons of exact ints: C code, no submission's code)."""
    size = min(len(old), len(new))
    kept = _longest(lambda n: old[:n] == new[:n], size)
    end_old, end_new = len(old), len(new)
    return kept, _longest(lambda n: old[end_old - n:] == new[end_new - n:], size - kept)


def _longest(matches, most):
    """The largest n <= most with matches(n), where matches(0) holds and a match implies every shorter one."""
    if matches(most):
        return most
    low, high = 0, most
    while high - low > 1:
        middle = (low + high) // 2
        if matches(middle):
            low = middle
        else:
            high = middle
    return low


def snapshot(session, spec):
    """The allocator's state as a caller reads it, and the kept results' digests, both read here."""
    if type(spec) is not dict:
        raise TypeError("a snapshot of the wrong form")
    manager = _handle(session, spec["manager"]) if spec.get("manager") is not None else None
    pool = session["pools"].get(spec.get("manager")) if manager is not None else None
    asked = spec.get("requests", [])
    requests = {str(h): _handle(session, h) for h in (asked if type(asked) is list else [])}
    session["sending"] = {}
    state = _read_at_once(session, manager, pool, requests, spec.get("manager")) if manager is not None or requests else {"requests": {}}
    if state is None:
        state = _read_one_at_a_time(session, manager, pool, requests)
    kept = spec.get("kept")
    if kept is not None:
        if type(kept) is not list:
            raise TypeError("kept keys of the wrong form")
        shared = shared_results(session["kept"])
        state["kept"] = [("shared with another result" if key in shared else digest(session, session["kept"][key]))
                         if type(key) is int and key in session["kept"] else None for key in kept]
    remember_sent(session)
    return state


def remember_sent(session):
    """The lists of a state that goes out whole: the judge remembers them too (_sent_list)."""
    session["lists"].update(session["sending"])
    session["latest"].update({key[0]: key for key, items in session["sending"].items() if len(items) >= LIST_DELTA_MIN})
    session["sending"] = {}


def _footprint(value, into, depth=0):
    """What of `value` a later result must not share: the ids of its dicts and lists (nested,
    subclasses too, read by C) and the memory its CPU or CUDA tensors span."""
    kind = type(value)
    if has_base(kind, TENSOR):
        into.append(("object", id(value)))  # the tensor itself (a sparse one has no address to compare)
        if python_keyed(value) or NUMEL(value) == 0:
            return
        size, reach = ELEMENT_SIZE(value), 0
        for d, s in zip(SIZE_OF(value), STRIDE_OF(value), strict=True):
            reach += (int(d) - 1) * int(s)
        start = DATA_PTR(value)
        into.append((DEVICE_OF(value).type, start, start + (reach + 1) * size))
        return
    if depth > 4:
        return
    if has_base(kind, dict):
        into.append(("object", id(value)))
        for _, entry in list(DICT_ITEMS(value))[:4096]:
            _footprint(entry, into, depth + 1)
    elif has_base(kind, list):
        into.append(("object", id(value)))
        for entry in LIST_COPY(value)[:4096]:
            _footprint(entry, into, depth + 1)
    elif kind is tuple:
        for entry in list(value)[:4096]:
            _footprint(entry, into, depth + 1)


def _overlap(one, other):
    if one[0] == "object" or other[0] == "object":
        return one == other
    return one[0] == other[0] and one[1] < other[2] and other[1] < one[2]


def shared_results(kept):
    """The keys of kept results that share a dict, a list or tensor memory with another kept
    result (the caller's own results, all still alive: sharing is a result reused or cached).
    Read at one moment, by identity and addresses: no digest taken at two moments, which a
    thread of the submission's could tell apart (red team 23 changed one object between them)."""
    prints = {}
    for key, value in list(kept.items()):
        found = []
        try:
            _footprint(value, found)
        except Exception:  # an odd object: what was found before it still compared (the dict holding it first)
            pass
        prints[key] = found
    shared = set()
    keys = list(prints)
    for i, key in enumerate(keys):
        for other in keys[i + 1:]:
            if any(_overlap(a, b) for a in prints[key] for b in prints[other]):
                shared.add(key)
                shared.add(other)
    return shared


def _read_one_at_a_time(session, manager, pool, requests):
    state = {}
    if manager is not None:
        state["free_blocks"] = _observed_list(session, manager, "free_blocks")
        if pool is not None:
            state["pool"] = {"same": _observed(session, lambda: student_call(session, getattr, manager, "physical_kv_cache") is pool)}
    state["requests"] = {handle: {"seq_len": _seq_len(session, req), "block_table": _observed_list(session, req, "block_table")}
                         for handle, req in requests.items()}
    return state


# --- one request ------------------------------------------------------------------------------------

def grader_error(error):
    """An error of this code or of the judge's message (the submission's comes described)."""
    found = described(error)
    if found is not None:
        return found
    message = error.args[0] if error.args and type(error.args[0]) is str else ""
    return {"type": TYPE_NAME(type(error)), "message": message[:500], "traceback": "", "isa": [], "not_implemented": False,
            "rejected_return": False}


def answer(session, msg):
    """The reply to one request of the judge (plain data), with the denials recorded since the last."""
    reply = answer_one(session, msg)
    reply["tamper"] = new_events(session)
    return reply


def answer_one(session, msg):
    """The reply to one request, or to one request of a batch."""
    reply = {"id": msg.get("id")}
    operation = OPERATIONS.get(msg.get("op")) if type(msg.get("op")) is str else None
    try:
        if operation is None:
            raise LookupError("an unknown operation")
        reply["value"] = operation(session, msg)
        reply["ok"] = True
    except BaseException as error:
        reply["ok"] = False
        reply["error"] = grader_error(error)
    if msg.get("snapshot"):
        try:
            reply["state"] = snapshot(session, msg["snapshot"])
        except BaseException as error:
            reply["state_error"] = grader_error(error)
    return reply


def new_events(session):
    """The denials recorded since the last frame: [what, detail, where, while the cells ran, in the grader thread]."""
    records = recorded()
    start = session["events_sent"]
    session["events_sent"] = len(records)
    events = [[e[0], e[1], e[2], e[3] == session["zygote"], e[4]] for e in records[start:start + 50]]
    found_here = FOUND[session["found_sent"]:]
    session["found_sent"] = len(FOUND)
    return events + [list(e) for e in found_here]


def new_session(ns, caller, seeds, traceback_of=None, zygote=-1):
    """A session's state: its caller thread, the objects of its current example, what its calls
    returned; `zygote`: the pid of the process the cells ran in (denials made there were made
    while the cells ran)."""
    return {"ns": ns, "caller": caller, "seeds": seeds, "traceback_of": traceback_of, "zygote": zygote, "handles": {}, "made": 0, "kept": {},
            "pools": {}, "caches": {}, "maps": [], "grave": [], "kv_lab": {}, "sent": 0, "events_sent": 0, "found_sent": 0, "sock": None, "fds": [], "lists": {}, "latest": {}, "sending": {}}
