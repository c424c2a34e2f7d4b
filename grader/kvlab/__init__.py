"""The KV-utilisation lab: serve a request trace through a KV-cache policy, step by step, and
account for every slot of the pool (why paging matters; the vLLM paper's Figure 2).

- trace.py: seeded synthetic traces (ShareGPT-like, Alpaca-like) and CSV traces;
- memory.py: the pool under each policy: reservation (static, power of two, oracle) and
  paging through an allocator (drivers.py: in this process, or sandboxed.py: a submission's,
  in the sandbox);
- simulate.py: the scheduler (iteration-level batching, FCFS, preemption by recompute) and
  what it records per step;
- lab.py: every policy on one trace, a block-size sweep, the summary (JSON);
- svg.py: the pictures; notebook.py: `grader.kv_lab(...)` in a student's kernel.

Nothing here imports torch: the allocator under test brings its own.
"""
