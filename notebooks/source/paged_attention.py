# Single source of the PagedAttention exercise.
#
# `python -m grader assign` turns this file into reference/, student_template/
# and the two notebooks.  Cell markers follow the "percent" format:
#   # %% [markdown]          a markdown cell (lines start with "# ")
#   # %% module              code that goes into the generated module and the notebooks
#   # %% selfcheck           code that lives only in the notebooks
#   # %% rules todoN         a markdown cell stating TODO N's rules, written from grader/rules.toml
# Inside module cells:
#   # >>> solution ... # <<< solution      kept in the solution, removed for students
#   # >>> template ... # <<< template      commented here; uncommented for students

# %% [markdown]
# # PagedAttention：分页 KV Cache 与解码注意力
#
# **中文**：在线推理时，每个请求的长度和结束时间都不一样。如果为每个请求按最大长度预留一段连续的 KV Cache，
# 大部分显存会变成用不上的尾巴。PagedAttention 借用了操作系统分页的想法：把 KV Cache 池切成固定大小的
# 物理块（block），每个请求只保存一张 *块表*（block table），第 i 项记录第 i 个逻辑块放在哪个物理块里。
# prefill 时一次性申请够用的块，decode 时只有新 token 放不下才追加一块，请求结束后把块还回空闲池。
#
# 本练习共有五个 TODO：容量账本、原子 prefill 分配、decode 跨块扩容、按块表恢复逻辑缓存，
# 以及直接通过块表读取缓存的解码注意力（支持 GQA 和多种 dtype）。
#
# **English**: requests in an online server differ in length and lifetime, so reserving a contiguous
# max-length KV cache per request wastes most of the memory. PagedAttention splits the cache pool into
# fixed-size physical blocks; each request keeps a *block table* whose entry i names the physical block
# that holds its logical block i. Five TODOs: a capacity ledger, atomic prefill allocation, decode growth
# across block boundaries, rebuilding the logical cache from a block table, and decode-time attention
# that reads the cache through the block tables (GQA, several dtypes).

# %% module
import math

import torch

# %% [markdown]
# ## TODO 1：KV Cache 容量账本 / capacity ledger
#
# 每个 token 在每一层都要为 **K 和 V 各存一份**，每份有 `num_kv_heads × head_dim` 个元素，
# 每个元素占 `dtype_bytes` 字节。先算单个 token 的字节数，再乘以块大小得到单块字节数，最后乘以块数得到整个池。
# 所有结果都是精确的整数。
#
# Per token and per layer the cache stores one K and one V vector for every KV head. Compute the bytes
# of one token, then of one block (`block_size` tokens), then of the whole pool. All results are exact
# integers; `layout_shape` describes one block of the pool.

# %% rules todo1

# %% module
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
    # >>> solution
    kv_bytes_per_token = 2 * num_layers * num_kv_heads * head_dim * dtype_bytes
    kv_bytes_per_block = kv_bytes_per_token * block_size
    total_cache_bytes = kv_bytes_per_block * num_blocks
    # <<< solution
    # >>> template
    # # TODO 1: 单 token -> 单块 -> 整个池 / one token -> one block -> whole pool
    # # kv_bytes_per_token = ...
    # # kv_bytes_per_block = ...
    # # total_cache_bytes = ...
    # raise NotImplementedError("TODO 1 未完成：KV Cache 容量账本 / not implemented: KV-cache capacity ledger")
    # <<< template
    layout_shape = [num_layers, 2, num_kv_heads, block_size, head_dim]
    return {
        "kv_bytes_per_token": kv_bytes_per_token,
        "kv_bytes_per_block": kv_bytes_per_block,
        "total_cache_bytes": total_cache_bytes,
        "layout_shape": layout_shape,
    }


