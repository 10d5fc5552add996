"""The ``record`` method: PyTorch's allocation history for a few seconds.

Runs on a thread of its own (never the agent's loop, never the action
worker: an unload is not held up for minutes).  CUDA only, and only once the
process has initialised CUDA.  Refused while the process's own code records
its history (``torch._C._cuda_isHistoryEnabled()``): the agent never turns
off, clears or reads a recording it did not start.  One recording at a time.

Turns on ``torch.cuda.memory._record_memory_history(enabled="all",
context="all", stacks="python", max_entries=N)`` (Python stacks only: C++
unwinding costs the host far more), tells the requesting connection it is on
(the ``record_started`` event: a client says "recording" only then), waits,
takes ``_snapshot()`` once, writes
it as ``_dump_snapshot`` would (a pickle of that dict, which PyTorch's
memory_viz page opens) to ``<state dir>/recordings/<pid>-<time>.pickle``
(mode 0600), and turns the history off in a ``finally``: also when the
snapshot or the file fails, when the app has gone away meanwhile, and when
the agent stops (``cancel``).  The reply summarises allocations by call site
(``app.core.agents.recording`` has the wire format), so the app never
unpickles the file.
"""

from __future__ import annotations

import os
import pickle
import threading
import time
from typing import Any

from . import log as _log
from . import paths, protocol
from .errors import ActionError, BadParams
from .introspect import cuda_initialized, loaded_torch
from .server.dispatch import herald

MIN_SECONDS, MAX_SECONDS = 1, 300
MIN_ENTRIES, MAX_ENTRIES, DEFAULT_ENTRIES = 1000, 500_000, 100_000
TOP_SITES = 25
_AGENT_DIR = os.path.dirname(os.path.abspath(__file__))
_FREES = ("free_requested", "free_completed")


def _number(params: dict[str, Any], name: str, low: int, high: int, default: Any) -> Any:
    value = params.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not low <= value <= high:
        raise BadParams("%s must be a number from %d to %d" % (name, low, high))
    return value


def parse_params(params: dict[str, Any]) -> tuple[float, int]:
    """(seconds, max_entries); raises BadParams."""
    seconds = _number(params, "seconds", MIN_SECONDS, MAX_SECONDS, None)
    entries = _number(params, "max_entries", MIN_ENTRIES, MAX_ENTRIES, DEFAULT_ENTRIES)
    if isinstance(entries, float) and not entries.is_integer():
        raise BadParams("max_entries must be a whole number")
    return float(seconds), int(entries)


def recordings_dir() -> str:
    """``<state dir>/recordings``, created 0700 in the private state dir;
    raises UnsafeDir or OSError (nothing is written in an unsafe one)."""
    return paths.ensure_private_dir(os.path.join(_log.private_state_dir(), "recordings"))


def _memory_api(torch: Any) -> Any:
    """torch.cuda.memory if it has what recording needs, else refuse."""
    memory = getattr(getattr(torch, "cuda", None), "memory", None)
    needed = ("_record_memory_history", "_snapshot")
    if memory is None or not all(callable(getattr(memory, n, None)) for n in needed) \
            or not callable(getattr(torch._C, "_cuda_isHistoryEnabled", None)):
        raise ActionError(protocol.REFUSED, "CUDA only: this torch cannot record its "
                                            "allocation history")
    return memory


def _site(frames: Any, torch_dir: str) -> str:
    """The innermost frame outside torch and the agent: "file.py:LINE in func"."""
    if not isinstance(frames, list) or not frames:
        return "(no Python frames)"
    chosen = None
    for frame in frames:  # innermost first
        if not isinstance(frame, dict):
            continue
        name = str(frame.get("filename", ""))
        if chosen is None:
            chosen = frame
        if not (torch_dir and name.startswith(torch_dir)) and not name.startswith(_AGENT_DIR):
            chosen = frame
            break
    if chosen is None:
        return "(no Python frames)"
    return "%s:%s in %s" % (os.path.basename(str(chosen.get("filename", "?"))),
                            chosen.get("line", "?"), chosen.get("name", "?"))


