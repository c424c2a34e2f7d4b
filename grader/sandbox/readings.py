"""What the grader thread of a session child sees of the submission's objects, and how it calls them.

Part of the grader's code in the graded process (machinery.py says how it is loaded: never a
module a cell can find).  Two rules:

- **the submission's code never runs on the grader thread**.  Each call of it (a method, a
  function, an attribute read, iterating a list, str() of an exception) is handed to the
  session's *caller thread*, started here, whose loop is made of C callables only: it takes a
  job from one queue, runs it through `guard` (the only Python frame under the submission's,
  holding nothing but the job) and puts the result on another queue.  No Python frame holds
  either queue, so nothing the submission runs can see, replace or reorder what the grader
  thread gets back: the object a call returned is the object the grader keeps;
- **what comes back is read with C functions only**, bound before any cell ran: the plain data
  a contract result is made of (dict.items, list, int.__index__ ...) and a tensor's bytes, in
  exactly the form the judge receives (wire.plain, wire.tensor_payload), so that a digest taken
  now and one taken later compare.  A CPU tensor's bytes are read from its memory by numpy
  (`memory_of`), running no torch operator: a cell can register a kernel of its own for any
  ATen operator (torch.library), and that kernel would run here, on the grader thread, and
  answer what it likes.
"""

from _hashlib import openssl_sha256
from _json import encode_basestring_ascii, make_encoder
from _queue import SimpleQueue
from _thread import start_new_thread
from binascii import b2a_base64
from collections import deque
from itertools import starmap
from operator import call as apply
from operator import methodcaller
from types import CodeType, FunctionType, SimpleNamespace

import numpy
import torch

MAX_INT_BITS = 8192
MAX_STR = 1 << 16
MAX_REPLY_TENSOR = 8 << 20
TENSOR = torch._C.TensorBase
PLAIN_TENSOR = torch.Tensor
DTYPES = {name: getattr(torch, name) for name in ("float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool")}
DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}
DTYPE_OF = TENSOR.dtype.__get__
DEVICE_OF = TENSOR.device.__get__
SIZE_OF = TENSOR.size
NO_TORCH_FUNCTION = torch._C.DisableTorchFunction
NO_TORCH_DISPATCH = torch._C._DisableTorchDispatch
TO_BYTES = numpy.ndarray.tobytes
AS_ARRAY, ANY, BIT_AND = numpy.asarray, numpy.ndarray.any, numpy.bitwise_and
DATA_PTR, STRIDE_OF, NUMEL, ELEMENT_SIZE, STORAGE_OFFSET = (
    TENSOR.data_ptr, TENSOR.stride, TENSOR.numel, TENSOR.element_size, TENSOR.storage_offset)
STORAGE_OF, STORAGE_BYTES = TENSOR.untyped_storage, torch._C.StorageBase.nbytes
KEYS_OF, HAS_KEY = torch._C._dispatch_keys, torch._C.DispatchKeySet.has
# Keys under which a tensor's memory is not its value (a negative or conjugate view, a zero tensor with none).
NOT_ITS_MEMORY = tuple(getattr(torch._C.DispatchKey, name) for name in ("Negative", "Conjugate", "ZeroTensor"))
PYTHON_KEYS = tuple(getattr(torch._C.DispatchKey, name) for name in ("Python", "PythonTLSSnapshot"))
# How numpy reads one element: its bytes (for the judge), its value (is it zero?).
BYTES_TYPE = {1: "|u1", 2: "<u2", 4: "<u4", 8: "<u8"}
VALUE_TYPE = {"float64": "<f8", "float32": "<f4", "float16": "<f2", "bfloat16": "<u2", "int64": "<i8", "int32": "<i4",
              "int16": "<i2", "int8": "|i1", "uint8": "|u1", "bool": "|b1"}
