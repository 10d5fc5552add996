"""The GUI process gives big freed blocks back to the system.

Every plot refresh makes a few short-lived numpy arrays of some hundred KiB (an
hour of one GPU's series, decimated).  glibc serves a block that big from its
own mapping and returns it when freed, but each such free raises its mapping
threshold to that size: later arrays then come from the heap, which fragments
and never shrinks, and the window's resident memory creeps up by several MiB
over the first refreshes.  Fixing the threshold at glibc's own default keeps
big blocks in mappings of their own.  Elsewhere (another C library, macOS,
Windows) this does nothing.
"""

from __future__ import annotations

import ctypes
import sys

#: glibc's mallopt() parameter for the size from which a block gets its own mapping.
_M_MMAP_THRESHOLD = -3
#: glibc's default threshold; setting it explicitly turns its growth off.
MMAP_THRESHOLD_BYTES = 128 * 1024


def return_big_blocks() -> bool:
    """Keep freed blocks of :data:`MMAP_THRESHOLD_BYTES` and more out of the heap;
    True where the C library took the setting."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library this process runs on
    except (OSError, AttributeError):  # one without mallopt()
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))


__all__ = ["MMAP_THRESHOLD_BYTES", "return_big_blocks"]
