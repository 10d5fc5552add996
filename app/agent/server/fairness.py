"""Who is evicted when the connection table or the subscriber cap is full.

Every client of the same user looks alike, so a full table must never
lock the app out: a connection arriving at ``max_connections`` evicts one
that is there (``Server._eviction_rank`` says which) instead of being
refused, and the evicted one gets a ``busy`` error frame before it is
closed.  A client that leaks or hoards connections therefore evicts the
least recently active ones (its own idle ones first), while the app's
short connections (connect, one request, close) always get in.
Subscriptions are capped separately (``max_subscribers``), evicting the
oldest subscriber.  A same-user client reconnecting in a tight loop can
still win the race for a slot: that is beyond what a listener can tell
apart.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .. import log as _log
from .. import protocol
from ..errors import ActionError
from .connection import Conn
from .options import Options


class Fairness:
    """The ``Server``'s eviction rules (a mixin: the server sends and closes)."""

    options: Options
    _conns: dict[int, Conn]
    _evictions: int

    # the server's, declared here (no value: nothing shadows the server's methods)
    _send: Callable[[Conn, dict[str, Any]], None]
    _close: Callable[..., None]

    def _eviction_rank(self, conn: Conn, now: float) -> tuple[int, float]:
        """Lower is evicted first.

        0. Not authenticated yet (TCP), oldest first: any local user can
           connect there, so those must never crowd out the real client.
        1. Not subscribed, least recent whole request first (a connection
           that never sent one counts from its accept): an idle or leaked
           connection goes before a busy one, and bytes of a frame that never
           completes do not count as activity.
        2. Within ``grace_period`` of its accept and no request yet, oldest
           first: the app's fresh connection gets to send its request even
           while other clients keep connecting.
        3. Subscribers, oldest subscription first: a long-lived watcher of
           events goes last.
        """
        if not conn.authed:
            return (0, conn.accepted)
        if conn.events:
            return (3, conn.subscribed_at)
        if conn.last_request is not None:
            return (1, conn.last_request)
        if now - conn.accepted < self.options.grace_period:
            return (2, conn.accepted)
        return (1, conn.accepted)

    def _victim(self) -> Conn | None:
        """The connection to evict, never one whose request runs on the
        worker (its reply would be lost); None if there is none."""
        now = time.monotonic()
        candidates = [c for c in self._conns.values() if not c.on_worker and not c.closed]
        if not candidates:
            return None
        return min(candidates, key=lambda c: self._eviction_rank(c, now))

    def _make_room(self) -> bool:
        victim = self._victim()
        if victim is None:
            return False
        self._evict(victim, "room for a new connection (%d open)" % len(self._conns))
        return True

    def _evict(self, conn: Conn, why: str) -> None:
        """Close ``conn`` with a ``busy`` error frame saying why.

        Its unread input is drained first: closing a socket with unread data
        resets the connection, and the peer would lose the frame.
        """
        self._send(conn, protocol.error(None, protocol.BUSY, "connection closed: " + why))
        try:
            conn.sock.recv(65536)
        except Exception:
            pass
        self._evictions += 1
        first = self._evictions == 1
        self._close(conn, "evicted: " + why if first else None, flush=True)

    def _log_evictions(self) -> None:
        """One line per tick for a flood's evictions: a line each would cost
        more than the eviction and slow the agent down exactly when it is
        busiest (the first of a tick is logged in full when it happens)."""
        if self._evictions > 1:
            _log.log("evicted %d more connections to make room" % (self._evictions - 1))
        self._evictions = 0

    def _make_room_for_subscriber(self, conn: Conn) -> None:
        """At ``max_subscribers``, evict the oldest subscriber: subscribers
        never time out, so a cap is what keeps them from filling the table
        (and the newest subscriber is the one most likely to be listening)."""
        while True:
            subscribers = [c for c in self._conns.values() if c.events and c is not conn]
            if len(subscribers) < self.options.max_subscribers:
                return
            evictable = [c for c in subscribers if not c.on_worker]
            if not evictable:
                raise ActionError(protocol.BUSY, "too many subscribers")
            oldest = min(evictable, key=lambda c: c.subscribed_at)
            self._evict(oldest, "room for a new subscriber (%d subscribed)" % len(subscribers))
