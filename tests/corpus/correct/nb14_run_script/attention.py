import math

import torch


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
        weights = torch.softmax(scale * (q @ keys.transpose(1, 2)), dim=-1)
        out[i] = (weights @ values).squeeze(1).to(query.dtype)
    return out


RAN_AS = __name__