MRO = type.__dict__["__mro__"].__get__
TYPE_DICT = type.__dict__["__dict__"].__get__
RAW_TYPE_NAME = type.__dict__["__name__"].__get__
RAW_TYPE_QUALNAME = type.__dict__["__qualname__"].__get__
STR_COPY = str.__str__  # a str subclass's text as an exact str: no method of the subclass runs
EXCEPTION_ARGS = BaseException.__dict__["args"].__get__
DICT_ITEMS, DICT_KEYS, DICT_GET, DICT_SET = dict.items, dict.keys, dict.get, dict.__setitem__
LIST_LEN, LIST_SET, LIST_GET, LIST_POP, LIST_COPY = list.__len__, list.__setitem__, list.__getitem__, list.pop, list.copy
OBJECT_GETATTRIBUTE, OBJECT_SETATTR = object.__dict__["__getattribute__"], object.__dict__["__setattr__"]
GETSET = type(type.__dict__["__dict__"])  # what a class's __dict__ attribute is, made by type() itself
FLOAT_REPR = float.__repr__
INT_INDEX = int.__index__
ENCODE_SORTED = make_encoder(None, None, encode_basestring_ascii, None, ": ", ", ", True, False, True)
# The built-in classes an error is an instance of (the contract's "raises RuntimeError" means any subclass).
EXCEPTION_CLASSES = (
    ("ArithmeticError", ArithmeticError), ("AssertionError", AssertionError), ("AttributeError", AttributeError),
    ("Exception", Exception), ("IndexError", IndexError), ("KeyError", KeyError), ("LookupError", LookupError),
    ("MemoryError", MemoryError), ("NotImplementedError", NotImplementedError), ("OSError", OSError),
    ("RecursionError", RecursionError), ("RuntimeError", RuntimeError), ("TypeError", TypeError),
    ("ValueError", ValueError), ("ZeroDivisionError", ZeroDivisionError),
)


# --- the caller thread ----------------------------------------------------------------------------

def make_guard():
    """The one Python frame under the submission's on the caller thread: it holds the job (the
    callable and its arguments) and nothing else, and its globals hold nothing."""
    failed = BaseException

    def guard(job):
        function, args, kwargs = job
        try:
            return True, function(*args, **kwargs)
        except failed as error:
            return False, error

    return FunctionType(guard.__code__, {"__builtins__": {}}, "guard", None, guard.__closure__)


def start_caller(guard):
    """The session's caller thread (`guard`: make_guard's, made before the hook was armed): (put a
    job, get its result), two queues no Python frame holds."""
    jobs, results = SimpleQueue(), SimpleQueue()
    start_new_thread(deque, (map(results.put, map(guard, iter(jobs.get, None))), 0))
    return jobs.put, results.get


def calls(session, *jobs):
    """Several calls in one job on the caller thread, `jobs` being (function, *args) tuples: the
    tuple of their values, or None if any of them raised (the caller then makes them one by one)."""
    ok, values = call(session, tuple, starmap(apply, jobs))
    return values if ok and type(values) is tuple and len(values) == len(jobs) else None


def call(session, function, *args, **kwargs):
    """`function(*args, **kwargs)` on the caller thread: (True, what it returned) or (False, what it raised)."""
    put, get = session["caller"]
    COMPARED[0] = False
    put((function, args, kwargs))
    result = get()
    session["grave"].append(result)  # let go of on the caller thread, never here (a __del__ of the submission's)
    return result


def refused(description):
    """An exception carrying an error described for the judge (a built-in type: defining a class
    here would put it in object.__subclasses__())."""
    error = LookupError("described")
    error.args = ("described", description)
    return error


def described(error):
    """The description an exception from `refused` carries, or None."""
    if type(error) is LookupError and len(error.args) == 2 and error.args[0] == "described":
        return error.args[1]
    return None


def student_error(session, error, traceback_of=None):
    """An exception the submission raised, described as wire.describe_error does: its class and
    the built-in classes it is an instance of read here, its message by str() on the caller
    thread, and its traceback (shown to the student only) by `traceback_of` there."""
    kind = type(error)
    both = calls(session, (str, error), (traceback_of, error)) if traceback_of is not None else None
    if both is not None:
        message, text = both
    else:
        ok, message = call(session, str, error)
        text = call(session, traceback_of, error)[1] if traceback_of is not None else ""
    if type(message) is not str:
        message = f"<unprintable {TYPE_NAME(kind)}>"
    shown = text[-4000:] if type(text) is str else ""
    return {
        "type": TYPE_NAME(kind)[:200],
        "message": message[:2000],
        "not_implemented": has_base(kind, NotImplementedError),
        "rejected_return": False,
        "isa": [name for name, cls in EXCEPTION_CLASSES if has_base(kind, cls)],
        "traceback": shown,
    }


