"""The processes on one NVML device: memory per pid and SM utilisation.

Compute and graphics lists are merged by pid; per-process SM % comes from the
driver's utilisation samples, kept per device between ticks because the
driver only records samples while a process runs kernels.  The list API
version (``_v3``, with ``_v2`` as the one-time fallback) is settled per device
on first use and remembered.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from app.core.monitor import nvml_lists
from app.core.monitor.nvml_device import ListPair, NvmlDevice
from app.core.monitor.nvml_errors import (
    FUNCTION_NOT_FOUND,
    NA_MIG_PROCESS_MEMORY,
    NA_NOT_SUPPORTED,
    NA_WDDM,
    NOT_FOUND,
    SUCCESS,
    UNSUPPORTED,
    is_fatal,
    is_fatal_code,
    na_note,
)
from app.core.monitor.samples import ProcessSample

#: Seconds without a new utilisation sample after which a process counts as idle (0 %).
SM_IDLE_AFTER_S = 2.0

_VALUE_NOT_AVAILABLE = 2**64 - 1  # NVML_VALUE_NOT_AVAILABLE_ulonglong (WDDM)
_KINDS = {1: "compute", 2: "graphics", 3: "compute+graphics"}


def _mem(value: int | None) -> int | None:
    # pynvml already maps WDDM's 2**64-1 to None; be safe with other bindings.
    return None if value is None or value >= _VALUE_NOT_AVAILABLE else int(value)


def cc_v3_driver(version: str | None) -> bool:
    """Drivers 535.43 to 535.86, whose ``_v3`` process entries are 32 bytes."""
    try:
        major, minor = (int(x) for x in (version or "").split(".")[:2])
    except ValueError:
        return False
    return major == 535 and 43 <= minor <= 86


class ProcessReader:
    """Reads the process list and SM % of a device through one NVML module.

    ``errors`` are the exception types a list query may raise (the bindings'
    NVMLError and, for the unversioned wrappers, NVMLLibraryMismatchError);
    ``direct`` routes the list queries through reused buffers (nvml_lists).
    """

    def __init__(self, nvml: Any, errors: tuple[type[BaseException], ...], direct: bool,
                 driver: str | None, sm_refresh_s: float = 0.0) -> None:
        """``sm_refresh_s``: the driver is asked for SM % at most this often
        (0: every tick); in between, the figures last seen stand."""
        self._sm_refresh_s = sm_refresh_s
        self._nvml = nvml
        self._errors = errors
        self._direct = direct
        self._driver = driver

    def read(self, dev: NvmlDevice, notes: dict[str, str]) -> tuple[ProcessSample, ...]:
        """Compute and graphics lists merged by pid, with SM % attached."""
        procs = dev.procs
        if procs is None:
            procs = self._choose_functions(dev)
        handle = dev.handle
        while True:
            compute_fn, graphics_fn = procs
            try:
                compute = compute_fn(handle)
                graphics = graphics_fn(handle)
                break
            except self._errors as err:
                code = getattr(err, "value", FUNCTION_NOT_FOUND)  # mismatch error: no code
                if code == FUNCTION_NOT_FOUND and dev.procs_fallback is not None:
                    procs, dev.procs_fallback = dev.procs_fallback, None  # remembered
                    dev.procs = procs
                    continue
                if code in UNSUPPORTED:
                    dev.skip.add("processes")
                    dev.notes["processes"] = notes["processes"] = NA_NOT_SUPPORTED
                    dev.sm.clear()
                    return ()
                if is_fatal_code(code):
                    raise
                notes["processes"] = na_note(err)  # this tick only (no permission included)
                return ()

        # pid -> [memory, kind bits].  A pid in both lists is one allocation
        # reported twice (a CUDA context that also renders), so the memory is
        # the max of the two numbers, never their sum.
        merged: dict[int, list[Any]] = {}
        for bit, plist in ((1, compute), (2, graphics)):
            for proc in plist:
                if type(proc) is tuple:  # (pid, bytes) from nvml_lists
                    pid, memory = proc
                else:
                    pid = proc.pid
                    memory = _mem(proc.usedGpuMemory)
                entry = merged.get(pid)
                if entry is None:
                    merged[pid] = [memory, bit]
                else:
                    old = entry[0]
                    if memory is not None and (old is None or memory > old):
                        entry[0] = memory
                    entry[1] |= bit

        if not merged:
            dev.sm.clear()
            return ()

        sm = self._sm_util(dev, merged, notes)
        if all(entry[0] is None for entry in merged.values()):
            notes["process_memory"] = NA_MIG_PROCESS_MEMORY if dev.is_mig else NA_WDDM
        return tuple([
            ProcessSample(pid, entry[0], sm.get(pid), _KINDS[entry[1]])
            for pid, entry in merged.items()
        ])

    def _choose_functions(self, dev: NvmlDevice) -> ListPair:
        """Pick v3 process lists with v2 as the one-time fallback."""
        nvml = self._nvml
        procs: ListPair
        if self._direct:
            procs = self._direct_pair(dev, "v3")
            dev.procs_fallback = self._direct_pair(dev, "v2")
        else:
            procs = (
                getattr(nvml, "nvmlDeviceGetComputeRunningProcesses_v3", None)
                or nvml.nvmlDeviceGetComputeRunningProcesses,
                getattr(nvml, "nvmlDeviceGetGraphicsRunningProcesses_v3", None)
                or nvml.nvmlDeviceGetGraphicsRunningProcesses,
            )
            c2 = getattr(nvml, "nvmlDeviceGetComputeRunningProcesses_v2", None)
            g2 = getattr(nvml, "nvmlDeviceGetGraphicsRunningProcesses_v2", None)
            dev.procs_fallback = (c2, g2) if c2 and g2 else None
        if cc_v3_driver(self._driver) and dev.procs_fallback is not None:
            # 535.43-535.86 wrote 32-byte _v3 entries against a 24-byte
            # struct (figures garbled): their _v2 lists are right.
            procs, dev.procs_fallback = dev.procs_fallback, None
        dev.procs = procs
        return procs

    def _direct_pair(self, dev: NvmlDevice, version: str) -> ListPair:
        """Compute and graphics list readers of one struct version, each one
        driver call into a buffer kept on the device (see nvml_lists)."""
        nvml, buffers = self._nvml, dev.buffers

        def reader(name: str) -> Callable[[Any], Any]:
            return lambda handle: nvml_lists.process_list(nvml, name, handle, buffers)

        return (reader(f"nvmlDeviceGetComputeRunningProcesses_{version}"),
                reader(f"nvmlDeviceGetGraphicsRunningProcesses_{version}"))

    def _sm_util(self, dev: NvmlDevice, pids: dict[int, Any],
                 notes: dict[str, str]) -> dict[int, float | None]:
        """Per-process SM % since the last seen timestamp, kept per device.

        NOT_FOUND means no sample newer than the timestamp: earlier values of
        pids still running are kept.  Values of pids that left are dropped.
        """
        if "sm_util" in dev.skip:
            return {}
        now = time.monotonic()
        if now - dev.sm_asked < self._sm_refresh_s:
            return _current_sm(dev, pids)
        dev.sm_asked = now
        nvml = self._nvml
        samples: Any = ()
        try:
            if self._direct:
                samples = nvml_lists.process_utilization(nvml, dev.handle, dev.last_ts,
                                                         dev.buffers)
            else:
                samples = nvml.nvmlDeviceGetProcessUtilization(dev.handle, dev.last_ts)
        except nvml.NVMLError as err:
            code = err.value
            if code in (NOT_FOUND, SUCCESS):
                pass  # no new samples (pynvml raises NVMLError(0) for an empty buffer)
            elif code in UNSUPPORTED:
                dev.skip.add("sm_util")
                dev.notes["sm_util"] = notes["sm_util"] = NA_NOT_SUPPORTED
                dev.sm.clear()
                return {}
            elif is_fatal(err):
                raise
            else:
                # A per-process extra: degrade it rather than the whole device.
                notes["sm_util"] = na_note(err)
        if samples:
            _take_samples(dev, samples, pids)
        if "sm_util" in notes:
            return {}  # this tick's query failed: unknown, not the old figures
        return _current_sm(dev, pids)


def _take_samples(dev: NvmlDevice, samples: Any, pids: dict[int, Any]) -> None:
    """Keep the newest new sample of each listed pid; advance the device's timestamp."""
    seen_ts = last_ts = dev.last_ts
    newest: dict[int, tuple[int, int]] = {}
    for sample in samples:
        ts = sample.timeStamp
        if ts <= seen_ts:
            continue  # drivers also return samples already seen: not new activity
        if ts > last_ts:
            last_ts = ts
        pid = sample.pid
        value = sample.smUtil
        if value > 100 or pid not in pids:
            continue  # garbage value, or a pid no longer on the GPU
        seen = newest.get(pid)
        if seen is None or ts >= seen[0]:
            newest[pid] = (ts, value)
    dev.last_ts = last_ts
    now = time.monotonic()
    for pid, (_, value) in newest.items():
        dev.sm[pid] = float(value)
        dev.sm_at[pid] = now


def _current_sm(dev: NvmlDevice, pids: dict[int, Any]) -> dict[int, float | None]:
    """SM % of each listed pid now: its recent figure, 0 when idle, None when unknown.

    The driver records samples only while a process runs kernels.  A
    successful query with nothing new for SM_IDLE_AFTER_S means the driver saw
    no activity from it: 0 %, not "unknown".  Until a pid has been watched
    that long, no sample means unknown.
    """
    now = time.monotonic()
    stale_before = now - SM_IDLE_AFTER_S
    first = dev.sm_first
    sm: dict[int, float | None] = {}
    for pid in pids:
        watched_since = first.setdefault(pid, now)
        if dev.sm_at.get(pid, -1.0) >= stale_before:
            sm[pid] = dev.sm[pid]
        elif watched_since <= stale_before:
            sm[pid] = 0.0
        else:
            sm[pid] = None
    if len(first) > len(pids):
        dev.sm_first = {pid: t for pid, t in first.items() if pid in pids}
        dev.sm = {pid: v for pid, v in dev.sm.items() if pid in pids}
        dev.sm_at = {pid: t for pid, t in dev.sm_at.items() if pid in pids}
    return sm
