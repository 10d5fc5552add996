"""Weights shared with other processes: never moved.

An unload followed by a reload puts a model on new storage.  For memory only
this process sees, nobody can tell; for memory other processes see too, it
cuts them off: after ``model.share_memory()`` (Hogwild, torch.multiprocessing
workers) the parent would update its new copy while its workers train the
old one.  So a model is refused when any of its storages is

* mapped shared in this process (``share_memory()``, a tensor received from
  or sent to another process on the CPU, ``/dev/shm``, a file mapped with
  ``MAP_SHARED``): the mapping's flags in ``/proc/self/maps`` say so.  A
  private mapping (a safetensors file loaded on the CPU) is not shared, nor
  is a device's mapping, nor page-locked host memory: drivers map it from
  ``/dev/nvidiactl`` or as shared anonymous memory (``/dev/zero``), and no
  other process sees it (a shared anonymous mapping that is not page-locked
  still counts: ``fork()`` children share it);
* known to ``torch.multiprocessing`` (its ``shared_cache`` holds a weak
  reference to every storage sent or received through it, CUDA IPC handles
  included).

Without ``/proc`` the storage's own ``is_shared()`` decides for CPU memory.
A process with no shared mapping and nothing sent through
torch.multiprocessing (the usual case) is answered without looking at a
single tensor.  Read-only, never raises, never imports torch.
"""

from __future__ import annotations

import bisect
import sys
import time
import weakref
from typing import Any

from . import figures as _fig
from .storage import devices

#: The short label a blocked model carries in the report.
BLOCKER = "shared memory"
REFUSAL = ("its weights are shared with other processes (share_memory(), "
           "torch.multiprocessing, /dev/shm or a file mapped shared): moved, they would "
           "leave those processes on the old copy")
#: How long the mappings read for one report are used for the next.
MAPS_TTL_S = 1.0
#: Shared mappings of these device files are memory other processes may see.
_SHARED_DEVICES = (b"/dev/shm/", b"/dev/zero")
#: How Linux names a shared anonymous mapping (page-locked memory, on some drivers).
_ANONYMOUS = b"/dev/zero"

_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _ipc_storages() -> frozenset:
    """The storages torch.multiprocessing sent or received (their ``_cdata``)."""
    reductions = sys.modules.get("torch.multiprocessing.reductions")
    cache = getattr(reductions, "shared_cache", None)
    if not isinstance(cache, dict):
        return frozenset()
    try:
        # A live weak reference keeps its StorageImpl's address from reuse.
        return frozenset(getattr(ref, "cdata", None) for ref in list(dict.values(cache)))
    except Exception:
        return frozenset()


def _other_processes_see(path: bytes) -> bool:
    """Is a shared mapping of ``path`` memory other processes may map too?"""
    if path.startswith(b"/dev/"):
        return path.startswith(_SHARED_DEVICES)
    return True  # anonymous shared, memfd, SysV, /dev/shm, a regular file


class SharedMaps:
    """The shared (``s``) mappings of this process other processes may see,
    for address lookups."""

    def __init__(self, starts: list, ends: list, anonymous: frozenset = frozenset()) -> None:
        self.starts = starts
        self.ends = ends
        self.anonymous = anonymous  # starts of the shared anonymous mappings

    @property
    def key(self) -> tuple:
        return tuple(self.starts)

    @classmethod
    def read(cls) -> SharedMaps | None:
        """None where ``/proc/self/maps`` cannot be read."""
        starts: list = []
        ends: list = []
        anonymous = set()
        try:
            with open("/proc/self/maps", "rb") as f:
                for line in f:
                    fields = line.split(None, 5)
                    if len(fields) < 2 or fields[1][3:4] != b"s":
                        continue
                    path = fields[5].strip() if len(fields) == 6 else b""
                    if not _other_processes_see(path):
                        continue
                    lo, _, hi = fields[0].partition(b"-")
                    starts.append(int(lo, 16))
                    ends.append(int(hi, 16))
                    if path.startswith(_ANONYMOUS):
                        anonymous.add(starts[-1])
        except (OSError, ValueError):
            return None
        return cls(starts, ends, frozenset(anonymous))

    def covers(self, address: int) -> bool:
        return self.mapping(address) is not None

    def mapping(self, address: int) -> int | None:
        """The start of the shared mapping holding ``address``, or None."""
        i = bisect.bisect_right(self.starts, address) - 1
        return self.starts[i] if i >= 0 and address < self.ends[i] else None


def _is_shared_flag(storage: Any) -> bool:
    try:
        return bool(storage.is_shared())
    except Exception:
        return False


def _page_locked(storage: Any) -> bool:
    """Page-locked by the CUDA driver (process-private).  Asked only once CUDA
    is initialised: there is no page-locked memory before, and the question
    must not start it."""
    cuda = sys.modules.get("torch.cuda")
    try:
        return bool(cuda is not None and cuda.is_initialized() and storage.is_pinned())
    except Exception:
        return False


_maps: tuple[float, SharedMaps | None] | None = None


def _shared_maps(fresh: bool) -> SharedMaps | None:
    """The shared mappings, read at most once a second unless ``fresh``."""
    global _maps
    now = time.monotonic()
    if fresh or _maps is None or now - _maps[0] > MAPS_TTL_S:
        _maps = (now, SharedMaps.read())
    return _maps[1]


def shared_storage(tensors: list, fresh: bool = True) -> bool:
    """Does any of ``tensors`` view storage shared with other processes?
    ``fresh``: read the mappings now (an unload), else within a second (a report)."""
    ipc = _ipc_storages()
    maps = _shared_maps(fresh)
    if not ipc and maps is not None and not maps.starts:
        return False  # nothing in this process is shared
    for t in tensors:
        try:
            st = t.untyped_storage()
            if not st.nbytes():
                continue
            if ipc and st._cdata in ipc:
                return True
            if devices.is_cuda(t.device) or t.device.type != "cpu":
                continue
            if maps is None:
                if _is_shared_flag(st):
                    return True
            else:
                start = maps.mapping(int(st.data_ptr()))
                if start is not None and not (start in maps.anonymous and _page_locked(st)):
                    return True
        except Exception:
            continue
    return False


def blocker(module: Any, figures: dict) -> str | None:
    """``BLOCKER`` when ``module``'s weights are shared with other processes.
    The answer is kept while the model's tensors, this process's shared
    mappings and torch.multiprocessing's record stay the same."""
    try:
        maps = _shared_maps(False)
        key = (maps.key if maps is not None else None, _ipc_storages(),
               figures.get("tensor_ids"))
        cached = _cache.get(module)
        if cached is not None and cached[0] == key:
            return cached[1]
        answer = BLOCKER if shared_storage(_fig.tensors(module, grads=True),
                                           fresh=False) else None
        _cache[module] = (key, answer)
        return answer
    except Exception:
        return None
