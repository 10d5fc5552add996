"""The agent's listener: one daemon thread ("vram-steward-agent"), one selector.

AF_UNIX stream socket (0600 in a 0700 dir) with a peer-uid check on accept;
TCP on 127.0.0.1 with an HMAC challenge where AF_UNIX is unavailable
(Windows).  Bounded: connections, subscribers, frame size, output buffer,
partial-frame and idle timeouts.  Handlers that may be slow (free_cache, gc)
run on a short-lived worker thread so other clients keep being served.

A full table never locks the app out: a new connection evicts a present
one instead of being refused (``fairness`` says which and why).

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
