"""What the agent captures at the moment its process hits CUDA out of memory.

The allocator's OOM observer (``introspect.CudaWatch``) calls :meth:`OomLog.capture`
from the allocating thread, with the GIL held, after the allocator has already
released its lock and given back what its cache could give, just before it
raises ``OutOfMemoryError``.  The capture reads, cheaply and never raising:

* the allocator's figures for that device (``STATS``): the fast nested
  ``torch._C._cuda_memoryStats(i)`` (~16 us), else ``torch.cuda.memory_stats(i)``;
* a summary of the device's segments from ``torch.cuda.memory_snapshot()``:
  count, reserved, allocated, free (reserved but not allocated) and the largest
  free block (the largest ``inactive`` block): smaller than the request while
  ``free`` is larger means fragmentation explains the failure.  At most
  ``MAX_SEGMENTS`` segments and ``MAX_BLOCKS`` blocks are walked (a partial
  walk says so in ``errors``).  While the process records its allocation
  history (``_record_memory_history``) a snapshot would also convert every
  recorded trace entry with its frames (seconds, gigabytes): the snapshot is
  then taken without traces where torch allows it (``include_traces=False``)
  and skipped otherwise (``segments`` null, and ``errors`` says why).

Wire format (one dict per capture; the report's ``"ooms"`` holds the last
``MAX_CAPTURES``, oldest first, and the ``oom`` event carries the same dict)::

    {"seq", "time", "device", "uuid", "request", "limit", "free",
     "stats": {STAT_KEYS...}, "segments": {"count", "reserved", "allocated",
     "free", "largest_free_block", "expandable"} | null,
     "step", "thread", "capture_s", "errors": [str]}

One user-visible OOM may call the observer more than once (the allocator, or
code around it, frees what it can and tries the same request again).  A call
is taken as a repeat of the previous capture, and not captured again, when it
is for the same device and request size and no allocation succeeded on that
device in between (the allocator's cumulative allocation count is unchanged),
within ``REPEAT_WINDOW_S``; without that count, the same device and size
within ``REPEAT_WINDOW_S`` on the same thread.  ``repeats`` counts them.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

MAX_CAPTURES = 8
MAX_SEGMENTS = 4096
MAX_BLOCKS = 200_000
REPEAT_WINDOW_S = 2.0

#: Capture stat name -> path in ``_cuda_memoryStats``'s nested dict (the flat
#: ``memory_stats`` key is the path joined with dots).
STATS = (
    ("allocated", ("allocated_bytes", "all", "current")),
    ("reserved", ("reserved_bytes", "all", "current")),
    ("active", ("active_bytes", "all", "current")),
    ("inactive_split", ("inactive_split_bytes", "all", "current")),
    ("peak_allocated", ("allocated_bytes", "all", "peak")),
    ("peak_reserved", ("reserved_bytes", "all", "peak")),
    ("num_alloc_retries", ("num_alloc_retries",)),
    ("num_ooms", ("num_ooms",)),
)
#: Allocations that ever succeeded: unchanged between two calls means a retry.
ALLOC_COUNT = ("allocation", "all", "allocated")


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _nested(stats: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(stats, dict):
            return None
        stats = stats.get(key)
    return stats


def read_stats(torch: Any, device: int, errors: list[str]
               ) -> tuple[dict[str, int | None], int | None]:
    """(the ``STATS`` figures, the cumulative allocation count) of ``device``."""
    nested = None
    fast = getattr(getattr(torch, "_C", None), "_cuda_memoryStats", None)
    if callable(fast):
        try:
            nested = fast(device)
        except Exception:
            nested = None
    if isinstance(nested, dict):
        return ({name: _int(_nested(nested, path)) for name, path in STATS},
                _int(_nested(nested, ALLOC_COUNT)))
    try:
        flat = torch.cuda.memory_stats(device) or {}
    except Exception as exc:
        errors.append("memory_stats failed: %r" % (exc,))
        return dict.fromkeys(name for name, _ in STATS), None
    return ({name: _int(flat.get(".".join(path))) for name, path in STATS},
            _int(flat.get(".".join(ALLOC_COUNT))))


def history_enabled(torch: Any) -> bool | None:
    """Whether the process records its allocation history now (None: unknown)."""
    fn = getattr(getattr(torch, "_C", None), "_cuda_isHistoryEnabled", None)
    if not callable(fn):
        return None
    try:
        return bool(fn())
    except Exception:
        return None


def _snapshot_segments(torch: Any, errors: list[str]) -> Any:
    snap = torch.cuda.memory_snapshot
    if history_enabled(torch):
        try:
            return snap(include_traces=False)
        except TypeError:
            errors.append("segments skipped: allocation history is being recorded "
                          "(a snapshot would convert every recorded event)")
            return None
    return snap()


def segment_summary(torch: Any, device: int, errors: list[str]) -> dict[str, Any] | None:
    """The device's segments summed up (bytes), or None (``errors`` says why)."""
    try:
        segments = _snapshot_segments(torch, errors)
    except Exception as exc:
        errors.append("memory_snapshot failed: %r" % (exc,))
        return None
    if not isinstance(segments, list):
        return None
    count = reserved = allocated = largest = blocks_seen = 0
    expandable = False
    walked = 0
    for seg in segments:
        if walked >= MAX_SEGMENTS or blocks_seen >= MAX_BLOCKS:
            errors.append("segments: stopped after %d segments and %d blocks"
                          % (walked, blocks_seen))
            break
        walked += 1
        if not isinstance(seg, dict) or seg.get("device") != device:
            continue
        count += 1
        reserved += _int(seg.get("total_size")) or 0
        allocated += _int(seg.get("allocated_size")) or 0
        expandable = expandable or seg.get("is_expandable") is True
        blocks = seg.get("blocks")
        for block in blocks if isinstance(blocks, list) else ():
            blocks_seen += 1
            if isinstance(block, dict) and block.get("state") == "inactive":
                largest = max(largest, _int(block.get("size")) or 0)
    return {"count": count, "reserved": reserved, "allocated": allocated,
            "free": reserved - allocated, "largest_free_block": largest,
            "expandable": expandable}


