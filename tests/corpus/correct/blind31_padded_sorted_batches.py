# corpus: expect-pass
# style: (blind 31) sequences sorted by length and batched with padding and masks (a bounded padded size), in float64, GQA via a [B, kv, group, d] einsum; the allocator pops from the end of the free list; decode replaces the block-table list with a new one; the ledger is a running product.
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
    ledger = {}
    acc = 1
    for key, factor in (("kv_bytes_per_token", 2 * dtype_bytes * head_dim * num_kv_heads * num_layers),
                        ("kv_bytes_per_block", block_size),
                        ("total_cache_bytes", num_blocks)):
        acc = acc * factor
        ledger[key] = acc
    kv_bytes_per_token = ledger["kv_bytes_per_token"]
    kv_bytes_per_block = ledger["kv_bytes_per_block"]
    total_cache_bytes = ledger["total_cache_bytes"]
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
        q, r = divmod(req.seq_len, self.block_size)
        needed = q + (1 if r else 0)
        if needed > len(self.free_blocks):
            raise RuntimeError("OOM (out of memory): prefill cannot get enough blocks")
        new_table = [self.free_blocks.pop() for _ in range(needed)]
        req.block_table += new_table

    def allocate_for_decode(self, req: Request) -> None:
        """Append one token; take one more block only if the token does not fit."""
        slack = len(req.block_table) * self.block_size - req.seq_len
        if slack == 0 or slack < 0:
            if len(self.free_blocks) < 1:
                raise RuntimeError("OOM: decode")
            blk = self.free_blocks[-1]
            del self.free_blocks[-1]
            req.block_table = req.block_table + [blk]
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
        idx = torch.as_tensor(req.block_table, dtype=torch.long)
        gathered = self.physical_kv_cache[idx]                    # advanced indexing: a copy
        return gathered.reshape(-1, self.head_dim).narrow(0, 0, req.seq_len).clone()


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
    dev = key_cache.device
    out = query.new_zeros((num_seqs, num_heads, head_dim))
    if num_seqs == 0:
        return out
    lens = seq_lens.to(dtype=torch.int64, device=dev).reshape(-1)
    order = torch.argsort(lens, descending=True, stable=True).tolist()
    budget = 1 << 22   # padded tokens * kv_heads * head_dim per batch
    i = 0
    while i < num_seqs:
        lmax = int(lens[order[i]])
        per_seq = max(1, lmax * num_kv_heads * head_dim)
        take = max(1, budget // per_seq)
        members = order[i:i + take]
        i += take
        sel = torch.tensor(members, dtype=torch.int64, device=dev)
        L = lens[sel]                                               # [B]
        nb = -(-lmax // block_size)
        B = len(members)
        tab = block_tables[sel.to(block_tables.device), :nb].to(device=dev, dtype=torch.int64)
        need_blk = torch.arange(nb, device=dev).unsqueeze(0) * block_size < L.unsqueeze(1)
        tab = torch.where(need_blk, tab, torch.zeros_like(tab))
        mask = torch.arange(lmax, device=dev).unsqueeze(0) < L.unsqueeze(1)   # [B, lmax]
        Kb = key_cache[tab].reshape(B, nb * block_size, num_kv_heads, head_dim)[:, :lmax]
        Vb = value_cache[tab].reshape(B, nb * block_size, num_kv_heads, head_dim)[:, :lmax]
        Q = query[sel.to(query.device)].to(device=dev, dtype=torch.float64).reshape(B, num_kv_heads, group, head_dim)
        O = torch.empty((B, num_kv_heads, group, head_dim), dtype=torch.float64, device=dev)
        for k in range(num_kv_heads):
            K = Kb[:, :, k].to(torch.float64)                                   # [B, lmax, d]
            V = torch.where(mask[:, :, None], Vb[:, :, k].to(torch.float64),
                            torch.zeros((), dtype=torch.float64, device=dev))
            S = torch.einsum("bgd,btd->bgt", Q[:, k], K) * float(scale)
            S = S.masked_fill(~mask[:, None, :], -math.inf)
            W = torch.softmax(S, dim=-1)
            O[:, k] = torch.einsum("bgt,btd->bgd", W, V)
        O = O.reshape(B, num_heads, head_dim)
        out[sel.to(query.device)] = O.to(device=query.device, dtype=query.dtype)
    return out
