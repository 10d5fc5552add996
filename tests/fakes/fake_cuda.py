"""A fake at the ``torch.cuda`` boundary, for the agent's CUDA code paths.

There is no GPU in CI: the real (CPU) torch module is patched where the
agent touches CUDA (``torch.cuda.is_initialized``, ``device_count``,
``memory_stats``, ``device``, ``empty_cache``, the OOM observer hook, and,
with ``allocator=True``, ``memory_snapshot``, ``torch._C._cuda_memoryStats``
and the allocation history: ``torch.cuda.memory._record_memory_history``,
``_snapshot`` and ``torch._C._cuda_isHistoryEnabled``).  Every fake records
its calls with the calling thread.  ``install`` takes pytest's
``monkeypatch`` (undone after the test) or a :class:`Patcher` (a child
process: never undone).  The shapes are those torch 2.11 returns on a real
H100 (``memory_snapshot`` segments and blocks, ``_snapshot``'s
``device_traces``, the nested ``_cuda_memoryStats``).
"""

from __future__ import annotations

import contextlib
import copy
import threading
import types
from typing import Any

GiB = 1 << 30
MiB = 1 << 20


def native_stats(allocated: int, reserved: int, *, retries: int = 0, ooms: int = 0) -> dict:
    """A memory_stats() dict shaped like the native caching allocator's."""
    return {
        "active.all.current": 12, "active.all.peak": 40,
        "active_bytes.all.current": allocated + 3 * MiB,
        "active_bytes.all.peak": allocated + 9 * MiB,
        "active_bytes.large_pool.current": allocated,
        "active_bytes.small_pool.current": 3 * MiB,
        "allocated_bytes.all.allocated": 50 * GiB,
        "allocated_bytes.all.current": allocated,
        "allocated_bytes.all.freed": 50 * GiB - allocated,
        "allocated_bytes.all.peak": allocated + 1 * GiB,
        "allocated_bytes.large_pool.current": allocated - 1 * MiB,
        "allocated_bytes.small_pool.current": 1 * MiB,
        "allocation.all.current": 10,
        "inactive_split.all.current": 2,
        "inactive_split_bytes.all.current": 5 * MiB,
        "max_split_size": -1,
        "num_alloc_retries": retries,
        "num_device_alloc": 30, "num_device_free": 4,
        "num_ooms": ooms,
        "num_sync_all_streams": 0,
        "oversize_allocations.current": 0,
        "requested_bytes.all.current": allocated - 512,
        "requested_bytes.all.peak": allocated + 1 * GiB - 512,
        "reserved_bytes.all.allocated": reserved + 2 * GiB,
        "reserved_bytes.all.current": reserved,
        "reserved_bytes.all.freed": 2 * GiB,
        "reserved_bytes.all.peak": reserved + 2 * GiB,
        "reserved_bytes.large_pool.current": reserved - 2 * MiB,
        "reserved_bytes.small_pool.current": 2 * MiB,
        "segment.all.current": 8,
    }


