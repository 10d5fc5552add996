"""Device and host-memory primitives of a move: the seams the tests fake
(``is_cuda``, ``copy_bytes``, ``host_empty_cache``), synchronisation, and the
figures a move is measured by (reserved CUDA bytes, the process RSS)."""

from __future__ import annotations

import os
import sys
from typing import Any

from .. import log as _log


def is_cuda(device: Any) -> bool:
    """True for a CUDA device (the CUDA path's tests fake it for CPU tensors)."""
    return getattr(device, "type", None) == "cuda"


def copy_bytes(dst: Any, src: Any, non_blocking: bool) -> None:
    """One storage copy (uint8 views); a failure here is undone by the caller."""
    dst.copy_(src, non_blocking=non_blocking)


def host_buffer(torch: Any, nbytes: int, pin: bool) -> Any:
    if pin:
        try:
            return torch.empty(nbytes, dtype=torch.uint8, device="cpu", pin_memory=True)
        except Exception as exc:  # pinning can fail (limits, no driver): plain memory
            _log.log("pinned host buffer of %d bytes failed (%r): pageable" % (nbytes, exc))
    return torch.empty(nbytes, dtype=torch.uint8, device="cpu")


class HostBuffers:
    """Host buffers made before a move, taken by size: a page-locked buffer
    takes as long to make as the copy into it, so a GPU model's buffers are
    made while its calls still run, and the move itself is only the copy."""

    def __init__(self, torch: Any = None) -> None:
        self.torch = torch
        self.free: dict = {}  # (nbytes, pinned) -> [uint8 tensor]
        self.made = 0  # buffers made (taken or not)

    def prepare(self, spans: list, pin: bool) -> None:
        """A buffer per span; one that cannot be made is left for the move to make."""
        for nbytes in spans:
            if nbytes > 0:
                buf = host_buffer(self.torch, nbytes, pin)
                self.made += 1
                self.free.setdefault((nbytes, pin), []).append(buf)

    def take(self, nbytes: int, pin: bool) -> Any:
        """A prepared buffer of exactly ``nbytes``, or None."""
        kept = self.free.get((nbytes, pin))
        return kept.pop() if kept else None

    def left(self) -> bool:
        """Were some prepared buffers not taken (the model changed meanwhile)?"""
        return any(self.free.values())

    def clear(self) -> None:
        self.free.clear()


def storage_ptr(tensor: Any) -> int:
    try:
        return int(tensor.untyped_storage().data_ptr())
    except Exception:
        return -1


def device_index(device: Any) -> int:
    return 0 if device.index is None else int(device.index)


def synchronize(torch: Any, indices: Any) -> None:
    for i in sorted(set(indices)):
        torch.cuda.synchronize(i)


def reserved(torch: Any, index: int) -> int | None:
    try:
        value = (torch.cuda.memory_stats(index) or {}).get("reserved_bytes.all.current")
    except Exception:
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def rss() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except Exception:
        return None


def malloc_trim() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except Exception:
        pass


def host_empty_cache(torch: Any) -> None:
    for path in (("accelerator", "empty_host_cache"), ("_C", "_accelerator_emptyHostCache"),
                 ("_C", "_host_emptyCache")):
        fn: Any = torch
        try:
            for part in path:
                fn = getattr(fn, part)
        except AttributeError:
            continue
        try:
            fn()
        except Exception as exc:
            _log.log("emptying the pinned host cache failed: %r" % (exc,))
        return
