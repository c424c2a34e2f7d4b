"""Deny by default, and no grade depends on its neighbours (issue 16's round of attacks).

Each attack is a hostile corpus file graded by tests/test_hostile.py (its score and what it
leaves); here is what each one saw and did: the system calls refused (seccomp), the TA's
keyring out of reach, no view of the host or of other gradings (/sys, cgroups, /proc), a
colluding pair graded side by side, a disk filler, a CPU hog beside a correct classmate in a
`-j 2` batch.  Then the pieces themselves: the seccomp program (on both architectures it
supports), the CPU-time clock, the Landlock fallback's /proc and /sys, cgroup v2.  What the
kernel lacks skips, with the reason.
"""

from __future__ import annotations

import json
import os
import re
import socket
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from grader.config import load_config
from grader.grade import grade_path
from grader.sandbox import cgroups, clock, seccomp
from grader.sandbox.client import Sandbox
from grader.sandbox.protocol import WorkerLost, _recv
from grader.submission import load_submission
from tests import hostile_surroundings as surroundings
from tests.conftest import ROOT
from tests.test_hostile import CONFIG, EXPECT, HOSTILE, ISOLATION, MOUNT_NS, PID_NS, expected_score, graded

pytestmark = pytest.mark.slow

SECCOMP = ISOLATION["seccomp"] > 0
CGROUP_NS = "cgroup" in ISOLATION["namespaces"]
needs_seccomp = pytest.mark.skipif(not SECCOMP, reason="no seccomp filter on this machine (kernel or architecture)")
# The calls issue 16 names, each of which a submission tried (sys_denied_calls.py).
NAMED = (
    "keyctl", "add_key", "request_key", "ptrace", "process_vm_readv", "process_vm_writev", "bpf", "perf_event_open",
    "userfaultfd", "mount", "umount2", "pivot_root", "unshare", "setns", "kexec_load", "init_module", "finit_module",
    "io_uring_setup", "personality",
)  # fmt: skip


# --- seccomp -----------------------------------------------------------------------------------

@needs_seccomp
def test_denied_calls_fail_with_eperm_and_grading_goes_on() -> None:
    run = graded("sys_denied_calls.py")
    excerpt = run.result.output_excerpt
    denied = re.search(r"^EPERM: (.*)$", excerpt, re.M)
    others = re.search(r"^NOT EPERM: (.*)$", excerpt, re.M)
    assert denied and others, excerpt[-2000:]
    assert set(NAMED) <= set(denied.group(1).split()), excerpt[-2000:]
    assert others.group(1).split() == (["clone3=ENOSYS"] if seccomp.machine() == "x86_64" else [])
    assert "QUERY personality: 0" in excerpt or seccomp.machine() != "x86_64"  # querying changes nothing: allowed
    assert "'Seccomp:\\t2'" in excerpt and "'NoNewPrivs:\\t1'" in excerpt, excerpt[-500:]
    assert "THREAD [1] SUBPROCESS ok" in excerpt  # threads (clone3 refused: the C library falls back) and subprocesses work
    assert run.result.score == expected_score(EXPECT["sys_denied_calls.py"]) == 100
    assert run.result.isolation["seccomp"] == ISOLATION["seccomp"]


def _header_numbers(path: Path, prefix: str) -> dict[str, int]:
    numbers = {}
    for match in re.finditer(rf"#define {prefix}(\w+)\s+(\d+)\b", path.read_text()):
        numbers.setdefault(match.group(1), int(match.group(2)))
    return numbers


