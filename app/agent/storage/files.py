"""The disk target's files: one per storage in ``$XDG_CACHE_HOME/vram-steward/offload``
(dir 0700, files 0600).

A full disk is an answer, never a signal.  ``room.check`` compares what an
unload needs with the filesystem's free space before anything is created;
each file's blocks are then reserved (``posix_fallocate``), filled with
plain ``pwrite``s, and synced where the filesystem does not really reserve
blocks (a network filesystem reports a write it could not store only
then).  Nothing is ever stored through a mapping of a file: a store into a
hole of a full filesystem is SIGBUS, a ``write`` is an OSError that rolls
the unload back.  The offloaded tensors then view a private
(copy-on-write) mapping of their fully written file.

The files die with the process.  On Linux a file has no name at all
(``O_TMPFILE``), or loses it right after it is opened where the filesystem
lacks ``O_TMPFILE``, and is mapped through ``/proc/self/fd``: whatever ends
the process (exit, a signal, SIGKILL, the OOM killer), the kernel frees it.
Without ``/proc`` (macOS) a file keeps its name while it is written and is
unlinked as soon as it is mapped (on Windows, where a mapped file cannot be
unlinked: on reload, when the model goes, or at exit).  Such a name says
whose it is (``leftovers.identity``), so an agent starting up removes what
dead processes left (``leftovers.sweep``).
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
import weakref
from typing import Any

from .. import paths
from . import devices as _dev
from . import leftovers
from .planning import Offload

#: Bytes per ``pwrite`` (and per staging copy of GPU bytes): bounded system
#: calls, and a small host buffer for a CUDA model unloaded to disk.
CHUNK_BYTES = 16 << 20
_NO_TMPFILE = (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT)
_NO_FALLOCATE = (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)


def _cache_base() -> str:
    if sys.platform == "win32":
        return os.environ.get("LOCALAPPDATA") or os.path.expanduser("~\\AppData\\Local")
    return os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")


def offload_path() -> str:
    """The offload folder's path (not created)."""
    return os.path.join(_cache_base(), "vram-steward", "offload")


def offload_dir() -> str:
    """The offload folder, created 0700 and checked (``paths.UnsafeDir`` otherwise)."""
    base = _cache_base()
    os.makedirs(base, exist_ok=True)
    top = paths.ensure_private_dir(os.path.join(base, "vram-steward"))
    return paths.ensure_private_dir(os.path.join(top, "offload"))


def sweep_leftovers() -> int:
    """Remove the offload files dead processes left (``leftovers.sweep``)."""
    return leftovers.sweep(offload_path())


def proc_fds() -> bool:
    """Can an open file be mapped through ``/proc/self/fd`` (Linux)?"""
    return sys.platform.startswith("linux") and os.path.isdir("/proc/self/fd")


class DiskFile:
    """One storage's file: its descriptor until mapped, its name while it has one."""

    __slots__ = ("fd", "path")

    def __init__(self, fd: int, path: str | None) -> None:
        self.fd = fd
        self.path = path

    def close(self, strict: bool = False) -> None:
        """``strict``: a failed close is an OSError (a network filesystem reports
        a failed write there); else it is ignored (cleaning up)."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                if strict:
                    raise

    def unlink(self) -> None:
        path, self.path = self.path, None
        if path is not None:
            try:
                os.unlink(path)
            except OSError:
                pass


def create(directory: str, name: str) -> DiskFile:
    """A new 0600 file in ``directory``: nameless where the system allows."""
    flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    nameless = proc_fds()
    if nameless and hasattr(os, "O_TMPFILE"):
        try:
            return DiskFile(os.open(directory, flags | os.O_TMPFILE | os.O_EXCL, 0o600), None)
        except OSError as exc:
            if exc.errno not in _NO_TMPFILE:
                raise
    path = os.path.join(directory, name)
    f = DiskFile(paths.create_private_file(path, os.O_RDWR), path)
    if nameless:
        f.unlink()  # the descriptor keeps it; nothing is left to find after a kill
    return f


def reserve(fd: int, nbytes: int) -> None:
    """Allocate the file's blocks now: no space is an OSError here, not later."""
    fallocate = getattr(os, "posix_fallocate", None)
    if fallocate is None or nbytes <= 0:
        return
    try:
        fallocate(fd, 0, nbytes)
    except OSError as exc:
        if exc.errno not in _NO_FALLOCATE:
            raise  # ENOSPC, EFBIG, EDQUOT: the caller rolls back


