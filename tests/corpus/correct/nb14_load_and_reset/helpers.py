def ceil_div(a: int, b: int) -> int:
    return -(-a // b)
