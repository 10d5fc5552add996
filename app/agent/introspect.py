"""The ``report`` method's result, CUDA allocator figures and the OOM observer.

Never imports torch and never initialises CUDA: CUDA figures are read only
when ``torch.cuda.is_initialized()`` says a context already exists.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from . import log as _log
from . import managed, oom_capture, protocol
from .registry import command_line

DEVICE_KEYS = (
    ("allocated", "allocated_bytes.all.current"),
    ("reserved", "reserved_bytes.all.current"),
    ("peak_allocated", "allocated_bytes.all.peak"),
    ("peak_reserved", "reserved_bytes.all.peak"),
    ("active", "active_bytes.all.current"),
    ("inactive_split", "inactive_split_bytes.all.current"),
    ("requested", "requested_bytes.all.current"),
    ("num_alloc_retries", "num_alloc_retries"),
    ("num_ooms", "num_ooms"),
)


def loaded_torch() -> Any:
    """The torch module if it is imported (and finished importing), else None."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    spec = getattr(torch, "__spec__", None)
    if getattr(spec, "_initializing", False):
        return None  # another thread is importing it right now
    return torch


def cuda_initialized(torch: Any) -> bool:
    if torch is None:
        return False
    cuda = getattr(torch, "cuda", None)
    fn = getattr(cuda, "is_initialized", None)
    try:
        return bool(fn()) if callable(fn) else False
    except Exception:
        return False


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


_UUIDS: dict[int, Any] = {}


def _device_uuid(cuda: Any, index: int) -> Any:
    """The device's UUID as CUDA reports it (cached: it never changes).

    CUDA ordinals are renumbered by CUDA_VISIBLE_DEVICES; the UUID is what
    lets the app put these figures on the right NVML device.
    """
    if index not in _UUIDS:
        uuid = None
        try:
            raw = getattr(cuda.get_device_properties(index), "uuid", None)
            uuid = str(raw) if raw is not None else None
        except Exception:
            uuid = None
        _UUIDS[index] = uuid
    return _UUIDS[index]


def device_figures(torch: Any) -> list[dict[str, Any]]:
    """Per-device allocator figures; call only when CUDA is initialised."""
    cuda = torch.cuda
    out = []
    for index in range(int(cuda.device_count())):
        stats = cuda.memory_stats(index) or {}
        entry: dict[str, Any] = {"index": index, "uuid": _device_uuid(cuda, index)}
        for name, key in DEVICE_KEYS:
            entry[name] = _int_or_none(stats.get(key))
        out.append(entry)
    return out


