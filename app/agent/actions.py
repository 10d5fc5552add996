"""``free_cache`` and ``gc``: user-triggered actions, run off the user's thread.

Neither ever initialises CUDA: without an initialised context ``free_cache``
only runs gc.collect() and reports reserved null / freed 0 with a note.
Errors are returned (the server turns them into ``failed`` replies).
"""

from __future__ import annotations

import gc
import time
from typing import Any

from .introspect import cuda_initialized, loaded_torch


def collect_garbage() -> dict[str, Any]:
    t0 = time.perf_counter()
    collected = gc.collect()
    return {"collected": collected, "seconds": time.perf_counter() - t0}


def _reserved(torch: Any, index: int) -> int | None:
    value = (torch.cuda.memory_stats(index) or {}).get("reserved_bytes.all.current")
    return int(value) if isinstance(value, int) else None


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
    before_total = after_total = 0
    for index in range(int(cuda.device_count())):
        before = _reserved(torch, index)
        # The current device is thread-local: select it explicitly here.
        with cuda.device(index):
            cuda.empty_cache()
        after = _reserved(torch, index)
        result["devices"].append({"index": index, "reserved_before": before,
                                  "reserved_after": after,
                                  "freed": max(0, (before or 0) - (after or 0))})
        before_total += before or 0
        after_total += after or 0
    result["reserved_before"] = before_total
    result["reserved_after"] = after_total
    result["freed"] = max(0, before_total - after_total)
    result["seconds"] = time.perf_counter() - t0
    return result
