# hostile: red team 37: scales the query in place after mapping private memory over the query's pages of the judge's shared file (libc mmap MAP_FIXED through ctypes), so that the file would never see the write; expect todo5.inputs_unchanged to fail (the mapping is sealed: the mmap fails), where the kernel has mseal (6.10 and later)
"""PagedAttention exercise (solution)."""

import math

import torch


def estimate_kv_cache_bytes(
    num_blocks: int,
    block_size: int,
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    dtype_bytes: int = 2,
) -> dict[str, object]:
    """Theoretical KV-cache size of a block pool (allocator overheads are not modelled)."""
    dims = {
        "num_blocks": num_blocks,
        "block_size": block_size,
        "num_layers": num_layers,
        "num_kv_heads": num_kv_heads,
        "head_dim": head_dim,
        "dtype_bytes": dtype_bytes,
    }
    for name, value in dims.items():
        if value <= 0:
            raise ValueError(f"{name} 必须是正数 / {name} must be positive, got {value}")
    kv_bytes_per_token = 2 * num_layers * num_kv_heads * head_dim * dtype_bytes
    kv_bytes_per_block = kv_bytes_per_token * block_size
    total_cache_bytes = kv_bytes_per_block * num_blocks
    layout_shape = [num_layers, 2, num_kv_heads, block_size, head_dim]
    return {
        "kv_bytes_per_token": kv_bytes_per_token,
        "kv_bytes_per_block": kv_bytes_per_block,
        "total_cache_bytes": total_cache_bytes,
        "layout_shape": layout_shape,
    }


class Request:
    """One sequence: its logical length and its logical-to-physical block map.

    ``block_table[i]`` is the physical block holding logical block ``i``; the
    physical ids need not be contiguous or sorted.
    """

    def __init__(self, request_id: int, prompt_len: int):
        if request_id < 0:
            raise ValueError(f"request_id 不能为负 / request_id must be >= 0, got {request_id}")
        if prompt_len <= 0:
            raise ValueError(f"prompt_len 必须为正 / prompt_len must be >= 1, got {prompt_len}")
        self.request_id = request_id
        self.seq_len = prompt_len
        self.block_table: list[int] = []


class KVCacheManager:
    """A fixed pool of KV blocks handed out to requests through block tables.

    The pool tensor is a teaching stand-in for vLLM's real per-layer cache layout.
    """

    def __init__(self, num_blocks: int, block_size: int, head_dim: int):
        if num_blocks <= 0 or block_size <= 0 or head_dim <= 0:
            raise ValueError("num_blocks、block_size、head_dim 必须为正 / must all be positive")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.head_dim = head_dim
        # The whole pool is reserved up front, as a serving engine does at start-up.
        self.physical_kv_cache = torch.zeros(num_blocks, block_size, head_dim)
        self.free_blocks: list[int] = list(range(num_blocks))

    def allocate_for_prefill(self, req: Request) -> None:
        """Give a new request every block its prompt needs, all or nothing."""
        if req.block_table:
            raise ValueError("该请求已经分配过 / this request already holds blocks")
        needed = math.ceil(req.seq_len / self.block_size)
        if needed > len(self.free_blocks):
            raise RuntimeError(
                f"OOM: 需要 {needed} 个块，只剩 {len(self.free_blocks)} / "
                f"need {needed} blocks, {len(self.free_blocks)} free"
            )
        # Checked before touching any state, so an OOM leaves everything as it was.
        taken = self.free_blocks[:needed]
        del self.free_blocks[:needed]
        req.block_table.extend(taken)

    def allocate_for_decode(self, req: Request) -> None:
        """Append one token; take one more block only if the token does not fit."""
        new_len = req.seq_len + 1
        if new_len > len(req.block_table) * self.block_size:
            if not self.free_blocks:
                raise RuntimeError("OOM: decode 需要新块但没有空闲块 / decode needs a block, none free")
            req.block_table.append(self.free_blocks.pop(0))
        req.seq_len = new_len

    def allocation_report(self, req: Request) -> dict[str, float]:
        """Logical tokens, allocated slots, wasted tail slots and utilisation of one request."""
        slots = len(req.block_table) * self.block_size
        return {
            "logical_tokens": req.seq_len,
            "allocated_tokens": slots,
            "unused_tail_tokens": slots - req.seq_len,
            "utilization": req.seq_len / slots if slots else 0.0,
        }

    def release_request(self, req: Request) -> None:
        """Return every block of a finished request to the pool and empty its table."""
        blocks = list(req.block_table)
        if not blocks:
            raise ValueError("请求没有持有块（重复释放？）/ request holds no blocks (double release?)")
        if len(set(blocks)) != len(blocks):
            raise ValueError("块表含重复块 / block table has a duplicate block")
        if any(not 0 <= b < self.num_blocks for b in blocks):
            raise ValueError("块表含越界块 / block table has an out-of-range block")
        free = set(self.free_blocks)
        if any(b in free for b in blocks):
            raise ValueError("块表含空闲块 / block table has a block that is already free")
        self.free_blocks.extend(blocks)
        self.free_blocks.sort()
        req.block_table.clear()

    def get_physical_cache(self, req: Request) -> torch.Tensor:
        """The request's cache as one logical sequence of shape [seq_len, head_dim]."""
        if not req.block_table:
            raise ValueError("请求没有块可读 / request holds no blocks")
        if any(not 0 <= b < self.num_blocks for b in req.block_table):
            raise ValueError("块表含越界块 / block table has an out-of-range block")
        ordered = [self.physical_kv_cache[b] for b in req.block_table]
        return torch.cat(ordered, dim=0)[: req.seq_len]


