# hostile: no solution of its own: runs one left by an earlier grading, looking in SysV segment 0x50414745, every segment listed in /proc/sysvipc/shm, the POSIX queue /pa-leak and /dev/shm, /tmp and /var/tmp files; expect every item to fail (missing) and NOTHING FOUND printed
import ctypes
import os

libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
libc.shmdt.argtypes = [ctypes.c_void_p]
SHM_RDONLY = 0o10000
found = []


def run(source, where):
    if "def paged_attention" in source:
        exec(compile(source, where, "exec"), globals())
        found.append(where)


def read_segment(segment):
    address = libc.shmat(segment, None, SHM_RDONLY)
    if address in (None, ctypes.c_void_p(-1).value):
        return
    try:
        size = int.from_bytes(ctypes.string_at(address, 8), "little")
        if 0 < size < 1 << 20:
            run(ctypes.string_at(address + 8, size).decode(errors="replace"), f"segment {segment}")
    finally:
        libc.shmdt(address)


segments = {libc.shmget(0x50414745, 0, 0)}
try:
    with open("/proc/sysvipc/shm") as f:
        segments |= {int(line.split()[1]) for line in f.read().splitlines()[1:]}
except OSError as error:
    print("segment table:", type(error).__name__)
for segment in sorted(s for s in segments if s >= 0):
    read_segment(segment)
queue = libc.mq_open(b"/pa-leak", os.O_RDONLY | os.O_NONBLOCK)
if queue >= 0:
    found.append("mqueue")
for path in ("/dev/shm/pa-leak-source.py", "/tmp/pa-leak-source.py", "/var/tmp/pa-leak-source.py"):
    try:
        with open(path) as f:
            run(f.read(), path)
    except OSError:
        pass
print("FOUND:", ", ".join(found) if found else "NOTHING FOUND")
