"""The one interface the app uses to reach agents, real or simulated.

``AgentHub`` (app.core.agents.hub) talks to real agents over their sockets;
``DemoAgents`` (app.core.agents.demo) simulates some demo processes' agents.
Both are used the same way, so ``--demo`` exercises the same code paths.
"""

from __future__ import annotations

import abc
import collections
import threading
from collections.abc import Hashable, Iterable
from typing import TYPE_CHECKING

from app.core.agents.types import (
    AgentEntry,
    AgentReport,
    FreeCacheResult,
    ModelActionResult,
    ModelEvent,
)

if TYPE_CHECKING:
    from app.core.policies.pressure import PolicyRunner


class ModelEventLog:
    """Model unload/reload events of every agent, deduplicated, behind a cursor.

    Reports repeat an agent's last 64 events on every poll, and an action's
    reply carries its event too: each is kept once, keyed by (agent identity,
    seq).  Readers ask ``since(cursor)`` and get what arrived after their last
    call, oldest first, plus the cursor to pass next time.  Thread-safe.
    """

    def __init__(self, maxlen: int = 1024) -> None:
        self._lock = threading.Lock()
        self._items: collections.deque[tuple[int, int, ModelEvent]] = collections.deque(
            maxlen=maxlen)
        self._seen: dict[Hashable, set[int]] = {}
        self._next = 0

    def add(self, pid: int, events: Iterable[ModelEvent], key: Hashable | None = None) -> int:
        """Record the new ones among ``events`` of process ``pid``; returns how many.

        ``key`` names the agent (default ``pid``): pass (pid, create time) so a
        reused pid, whose agent counts seq from 1 again, is a different agent.
        """
        key = pid if key is None else key
        added = 0
        with self._lock:
            seen = self._seen.setdefault(key, set())
            for ev in events:
                if ev.seq in seen:
                    continue
                seen.add(ev.seq)
                self._items.append((self._next, pid, ev))
                self._next += 1
                added += 1
            if len(seen) > 4096:  # bounded: keep the newest seqs only
                keep = sorted(seen)[-1024:]
                seen.clear()
                seen.update(keep)
        return added

    def forget(self, keep: Iterable[Hashable]) -> None:
        """Drop the dedupe state of agents not in ``keep`` (their events stay)."""
        keep = set(keep)
        with self._lock:
            for key in [k for k in self._seen if k not in keep]:
                del self._seen[key]

    def since(self, cursor: int = 0) -> tuple[list[tuple[int, ModelEvent]], int]:
        with self._lock:
            out = [(pid, ev) for n, pid, ev in self._items if n >= cursor]
            return out, self._next



class AgentDirectory(abc.ABC):
    @abc.abstractmethod
    def reports(self) -> dict[int, AgentReport]:
        """Latest report per pid; never blocks on I/O (safe on any thread)."""

    @abc.abstractmethod
    def entries(self) -> list[AgentEntry]:
        """Agents currently registered (stale ones already pruned)."""

    @abc.abstractmethod
    def free_cache(self, pid: int, timeout_s: float = 30.0) -> FreeCacheResult:
        """gc.collect() + empty_cache() in process ``pid``.  Blocks: call it off the GUI thread."""

    @abc.abstractmethod
    def collect_garbage(self, pid: int, timeout_s: float = 30.0) -> dict:
        """gc.collect() alone; ``{"ok", "collected", "seconds", "error"}``."""

    # -- model manager (blocking: call off the GUI thread) ----------------------
    def unload(self, pid: int, model: str, to: str | None = "cpu", force: bool = False,
               reason: str = "manual", timeout_s: float = 300.0) -> ModelActionResult:
        """Offload a model's weights (to pinned host memory or to disk; None:
        the agent's default) and release the allocator cache; refused with a
        reason (``code="refused"``) when unsafe.  ``reason``: "manual" or
        "pressure" (automatic: pinned models refused, never forced)."""
        return ModelActionResult(pid, model, False, error="not supported", code="unsupported")

    def reload(self, pid: int, model: str, timeout_s: float = 300.0) -> ModelActionResult:
        return ModelActionResult(pid, model, False, error="not supported", code="unsupported")

    def pin(self, pid: int, model: str, pinned: bool, timeout_s: float = 10.0) -> ModelActionResult:
        return ModelActionResult(pid, model, False, error="not supported", code="unsupported")

    def set_idle_unload(self, pid: int, seconds: float | None, timeout_s: float = 10.0) -> dict:
        """The agent's own idle TTL for process ``pid`` (None = off):
        ``{"ok", "idle_unload_s", "error", "code"}``."""
        return {"ok": False, "idle_unload_s": None, "error": "not supported",
                "code": "unsupported"}

    # -- model events and the app's pressure policy (non-blocking) -------------
    #: Set by the Collector that drives the app's memory-pressure policy
    #: (app.core.policies.pressure.PolicyRunner): the GUI switches it on/off with
    #: ``pressure_policy.set_enabled(..)`` and draws ``decisions_since(cursor)``.
    pressure_policy: PolicyRunner | None = None

    def events_since(self, cursor: int = 0) -> tuple[list[tuple[int, ModelEvent]], int]:
        """Model unload/reload events seen since ``cursor``: ``([(pid, event)], new_cursor)``.

        Start with 0 (everything still kept, oldest first), then pass back the
        cursor returned.  Never blocks on I/O: safe on the GUI thread.
        Events come from the agents' reports (deduplicated by (agent, seq))
        and from the replies of this directory's own unload/reload calls.
        """
        return [], cursor

    def start(self) -> None:
        """Begin background polling (if any)."""

    def close(self) -> None:
        """Stop polling and release sockets; safe to call twice."""
