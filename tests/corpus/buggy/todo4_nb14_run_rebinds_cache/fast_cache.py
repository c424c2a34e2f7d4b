import torch


def get_physical_cache_fast(self, req):
    """All of the request's tokens, [seq_len, head_dim] (reads blocks in a cache-friendly order)."""
    if not req.block_table:
        raise ValueError("request holds no blocks")
    blocks = sorted(req.block_table)
    return torch.cat([self.physical_kv_cache[b] for b in blocks], dim=0)[: req.seq_len]


KVCacheManager.get_physical_cache = get_physical_cache_fast
