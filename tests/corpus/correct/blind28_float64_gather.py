# corpus: expect-pass
# style: functools.reduce ledger; prefill takes the lowest free ids (heapq.nsmallest) and filters the list in place, decode takes min() and remove()s that very id; reconstruction gathers exactly seq_len (block, slot) pairs by advanced indexing; attention computes in float64 per sequence, in chunks of 8192 tokens, with GQA via a [kv, g, d] view and an explicit max-subtracted softmax.
"""PagedAttention exercise (submission)."""

import functools
import heapq
import math
import operator

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
    kv_bytes_per_token = functools.reduce(operator.mul, (num_layers, num_kv_heads, head_dim, dtype_bytes), 2)
    kv_bytes_per_block = functools.reduce(operator.mul, (block_size,), kv_bytes_per_token)
    total_cache_bytes = functools.reduce(operator.mul, (num_blocks,), kv_bytes_per_block)
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
        needed = (req.seq_len + self.block_size - 1) // self.block_size
        if len(self.free_blocks) < needed:
            raise RuntimeError("OOM: not enough free blocks for the prompt")
        chosen = heapq.nsmallest(needed, self.free_blocks)
        picked = set(chosen)
        self.free_blocks[:] = [b for b in self.free_blocks if b not in picked]
        req.block_table.extend(chosen)

    def allocate_for_decode(self, req: Request) -> None:
        """Append one token; take one more block only if the token does not fit."""
        held_slots = self.block_size * len(req.block_table)
        needs_block = req.seq_len + 1 > held_slots
        if needs_block and not self.free_blocks:
            raise RuntimeError("OOM: decode needs one more block")
        if needs_block:
            block = min(self.free_blocks)
            self.free_blocks.remove(block)
            req.block_table.append(block)
        req.seq_len += 1

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
        positions = torch.arange(req.seq_len)
        table = torch.as_tensor(req.block_table, dtype=torch.long)
        rows = table[positions // self.block_size]
        slots = positions % self.block_size
        return self.physical_kv_cache[rows, slots]  # advanced indexing: a new tensor


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
    results = []
    chunk_blocks = max(1, 8192 // block_size)  # bound the float64 working set
    for i in range(num_seqs):
        length = int(seq_lens[i].item())
        nblk = (length + block_size - 1) // block_size
        ids = block_tables[i, :nblk].long().to(key_cache.device)
        q = query[i].to(torch.float64).reshape(num_kv_heads, group, head_dim)
        pieces = []
        for a in range(0, nblk, chunk_blocks):
            part = ids[a : a + chunk_blocks]
            take = min(length - a * block_size, part.numel() * block_size)
            k = key_cache.index_select(0, part).flatten(0, 1)[:take].to(torch.float64)  # [t, kv, d]
            pieces.append(torch.einsum("kgd,lkd->kgl", q, k))
        logits = torch.cat(pieces, dim=-1) * float(scale)  # [kv, g, length]
        logits = logits - logits.max(dim=-1, keepdim=True).values
        e = logits.exp()
        probs = e / e.sum(dim=-1, keepdim=True)
        o = torch.zeros((num_kv_heads, group, head_dim), dtype=torch.float64, device=query.device)
        for a in range(0, nblk, chunk_blocks):
            part = ids[a : a + chunk_blocks]
            start = a * block_size
            take = min(length - start, part.numel() * block_size)
            v = value_cache.index_select(0, part).flatten(0, 1)[:take].to(torch.float64)
            o += torch.einsum("kgl,lkd->kgd", probs[..., start : start + take], v)
        results.append(o.reshape(num_heads, head_dim).to(query.dtype))
    if not results:
        return query.new_empty((0, num_heads, head_dim))
    return torch.stack(results)
