"""A uid of its own for each grading, when the judge runs as root.

Two gradings on one machine then cannot read, write or signal each other's files and
processes, whatever mode bits a submission chooses, and whatever one leaves behind is found
by its owner.  Uids come from a range no account or /etc/subuid block uses, each claimed
with a lock file held for the grading (released by the kernel if the judge dies).
"""

from __future__ import annotations

import fcntl
import os
import secrets
import stat
import tempfile

UID_BASE = 1_200_000_000
SLOTS = 1 << 20
LOCK_DIRS = ("/run/pa-grader", os.path.join(tempfile.gettempdir(), "pa-grader-uids"))


class UidLease:
    """One claimed uid (also used as the gid); `release()` (or the judge's death) gives it back."""

    def __init__(self, uid: int, fd: int, path: str):
        self.uid = uid
        self.gid = uid
        self._fd: int | None = fd
        self._path = path

    @property
    def fd(self) -> int | None:
        """The locked descriptor: the worker's keeper holds it too, so that the uid stays taken
        until the keeper has cleaned up, even after the judge died."""
        return self._fd

    @property
    def path(self) -> str:
        return self._path

    def release(self) -> None:
        if self._fd is not None:
            try:
                os.unlink(self._path)  # while still locked: whoever opens the name next gets a new file
            except OSError:
                pass
            os.close(self._fd)
            self._fd = None


def _lock_dir() -> str | None:
    for directory in LOCK_DIRS:
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            info = os.lstat(directory)
        except OSError:
            continue
        # Root's own directory, nobody else's: a lock elsewhere could be held by anyone.
        if stat.S_ISDIR(info.st_mode) and info.st_uid == 0 and not info.st_mode & 0o022:
            return directory
    return None


def claim() -> UidLease | None:
    """A uid no other grading on this machine holds, or None (not root, or no lock directory)."""
    if os.geteuid() != 0:
        return None
    directory = _lock_dir()
    if directory is None:
        return None
    start = secrets.randbelow(SLOTS)
    for step in range(64):
        uid = UID_BASE + (start + step) % SLOTS
        path = os.path.join(directory, f"{uid}.lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.fstat(fd).st_ino != os.stat(path).st_ino:
                raise OSError("released and removed meanwhile")
        except OSError:
            os.close(fd)
            continue
        return UidLease(uid, fd, path)
    return None