class FakeCuda:
    """Stands in for torch.cuda on the real torch module; records every call.

    ``stats[i]`` is what ``memory_stats(i)`` returns; ``empty_cache()`` drops
    the *currently selected* device's reserved bytes to ``after_empty[i]``
    (so a free_cache that forgets to select the device frees nothing there).
    """

    def __init__(self, stats: list[dict] | None = None, *, initialized: bool = True,
                 backend: str = "native", after_empty: dict[int, int] | None = None) -> None:
        self.stats = [dict(s) for s in (stats or [])]
        self.initialized = initialized
        self.backend = backend
        self.after_empty = dict(after_empty or {})
        self.calls: list[tuple] = []  # (name, thread ident, thread name, args)
        self.empty_calls: list[tuple] = []  # (thread ident, thread name, current device)
        self.observers: list[Any] = []
        self.empty_error: BaseException | None = None
        self.stats_error: BaseException | None = None
        self.contexts: set[int] | None = None  # None: no _cuda_hasPrimaryContext
        self.segments: list[dict] = []  # what memory_snapshot() returns
        self.snapshot_error: BaseException | None = None
        self.history_enabled = False  # torch._C._cuda_isHistoryEnabled()
        self.history_calls: list[dict] = []  # _record_memory_history's arguments
        self.traces: list[list[dict]] = []  # _snapshot()'s device_traces
        self.history_snapshot_error: BaseException | None = None
        self._local = threading.local()
        self._lock = threading.Lock()

    # -- bookkeeping
    def _record(self, name: str, *args: Any) -> None:
        t = threading.current_thread()
        with self._lock:
            self.calls.append((name, t.ident, t.name, args))

    def names(self, thread: int | None = None) -> list[str]:
        with self._lock:
            return [c[0] for c in self.calls if thread is None or c[1] == thread]

    def current(self) -> int | None:
        return getattr(self._local, "device", None)

    # -- the torch.cuda surface
    def is_initialized(self) -> bool:
        self._record("is_initialized")
        return self.initialized

    def device_count(self) -> int:
        self._record("device_count")
        return len(self.stats)

    def memory_stats(self, device: Any = None) -> dict:
        self._record("memory_stats", device)
        if self.stats_error is not None:
            raise self.stats_error
        return dict(self.stats[device])

    def get_allocator_backend(self) -> str:
        self._record("get_allocator_backend")
        return self.backend

    def get_device_properties(self, device: Any = None) -> Any:
        self._record("get_device_properties", device)
        return types.SimpleNamespace(name="Fake GPU", total_memory=80 * GiB,
                                     uuid="GPU-fake-%d" % device)

    @contextlib.contextmanager
    def device(self, index: int):
        self._record("device", index)
        prev = self.current()
        self._local.device = index
        try:
            yield
        finally:
            self._local.device = prev

    def empty_cache(self) -> None:
        self._record("empty_cache")
        t = threading.current_thread()
        cur = self.current()
        with self._lock:
            self.empty_calls.append((t.ident, t.name, cur))
        if self.empty_error is not None:
            raise self.empty_error
        if cur is not None and cur in self.after_empty:
            self.stats[cur]["reserved_bytes.all.current"] = self.after_empty[cur]

    def attach_oom_observer(self, fn: Any) -> None:
        self._record("attach_oom_observer")
        self.observers.append(fn)

    def has_primary_context(self, index: int) -> bool:
        self._record("has_primary_context", index)
        return self.contexts is None or index in self.contexts

    # -- the allocator's snapshot, nested stats and history (``allocator=True``)
    def memory_snapshot(self, mempool_id: Any = None, include_traces: bool = True) -> list:
        self._record("memory_snapshot", include_traces)
        if self.snapshot_error is not None:
            raise self.snapshot_error
        return copy.deepcopy(self.segments)

    def memory_stats_nested(self, device: Any) -> dict:
        self._record("_cuda_memoryStats", device)
        if self.stats_error is not None:
            raise self.stats_error
        return nested(self.stats[device])

    def is_history_enabled(self) -> bool:
        self._record("_cuda_isHistoryEnabled")
        return self.history_enabled

    def record_memory_history(self, enabled: Any = "all", context: Any = "all",
                              stacks: str = "all", max_entries: int = 2 ** 63 - 1,
                              device: Any = None, clear_history: bool = False,
                              **kwargs: Any) -> None:
        self._record("_record_memory_history", enabled)
        with self._lock:
            self.history_calls.append({"enabled": enabled, "context": context,
                                       "stacks": stacks, "max_entries": max_entries,
                                       "clear_history": clear_history, **kwargs})
        self.history_enabled = enabled is not None

    def snapshot(self, device: Any = None, augment_with_fx_traces: bool = False) -> dict:
        self._record("_snapshot")
        if self.history_snapshot_error is not None:
            raise self.history_snapshot_error
        return {"segments": copy.deepcopy(self.segments),
                "device_traces": copy.deepcopy(self.traces),
                "allocator_settings": {}, "external_annotations": []}

    def forbidden(self, name: str):
        def call(*args: Any, **kwargs: Any) -> Any:
            self._record(name, *args)
            raise AssertionError("torch.cuda.%s must not be called" % name)
        return call


