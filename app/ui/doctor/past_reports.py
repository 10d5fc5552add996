"""OOM reports kept from earlier runs, read off the GUI thread.

:class:`PastReports` runs a loader (by default the report store's) on a
thread of its own and hands the reports to the GUI thread through a queued
signal; a request while one is running is folded into one more run after it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Signal

log = logging.getLogger(__name__)

Loader = Callable[[], list[Any]]


def store_loader() -> list[Any]:
    """Every stored OomReport, newest first (the report store's files)."""
    from app.core.diagnosis.report_store import ReportStore

    return sorted(ReportStore().list(), key=lambda r: -r.time)


class PastReports(QObject):
    """``refresh()`` reads again; ``loaded(reports, error)`` arrives on the GUI thread."""

    loaded = Signal(object, str)  # list of OomReport newest first, error text ("" = none)

    def __init__(self, loader: Loader | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.loader = loader or store_loader
        self._lock = threading.Lock()
        self._running = False
        self._again = False
        self.thread: threading.Thread | None = None

    def refresh(self) -> None:
        with self._lock:
            if self._running:
                self._again = True
                return
            self._running = True
        self.thread = threading.Thread(target=self._run, name="vram-steward-reports",
                                       daemon=True)
        self.thread.start()

    def _run(self) -> None:  # on its own thread
        while True:
            try:
                reports, error = list(self.loader()), ""
            except Exception as exc:  # shown, never raised
                log.warning("reading the stored OOM reports failed: %s", exc)
                reports, error = [], str(exc) or type(exc).__name__
            try:
                self.loaded.emit(reports, error)
            except RuntimeError:  # deleted while reading (shutting down)
                return
            with self._lock:
                if not self._again:
                    self._running = False
                    return
                self._again = False

    def wait(self, timeout_s: float = 5.0) -> None:
        """Until the read in progress has ended (tests, shutting down)."""
        if self.thread is not None:
            self.thread.join(timeout_s)


__all__ = ["PastReports", "store_loader"]
