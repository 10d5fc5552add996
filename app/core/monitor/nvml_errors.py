"""NVML return codes and what each means for a field, a device or the source.

One mapping for every NVML call the source makes: an error either leaves one
field unknown (with a note saying why), marks the whole device (lost GPU,
device-level failure), or means the driver itself went away.  The codes are
part of the C ABI (nvml.h) and identical in every binding version; comparing
``err.value`` is cheaper than a chain of isinstance checks and works for any
pynvml-compatible module.
"""

from __future__ import annotations

from typing import Any

from app.core.monitor.source import SourceUnavailable

SUCCESS = 0
UNINITIALIZED = 1
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
DRIVER_NOT_LOADED = 9
TIMEOUT = 10
IRQ_ISSUE = 11
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
CORRUPTED_INFOROM = 14
GPU_IS_LOST = 15
RESET_REQUIRED = 16
LIB_RM_VERSION_MISMATCH = 18
ARGUMENT_VERSION_MISMATCH = 25

#: Errors meaning the driver itself is gone, not one device.
DRIVER_GONE = frozenset({UNINITIALIZED, DRIVER_NOT_LOADED, LIBRARY_NOT_FOUND})
#: Errors after which memory-info v2 is abandoned for v1 on that device.
MEM_V2_FALLBACK = frozenset({FUNCTION_NOT_FOUND, NOT_SUPPORTED, ARGUMENT_VERSION_MISMATCH})
#: Errors meaning "this GPU/driver will never report this field".
UNSUPPORTED = frozenset({NOT_SUPPORTED, FUNCTION_NOT_FOUND})
#: Errors about the device, not the field asked: the whole device is ERROR this tick.
DEVICE_LEVEL = frozenset({TIMEOUT, IRQ_ISSUE, CORRUPTED_INFOROM, RESET_REQUIRED,
                          LIB_RM_VERSION_MISMATCH})

# Notes shown for a field the GPU does not report (GpuSample.notes values).
NA_NOT_SUPPORTED = "n/a (not supported)"
NA_NO_PERMISSION = "n/a (no permission)"
NA_WDDM = "n/a (WDDM)"
NA_MIG = "n/a (MIG device)"
NA_MIG_PROCESS_MEMORY = "n/a (not reported on MIG)"
NA_SEE_MIG = "n/a (see MIG devices)"
LOST_MESSAGE = "GPU lost (fell off the bus)"


def na_note(err: Any) -> str:
    """Note for a field an NVML error left unknown this tick."""
    code = err.value
    if code in UNSUPPORTED:
        return NA_NOT_SUPPORTED
    if code == NO_PERMISSION:
        return NA_NO_PERMISSION
    return f"n/a ({err})"


def is_fatal(err: Any) -> bool:
    """Errors that must reach the device/driver level handlers."""
    return is_fatal_code(err.value)


def is_fatal_code(code: int) -> bool:
    """Lost GPU, driver gone or a device-level failure: more than one field."""
    return code == GPU_IS_LOST or code in DRIVER_GONE or code in DEVICE_LEVEL


def open_error(err: Any) -> SourceUnavailable:
    """Map an NVML error seen while opening to a user-facing reason."""
    code = getattr(err, "value", None)
    if code == LIBRARY_NOT_FOUND:
        return SourceUnavailable(
            "NVIDIA driver not found (libnvidia-ml is not installed)", "no_library")
    if code == DRIVER_NOT_LOADED:
        return SourceUnavailable("NVIDIA driver not loaded", "driver_not_loaded")
    if code == NO_PERMISSION:
        return SourceUnavailable("No permission to access the NVIDIA driver", "no_permission")
    if code == LIB_RM_VERSION_MISMATCH:
        return SourceUnavailable(
            "NVIDIA driver/library version mismatch: the loaded kernel driver differs from "
            "libnvidia-ml (usually after a driver update); reboot to fix",
            "version_mismatch",
        )
    return SourceUnavailable(f"NVML error: {err}", "nvml_error")
