"""Is there room on the disk for an unload?  Asked before the first byte.

An unload to disk that fills the filesystem would make the user's own next
write fail (a checkpoint, a log), so it also leaves ``headroom`` free: 5 %
of the filesystem, at most 1 GiB.  A refusal carries the figures.
"""

from __future__ import annotations

import os
import shutil

from .. import protocol
from ..errors import ActionError

HEADROOM_SHARE = 0.05
HEADROOM_MAX_BYTES = 1 << 30

_MiB = 1 << 20
_GiB = 1 << 30


def size_text(nbytes: int) -> str:
    """``32 MiB``, ``1.5 GiB``: the app's byte style, for a refusal's figures."""
    if nbytes >= _GiB:
        return "%.1f GiB" % (nbytes / _GiB)
    if nbytes >= _MiB:
        return "%d MiB" % round(nbytes / _MiB)
    return "%d KiB" % -(-nbytes // 1024)


def needed_bytes(spans: list, block: int) -> int:
    """What the files take on disk: each rounded up to whole blocks."""
    block = max(1, block)
    return sum(-(-span // block) * block for span in spans if span > 0)


def file_size_limit() -> int | None:
    """The process's file-size limit (``ulimit -f``) in bytes, None for none:
    a write past it is SIGXFSZ, which kills a host that does not ignore it."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    except (OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY else int(soft)


def _space(directory: str) -> tuple[int, int, int] | None:
    """(free bytes we may use, filesystem bytes, block size), None if unknown."""
    try:
        if hasattr(os, "statvfs"):
            st = os.statvfs(directory)
            block = st.f_frsize or st.f_bsize
            return st.f_bavail * block, st.f_blocks * block, block
        usage = shutil.disk_usage(directory)  # Windows
        return usage.free, usage.total, 4096
    except OSError:
        return None


def check(directory: str, spans: list) -> None:
    """Raise ActionError(refused) with the figures unless ``spans`` fit in
    ``directory``'s filesystem with the headroom to spare, and each file
    within the process's file-size limit."""
    limit = file_size_limit()
    biggest = max(spans, default=0)
    if limit is not None and biggest > limit:
        raise ActionError(protocol.REFUSED, "a file of %s is over this process's file-size "
                          "limit of %s (ulimit -f)" % (size_text(biggest), size_text(limit)))
    space = _space(directory)
    if space is None:
        return  # the writes themselves tell
    free, total, block = space
    keep = min(HEADROOM_MAX_BYTES, int(total * HEADROOM_SHARE))
    needed = needed_bytes(spans, block)
    if needed <= free - keep:
        return
    message = "not enough room on the disk: needs %s, %s free in %s" % (
        size_text(needed), size_text(free), directory)
    if needed <= free:
        message += " (%s of it stays free for other writes)" % size_text(keep)
    raise ActionError(protocol.REFUSED, message)
