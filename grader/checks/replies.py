"""What the judge accepts from the worker: each reply checked against its operation's schema.

Every value a session child sends is the submission's to forge (it can patch the worker's own
code), so no check reads one before it has passed here: the kind of each value, int ranges,
finite floats, sizes.  A reply that does not fit is the call's wrong answer ("returned a value
the contract does not allow"), never an exception in the judge.  The error part of a reply is
already reduced to plain strings (grader/sandbox/protocol.py, `_clean_error`).
"""

from __future__ import annotations

import math
from typing import Any

from grader.checks.arrays import NUMPY_DTYPES
from grader.sandbox.protocol import Reply

MAX_HANDLE = 1 << 31  # the worker numbers its objects 1, 2, 3, ...
MAX_INT_BITS = 8192  # what the worker sends at most (wire.py); JSON itself stops at 4300 digits
MAX_ITEMS = 4096  # elements of a list, entries of a dict
MAX_BLOCK_IDS = 1 << 20  # a free list or a block table (the far cases' pools pass 100,000 blocks)
MAX_DEPTH = 8
MAX_STR = 1 << 16
MAX_DIM = 1 << 31  # one tensor dimension
MAX_RANK = 8
TAGS = ("__dict__", "__list__", "__tuple__", "__object__", "__float__")


class Invalid(ValueError):
    """A value outside its schema; the message says what was wrong, never quoting the value at length."""


def plain(value: Any, depth: int = 0) -> None:
    """A returned value as the worker's `plain()` encodes it: scalars and tagged containers."""
    if depth > MAX_DEPTH:
        raise Invalid("nested too deeply")
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if value.bit_length() > MAX_INT_BITS:
            raise Invalid("an int too large")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Invalid("a float that is not finite, sent as a number")
        return
    if isinstance(value, str):
        if len(value) > MAX_STR:
            raise Invalid("a string too long")
        return
    if not isinstance(value, dict) or len(value) > 2:
        raise Invalid(f"not plain data ({type(value).__name__})")
    tags = [tag for tag in TAGS if tag in value]
    if len(tags) != 1:
        raise Invalid("a container without its kind")
    tag, inner = tags[0], value[tags[0]]
    if tag in ("__list__", "__tuple__"):
        _items(inner)
        for item in inner:
            plain(item, depth + 1)
    elif tag == "__dict__":
        _items(inner)
        for pair in inner:
            if not isinstance(pair, list) or len(pair) != 2:
                raise Invalid("a dict entry that is not a pair")
            plain(pair[0], depth + 1)
            plain(pair[1], depth + 1)
    elif tag == "__object__":
        if not isinstance(inner, str) or not isinstance(value.get("repr"), str) or len(inner) + len(value["repr"]) > MAX_STR:
            raise Invalid("an object description that is not text")
    elif not isinstance(inner, str) or len(inner) > 64:  # __float__: "nan", "inf", "-inf"
        raise Invalid("a float description that is not text")


def _items(inner: Any) -> None:
    if not isinstance(inner, list) or len(inner) > MAX_ITEMS:
        raise Invalid("a container that is not a list of at most 4096 items")


def handle(value: Any) -> None:
    if type(value) is not int or not 0 < value < MAX_HANDLE:
        raise Invalid("an object handle that is not a small positive int")


def nothing(value: Any) -> None:
    if value is not None:
        raise Invalid("a value where none belongs")


def tensor(value: Any) -> None:
    """A tensor payload: dtype, shape and data of the right kinds; decode() checks the sizes."""
    if not isinstance(value, dict):
        raise Invalid("not a tensor")
    dtype, shape, data, device = value.get("dtype"), value.get("shape"), value.get("data"), value.get("device", "cpu")
    if dtype not in NUMPY_DTYPES or not isinstance(data, str) or not isinstance(device, str) or len(device) > 32:
        raise Invalid("a tensor payload with a wrong dtype, data or device")
    if not isinstance(shape, list) or len(shape) > MAX_RANK or not all(type(d) is int and 0 <= d < MAX_DIM for d in shape):
        raise Invalid("a tensor payload with a wrong shape")


def attention(value: Any) -> None:
    if not isinstance(value, dict) or set(value) - {"output", "input_digests"}:
        raise Invalid("an attention reply of the wrong form")
    tensor(value.get("output"))
    digests = value.get("input_digests", {})
    if not isinstance(digests, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in digests.items()):
        raise Invalid("input digests of the wrong form")


def given_methods(value: Any) -> None:
    """{"Class.method": "missing" | the code's parts}; the parts are checked when rebuilt (given_code.rebuilt_code)."""
    if not isinstance(value, dict) or len(value) > 64:
        raise Invalid("given methods of the wrong form")
    for key, parts in value.items():
        if not isinstance(key, str) or len(key) > 200 or not isinstance(parts, str | dict):
            raise Invalid("given methods of the wrong form")


def flag(value: Any) -> None:
    """True or False; None where the worker had nothing to do (edit_kept of a result no longer kept)."""
    if value is not None and type(value) is not bool:
        raise Invalid("a yes or no of the wrong kind")


SCHEMAS = {
    "new": handle,
    "edit_kept": flag,
    "ledger": plain,
    "method": plain,
    "get_cache": tensor,
    "attention": attention,
    "given_methods": given_methods,
    "manager_meta": plain,
    "request_meta": plain,
}


