def blocks_needed(tokens: int, block_size: int) -> int:
    """ceil(tokens / block_size), in integers."""
    return -(-tokens // block_size)
