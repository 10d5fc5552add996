"""What the NVML source knows about one device between ticks.

Everything discovered once (handle, static fields, which API versions work,
which fields the GPU never reports) lives here, so ``read()`` repeats none
of the calls that failed or whose answer cannot change.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: A (compute, graphics) pair of process-list readers: handle -> entries.
ListPair = tuple[Callable[[Any], Any], Callable[[Any], Any]]


class NvmlDevice:
    """Everything known about one NVML device (full GPU or MIG instance)."""

    __slots__ = (
        "index", "mig_index", "handle", "name", "uuid", "memory_total", "power_limit",
        "mem_version", "procs", "procs_fallback", "last_ts", "sm", "sm_at", "sm_first", "sm_asked",
        "skip", "notes", "error", "is_mig", "mig_parent", "temperature_v", "buffers",
    )

    def __init__(self, index: int, mig_index: int | None, handle: Any) -> None:
        self.index = index
        self.mig_index = mig_index
        self.handle = handle
        self.name = f"GPU {index}" if mig_index is None else f"GPU {index} MIG {mig_index}"
        self.uuid: str | None = None
        self.memory_total: int | None = None  # bytes
        self.power_limit: float | None = None  # watts
        self.mem_version = 2  # 2 = v2, 1 = v1, 0 = memory info not supported
        # (compute, graphics) process-list functions in use and the older pair
        # to try once if they turn out to be missing from the driver.
        self.procs: ListPair | None = None
        self.procs_fallback: ListPair | None = None
        self.last_ts = 0  # µs; newest process-utilisation sample seen
        self.sm: dict[int, float] = {}  # pid -> last SM % seen (kept across NOT_FOUND)
        self.sm_at: dict[int, float] = {}  # pid -> monotonic time that value arrived
        self.sm_first: dict[int, float] = {}  # pid -> monotonic time first listed
        self.sm_asked = float("-inf")  # monotonic time the driver was last asked for SM %
        self.skip: set[str] = set()  # fields never to ask for again
        self.notes: dict[str, str] = {}  # notes that hold on every tick
        self.error: str | None = None  # permanent failure found in open()
        self.is_mig = mig_index is not None
        self.mig_parent = False  # MIG enabled: processes shown on the MIG devices
        self.temperature_v = True  # nvmlDeviceGetTemperatureV until the driver lacks it
        self.buffers: dict[str, Any] = {}  # reused arrays of the list queries (nvml_lists)


def text(value: Any) -> str:
    """An NVML string (bytes in older bindings) as text."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
