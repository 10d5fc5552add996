"""The agent's listener: one daemon thread ("vram-steward-agent"), one selector.

AF_UNIX stream socket (0600 in a 0700 dir) with a peer-uid check on accept;
TCP on 127.0.0.1 with an HMAC challenge where AF_UNIX is unavailable
(Windows).  Bounded: connections, subscribers, frame size, output buffer,
partial-frame and idle timeouts.  Handlers that may be slow (free_cache, gc)
run on a short-lived worker thread so other clients keep being served.

Fairness
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

Modules: ``listener`` (the ``Server``: sockets, the loop, frames in and
out), ``dispatch`` (requests: authentication, methods, the worker thread),
``fairness`` (who is evicted when the table is full), ``connection`` (one
client's state), ``peers`` (peer credentials), ``options`` (the limits).
"""

from __future__ import annotations

from ..errors import ActionError, BadParams
from .listener import Server
from .options import Options
from .peers import peer_allowed, peer_uid

__all__ = ["ActionError", "BadParams", "Options", "Server", "peer_allowed", "peer_uid"]
