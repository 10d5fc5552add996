"""What both action runners share: a thread pool, the running actions, and signals
that always arrive on the GUI thread.

:class:`ActionRunner` keeps the running actions and starts each one's
:class:`ActionJob` on its pool; the job reports through a relay created on the
GUI thread, so every signal is queued back to it.  Subclasses (agent actions,
model actions) only say what a job does and what else they report.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QRunnable, Qt, QThreadPool, Signal, Slot

from app.core.agents.directory import AgentDirectory

log = logging.getLogger(__name__)

DirectoryLike = AgentDirectory | Callable[[], AgentDirectory | None] | None


def resolve_directory(directory: DirectoryLike) -> AgentDirectory | None:
    """The directory itself, or what a getter returns now (the source can change)."""
    if directory is None or isinstance(directory, AgentDirectory):
        return directory
    try:
        return directory()
    except Exception:
        log.exception("looking up the agent directory failed")
        return None


def error_text(exc: BaseException) -> str:
    text = str(exc)
    return text if text else type(exc).__name__


class ActionJob(QRunnable):
    """One action on a pool thread; ``run`` must end by emitting ``relay.finished``."""

    def __init__(self, action: Any, directory: AgentDirectory | None, relay: QObject,
                 timeout_s: float) -> None:
        super().__init__()
        self.setAutoDelete(True)
        self._action = action
        self._directory = directory
        self._relay = relay
        self._timeout_s = timeout_s


class ActionRunner(QObject):
    """Runs actions (objects with an ``id``) on a thread pool.

    ``directory`` is an :class:`AgentDirectory`, or a callable returning the
    current one (``lambda: sampler.agents``: it changes when the source does).
    """

    action_started = Signal(object)
    action_finished = Signal(object)  # the action, results filled in, done_at set

    def __init__(self, directory: DirectoryLike, parent: QObject | None, timeout_s: float,
                 settle_s: float, threads: int) -> None:
        super().__init__(parent)
        self._directory = directory
        self.timeout_s = timeout_s
        #: Wait at least this long after an action before reading NVML's release.
        self.settle_s = settle_s
        self.pool = QThreadPool(self)
        self.pool.setMaxThreadCount(threads)
        self._running: dict[int, tuple[Any, QObject]] = {}

    def directory(self) -> AgentDirectory | None:
        return resolve_directory(self._directory)

    def running(self) -> list[Any]:
        return [a for a, _ in self._running.values()]

    def wait(self, timeout_ms: int = 3000) -> bool:
        """Wait for running actions (at exit)."""
        return self.pool.waitForDone(timeout_ms)

    def _start(self, action: Any, job: type[ActionJob], relay: QObject) -> None:
        relay.finished.connect(self._on_finished,  # type: ignore[attr-defined]
                               Qt.ConnectionType.QueuedConnection)
        self._running[action.id] = (action, relay)
        self.action_started.emit(action)
        self.pool.start(job(action, self.directory(), relay, self.timeout_s))

    @Slot(object)
    def _on_finished(self, action: Any) -> None:
        action.done_at = time.monotonic()
        entry = self._running.pop(action.id, None)
        if entry is not None:
            entry[1].deleteLater()
        self.action_finished.emit(action)


__all__ = ["ActionJob", "ActionRunner", "DirectoryLike", "error_text", "resolve_directory"]
