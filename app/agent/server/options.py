"""The listener's limits (counts, bytes, seconds)."""

from __future__ import annotations


class Options:
    """Server limits.

    ``max_subscribers``: connections holding a ``subscribe`` at once (the
    oldest is evicted by a new one).  ``grace_period``: seconds a new
    connection that has not sent a whole request yet is evicted only after
    every other non-subscriber, so the app's connection gets to send its
    request.  ``backlog``: the listen backlog (a burst of a few hundred
    connects is queued, not refused: a full AF_UNIX backlog fails a
    client's connect at once), and the most connections accepted per wakeup
    (a burst is taken at once, yet reads keep being served between bursts).
    """

    def __init__(self, partial_timeout: float = 10.0, idle_timeout: float = 300.0,
                 max_connections: int = 16, max_output: int = 4 * 1024 * 1024,
                 tick_interval: float = 1.0, max_subscribers: int = 8,
                 grace_period: float = 1.0, backlog: int = 256, pace_burst: int = 20,
                 pace_interval: float = 0.05) -> None:
        self.partial_timeout = float(partial_timeout)
        self.idle_timeout = float(idle_timeout)
        self.max_connections = int(max_connections)
        self.max_output = int(max_output)
        self.tick_interval = float(tick_interval)
        self.max_subscribers = int(max_subscribers)
        self.grace_period = float(grace_period)
        self.backlog = max(1, int(backlog))
        self.pace_burst = max(1, int(pace_burst))
        self.pace_interval = max(0.0, float(pace_interval))
