"""One client connection's state (agent thread only)."""

from __future__ import annotations

import socket
import time
from typing import Any

from .. import protocol


class Conn:
    """One client connection (agent thread only).

    ``accepted``/``last_request``/``subscribed_at`` (monotonic) order
    evictions; ``on_worker`` marks a request running on the worker thread,
    whose connection is never evicted so its reply is not lost.
    """

    __slots__ = ("sock", "decoder", "out", "last_rx", "partial_since", "authed",
                 "challenge", "events", "closed", "mask", "name", "accepted",
                 "last_request", "subscribed_at", "on_worker", "peer")

    def __init__(self, sock: socket.socket, name: str) -> None:
        self.sock = sock
        self.decoder = protocol.FrameDecoder()
        self.out = bytearray()
        self.last_rx = time.monotonic()
        self.partial_since: float | None = None
        self.authed = True
        self.challenge: str | None = None
        self.events: frozenset | None = None  # subscribed events
        self.closed = False
        self.mask = 0
        self.name = name
        self.accepted = self.last_rx
        self.last_request: float | None = None  # last whole frame received
        self.subscribed_at = 0.0
        self.on_worker = False
        self.peer: object = name  # who is paced: the peer's pid where known


def close_quietly(closable: Any) -> None:
    try:
        if closable is not None:
            closable.close()
    except Exception:
        pass