class OomLog:
    """The last captures of this process (any thread; the lock is held only
    around the log itself, never around a torch call)."""

    def __init__(self) -> None:
        self._captures: collections.deque = collections.deque(maxlen=MAX_CAPTURES)
        self._seq = 0
        self._last: tuple | None = None  # (device, request, alloc count, thread, monotonic)
        self._lock = threading.Lock()
        self.repeats = 0

    def captures(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._captures)

    def _repeat(self, key: tuple) -> bool:
        last = self._last
        if last is None or key[4] - last[4] > REPEAT_WINDOW_S or key[:2] != last[:2]:
            return False
        if key[2] is not None and last[2] is not None:
            return key[2] == last[2]
        return key[3] == last[3]

    def capture(self, torch: Any, device: Any, request: Any, limit: Any, free: Any,
                uuid: Any = None, step: int | None = None) -> dict[str, Any] | None:
        """Capture one OOM; None for a repeat of the previous one.  Never raises
        (a capture that failed half-way is ``{}``: the event still goes out)."""
        try:
            return self._capture(torch, device, request, limit, free, uuid, step)
        except BaseException:
            return {}

    def _capture(self, torch: Any, device: Any, request: Any, limit: Any, free: Any,
                 uuid: Any, step: int | None) -> dict[str, Any] | None:
        started = time.perf_counter()
        index, size = _int(device), _int(request)
        errors: list[str] = []
        stats: dict[str, int | None] = dict.fromkeys(name for name, _ in STATS)
        count = None
        if index is not None and torch is not None:
            stats, count = read_stats(torch, index, errors)
        thread = threading.current_thread().name
        key = (index, size, count, thread, time.monotonic())
        with self._lock:
            if self._repeat(key):
                self._last = key
                self.repeats += 1
                return None
            self._last = key
            self._seq += 1
            seq = self._seq
        segments = None
        if index is not None and torch is not None:
            segments = segment_summary(torch, index, errors)
        data = {"seq": seq, "time": time.time(), "device": index,
                "uuid": uuid if isinstance(uuid, str) else None, "request": size,
                "limit": _int(limit), "free": _int(free), "stats": stats,
                "segments": segments, "step": _int(step), "thread": thread,
                "capture_s": time.perf_counter() - started, "errors": errors}
        with self._lock:
            self._captures.append(data)
        return data
