"""Requests per client address: a token bucket each, so one client's storm
leaves the others served."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

#: Addresses remembered at most; the idlest are forgotten first.
MAX_CLIENTS = 4096


class RateLimiter:
    def __init__(self, per_s: float, burst: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.per_s = per_s
        self.burst = burst
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # address -> (tokens, at)

    def allow(self, address: str) -> bool:
        """Take one request's token for ``address``; False when it has none left."""
        now = self._clock()
        with self._lock:
            tokens, at = self._buckets.pop(address, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - at) * self.per_s)
            ok = tokens >= 1.0
            self._buckets[address] = (tokens - 1.0 if ok else tokens, now)
            if len(self._buckets) > MAX_CLIENTS:  # dicts keep order: the first is the idlest
                del self._buckets[next(iter(self._buckets))]
            return ok
