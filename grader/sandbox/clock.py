"""The clock the time limits count: CPU seconds of the grading, with a wall-clock backstop.

A neighbour's load stretches wall-clock time, not the CPU time a grading uses.  So:

- a graded call may use `call_timeout_s` of CPU in its session's processes (the session
  child, its threads, its children, reaped or alive), or run `call_timeout_s × wall_backstop`
  seconds of wall-clock time, whichever ends first (a call that sleeps uses no CPU);
- a rubric item may use `item_budget_s` of CPU: its judge thread's (hypothesis, the models,
  the dense reference: the judge's work for the item) plus its sessions', or run
  `item_budget_s × wall_backstop` seconds, and never past the submission's total budget
  (wall-clock, `total_budget_s`).

On an idle machine a call and an item use about as much CPU as wall-clock time (the judge
thread and the session take turns), so the limits mean what they always meant; beside a CPU
hog (its own cgroup and an equal CPU share, cgroups.py) a correct submission is timed by
the work it did, not by how long it waited for a core.

Reading a process's CPU costs two small /proc reads, so a call that returns quickly (almost
all of them) is never read: the first `FIRST_CHECK_S` of a call are taken as CPU, and only a
longer call reads its session's CPU, then again at least every `CHECK_EVERY_S`.
"""

from __future__ import annotations

import math
import os
import threading
import time

TICKS = os.sysconf("SC_CLK_TCK")
FIRST_CHECK_S = 0.05  # a call's first moments, counted as CPU without reading it
CHECK_EVERY_S = 0.5  # a running call (and an item's sessions) is read at least this often


