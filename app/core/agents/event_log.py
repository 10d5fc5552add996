"""The directories' own log of model events: each (agent, seq) once, behind a cursor.

Qt-free; thread-safe.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Hashable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.core.agents.types import ModelEvent


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


__all__ = ["ModelEventLog"]
