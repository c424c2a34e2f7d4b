"""The operations a session child answers, one per request: call this method, run that
function, read this state.  Part of the worker (worker.py loads it by path).
"""

# Bound before any cell can reassign them in the builtins module (worker.py says why).
from builtins import (  # noqa: I001, UP029
    BaseException,
    TypeError,
    getattr,
    isinstance,
    len,
    list,
    str,
    type,
)
import hashlib
import random
import sys

# Loaded by worker.py before this module, by path (in the worker the sandbox is no package).
from _pa_sandbox_wire import (  # noqa: I001
    _as_int,
    _dumps,
    _pack,
    _safe_str,
    code_fingerprint,
    describe_error,
    int_list,
    plain,
    recv,
    SharedInputs,
    tensor_from,
    tensor_payload,
)

_sha256 = hashlib.sha256  # bound before any cell runs (a cell may replace hashlib's)


# --- the session child: one operation per request -------------------------------------

class Session:
    def __init__(self, namespace):
        self.ns = namespace
        self.handles = {}
        self.example = {}  # what one example keeps between its calls (cleared by reseed)
        self.pools = {}  # manager handle -> the pool tensor the judge shares with this child

    def new_handle(self, obj):
        handle = len(self.handles) + 1
        self.handles[handle] = obj
        return handle

    def snapshot(self, spec):
        state = {}
        if spec.get("manager") is not None:
            manager = self.handles[spec["manager"]]
            state["free_blocks"] = _observe_list(lambda: manager.free_blocks, "free_blocks")
            shared = self.pools.get(spec["manager"])
            if shared is not None:
                # Whether the pool is still the tensor the judge reads (its contents the judge reads itself).
                state["pool"] = {"same": _observe(lambda: manager.physical_kv_cache is shared)}
        requests = {}
        for handle in spec.get("requests", []):
            req = self.handles[handle]
            requests[str(handle)] = {
                "seq_len": _observe(lambda req=req: _plain_int(req.seq_len, "seq_len"), lambda req=req: req.seq_len),
                "block_table": _observe_list(lambda req=req: req.block_table, "block_table"),
            }
        state["requests"] = requests
        if spec.get("kept") is not None:  # earlier results, as they are after this call
            kept = self.example.get("results", {})
            state["kept"] = [_digest(kept[str(key)]) if str(key) in kept else None for key in spec["kept"]]
        return state

    def keep(self, msg, value):
        """What a call returned belongs to its caller: keep it, to see later whether it changed."""
        if msg.get("keep") is not None:
            self.example.setdefault("results", {})[str(msg["keep"])] = value
        return value

    # Operations -------------------------------------------------------------------
    def op_observe(self, msg):
        return None  # the reply's snapshot is the point

    def op_reseed(self, msg):
        reseed()  # each example starts from the same random state, whatever ran before it
        self.example = {}
        self.handles, self.pools = {}, {}  # an example's objects are its own (and their pools unmapped)
        return None

    def op_edit_kept(self, msg):
        """The caller changes what a call gave it (its own to change): every entry set to 0.  A
        later call must not see that (a result kept and handed out again, an lru_cache)."""
        value = self.example.get("results", {}).get(str(msg["key"]))
        if isinstance(value, dict):
            for name in list(value):
                value[name] = 0
        elif isinstance(value, list):
            value[:] = [0] * len(value)
        return None

    def op_permute(self, msg):
        """Reorder the free list (any order is legal): what the reproduction writes."""
        manager = self.handles[msg["manager"]]
        manager.free_blocks[:] = [manager.free_blocks[i] for i in msg["order"]]
        return None

    def op_share_pool(self, msg):
        """The pool becomes a tensor on the judge's file, mapped shared: what any call writes into
        it, the judge reads back itself.  The reproduction writes it as `m.physical_kv_cache = ...`.
        (torch maps the file itself and keeps no descriptor open: a session maps many.)"""
        import torch

        manager = self.handles[msg["manager"]]
        count = 1
        for d in msg["shape"]:
            count *= d
        pool = torch.from_file(msg["shared"]["path"], shared=True, size=count, dtype=getattr(torch, msg["dtype"])).view(msg["shape"])
        manager.physical_kv_cache = pool
        self.pools[msg["manager"]] = pool
        return None

    def op_manager_meta(self, msg):
        """What the given constructor sets up: the sizes it keeps and its pool (shape, dtype, all zero)."""
        import torch

        manager = self.handles[msg["manager"]]
        pool = manager.physical_kv_cache
        if not isinstance(pool, torch.Tensor):
            return plain({"sizes": [manager.num_blocks, manager.block_size, manager.head_dim], "pool": None})
        return plain({
            "sizes": [manager.num_blocks, manager.block_size, manager.head_dim],
            "pool": [list(pool.shape), str(pool.dtype).replace("torch.", ""), bool((pool == 0).all())],
        })

    def op_request_meta(self, msg):
        """The id a request keeps (the given constructor sets it)."""
        return plain(self.handles[msg["request"]].request_id)

    def op_given_methods(self, msg):
        """The code of each given method as bound now, reached the way a call reaches it (through
        the class bound to the contract's name, its bases, decorators, setattr, later
        assignments): a digest of its fingerprint, or what else is bound there."""
        found = {}
        for name, methods in msg["methods"].items():
            cls = self.ns.get(name)
            for method in methods:
                found[f"{name}.{method}"] = _bound_code(cls, method)
        return {"__dict__": [[k, v] for k, v in found.items()]}

    def op_ledger(self, msg):
        return plain(self.keep(msg, self.ns["estimate_kv_cache_bytes"](*msg.get("args", []), **msg.get("kwargs", {}))))

    def op_new(self, msg):
        return self.new_handle(self.ns[msg["cls"]](**msg["kwargs"]))

    def op_method(self, msg):
        target = self.handles[msg["target"]]
        args = [self.handles[h] for h in msg.get("args", [])]
        return plain(self.keep(msg, getattr(target, msg["name"])(*args)))

    def op_place(self, msg):
        """Give a request blocks the way a correct prefill would: exactly what the reproduction
        writes, `r.block_table = [m.free_blocks.pop(i) for i in indices]`."""
        manager, req = self.handles[msg["manager"]], self.handles[msg["request"]]
        req.block_table = [manager.free_blocks.pop(i) for i in msg["indices"]]
        return None

    def op_set_table(self, msg):
        req = self.handles[msg["request"]]
        req.block_table = list(msg["table"])
        req.seq_len = msg["seq_len"]
        return None

    def op_set_pool(self, msg):
        manager = self.handles[msg["manager"]]
        if msg.get("rebind"):  # a new tensor object, as `m.physical_kv_cache = ...` makes
            manager.physical_kv_cache = tensor_from(msg["tensor"])
        else:
            manager.physical_kv_cache.copy_(tensor_from(msg["tensor"]))
        return None

    def op_get_cache(self, msg):
        manager, req = self.handles[msg["manager"]], self.handles[msg["request"]]
        out = manager.get_physical_cache(req)
        payload = tensor_payload(out)
        self.keep(msg, out)
        return payload

    def op_attention(self, msg):
        import torch

        device = msg.get("device", "cpu")
        shared = SharedInputs(msg["shared"]) if msg.get("shared") else None
        names = ("query", "key_cache", "value_cache", "block_tables", "seq_lens")
        inputs = {name: tensor_from(msg[name], device, shared) for name in names}
        previous = self.example.get("caches")
        if msg.get("reuse_caches") and previous is not None:
            # The caches of the previous call, written in place, as a decode step writes them.
            for name, tensor in zip(("key_cache", "value_cache"), previous, strict=True):
                if tensor.shape == inputs[name].shape and tensor.dtype == inputs[name].dtype:
                    tensor.copy_(inputs[name])
                    inputs[name] = tensor
        self.example["caches"] = (inputs["key_cache"], inputs["value_cache"])
        args = [inputs[name] for name in names]
        # The reproduction calls it the same way: positionally, plus scale as the grader passes it.
        if msg.get("scale_style") == "positional":
            out = self.ns["paged_attention"](*args, msg["scale"])
        elif msg.get("scale_style") == "keyword":
            out = self.ns["paged_attention"](*args, scale=msg["scale"])
        else:
            out = self.ns["paged_attention"](*args)
        if device == "cuda":
            torch.cuda.synchronize()
        payload = tensor_payload(out)
        self.keep(msg, out)
        # Whether the inputs changed, the judge reads from the shared file itself.
        return {"output": payload}

    def op_kv_lab_step(self, msg):
        """One step of the KV-utilisation lab (grader/kvlab/sandboxed.py, which decides
        everything: this only makes the calls, in order, and reads back what they left).

        Releases `release_first`; room for one more token for each of `decode`, stopping at
        the first call that raises; then releases `release_after`, admits `admit` (a new
        Request each, prefilled) up to the first that raises, and reads the free list's length
        and each kept or admitted request's table length and seq_len (with `audit`, the lists).
        A call that raises ends the step there and is described; the judge decides what it means.
        """
        live = self.example.setdefault("kv_lab", {})  # request id -> its Request
        manager = self.handles[msg["manager"]]
        reply = {"decoded": 0, "admitted": 0}

        def failed(call, request, error):
            reply["failed"] = {"call": call, "request": request, "error": describe_error(error)}
            return reply

        for request in msg["release_first"]:
            try:
                manager.release_request(live.pop(request))
            except BaseException as error:
                return failed("release_request", request, error)
        for request in msg["decode"]:
            try:
                manager.allocate_for_decode(live[request])
            except BaseException as error:
                return failed("allocate_for_decode", request, error)
            reply["decoded"] += 1
        for request in msg["release_after"]:
            try:
                manager.release_request(live.pop(request))
            except BaseException as error:
                return failed("release_request", request, error)
        make = self.ns["Request"]
        admitted = []
        for request, length in msg["admit"]:
            try:
                req = make(request_id=request, prompt_len=length)
                manager.allocate_for_prefill(req)
            except BaseException as error:
                reply["admit_stopped"] = {"request": request, "error": describe_error(error)}
                break
            live[request] = req
            admitted.append(request)
        reply["admitted"] = len(admitted)
        try:
            observed = [live[request] for request in msg["keep"]] + [live[request] for request in admitted]
            reply["free"] = _plain_int(len(manager.free_blocks), "len(free_blocks)")
            reply["tables"] = [_plain_int(len(req.block_table), "len(block_table)") for req in observed]
            reply["seqs"] = [_plain_int(req.seq_len, "seq_len") for req in observed]
            if msg.get("audit"):
                reply["free_list"] = int_list(manager.free_blocks, "free_blocks")
                reply["table_lists"] = [int_list(req.block_table, "block_table") for req in observed]
        except BaseException as error:
            return failed("reading free_blocks / block_table / seq_len", None, error)
        return reply

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
            try:
                data = _dumps(reply, allow_nan=True).encode()
            except BaseException as error:  # a value JSON cannot carry: say so instead of dying
                data = _dumps({"id": msg.get("id"), "ok": False, "error": describe_error(error)}).encode()
            sock.sendall(_pack(">I", len(data)) + data)


