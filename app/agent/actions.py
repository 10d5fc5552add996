"""``free_cache`` and ``gc``: user-triggered actions, run off the user's thread.

Neither ever initialises CUDA: without an initialised context ``free_cache``
only runs gc.collect() and reports reserved null / freed 0 with a note.
A device without a CUDA context is never selected (that would create one).
Reserved/freed figures are null where the allocator does not report them
(never a made-up 0).  Errors are raised: the server turns them into
``failed`` replies.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from .introspect import _int_or_none, cuda_initialized, loaded_torch


def collect_garbage() -> dict[str, Any]:
    t0 = time.perf_counter()
    collected = gc.collect()
    return {"collected": collected, "seconds": time.perf_counter() - t0}


def _reserved(torch: Any, index: int) -> int | None:
    value = (torch.cuda.memory_stats(index) or {}).get("reserved_bytes.all.current")
    return _int_or_none(value)


def _has_context(torch: Any, index: int) -> bool:
    """False only when torch can tell that ``index`` has no CUDA primary context.

    Selecting such a device (``torch.cuda.device(index)`` -> cudaSetDevice)
    would create a context there (CUDA 12: hundreds of MiB of VRAM on a GPU the
    process never used), and the allocator holds nothing there to free.
    """
    fn = getattr(getattr(torch, "_C", None), "_cuda_hasPrimaryContext", None)
    if not callable(fn):
        return True
    try:
        return bool(fn(index))
    except Exception:
        return True


def _sum(values: list[int | None]) -> int | None:
    """The sum, or None when any part is unknown (never a partial sum)."""
    return None if any(v is None for v in values) else sum(values)  # type: ignore[arg-type]


def free_cache() -> dict[str, Any]:
    torch = loaded_torch()
    t0 = time.perf_counter()
    collected = gc.collect()
    result: dict[str, Any] = {"reserved_before": None, "reserved_after": None, "freed": 0,
                              "devices": [], "gc_collected": collected}
    if torch is None or not cuda_initialized(torch):
        result["note"] = ("torch not loaded" if torch is None else
                          "CUDA not initialised in this process: gc only, nothing to free")
        result["seconds"] = time.perf_counter() - t0
        return result
    cuda = torch.cuda
    for index in range(int(cuda.device_count())):
        before = _reserved(torch, index)
        entry: dict[str, Any] = {"index": index, "reserved_before": before}
        if _has_context(torch, index):
            # The current device is thread-local: select it explicitly here.
            try:
                with cuda.device(index):
                    cuda.empty_cache()
            except Exception as exc:
                raise RuntimeError("empty_cache on cuda:%d failed: %r" % (index, exc)) from exc
            after = _reserved(torch, index)
        else:
            after = before
            entry["note"] = "no CUDA context on this device: not selected, nothing to free"
        entry["reserved_after"] = after
        entry["freed"] = None if before is None or after is None else max(0, before - after)
        result["devices"].append(entry)
    devices = result["devices"]
    result["reserved_before"] = _sum([d["reserved_before"] for d in devices])
    result["reserved_after"] = _sum([d["reserved_after"] for d in devices])
    before, after = result["reserved_before"], result["reserved_after"]
    result["freed"] = None if before is None or after is None else max(0, before - after)
    result["seconds"] = time.perf_counter() - t0
    return result
