"""A real disk that fills up: a small tmpfs mounted for one test (root only),
filled to the last byte by a filler file and freed by removing it."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

FILLER = "filler"


def why_no_tmpfs() -> str | None:
    """Why a tmpfs cannot be mounted here (None: it can be tried)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    if not Path("/proc/filesystems").is_file() or \
            "tmpfs" not in Path("/proc/filesystems").read_text():
        return "this kernel has no tmpfs"
    return None


@contextlib.contextmanager
def small_disk(mount_point: Path, size: str = "8m") -> Iterator[Path]:
    """``mount_point`` as a tmpfs of ``size``; raises OSError when it cannot be mounted."""
    mount_point.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs",
                           str(mount_point)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise OSError(f"mount failed: {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        if subprocess.run(["umount", str(mount_point)], capture_output=True,
                          check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(directory: Path) -> None:
    """Write until the file system refuses a single byte more."""
    fd = os.open(directory / FILLER, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for chunk in (1 << 16, 512, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * chunk)
        try:
            os.write(fd, b"\0")
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
        else:
            raise AssertionError(f"{directory} is not full")
    finally:
        os.close(fd)


def free(directory: Path) -> None:
    (directory / FILLER).unlink(missing_ok=True)
