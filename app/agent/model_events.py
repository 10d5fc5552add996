"""The model events of one manager: a ring of the last ``EVENTS_KEPT`` and
the last event per model, pushed to subscribers as ``model_state``.

An event is a plain dict (``protocol`` docstring): ``seq`` orders them,
``time`` is epoch seconds, byte counts are bytes."""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

from . import figures as _fig

EVENTS_KEPT = 64


class ModelEvents:
    """Records events from any thread; ``emit(name, data)`` pushes each one."""

    def __init__(self, emit: Any = None) -> None:
        self.emit = emit
        self.events: collections.deque = collections.deque(maxlen=EVENTS_KEPT)
        self.seq = 0
        self.lock = threading.Lock()
        self.last: dict[str, dict] = {}

    def record(self, g: Any, module: Any, action: str, state: str, target: str | None,
               moved: int | None, released: int | None, seconds: float | None, reason: str,
               ok: bool, error: str | None, copy_seconds: float | None = None) -> dict:
        """One event of model ``g``; returns a copy of it."""
        name = _fig.friendly_name(module) if module is not None else (g.model_id or "?")
        with self.lock:
            self.seq += 1
            ev = {"seq": self.seq, "time": time.time(), "model": g.model_id, "name": name,
                  "action": action, "state": state, "target": target, "bytes_moved": moved,
                  "bytes_released": released, "seconds": seconds, "reason": reason, "ok": ok,
                  "error": error}
            if copy_seconds is not None:
                ev["copy_seconds"] = copy_seconds  # an unload's copy phase alone
            self.events.append(ev)
            self.last[g.model_id or "?"] = ev
        emit = self.emit
        if emit is not None:
            try:
                emit("model_state", dict(ev))
            except Exception:
                pass
        return dict(ev)

    def recent(self) -> list:
        with self.lock:
            return [dict(e) for e in self.events]

    def reinit_after_fork(self) -> None:
        """A lock another thread held at fork time would stay held in the child."""
        self.lock = threading.Lock()