def with_builtin_errors(function, *args):
    """`function(*args)` for a C function of the interpreter's on a plain object (list.pop, a plain
    tensor's copy_): what it raises is a built-in exception, described here as the submission's
    call would have raised it (an IndexError of `free_blocks.pop(9)`)."""
    try:
        return function(*args)
    except Exception as error:
        kind = type(error)
        message = error.args[0] if len(error.args) == 1 and type(error.args[0]) is str else ""
        raise refused({"type": TYPE_NAME(kind), "message": message[:2000], "not_implemented": False, "rejected_return": False,
                       "isa": [name for name, cls in EXCEPTION_CLASSES if has_base(kind, cls)], "traceback": ""}) from None


def rejection(message):
    """A returned value the worker will not send (wrong kind, too large): the student's answer, not their crash."""
    return {"type": "ReturnRejected", "message": message, "not_implemented": False, "rejected_return": True,
            "isa": ["Exception"], "traceback": ""}


def outcome(session, result):
    """The value of a call's result, or the described error raised (for `answer` to report)."""
    ok, value = result
    if not ok:
        raise refused(student_error(session, value, session.get("traceback_of")))
    return value


# --- plain attributes, read and written here -------------------------------------------------------
# A caller-thread job costs two thread switches; for an instance of a plain class (no
# __getattribute__ or __setattr__ of its own, no property of that name) an attribute is an entry
# of its __dict__, which these read and write with C functions, running nothing of the
# submission's.  Anything else goes to the caller thread (answers.py).

def plain_keys(mapping):
    """Whether every key of a dict (or a class's mappingproxy) is an exact str: only then is a
    lookup in it made by C alone.  A key of another type whose hash equals the name looked up
    has its __eq__ run by the lookup, here on the grader thread (red team 22: type() takes a
    namespace with such a key).  Iterating a dict runs nothing."""
    for key in mapping:
        if type(key) is not str:
            return False
    return True


NOT_PLAIN = object()  # what _class_attr finds in a class whose dict cannot be read here


def _class_attr(kind, name):
    """(found, value) of `name` along the class's MRO, read from each class's own dict; NOT_PLAIN
    (found) where a class's dict has a key that is not an exact str."""
    for klass in MRO(kind):
        attrs = TYPE_DICT(klass)
        if not plain_keys(attrs):
            return True, NOT_PLAIN
        if name in attrs:
            return True, attrs[name]
    return False, None


def _defines(kind, names):
    """Whether a class along the MRO defines one of `names` (True where that cannot be read here)."""
    for klass in MRO(kind):
        attrs = TYPE_DICT(klass)
        if not plain_keys(attrs):
            return True
        for name in names:
            if name in attrs:
                return True
    return False


def _instance_dict(obj):
    """The instance's __dict__, when getting it runs nothing of the submission's and its keys are plain strings."""
    kind = type(obj)
    found, descriptor = _class_attr(kind, "__dict__")
    if not found or type(descriptor) is not GETSET:
        return None
    namespace = descriptor.__get__(obj, kind)
    if type(namespace) is not dict or not all(type(key) is str for key in namespace):
        return None
    return namespace


def plain_attribute(obj, name):
    """(True, getattr(obj, name)) when getting it runs nothing of the submission's, else (False, None)."""
    kind = type(obj)
    if _class_attr(kind, "__getattribute__")[1] is not OBJECT_GETATTRIBUTE:
        return False, None
    found, attr = _class_attr(kind, name)
    if found and _defines(type(attr), ("__set__", "__delete__")):
        return False, None  # a property or another data descriptor: the submission's code
    namespace = _instance_dict(obj)
    if namespace is not None and name in namespace:
        return True, namespace[name]
    if found and not _defines(type(attr), ("__get__",)):
        return True, attr  # a plain class attribute
    return False, None


def plain_assign(obj, name, value):
    """`obj.name = value` here when it runs nothing of the submission's; False when it would."""
    kind = type(obj)
    if _class_attr(kind, "__setattr__")[1] is not OBJECT_SETATTR:
        return False
    found, attr = _class_attr(kind, name)
    if found and _defines(type(attr), ("__set__", "__delete__")):
        return False
    namespace = _instance_dict(obj)
    if namespace is None:
        return False
    DICT_SET(namespace, name, value)
    return True


