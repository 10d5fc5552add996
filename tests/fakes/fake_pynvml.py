"""A fake ``pynvml`` module for tests, cut at the pynvml boundary.

It behaves like nvidia-ml-py 12/13 on top of a real driver, as far as a
sampler can tell:

* errors are the **real** ``pynvml.NVMLError_*`` classes, raised the way the
  bindings raise them (``NVMLError(code)`` returns the subclass);
* return values are the real ctypes structures (``c_nvmlMemory_t``,
  ``c_nvmlMemory_v2_t``, ``c_nvmlUtilization_t``,
  ``c_nvmlProcessUtilizationSample_t``) or, for process lists, the same
  ``nvmlFriendlyObject`` the bindings build, with WDDM's 2**64-1
  ``usedGpuMemory`` turned into ``None`` exactly as pynvml does;
* a missing driver symbol raises ``FunctionNotFound``, and the unversioned
  process-list wrappers turn that into ``NVMLLibraryMismatchError`` like the
  real ``@throwOnVersionMismatch`` decorator;
* calls before ``nvmlInit`` or after the last ``nvmlShutdown`` raise
  ``Uninitialized``; MIG handles answer ``NotSupported`` for utilisation,
  temperature, power and process utilisation.

Any ``NVML*`` constant or error class not defined here is taken from the real
module, so code under test can use ``nvml.NVMLError_GpuIsLost`` and friends.

Function keys
-------------
``FakeNvml.calls``, ``FakeNvml.missing_functions`` and ``FakeGpu.fail`` use the
pynvml function names (``"nvmlInit"``, ``"nvmlDeviceGetHandleByIndex"``,
``"nvmlDeviceGetTemperature"`` ...).  Where pynvml picks a versioned driver
symbol the key is that symbol: ``"nvmlDeviceGetMemoryInfo"`` (v1) vs
``"nvmlDeviceGetMemoryInfo_v2"`` (``version=`` given), and
``"nvmlDeviceGetComputeRunningProcesses_v3"`` / ``"..._v2"`` (the unversioned
wrapper counts as ``_v3``, which it calls).

Scenarios (all switchable while a test runs)
--------------------------------------------
``FakeNvml(gpus, init_error=..., driver_version=...)``;
``FakeNvml.no_library()``, ``FakeNvml.driver_not_loaded()``;
``fake.missing_functions.add("nvmlDeviceGetMemoryInfo_v2")`` (old driver);
``fake.vanish()`` / ``fake.vanish_after(n)`` (driver gone mid-run);
``gpu.not_supported(key...)``, ``gpu.no_permission(key...)``,
``gpu.fail_with(key, code)``; ``gpu.lose()`` / ``gpu.lose_after(n)``;
``gpu.add_process(pid, mem, compute=True, graphics=False)`` (``mem=None`` is
WDDM), ``gpu.exit_process(pid)``; ``gpu.add_util_sample(pid, ts, sm)``;
``FakeGpu(mig_enabled=True, mig_slots=[FakeGpu(...), None, ...])``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import pynvml as _real

NOT_AVAILABLE = _real.NVML_VALUE_NOT_AVAILABLE_ulonglong.value  # 2**64 - 1
MiB = 1024 * 1024
GiB = 1024 * MiB


def nvml_error(code: int) -> _real.NVMLError:
    """The exception pynvml raises for ``code`` (the real subclass)."""
    return _real.NVMLError(code)


class FakeGpu:
    """One device (a full GPU, or a MIG device when ``parent`` is set).

    Memory figures follow NVML's v2 meaning: ``used`` excludes ``reserved``.
    The v1 struct folds reserved into used, as the real v1 call does.
    """

    def __init__(
        self,
        name: str = "NVIDIA Fake GPU",
        uuid: str | None = None,
        total: int = 8 * GiB,
        used: int = 1 * GiB,
        reserved: int = 256 * MiB,
        util_gpu: int = 37,
        util_memory: int = 12,
        temperature: int = 55,
        power_mw: int = 123_456,
        power_limit_mw: int = 250_000,
        mig_capable: bool = False,
        mig_enabled: bool = False,
        mig_slots: Iterable[FakeGpu | None] = (),
    ) -> None:
        self.name = name
        self.uuid = uuid
        self.total = total
        self.used = used
        self.reserved = reserved
        self.util_gpu = util_gpu
        self.util_memory = util_memory
        self.temperature = temperature
        self.power_mw = power_mw
        self.power_limit_mw = power_limit_mw
        # pid -> usedGpuMemory (None = WDDM "not available"); insertion order kept.
        self.compute: dict[int, int | None] = {}
        self.graphics: dict[int, int | None] = {}
        # (pid, timeStamp µs, smUtil, memUtil) as the driver's sample buffer.
        self.util_samples: list[tuple[int, int, int, int]] = []
        #: timestamps passed to nvmlDeviceGetProcessUtilization, in call order
        self.util_requests: list[int] = []
        #: function key -> NVML error code raised on every call on this device
        self.fail: dict[str, int] = {}
        self.lost = False
        self.lose_after_calls: int | None = None
        self.calls = 0  # calls that reached this device
        self.calls_after_lost = 0  # calls made on it while it was lost
        self.parent: FakeGpu | None = None
        self.mig_slots: list[FakeGpu | None] = list(mig_slots)
        self.mig_capable = mig_capable or mig_enabled or bool(self.mig_slots)
        self.mig_enabled = mig_enabled
        for child in self.mig_slots:
            if child is not None:
                child.parent = self

    # -- scenario switches ---------------------------------------------------
    def not_supported(self, *keys: str) -> FakeGpu:
        for key in keys:
            self.fail[key] = _real.NVML_ERROR_NOT_SUPPORTED
        return self

    def no_permission(self, *keys: str) -> FakeGpu:
        for key in keys:
            self.fail[key] = _real.NVML_ERROR_NO_PERMISSION
        return self

    def fail_with(self, key: str, code: int) -> FakeGpu:
        self.fail[key] = code
        return self

    def lose(self) -> None:
        """The GPU falls off the bus: every later call raises GpuIsLost."""
        self.lost = True

    def lose_after(self, calls: int) -> None:
        """Lost once ``calls`` more calls have reached this device."""
        self.lose_after_calls = self.calls + calls

    def add_process(
        self, pid: int, memory: int | None, compute: bool = True, graphics: bool = False,
        graphics_memory: int | None | str = "same",
    ) -> FakeGpu:
        """``memory=None`` is what the driver reports on WDDM (2**64-1)."""
        if compute:
            self.compute[pid] = memory
        if graphics:
            self.graphics[pid] = memory if graphics_memory == "same" else graphics_memory  # type: ignore[assignment]
        return self

    def exit_process(self, pid: int) -> None:
        """The process ends: it leaves both lists (its old utilisation
        samples stay in the driver's buffer, as on real hardware)."""
        self.compute.pop(pid, None)
        self.graphics.pop(pid, None)

    def add_util_sample(self, pid: int, ts: int, sm: int, mem: int = 0) -> FakeGpu:
        self.util_samples.append((pid, ts, sm, mem))
        return self

    @property
    def is_mig(self) -> bool:
        return self.parent is not None

    def is_lost(self) -> bool:
        return self.lost or (self.parent is not None and self.parent.lost)


class FakeHandle:
    """Opaque device handle (real ones are ctypes pointers)."""

    __slots__ = ("gpu",)

    def __init__(self, gpu: FakeGpu) -> None:
        self.gpu = gpu

    def __repr__(self) -> str:
        return f"<FakeHandle {self.gpu.name}>"


class FakeNvml:
    """Module-like stand-in for ``pynvml``; pass it as ``NvmlSource(nvml=...)``."""

    def __init__(
        self,
        gpus: Iterable[FakeGpu] = (),
        init_error: int | BaseException | None = None,
        driver_version: str | bytes | None = "550.54.14",
    ) -> None:
        self.gpus: list[FakeGpu] = list(gpus)
        for i, gpu in enumerate(self.gpus):
            if gpu.uuid is None:
                gpu.uuid = f"GPU-00000000-0000-0000-0000-{i:012d}"
            for slot, child in enumerate(gpu.mig_slots):
                if child is not None and child.uuid is None:
                    child.uuid = f"MIG-00000000-0000-0000-{i:04d}-{slot:012d}"
        self.init_error = init_error
        self.driver_version = driver_version  # None: the call fails (Unknown)
        self.calls: Counter[str] = Counter()
        #: driver symbols this "old driver" lacks -> FunctionNotFound
        self.missing_functions: set[str] = set()
        #: function key -> error code for calls that take no device handle
        self.fail: dict[str, int] = {}
        self.refcount = 0  # like pynvml: nvmlInit increments, nvmlShutdown decrements
        self.vanished: int | None = None  # error code every call raises once set
        self._vanish_after: int | None = None
        self._vanish_code = _real.NVML_ERROR_DRIVER_NOT_LOADED
        self._total_calls = 0

    # -- scenario constructors and switches ---------------------------------
    @classmethod
    def no_library(cls) -> FakeNvml:
        return cls(init_error=_real.NVML_ERROR_LIBRARY_NOT_FOUND)

    @classmethod
    def driver_not_loaded(cls) -> FakeNvml:
        return cls(init_error=_real.NVML_ERROR_DRIVER_NOT_LOADED)

    def vanish(self, code: int = _real.NVML_ERROR_DRIVER_NOT_LOADED) -> None:
        """The driver is unloaded: every later call fails with ``code``."""
        self.vanished = code

    def vanish_after(self, calls: int, code: int = _real.NVML_ERROR_DRIVER_NOT_LOADED) -> None:
        self._vanish_after = self._total_calls + calls
        self._vanish_code = code

    # -- real constants and error classes -----------------------------------
    def __getattr__(self, name: str) -> Any:
        # Only constants, structs and error classes; unknown *functions* stay
        # missing so the code under test cannot reach the real library.
        if name.startswith(("NVML", "nvmlMemory_", "c_nvml")) and hasattr(_real, name):
            return getattr(_real, name)
        raise AttributeError(name)

    # -- plumbing ------------------------------------------------------------
    def _call(self, key: str, handle: FakeHandle | None = None) -> FakeGpu:
        self.calls[key] += 1
        self._total_calls += 1
        if self._vanish_after is not None and self._total_calls > self._vanish_after:
            self.vanished = self._vanish_code
        if key in self.missing_functions:
            raise nvml_error(_real.NVML_ERROR_FUNCTION_NOT_FOUND)
        if self.refcount <= 0:
            raise nvml_error(_real.NVML_ERROR_UNINITIALIZED)
        if self.vanished is not None:
            raise nvml_error(self.vanished)
        if key in self.fail:
            raise nvml_error(self.fail[key])
        if handle is None:
            return None  # type: ignore[return-value]
        return self._device(key, handle)

    def _device(self, key: str, handle: FakeHandle) -> FakeGpu:
        gpu = handle.gpu
        gpu.calls += 1
        if gpu.lose_after_calls is not None and gpu.calls > gpu.lose_after_calls:
            gpu.lost = True
        if gpu.is_lost():
            gpu.calls_after_lost += 1
            raise nvml_error(_real.NVML_ERROR_GPU_IS_LOST)
        if key in gpu.fail:
            raise nvml_error(gpu.fail[key])
        return gpu

    # -- library -------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if isinstance(self.init_error, BaseException):
            raise self.init_error
        if self.init_error is not None:
            raise nvml_error(self.init_error)
        self.refcount += 1

    def nvmlShutdown(self) -> None:
        self._call("nvmlShutdown")
        self.refcount -= 1

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        self._call("nvmlSystemGetDriverVersion")
        if self.driver_version is None:
            raise nvml_error(_real.NVML_ERROR_UNKNOWN)
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._call("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        self._call("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise nvml_error(_real.NVML_ERROR_INVALID_ARGUMENT)
        handle = FakeHandle(self.gpus[index])
        self._device("nvmlDeviceGetHandleByIndex", handle)  # per-device failures
        return handle

    # -- static device fields ------------------------------------------------
    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:
        return self._call("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:
        return self._call("nvmlDeviceGetUUID", handle).uuid  # type: ignore[return-value]

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeHandle) -> int:
        gpu = self._call("nvmlDeviceGetEnforcedPowerLimit", handle)
        self._mig_unsupported(gpu)
        return gpu.power_limit_mw

    # -- dynamic device fields -----------------------------------------------
    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle, version: int | None = None) -> Any:
        if not version:
            gpu = self._call("nvmlDeviceGetMemoryInfo", handle)
            mem = _real.c_nvmlMemory_t()
            mem.total = gpu.total
            mem.used = gpu.used + gpu.reserved  # v1 folds reserved into used
            mem.free = gpu.total - mem.used
            return mem
        gpu = self._call("nvmlDeviceGetMemoryInfo_v2", handle)
        if version != _real.nvmlMemory_v2:
            raise nvml_error(_real.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        mem = _real.c_nvmlMemory_v2_t()
        mem.version = version
        mem.total = gpu.total
        mem.reserved = gpu.reserved
        mem.used = gpu.used
        mem.free = gpu.total - gpu.used - gpu.reserved
        return mem

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> Any:
        gpu = self._call("nvmlDeviceGetUtilizationRates", handle)
        self._mig_unsupported(gpu)
        util = _real.c_nvmlUtilization_t()
        util.gpu = gpu.util_gpu
        util.memory = gpu.util_memory
        return util

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        gpu = self._call("nvmlDeviceGetTemperature", handle)
        self._mig_unsupported(gpu)
        if sensor != _real.NVML_TEMPERATURE_GPU:
            raise nvml_error(_real.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.temperature

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        gpu = self._call("nvmlDeviceGetPowerUsage", handle)
        self._mig_unsupported(gpu)
        return gpu.power_mw

    @staticmethod
    def _mig_unsupported(gpu: FakeGpu) -> None:
        if gpu.is_mig:
            raise nvml_error(_real.NVML_ERROR_NOT_SUPPORTED)

    # -- processes -----------------------------------------------------------
    def _process_list(self, key: str, handle: FakeHandle, graphics: bool) -> list[Any]:
        gpu = self._call(key, handle)
        procs = gpu.graphics if graphics else gpu.compute
        out = []
        for pid, memory in procs.items():
            info = _real.c_nvmlProcessInfo_v2_t()
            info.pid = pid
            info.usedGpuMemory = NOT_AVAILABLE if memory is None else memory
            info.gpuInstanceId = info.computeInstanceId = 0xFFFFFFFF
            obj = _real.nvmlStructToFriendlyObject(info)
            if obj.usedGpuMemory == NOT_AVAILABLE:  # what pynvml does for WDDM
                obj.usedGpuMemory = None
            out.append(obj)
        return out

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: FakeHandle) -> list[Any]:
        return self._process_list("nvmlDeviceGetComputeRunningProcesses_v3", handle, False)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: FakeHandle) -> list[Any]:
        return self._process_list("nvmlDeviceGetComputeRunningProcesses_v2", handle, False)

    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, handle: FakeHandle) -> list[Any]:
        return self._process_list("nvmlDeviceGetGraphicsRunningProcesses_v3", handle, True)

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, handle: FakeHandle) -> list[Any]:
        return self._process_list("nvmlDeviceGetGraphicsRunningProcesses_v2", handle, True)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeHandle) -> list[Any]:
        return self._unversioned(self.nvmlDeviceGetComputeRunningProcesses_v3, handle)

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: FakeHandle) -> list[Any]:
        return self._unversioned(self.nvmlDeviceGetGraphicsRunningProcesses_v3, handle)

    @staticmethod
    def _unversioned(fn: Any, handle: FakeHandle) -> list[Any]:
        try:
            return fn(handle)
        except _real.NVMLError_FunctionNotFound:  # as pynvml's @throwOnVersionMismatch
            raise _real.NVMLLibraryMismatchError(
                "Unversioned function called and the pyNVML version does not match the NVML lib version."
            ) from None

    def nvmlDeviceGetProcessUtilization(self, handle: FakeHandle, timeStamp: int) -> list[Any]:
        gpu = self._call("nvmlDeviceGetProcessUtilization", handle)
        gpu.util_requests.append(timeStamp)
        self._mig_unsupported(gpu)
        newer = [s for s in gpu.util_samples if s[1] > timeStamp]
        if not newer:
            raise nvml_error(_real.NVML_ERROR_NOT_FOUND)
        array = (_real.c_nvmlProcessUtilizationSample_t * len(newer))()
        for slot, (pid, ts, sm, mem) in zip(array, newer):
            slot.pid, slot.timeStamp, slot.smUtil, slot.memUtil = pid, ts, sm, mem
        return array[0 : len(newer)]

    # -- MIG -------------------------------------------------------------------
    def nvmlDeviceGetMigMode(self, handle: FakeHandle) -> list[int]:
        gpu = self._call("nvmlDeviceGetMigMode", handle)
        if not gpu.mig_capable or gpu.is_mig:
            raise nvml_error(_real.NVML_ERROR_NOT_SUPPORTED)
        mode = _real.NVML_DEVICE_MIG_ENABLE if gpu.mig_enabled else _real.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeHandle) -> int:
        gpu = self._call("nvmlDeviceGetMaxMigDeviceCount", handle)
        if not gpu.mig_capable:
            raise nvml_error(_real.NVML_ERROR_NOT_SUPPORTED)
        return len(gpu.mig_slots)

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeHandle, index: int) -> FakeHandle:
        gpu = self._call("nvmlDeviceGetMigDeviceHandleByIndex", handle)
        if not 0 <= index < len(gpu.mig_slots):
            raise nvml_error(_real.NVML_ERROR_INVALID_ARGUMENT)
        child = gpu.mig_slots[index]
        if child is None or not gpu.mig_enabled:
            raise nvml_error(_real.NVML_ERROR_NOT_FOUND)
        return FakeHandle(child)
