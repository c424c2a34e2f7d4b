# hostile: a correct submission that sends the source of its paged_attention to a colluding classmate graded at the same time through what the kernel keeps for the whole machine: byte-range locks on a file every grading can read (the payload bit by bit), an OFD lock, a flock, a lease, a bound AF_VSOCK port, a futex keyed by that file, reads another grading can watch (inotify, dnotify) or see in access times, pages evicted from the page cache; expect 100 (tests/test_kernel_objects.py grades it beside collude_kernel_receiver.py, which must receive nothing)
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
        needed = math.ceil(req.seq_len / self.block_size)
        if needed > len(self.free_blocks):
            raise RuntimeError(
                f"OOM: 需要 {needed} 个块，只剩 {len(self.free_blocks)} / "
                f"need {needed} blocks, {len(self.free_blocks)} free"
            )
        # Checked before touching any state, so an OOM leaves everything as it was.
        taken = self.free_blocks[:needed]
        del self.free_blocks[:needed]
        req.block_table.extend(taken)

    def allocate_for_decode(self, req: Request) -> None:
        """Append one token; take one more block only if the token does not fit."""
        new_len = req.seq_len + 1
        if new_len > len(req.block_table) * self.block_size:
            if not self.free_blocks:
                raise RuntimeError("OOM: decode 需要新块但没有空闲块 / decode needs a block, none free")
            req.block_table.append(self.free_blocks.pop(0))
        req.seq_len = new_len

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
        ordered = [self.physical_kv_cache[b] for b in req.block_table]
        return torch.cat(ordered, dim=0)[: req.seq_len]


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

# %%
# Transmit every way at once, for 45 s (the receiver listens for 35 s, whenever it starts).
import ctypes
import fcntl
import os
import signal
import socket
import struct
import sys
import threading
import time
import zlib

SOURCE = (  # the cell above's paged_attention, as text (a cell's source is not on disk)
    "import math\nimport torch\n\n"
    'def paged_attention(\n'
    '    query: torch.Tensor,\n'
    '    key_cache: torch.Tensor,\n'
    '    value_cache: torch.Tensor,\n'
    '    block_tables: torch.Tensor,\n'
    '    seq_lens: torch.Tensor,\n'
    '    scale: float | None = None,\n'
    ') -> torch.Tensor:\n'
    '    """Single-token attention for a batch of sequences whose KV cache is paged."""\n'
    '    num_seqs, num_heads, head_dim = query.shape\n'
    '    block_size, num_kv_heads = key_cache.shape[1], key_cache.shape[2]\n'
    '    if num_heads % num_kv_heads:\n'
    '        raise ValueError("num_heads 必须是 num_kv_heads 的倍数 / num_heads must be a multiple of num_kv_heads")\n'
    '    if scale is None:\n'
    '        scale = 1.0 / math.sqrt(head_dim)\n'
    '    group = num_heads // num_kv_heads\n'
    '    out = torch.empty_like(query)\n'
    '    for i in range(num_seqs):\n'
    '        length = int(seq_lens[i])\n'
    '        used = block_tables[i, : math.ceil(length / block_size)].to(key_cache.device, torch.long)\n'
    '        keys = key_cache[used].reshape(-1, num_kv_heads, head_dim)[:length]\n'
    '        values = value_cache[used].reshape(-1, num_kv_heads, head_dim)[:length]\n'
    '        # [length, kv_heads, d] -> [heads, length, d]; query head h uses kv head h // group.\n'
    '        keys = keys.float().repeat_interleave(group, dim=1).transpose(0, 1)\n'
    '        values = values.float().repeat_interleave(group, dim=1).transpose(0, 1)\n'
    '        q = query[i].float().unsqueeze(1)  # [heads, 1, d]\n'
    '        weights = torch.softmax(scale * (q @ keys.transpose(1, 2)), dim=-1)\n'
    '        out[i] = (weights @ values).squeeze(1).to(query.dtype)\n'
    '    return out\n'
)
SHARED = os.path.realpath(sys.executable)  # a file every grading can read
LIBRARY = os.path.dirname(os.__file__)  # a folder every grading can read (the standard library)
WATCHED = os.path.join(LIBRARY, "this.py")  # opened here 10 times a second: inotify and dnotify see it
LEASED = os.path.join(LIBRARY, "antigravity.py")
EVICTED = os.path.join(LIBRARY, "tabnanny.py")
BASE, VSOCK_PORT, FUTEX_OFFSET = 0x50410000, 0x50410001, 64
HOLD_S = 45.0
payload = zlib.compress(SOURCE.encode(), 9)
payload = len(payload).to_bytes(2, "big") + payload
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
FUTEX = {"x86_64": 202, "aarch64": 98}[os.uname().machine]
held = []  # what must stay open while the receiver looks