def attribute(session, obj, name):
    """getattr(obj, name): here when it is a plain attribute, else on the caller thread (its errors raised described)."""
    plain, value = plain_attribute(obj, name)
    return value if plain else outcome(session, call(session, getattr, obj, name))


def assign(session, obj, name, value):
    """setattr(obj, name, value): here when it is a plain attribute, else on the caller thread."""
    if not plain_assign(obj, name, value):
        outcome(session, call(session, setattr, obj, name, value))


# --- readings with C functions only ----------------------------------------------------------------

def has_base(kind, base):
    for klass in MRO(kind):
        if klass is base:
            return True
    return False


def exact_text(value):
    """A str (a subclass's too) as an exact str, read by C; "?" for anything else."""
    return STR_COPY(value) if has_base(type(value), str) else "?"


def TYPE_NAME(kind):  # noqa: N802  (it stands for the C getter it wraps)
    """A class's __name__, an exact str: a str subclass set as a class's name would run its own
    __format__, __eq__, __add__ or __getitem__ wherever the name is used (red team 22)."""
    return exact_text(RAW_TYPE_NAME(kind))


def TYPE_QUALNAME(kind):  # noqa: N802
    return exact_text(RAW_TYPE_QUALNAME(kind))


def as_int(value):
    """The int an integer value stands for (an int subclass too; never a bool), else None (wire._as_int)."""
    kind = type(value)
    if kind is int:
        return value
    if kind is bool or not has_base(kind, int) or has_base(kind, bool):
        return None
    return INT_INDEX(value)


def _module_of(kind):
    attrs = TYPE_DICT(kind)
    module = attrs["__module__"] if plain_keys(attrs) and "__module__" in attrs else None
    return module if type(module) is str else "?"


def plain_reading(session, value, depth=0):
    """What wire.plain makes of `value`, read here; only the repr of an object that is not plain
    data is asked of the caller thread (as wire.plain does, on the submission's code)."""
    kind = type(value)
    if value is None or kind is bool:
        return value
    number = as_int(value)
    if number is not None:
        bits = number.bit_length()
        return number if bits <= MAX_INT_BITS else {"__object__": "builtins.int", "repr": f"<int of {bits} bits>"}
    if kind is str:
        return value if len(value) <= MAX_STR else {"__object__": "builtins.str", "repr": value[:200] + "..."}
    if kind is float:
        return value if value == value and value not in (float("inf"), float("-inf")) else {"__float__": FLOAT_REPR(value)}
    if depth < 4 and has_base(kind, dict):
        pairs = list(DICT_ITEMS(value))[:64]
        return {"__dict__": [[plain_reading(session, k, depth + 1), plain_reading(session, v, depth + 1)] for k, v in pairs]}
    if depth < 4 and (kind is list or kind is tuple):
        return {"__" + TYPE_NAME(kind) + "__": [plain_reading(session, v, depth + 1) for v in list(value)[:4096]]}
    ok, shown = call(session, repr, value)
    shown = shown[:200] if ok and type(shown) is str else f"<unprintable {TYPE_NAME(kind)}>"
    return {"__object__": _module_of(kind) + "." + TYPE_QUALNAME(kind), "repr": shown}