class CudaWatch:
    """OOM observer + alloc-retry watch; ``emit(event, data)`` queues an event.

    ``oom_events`` counts every call of the observer; ``ooms`` keeps the
    captures (``oom_capture``: a retry of the same request is not captured
    twice); ``steps`` (an ``OptimizerSteps``) says how far training got."""

    _attached_process = False  # observers cannot be removed: attach once per process
    _queued_process = False  # queued with torch's lazy CUDA init (once per process)
    _current: CudaWatch | None = None

    def __init__(self, emit: Callable[[str, dict], None]) -> None:
        self.emit = emit
        self.oom_events = 0
        self._retries: dict[int, int] = {}
        self._lock = threading.Lock()
        self.ooms = oom_capture.OomLog()
        self.steps: Any = None

    def activate(self) -> None:
        CudaWatch._current = self

    def deactivate(self) -> None:
        if CudaWatch._current is self:
            CudaWatch._current = None

    @staticmethod
    def _observer(device: Any, alloc: Any, device_allocated: Any, device_free: Any) -> None:
        # Called by the allocator with the GIL held (its own lock released),
        # before OutOfMemoryError is raised: must never raise (an exception
        # would propagate into it).  Arguments: device, the failed request,
        # the device's total (or the memory-fraction cap), the driver's free.
        try:
            watch = CudaWatch._current
            if watch is None:
                return
            with watch._lock:
                watch.oom_events += 1
            capture = watch._capture(device, alloc, device_allocated, device_free)
            if capture is None:
                return  # a retry of the OOM just captured and pushed
            # Only ints go on the wire: anything else would make the event
            # frame unencodable (subscribers would get an error frame instead).
            data = {"device": _int_or_none(device), "alloc": _int_or_none(alloc),
                    "device_allocated": _int_or_none(device_allocated),
                    "device_free": _int_or_none(device_free), "time": time.time()}
            if capture is not None:
                data.update(capture)
            watch.emit("oom", data)
        except BaseException:
            pass

    def _capture(self, device: Any, alloc: Any, limit: Any, free: Any) -> dict | None:
        torch = loaded_torch()
        index = _int_or_none(device)
        uuid = None
        if torch is not None and index is not None:
            try:
                uuid = _device_uuid(torch.cuda, index)
            except Exception:
                uuid = None
        steps = self.steps
        count = getattr(steps, "count", 0) if steps is not None else 0
        return self.ooms.capture(torch, device, alloc, limit, free, uuid,
                                 count if isinstance(count, int) and count > 0 else None)

    def attach(self, torch: Any) -> None:
        if CudaWatch._attached_process:
            return
        fn = getattr(getattr(torch, "_C", None), "_cuda_attach_out_of_memory_observer", None)
        if not callable(fn):
            CudaWatch._attached_process = True  # nothing to attach in this build
            return
        try:
            fn(CudaWatch._observer)
            _log.log("OOM observer attached")
        except Exception:
            _log.log_exc("attaching the OOM observer failed")
        CudaWatch._attached_process = True

    def attach_at_init(self, torch: Any) -> None:
        """Have torch attach the observer as it initialises CUDA (the user's
        thread, ``torch.cuda._lazy_call``), so an OOM within the first tick
        after initialisation is captured too; at once if CUDA is up already.
        Never raises, into this call or into torch's initialisation."""
        if CudaWatch._queued_process or CudaWatch._attached_process:
            return
        lazy = getattr(getattr(torch, "cuda", None), "_lazy_call", None)
        if not callable(lazy):
            return
        CudaWatch._queued_process = True

        def attach() -> None:
            try:
                watch = CudaWatch._current
                if watch is not None:
                    watch.attach(torch)
            except BaseException:
                pass

        try:
            lazy(attach)
        except Exception:
            _log.log_exc("queueing the OOM observer with CUDA's initialisation failed")

    def tick(self, torch: Any, devices: list | None = None) -> None:
        """Attach the observer once CUDA is up; emit alloc_retries on increases."""
        if torch is None or not cuda_initialized(torch):
            return
        self.attach(torch)
        if devices is None:
            devices = device_figures(torch)
        for dev in devices:
            retries = dev.get("num_alloc_retries")
            if retries is None:
                continue
            before = self._retries.get(dev["index"])
            self._retries[dev["index"]] = retries
            if before is not None and retries > before:
                self.emit("alloc_retries", {"device": dev["index"], "num_alloc_retries": retries,
                                            "new": retries - before, "time": time.time()})


def build_report(agent_version: str, tracker: Any, watch: CudaWatch,
                 params: dict[str, Any], manager: Any = None) -> dict[str, Any]:
    errors: list[str] = []
    torch = loaded_torch()
    version = getattr(torch, "__version__", None) if torch is not None else None
    report: dict[str, Any] = {
        "pid": _pid(), "argv": command_line(), "python": "%d.%d.%d" % tuple(sys.version_info[:3]),
        "executable": sys.executable, "agent": agent_version,
        "protocol": protocol.PROTOCOL_VERSION,
        "torch": str(version) if version is not None else None,
        "torch_status": "loaded" if torch is not None else "torch not loaded",
        "cuda_initialized": False, "allocator_backend": None, "devices": [],
        "models": [], "oom_events": watch.oom_events, "ooms": watch.ooms.captures(),
        "steps": watch.steps.to_json() if watch.steps is not None else None,
        "errors": errors,
        "discovery": {"method": None, "scan_seconds": None, "modules_tracked": 0},
        "events": manager.recent_events() if manager is not None else [],
        "policy": manager.policy() if manager is not None else {"idle_unload_s": None},
        "managed_by": managed.server(),  # a model server that unloads its models itself
    }
    if torch is None:
        if "torch" in sys.modules:
            errors.append("torch is being imported")
        return report
    init = cuda_initialized(torch)
    report["cuda_initialized"] = init
    if init:
        try:
            backend = getattr(torch.cuda, "get_allocator_backend", None)
            if callable(backend):
                report["allocator_backend"] = str(backend())
        except Exception as exc:
            errors.append("allocator backend: %r" % (exc,))
        try:
            report["devices"] = device_figures(torch)
            watch.tick(torch, report["devices"])
        except Exception as exc:
            errors.append("memory_stats failed: %r" % (exc,))
    if params.get("models", True) and tracker is not None:
        try:
            tracker.refresh(torch)
            tracker.maybe_group()
            report["models"] = tracker.models(
                errors, manager.annotate if manager is not None else None)
        except Exception as exc:
            _log.log_exc("model discovery failed")
            errors.append("model discovery failed: %r" % (exc,))
        report["discovery"] = {"method": tracker.method, "scan_seconds": tracker.scan_seconds,
                               "modules_tracked": tracker.tracked}
    return report


def _pid() -> int:
    import os
    return os.getpid()