def write_at(fd: int, address: int, nbytes: int, offset: int) -> None:
    """Write ``nbytes`` of host memory at ``address`` to ``fd`` at ``offset``."""
    if nbytes <= 0:
        return
    view = memoryview((ctypes.c_char * nbytes).from_address(address)).cast("B")
    done = 0
    while done < nbytes:
        part = view[done:done + CHUNK_BYTES]
        if hasattr(os, "pwrite"):
            n = os.pwrite(fd, part, offset + done)
        else:  # Windows
            os.lseek(fd, offset + done, os.SEEK_SET)
            n = os.write(fd, part)
        if n <= 0:
            raise OSError(errno.EIO, "the offload file took no bytes")
        done += n


class FileSink:
    """A file as the destination of ``devices.copy_bytes`` (the one seam of
    every storage copy): ``copy_`` writes the bytes of a uint8 view to it; GPU
    bytes go through a small host buffer, one chunk at a time."""

    __slots__ = ("torch", "fd")

    def __init__(self, torch: Any, fd: int) -> None:
        self.torch = torch
        self.fd = fd

    def copy_(self, src: Any, non_blocking: bool = False) -> None:
        nbytes = int(src.numel())
        if not _dev.is_cuda(src.device):
            write_at(self.fd, int(src.data_ptr()), nbytes, 0)
            return
        stage = _dev.host_buffer(self.torch, min(nbytes, CHUNK_BYTES), pin=True)
        for start in range(0, nbytes, CHUNK_BYTES):
            n = min(CHUNK_BYTES, nbytes - start)
            stage[:n].copy_(src[start:start + n])
            write_at(self.fd, int(stage.data_ptr()), n, start)


def _release(files: list) -> None:
    for f in files:
        f.close()
        f.unlink()


def attach_files(rec: Offload, model_id: str, owner: Any) -> str:
    """Create and reserve the disk target's files (they go when ``owner``, the
    guard, goes, whatever happens to the unload); returns their folder."""
    directory = offload_dir()
    rec.finalizer = weakref.finalize(owner, _release, rec.files)
    prefix = leftovers.identity()
    for k, gr in enumerate(rec.moving):
        f = create(directory, "%s-%s-%d.bin" % (prefix, model_id, k))
        rec.files.append(f)
        reserve(f.fd, gr.span)
    return directory


#: Filesystems whose ``posix_fallocate`` really reserves the blocks, so a
#: write into them cannot fail for space later: no sync needed there.
RESERVING_FILESYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "tmpfs", "ramfs", "f2fs"})


def filesystem_type(path: str) -> str | None:
    """The type of the filesystem ``path`` is on (``/proc/self/mountinfo``), or None."""
    try:
        real = os.path.realpath(path)
        best, kind = "", None
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                fields = line.split()
                if " - " not in line or len(fields) < 5:
                    continue
                mount = fields[4].replace("\\040", " ")
                inside = real == mount or real.startswith(mount.rstrip("/") + "/")
                if inside and len(mount) >= len(best):
                    best, kind = mount, line.split(" - ", 1)[1].split()[0]
        return kind
    except (OSError, IndexError):
        return None


def sync_files(rec: Offload, directory: str) -> None:
    """Make the filesystem take the written bytes now, unless it reserved
    their blocks: a write a network filesystem (NFS, SMB, FUSE...) fails later,
    out of space or over quota, is reported only on writeback; synced, it is
    an OSError here and the unload rolls back, instead of a reload finding
    what was never stored."""
    if filesystem_type(directory) in RESERVING_FILESYSTEMS:
        return
    sync = getattr(os, "fdatasync", None) or os.fsync
    for f in rec.files:
        if f.fd >= 0:
            sync(f.fd)


def map_files(torch: Any, rec: Offload) -> None:
    """The offloaded tensors view a private mapping of each written file; the
    descriptors close and the names go (Windows: a mapped file keeps its name)."""
    for k, gr in enumerate(rec.moving):
        f = rec.files[k]
        if gr.span:
            where = f.path if f.path is not None else "/proc/self/fd/%d" % f.fd
            gr.mapped = torch.UntypedStorage.from_file(where, shared=False, nbytes=gr.span)
        f.close(strict=True)
        if sys.platform != "win32":
            f.unlink()


def drop_files(rec: Offload) -> None:
    """Close and unlink whatever of the files is left (a failed unload, a reload)."""
    if rec.finalizer is not None:
        rec.finalizer()
