"""GPU source backed by NVML (the ``pynvml`` module of nvidia-ml-py).

``read()`` runs every 250 ms on the sampler thread, so everything that does
not change is done once in ``open()``: one ``nvmlInit``, one device count, one
handle lookup per device (re-acquiring handles every loop is what made other
monitors burn CPU), the static fields, and the choice of API versions.  Every
fallback that is discovered at run time (memory-info v2 -> v1, process list
v3 -> v2, "not supported" fields) is remembered per device so the failing call
is not repeated on every tick.

Failure model (see ``app.core.monitor.source``):

* a field the GPU cannot report -> ``None`` plus a note in ``GpuSample.notes``;
* ``GPU_IS_LOST`` -> that device reports ``DeviceState.LOST`` from then on and
  NVML is never called on it again (calls on a lost GPU can hang);
* any other NVML error on one field -> that field ``None`` with the error in
  its note, for that tick only; the other fields are still read;
* a device whose handle or static fields cannot be read -> ``DeviceState.ERROR``;
* the driver going away -> :class:`SourceUnavailable` (code ``driver_lost``).

Not thread-safe: one sampler thread owns the source.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from app.core.monitor import nvml_lists
from app.core.monitor.samples import DeviceState, GpuSample, ProcessSample
from app.core.monitor.source import GpuSource, SourceUnavailable

# NVML return codes from nvml.h.  They are part of the C ABI and identical in
# every binding version; comparing ``err.value`` is cheaper than a chain of
# isinstance checks and works for any pynvml-compatible module.
_SUCCESS = 0
_UNINITIALIZED = 1
_INVALID_ARGUMENT = 2
_NOT_SUPPORTED = 3
_NO_PERMISSION = 4
_NOT_FOUND = 6
_DRIVER_NOT_LOADED = 9
_LIBRARY_NOT_FOUND = 12
_FUNCTION_NOT_FOUND = 13
_GPU_IS_LOST = 15
_LIB_RM_VERSION_MISMATCH = 18
_ARGUMENT_VERSION_MISMATCH = 25

#: Errors meaning the driver itself is gone, not one device.
_DRIVER_GONE = frozenset({_UNINITIALIZED, _DRIVER_NOT_LOADED, _LIBRARY_NOT_FOUND})
#: Errors after which memory-info v2 is abandoned for v1 on that device.
_MEM_V2_FALLBACK = frozenset({_FUNCTION_NOT_FOUND, _NOT_SUPPORTED, _ARGUMENT_VERSION_MISMATCH})
#: Errors meaning "this GPU/driver will never report this field".
_UNSUPPORTED = frozenset({_NOT_SUPPORTED, _FUNCTION_NOT_FOUND})
#: Errors about the device, not the field asked: the whole device is ERROR this tick.
_DEVICE_LEVEL = frozenset({10, 11, 14, 16, _LIB_RM_VERSION_MISMATCH})  # TIMEOUT, IRQ_ISSUE,
# CORRUPTED_INFOROM, RESET_REQUIRED, LIB_RM_VERSION_MISMATCH

_NVML_TEMPERATURE_GPU = 0  # NVML_TEMPERATURE_GPU
_MIG_ENABLED = 1  # NVML_DEVICE_MIG_ENABLE
_VALUE_NOT_AVAILABLE = 2**64 - 1  # NVML_VALUE_NOT_AVAILABLE_ulonglong (WDDM)

#: Seconds without a new utilisation sample after which a process counts as idle (0 %).
SM_IDLE_AFTER_S = 2.0

NA_NOT_SUPPORTED = "n/a (not supported)"
NA_NO_PERMISSION = "n/a (no permission)"
NA_WDDM = "n/a (WDDM)"
NA_MIG = "n/a (MIG device)"
NA_MIG_PROCESS_MEMORY = "n/a (not reported on MIG)"
NA_SEE_MIG = "n/a (see MIG devices)"
LOST_MESSAGE = "GPU lost (fell off the bus)"

_KINDS = {1: "compute", 2: "graphics", 3: "compute+graphics"}


class _Device:
    """Everything known about one NVML device (full GPU or MIG instance)."""

    __slots__ = (
        "index", "mig_index", "handle", "name", "uuid", "memory_total", "power_limit",
        "mem_version", "procs", "procs_fallback", "last_ts", "sm", "sm_at", "sm_first", "skip", "notes",
        "error", "is_mig", "mig_parent", "temperature_v", "buffers",
    )

    def __init__(self, index: int, mig_index: int | None, handle: Any) -> None:
        self.index = index
        self.mig_index = mig_index
        self.handle = handle
        self.name = f"GPU {index}" if mig_index is None else f"GPU {index} MIG {mig_index}"
        self.uuid: str | None = None
        self.memory_total: int | None = None
        self.power_limit: float | None = None
        self.mem_version = 2  # 2 = v2, 1 = v1, 0 = memory info not supported
        # (compute, graphics) process-list functions in use and the older pair
        # to try once if they turn out to be missing from the driver.
        self.procs: tuple[Callable[[Any], Any], Callable[[Any], Any]] | None = None
        self.procs_fallback: tuple[Callable[[Any], Any], Callable[[Any], Any]] | None = None
        self.last_ts = 0  # µs; newest process-utilisation sample seen
        self.sm: dict[int, float] = {}  # pid -> last SM % seen (kept across NOT_FOUND)
        self.sm_at: dict[int, float] = {}  # pid -> monotonic time that value arrived
        self.sm_first: dict[int, float] = {}  # pid -> monotonic time first listed
        self.skip: set[str] = set()  # fields never to ask for again
        self.notes: dict[str, str] = {}  # notes that hold on every tick
        self.error: str | None = None  # permanent failure found in open()
        self.is_mig = mig_index is not None
        self.mig_parent = False  # MIG enabled: processes shown on the MIG devices
        self.temperature_v = True  # nvmlDeviceGetTemperatureV until the driver lacks it
        self.buffers: dict[str, Any] = {}  # reused arrays of the list queries (nvml_lists)


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _mem(value: int | None) -> int | None:
    # pynvml already maps WDDM's 2**64-1 to None; be safe with other bindings.
    return None if value is None or value >= _VALUE_NOT_AVAILABLE else int(value)


class NvmlSource(GpuSource):
    """Reads every NVIDIA GPU (and MIG device) through NVML."""

    name = "nvml"

    def __init__(self, nvml: Any = None) -> None:
        self._nvml = nvml  # pynvml-like module; imported in open() when None
        self._initialised = False
        self._devices: list[_Device] = []
        self._lost: set[int] = set()  # physical GPU indices that fell off the bus
        self._driver: str | None = None
        self._driver_lost: SourceUnavailable | None = None
        self._errors: tuple[type[BaseException], ...] = ()
        self._mem_v2: int | None = None
        self._temperature_v1: int | None = None  # nvmlTemperature_v1 of the bindings
        self._direct = False  # list queries through reused buffers (nvml_lists)

    # ------------------------------------------------------------------ open
    def open(self) -> None:
        """Init NVML once and cache handles and static fields (slow: >1 s
        without persistence mode, so call it on the sampler thread)."""
        if self._initialised:
            return
        if self._nvml is None:
            try:
                import pynvml
            except ImportError as err:
                raise SourceUnavailable(
                    f"NVML Python bindings missing (install nvidia-ml-py): {err}", "no_library"
                ) from err
            self._nvml = pynvml
        nvml = self._nvml
        mismatch = getattr(nvml, "NVMLLibraryMismatchError", None)
        # The unversioned process functions turn FunctionNotFound into
        # NVMLLibraryMismatchError, which is not an NVMLError: catch both.
        self._errors = (nvml.NVMLError,) + ((mismatch,) if mismatch else ())
        self._mem_v2 = getattr(nvml, "nvmlMemory_v2", None)
        self._temperature_v1 = getattr(nvml, "nvmlTemperature_v1", None)
        self._direct = nvml_lists.direct_calls(nvml)
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as err:
            raise _open_error(err) from err
        except OSError as err:  # library present but unloadable
            raise SourceUnavailable(
                f"NVIDIA driver library could not be loaded: {err}", "no_library"
            ) from err
        self._initialised = True
        self._lost = set()
        self._driver_lost = None
        try:
            self._driver = self._fetch_driver_version()
            count = nvml.nvmlDeviceGetCount()
            if count <= 0:
                raise SourceUnavailable("No NVIDIA GPU found", "no_gpu")
            devices: list[_Device] = []
            for index in range(count):
                devices.extend(self._open_device(index))
        except nvml.NVMLError as err:
            self.close()
            raise _open_error(err) from err
        except SourceUnavailable:
            self.close()
            raise
        self._devices = devices

    def _fetch_driver_version(self) -> str | None:
        try:
            return _text(self._nvml.nvmlSystemGetDriverVersion())
        except self._nvml.NVMLError as err:
            if err.value in _DRIVER_GONE:
                raise
            return None

    def _open_device(self, index: int) -> list[_Device]:
        """Handle, static fields and MIG children of one physical GPU."""
        nvml = self._nvml
        dev = _Device(index, None, None)
        try:
            dev.handle = nvml.nvmlDeviceGetHandleByIndex(index)
            self._load_static(dev)
        except nvml.NVMLError as err:
            if err.value in _DRIVER_GONE:
                raise
            if err.value == _GPU_IS_LOST:
                self._lost.add(index)
            else:
                dev.error = f"NVML error: {err}"  # reported as ERROR on every tick
            return [dev]
        try:
            children = self._open_mig(dev)
        except nvml.NVMLError as err:
            if err.value in _DRIVER_GONE:
                raise
            if err.value == _GPU_IS_LOST:
                self._lost.add(index)
            else:  # the GPU itself still reads fine; only the MIG split is unknown
                dev.notes["mig"] = f"MIG devices n/a ({err})"
            return [dev]
        return [dev, *children]

    def _load_static(self, dev: _Device) -> None:
        nvml = self._nvml
        name = self._optional(nvml.nvmlDeviceGetName, dev.handle)
        if name:
            dev.name = _text(name)
        uuid = self._optional(nvml.nvmlDeviceGetUUID, dev.handle)
        dev.uuid = _text(uuid) if uuid else None
        try:
            memory = self._read_memory(dev)  # also settles v2 vs v1 for this device
            dev.memory_total = memory[0] if memory else None
        except nvml.NVMLError as err:
            if _fatal(err):
                raise
            # A transient failure here must not condemn the device: read()
            # asks again every tick and reports ERROR while it persists.
        if dev.is_mig:
            # Utilisation, temperature and power belong to the parent GPU;
            # NVML answers NOT_SUPPORTED for them on MIG handles.
            dev.skip.update(("utilization", "temperature", "power_draw", "sm_util"))
            for key in ("utilization_gpu", "utilization_memory", "temperature", "power_draw"):
                dev.notes[key] = NA_MIG
            dev.notes["sm_util"] = "n/a (not supported on MIG)"
            return
        try:
            dev.power_limit = nvml.nvmlDeviceGetEnforcedPowerLimit(dev.handle) / 1000.0
        except nvml.NVMLError as err:
            if _fatal(err):
                raise
            dev.notes["power_limit"] = _na(err)

    def _open_mig(self, parent: _Device) -> list[_Device]:
        """MIG instances of ``parent`` as devices of their own (empty slots skipped)."""
        nvml = self._nvml
        get_mode = getattr(nvml, "nvmlDeviceGetMigMode", None)
        if get_mode is None:
            return []
        try:
            current = get_mode(parent.handle)[0]
        except nvml.NVMLError as err:
            if err.value in (_NOT_SUPPORTED, _FUNCTION_NOT_FOUND, _INVALID_ARGUMENT, _NO_PERMISSION):
                return []  # not a MIG-capable GPU (or old driver)
            raise
        if current != _MIG_ENABLED:
            return []
        children: list[_Device] = []
        for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(parent.handle)):
            try:
                handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(parent.handle, slot)
            except nvml.NVMLError as err:
                if err.value == _NOT_FOUND:
                    continue  # slot without a MIG instance
                raise
            child = _Device(parent.index, slot, handle)
            self._load_static(child)
            children.append(child)
        # Process lists of a MIG-enabled GPU repeat those of its MIG devices;
        # show them once, on the MIG devices.
        parent.mig_parent = True
        parent.notes["processes"] = NA_SEE_MIG
        return children

    def _optional(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Static extra that may fail harmlessly; lost/driver errors still propagate."""
        try:
            return fn(*args)
        except self._nvml.NVMLError as err:
            if _fatal(err):
                raise
            return None

    # ----------------------------------------------------------------- state
    def driver_version(self) -> str | None:
        return self._driver

    def close(self) -> None:
        """nvmlShutdown once; errors ignored (the driver may already be gone)."""
        if not self._initialised:
            return
        self._initialised = False
        self._devices = []
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass

    # ------------------------------------------------------------------ read
    def read(self) -> tuple[GpuSample, ...]:
        """One sample per device; raises only when the driver went away."""
        if self._driver_lost is not None:
            raise self._driver_lost
        if not self._initialised:
            raise SourceUnavailable("NVML source is not open", "not_open")
        return tuple([self._read_device(dev) for dev in self._devices])

    def _read_device(self, dev: _Device) -> GpuSample:
        if dev.index in self._lost:
            return self._degraded(dev, DeviceState.LOST, LOST_MESSAGE)
        if dev.error is not None:
            return self._degraded(dev, DeviceState.ERROR, dev.error)
        try:
            return self._sample(dev)
        except self._nvml.NVMLError as err:
            code = err.value
            if code == _GPU_IS_LOST:
                self._lost.add(dev.index)  # MIG children share the physical GPU
                return self._degraded(dev, DeviceState.LOST, LOST_MESSAGE)
            if code in _DRIVER_GONE:
                self._driver_lost = SourceUnavailable(
                    f"NVIDIA driver stopped responding: {err}", "driver_lost"
                )
                raise self._driver_lost from err
            return self._degraded(dev, DeviceState.ERROR, f"NVML error: {err}")

    def _degraded(self, dev: _Device, state: DeviceState, message: str) -> GpuSample:
        return GpuSample(
            index=dev.index, name=dev.name, uuid=dev.uuid,
            memory_total=None, memory_used=None, memory_free=None,
            state=state, message=message, mig_index=dev.mig_index,
        )

    def _sample(self, dev: _Device) -> GpuSample:
        nvml = self._nvml
        handle = dev.handle
        skip = dev.skip
        notes = dict(dev.notes)

        total = used = free = reserved = None
        try:
            memory = self._read_memory(dev)
        except nvml.NVMLError as err:
            if _fatal(err):
                raise
            notes["memory"] = _na(err)
        else:
            if memory is None:
                notes["memory"] = NA_NOT_SUPPORTED
            else:
                total, used, free, reserved = memory

        util_gpu = util_mem = None
        if "utilization" not in skip:
            try:
                rates = nvml.nvmlDeviceGetUtilizationRates(handle)
                util_gpu, util_mem = float(rates.gpu), float(rates.memory)
            except nvml.NVMLError as err:
                note = self._field_note(err, dev, "utilization")
                notes["utilization_gpu"] = notes["utilization_memory"] = note

        temperature = None
        if "temperature" not in skip:
            try:
                temperature = self._temperature(dev)
            except nvml.NVMLError as err:
                notes["temperature"] = self._field_note(err, dev, "temperature")

        power = None
        if "power_draw" not in skip:
            try:
                power = nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0  # mW -> W
            except nvml.NVMLError as err:
                notes["power_draw"] = self._field_note(err, dev, "power_draw")

        processes: tuple[ProcessSample, ...] = ()
        if not dev.mig_parent and "processes" not in skip:
            processes = self._processes(dev, notes)

        return GpuSample(
            index=dev.index, name=dev.name, uuid=dev.uuid,
            memory_total=total, memory_used=used, memory_free=free, memory_reserved=reserved,
            utilization_gpu=util_gpu, utilization_memory=util_mem,
            temperature=temperature, power_draw=power, power_limit=dev.power_limit,
            processes=processes, notes=notes, mig_index=dev.mig_index,
        )

    def _temperature(self, dev: _Device) -> float:
        """GPU temperature in °C: ``nvmlDeviceGetTemperatureV`` (NVML 12.5+),
        else the older call it replaces (deprecated in NVML 13, so a newer
        driver may lack it).  The first missing-function answer settles the
        choice for the device."""
        nvml = self._nvml
        if dev.temperature_v and self._temperature_v1 is not None:
            try:
                return float(nvml.nvmlDeviceGetTemperatureV(
                    dev.handle, _NVML_TEMPERATURE_GPU, self._temperature_v1))
            except nvml.NVMLError as err:
                if err.value not in (_FUNCTION_NOT_FOUND, _ARGUMENT_VERSION_MISMATCH):
                    raise
                dev.temperature_v = False
        return float(nvml.nvmlDeviceGetTemperature(dev.handle, _NVML_TEMPERATURE_GPU))

    def _field_note(self, err: Any, dev: _Device, field: str) -> str:
        """Note for an optional field; unsupported fields are not asked again.
        Lost GPU, driver gone and device-level errors propagate (device state);
        any other error leaves the field unknown for this tick."""
        code = err.value
        if code in _UNSUPPORTED:
            dev.skip.add(field)
            if field == "utilization":
                dev.notes["utilization_gpu"] = dev.notes["utilization_memory"] = NA_NOT_SUPPORTED
            else:
                dev.notes[field] = NA_NOT_SUPPORTED
            return NA_NOT_SUPPORTED
        if _fatal(err):
            raise err
        return _na(err)  # this tick only (no permission included): asked again next tick

    def _read_memory(self, dev: _Device) -> tuple[int, int, int, int | None] | None:
        """(total, used, free, reserved) in bytes, or None if unsupported.

        v2 keeps driver-reserved memory out of ``used`` (v1 folds it in and
        over-reports); the first v2 failure switches the device to v1 for good.
        """
        nvml = self._nvml
        if dev.mem_version == 2:
            if self._mem_v2 is None:
                dev.mem_version = 1
            else:
                try:
                    info = nvml.nvmlDeviceGetMemoryInfo(dev.handle, version=self._mem_v2)
                    return info.total, info.used, info.free, info.reserved
                except nvml.NVMLError as err:
                    if err.value not in _MEM_V2_FALLBACK:
                        raise
                    dev.mem_version = 1
        if dev.mem_version == 1:
            try:
                info = nvml.nvmlDeviceGetMemoryInfo(dev.handle)
                return info.total, info.used, info.free, None
            except nvml.NVMLError as err:
                if err.value not in _UNSUPPORTED:
                    raise
                dev.mem_version = 0
                dev.notes["memory"] = NA_NOT_SUPPORTED
        return None

    def _process_functions(self, dev: _Device) -> None:
        """Pick v3 process lists with v2 as the one-time fallback."""
        nvml = self._nvml
        if self._direct:
            dev.procs = self._direct_pair(dev, "v3")  # type: ignore[assignment]
            dev.procs_fallback = self._direct_pair(dev, "v2")  # type: ignore[assignment]
            return
        v3 = (
            getattr(nvml, "nvmlDeviceGetComputeRunningProcesses_v3", None)
            or nvml.nvmlDeviceGetComputeRunningProcesses,
            getattr(nvml, "nvmlDeviceGetGraphicsRunningProcesses_v3", None)
            or nvml.nvmlDeviceGetGraphicsRunningProcesses,
        )
        c2 = getattr(nvml, "nvmlDeviceGetComputeRunningProcesses_v2", None)
        g2 = getattr(nvml, "nvmlDeviceGetGraphicsRunningProcesses_v2", None)
        dev.procs = v3
        dev.procs_fallback = (c2, g2) if c2 and g2 else None

    def _direct_pair(self, dev: _Device, version: str
                     ) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
        """Compute and graphics list readers of one struct version, each one
        driver call into a buffer kept on the device (see nvml_lists)."""
        nvml, buffers = self._nvml, dev.buffers

        def reader(name: str) -> Callable[[Any], Any]:
            return lambda handle: nvml_lists.process_list(nvml, name, handle, buffers)

        return (reader(f"nvmlDeviceGetComputeRunningProcesses_{version}"),
                reader(f"nvmlDeviceGetGraphicsRunningProcesses_{version}"))

    def _processes(self, dev: _Device, notes: dict[str, str]) -> tuple[ProcessSample, ...]:
        """Compute and graphics lists merged by pid, with SM % attached."""
        if dev.procs is None:
            self._process_functions(dev)
            if _cc_v3_driver(self._driver) and dev.procs_fallback is not None:
                # 535.43-535.86 wrote 32-byte _v3 entries against a 24-byte
                # struct (figures garbled): their _v2 lists are right.
                dev.procs, dev.procs_fallback = dev.procs_fallback, None
        handle = dev.handle
        while True:
            compute_fn, graphics_fn = dev.procs  # type: ignore[misc]
            try:
                compute = compute_fn(handle)
                graphics = graphics_fn(handle)
                break
            except self._errors as err:
                code = getattr(err, "value", _FUNCTION_NOT_FOUND)  # mismatch error: no code
                if code == _FUNCTION_NOT_FOUND and dev.procs_fallback is not None:
                    dev.procs, dev.procs_fallback = dev.procs_fallback, None  # remembered
                    continue
                if code in _UNSUPPORTED:
                    dev.skip.add("processes")
                    dev.notes["processes"] = notes["processes"] = NA_NOT_SUPPORTED
                    dev.sm.clear()
                    return ()
                if _fatal_code(code):
                    raise
                notes["processes"] = _na(err)  # this tick only (no permission included)
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

    def _sm_util(self, dev: _Device, pids: dict[int, Any], notes: dict[str, str]) -> dict[int, float]:
        """Per-process SM % since the last seen timestamp, kept per device.

        NOT_FOUND means no sample newer than the timestamp: earlier values of
        pids still running are kept.  Values of pids that left are dropped.
        """
        if "sm_util" in dev.skip:
            return {}
        nvml = self._nvml
        samples: Any = ()
        try:
            if self._direct:
                samples = nvml_lists.process_utilization(nvml, dev.handle, dev.last_ts, dev.buffers)
            else:
                samples = nvml.nvmlDeviceGetProcessUtilization(dev.handle, dev.last_ts)
        except nvml.NVMLError as err:
            code = err.value
            if code in (_NOT_FOUND, _SUCCESS):
                pass  # no new samples (pynvml raises NVMLError(0) for an empty buffer)
            elif code in _UNSUPPORTED:
                dev.skip.add("sm_util")
                dev.notes["sm_util"] = notes["sm_util"] = NA_NOT_SUPPORTED
                dev.sm.clear()
                return {}
            elif _fatal(err):
                raise
            else:
                # A per-process extra: degrade it rather than the whole device.
                notes["sm_util"] = _na(err)
        if samples:
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
        if "sm_util" in notes:
            return {}  # this tick's query failed: unknown, not the old figures
        # The driver records samples only while a process runs kernels.  A
        # successful query with nothing new for SM_IDLE_AFTER_S means the
        # driver saw no activity from it: 0 %, not "unknown".
        # Until a pid has been watched that long, no sample means unknown.
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
        return sm  # type: ignore[return-value]


