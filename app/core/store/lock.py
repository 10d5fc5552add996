"""The single-writer lock: an OS lock on ``<database>.lock`` held for the
writer's lifetime, so a second instance never writes concurrently.

POSIX: ``fcntl.flock`` (released by the OS when the process dies, even by
SIGKILL).  Windows: ``msvcrt.locking`` on the file's first byte.  Elsewhere
no lock exists and the writer runs unguarded (SQLite's own locking still
keeps the file consistent).
"""

from __future__ import annotations

import os
from typing import IO

from app.agent.paths import open_private_file


class WriterLock:
    def __init__(self, path: str) -> None:
        self.path = path
        self._file: IO[bytes] | None = None

    def acquire(self) -> bool:
        """True when this process is now the writer; raises OSError when the
        lock file cannot be created at all (or is not a private file of ours:
        it is never opened through a link)."""
        handle = os.fdopen(open_private_file(self.path, os.O_RDWR), "r+b")
        try:
            if not _try_lock(handle):
                handle.close()
                return False
        except BaseException:
            handle.close()
            raise
        self._file = handle
        return True

    def release(self) -> None:
        handle, self._file = self._file, None
        if handle is not None:
            handle.close()  # closing the descriptor releases the lock


def _try_lock(handle: IO[bytes]) -> bool:
    try:
        import fcntl
    except ImportError:
        fcntl = None  # type: ignore[assignment]
    if fcntl is not None:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True
    try:
        import msvcrt  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return True  # no OS lock on this platform
    try:
        handle.seek(0)
        msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined,unused-ignore]
    except OSError:
        return False
    return True


def lock_path(db_path: str) -> str:
    return os.fspath(db_path) + ".lock"
