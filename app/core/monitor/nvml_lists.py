"""NVML's variable-length queries in one driver call per tick.

pynvml's process-list and process-utilisation wrappers call the driver twice
each time (once for the count, once to fill a fresh array) and turn every
entry into a dynamic Python object.  At 8 GPUs that is 24 extra driver calls
per tick, and the conversion costs more than the call.  A :class:`Buffer`
keeps the array between ticks, sized with headroom, so the driver is called
once while the number of processes stays within it; when it is too small the
driver says so (``INSUFFICIENT_SIZE`` with the count) and the buffer grows.

The arrays are the bindings' own ctypes structs (``c_nvmlProcessInfo_v3_t``
and friends, laid out as in NVIDIA's nvml.h), called through the bindings'
own function lookup, so a driver lacking a symbol raises the same
``FunctionNotFound`` as the public wrappers.  :func:`direct_calls` says
whether the bindings offer what this needs; if not, the caller uses the
public wrappers.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

_SUCCESS = 0
_INSUFFICIENT_SIZE = 7
_NOT_FOUND = 6
_VALUE_NOT_AVAILABLE = 2**64 - 1  # NVML_VALUE_NOT_AVAILABLE_ulonglong (WDDM)

#: The bindings' struct type for each process-list symbol.
_PROCESS_STRUCTS = {
    "nvmlDeviceGetComputeRunningProcesses_v3": "c_nvmlProcessInfo_v3_t",
    "nvmlDeviceGetGraphicsRunningProcesses_v3": "c_nvmlProcessInfo_v3_t",
    "nvmlDeviceGetComputeRunningProcesses_v2": "c_nvmlProcessInfo_v2_t",
    "nvmlDeviceGetGraphicsRunningProcesses_v2": "c_nvmlProcessInfo_v2_t",
}

#: Headroom when a buffer grows: processes come and go between ticks.
_SLACK = 8
#: The most entries a buffer grows to: more than any driver lists (a larger
#: count is a driver fault, reported as INSUFFICIENT_SIZE, never allocated).
MAX_ENTRIES = 4096
#: Room for entries larger than the bindings' struct: drivers 535.43-535.86
#: wrote 32-byte ``_v3`` process entries (a ``usedGpuCcProtectedMemory`` field
#: that was later withdrawn) where nvml.h and the bindings say 24.  The driver
#: is told ``capacity`` entries; the array holds a third more, so such a driver
#: garbles the figures (the source avoids ``_v3`` there) but never writes past it.
_ROOM = 4 / 3


def direct_calls(nvml: Any) -> bool:
    """Whether ``nvml`` (a pynvml-like module) exposes its function lookup
    and the structs this module fills."""
    return (callable(getattr(nvml, "_nvmlGetFunctionPointer", None))
            and all(hasattr(nvml, s) for s in _PROCESS_STRUCTS.values())
            and hasattr(nvml, "c_nvmlProcessUtilizationSample_t"))


class Buffer:
    """One reusable array for one query on one device."""

    __slots__ = ("struct", "array", "capacity", "count")

    def __init__(self, struct: type[ctypes.Structure], capacity: int = 16) -> None:
        self.struct = struct
        self.capacity = 0
        self.array: Any = None
        self.count = ctypes.c_uint(0)  # in: capacity, out: entries filled or needed
        self.grow(capacity)

    def grow(self, needed: int) -> None:
        self.capacity = min(MAX_ENTRIES, needed + max(_SLACK, needed // 4))
        self.array = (self.struct * (int(self.capacity * _ROOM) + 1))()

    def grow_to(self, nvml: Any, reported: int) -> None:
        """Grow for ``reported`` entries, or raise INSUFFICIENT_SIZE when the
        driver's count is no larger than what it was offered, or absurd."""
        if reported <= self.capacity or reported > MAX_ENTRIES:
            raise nvml.NVMLError(_INSUFFICIENT_SIZE)
        self.grow(reported)


def fill(nvml: Any, buf: Buffer, call: Callable[[Any, Any], int], empty: int | None = None) -> int:
    """Entries filled by ``call(array, byref(count))``, growing ``buf`` when the
    driver reports more than it holds (at most twice, even while processes
    start); 0 when the driver answers ``empty``.  Other answers raise NVMLError."""
    count = buf.count
    for _ in range(3):
        count.value = buf.capacity
        ret = call(buf.array, ctypes.byref(count))
        if ret == _SUCCESS:
            return count.value
        if ret == empty:
            return 0
        if ret != _INSUFFICIENT_SIZE:
            raise nvml.NVMLError(ret)
        buf.grow_to(nvml, count.value)
    raise nvml.NVMLError(_INSUFFICIENT_SIZE)


def process_list(nvml: Any, name: str, handle: Any, buffers: dict[str, Buffer]
                 ) -> list[tuple[int, int | None]]:
    """(pid, used bytes or None) of one process-list query, one driver call
    unless the buffer had to grow."""
    fn = nvml._nvmlGetFunctionPointer(name)  # FunctionNotFound propagates
    buf = buffers.get(name)
    if buf is None:
        buf = buffers[name] = Buffer(getattr(nvml, _PROCESS_STRUCTS[name]))
    n = fill(nvml, buf, lambda array, count: fn(handle, count, array))
    # The struct's own field descriptors: the bindings' __getattribute__ (which
    # formats fields for printing) costs more than the driver call at 500 entries.
    pid_of, used_of = buf.struct.pid.__get__, buf.struct.usedGpuMemory.__get__
    out = []
    for entry in buf.array[:n]:
        used = used_of(entry)
        out.append((pid_of(entry), None if used >= _VALUE_NOT_AVAILABLE else used))
    return out


def process_utilization(nvml: Any, handle: Any, last_seen_us: int, buffers: dict[str, Buffer]
                        ) -> list[Any]:
    """Per-process utilisation samples newer than ``last_seen_us`` (structs
    with pid, timeStamp, smUtil), [] when the driver has none."""
    fn = nvml._nvmlGetFunctionPointer("nvmlDeviceGetProcessUtilization")
    buf = buffers.get("utilization")
    if buf is None:
        buf = buffers["utilization"] = Buffer(nvml.c_nvmlProcessUtilizationSample_t)
    stamp = ctypes.c_ulonglong(last_seen_us)
    n = fill(nvml, buf, lambda array, count: fn(handle, array, count, stamp), empty=_NOT_FOUND)
    return buf.array[:n]
