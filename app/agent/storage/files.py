"""The disk target's files: one 0600 file per storage in
``$XDG_CACHE_HOME/vram-steward/offload`` (dir 0700), unlinked on reload or
when the model goes."""

from __future__ import annotations

import os
import sys
import weakref
from typing import Any

from .. import paths
from .planning import Offload


def offload_dir() -> str:
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or os.path.expanduser("~\\AppData\\Local")
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    os.makedirs(base, exist_ok=True)
    top = paths.ensure_private_dir(os.path.join(base, "vram-steward"))
    return paths.ensure_private_dir(os.path.join(top, "offload"))


def unlink_all(file_paths: list) -> None:
    for path in file_paths:
        try:
            os.unlink(path)
        except OSError:
            pass


def new_file(model_id: str, nbytes: int) -> str:
    """A fresh 0600 file of ``nbytes`` (at least 1) for one storage."""
    directory = offload_dir()
    flags = os.O_CREAT | os.O_EXCL | os.O_RDWR | getattr(os, "O_CLOEXEC", 0) | getattr(
        os, "O_BINARY", 0)
    for n in range(100):
        name = "%d-%s%s.bin" % (os.getpid(), model_id, "" if n == 0 else "-%d" % n)
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, flags, 0o600)
        except FileExistsError:
            continue
        try:
            os.ftruncate(fd, max(nbytes, 1))
        finally:
            os.close(fd)
        return path
    raise OSError("no free offload file name in %s" % directory)


def attach_files(rec: Offload, model_id: str, owner: Any) -> None:
    """Create the disk target's files; they go when ``owner`` (the guard) goes."""
    for k, gr in enumerate(rec.moving):
        rec.paths.append(new_file("%s-%d" % (model_id, k), gr.span))
    rec.finalizer = weakref.finalize(owner, unlink_all, list(rec.paths))


def map_files(torch: Any, rec: Offload) -> None:
    """Disk: the offloaded tensors view a private mapping of each file."""
    for k, gr in enumerate(rec.moving):
        gr.mapped = (torch.UntypedStorage.from_file(rec.paths[k], shared=False, nbytes=gr.span)
                     if gr.span else None)
