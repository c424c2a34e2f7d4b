# corpus: expect-pass
# style: math.prod ledger; prefill and decode take blocks from the END of the free list (slice / pop()); reconstruction by one index_select; attention vectorised over the whole batch as a segment softmax (scatter_reduce amax + index_add_) over exactly the valid tokens in bounded chunks, no per-sequence loop; logits in float64, weights and values in float32.
"""PagedAttention exercise (submission)."""

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
    kv_bytes_per_token = math.prod((2, num_layers, num_kv_heads, head_dim, dtype_bytes))
    kv_bytes_per_block = math.prod((kv_bytes_per_token, block_size))
    total_cache_bytes = math.prod((kv_bytes_per_block, num_blocks))
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
        needed = -(-req.seq_len // self.block_size)  # exact integer ceil
        available = len(self.free_blocks)
        if available < needed:
            raise RuntimeError(f"OOM: prefill needs {needed} blocks, {available} free")
        cut = available - needed
        taken = self.free_blocks[cut:]
        del self.free_blocks[cut:]
        req.block_table += taken

    def allocate_for_decode(self, req: Request) -> None:
        """Append one token; take one more block only if the token does not fit."""
        capacity = len(req.block_table) * self.block_size
        if req.seq_len >= capacity:  # the new token lands in slot `capacity`: a new block
            if len(self.free_blocks) == 0:
                raise RuntimeError("OOM: decode found no free block")
            req.block_table.append(self.free_blocks.pop())
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
        index = torch.tensor(req.block_table, dtype=torch.long)
        pages = torch.index_select(self.physical_kv_cache, 0, index)  # a fresh tensor
        return pages.reshape(-1, self.head_dim)[: req.seq_len]


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
    device = query.device
    lens = [int(x) for x in seq_lens.tolist()]
    if num_seqs == 0:
        return torch.empty((0, num_heads, head_dim), dtype=query.dtype, device=device)
    tables = block_tables.to(device=device, dtype=torch.long)
    k_flat = key_cache.reshape(-1, num_kv_heads, head_dim)
    v_flat = value_cache.reshape(-1, num_kv_heads, head_dim)
    # One row per valid token of every sequence: its sequence and its flat slot in the pool.
    lens_t = torch.tensor(lens, dtype=torch.long, device=device)
    seq_of = torch.repeat_interleave(torch.arange(num_seqs, device=device), lens_t)
    starts = torch.cumsum(lens_t, 0) - lens_t
    pos = torch.arange(seq_of.numel(), device=device) - starts[seq_of]
    slot = tables[seq_of, pos // block_size] * block_size + pos % block_size
    q = query.double().reshape(num_seqs, num_kv_heads, group, head_dim)
    total = seq_of.numel()
    chunk = max(1, (1 << 22) // max(1, num_heads * head_dim))
    # Pass 1: logits [tokens, kv, g] in float64 (large logits keep their precision) and the per-sequence maximum.
    logits = torch.empty(total, num_kv_heads, group, dtype=torch.float64, device=device)
    for a in range(0, total, chunk):
        b = min(total, a + chunk)
        k = k_flat[slot[a:b]].double()  # [t, kv, d]
        logits[a:b] = torch.einsum("tkd,tkgd->tkg", k, q[seq_of[a:b]]) * scale
    m = torch.full((num_seqs, num_kv_heads, group), float("-inf"), dtype=torch.float64, device=device)
    m = m.scatter_reduce(0, seq_of[:, None, None].expand_as(logits), logits, reduce="amax")
    w = torch.exp((logits - m[seq_of]).float())  # float32 from here on
    denom = torch.zeros(num_seqs, num_kv_heads, group, device=device).index_add_(0, seq_of, w)
    # Pass 2: weighted sum of values, segment by segment.
    acc = torch.zeros(num_seqs, num_kv_heads, group, head_dim, device=device)
    for a in range(0, total, chunk):
        b = min(total, a + chunk)
        v = v_flat[slot[a:b]].float()  # [t, kv, d]
        acc.index_add_(0, seq_of[a:b], w[a:b, :, :, None] * v[:, :, None, :])
    out = acc / denom[..., None]
    return out.reshape(num_seqs, num_heads, head_dim).to(query.dtype)