def nested(flat: dict) -> dict:
    """``torch._C._cuda_memoryStats``'s nested dict for a flat ``memory_stats`` one."""
    out: dict = {}
    for key, value in flat.items():
        parts = key.split(".")
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def block(size: int, state: str, address: int = 0, frames: list | None = None) -> dict:
    return {"address": address, "size": size, "requested_size": size if state != "inactive"
            else 0, "state": state, "frames": frames or []}


def segment(blocks: list[dict], device: int = 0, address: int = 0,
            expandable: bool = False) -> dict:
    """A ``memory_snapshot()`` segment holding ``blocks`` (sizes summed as torch does)."""
    total = sum(b["size"] for b in blocks)
    allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    return {"device": device, "address": address, "total_size": total,
            "allocated_size": allocated, "active_size": allocated,
            "requested_size": allocated, "stream": 0, "segment_type": "large",
            "segment_pool_id": (0, 0), "is_expandable": expandable, "frames": [],
            "blocks": blocks}


def frame(filename: str, line: int, name: str) -> dict:
    return {"name": name, "filename": filename, "line": line}


class Patcher:
    """``monkeypatch``'s setattr / delattr for a child process (never undone)."""

    def setattr(self, target: Any, name: str, value: Any, raising: bool = True) -> None:
        setattr(target, name, value)

    def delattr(self, target: Any, name: str, raising: bool = True) -> None:
        if hasattr(target, name):
            delattr(target, name)


# Anything CUDA-ish the agent could reach for besides the fakes: when CUDA is
# not initialised, none of these (nor the fakes) may be called.
OTHER_CUDA = ("init", "_lazy_init", "current_device", "set_device", "synchronize",
              "mem_get_info", "memory_allocated", "memory_reserved", "max_memory_allocated",
              "memory_summary", "memory_snapshot", "reset_peak_memory_stats", "ipc_collect",
              "get_device_name", "get_device_capability", "current_stream")
OTHER_C = ("_cuda_init", "_cuda_emptyCache", "_cuda_memoryStats", "_cuda_getDeviceCount",
           "_cuda_getAllocatorBackend", "_cuda_exchangeDevice", "_cuda_maybeExchangeDevice",
           "_cuda_setDevice", "_cuda_isHistoryEnabled", "_cuda_record_memory_history",
           "_cuda_memorySnapshot")


def install(patch: Any, torch: Any, fake: FakeCuda, allocator: bool = False) -> FakeCuda:
    """Put ``fake`` in place of torch.cuda on the real ``torch``; everything
    else CUDA-ish raises.  ``allocator``: also the snapshot, the nested stats
    and the allocation history."""
    cuda = torch.cuda
    for name in ("is_initialized", "device_count", "memory_stats", "get_allocator_backend",
                 "get_device_properties", "device", "empty_cache"):
        patch.setattr(cuda, name, getattr(fake, name))
    for name in OTHER_CUDA:
        patch.setattr(cuda, name, fake.forbidden(name), raising=False)
    for name in OTHER_C:
        patch.setattr(torch._C, name, fake.forbidden("_C." + name), raising=False)
    for name in ("_record_memory_history", "_snapshot", "_dump_snapshot"):
        patch.setattr(cuda.memory, name, fake.forbidden("memory." + name), raising=False)
    patch.setattr(torch._C, "_cuda_attach_out_of_memory_observer", fake.attach_oom_observer,
                  raising=False)
    if fake.contexts is not None:
        patch.setattr(torch._C, "_cuda_hasPrimaryContext", fake.has_primary_context,
                      raising=False)
    else:
        patch.delattr(torch._C, "_cuda_hasPrimaryContext", raising=False)
    if allocator:
        patch.setattr(cuda, "memory_snapshot", fake.memory_snapshot)
        patch.setattr(torch._C, "_cuda_memoryStats", fake.memory_stats_nested, raising=False)
        patch.setattr(torch._C, "_cuda_isHistoryEnabled", fake.is_history_enabled,
                      raising=False)
        patch.setattr(cuda.memory, "_record_memory_history", fake.record_memory_history)
        patch.setattr(cuda.memory, "_snapshot", fake.snapshot)
    return fake