# %% [markdown]
# ## 请求与块池 / Requests and the block pool
#
# `Request` 记录逻辑长度 `seq_len` 和块表 `block_table`。`KVCacheManager` 持有形状为
# `[num_blocks, block_size, head_dim]` 的物理池和空闲块列表 `free_blocks`。任何时刻，每个物理块
# **要么在空闲列表里，要么恰好属于一个请求的块表**，不能重复，也不能丢失。
#
# `allocation_report` 和 `release_request` 已经写好；你需要完成：
#
# - **TODO 2** `allocate_for_prefill`：申请 `ceil(seq_len / block_size)` 个块。空闲块不够时抛出
#   `RuntimeError`（信息包含 `OOM`），并且请求和空闲列表都保持原样（原子性：要么全部成功，要么什么都不变）。
# - **TODO 3** `allocate_for_decode`：长度加一；只有新 token 放不进已有的块时才追加一个块。
#   OOM 时 `seq_len`、块表和空闲列表都不变。注意 `block_size = 1` 也必须正确。
# - **TODO 4** `get_physical_cache`：按块表顺序（不是物理编号顺序）读取各块，沿 token 维拼接，再截断到 `seq_len`。
#
# Every physical block is, at all times, either free or in exactly one request's table. Prefill takes
# `ceil(seq_len / block_size)` blocks or, on OOM, changes nothing. Decode adds one token and takes a
# block only when the token does not fit; on OOM nothing changes. Reconstruction reads blocks in
# block-table order and cuts the result to `seq_len`.

# %% rules todo2

# %% rules todo3

# %% rules todo4

# %% module
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


# %% module
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
        # >>> solution
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
        # <<< solution
        # >>> template
        # # TODO 2: 计算需要的块数；不够就抛 RuntimeError("OOM")，且不改变任何状态
        # #         count the blocks needed; on shortage raise RuntimeError("OOM") with no state changed
        # raise NotImplementedError("TODO 2 未完成：Prefill 原子分配 / not implemented: atomic prefill allocation")
        # <<< template

    def allocate_for_decode(self, req: Request) -> None:
        """Append one token; take one more block only if the token does not fit."""
        # >>> solution
        new_len = req.seq_len + 1
        if new_len > len(req.block_table) * self.block_size:
            if not self.free_blocks:
                raise RuntimeError("OOM: decode 需要新块但没有空闲块 / decode needs a block, none free")
            req.block_table.append(self.free_blocks.pop(0))
        req.seq_len = new_len
        # <<< solution
        # >>> template
        # # TODO 3: 新长度是否超出已有块的容量？超出才申请一个块；OOM 时什么都不改
        # #         does the new length exceed what the held blocks store? only then take a block
        # raise NotImplementedError("TODO 3 未完成：Decode 跨块扩容 / not implemented: decode growth")
        # <<< template

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
        # >>> solution
        ordered = [self.physical_kv_cache[b] for b in req.block_table]
        return torch.cat(ordered, dim=0)[: req.seq_len]
        # <<< solution
        # >>> template
        # # TODO 4: 按块表顺序取块，沿 token 维拼接，截断到 seq_len
        # #         take blocks in table order, concatenate along tokens, cut to seq_len
        # raise NotImplementedError("TODO 4 未完成：恢复逻辑缓存 / not implemented: logical cache reconstruction")
        # <<< template


