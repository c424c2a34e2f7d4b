"""The process that runs a submission's code.  Started as a script, never imported by the judge.

    python -I worker.py SOCKET_PATH

It runs the notebook's cells once, then waits for "fork" orders; each fork becomes a
session child that answers operations (call this method, run that function) one at a time
over its own connection.  It uses only the standard library and torch, and the judge
trusts nothing it says: every answer is an observation to be checked, never a verdict.
"""

import base64
import builtins
import hashlib
import json
import os
import random
import socket
import struct
import sys
import traceback

CONTRACT = ("estimate_kv_cache_bytes", "Request", "KVCacheManager", "paged_attention")
BLOCKED_TOP_LEVEL = ("reference", "student_template", "grader", "notebooks")
MAX_FRAME = 256 << 20
TENSOR_DTYPES = ("float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool")

_pack = struct.pack  # bound before any cell runs, so a cell cannot swap the framing out
_unpack = struct.unpack
_dumps = json.dumps
_loads = json.loads
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


# --- errors and plain data -------------------------------------------------------------

def describe_error(error):
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.startswith("<cell")]
    return {
        "type": type(error).__name__,
        "message": _safe_str(error)[:2000],
        "not_implemented": isinstance(error, NotImplementedError),
        "traceback": "".join(traceback.format_list(frames[-6:]))[-4000:],
    }


def _safe_str(value):
    try:
        return str(value)
    except BaseException:  # a hostile __str__ must not take the worker down
        return f"<unprintable {type(value).__name__}>"


def plain(value, depth=0):
    """Turn a returned object into JSON data; anything that is not plain data is described."""
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        return value if value == value and value not in (float("inf"), float("-inf")) else {"__float__": repr(value)}
    if depth < 4 and kind is dict:
        return {"__dict__": [[plain(k, depth + 1), plain(v, depth + 1)] for k, v in list(value.items())[:64]]}
    if depth < 4 and kind in (list, tuple):
        return {"__" + kind.__name__ + "__": [plain(v, depth + 1) for v in list(value)[:4096]]}
    return {"__object__": kind.__module__ + "." + kind.__qualname__, "repr": _safe_str(value)[:200]}


def int_list(value, what):
    if type(value) is not list:
        raise TypeError(f"{what} should be a list, got {type(value).__name__}")
    out = []
    for item in value:
        if type(item) is not int:
            raise TypeError(f"{what} should hold ints, got {type(item).__name__}: {_safe_str(item)[:50]}")
        out.append(item)
    return out


# --- tensors -------------------------------------------------------------------------

def tensor_from(payload, device="cpu"):
    import torch

    dtype = getattr(torch, payload["dtype"])
    raw = bytearray(base64.b64decode(payload["data"]))
    flat = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
    return flat.reshape(payload["shape"]).clone().to(device)


def tensor_payload(value):
    import torch

    if not isinstance(value, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor, got {type(value).__name__}")
    if type(value) is not torch.Tensor:
        with torch._C.DisableTorchFunction():
            value = torch.Tensor.as_subclass(value, torch.Tensor)
    dtype = str(value.dtype).replace("torch.", "")
    meta = {"dtype": dtype, "shape": list(value.shape), "device": value.device.type}
    if dtype not in TENSOR_DTYPES:
        raise TypeError(f"unsupported dtype {dtype}")
    data = value.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    meta["data"] = base64.b64encode(data).decode()
    return meta


def digest(tensor):
    import torch

    data = tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    return hashlib.sha256(data).hexdigest()


# --- the session child: one operation per request -------------------------------------

class Session:
    def __init__(self, namespace):
        self.ns = namespace
        self.handles = {}

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

    def op_ledger(self, msg):
        return plain(self.ns["estimate_kv_cache_bytes"](**msg["kwargs"]))

    def op_new(self, msg):
        return self.new_handle(self.ns[msg["cls"]](**msg["kwargs"]))

    def op_method(self, msg):
        target = self.handles[msg["target"]]
        args = [self.handles[h] for h in msg.get("args", [])]
        return plain(getattr(target, msg["name"])(*args))

    def op_place(self, msg):
        manager, req = self.handles[msg["manager"]], self.handles[msg["request"]]
        taken = set(msg["table"])
        if type(manager.free_blocks) is not list:
            raise TypeError("free_blocks should be a list")
        manager.free_blocks[:] = [b for b in manager.free_blocks if b not in taken]
        req.block_table = list(msg["table"])
        req.seq_len = msg["seq_len"]
        return None

    def op_set_table(self, msg):
        req = self.handles[msg["request"]]
        req.block_table = list(msg["table"])
        req.seq_len = msg["seq_len"]
        return None

    def op_set_pool(self, msg):
        manager = self.handles[msg["manager"]]
        manager.physical_kv_cache.copy_(tensor_from(msg["tensor"]))
        return None

    def op_get_cache(self, msg):
        manager, req = self.handles[msg["manager"]], self.handles[msg["request"]]
        return tensor_payload(manager.get_physical_cache(req))

    def op_attention(self, msg):
        import torch

        device = msg.get("device", "cpu")
        names = ("query", "key_cache", "value_cache", "block_tables", "seq_lens")
        inputs = {name: tensor_from(msg[name], device) for name in names}
        kwargs = dict(inputs)
        if msg.get("scale") is not None:
            kwargs["scale"] = msg["scale"]
        out = self.ns["paged_attention"](**kwargs)
        if device == "cuda":
            torch.cuda.synchronize()
        return {"output": tensor_payload(out), "input_digests": {name: digest(t) for name, t in inputs.items()}}

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
            send(sock, reply)


def _plain_int(value, what):
    if type(value) is not int:
        raise TypeError(f"{what} should be an int, got {type(value).__name__}")
    return value


def _observe(read):
    try:
        return {"ok": read()}
    except BaseException as error:
        return {"error": describe_error(error)}


# --- start-up: run the cells, then serve forks ----------------------------------------

def run_cells(sock, cells, namespace):
    for index, source in cells:
        send(sock, {"event": "cell_start", "index": index})
        try:
            exec(compile(source, f"<cell {index}>", "exec"), namespace)
        except BaseException as error:  # SystemExit and KeyboardInterrupt included
            send(sock, {"event": "cell_done", "index": index, "error": describe_error(error)})
        else:
            send(sock, {"event": "cell_done", "index": index})


def describe_names(namespace):
    import inspect

    found = {}
    for name in CONTRACT:
        if name not in namespace:
            continue
        obj = namespace[name]
        try:
            signature = str(inspect.signature(obj))
        except (TypeError, ValueError):
            signature = None
        found[name] = {"kind": "class" if isinstance(obj, type) else type(obj).__name__, "signature": signature}
    return found


def reseed():
    import torch

    random.seed(0)
    torch.manual_seed(0)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed(0)


def main(path):
    sys.meta_path.insert(0, _BlockAnswerKey())
    import torch

    torch.set_num_threads(1)  # small tensors; one thread also keeps fork() safe
    control = connect(path)
    load = recv(control)
    namespace = {"__name__": "__main__", "__builtins__": builtins}
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
    import signal

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forked sessions are reaped automatically
    while True:
        order = recv(control)
        if order.get("op") != "fork":
            return
        if os.fork() == 0:
            control.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            try:
                reseed()
                session_sock = connect(path)
                send(session_sock, {"event": "hello", "session": order.get("session")})
                Session(namespace).serve(session_sock)
            finally:
                os._exit(0)


if __name__ == "__main__":
    try:
        main(sys.argv[1])
    except (EOFError, BrokenPipeError, ConnectionError):
        pass
    os._exit(0)