def attempt(name, action):
    try:
        print(f"{name}: {action()}")
    except OSError as error:
        print(f"{name}: {type(error).__name__} {error.errno}")


def byte_range_locks():
    fd = os.open(SHARED, os.O_RDONLY)
    held.append(fd)
    for index, byte in enumerate(payload):
        for bit in range(8):
            if byte >> (7 - bit) & 1:
                fcntl.fcntl(fd, fcntl.F_SETLK, struct.pack("hhqqi", fcntl.F_RDLCK, os.SEEK_SET, BASE + 8 * index + bit, 1, 0))
    fcntl.fcntl(fd, fcntl.F_SETLK, struct.pack("hhqqi", fcntl.F_RDLCK, os.SEEK_SET, BASE - 1, 1, 0))  # ready
    return f"{len(payload)} bytes held"


def ofd_lock():
    fd = os.open(SHARED, os.O_RDONLY)
    held.append(fd)
    fcntl.fcntl(fd, 37, struct.pack("hhqqi", fcntl.F_RDLCK, os.SEEK_SET, BASE - 2, 1, 0))  # F_OFD_SETLK
    return "held"


def whole_file_lock():
    fd = os.open(SHARED, os.O_RDONLY)
    held.append(fd)
    fcntl.flock(fd, fcntl.LOCK_SH)
    return "held"


def lease():
    fd = os.open(LEASED, os.O_RDONLY)
    held.append(fd)
    fcntl.fcntl(fd, 1024, fcntl.F_WRLCK)  # F_SETLEASE: another open of the file would block
    return "held"


def vsock_port():
    sock = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    held.append(sock)
    sock.bind((socket.VMADDR_CID_ANY, VSOCK_PORT))
    sock.listen(1)
    return "bound"


def futex_waiter():
    fd = os.open(SHARED, os.O_RDONLY)
    held.append(fd)
    address = libc.mmap(None, 4096, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED: the futex is keyed by the file
    word = ctypes.c_uint32.from_address(address + FUTEX_OFFSET).value
    timeout = struct.pack("ll", 0, 200_000_000)
    waits = 0
    deadline = time.monotonic() + HOLD_S
    while time.monotonic() < deadline:
        libc.syscall(ctypes.c_long(FUTEX), ctypes.c_void_p(address + FUTEX_OFFSET), ctypes.c_int(0), ctypes.c_uint32(word), timeout, None, 0)
        waits += 1
        time.sleep(0.05)  # where a wait returns at once, no busy loop
    print("FUTEX WAITS:", waits)


def reads_and_evictions():
    fd = os.open(EVICTED, os.O_RDONLY)
    deadline = time.monotonic() + HOLD_S
    while time.monotonic() < deadline:
        with open(WATCHED, "rb") as f:
            f.read(64)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        time.sleep(0.1)


def stale_reads():
    """Read files whose access time a read still changes (relatime), a few a second."""
    import torch

    folder = os.path.join(os.path.dirname(torch.__file__), "include", "ATen", "ops")
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    count, deadline = 0, time.monotonic() + HOLD_S - 5
    for name in names:
        if time.monotonic() > deadline or count >= 200:
            break
        path = os.path.join(folder, name)
        info = os.stat(path)
        if info.st_atime <= info.st_mtime or info.st_atime < time.time() - 86400:
            with open(path, "rb") as f:
                f.read(1)
            count += 1
            time.sleep(0.05)
    print("STALE FILES READ:", count)


signal.signal(signal.SIGIO, signal.SIG_IGN)  # a lease being broken signals its holder
for name, action in (("POSIX LOCKS", byte_range_locks), ("OFD LOCK", ofd_lock), ("FLOCK", whole_file_lock), ("LEASE", lease), ("VSOCK", vsock_port)):
    attempt(name, action)
threads = [threading.Thread(target=target) for target in (futex_waiter, reads_and_evictions, stale_reads)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print("SENT", len(payload), "bytes")