def _na(err: Any) -> str:
    """Note for a field an NVML error left unknown this tick."""
    code = err.value
    if code in _UNSUPPORTED:
        return NA_NOT_SUPPORTED
    if code == _NO_PERMISSION:
        return NA_NO_PERMISSION
    return f"n/a ({err})"


def _fatal(err: Any) -> bool:
    """Errors that must reach the device/driver level handlers."""
    return _fatal_code(err.value)


def _fatal_code(code: int) -> bool:
    return code == _GPU_IS_LOST or code in _DRIVER_GONE or code in _DEVICE_LEVEL


def _cc_v3_driver(version: str | None) -> bool:
    """Drivers 535.43 to 535.86, whose ``_v3`` process entries are 32 bytes."""
    try:
        major, minor = (int(x) for x in (version or "").split(".")[:2])
    except ValueError:
        return False
    return major == 535 and 43 <= minor <= 86


def _open_error(err: Any) -> SourceUnavailable:
    """Map an NVML error seen while opening to a user-facing reason."""
    code = getattr(err, "value", None)
    if code == _LIBRARY_NOT_FOUND:
        return SourceUnavailable("NVIDIA driver not found (libnvidia-ml is not installed)", "no_library")
    if code == _DRIVER_NOT_LOADED:
        return SourceUnavailable("NVIDIA driver not loaded", "driver_not_loaded")
    if code == _NO_PERMISSION:
        return SourceUnavailable("No permission to access the NVIDIA driver", "no_permission")
    if code == _LIB_RM_VERSION_MISMATCH:
        return SourceUnavailable(
            "NVIDIA driver/library version mismatch: the loaded kernel driver differs from "
            "libnvidia-ml (usually after a driver update); reboot to fix",
            "version_mismatch",
        )
    return SourceUnavailable(f"NVML error: {err}", "nvml_error")