# %% [markdown]
# ## 实验（不计分）：为什么要分页 / Lab (ungraded): why paging matters
#
# **中文**：完成 TODO 2 和 TODO 3 后运行下一个单元。它模拟一台推理服务器：1000 个请求按到达顺序排队（长度仿照
# ShareGPT：prompt 平均约 161 个 token，输出平均约 338 个，少数请求很长）；每一步给每个运行中的请求生成一个 token，
# 显存放得下就接纳排在最前面的请求（prefill）；某个请求需要新块却没有空闲块时，最晚进入的请求被抢占，释放显存，
# 回到队首，之后重新计算。同一个 KV 池（2048 块 × 16 = 32768 个 token 槽位）交给四种策略各跑一遍：
# 按 `max_model_len`（2048）静态预留；按最终长度向上取 2 的幂预留；按真实最终长度预留（“预知”，现实中做不到，
# 因为没人事先知道会生成多少 token）；以及分页——调用的正是**你写的** `allocate_for_prefill`、
# `allocate_for_decode` 和给定的 `release_request`。
#
# 每个面板是一种策略：横轴是调度步，纵轴是池的百分比，黑线是同时运行的请求数。颜色表示槽位此刻的用途：
# 绿色 = 存着 token 的 K/V（唯一有用的部分）；黄色 = 已预留、之后的 token 会用到；深橙 = 已预留、到请求结束也用不到；
# 紫色 = 分页时请求最后一块里尚未填满的空位；红色 = 丢失的块（既不在空闲列表中，也不在任何请求的块表中）；灰色 = 空闲。
# 正确的分配器没有红色。如果你的分配器漏块（比如 OOM 时没把已拿走的块放回去），红色只增不减，
# 直到连一个请求都放不下，实验会在那里停下并告诉你原因。
#
# 论文中的数字为什么是这样（Kwon 等，SOSP 2023，图 2：预留式系统只有 20.4%–38.2% 的 KV 显存存着 token，
# vLLM 达到 96.3%）：预留式系统必须在请求开始时就为它可能的最长输出留好位置，而大多数请求远远用不完；
# 即使知道真实长度，预留的空间也要等到最后一个 token 才被填满。分页只在需要时按块申请，浪费只剩每个请求
# 最后一块的尾巴（平均约半块）。省下的显存让更多请求同时运行，这才是吞吐量提高的原因。
# 这里的预留策略不计外部碎片（请求序列也是合成的），所以它们的数字比论文好：默认参数下，按 2 的幂和按真实长度预留
# 约有 43% 和 59% 存着 token（论文为 26.8% 和 38.2%）；静态预留的区域大小都一样，几乎不受外部碎片影响，约 24%（论文 20.4%）。
#
# 块大小的权衡：块越大，尾部浪费越多（每个请求平均约 块大小/2 个槽位），块表越短（每个请求 ⌈长度/块大小⌉ 项），
# 注意力读取也越连续；块越小则反之。最下面的柱状图比较了几种块大小（池的总槽位不变）。
# 评分时这个单元不会运行，也不影响成绩；可以改参数（`trace="alpaca"`、`block_size=`、`sweep=`）再试，
# 但只通过 `import grader` 使用评分器：导入评分器内部的模块（如 `grader.kvlab`）会被标记。
#
# **English**: once TODO 2 and TODO 3 are done, run the next cell. It simulates a serving engine: 1000 requests
# queue in arrival order (ShareGPT-like lengths: prompts about 161 tokens and outputs about 338 on average,
# with a long tail); every step generates one token for each running request and admits the head of the queue
# (prefill) while memory allows; when a request needs a block and none is free, the most recently admitted
# request is preempted, gives its memory back, returns to the front of the queue and is recomputed later. One
# KV pool (2048 blocks × 16 = 32768 token slots) is run four times: static reservation of `max_model_len`
# (2048), reservation of the final length rounded up to a power of two, reservation of the exact final length
# (an oracle: no real server knows the output length in advance), and paging, which calls **your**
# `allocate_for_prefill` and `allocate_for_decode` and the given `release_request`.
#
# Each panel is one policy: steps across, share of the pool up, and the black line counts the running requests.
# Colours say what a slot is doing: green = holds a token's K/V (the only useful part); yellow = reserved, a later
# token will use it; dark orange = reserved and never used before the request ends; purple = the unfilled end of
# a request's last block (paging); red = lost blocks, neither free nor in any block table; grey = free. A correct
# allocator shows no red. One that leaks (say, an OOM that keeps the blocks it already took) shows red that only
# grows, until not even one request fits; the lab stops there and says why.
#
# Why the paper's figures come out as they do (Kwon et al., SOSP 2023, Figure 2: 20.4-38.2% of KV memory holds
# token states in reservation-based systems, 96.3% in vLLM): a reservation must cover the longest output a request
# might produce, and most requests use a fraction of it; even an exact reservation fills only as the last token
# arrives. Paging takes a block only when a token needs one, so the waste is the tail of each request's last block,
# about half a block. The memory saved is what lets more requests run at once, which is where the throughput
# comes from. External fragmentation is not modelled here (and the trace is synthetic), so the reservation policies
# look better than in the paper: with the defaults, power-of-two and exact reservation hold about 43% and 59% token
# states (26.8% and 38.2% in the paper); static reservation, whose regions are all the same size and lose little to
# fragmentation, about 24% (20.4%).
#
# Block size is a trade: larger blocks waste more at the tail (about block_size / 2 slots per request) but keep
# block tables short (⌈length / block_size⌉ entries per request) and reads contiguous; smaller blocks the other way
# round. The bars at the bottom compare block sizes on the same pool. This cell never runs while grading and
# counts for nothing; change its arguments (`trace="alpaca"`, `block_size=`, `sweep=`) and run it again, but reach the
# grader only through `import grader`: importing its inner modules (such as `grader.kvlab`) is flagged.