# --- torch operators the grader thread still runs ----------------------------------------------------
# A CUDA tensor's bytes, a tensor the judge describes by its bytes, a view of the judge's file: these
# take torch's operators (aten::view is checked by its result, answers.checked_view).  A kernel a
# cell registers over one of them (torch.library) would run here and answer what it likes, so
# before each such use the dispatcher's entries for them, under the keys a CPU or CUDA tensor goes
# through, are compared with what they were before any cell ran; a change is tampering ("kernel"),
# found here and said in the next reply (FOUND).  Other keys (Meta, Functionalize ...) are left out:
# a library a notebook imports may register there (torch._meta_registrations does).
WATCHED_OPS = (
    "aten::detach", "aten::alias", "aten::to.device", "aten::to.dtype", "aten::to.dtype_layout", "aten::_to_copy",
    "aten::contiguous", "aten::clone", "aten::reshape", "aten::_reshape_alias", "aten::_unsafe_view", "aten::view",
    "aten::view.dtype", "aten::_local_scalar_dense", "aten::item", "aten::all", "aten::eq.Scalar", "aten::copy_",
    "aten::empty.memory_format", "aten::resolve_conj", "aten::resolve_neg",
)
WATCHED_KEYS = frozenset((
    "CPU", "CUDA", "BackendSelect", "Python", "PythonTLSSnapshot", "PythonDispatcher", "PreDispatch", "Conjugate", "Negative",
    "ZeroTensor", "ADInplaceOrView", "AutogradCPU", "AutogradCUDA", "AutogradOther", "AutocastCPU", "AutocastCUDA", "Undefined",
    "Autograd[alias]", "CompositeImplicitAutograd[alias]", "CompositeExplicitAutograd[alias]",
    "CompositeExplicitAutogradNonFunctional[alias]",
))
DUMP, DUMP_TABLE = torch._C._dispatch_dump, torch._C._dispatch_dump_table


def dispatcher_entries(op):
    """What the dispatcher holds for `op` under the watched keys: the kernels registered (their
    kind shows a Python kernel, whatever file it claims) and the table computed from them."""
    lines = (DUMP(op) + "\n" + DUMP_TABLE(op)).split("\n")
    return "\n".join([line for line in lines if line.split(":", 1)[0] in WATCHED_KEYS])


BEFORE_CELLS = {op: dispatcher_entries(op) for op in WATCHED_OPS}  # this module loads before any cell
FOUND = []  # tampering the grader thread found itself: [kind, detail, where, while the cells ran, in the grader thread]
# Whether the dispatcher was compared since the submission's code last ran on the caller thread
# (a comparison costs a millisecond; `call` clears it).
COMPARED = [False]


def found(kind, detail):
    if [kind, detail, "", False, True] not in FOUND and len(FOUND) < 50:
        FOUND.append([kind, detail, "", False, True])


def operators_intact():
    """Before the grader thread runs a torch operator: False (and tampering found) where a watched
    operator's kernels for CPU or CUDA tensors changed since before the cells ran."""
    if COMPARED[0]:
        return not FOUND
    intact = True
    for op in WATCHED_OPS:
        if dispatcher_entries(op) != BEFORE_CELLS[op]:
            found("kernel", op)
            intact = False
    COMPARED[0] = True
    return intact


def python_keyed(tensor):
    """Whether the tensor dispatches to Python (a subclass with __torch_dispatch__, whatever its
    type() says: __class__ can be set to torch.Tensor): asking it anything, even its size,
    stride or device, may run its class's code, here on the grader thread (red team 21: a
    "sizes" policy restored a buffer's bytes as they were read).  Its key set is read by C alone."""
    keys = KEYS_OF(tensor)
    return HAS_KEY(keys, PYTHON_KEYS[0]) or HAS_KEY(keys, PYTHON_KEYS[1])


def memory_of(tensor, typestr, writable=False):
    """A CPU tensor's elements as a numpy array over its own memory, or None where its memory is
    not its value (a negative or conjugate view, no storage, a storage shorter than its strides
    reach: a storage resized after the tensor was made).  No torch operator runs: a kernel
    registered over one would run here, on the grader thread."""
    if HAS_KEY(KEYS_OF(tensor), NOT_ITS_MEMORY[0]) or HAS_KEY(KEYS_OF(tensor), NOT_ITS_MEMORY[1]) or HAS_KEY(KEYS_OF(tensor), NOT_ITS_MEMORY[2]):
        return None
    size, shape, strides = ELEMENT_SIZE(tensor), [int(d) for d in SIZE_OF(tensor)], [int(s) for s in STRIDE_OF(tensor)]
    reach = 0
    for d, s in zip(shape, strides, strict=True):
        if d == 0:
            return AS_ARRAY(SimpleNamespace(__array_interface__={"version": 3, "typestr": typestr, "data": (0, False), "shape": tuple(shape)}))
        if s < 0:
            return None
        reach += (d - 1) * s
    try:
        pointer, needed = DATA_PTR(tensor), (STORAGE_OFFSET(tensor) + reach + 1) * size
        if pointer == 0 or STORAGE_BYTES(STORAGE_OF(tensor)) < needed:
            return None
    except Exception:  # no storage (a wrapper subclass)
        return None
    return AS_ARRAY(SimpleNamespace(__array_interface__={
        "version": 3, "typestr": typestr, "data": (pointer, not writable), "shape": tuple(shape), "strides": tuple([s * size for s in strides])}))


