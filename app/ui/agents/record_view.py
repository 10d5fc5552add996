"""The detail view's "Record allocations" section: a recording of one process's
CUDA allocations for a few seconds, then the top allocations by call site.

The recording leaves as a typed request (:class:`RecordAllocations`, through
:attr:`RecordView.request`) and runs on the controller's workers; this view
only counts the seconds down and renders the :class:`RecordAction` the
controller reports (``ControllerAdapter.recorded``).  The agent writes the
snapshot file PyTorch's memory_viz page opens; the app never reads it.
"""

from __future__ import annotations

import os
import time
from typing import Any

from PySide6.QtCore import Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.agents.recording import RecordResult
from app.core.control.records import RecordAction
from app.core.control.requests import RECORD_SECONDS, RecordAllocations, RequestError
from app.core.units import NA, fmt_bytes
from app.ui.style import palette as pal
from app.ui.style.tables import flat_list
from app.ui.style.text import plain_label, plain_tip

SITE_COLUMNS = ("Call site", "Allocated", "Count", "Still allocated")
SCOL_SITE, SCOL_BYTES, SCOL_COUNT, SCOL_LIVE = range(len(SITE_COLUMNS))
#: Rows the table shows (the agent sends the sites largest first).
MAX_SITES = 50
MEMORY_VIZ = "https://pytorch.org/memory_viz"

NO_CUDA_TIP = ("This process has not initialised CUDA: there are no CUDA allocations to "
               "record. Recording works in processes that use a CUDA GPU through PyTorch.")
_CODES = {
    "refused": "the process is already recording its own allocation history",
    "unsupported": "this process's agent cannot record allocations (a newer agent can)",
    "timeout": "the agent did not answer in time",
    "busy": "the agent is busy with another request",
}


def error_text(result: RecordResult) -> str:
    """Why a recording failed, in plain words."""
    if result.error:
        return result.error
    return _CODES.get(result.code or "", result.code or "no answer")


def summary_text(result: RecordResult) -> str:
    """``Recorded 10 s on cuda:0: 12,408 allocation events at 37 call sites``."""
    secs = NA if result.seconds is None else f"{result.seconds:.0f} s"
    where = "" if result.device is None else f" on cuda:{result.device}"
    events = NA if result.entries is None else f"{result.entries:,}"
    text = f"Recorded {secs}{where}: {events} allocation events at {len(result.sites)} call sites"
    if result.truncated:
        text += " (the entry bound was reached: the oldest events were dropped)"
    return text


