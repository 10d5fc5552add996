"""GPU source backed by NVML (the ``pynvml`` module of nvidia-ml-py).

``read()`` runs every 250 ms on the sampler thread, so everything that does
not change is done once in ``open()``: one ``nvmlInit``, one device count, one
handle lookup per device (re-acquiring handles every loop is what made other
monitors burn CPU), the static fields, and the choice of API versions.  Every
fallback that is discovered at run time (memory-info v2 -> v1, process list
v3 -> v2, "not supported" fields) is remembered per device so the failing call
is not repeated on every tick.

Failure model (see ``app.core.monitor.source``; the codes in
``app.core.monitor.nvml_errors``):

* a field the GPU cannot report -> ``None`` plus a note in ``GpuSample.notes``;
* ``GPU_IS_LOST`` -> that device reports ``DeviceState.LOST`` from then on and
  NVML is never called on it again (calls on a lost GPU can hang);
* any other NVML error on one field -> that field ``None`` with the error in
  its note, for that tick only; the other fields are still read;
* a device whose handle or static fields cannot be read -> ``DeviceState.ERROR``;
* the driver going away -> :class:`SourceUnavailable` (code ``driver_lost``).

The process lists and SM % of a device are read by
:class:`~app.core.monitor.nvml_processes.ProcessReader`.

Not thread-safe: one sampler thread owns the source.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.core.monitor import nvml_lists
from app.core.monitor.nvml_device import NvmlDevice, text
from app.core.monitor.nvml_errors import (
    ARGUMENT_VERSION_MISMATCH,
    DRIVER_GONE,
    FUNCTION_NOT_FOUND,
    GPU_IS_LOST,
    INVALID_ARGUMENT,
    LOST_MESSAGE,
    MEM_V2_FALLBACK,
    NA_MIG,
    NA_NOT_SUPPORTED,
    NA_SEE_MIG,
    NO_PERMISSION,
    NOT_FOUND,
    NOT_SUPPORTED,
    UNSUPPORTED,
    is_fatal,
    na_note,
    open_error,
)
from app.core.monitor.nvml_processes import ProcessReader
from app.core.monitor.samples import DeviceState, GpuSample, ProcessSample
from app.core.monitor.source import GpuSource, SourceUnavailable

__all__ = ["NvmlSource"]

_NVML_TEMPERATURE_GPU = 0  # NVML_TEMPERATURE_GPU
_MIG_ENABLED = 1  # NVML_DEVICE_MIG_ENABLE


class NvmlSource(GpuSource):
    """Reads every NVIDIA GPU (and MIG device) through NVML."""

    name = "nvml"

    def __init__(self, nvml: Any = None, sm_refresh_s: float = 0.0) -> None:
        """``sm_refresh_s``: per-process SM % asked of the driver at most this
        often (0: every read; a headless server asks once a second)."""
        self._sm_refresh_s = sm_refresh_s
        self._nvml = nvml  # pynvml-like module; imported in open() when None
        self._initialised = False
        self._devices: list[NvmlDevice] = []
        self._lost: set[int] = set()  # physical GPU indices that fell off the bus
        self._driver: str | None = None
        self._driver_lost: SourceUnavailable | None = None
        self._errors: tuple[type[BaseException], ...] = ()
        self._mem_v2: int | None = None
        self._temperature_v1: int | None = None  # nvmlTemperature_v1 of the bindings
        self._direct = False  # list queries through reused buffers (nvml_lists)
        self._processes: ProcessReader | None = None  # set in open()

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
            raise open_error(err) from err
        except OSError as err:  # library present but unloadable
            raise SourceUnavailable(
                f"NVIDIA driver library could not be loaded: {err}", "no_library"
            ) from err
        self._initialised = True
        self._lost = set()
        self._driver_lost = None
        try:
            self._driver = self._fetch_driver_version()
            self._processes = ProcessReader(nvml, self._errors, self._direct, self._driver,
                                            self._sm_refresh_s)
            count = nvml.nvmlDeviceGetCount()
            if count <= 0:
                raise SourceUnavailable("No NVIDIA GPU found", "no_gpu")
            devices: list[NvmlDevice] = []
            for index in range(count):
                devices.extend(self._open_device(index))
        except nvml.NVMLError as err:
            self.close()
            raise open_error(err) from err
        except SourceUnavailable:
            self.close()
            raise
        self._devices = devices

    def _fetch_driver_version(self) -> str | None:
        try:
            return text(self._nvml.nvmlSystemGetDriverVersion())
        except self._nvml.NVMLError as err:
            if err.value in DRIVER_GONE:
                raise
            return None

    def _open_device(self, index: int) -> list[NvmlDevice]:
        """Handle, static fields and MIG children of one physical GPU."""
        nvml = self._nvml
        dev = NvmlDevice(index, None, None)
        try:
            dev.handle = nvml.nvmlDeviceGetHandleByIndex(index)
            self._load_static(dev)
        except nvml.NVMLError as err:
            if err.value in DRIVER_GONE:
                raise
            if err.value == GPU_IS_LOST:
                self._lost.add(index)
            else:
                dev.error = f"NVML error: {err}"  # reported as ERROR on every tick
            return [dev]
        try:
            children = self._open_mig(dev)
        except nvml.NVMLError as err:
            if err.value in DRIVER_GONE:
                raise
            if err.value == GPU_IS_LOST:
                self._lost.add(index)
            else:  # the GPU itself still reads fine; only the MIG split is unknown
                dev.notes["mig"] = f"MIG devices n/a ({err})"
            return [dev]
        return [dev, *children]

    def _load_static(self, dev: NvmlDevice) -> None:
        nvml = self._nvml
        name = self._optional(nvml.nvmlDeviceGetName, dev.handle)
        if name:
            dev.name = text(name)
        uuid = self._optional(nvml.nvmlDeviceGetUUID, dev.handle)
        dev.uuid = text(uuid) if uuid else None
        try:
            memory = self._read_memory(dev)  # also settles v2 vs v1 for this device
            dev.memory_total = memory[0] if memory else None
        except nvml.NVMLError as err:
            if is_fatal(err):
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
            if is_fatal(err):
                raise
            dev.notes["power_limit"] = na_note(err)

    def _open_mig(self, parent: NvmlDevice) -> list[NvmlDevice]:
        """MIG instances of ``parent`` as devices of their own (empty slots skipped)."""
        nvml = self._nvml
        get_mode = getattr(nvml, "nvmlDeviceGetMigMode", None)
        if get_mode is None:
            return []
        try:
            current = get_mode(parent.handle)[0]
        except nvml.NVMLError as err:
            if err.value in (NOT_SUPPORTED, FUNCTION_NOT_FOUND, INVALID_ARGUMENT, NO_PERMISSION):
                return []  # not a MIG-capable GPU (or old driver)
            raise
        if current != _MIG_ENABLED:
            return []
        children: list[NvmlDevice] = []
        for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(parent.handle)):
            try:
                handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(parent.handle, slot)
            except nvml.NVMLError as err:
                if err.value == NOT_FOUND:
                    continue  # slot without a MIG instance
                raise
            child = NvmlDevice(parent.index, slot, handle)
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
            if is_fatal(err):
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

    def _read_device(self, dev: NvmlDevice) -> GpuSample:
        if dev.index in self._lost:
            return self._degraded(dev, DeviceState.LOST, LOST_MESSAGE)
        if dev.error is not None:
            return self._degraded(dev, DeviceState.ERROR, dev.error)
        try:
            return self._sample(dev)
        except self._nvml.NVMLError as err:
            code = err.value
            if code == GPU_IS_LOST:
                self._lost.add(dev.index)  # MIG children share the physical GPU
                return self._degraded(dev, DeviceState.LOST, LOST_MESSAGE)
            if code in DRIVER_GONE:
                self._driver_lost = SourceUnavailable(
                    f"NVIDIA driver stopped responding: {err}", "driver_lost"
                )
                raise self._driver_lost from err
            return self._degraded(dev, DeviceState.ERROR, f"NVML error: {err}")

    def _degraded(self, dev: NvmlDevice, state: DeviceState, message: str) -> GpuSample:
        return GpuSample(
            index=dev.index, name=dev.name, uuid=dev.uuid,
            memory_total=None, memory_used=None, memory_free=None,
            state=state, message=message, mig_index=dev.mig_index,
        )

    def _sample(self, dev: NvmlDevice) -> GpuSample:
        nvml = self._nvml
        handle = dev.handle
        skip = dev.skip
        notes = dict(dev.notes)

        total = used = free = reserved = None
        try:
            memory = self._read_memory(dev)
        except nvml.NVMLError as err:
            if is_fatal(err):
                raise
            notes["memory"] = na_note(err)
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
        reader = self._processes
        if not dev.mig_parent and "processes" not in skip and reader is not None:
            processes = reader.read(dev, notes)

        return GpuSample(
            index=dev.index, name=dev.name, uuid=dev.uuid,
            memory_total=total, memory_used=used, memory_free=free, memory_reserved=reserved,
            utilization_gpu=util_gpu, utilization_memory=util_mem,
            temperature=temperature, power_draw=power, power_limit=dev.power_limit,
            processes=processes, notes=notes, mig_index=dev.mig_index,
        )

    def _temperature(self, dev: NvmlDevice) -> float:
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
                if err.value not in (FUNCTION_NOT_FOUND, ARGUMENT_VERSION_MISMATCH):
                    raise
                dev.temperature_v = False
        return float(nvml.nvmlDeviceGetTemperature(dev.handle, _NVML_TEMPERATURE_GPU))

    def _field_note(self, err: Any, dev: NvmlDevice, field: str) -> str:
        """Note for an optional field; unsupported fields are not asked again.
        Lost GPU, driver gone and device-level errors propagate (device state);
        any other error leaves the field unknown for this tick."""
        code = err.value
        if code in UNSUPPORTED:
            dev.skip.add(field)
            if field == "utilization":
                dev.notes["utilization_gpu"] = dev.notes["utilization_memory"] = NA_NOT_SUPPORTED
            else:
                dev.notes[field] = NA_NOT_SUPPORTED
            return NA_NOT_SUPPORTED
        if is_fatal(err):
            raise err
        return na_note(err)  # this tick only (no permission included): asked again next tick

    def _read_memory(self, dev: NvmlDevice) -> tuple[int, int, int, int | None] | None:
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
                    if err.value not in MEM_V2_FALLBACK:
                        raise
                    dev.mem_version = 1
        if dev.mem_version == 1:
            try:
                info = nvml.nvmlDeviceGetMemoryInfo(dev.handle)
                return info.total, info.used, info.free, None
            except nvml.NVMLError as err:
                if err.value not in UNSUPPORTED:
                    raise
                dev.mem_version = 0
                dev.notes["memory"] = NA_NOT_SUPPORTED
        return None