# %% selfcheck
# Ungraded: grading replaces this cell with `pass` (it only uses the grader). / 不计分：评分时这个单元被替换为 `pass`。
try:
    import grader
except ImportError:
    print("安装评分器后才能运行这个实验（见最后一个单元）/ install the grader to run this lab (see the last cell)")
else:
    grader.kv_lab(KVCacheManager, Request, block_size=16, sweep=(8, 16, 32, 64, 128))


# %% [markdown]
# ## TODO 5：解码阶段的分页注意力 / decode-time paged attention
#
# 解码时每个序列只有一个新的 query token。真实引擎不会先把缓存拼成连续张量，而是在注意力里直接按块表读取。
#
# - `query`：`[num_seqs, num_heads, head_dim]`
# - `key_cache`、`value_cache`：`[num_blocks, block_size, num_kv_heads, head_dim]`
# - `block_tables`：整数 `[num_seqs, max_blocks_per_seq]`，第 i 行是序列 i 按逻辑顺序的物理块；
#   超出该序列所需的表项是任意有效块号，不能影响结果；它们指向的块、以及最后一块中超出 seq_len 的位置，
#   里面可能是任何值（包括 NaN），所以不要先读出来再乘 0 屏蔽（0 × NaN 仍是 NaN）。
# - `seq_lens`：整数 `[num_seqs]`，每个至少为 1；`scale` 默认 `1/sqrt(head_dim)`。
# - GQA：`num_heads` 是 `num_kv_heads` 的整数倍，query 头 `h` 读取 KV 头 `h // (num_heads // num_kv_heads)`。
#
# 返回 `[num_seqs, num_heads, head_dim]`，dtype 和 device 与 `query` 相同，等于前 `seq_len` 个 token 上的
# `softmax(scale · q Kᵀ) V`。float16/bfloat16 建议用 float32 累加；不要修改任何输入。
#
# Each sequence has one new query token. Read K and V through the block table (only the first
# `seq_len` tokens count; table entries past them and slots past `seq_len` may hold anything, NaN
# included, so never read them and mask by multiplying by 0), map query head `h` to KV head
# `h // (num_heads // num_kv_heads)`, and return `softmax(scale * q K^T) V` with the query's dtype and
# device. Never modify the inputs.

# %% rules todo5

# %% module
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
    # >>> solution
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
    # <<< solution
    # >>> template
    # # TODO 5: 对每个序列按块表取出前 seq_len 个 K/V，按 GQA 映射头，计算 softmax(scale·qKᵀ)V
    # #         per sequence gather the first seq_len K/V rows through the table, map heads (GQA), attend
    # raise NotImplementedError("TODO 5 未完成：分页注意力 / not implemented: paged attention")
    # <<< template


# %% [markdown]
# ## 自检 / Self-checks
#
# 下面的单元运行几组小场景：账本、prefill、跨块 decode、OOM 回滚、释放复用、非连续块表恢复和注意力。
# 未完成的 TODO 显示为“未实现”；已经给出的代码（释放复用）如果用到了还没完成的 TODO，显示为“等待该 TODO”。
# 没通过的自检会打印出来，但这个单元本身从不报错，所以它不会让“全部运行”（Run All）停在最后的
# `grader.check()` 之前。自检通过不等于满分：评分器按上面每个 TODO 的“评分规则”，在大量随机场景上检查。
#
# The cell below runs a few small scenarios. An unfinished TODO shows as "not implemented", and the given
# code (release and reuse) names the TODO it waits for. A failed self-check is printed, but the cell never
# raises, so it never stops Run All before `grader.check()` in the last cell. Passing these few scenarios is not
# full marks: the grader checks every rule listed under "What the grader checks" on many generated cases.