def tensor_reading(value):
    """A tensor as wire.tensor_payload sends it (dtype, shape, device, base64 of its bytes), read
    with C functions only (a CPU tensor's from its memory); a `rejection` for a value that side
    would not send."""
    if not has_base(type(value), TENSOR):
        return rejection(f"expected a torch.Tensor, got {TYPE_NAME(type(value))}")
    if python_keyed(value):
        return rejection("a tensor subclass with __torch_dispatch__ (or a Python dispatch key): return a plain tensor")
    with NO_TORCH_FUNCTION(), NO_TORCH_DISPATCH():
        dtype = DTYPE_OF(value)
        name = DICT_GET(DTYPE_NAMES, dtype)
        shape = [int(d) for d in SIZE_OF(value)]
        if name is None:
            return rejection(f"unsupported dtype {str(dtype).replace('torch.', '')}")
        if NUMEL(value) * ELEMENT_SIZE(value) > MAX_REPLY_TENSOR:
            return rejection(f"the returned tensor is too large ({shape}, {name})")
        device = DEVICE_OF(value).type
        if device == "cpu":
            memory = memory_of(value, BYTES_TYPE[ELEMENT_SIZE(value)])
            if memory is None:
                return rejection("a tensor whose memory is not its value (a negative or conjugate view, or no storage): return a plain tensor")
            data = TO_BYTES(memory)
        else:  # a CUDA tensor's bytes need torch's copy to the host (docs/trust.md)
            operators_intact()
            tensor = value if type(value) is PLAIN_TENSOR else TENSOR.as_subclass(value, PLAIN_TENSOR)
            flat = TENSOR.reshape(TENSOR.contiguous(TENSOR.to(TENSOR.detach(tensor), "cpu")), (-1,))
            data = TO_BYTES(TENSOR.numpy(TENSOR.view(flat, DTYPES["uint8"])))
    return {"dtype": name, "shape": shape, "device": device, "data": b2a_base64(data, newline=False).decode("ascii")}


def tensor_facts(value):
    """(shape, dtype name, whether every element is zero) of a tensor, read with C functions only
    (a CPU tensor's from its memory); None for whether it is zero where that cannot be read, and
    for its shape too where it dispatches to Python."""
    if python_keyed(value):
        return None, "a tensor subclass with __torch_dispatch__", None
    with NO_TORCH_FUNCTION(), NO_TORCH_DISPATCH():
        shape, name = [int(d) for d in SIZE_OF(value)], DICT_GET(DTYPE_NAMES, DTYPE_OF(value))
        shown = name if name is not None else str(DTYPE_OF(value)).replace("torch.", "")
        if name is None or DEVICE_OF(value).type != "cpu":
            operators_intact()
            tensor = value if type(value) is PLAIN_TENSOR else TENSOR.as_subclass(value, PLAIN_TENSOR)
            return shape, shown, bool(TENSOR.item(TENSOR.all(TENSOR.eq(tensor, 0))))
        memory = memory_of(value, VALUE_TYPE[name])
        if memory is None:
            return shape, shown, None
        if name == "bfloat16":  # zero whatever its sign bit
            memory = BIT_AND(memory, 0x7FFF)
        return shape, shown, not bool(ANY(memory))


def digest(session, value):
    """The digest the judge takes of a reply (grader/checks/frame.py), taken here of the object itself."""
    try:
        if has_base(type(value), TENSOR):
            reading = tensor_reading(value)
            if "data" not in reading:
                return None
            shape = "[" + ", ".join([str(d) for d in reading["shape"]]) + "]"
            return openssl_sha256((reading["dtype"] + shape + reading["data"]).encode()).hexdigest()
        return openssl_sha256("".join(ENCODE_SORTED(plain_reading(session, value), 0)).encode()).hexdigest()
    except BaseException:
        return None


