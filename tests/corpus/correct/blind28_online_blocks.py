# corpus: expect-pass
# style: stepwise ledger; helper methods (_blocks_for, _take_highest); prefill/decode hand out the highest free ids and leave the rest in place; reconstruction copies block by block into a preallocated tensor; attention is a flash-decoding style online softmax over one block at a time (logits and running max in float64, weights, sums and accumulator in float32), GQA by a [kv, g, d] view instead of repeat_interleave.
"""PagedAttention exercise (submission)."""

import heapq
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
    per_element_and_layer = num_kv_heads * head_dim * dtype_bytes
    kv_bytes_per_token = per_element_and_layer * num_layers * 2  # K and V
    kv_bytes_per_block = block_size * kv_bytes_per_token
    total_cache_bytes = num_blocks * kv_bytes_per_block
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
        needed = self._blocks_for(req.seq_len)
        if needed > len(self.free_blocks):
            raise RuntimeError(f"OOM (prefill): {needed} needed, {len(self.free_blocks)} free")
        req.block_table.extend(self._take_highest(needed))

    def _blocks_for(self, tokens: int) -> int:
        """Blocks that hold `tokens` tokens."""
        q, r = divmod(tokens, self.block_size)
        return q + (1 if r else 0)

    def _take_highest(self, count: int) -> list[int]:
        """Remove the `count` highest free ids from the free list (in place) and return them, highest first."""
        chosen = heapq.nlargest(count, self.free_blocks)
        gone = set(chosen)
        self.free_blocks[:] = [b for b in self.free_blocks if b not in gone]
        return chosen

    def allocate_for_decode(self, req: Request) -> None:
        """Append one token; take one more block only if the token does not fit."""
        if self._blocks_for(req.seq_len + 1) > len(req.block_table):
            if not self.free_blocks:
                raise RuntimeError("OOM (decode): no free block")
            req.block_table.extend(self._take_highest(1))
        req.seq_len = req.seq_len + 1

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
        n, bs = req.seq_len, self.block_size
        pool = self.physical_kv_cache
        result = torch.empty((n, self.head_dim), dtype=pool.dtype, device=pool.device)
        for j, start in enumerate(range(0, n, bs)):
            stop = min(n, start + bs)
            result[start:stop].copy_(pool[req.block_table[j], : stop - start])
        return result


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
    out = torch.empty((num_seqs, num_heads, head_dim), dtype=query.dtype, device=query.device)
    lens = seq_lens.tolist()
    tables = block_tables.tolist()
    for i in range(num_seqs):
        q = query[i].to(torch.float64).view(num_kv_heads, group, head_dim)
        run_max = torch.full((num_kv_heads, group), float("-inf"), dtype=torch.float64, device=query.device)
        run_sum = torch.zeros((num_kv_heads, group), device=query.device)
        acc = torch.zeros((num_kv_heads, group, head_dim), device=query.device)
        remaining = int(lens[i])
        for j in range(-(-remaining // block_size)):
            n = min(block_size, remaining - j * block_size)
            blk = int(tables[i][j])
            k = key_cache[blk, :n].to(torch.float64)  # [n, kv, d]
            v = value_cache[blk, :n].to(torch.float32)
            s = torch.einsum("kgd,nkd->kgn", q, k) * scale  # float64 logits
            new_max = torch.maximum(run_max, s.amax(dim=-1))
            corr = torch.exp((run_max - new_max).float())  # exp(-inf) = 0 on the first block
            p = torch.exp((s - new_max[..., None]).float())
            run_sum = run_sum * corr + p.sum(dim=-1)
            acc = acc * corr[..., None] + torch.einsum("kgn,nkd->kgd", p, v)
            run_max = new_max
        out[i] = (acc / run_sum[..., None]).reshape(num_heads, head_dim).to(query.dtype)
    return out
