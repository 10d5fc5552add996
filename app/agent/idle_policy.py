"""The process's own idle timer: unload models idle for ``idle_unload_s``.

Set by ``set_policy {idle_unload_s}`` or ``VRAM_STEWARD_IDLE_UNLOAD=seconds``
at start, 10 s to 30 days (``protocol.IDLE_UNLOAD_MIN_S``..``IDLE_UNLOAD_MAX_S``:
the variable out of them is ignored with a line in agent.log); works with no
app running, like Ollama's keep-alive.  On each agent tick, resident models
whose weights are on a GPU, idle at least the TTL (see ``eligibility`` for the
idle clock) and with no automatic blocker are unloaded to "cpu" (reason
"idle"), one after another on a thread of their own so the agent keeps
answering.  In a model server that manages its own models (``managed``) the
timer unloads nothing: the server frees its models itself.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from . import log as _log
from . import managed
from .errors import ActionError
from .model_guard import RESIDENT
from .protocol import idle_unload_problem


def ttl_from_env() -> float | None:
    """The variable's timer; None when unset or unusable (never raises)."""
    env = os.environ.get("VRAM_STEWARD_IDLE_UNLOAD")
    if not env:
        return None
    try:
        value = float(env)
    except ValueError:
        problem: str | None = "must be a number of seconds"
    else:
        problem = idle_unload_problem(value)
    if problem is not None:
        _log.log("ignoring VRAM_STEWARD_IDLE_UNLOAD=%r: it %s" % (env, problem))
        return None
    return value


class IdlePolicy:
    """Picks idle models and unloads them through ``manager.unload``."""

    def __init__(self, manager: Any) -> None:
        self.manager = manager
        self.ttl_s: float | None = ttl_from_env()
        self._thread: threading.Thread | None = None

    def tick(self) -> None:
        ttl = self.ttl_s
        if ttl is None or managed.server() is not None:
            return
        thread = self._thread
        if thread is not None and thread.is_alive():
            return
        due = self.candidates(ttl)
        if not due:
            return
        self._thread = threading.Thread(target=self._unload, args=(due,),
                                        name="vram-steward-idle", daemon=True)
        self._thread.start()

    def candidates(self, ttl: float, now: float | None = None) -> list:
        """Ids of the models to unload now."""
        now = time.time() if now is None else now
        out = []
        tracker = self.manager.tracker
        for module in tracker.user_roots():
            g = tracker.guard(module)
            if g is None or g.state is not RESIDENT or now - g.idle_since < ttl:
                continue
            try:
                if self.manager.blocker(module, g) is None and not g.running_threads():
                    out.append(tracker.model_id(module))  # (not while a long call runs)
            except Exception:
                _log.log_exc("idle check failed")
        return [m for m in out if m]

    def _unload(self, model_ids: list) -> None:
        tracker = self.manager.tracker
        for model_id in model_ids:
            try:
                module = tracker.find(model_id)
                g = tracker.guard(module) if module is not None else None
                ttl = self.ttl_s
                if g is None or ttl is None or time.time() - g.idle_since < ttl:
                    continue  # used again since the tick looked
                if self.manager.blocker(module, g) is not None:
                    continue
                self.manager.unload(module, g, None, False, "idle", 0.0)
            except ActionError as exc:
                _log.log("idle unload of %s skipped: %s" % (model_id, exc))
            except Exception:
                _log.log_exc("idle unload of %s failed" % model_id)
