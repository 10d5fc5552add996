"""The stream's frames: each snapshot encoded once, whatever the clients.

A client that saw the previous tick gets the patch from it (``delta``); one
that fell behind, or has just arrived, gets the whole snapshot (``full``).
Frames are made on the first request for a tick, so a server without
stream clients encodes nothing.
"""

from __future__ import annotations

import json
import threading
import zlib
from typing import Any

from app.core.serve.state import ServeState
from app.core.wire.delta import diff
from app.core.wire.snapshot import WIRE_VERSION, encode_snapshot

#: How long a connection may stay silent before a side gives up on it.
KEEPALIVE_S = 15.0
#: Seconds a stream waits for a tick before it sends a ``ping``: a client
#: hears something at least this often, so silence means a stuck host.
PING_S = 2.0


def line(data: dict[str, Any]) -> bytes:
    return json.dumps(data, separators=(",", ":"), allow_nan=False).encode() + b"\n"


class Frames:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seq = -1
        self._full: bytes | None = None
        self._delta: bytes | None = None
        self._encoded: dict[str, Any] | None = None

    def delta(self, state: ServeState) -> bytes | None:
        """The patch frame from ``state.seq - 1`` to ``state`` (None: no previous)."""
        with self._lock:
            self._advance(state)
            return self._delta

    def full(self, state: ServeState) -> bytes:
        """The whole snapshot's frame (made only when a client needs one)."""
        with self._lock:
            self._advance(state)
            if self._full is None:
                self._full = line({"wire": WIRE_VERSION, "type": "full", "seq": self._seq,
                                   "snapshot": self._encoded})
            return self._full

    def _advance(self, state: ServeState) -> None:
        if state.seq == self._seq or state.snapshot is None:
            return
        encoded = encode_snapshot(state.snapshot)
        previous, was = self._encoded, self._seq
        self._full = self._delta = None
        if previous is not None and was == state.seq - 1:
            self._delta = line({"type": "delta", "seq": state.seq,
                                "patch": diff(previous, encoded)})
        self._encoded, self._seq = encoded, state.seq


class StreamWriter:
    """One client's stream: which frame to send next, optionally deflated
    (raw deflate, flushed after every frame so each arrives whole)."""

    def __init__(self, frames: Frames, deflate: bool) -> None:
        self._frames = frames
        self._seq: int | None = None
        self._zip = zlib.compressobj(6, zlib.DEFLATED, -15) if deflate else None

    def next_bytes(self, state: ServeState) -> bytes | None:
        """The bytes to send for ``state`` (a ping when it is not new), None
        before the first snapshot."""
        if state.snapshot is None:
            return None
        if state.seq == self._seq:
            data = line({"type": "ping", "seq": state.seq})
        else:
            delta = self._frames.delta(state) if self._seq == state.seq - 1 else None
            data = delta if delta is not None else self._frames.full(state)
            self._seq = state.seq
        return self._pack(data)

    def restart(self) -> None:
        """Send a whole snapshot next (the client lost its place)."""
        self._seq = None

    @property
    def seq(self) -> int:
        return -1 if self._seq is None else self._seq

    def _pack(self, data: bytes) -> bytes:
        if self._zip is None:
            return data
        return self._zip.compress(data) + self._zip.flush(zlib.Z_SYNC_FLUSH)