# %% selfcheck
import traceback


def _self_check_ledger():
    ledger = estimate_kv_cache_bytes(num_blocks=4, block_size=4, num_layers=2, num_kv_heads=8, head_dim=16, dtype_bytes=2)
    assert ledger["kv_bytes_per_token"] == 1024, ledger
    assert ledger["kv_bytes_per_block"] == 4096, ledger
    assert ledger["total_cache_bytes"] == 16384, ledger


def _self_check_prefill():
    manager = KVCacheManager(num_blocks=10, block_size=4, head_dim=8)
    req = Request(request_id=1, prompt_len=6)
    manager.allocate_for_prefill(req)
    assert len(req.block_table) == 2 and len(manager.free_blocks) == 8
    try:
        manager.allocate_for_prefill(req)
    except ValueError:
        pass
    else:
        raise AssertionError("second prefill of one request must raise ValueError")
    tight = KVCacheManager(num_blocks=2, block_size=4, head_dim=8)
    big = Request(request_id=2, prompt_len=9)
    free_before = list(tight.free_blocks)
    try:
        tight.allocate_for_prefill(big)
    except RuntimeError as error:
        assert "OOM" in str(error)
    else:
        raise AssertionError("prefill beyond the pool must raise RuntimeError('OOM')")
    assert big.block_table == [] and tight.free_blocks == free_before, "OOM must change nothing"


def _self_check_decode():
    manager = KVCacheManager(num_blocks=4, block_size=4, head_dim=8)
    req = Request(request_id=1, prompt_len=4)
    manager.allocate_for_prefill(req)
    manager.allocate_for_decode(req)  # token 5 opens a second block
    assert req.seq_len == 5 and len(req.block_table) == 2
    manager.allocate_for_decode(req)  # token 6 fits
    assert req.seq_len == 6 and len(req.block_table) == 2
    unit = KVCacheManager(num_blocks=3, block_size=1, head_dim=2)
    one = Request(request_id=2, prompt_len=1)
    unit.allocate_for_prefill(one)
    unit.allocate_for_decode(one)
    assert len(one.block_table) == 2, "block_size=1: every token needs its own block"
    full = KVCacheManager(num_blocks=1, block_size=4, head_dim=8)
    edge = Request(request_id=3, prompt_len=4)
    full.allocate_for_prefill(edge)
    try:
        full.allocate_for_decode(edge)
    except RuntimeError as error:
        assert "OOM" in str(error)
    else:
        raise AssertionError("decode past a full pool must raise RuntimeError('OOM')")
    assert edge.seq_len == 4 and len(edge.block_table) == 1, "decode OOM must change nothing"


def _self_check_release():
    manager = KVCacheManager(num_blocks=3, block_size=4, head_dim=8)
    req = Request(request_id=1, prompt_len=5)
    manager.allocate_for_prefill(req)
    assert manager.allocation_report(req)["unused_tail_tokens"] == 3
    manager.release_request(req)
    assert req.block_table == [] and sorted(manager.free_blocks) == [0, 1, 2]


def _self_check_reconstruction():
    manager = KVCacheManager(num_blocks=4, block_size=2, head_dim=2)
    req = Request(request_id=1, prompt_len=3)
    req.block_table = [3, 1]
    manager.physical_kv_cache[3].fill_(3.0)
    manager.physical_kv_cache[1].fill_(1.0)
    cache = manager.get_physical_cache(req)
    assert tuple(cache.shape) == (3, 2), cache.shape
    assert torch.all(cache[:2] == 3.0) and torch.all(cache[2:] == 1.0), cache


