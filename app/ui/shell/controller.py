"""The application controller seen from Qt: its updates as signals on the GUI thread.

:class:`ControllerAdapter` wraps one :class:`~app.core.control.controller.AppController`
(made by the GUI entry point and shared by the window, the detail view, the tray
and notifications), with one more controller per remote host
(:class:`~app.core.control.hosts.HostControllers`).  The controller's
workers call ``wake`` on their own thread; the adapter turns that into a
queued call of ``poll`` on the GUI thread, where the records are filled in
and the signals below emitted.
"""

from __future__ import annotations

import logging
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal, Slot

from app.core.control.controller import (
    FINISHED,
    MEASURED,
    PROGRESS,
    STARTED,
    AppController,
    Update,
)
from app.core.control.hosts import HostControllers
from app.core.control.records import ModelAction, RecordAction
from app.core.control.requests import Request, RequestError
from app.core.monitor.samples import Snapshot

log = logging.getLogger(__name__)


class ControllerAdapter(QObject):
    """Requests in (``submit``), records out as signals, always on the GUI thread."""

    started = Signal(object)  # Action
    progress = Signal(object, int)  # CacheAction, the pid that answered
    finished = Signal(object)  # Action, its answer filled in
    measured = Signal(object)  # Action, NVML's before/after filled in
    refused = Signal(object, object)  # Request, RequestError
    #: A recording of allocations, started or finished (its own signal: it is no
    #: cache, model or terminate action, and the window's action views never see it).
    recorded = Signal(object)  # RecordAction
    _woken = Signal()

    def __init__(self, core: AppController | HostControllers | None = None,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        if not isinstance(core, HostControllers):
            core = HostControllers(core if core is not None else AppController(None))
        #: Every host's controller: requests go to the one their ``host`` names.
        self.core = core
        self._woken.connect(self._poll, Qt.ConnectionType.QueuedConnection)
        self.core.set_wake(self._wake)
        self.core.subscribe(self._relay)

    # -- requests ---------------------------------------------------------------------------
    def submit(self, request: Request) -> Any:
        """The controller's record(s), or None when it refused (``refused`` says why)."""
        try:
            return self.core.submit(request)
        except RequestError as exc:
            log.debug("refused %r: %s", request, exc)
            self.refused.emit(request, exc)
            return None

    # -- what views read ----------------------------------------------------------------------
    @property
    def available(self) -> bool:
        return self.core.available

    def busy_pids(self, host: str = "") -> set[int]:
        return self.core.busy_pids(host)

    def pending_models(self, pid: int, host: str = "") -> list[ModelAction]:
        return self.core.pending_models(pid, host)

    def last_model_actions(self, pid: int, host: str = "") -> dict[str, ModelAction]:
        return self.core.last_model_actions(pid, host)

    def on_snapshot(self, snapshot: Snapshot) -> None:
        self.core.on_snapshot(snapshot)

    def wait(self, timeout_s: float = 3.0) -> bool:
        return self.core.wait(timeout_s)

    # -- internals ----------------------------------------------------------------------------
    def _wake(self) -> None:  # on a worker thread
        try:
            self._woken.emit()
        except RuntimeError:  # the adapter was deleted (shutting down)
            pass

    @Slot()
    def _poll(self) -> None:
        self.core.poll()

    def _relay(self, update: Update) -> None:
        if isinstance(update.action, RecordAction):
            self.recorded.emit(update.action)
        elif update.stage == STARTED:
            self.started.emit(update.action)
        elif update.stage == PROGRESS:
            self.progress.emit(update.action, update.pid or 0)
        elif update.stage == FINISHED:
            self.finished.emit(update.action)
        elif update.stage == MEASURED:
            self.measured.emit(update.action)


__all__ = ["ControllerAdapter"]
