# corpus: expect-pass
# style: numpy picks the smallest free ids (np.partition, .tolist()), decode pops the argmin, index_select cache, whole-batch token-chunked online softmax
"""PagedAttention exercise (solution)."""

import math

import numpy as np
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
        needed = -(-req.seq_len // self.block_size)
        if len(self.free_blocks) < needed:
            raise RuntimeError(f"OOM: {needed} blocks requested, {len(self.free_blocks)} available")
        free = np.asarray(self.free_blocks, dtype=np.int64)
        chosen = np.sort(np.partition(free, needed - 1)[:needed])
        keep = free[~np.isin(free, chosen)]
        self.free_blocks[:] = keep.tolist()
        req.block_table.extend(chosen.tolist())

    def allocate_for_decode(self, req: Request) -> None:
        """Append one token; take one more block only if the token does not fit."""
        grow = req.seq_len >= len(req.block_table) * self.block_size
        if grow:
            if not self.free_blocks:
                raise RuntimeError("OOM: the pool has no block left for this decode step")
            where = min(range(len(self.free_blocks)), key=self.free_blocks.__getitem__)
            req.block_table.append(self.free_blocks.pop(where))
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
        pool = self.physical_kv_cache
        ids = torch.as_tensor(req.block_table, dtype=torch.long, device=pool.device)
        picked = pool.index_select(0, ids)  # a copy, never a view of the pool
        return picked.view(-1, pool.shape[-1]).narrow(0, 0, req.seq_len).contiguous()


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
    device = key_cache.device
    lens = seq_lens.to(device=device, dtype=torch.long)
    tables = block_tables.to(device=device, dtype=torch.long)
    q = query.to(device).float().view(num_seqs, num_kv_heads, group, head_dim)
    m = torch.full((num_seqs, num_kv_heads, group), float("-inf"), device=device)
    s = torch.zeros((num_seqs, num_kv_heads, group), device=device)
    acc = torch.zeros((num_seqs, num_kv_heads, group, head_dim), device=device)
    longest = int(lens.max()) if num_seqs else 0
    chunk = max(1, min(longest, (1 << 22) // max(1, num_seqs * num_kv_heads * head_dim)))
    width = tables.shape[1] if tables.dim() == 2 else 0
    for t0 in range(0, longest, chunk):
        pos = torch.arange(t0, min(longest, t0 + chunk), device=device)  # [T]
        valid = pos.unsqueeze(0) < lens.unsqueeze(1)  # [B, T]
        col = (pos // block_size).clamp(max=max(width - 1, 0))
        blk = tables[:, col]  # [B, T]
        slot = (pos % block_size).expand_as(blk)
        k = key_cache[blk, slot].float()  # [B, T, kv, d]
        v = value_cache[blk, slot].float()
        k = torch.where(valid[..., None, None], k, torch.zeros((), device=device))
        v = torch.where(valid[..., None, None], v, torch.zeros((), device=device))
        logits = torch.einsum("bkgd,btkd->bkgt", q, k) * scale
        logits = logits.masked_fill(~valid[:, None, None, :], float("-inf"))
        new_m = torch.maximum(m, logits.amax(dim=-1))
        safe_m = torch.where(torch.isinf(new_m), torch.zeros((), device=device), new_m)
        p = torch.exp(logits - safe_m.unsqueeze(-1))
        corr = torch.exp(m - safe_m)
        s = s * corr + p.sum(-1)
        acc = acc * corr.unsqueeze(-1) + torch.einsum("bkgt,btkd->bkgd", p, v)
        m = new_m
    if num_seqs == 0:
        return torch.empty((0, num_heads, head_dim), dtype=query.dtype, device=query.device)
    out = acc / s.unsqueeze(-1)
    return out.reshape(num_seqs, num_heads, head_dim).to(device=query.device, dtype=query.dtype)