def _self_check_attention():
    gen = torch.Generator().manual_seed(0)
    num_blocks, block_size, kv_heads, heads, dim = 6, 2, 2, 4, 8
    key_cache = torch.randn(num_blocks, block_size, kv_heads, dim, generator=gen)
    value_cache = torch.randn(num_blocks, block_size, kv_heads, dim, generator=gen)
    query = torch.randn(2, heads, dim, generator=gen)
    tables = torch.tensor([[4, 1, 0], [2, 5, 3]])
    lens = torch.tensor([3, 5])
    out = paged_attention(query, key_cache, value_cache, tables, lens)
    for i in range(2):
        n = int(lens[i])
        keys = key_cache[tables[i]].reshape(-1, kv_heads, dim)[:n].repeat_interleave(heads // kv_heads, dim=1)
        values = value_cache[tables[i]].reshape(-1, kv_heads, dim)[:n].repeat_interleave(heads // kv_heads, dim=1)
        scores = torch.einsum("hd,nhd->hn", query[i], keys) / dim**0.5
        expected = torch.einsum("hn,nhd->hd", scores.softmax(-1), values)
        assert torch.allclose(out[i], expected, atol=1e-5), (out[i] - expected).abs().max()


def _what_failed(error):
    """The error, and for a bare `assert` (no message) the line that failed."""
    message = str(error)
    if not message:
        frames = traceback.extract_tb(error.__traceback__)
        message = f"line {frames[-1].lineno}: {(frames[-1].line or '').strip()}" if frames else ""
    return f"{type(error).__name__}: {message}"


def run_self_checks():
    # (name, check, the TODO it waits for): a check of given code never says "not implemented".
    checks = [
        ("TODO 1 ledger / 容量账本", _self_check_ledger, None),
        ("TODO 2 prefill / 预填充分配", _self_check_prefill, None),
        ("TODO 3 decode / 解码扩容", _self_check_decode, None),
        ("given release / 已给出的释放复用", _self_check_release, "TODO 2"),
        ("TODO 4 reconstruction / 逻辑恢复", _self_check_reconstruction, None),
        ("TODO 5 attention / 分页注意力", _self_check_attention, None),
    ]
    failed = []
    for name, check, needs in checks:
        try:
            check()
        except NotImplementedError:
            if needs:
                print(f"⏳ {name}: 给定代码，等待 {needs} 完成 / given code, waits for {needs}")
            else:
                print(f"⏳ {name}: 未实现 / not implemented")
        except Exception as error:  # printed, never raised: Run All must reach grader.check()
            failed.append(name)
            print(f"❌ {name}: {_what_failed(error)}")
        else:
            print(f"✅ {name}")
    if failed:
        print(
            f"\n{len(failed)} 项自检未通过（见上面的 ❌）；最后一个单元的 grader.check() 会给出评分器的报告。\n"
            f"{len(failed)} self-check(s) failed (the ❌ lines above); grader.check() in the last cell shows the grader's report."
        )


run_self_checks()

# %% [markdown]
# ## 用评分器检查 / Check with the grader
#
# `grader.check()` 评的是内核到目前为止运行过的代码单元（按运行顺序），用的是与正式评分相同的沙箱和检查，
# 并在下面显示评分报告：每个未通过的评分项都有说明、它检查的规则，以及可以粘贴运行的最小复现。
# 上面的自检不管发现什么都不会中断“全部运行”，所以总会走到这里。检查全部 TODO 要几十秒；
# `grader.check("todo3")` 只检查 TODO 3，大约快一半；`grader.check(lang="en")` 用英文。
# 它也返回结果：`.score`（百分制）和 `.items`。这只是反馈，正式成绩以提交后的评分为准；评分时这个单元不会运行。
#
# 在 Colab 等托管环境中，先在一个新单元里安装评分器（链接由课程提供），再运行下面的单元：
#
#     %pip install <课程提供的 paged_attention_grader-*.whl 链接>
#
# `grader.check()` grades the cells this kernel has run so far, in the order they ran, in the same
# sandbox and with the same checks as the real grading, and shows the scorecard below: every failed item
# with what went wrong, the rules it checks, and a reproduction you can paste and run. The self-checks above
# never stop Run All, whatever they find, so it always gets here. Checking every TODO takes some tens of seconds;
# `grader.check("todo3")` checks TODO 3 alone, in about half that; `grader.check(lang="en")` answers in
# English. It returns the result too: `.score` (out of 100) and `.items`. This is feedback: your grade comes
# from grading your submission, which never runs this cell.
#
# In Colab or another hosted notebook, install the grader first, in a new cell (your course gives the link):
#
#     %pip install <link to paged_attention_grader-*.whl from your course>

# %% selfcheck
import grader

grader.check()