def process_cpu(pid: int) -> float | None:
    """CPU seconds of `pid` (all its threads, and its children it has reaped) and of its live
    descendants; None when it is gone."""
    total, todo = 0.0, [pid]
    seen: set[int] = set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            with open(f"/proc/{current}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15]) / TICKS  # utime, stime, cutime, cstime
        except (OSError, IndexError, ValueError):
            if current == pid:
                return None
            continue  # a descendant that ended a moment ago: its parent counts it once reaped
        todo += _children(current)
    return total


def _children(pid: int) -> list[int]:
    """The children of every thread of `pid` (Linux 3.5+ with CONFIG_PROC_CHILDREN; else none)."""
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children", "rb") as f:
                found += [int(child) for child in f.read().split()]
    except (OSError, ValueError):
        pass
    return found


class Budget:
    """What one rubric item may spend: CPU seconds of its judge thread and its sessions, with
    a wall-clock backstop (and the submission's wall-clock deadline above both).

    Created in the thread that runs the item; the thread's CPU clock is read from any thread.
    `cpu_s` None: only the wall-clock deadline counts (callers that pass a plain deadline).
    """

    def __init__(self, cpu_s: float | None, *, wall_backstop: float = 3.0, wall_deadline: float | None = None):
        self.cpu_s = cpu_s
        self.started = time.monotonic()
        backstop = self.started + cpu_s * wall_backstop if cpu_s is not None else math.inf
        self.wall_deadline = min(backstop, wall_deadline if wall_deadline is not None else math.inf)
        try:
            self._thread_clock: int | None = time.pthread_getcpuclockid(threading.get_ident())
        except (AttributeError, OSError):
            self._thread_clock = None
        self._judge_start = self._judge_cpu = self._thread_cpu()
        self._ended = 0.0  # CPU of the sessions that ended
        self._live: dict[int, float] = {}  # session pid -> its CPU when last read
        self._read_at = self.started
        self._lock = threading.Lock()

    @classmethod
    def wall(cls, deadline: float) -> Budget:
        """A deadline in wall-clock time only (monotonic), as a budget."""
        return cls(None, wall_deadline=deadline)

    def _thread_cpu(self) -> float:
        if self._thread_clock is None:
            return 0.0
        try:
            self._judge_cpu = time.clock_gettime(self._thread_clock)
        except OSError:  # the thread has ended: its last reading stands
            pass
        return getattr(self, "_judge_cpu", 0.0)

    # -- sessions ---------------------------------------------------------------------------
    def session_started(self, pid: int) -> None:
        with self._lock:
            self._live[pid] = 0.0  # forked just now: its counters start at zero

    def session_read(self, pid: int, cpu: float) -> None:
        with self._lock:
            if pid in self._live:
                self._live[pid] = max(self._live[pid], cpu)

    def session_ended(self, pid: int) -> None:
        """Read the session's CPU one last time (before it is killed) and keep it."""
        cpu = process_cpu(pid)
        with self._lock:
            last = self._live.pop(pid, None)
            if last is not None:
                self._ended += max(last, cpu or 0.0)

    # -- what is spent ----------------------------------------------------------------------
    def spent(self) -> float:
        """CPU seconds used so far (the live sessions read now)."""
        for pid in list(self._live):
            cpu = process_cpu(pid)
            if cpu is not None:
                self.session_read(pid, cpu)
        self._read_at = time.monotonic()
        return self._spent()

    def _spent(self) -> float:
        with self._lock:
            return self._thread_cpu() - self._judge_start + self._ended + sum(self._live.values())

    def used(self) -> float:
        """What is used, in the measure that limits it: CPU seconds, or the wall-clock seconds
        since the start once the wall-clock backstop is what ended it (a sleeper)."""
        now = time.monotonic()
        return now - self.started if self.wall_left(now) <= 0 else self.spent()

    def wall_left(self, now: float | None = None) -> float:
        return self.wall_deadline - (time.monotonic() if now is None else now)

    def cpu_left(self, fresh: bool = True) -> float:
        if self.cpu_s is None:
            return math.inf
        return self.cpu_s - (self.spent() if fresh else self._spent())

    def remaining(self) -> float:
        """Seconds left: of CPU, and never more than the wall-clock backstop leaves."""
        return max(0.0, min(self.cpu_left(), self.wall_left()))

    def expired(self) -> bool:
        """Whether the budget is spent.  Cheap: the sessions are read only every CHECK_EVERY_S."""
        now = time.monotonic()
        if self.wall_left(now) <= 0:
            return True
        if self.cpu_s is None:
            return False
        fresh = now - self._read_at >= CHECK_EVERY_S
        return self.cpu_left(fresh) <= 0


class CallClock:
    """One call's limits, as `protocol._recv` waits on them: `next_wait()` says how long to wait
    before asking again, 0 when a limit is reached (`reason` says which)."""

    def __init__(self, pid: int, cpu_s: float, wall_backstop: float, budget: Budget):
        self.pid = pid
        self.cpu_s = cpu_s
        self.budget = budget
        self.started = time.monotonic()
        self.wall_deadline = min(self.started + cpu_s * wall_backstop, budget.wall_deadline)
        self.baseline: float | None = None  # the session's CPU when the call began (estimated)
        self.used = 0.0
        self.reason = ""  # "cpu" (the call's), "wall" (the call's backstop), "budget" (the item's)

    def next_wait(self) -> float:
        now = time.monotonic()
        wall_left = self.wall_deadline - now
        if wall_left <= 0:
            self.reason = "budget" if self.budget.wall_left(now) <= 0 else "wall"
            return 0.0
        elapsed = now - self.started
        if elapsed < FIRST_CHECK_S:
            return min(FIRST_CHECK_S - elapsed, wall_left)
        cpu = process_cpu(self.pid)
        if cpu is None:  # gone: the socket says so at once
            return min(CHECK_EVERY_S, wall_left)
        if self.baseline is None:
            # Read for the first time now: the call has used at most this much of it so far
            # (one thread); more threads make it undercount by a few milliseconds at most.
            self.baseline = cpu - min(elapsed, FIRST_CHECK_S)
        self.used = cpu - self.baseline
        self.budget.session_read(self.pid, cpu)
        call_left = self.cpu_s - self.used
        item_left = self.budget.cpu_left(fresh=False)
        if call_left <= 0 or item_left <= 0:
            self.reason = "cpu" if call_left <= 0 else "budget"
            return 0.0
        return max(0.001, min(call_left, item_left, wall_left, CHECK_EVERY_S))

    def describe(self) -> str:
        if self.reason == "cpu":
            return f"used {self.used:.1f} s of CPU"
        if self.reason == "wall":
            return f"ran {time.monotonic() - self.started:.1f} s (wall clock) using {self.used:.1f} s of CPU"
        return "the item's time budget ran out"