class RecordView(QWidget):
    """Record button, seconds choice, countdown, the call-site table, the file."""

    request = Signal(object)  # RecordAllocations

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("recordView")
        self.pid: int | None = None
        self.host = ""  # the remote host the process runs on ("" this machine)
        self.action: RecordAction | None = None  # the latest recording of this process
        self._controller: Any = None
        self._enabled_why = ""
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(6)

        head = QHBoxLayout()
        head.setSpacing(8)
        title = QLabel("Allocations", self)
        tf = title.font()
        tf.setBold(True)
        title.setFont(tf)
        self.record_button = QPushButton("Record allocations…", self)
        self.record_button.setObjectName("recordButton")
        self.record_button.setAutoDefault(False)
        self.record_button.clicked.connect(self._on_record)
        self.seconds_combo = QComboBox(self)
        self.seconds_combo.setObjectName("recordSeconds")
        for s in RECORD_SECONDS:
            self.seconds_combo.addItem(f"{s} s", float(s))
        self.seconds_combo.setCurrentIndex(RECORD_SECONDS.index(10))
        self.seconds_combo.setToolTip("How long to record")
        self.progress = QProgressBar(self)
        self.progress.setObjectName("recordProgress")
        self.progress.setTextVisible(False)
        self.progress.setFixedWidth(120)
        self.progress.setFixedHeight(10)
        self.progress.setVisible(False)
        self.status = plain_label(QLabel("", self))  # the agent's words, errors included
        self.status.setObjectName("recordStatus")
        self.status.setWordWrap(True)
        self.status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        head.addWidget(title)
        head.addSpacing(4)
        head.addWidget(self.record_button)
        head.addWidget(self.seconds_combo)
        head.addWidget(self.progress)
        head.addWidget(self.status, 1)
        lay.addLayout(head)

        self.table = flat_list(self, "recordTable", SITE_COLUMNS)
        self.table.setTextElideMode(Qt.TextElideMode.ElideLeft)  # the file:line end matters
        header = self.table.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(SCOL_SITE, header.ResizeMode.Stretch)
        fm = self.fontMetrics()
        right = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
        for col in (SCOL_BYTES, SCOL_COUNT, SCOL_LIVE):
            header.resizeSection(col, max(fm.horizontalAdvance("0000.0 MiB"),
                                          fm.horizontalAdvance(SITE_COLUMNS[col])) + 40)
            self.table.headerItem().setTextAlignment(col, right)
        self.table.headerItem().setToolTip(
            SCOL_LIVE, "Of the bytes allocated there while recording, those still allocated "
            "when the recording stopped")
        self.table.setMinimumHeight(fm.height() * 7)
        self.table.setVisible(False)
        lay.addWidget(self.table, 1)

        foot = QHBoxLayout()
        foot.setSpacing(8)
        self.path_label = plain_label(QLabel("", self))  # a path the agent chose
        self.path_label.setObjectName("recordPath")
        self.path_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.path_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.open_button = QPushButton("Open folder", self)
        self.open_button.setObjectName("recordOpenFolder")
        self.open_button.setAutoDefault(False)
        self.open_button.clicked.connect(self._open_folder)
        self.viz_note = QLabel(f'open it at <a href="{MEMORY_VIZ}">pytorch.org/memory_viz</a>',
                               self)
        self.viz_note.setObjectName("secondary")
        self.viz_note.setOpenExternalLinks(True)
        foot.addWidget(self.path_label, 1)
        foot.addWidget(self.viz_note)
        foot.addWidget(self.open_button)
        self.file_row = QWidget(self)
        self.file_row.setLayout(foot)
        foot.setContentsMargins(0, 0, 0, 0)
        self.file_row.setVisible(False)
        lay.addWidget(self.file_row)

        self.timer = QTimer(self)
        self.timer.setInterval(250)
        self.timer.timeout.connect(self._tick)

    # -- wiring ------------------------------------------------------------------------------
    def set_controller(self, controller: Any) -> None:
        """Hear the recordings ``controller`` (a ControllerAdapter) reports, and its
        refusals of them."""
        if controller is self._controller:
            return
        if self._controller is not None:
            self._controller.recorded.disconnect(self.on_record)
            self._controller.refused.disconnect(self._on_refused)
        self._controller = controller
        controller.recorded.connect(self.on_record)
        controller.refused.connect(self._on_refused)

    # -- per snapshot --------------------------------------------------------------------------
    def set_report(self, pid: int, report: Any, can_act: bool, host: str = "",
                   why_not: str = "") -> None:
        """The process shown (``pid`` on ``host``, "" this machine) and what its agent
        reports (None: not reporting); ``why_not``: why actions are off, if known."""
        if pid != self.pid or host != self.host:
            self.pid, self.host = pid, host
            self.action = None
            self.timer.stop()
            self.progress.setVisible(False)
            self._show_status("")
            self.table.clear()
            self.table.setVisible(False)
            self.file_row.setVisible(False)
        recording = self.action is not None and not self.action.done
        if why_not:
            why = why_not
        elif report is None:
            why = "The agent is not reporting"
        elif not can_act:
            why = "Agent actions are not available"
        elif getattr(report, "cuda_initialized", None) is False:
            why = NO_CUDA_TIP
        elif recording:
            why = "Recording…"
        else:
            why = ""
        if why != self._enabled_why or self.record_button.isEnabled() != (not why):
            self._enabled_why = why
            self.record_button.setEnabled(not why)
            self.seconds_combo.setEnabled(not why)
            self.record_button.setToolTip(why or (
                "Record every CUDA allocation of this process for the chosen time (PyTorch's "
                "allocation history), then list the largest by call site. The snapshot file "
                "opens at pytorch.org/memory_viz."))

    def bring_into_view(self) -> None:
        """Scrolled to and focused, saying what to do next (asked for from elsewhere,
        e.g. a Doctor fix).  Nothing is recorded until the user presses the button."""
        ancestor = self.parentWidget()
        while ancestor is not None:
            if isinstance(ancestor, QScrollArea):
                ancestor.ensureWidgetVisible(self)
            ancestor = ancestor.parentWidget()
        if self.action is not None and not self.action.done:
            return  # a recording is counting down: its status stays
        if self.record_button.isEnabled():
            self.record_button.setFocus(Qt.FocusReason.OtherFocusReason)
            self._show_status("Choose how long, then press “Record allocations…”.")
        elif self._enabled_why:
            self._show_status(f"Cannot record now: {self._enabled_why}")

    # -- actions --------------------------------------------------------------------------------
    def _on_record(self) -> None:
        if self.pid is not None:
            self._show_status("")
            self.request.emit(RecordAllocations(self.pid, float(self.seconds_combo.currentData()),
                                                host=self.host))

    def on_record(self, action: RecordAction) -> None:
        """A recording started or finished (any process's: others are ignored)."""
        if action.pid != self.pid or action.host != self.host:
            return
        self.action = action
        if not action.done:
            self.record_button.setEnabled(False)
            self.seconds_combo.setEnabled(False)
            self._enabled_why = "Recording…"
            self.progress.setRange(0, int(action.seconds * 1000))
            self.progress.setVisible(True)
            self._tick()
            self.timer.start()
            return
        self.timer.stop()
        self.progress.setVisible(False)
        self._enabled_why = "?"  # the next snapshot decides again
        self.record_button.setEnabled(True)
        self.seconds_combo.setEnabled(True)
        result = action.result
        if result is None or not result.ok:
            self._show_status("Not recorded: " + (error_text(result) if result is not None
                                                  else "no answer"), error=True)
            return
        self._show_result(result)

    def _on_refused(self, request: Any, exc: RequestError) -> None:
        if isinstance(request, RecordAllocations) and request.pid == self.pid \
                and request.host == self.host:
            self._show_status(f"Not started: {exc}", error=True)

    def _tick(self) -> None:
        action = self.action
        if action is None or action.done:
            self.timer.stop()
            return
        left = action.seconds_left(time.monotonic())
        if left is None:
            return
        self.progress.setValue(int((action.seconds - left) * 1000))
        self._show_status(f"Recording… {left:.0f} s left" if left >= 0.5
                          else "Recording… writing the snapshot file")

    def _show_result(self, result: RecordResult) -> None:
        self._show_status(summary_text(result))
        self.table.setUpdatesEnabled(False)
        self.table.clear()
        right = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
        for site in result.sites[:MAX_SITES]:
            item = QTreeWidgetItem([site.site, fmt_bytes(site.bytes), f"{site.count:,}",
                                    fmt_bytes(site.live_bytes)])
            for col in (SCOL_BYTES, SCOL_COUNT, SCOL_LIVE):
                item.setTextAlignment(col, right)
            item.setToolTip(SCOL_SITE, plain_tip(site.site))
            self.table.addTopLevelItem(item)
        self.table.setUpdatesEnabled(True)
        self.table.setVisible(bool(result.sites))
        if not result.sites:
            self._show_status(summary_text(result) + ". No CUDA allocations happened while "
                              "recording.")
        path = result.path
        self.file_row.setVisible(bool(path))
        if path:  # a remote host's file is on that host: no folder to open here
            where = f" on {self.host}" if self.host else ""
            self.path_label.setText(f"Snapshot file{where}: {path}")
            self.path_label.setToolTip(plain_tip(path))
            self.open_button.setVisible(not self.host)

    def _open_folder(self) -> None:
        result = self.action.result if self.action is not None else None
        if result is not None and result.path:
            QDesktopServices.openUrl(QUrl.fromLocalFile(os.path.dirname(result.path)))

    def _show_status(self, text: str, error: bool = False) -> None:
        self.status.setText(text)
        self.status.setToolTip(plain_tip(text))
        self.status.setStyleSheet(
            f"color: {pal.LEVEL_COLORS[pal.LEVEL_CRITICAL]};" if error else "")

    def sites(self) -> list[list[str]]:
        """The table's texts, row by row (tests, copying)."""
        return [[self.table.topLevelItem(i).text(c) for c in range(len(SITE_COLUMNS))]
                for i in range(self.table.topLevelItemCount())]


__all__ = ["RecordView", "error_text", "summary_text"]
