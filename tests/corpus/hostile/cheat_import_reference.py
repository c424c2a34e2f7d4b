# hostile: imports the reference solution instead of writing it; expect a flag, the import refused at run time, no credit (score 0)
from reference.paged_attention import KVCacheManager, Request, estimate_kv_cache_bytes, paged_attention  # noqa: F401
