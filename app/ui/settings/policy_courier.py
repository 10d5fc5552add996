"""A host's policy change carried to its server and the answer carried back.

``set_policy`` blocks (a round trip to the host), so it runs on a worker
thread; its answer is emitted on this object, which its owner (the desktop's
``HostsShell``, for as long as the window lives) keeps beyond any Hosts
dialog.  A dialog closed and deleted while a change is in flight loses its
connection with it: the answer reaches nobody, and nothing is emitted on a
deleted object.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal

log = logging.getLogger(__name__)

#: Changes a host's policy on its server and returns the policy it now runs
#: (blocking; RemoteError with the server's refusal).
SetPolicy = Callable[..., Any]


class PolicyCourier(QObject):
    answered = Signal(str, object, object)  # key, RemotePolicy | None, error | None

    def __init__(self, set_policy: SetPolicy, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._set_policy = set_policy
        self.threads: list[threading.Thread] = []

    def send(self, key: str, changes: dict[str, Any]) -> None:
        """Ask ``key``'s server for ``changes`` on a worker thread of its own;
        ``answered`` follows (on the GUI thread for receivers living there)."""
        thread = threading.Thread(target=self._run, args=(key, changes), daemon=True,
                                  name=f"vram-steward-policy-{key}")
        self.threads = [t for t in self.threads if t.is_alive()] + [thread]
        thread.start()

    def _run(self, key: str, changes: dict[str, Any]) -> None:  # a worker thread
        policy, error = None, None
        try:
            policy = self._set_policy(key, **changes)
        except Exception as exc:  # the server's refusal, or the host gone: shown
            error = str(exc) or type(exc).__name__
        try:
            self.answered.emit(key, policy, error)
        except RuntimeError:  # the owner itself is gone (the app is closing)
            log.info("host %s: policy answer after the window closed: %s", key,
                     error or "ok")


__all__ = ["PolicyCourier", "SetPolicy"]
