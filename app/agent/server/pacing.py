"""Requests paced per client process, refusals held back: no storm of
requests can take the host's time.

Every request a handler answers runs Python in the host's interpreter (the
agent thread, or a worker), and so takes turns with the user's own threads
for the interpreter.  Two rules keep a storm of same-user requests cheap:

* Pacing: each client process (its pid from SO_PEERCRED; over TCP each
  connection) may send ``burst`` requests at once, then one per
  ``interval_s``.  A request beyond that is not refused: it waits in the
  agent for its turn (a generic cell rate algorithm), so a client that waits
  for its answers is merely slowed to that rate.  ``hello``, ``ping``,
  ``auth`` and ``subscribe`` are never paced.
* A ``busy``, ``refused`` or ``managed`` answer of an action is sent
  ``REFUSAL_DELAY_S`` late: a client retrying in a loop waits between tries,
  while a person clicking Unload does not notice a quarter of a second.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any

from .. import protocol

REFUSAL_DELAY_S = 0.25
_HELD_BACK = (protocol.BUSY, protocol.REFUSED, protocol.MANAGED)
#: Requests one client may have waiting for their turn; beyond, it is closed.
MAX_WAITING = 64
UNPACED = frozenset({"auth", "hello", "ping", "subscribe"})


class Pacer:
    """When each client's next request may run (GCRA, per key)."""

    def __init__(self, burst: int, interval_s: float) -> None:
        self.limit = max(0, burst - 1) * interval_s
        self.interval_s = interval_s
        self._tat: dict[Any, float] = {}  # key -> theoretical arrival time

    def slot(self, key: Any, now: float) -> float:
        """The monotonic time this request may run (``now``: at once)."""
        if self.interval_s <= 0:
            return now
        tat = max(self._tat.get(key, now), now)
        start = max(now, tat - self.limit)
        self._tat[key] = tat + self.interval_s
        if len(self._tat) > 1024:
            self._tat = {k: t for k, t in self._tat.items() if t > now}
        return start


class Later:
    """Work the loop does at a given monotonic time, in time order: requests
    waiting for their turn ("handle"), a worker's refusal held back ("reply":
    its connection stays unevictable until it is sent) and a refusal no
    worker ran ("send")."""

    def __init__(self) -> None:
        self._heap: list = []
        self._seq = itertools.count()

    def add(self, due: float, action: str, conn: Any, payload: Any) -> None:
        heapq.heappush(self._heap, (due, next(self._seq), action, conn, payload))

    def next_due(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: float) -> list:
        out = []
        while self._heap and self._heap[0][0] <= now:
            _, _, action, conn, payload = heapq.heappop(self._heap)
            out.append((action, conn, payload))
        return out

    def waiting(self, conn: Any) -> int:
        return sum(1 for item in self._heap if item[3] is conn and item[2] == "handle")


def held_back(outcome: dict) -> bool:
    """Is this answer a refusal sent late (``REFUSAL_DELAY_S``)?"""
    err = outcome.get("error")
    return isinstance(err, dict) and err.get("code") in _HELD_BACK
