# hostile: a correct submission whose last cell makes every system call a notebook never needs (keyrings, ptrace, bpf, perf, userfaultfd, mounts, namespaces, modules, kexec, io_uring, personality, clone with namespace flags, an x32 call) and prints what each returned; expect 100, and EPERM for each
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
# Every call the sandbox should refuse, made straight through the C library.
import ctypes
import errno
import platform

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
X86_64 = {
    "keyctl": 250, "add_key": 248, "request_key": 249, "ptrace": 101, "process_vm_readv": 310,
    "process_vm_writev": 311, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "mount": 165,
    "umount2": 166, "pivot_root": 155, "unshare": 272, "setns": 308, "kexec_load": 246,
    "kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_by_handle_at": 304,
    "name_to_handle_at": 303, "fanotify_init": 300, "syslog": 103, "acct": 163, "swapon": 167,
    "reboot": 169, "lookup_dcookie": 212, "modify_ldt": 154, "iopl": 172, "ioperm": 173,
    "quotactl": 179, "move_mount": 429, "fsopen": 430, "fsmount": 432, "open_tree": 428,
    "mount_setattr": 442, "kcmp": 312, "pidfd_getfd": 438, "chroot": 161, "settimeofday": 164,
    "sethostname": 170,
}
AARCH64 = {
    "keyctl": 219, "add_key": 217, "request_key": 218, "ptrace": 117, "process_vm_readv": 270,
    "process_vm_writev": 271, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282, "mount": 40,
    "umount2": 39, "pivot_root": 41, "unshare": 97, "setns": 268, "kexec_load": 104,
    "kexec_file_load": 294, "init_module": 105, "finit_module": 273, "delete_module": 106,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_by_handle_at": 265,
    "name_to_handle_at": 264, "fanotify_init": 262, "syslog": 116, "acct": 89, "swapon": 224,
    "reboot": 142, "lookup_dcookie": 18, "quotactl": 60, "move_mount": 429, "fsopen": 430,
    "fsmount": 432, "open_tree": 428, "mount_setattr": 442, "kcmp": 272, "pidfd_getfd": 438,
    "chroot": 51, "settimeofday": 170, "sethostname": 161,
}
numbers = {"x86_64": X86_64, "aarch64": AARCH64}.get(platform.machine(), {})
# Arguments that would do something real if the call went through (a key, a mount, a namespace).
special = {
    "keyctl": (0, -3),  # KEYCTL_GET_KEYRING_ID of the session keyring
    "add_key": (ctypes.c_char_p(b"user"), ctypes.c_char_p(b"pa-planted-by-syscalls"), ctypes.c_char_p(b"x"), 1, -4),
    "unshare": (0x10000000,),  # CLONE_NEWUSER
    "personality": (0x0040000,),  # ADDR_NO_RANDOMIZE
    "userfaultfd": (0,),
    "io_uring_setup": (1, ctypes.create_string_buffer(120)),
    "perf_event_open": (ctypes.create_string_buffer(128), 0, -1, -1, 0),
}
results = {}


def outcome(result):
    return f"returned{result}" if result >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))


for name, number in sorted(numbers.items()):
    ctypes.set_errno(0)
    results[name] = outcome(libc.syscall(ctypes.c_long(number), *special.get(name, (0, 0, 0, 0, 0))))
if platform.machine() == "x86_64":
    for name, number, args in (
        ("personality", 135, (0x0040000,)),
        ("clone_newuser", 56, (0x10000000 | 17, 0, 0, 0, 0)),  # clone(CLONE_NEWUSER | SIGCHLD)
        ("clone_newnet", 56, (0x40000000 | 17, 0, 0, 0, 0)),
        ("x32_getpid", 0x40000000 | 39, ()),
    ):
        ctypes.set_errno(0)
        result = libc.syscall(ctypes.c_long(number), *args)
        if result == 0 and name.startswith("clone"):
            libc._exit(0)  # the child, had the call gone through
        results[name] = outcome(result)
    ctypes.set_errno(0)
    results["clone3"] = outcome(libc.syscall(ctypes.c_long(435), ctypes.create_string_buffer(88), 88))
    print("QUERY personality:", libc.syscall(ctypes.c_long(135), ctypes.c_ulong(0xFFFFFFFF)))
print("EPERM:", " ".join(sorted(name for name, got in results.items() if got == "EPERM")))
print("NOT EPERM:", " ".join(f"{name}={got}" for name, got in sorted(results.items()) if got != "EPERM"))
with open("/proc/self/status") as f:
    print("STATUS", [line.strip() for line in f if line.startswith(("Seccomp:", "NoNewPrivs:"))])
# What a notebook does still works: threads, a subprocess, a fork.
import subprocess
import threading

done = []
thread = threading.Thread(target=lambda: done.append(1))
thread.start()
thread.join()
print("THREAD", done, "SUBPROCESS", subprocess.run(["echo", "ok"], capture_output=True, text=True).stdout.strip())