def paged_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float | None = None,
) -> torch.Tensor:
    """Single-token attention for a batch of sequences whose KV cache is paged."""
    num_seqs, num_heads, head_dim = query.shape
    block_size, num_kv_heads = key_cache.shape[1], key_cache.shape[2]
    if num_heads % num_kv_heads:
        raise ValueError("num_heads 必须是 num_kv_heads 的倍数 / num_heads must be a multiple of num_kv_heads")
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim)
    group = num_heads // num_kv_heads
    _refresh(key_cache, value_cache, block_tables, seq_lens)
    _private_pages(query)
    out = torch.empty_like(query)
    for i in range(num_seqs):
        length = int(seq_lens[i])
        used = block_tables[i, : math.ceil(length / block_size)].to(key_cache.device, torch.long)
        keys = key_cache[used].reshape(-1, num_kv_heads, head_dim)[:length]
        values = value_cache[used].reshape(-1, num_kv_heads, head_dim)[:length]
        # [length, kv_heads, d] -> [heads, length, d]; query head h uses kv head h // group.
        keys = keys.float().repeat_interleave(group, dim=1).transpose(0, 1)
        values = values.float().repeat_interleave(group, dim=1).transpose(0, 1)
        q = query[i].float().unsqueeze(1)  # [heads, 1, d]
        q *= scale  # scale once instead of every score
        weights = torch.softmax(q @ keys.transpose(1, 2), dim=-1)
        out[i] = (weights @ values).squeeze(1).to(query.dtype)
    return out


import ctypes as _ct
import mmap as _mm
from types import SimpleNamespace as _NS

import numpy as _np

_libc = _ct.CDLL(None, use_errno=True)
_libc.mmap.restype = _ct.c_void_p
_libc.mmap.argtypes = [_ct.c_void_p, _ct.c_size_t, _ct.c_int, _ct.c_int, _ct.c_int, _ct.c_long]


_libc.mremap.restype = _ct.c_void_p
_libc.mremap.argtypes = [_ct.c_void_p, _ct.c_size_t, _ct.c_size_t, _ct.c_int]
_REGIONS = []  # (a, b, second view of the same file pages)


def _raw(addr, n):
    return _np.asarray(_NS(__array_interface__={"version": 3, "typestr": "|u1", "data": (addr, False), "shape": (n,)}))


def _span(t):
    size = t.element_size()
    start = t.data_ptr()
    reach = sum((d - 1) * s for d, s in zip(t.shape, t.stride())) + 1
    return start, start + reach * size


def _anon_ranges():
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if len(parts) < 6 and parts[4] == "0":
                out.append((lo, hi))
    return out


def _refresh(*tensors):
    anon = _anon_ranges()
    _REGIONS[:] = [r for r in _REGIONS if any(lo <= r[0] and r[1] <= hi for lo, hi in anon)]
    for t in tensors:
        if t.device.type != "cpu" or t.numel() == 0:
            continue
        s, e = _span(t)
        for a, b, dup in _REGIONS:
            lo, hi = max(a, s), min(b, e)
            if lo < hi:
                _raw(lo, hi - lo)[:] = _raw(dup + (lo - a), hi - lo)


def _private_pages(t):
    """A debugging helper: keeps a private copy of the pages under `t` (copy-on-write snapshot)."""
    if t.device.type != "cpu" or t.numel() == 0:
        return
    start, end = _span(t)
    ps = _mm.PAGESIZE
    a, b = start & ~(ps - 1), (end + ps - 1) & ~(ps - 1)
    dup = _libc.mremap(a, 0, b - a, 1)
    if dup in (None, 2**64 - 1):
        return
    saved = _raw(a, b - a).copy()
    got = _libc.mmap(a, b - a, _mm.PROT_READ | _mm.PROT_WRITE, _mm.MAP_PRIVATE | _mm.MAP_ANONYMOUS | 0x10, -1, 0)
    if got != a:
        return
    _raw(a, b - a)[:] = saved
    _REGIONS.append((a, b, dup))