def edit(session, value):
    """The caller changes what a call gave it (its own to change): every entry set to 0, a plain
    list's items in place (a shallow copy handed out again shares it).  A dict with a key that
    is neither an exact str nor an exact int is edited on the caller thread: setting an entry
    compares keys, which may run the submission's __eq__.  Whether every change was made (False:
    one raised, as it would in the caller's own code: red team 37's key whose __eq__ raises)."""
    kind = type(value)
    if has_base(kind, dict):
        jobs, plain = [], True
        for name, entry in list(DICT_ITEMS(value)):  # no lookup: iterating runs nothing
            if type(name) is str or type(name) is int:
                if type(entry) is list:
                    jobs.append((LIST_SET, entry, slice(None), [0] * LIST_LEN(entry)))
                else:
                    jobs.append((DICT_SET, value, name, 0))
            else:
                plain = False
        if plain:
            for job in jobs:
                apply(*job)
        elif jobs:
            return calls(session, *jobs) is not None
    elif has_base(kind, list):
        LIST_SET(value, slice(None), [0] * LIST_LEN(value))
    return True


def int_list(session, value, what):
    """A list of ints read from a list, tuple or deque (subclasses too) of integers (wire.int_list);
    its items got by list() on the caller thread (a subclass's __iter__ is the submission's)."""
    kind = type(value)
    if not (has_base(kind, list) or has_base(kind, tuple) or (TYPE_NAME(kind) == "deque" and _module_of(kind) == "collections")):
        raise refused_type(f"{what} should be a list, got {TYPE_NAME(kind)}")
    items = outcome(session, call(session, list, value))
    out = []
    for item in items:
        number = as_int(item)
        if number is None:
            ok, shown = call(session, str, item)
            shown = shown[:50] if ok and type(shown) is str else f"<unprintable {TYPE_NAME(type(item))}>"
            raise refused_type(f"{what} should hold ints, got {TYPE_NAME(type(item))}: {shown}")
        out.append(number)
    return out


def refused_type(message):
    return refused({"type": "TypeError", "message": message, "not_implemented": False, "rejected_return": False,
                    "isa": ["Exception", "TypeError"], "traceback": ""})


# --- code, as the given methods are bound ------------------------------------------------------------

def _const_text(value, depth=0):
    """repr() of a code constant of the built-in kinds compile() makes; None for anything else."""
    kind = type(value)  # compared by identity: `in` would run a metaclass's __eq__
    if value is None or value is ... or any(kind is k for k in (bool, int, float, complex, str, bytes)):
        return repr(value)
    if depth < 8 and (kind is tuple or kind is frozenset):
        if None in [_const_text(v, depth + 1) for v in value]:
            return None
        return repr(value)
    return None


def code_parts(code, depth=0):
    """A code object as data: what the judge needs to take its fingerprint (grader/given_code.py)."""
    consts = []
    for const in code.co_consts:
        if type(const) is CodeType:
            consts.append({"code": code_parts(const, depth + 1) if depth < 8 else None})
        else:
            consts.append({"repr": _const_text(const)})
    names = (code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars)
    if not all(type(t) is tuple and all(type(n) is str for n in t) for t in names):
        raise TypeError("code names that are not strings")
    return {
        "args": [code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_flags],
        "code": b2a_base64(code.co_code, newline=False).decode("ascii"),
        "consts": consts,
        "names": list(code.co_names),
        "varnames": list(code.co_varnames),
        "freevars": list(code.co_freevars),
        "cellvars": list(code.co_cellvars),
    }


def bound_code(cls, method):
    """The code of `method` as a call on an instance of `cls` finds it: its parts, or what else is there."""
    if not has_base(type(cls), type):
        return "not a class"
    if type(method) is not str:
        return "missing"
    for klass in MRO(cls):
        attrs = TYPE_DICT(klass)
        if not plain_keys(attrs):
            return "a class whose dict has keys that are not strings"
        if method in attrs:
            function = attrs[method]
            break
    else:
        return "missing"
    if type(function) is not FunctionType or function.__defaults__ or function.__kwdefaults__ or function.__closure__:
        return "not the template's plain function"
    return code_parts(function.__code__)


def method(name, *args, **kwargs):
    """A C callable: obj -> getattr(obj, name)(*args, **kwargs) (one job on the caller thread)."""
    return methodcaller(name, *args, **kwargs)