def checked(op: str, reply: Reply) -> Reply:
    """`reply` if it fits its operation's schema; otherwise the call's wrong answer."""
    state = _state(reply.state)
    if not reply.ok:
        return Reply(False, None, reply.error, state)
    try:
        SCHEMAS.get(op, nothing)(reply.value)
    except Invalid as invalid:
        return Reply(False, None, rejected(str(invalid)), state)
    except (RecursionError, TypeError, ValueError, OverflowError):
        return Reply(False, None, rejected("a value of the wrong form"), state)
    return Reply(True, reply.value, None, state)


# What each schema's Invalid says, in Chinese (a card in Chinese says it so).
WHY_ZH = {
    "nested too deeply": "嵌套过深",
    "an int too large": "int 过大",
    "a float that is not finite, sent as a number": "以数字发送的非有限浮点数",
    "a string too long": "字符串过长",
    "a container without its kind": "没有标明类型的容器",
    "a dict entry that is not a pair": "不是键值对的 dict 条目",
    "an object description that is not text": "不是文本的对象描述",
    "a float description that is not text": "不是文本的浮点数描述",
    "a container that is not a list of at most 4096 items": "不是至多 4096 项列表的容器",
    "an object handle that is not a small positive int": "不是小正整数的对象句柄",
    "a value where none belongs": "不该有值的地方有值",
    "a yes or no of the wrong kind": "是或否的值类型不对",
    "not a tensor": "不是张量",
    "a tensor payload with a wrong dtype, data or device": "dtype、数据或设备不对的张量",
    "a tensor payload with a wrong shape": "形状不对的张量",
    "an attention reply of the wrong form": "形式不对的注意力结果",
    "input digests of the wrong form": "形式不对的输入摘要",
    "a value of the wrong form": "形式不对的值",
}


def rejected(why: str) -> dict[str, Any]:
    """An error description (as protocol._clean_error makes them) for a reply outside its schema."""
    why_zh = WHY_ZH.get(why) or (f"不是普通数据（{why[len('not plain data ('):-1]}）" if why.startswith("not plain data (") else why)
    return {
        "type": "InvalidReply",
        "message": f"the value sent back is not one the contract allows: {why}",
        "message_zh": f"返回的值不符合约定：{why_zh}",
        "traceback": "",
        "not_implemented": False,
        "rejected_return": True,
        "isa": [],
    }


# -- state snapshots ---------------------------------------------------------------------------
# {"free_blocks": OBS, "requests": {"<handle>": {"seq_len": OBS, "block_table": OBS}}, "pool": ...}
# where OBS is {"ok": value, "type": container} or {"error": {...}}.  Anything malformed becomes
# an unreadable observation, which the checks treat as the contract broken.


def _state(raw: Any) -> dict[str, Any] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        return {"free_blocks": _broken("the state snapshot is malformed"), "requests": {}}
    out: dict[str, Any] = {}
    if "free_blocks" in raw:
        out["free_blocks"] = _int_list(raw.get("free_blocks"))
    requests = raw.get("requests")
    out["requests"] = {}
    if isinstance(requests, dict) and len(requests) <= MAX_ITEMS:
        for key, entry in requests.items():
            entry = entry if isinstance(entry, dict) else {}
            out["requests"][str(key)[:20]] = {"seq_len": _int(entry.get("seq_len")), "block_table": _int_list(entry.get("block_table"))}
    if isinstance(raw.get("pool"), dict):
        out["pool"] = raw["pool"]
    if "kept" in raw:
        kept = raw["kept"]
        ok = isinstance(kept, list) and len(kept) <= MAX_ITEMS and all(v is None or (isinstance(v, str) and len(v) <= 128) for v in kept)
        out["kept"] = kept if ok else None  # None: unreadable, every kept result counts as changed
    return out


def _broken(why: str, shown: str = "") -> dict[str, Any]:
    return {"error": {"message": why[:300], "shown": shown[:300]}}


def _error(observed: dict[str, Any]) -> dict[str, Any]:
    error = observed.get("error")
    error = error if isinstance(error, dict) else {}
    return _broken(str(error.get("message", "cannot be read")), str(error.get("shown", "")))


def _int_list(observed: Any) -> dict[str, Any]:
    if not isinstance(observed, dict) or "ok" not in observed:
        return _error(observed) if isinstance(observed, dict) else _broken("missing")
    value, kind = observed["ok"], observed.get("type", "list")
    # Type by type, then the bounds (a free list may hold 100,000 ids: no Python loop per id).
    if not isinstance(value, list) or len(value) > MAX_BLOCK_IDS or not set(map(type, value)) <= {int} or (
            value and (max(value) >= 1 << 64 or min(value) <= -(1 << 64))):
        return _broken("not a list of ints")
    return {"ok": value, "type": str(kind)[:40]}


def _int(observed: Any) -> dict[str, Any]:
    if not isinstance(observed, dict) or "ok" not in observed:
        return _error(observed) if isinstance(observed, dict) else _broken("missing")
    value = observed["ok"]
    if type(value) is not int or value.bit_length() > 64:
        return _broken("not an int")
    return {"ok": value}