def summarise(snapshot: Any, torch_dir: str, top: int = TOP_SITES
              ) -> tuple[list[dict[str, Any]], int, int]:
    """(sites largest first, entries recorded, the most entries of one device)."""
    traces = snapshot.get("device_traces") if isinstance(snapshot, dict) else None
    sites: dict[str, list[int]] = {}  # site -> [bytes, count, live_bytes]
    entries = longest = 0
    for trace in traces if isinstance(traces, list) else ():
        if not isinstance(trace, list):
            continue
        entries += len(trace)
        longest = max(longest, len(trace))
        live: dict[Any, tuple[str, int]] = {}
        for event in trace:
            if not isinstance(event, dict):
                continue
            action, size = event.get("action"), event.get("size")
            if action == "alloc" and isinstance(size, int):
                site = _site(event.get("frames"), torch_dir)
                figures = sites.setdefault(site, [0, 0, 0])
                figures[0] += size
                figures[1] += 1
                live[event.get("addr")] = (site, size)
            elif action in _FREES:
                live.pop(event.get("addr"), None)
        for site, size in live.values():
            sites[site][2] += size
    ranked = sorted(sites.items(), key=lambda kv: -kv[1][0])[:top]
    return ([{"site": s, "bytes": f[0], "count": f[1], "live_bytes": f[2]} for s, f in ranked],
            entries, longest)


def write_private(path: str, snapshot: Any) -> None:
    """The snapshot as ``_dump_snapshot`` writes it, created 0600 (never replaced,
    never through a link) in a private dir."""
    paths.ensure_private_dir(os.path.dirname(path))
    fd = paths.create_private_file(path, os.O_WRONLY)
    with os.fdopen(fd, "wb") as f:
        pickle.dump(snapshot, f)


class Recorder:
    """One recording at a time; ``cancel`` ends a running one early."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.cancel = threading.Event()

    def handle(self, params: dict[str, Any]) -> dict[str, Any]:
        seconds, max_entries = parse_params(params)
        torch = loaded_torch()
        if torch is None or not cuda_initialized(torch):
            raise ActionError(protocol.REFUSED, "CUDA only: this process has not initialised "
                                                "CUDA")
        memory = _memory_api(torch)
        if not self._lock.acquire(blocking=False):
            raise ActionError(protocol.BUSY, "a recording is already running")
        try:
            if torch._C._cuda_isHistoryEnabled():
                raise ActionError(protocol.REFUSED, "the process's own code is recording its "
                                                    "allocation history: the agent leaves it "
                                                    "alone")
            return self._record(torch, memory, seconds, max_entries)
        finally:
            self._lock.release()

    def _record(self, torch: Any, memory: Any, seconds: float,
                max_entries: int) -> dict[str, Any]:
        try:
            folder = recordings_dir()
        except (paths.UnsafeDir, OSError) as exc:
            raise ActionError(protocol.REFUSED, "recordings are not written: %s" % exc) from None
        path = os.path.join(folder, "%d-%s-%03d.pickle" % (
            os.getpid(), time.strftime("%Y%m%d-%H%M%S"), int(time.time() * 1000) % 1000))
        self.cancel.clear()
        options = {"enabled": "all", "context": "all", "stacks": "python",
                   "max_entries": max_entries}
        started = time.monotonic()
        try:
            try:
                memory._record_memory_history(clear_history=True, **options)
            except TypeError:  # a torch without clear_history
                memory._record_memory_history(**options)
            started = time.monotonic()
            herald(protocol.RECORD_STARTED, {"seconds": seconds, "max_entries": max_entries})
            self.cancel.wait(seconds)
            elapsed = time.monotonic() - started
            snapshot = memory._snapshot()
        finally:
            try:
                memory._record_memory_history(enabled=None)
            except Exception:
                _log.log_exc("turning the allocation history off failed")
        write_private(path, snapshot)
        torch_dir = os.path.dirname(os.path.abspath(str(getattr(torch, "__file__", "") or "")))
        sites, entries, longest = summarise(snapshot, torch_dir + os.sep if torch_dir else "")
        _log.log("recorded %d allocation events in %.1f s to %s" % (entries, elapsed, path))
        return {"path": path, "entries": entries, "seconds": round(elapsed, 3), "device": None,
                "truncated": longest >= max_entries, "sites": sites}
