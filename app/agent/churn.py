"""How much of a model's time its moves took, so that no storm of requests
can take the model from its own calls for long.

While a model is being unloaded its calls wait, and a call after an unload
waits for the reload: a client that loops unload / reload (or eight of them)
would leave the host almost no time to run its model.  Each model's moves
are timed (an unload from the moment its calls start to wait until it is
offloaded, a reload from start to end) and a new unload is admitted only
while those took at most ``SHARE`` of the last ``WINDOW_S``; a single long
unload is always admitted when the model has not been moved lately.
"""

from __future__ import annotations

import collections
import math
import time
import weakref
from typing import Any

from . import protocol
from .errors import ActionError

WINDOW_S = 10.0
SHARE = 0.1
#: An automatic unload (the idle timer, the app's pressure policy) never
#: takes a model that came back less than this long ago (the app's policy
#: reads the same constant).
RELOAD_GRACE_S = protocol.RELOAD_GRACE_S


class MoveTime:
    """The moves of one model in the last ``WINDOW_S``: (monotonic end, seconds)."""

    __slots__ = ("moves",)

    def __init__(self) -> None:
        self.moves: collections.deque = collections.deque()

    def add(self, end: float, seconds: float) -> None:
        self.moves.append((end, max(0.0, seconds)))
        self._forget(end)

    def _forget(self, now: float) -> None:
        while self.moves and self.moves[0][0] <= now - WINDOW_S:
            self.moves.popleft()

    def used(self, now: float) -> float:
        """Seconds of moves that ended within the window."""
        self._forget(now)
        return sum(s for _, s in self.moves)

    def wait_s(self, now: float) -> float:
        """How long until another unload is admitted (0: now)."""
        budget = SHARE * WINDOW_S
        used = self.used(now)
        if used <= budget:
            return 0.0
        for end, seconds in self.moves:
            used -= seconds
            if used <= budget:
                return max(0.0, end + WINDOW_S - now)
        return 0.0  # pragma: no cover - the loop always ends the excess


def busy_text(model_id: str | None, used_s: float, wait_s: float) -> str:
    return ("model %s was being moved for %.1f s of the last %d s; another unload can "
            "start in %d s" % (model_id, used_s, WINDOW_S, math.ceil(wait_s)))


class Moves:
    """Every model's ``MoveTime`` (by its guard) and the refusal they give."""

    def __init__(self) -> None:
        self._by_guard: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def of(self, g: Any) -> MoveTime:
        moved = self._by_guard.get(g)
        if moved is None:
            moved = self._by_guard[g] = MoveTime()
        return moved

    def note(self, g: Any, since: float) -> None:
        """A move of ``g``'s model that took its calls' time from ``since`` (monotonic)."""
        now = time.monotonic()
        self.of(g).add(now, now - since)

    def refuse_if_moved_lately(self, g: Any) -> None:
        """``busy`` while the model's moves took their share of the window."""
        moved = self.of(g)
        now = time.monotonic()
        wait = moved.wait_s(now)
        if wait > 0:
            raise ActionError(protocol.BUSY, busy_text(g.model_id, moved.used(now), wait))


def recently_reloaded(g: Any) -> str | None:
    """"reloaded 12 s ago" while an automatic unload must leave the model be
    (counted on the monotonic clock: a clock set back changes nothing)."""
    at = getattr(g, "reloaded_mono", None)
    if at is None:
        return None
    ago = time.monotonic() - at
    return "reloaded %d s ago" % max(0, ago) if ago < RELOAD_GRACE_S else None