@pytest.mark.parametrize(
    ("table", "header", "prefix"),
    [
        (seccomp.X86_64, "/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "__NR_"),
        (seccomp.X86_64, "/usr/include/asm/unistd_64.h", "__NR_"),
        (seccomp.AARCH64, "/usr/include/asm-generic/unistd.h", "__NR(?:3264)?_"),
    ],
)
def test_seccomp_numbers_match_the_kernel_headers(table: dict[str, int], header: str, prefix: str) -> None:
    path = Path(header)
    if not path.exists():
        pytest.skip(f"{header} is not installed here")
    known = _header_numbers(path, prefix)
    checked = {name: number for name, number in table.items() if name in known}
    assert len(checked) > 30
    assert {name: (number, known[name]) for name, number in checked.items() if number != known[name]} == {}


def _run_bpf(program: list[tuple[int, int, int, int]], nr: int, arch: int, args: tuple[int, ...] = ()) -> int:
    """A classic-BPF interpreter for the few instructions the filter uses, on one struct seccomp_data."""
    data = struct.pack("=iIQ6Q", nr, arch, 0, *(list(args) + [0] * 6)[:6])
    accumulator, pc = 0, 0
    while True:
        code, jt, jf, k = program[pc]
        if code == seccomp.BPF_LD_W_ABS:
            accumulator = struct.unpack_from("=I", data, k)[0]
            pc += 1
        elif code == seccomp.BPF_RET_K:
            return k
        elif code == seccomp.BPF_AND_K:
            accumulator &= k
            pc += 1
        else:
            taken = {seccomp.BPF_JEQ_K: accumulator == k, seccomp.BPF_JGE_K: accumulator >= k, seccomp.BPF_JSET_K: bool(accumulator & k)}[code]
            pc += 1 + (jt if taken else jf)


@pytest.mark.parametrize("arch", sorted(seccomp.ARCHES))
def test_seccomp_program_decides_as_intended(arch: str) -> None:
    """The program run by a small interpreter, for both architectures (only one can be run for real here)."""
    audit, numbers = seccomp.ARCHES[arch]
    program = seccomp.program(arch)
    allow, eperm, enosys = seccomp.SECCOMP_RET_ALLOW, seccomp.SECCOMP_RET_ERRNO | 1, seccomp.SECCOMP_RET_ERRNO | 38
    for name in seccomp.DENIED:
        if name in numbers:
            assert _run_bpf(program, numbers[name], audit) == eperm, name
    for name in seccomp.ABSENT:
        assert _run_bpf(program, numbers[name], audit) == enosys, name
    for harmless in (0, 1, 3, 9, 39, 60, 63, 64):  # read, write, close, mmap, ... on either table
        if harmless not in numbers.values():
            assert _run_bpf(program, harmless, audit) == allow, harmless
    clone = numbers["clone"]
    assert _run_bpf(program, clone, audit, (0x01000000 | 0x00200000 | 17,)) == allow  # a fork
    assert _run_bpf(program, clone, audit, (0x003D0F00,)) == allow  # pthread_create's flags
    for flag in (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000):
        assert _run_bpf(program, clone, audit, (flag | 17,)) == eperm, hex(flag)
    assert _run_bpf(program, clone, audit, (0x00001000 | 17,)) == eperm  # CLONE_PIDFD: a pidfd's inode number counts the machine's processes
    assert _run_bpf(program, numbers["clone3"], audit) == enosys
    assert _run_bpf(program, numbers["personality"], audit, (0xFFFFFFFF,)) == allow
    assert _run_bpf(program, numbers["personality"], audit, (0x0040000,)) == eperm
    assert _run_bpf(program, 0, 0x40000003) == eperm  # i386's convention, whatever the number
    if arch == "x86_64":
        assert _run_bpf(program, 0x40000000 | 39, audit) == eperm  # x32
    assert len(seccomp.packed(arch)) == 8 * len(program)


@pytest.mark.parametrize("arch", sorted(seccomp.ARCHES))
def test_seccomp_program_closes_what_sandboxes_share(arch: str) -> None:
    """The argument rules (docs/trust.md, "Kernel objects shared between sandboxes"), on both architectures."""
    audit, numbers = seccomp.ARCHES[arch]
    program = seccomp.program(arch)
    ret = seccomp.RETURNS

    def decide(name: str, *args: int) -> int:
        return _run_bpf(program, numbers[name], audit, args)

    af_inet, af_inet6, af_netlink, af_packet, af_vsock = 2, 10, 16, 17, 40
    for call in ("socket", "socketpair"):
        assert decide(call, 1, 1) == ret["allow"]  # AF_UNIX, SOCK_STREAM
        for family in (af_inet, af_inet6, af_netlink, af_packet, af_vsock, 0, 0x7FFFFFFF):
            assert decide(call, family, 1) == ret["eafnosupport"], (call, family)
    assert decide("flock", 3, 2) == ret["noop"]  # LOCK_EX: done, as far as the caller can tell
    for command in (6, 7, 37, 38):  # F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW
        assert decide("fcntl", 3, command) == ret["noop"], command
    for command in (1024, 1026):  # F_SETLEASE, F_NOTIFY
        assert decide("fcntl", 3, command) == ret["deny"], command
    for command in (0, 1, 2, 3, 4, 5, 36, 1025, 1031):  # F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_SETFL, F_GETLK, F_OFD_GETLK, F_GETLEASE, F_DUPFD_CLOEXEC
        assert decide("fcntl", 3, command) == ret["allow"], command
    for op in (0, 1, 9, 10, 5, 4, 9 | 256):  # WAIT, WAKE, WAIT_BITSET, WAKE_BITSET, WAKE_OP, CMP_REQUEUE, shared
        assert decide("futex", 0x1000, op) == ret["noop"], op
        assert decide("futex", 0x1000, op | 128) == ret["allow"], op  # FUTEX_PRIVATE_FLAG: every thread lock
    for op in (6, 7, 8, 11, 12, 13, 13 | 256):
        assert decide("futex", 0x1000, op) == ret["enosys"], op
        assert decide("futex", 0x1000, op | 128) == ret["allow"], op
    assert decide("fadvise64", 3, 0, 0, 4) == ret["noop"]  # POSIX_FADV_DONTNEED
    assert decide("fadvise64", 3, 0, 0, 3) == ret["allow"]  # POSIX_FADV_WILLNEED
    for advice, expected in ((20, "noop"), (21, "noop"), (4, "allow"), (8, "allow"), (14, "allow")):  # COLD, PAGEOUT, DONTNEED, FREE, HUGEPAGE
        assert decide("madvise", 0x1000, 4096, advice) == ret[expected], advice
    for call in ("preadv2", "pwritev2"):
        assert decide(call, 3, 0, 1, 0, 0, 0x8) == ret["eopnotsupp"]  # RWF_NOWAIT
        assert decide(call, 3, 0, 1, 0, 0, 0x8 | 0x2) == ret["eopnotsupp"]
        assert decide(call, 3, 0, 1, 0, 0, 0x2) == ret["allow"]  # RWF_DSYNC
    for option in (57, 71):  # SO_COOKIE, SO_NETNS_COOKIE
        assert decide("getsockopt", 3, 1, option) == ret["enoprotoopt"], option
    assert decide("getsockopt", 3, 1, 3) == ret["allow"]  # SO_TYPE
    assert decide("getsockopt", 3, 6, 57) == ret["allow"]  # another level's option 57
    # Only the low 32 bits of an argument count (the kernel reads these ones as int).
    assert decide("socket", (1 << 32) | 1, 1) == ret["allow"]
    assert decide("fcntl", 3, (1 << 32) | 6) == ret["noop"]


# --- keyrings ----------------------------------------------------------------------------------

def test_keyrings_are_out_of_reach() -> None:
    run = graded("keyring_read_plant.py")
    around, excerpt = run.around, run.result.output_excerpt
    if around.get("serial", -1) <= 0:
        pytest.skip("no kernel keyrings here (the TA's key could not be made)")
    assert surroundings.TA_SECRET.decode() not in excerpt and "SECRET FROM" not in excerpt, excerpt[-1500:]
    searches = re.findall(r"SEARCH [\w-]+: (\S+)", excerpt)
    plants = re.findall(r"PLANT [\w-]+: (\S+)", excerpt)
    assert len(searches) == len(plants) == 5, excerpt[-1500:]
    if SECCOMP:
        assert set(searches) == set(plants) == {"EPERM"}, excerpt[-1500:]
    assert "TA KEY LISTED" not in excerpt
    assert re.search(r"PROC KEYS: 0 lines|PROC KEYS REFUSED", excerpt), excerpt[-1500:]
    # Nothing planted outlives the grading: no key of its uid is left, none this process can list.
    uid = run.result.isolation.get("uid")
    assert surroundings.PLANTED not in around["listed"]
    if uid is not None and uid != os.geteuid():
        assert around["after"].get(uid, 0) == 0, around["after"]
    assert run.result.score == 100
    assert run.result.isolation["keyring"] is True


# --- no view of the host -----------------------------------------------------------------------

def test_sys_and_cgroups_show_nothing_of_the_host() -> None:
    if not MOUNT_NS:
        pytest.skip("no mount namespace here: /sys is the host's (Landlock keeps its cgroups and devices out)")
    run = graded("spy_sys_cgroups.py")
    excerpt = run.result.output_excerpt
    assert "CGROUPS SEEN: 0" in excerpt, excerpt[-2000:]
    assert "COUNTER" not in excerpt
    for path in run.around["paths"]:  # the neighbour graded meanwhile
        assert path not in excerpt
    if CGROUP_NS:
        own = re.search(r"OWN CGROUP: (.*)", excerpt)
        assert own and all(line.rsplit(":", 1)[1] == "/" for line in own.group(1).split(" | ")), excerpt[-2000:]
    # The interfaces' names: only the namespace's loopback, or not even that (netlink refused: AF_UNIX only).
    assert "INTERFACES REFUSED" in excerpt and ("IF_NAMEINDEX REFUSED: 97" if SECCOMP else "IF_NAMEINDEX: ['lo']") in excerpt
    # What a notebook needs of it still works: the CPU count (from the CPU lists), torch.
    assert f"CPUS: {os.cpu_count()} {len(os.sched_getaffinity(0))} True 3.0" in excerpt, excerpt[-2000:]
    for path in ("/proc/sys/kernel/random/boot_id", "/etc/machine-id"):
        try:
            secret = Path(path).read_text().strip()
        except OSError:
            continue
        assert secret not in excerpt, path
    if "uts" in ISOLATION["namespaces"] and socket.gethostname() != "sandbox":
        assert f"HOSTNAME: {socket.gethostname()}\n" not in excerpt and "HOSTNAME: sandbox\n" in excerpt
    if PID_NS:  # its own /proc: the machine-wide counters are fixed or empty
        assert "PROC stat: cpu  0 0 0 0 0 0 0 0 0 0 | cpu0 0 " in excerpt and "PROC loadavg: 0.00 0.00 0.00 1/1 1" in excerpt, excerpt[-2000:]
        for name in ("vmstat", "diskstats", "locks"):
            assert re.search(rf"PROC {name}: (\n|$)|PROC {name} REFUSED", excerpt), name
        assert re.search(r"PROC uptime: [\d.]+ 0\.00", excerpt)
    assert run.result.isolation["sys"] == "cpus" and run.result.isolation["proc"] == ("masked" if PID_NS else "narrowed")


def test_a_colluding_pair_graded_side_by_side_passes_nothing() -> None:
    """The sender transmits its paged_attention through its cgroup's counters while the receiver listens."""
    run = graded("collude_receiver.py")
    sender, excerpt = run.around.get("sender"), run.result.output_excerpt
    assert run.around.get("returncode") == 0, run.around.get("stderr")
    assert sender is not None and sender["score"] == 100
    assert re.search(r"SENT \d+ bytes", sender["extra_data"]["grade_result"]["output_excerpt"])
    assert run.around["left_in_tmp"] == []
    assert "RECEIVED: NOTHING" in excerpt and "CGROUPS SEEN: 0" in excerpt, excerpt[-1500:]
    assert run.result.score == expected_score(EXPECT["collude_receiver.py"])  # as when graded alone: TODO 5 missing


def test_the_collusion_channel_is_real_outside_the_sandbox() -> None:
    """The same receiver, run as a plain process of the host, does find the sender's counters and
    its marker: what the sandbox closes is a channel that exists."""
    if os.geteuid() != 0 or not ISOLATION["cgroup"]:
        pytest.skip("needs a grader running as root with a cgroup per grading (whose counters the host can read)")
    receiver = load_submission(HOSTILE / "collude_receiver.py", 1 << 20).cells[-1].source.replace("exec(source)", "pass")
    listener = subprocess.Popen([sys.executable, "-c", receiver], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)
        cells = load_submission(HOSTILE / "collude_sender.py", 1 << 20).cells
        with Sandbox(cells, load_config().limits) as sender:
            report = sender.load()
            assert report.failed is None and all(c.status == "ok" for c in report.cells)
        out, err = listener.communicate(timeout=120)
    finally:
        listener.kill()
        listener.wait()
    assert "MARKER SEEN" in out, (out, err[-1000:])


# --- disk ----------------------------------------------------------------------------------------

def test_disk_filler_stops_at_its_caps() -> None:
    if not MOUNT_NS:
        pytest.skip("no mount namespace here: only each file is capped (file_mb), not the total (docs/trust.md)")
    run = graded("disk_filler.py")
    excerpt, limits = run.result.output_excerpt, CONFIG.limits
    written = re.search(r"BYTES WRITTEN (\d+) MiB (\w+)", excerpt)
    made = re.search(r"FILES MADE (\d+) (\w+)", excerpt)
    assert written and made, excerpt[-1000:]
    assert int(written.group(1)) <= limits.disk_mb and written.group(2) == "ENOSPC"
    assert int(made.group(1)) < limits.inodes and made.group(2) == "ENOSPC"
    assert f"DISK {limits.disk_mb} MiB {limits.inodes} inodes" in excerpt
    assert "WROTE OUTSIDE" not in excerpt
    assert run.result.isolation["limits"]["disk_mb"] == limits.disk_mb and run.result.isolation["limits"]["inodes"] == limits.inodes
    assert run.result.score == 100


def test_the_work_folder_keeps_what_was_put_there(tmp_path: Path) -> None:
    """Files in work/ before the worker starts are in its tmpfs (a notebook's folder copied there)."""
    if not MOUNT_NS:
        pytest.skip("no mount namespace here: work/ is the judge's folder itself")
    cell = "import os\nprint('DATA', open('data/table.csv').read(), sorted(os.listdir('.')), os.path.islink('link'))\n"
    with Sandbox([load_submission(ROOT / "reference" / "paged_attention.py", 1 << 20).cells[0], _cell(9, cell)], CONFIG.limits) as sandbox:
        (sandbox.workdir / "data").mkdir()
        (sandbox.workdir / "data" / "table.csv").write_text("a,b\n1,2\n")
        (sandbox.workdir / "link").symlink_to("/etc/passwd")
        if sandbox.uid is not None:
            for path in (sandbox.workdir / "data", sandbox.workdir / "data" / "table.csv"):
                os.lchown(path, sandbox.uid.uid, sandbox.uid.gid)
        report = sandbox.load()
        assert report.failed is None, report.failed
    output = sandbox.output()[0]
    # No notebook folder here, so work/ is both the current folder and HOME, where IPython keeps
    # its profile (.ipython) as a kernel does in its home; a grading's notebook runs in work/NAME.
    assert "DATA a,b\n1,2\n ['.ipython', 'data'] False" in output, output[-1000:]  # a link is not carried in


def _cell(index: int, source: str):  # noqa: ANN202
    from grader.submission import Cell

    return Cell(index, textwrap.dedent(source))


# --- fair CPU ------------------------------------------------------------------------------------

def test_a_cpu_hog_beside_a_correct_classmate_costs_it_nothing(tmp_path: Path) -> None:
    """A -j 2 batch of a hog and a correct classmate: the classmate's verdicts are those it gets alone."""
    alone_started = time.monotonic()
    alone = grade_path(ROOT / "reference" / "paged_attention.py", load_config(), "cpu")
    alone_seconds = time.monotonic() - alone_started
    assert alone.score == 100
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "alice.py").write_bytes((ROOT / "reference" / "paged_attention.py").read_bytes())
    (folder / "hog.py").write_bytes((HOSTILE / "cpu_hog.py").read_bytes())
    out = tmp_path / "grades"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
    batch = subprocess.run(
        [sys.executable, "-m", "grader", "grade-batch", str(folder), "--out", str(out), "-j", "2", "--force", "--lang", "en", "--public-seed"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert batch.returncode == 0, batch.stderr[-3000:]
    beside = json.loads((out / "students" / "alice.json").read_text())["extra_data"]["grade_result"]
    hog = json.loads((out / "students" / "hog.json").read_text())["extra_data"]["grade_result"]
    assert re.search(r"SPINNING [1-9]", hog["output_excerpt"]), hog["output_excerpt"][-500:]  # the hog did run its spinners
    assert beside["score"] == 100
    assert {i["id"]: i["status"] for i in beside["items"]} == {i.id: i.status for i in alone.items}
    print(f"correct classmate: alone {alone_seconds:.1f} s, beside the hog {beside['seconds']:.1f} s")
    assert beside["isolation"]["cpu"] == (ISOLATION["cpu"] or None)
    if ISOLATION["cpu"]:
        # An equal share: the hog's 120 processes weigh as one grading (without the share the
        # classmate took 4.4 times as long here, its verdicts kept only by the CPU-time clock).
        assert beside["seconds"] < 3 * alone_seconds, (beside["seconds"], alone_seconds)


def test_the_clock_counts_cpu_time_with_a_wall_clock_backstop() -> None:
    """A call that burns CPU ends after its CPU limit; one that sleeps, after the wall-clock backstop."""
    for body, limit, backstop, expected in (
        ("while True: pass", 0.6, 5.0, "cpu"),
        ("import time; time.sleep(60)", 0.3, 3.0, "wall"),
    ):
        ours, theirs = socket.socketpair()
        child = subprocess.Popen([sys.executable, "-c", body], pass_fds=(theirs.fileno(),))
        theirs.close()
        try:
            call = clock.CallClock(child.pid, limit, backstop, clock.Budget(None, wall_deadline=time.monotonic() + 60))
            started = time.monotonic()
            with pytest.raises(WorkerLost):
                _recv(ours, call)
            seconds = time.monotonic() - started
        finally:
            child.kill()
            child.wait()
            ours.close()
        assert call.reason == expected
        if expected == "cpu":
            assert limit <= call.used < limit + 0.6 and seconds < limit * backstop, (call.used, seconds)
        else:
            assert call.used < 0.2 and limit * backstop <= seconds < limit * backstop + 1.0, (call.used, seconds)


def test_process_cpu_counts_children_and_threads() -> None:
    script = textwrap.dedent(
        """
        import os, threading, time
        def spin(seconds):
            end = time.process_time() + seconds
            while time.process_time() < end:
                pass
        t = threading.Thread(target=spin, args=(0.3,)); t.start(); t.join()
        pid = os.fork()
        if pid == 0:
            spin(0.3); os._exit(0)
        os.waitpid(pid, 0)
        child = os.fork()
        if child == 0:
            spin(0.3)  # alive, not reaped: counted as a descendant
            time.sleep(30)
        time.sleep(30)
        """
    )
    process = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 20
        while (clock.process_cpu(process.pid) or 0) < 0.85 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert 0.85 <= (clock.process_cpu(process.pid) or 0) < 2.0
    finally:
        process.kill()
        process.wait()
    assert clock.process_cpu(process.pid) is None


# --- the fallbacks ------------------------------------------------------------------------------

def test_landlock_fallback_hides_the_machine_wide_counters(tmp_path: Path) -> None:
    """Without namespaces (PA_GRADER_NAMESPACES=0) Landlock narrows the host's /proc and /sys."""
    if not ISOLATION["landlock"]:
        pytest.skip("no Landlock here")
    script = textwrap.dedent(
        f"""
        import importlib.util, os, sys
        here = {str(ROOT / "grader" / "sandbox")!r}
        for name in ("wire", "seccomp", "confine"):
            spec = importlib.util.spec_from_file_location("_pa_sandbox_" + name, os.path.join(here, name + ".py"))
            module = importlib.util.module_from_spec(spec)
            sys.modules["_pa_sandbox_" + name] = module
            spec.loader.exec_module(module)
        confine = sys.modules["_pa_sandbox_confine"]
        print("ABI", confine.landlock([{str(tmp_path)!r}], []))
        for path in ("/proc/cpuinfo", "/proc/self/status", "/sys/devices/system/cpu/online", "/proc/stat", "/proc/meminfo",
                     "/proc/loadavg", "/proc/keys", "/proc/locks", "/proc/sys/kernel/random/boot_id", "/sys/fs/cgroup/cgroup.procs",
                     "/sys/class/net", "/proc/1/cmdline"):
            try:
                if os.path.isdir(path):
                    os.listdir(path)
                else:
                    open(path).read(1)
                print("READ", path)
            except OSError as error:
                print("REFUSED", path, type(error).__name__)
        """
    )
    out = subprocess.run([sys.executable, "-S", "-c", script], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert re.search(r"ABI [1-9]", out.stdout), out.stdout
    allowed = {"/proc/cpuinfo", "/proc/self/status", "/sys/devices/system/cpu/online"}
    read = set(re.findall(r"READ (\S+)", out.stdout))
    tried = set(re.findall(r"(?:READ|REFUSED) (\S+)", out.stdout))
    assert len(tried) == 12, out.stdout
    assert read == {p for p in allowed if os.path.exists(p)}, out.stdout  # everything else that exists was refused


def test_cgroup_v2_counts_cpu_time(tmp_path: Path) -> None:
    """The v2 path where a cgroup2 hierarchy can be written (this machine: v1 controllers, an empty
    v2 hierarchy): CPU time from cpu.stat, and an equal cpu.weight where the cpu controller is free."""
    point = next((m for m, kind, _ in cgroups._mounts() if kind == "cgroup2"), None)
    if point is None:
        pytest.skip("no cgroup2 hierarchy mounted here")
    path = Path(point) / f"{cgroups.PREFIX}{os.getpid()}-v2test"
    try:
        path.mkdir()
    except OSError as error:
        pytest.skip(f"cannot make a cgroup in {point}: {error}")
    spin = "import sys, time\nsys.stdin.read(1)\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass\ntime.sleep(30)"
    spinner = subprocess.Popen([sys.executable, "-c", spin], stdin=subprocess.PIPE)
    try:
        (path / "cgroup.procs").write_text(str(spinner.pid))
        assert spinner.stdin is not None
        spinner.stdin.write(b"x")
        spinner.stdin.close()  # in the cgroup now: spin
        group = cgroups.Cgroup("v2", None, None, [str(path)], cgroups._v2_cpu(point, str(path)), str(path / "cpu.stat"))
        deadline = time.monotonic() + 10
        while (group.cpu_seconds() or 0) < 0.3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert 0.3 <= (group.cpu_seconds() or 0) < 2.0
        controllers = (Path(point) / "cgroup.controllers").read_text().split()
        if "cpu" in controllers:
            assert group.cpu == {"weight": cgroups.CPU_WEIGHT}
        cgroups.kill([str(path)])
        spinner.wait(timeout=10)
    finally:
        spinner.kill()
        spinner.wait()
        cgroups.remove([str(path)])
    assert not path.exists()
    if "cpu" not in controllers:
        pytest.skip(f"counted; but the cpu controller is bound to v1 here (v2 offers: {controllers or 'none'}), so no cpu.weight to test")


# --- nothing outlives -----------------------------------------------------------------------------

def test_nothing_of_this_round_outlives_its_grading() -> None:
    mounts_before = Path("/proc/self/mountinfo").read_text()
    for name in ("sys_denied_calls.py", "keyring_read_plant.py", "spy_sys_cgroups.py", "disk_filler.py"):
        run = graded(name)
        assert run.leftovers == [] and run.children == [] and run.private_dirs == [], name
    assert Path("/proc/self/mountinfo").read_text() == mounts_before  # every mount was in the grading's namespace
    assert cgroups.existing(os.getpid()) == []
    assert [p for p in Path("/dev/shm").iterdir() if "pa-" in p.name] == []
    assert surroundings.PLANTED not in surroundings.visible_keys()


def test_seccomp_switch_turns_the_filter_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PA_GRADER_SECCOMP", "0")
    cell = _cell(1, "print('STATUS', [l.split()[1] for l in open('/proc/self/status') if l.startswith('Seccomp:')])\n")
    with Sandbox([cell], CONFIG.limits) as sandbox:
        report = sandbox.load()
        assert report.failed is None
        isolation = sandbox.isolation_report()
    assert "STATUS ['0']" in sandbox.output()[0]
    assert isolation["seccomp"] == 0 and "no seccomp" in isolation["summary"]["en"]