def _plain_int(value, what):
    as_int = _as_int(value)
    if as_int is None:
        raise TypeError(f"{what} should be an int, got {type(value).__name__}")
    return as_int


def _observe(read, shown=None):
    try:
        return {"ok": read()}
    except BaseException as error:
        observed = {"error": describe_error(error)}
        if shown is not None:
            observed["error"]["shown"] = _show(shown)
        return observed


def _observe_list(get, what):
    """A list of ints, with the container's kind (the contract says list; the judge decides)."""
    try:
        value = get()
    except BaseException as error:
        return {"error": describe_error(error)}
    try:
        kind = "list" if isinstance(value, list) else _safe_str(type.__dict__["__name__"].__get__(type(value)))[:40]
        return {"ok": int_list(value, what), "type": kind}
    except BaseException as error:
        observed = {"error": describe_error(error)}
        observed["error"]["shown"] = _show(lambda: value)
        return observed


def _show(get):
    try:
        return _safe_str(get())[:200]
    except BaseException:
        return "<unreadable>"


def _bound_code(cls, method):
    if not isinstance(cls, type):
        return "not a class"
    try:
        for klass in type.__dict__["__mro__"].__get__(cls):
            attrs = type.__dict__["__dict__"].__get__(klass)
            if method in attrs:
                function = attrs[method]
                break
        else:
            return "missing"
        code = function.__code__ if type(function).__name__ == "function" else None
        if code is None or function.__defaults__ or function.__kwdefaults__ or function.__closure__:
            return "not the template's plain function"
        return _sha256(code_fingerprint(code).encode()).hexdigest()
    except BaseException:
        return "unreadable"


def _digest(value):
    """A digest of a returned value: a tensor's dtype, shape and bytes, or the plain data it is."""
    try:
        import torch

        if isinstance(value, torch.Tensor):
            payload = tensor_payload(value)
            return _sha256((payload["dtype"] + str(payload["shape"]) + payload["data"]).encode()).hexdigest()
        return _sha256(_dumps(plain(value), allow_nan=True, sort_keys=True).encode()).hexdigest()
    except BaseException:
        return None


def reseed():
    import torch

    random.seed(0)
    torch.manual_seed(0)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed(0)
