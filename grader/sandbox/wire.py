"""What the worker says to the judge, and how: framing, plain data, errors and tensors.

Part of the worker (worker.py loads it by path); standard library and torch only.  Every
value a submission returns passes through here, so nothing here trusts one: its type, its
__str__, its size.
"""

# Bound before any cell can reassign them in the builtins module (worker.py says why).
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
    ZeroDivisionError,
    NotImplementedError,
    TypeError,
    ValueError,
    bool,
    bytearray,
    dict,
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
    str,
    tuple,
    type,
)
import base64
import json
import mmap
import os
import socket
import struct
import traceback


MAX_FRAME = 256 << 20
MAX_REPLY_TENSOR = 8 << 20  # bytes; the judge refuses replies over 16 MiB, and no correct answer is near
MAX_INT_BITS = 8192  # a returned int larger than this is described, not sent (JSON and the judge stay small)
MAX_STR = 1 << 16
TENSOR_DTYPES = ("float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool")

_pack = struct.pack  # bound before any cell runs, so a cell cannot swap the framing out
_unpack = struct.unpack
_dumps = json.dumps
_loads = json.loads


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


# Folders whose files are the submission's own (the copy of the notebook's folder: modules it
# wrote and imported, scripts it ran with %run): their frames are shown, by relative path.
SOURCE_ROOTS = []


def _own_frame(frame):
    name = str(frame.filename)
    if name.startswith("<cell"):  # the judge shows the cell's line itself (report/cells.py)
        return traceback.FrameSummary(name, frame.lineno, frame.name, line="")
    for root in SOURCE_ROOTS:
        if name.startswith(root):
            return traceback.FrameSummary(name[len(root):], frame.lineno, frame.name, line=frame.line)
    return None


def traceback_text(error):
    """Where an error of the submission's came from, in its own frames only (shown to the student)."""
    try:
        frames = [own for own in (_own_frame(f) for f in traceback.extract_tb(error.__traceback__)) if own is not None]
        return "".join(traceback.format_list(frames[-6:]))[-4000:]
    except BaseException:
        return ""


def describe_error(error):
    shown = traceback_text(error)
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
