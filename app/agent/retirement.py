"""Storages a move replaced, kept for a grace before they are dropped.

An op another thread began on a weight it holds, outside the model, may still
be reading the old storages when a move swaps them out: they are dropped only
``RETIRE_S`` later, by the agent's tick, or by a timer where no agent ticks
(a stopped agent's manager).  Dropping pinned host copies of GPU weights
empties torch's pinned host cache too."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from .storage import devices

#: Storages a move replaced are kept this long (seconds) before they are dropped.
RETIRE_S = 0.25


class Retired:
    """The retired storages: (monotonic seconds, old tensors, pinned) each."""

    def __init__(self) -> None:
        self.pending: list = []
        self.lock = threading.Lock()

    def keep(self, storages: list, pinned: bool, timer: bool) -> None:
        """Keep what a reload replaced for RETIRE_S; ``timer``: no tick will
        drop them, a timer does."""
        self.drop()
        with self.lock:
            self.pending.append((time.monotonic(), storages, pinned))
        if timer:
            self.drop_later(False)

    def drop_later(self, everything: bool) -> None:
        """A daemon timer drops them (``everything``: all of them, due or not)."""
        timer = threading.Timer(RETIRE_S + 0.01, self.drop, (everything,))
        timer.daemon = True
        timer.start()

    def drop(self, everything: bool = False) -> None:
        """Drop those whose grace is over (``everything``: all of them)."""
        cutoff = float("inf") if everything else time.monotonic() - RETIRE_S
        with self.lock:
            old = [r for r in self.pending if r[0] <= cutoff]
            self.pending = [r for r in self.pending if r[0] > cutoff]
        if old:
            pinned = any(r[2] for r in old)
            del old
            torch = _torch()
            if pinned and torch is not None:
                devices.host_empty_cache(torch)

    def reinit_after_fork(self) -> None:
        self.lock = threading.Lock()


def _torch() -> Any:
    return sys.modules.get("torch")
