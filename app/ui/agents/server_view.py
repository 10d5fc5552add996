"""A model server in the process detail view: what its API says it holds, and
an Unload (or Reload) button per model.

Everything shown comes from the latest snapshot (``Snapshot.servers``): the
view never asks the server anything, so a server that hangs costs it nothing
(its error line says so).  Each button sends a typed request through
:attr:`ServerView.request`; the outcome of the server's unload (freed, still
pending, not freed) is shown beside its model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.core.monitor.samples import Snapshot
from app.core.servers.types import ModelServer, ServerModel
from app.core.units import fmt_bytes
from app.ui.agents.server_texts import (
    BUSY_TEXT,
    error_text,
    expires_in,
    expires_text,
    gpu_text,
    is_busy,
    model_activity,
    model_request,
    nvml_text,
    outcome_level,
    outcome_line,
    reservation_text,
    server_activity,
    server_facts,
    server_summary,
    state_text,
    unload_note,
    unload_tooltip,
    vram_tooltip,
)
from app.ui.style import palette as pal
from app.ui.style.text import plain_label, plain_tip

HEADERS = ("Model", "VRAM", "GPU", "State", "Activity", "Unloads itself", "", "")
(SCOL_NAME, SCOL_VRAM, SCOL_GPU, SCOL_STATE, SCOL_ACTIVITY, SCOL_EXPIRES, SCOL_BUTTON,
 SCOL_NOTE) = range(len(HEADERS))
NO_MODELS = "No model loaded."
MODELS_UNKNOWN = "Its models are unknown until its API answers."


def _style(widget: QWidget, sheet: str) -> None:
    """Set a style sheet only when it changes (each setting re-polishes the widget)."""
    if widget.styleSheet() != sheet:
        widget.setStyleSheet(sheet)


class _ModelRow:
    """The widgets of one model's line in the grid (made once, reused)."""

    def __init__(self, view: ServerView, row: int) -> None:
        self.model_id: str | None = None
        # A model's name and figures, and the outcome of its unload, are the server's words.
        self.labels = [plain_label(QLabel(view)) for _ in range(SCOL_BUTTON)]
        self.labels[SCOL_NAME].setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.button = QPushButton("Unload", view)
        self.button.setObjectName("serverUnloadButton")
        self.button.setAutoDefault(False)
        self.button.clicked.connect(lambda: view.clicked(self.model_id))
        self.note = plain_label(QLabel(view))
        self.note.setObjectName("serverModelNote")
        self.note.setWordWrap(True)
        self.note.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.note.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        for col, label in enumerate(self.labels):
            view.grid.addWidget(label, row, col)
        view.grid.addWidget(self.button, row, SCOL_BUTTON)
        view.grid.addWidget(self.note, row, SCOL_NOTE)

    def set_visible(self, visible: bool, button: bool = True, expires: bool = True) -> None:
        """Show the line (its button and its expiry cell where they apply), or hide it."""
        for w in (*self.labels, self.note):
            w.setVisible(visible and (w is not self.labels[SCOL_EXPIRES] or expires))
        self.button.setVisible(visible and button)


class ServerView(QWidget):
    """The server holding the detail view's process, and its models' actions."""

    #: Unload or Reload of one of the server's models (app.core.control.requests).
    request = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("serverView")
        self.server: ModelServer | None = None
        self._requests: dict[str, Any] = {}
        self._host, self._why_not = "", ""  # where the server runs; why actions are off
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 4, 0, 0)
        lay.setSpacing(4)
        head = QHBoxLayout()
        head.setSpacing(10)
        # The server's name, facts and errors are its own words (or its process's).
        self.title_label = plain_label(QLabel(self))
        self.title_label.setObjectName("serverTitle")
        font = self.title_label.font()
        font.setBold(True)
        self.title_label.setFont(font)
        self.facts_label = plain_label(QLabel(self))
        self.facts_label.setObjectName("secondary")
        self.facts_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.facts_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.activity_label = QLabel(self)
        self.activity_label.setObjectName("serverActivity")
        head.addWidget(self.title_label)
        head.addWidget(self.facts_label, 1)
        head.addWidget(self.activity_label)
        lay.addLayout(head)
        self.error_label = plain_label(QLabel(self))
        self.error_label.setObjectName("serverError")
        self.reservation_label = plain_label(QLabel(self))
        self.reservation_label.setObjectName("serverReservation")
        self.nvml_label = QLabel(self)
        self.nvml_label.setObjectName("secondary")
        for label in (self.error_label, self.reservation_label, self.nvml_label):
            label.setWordWrap(True)
            lay.addWidget(label)
        self.grid = QGridLayout()
        self.grid.setHorizontalSpacing(14)
        self.grid.setVerticalSpacing(4)
        self.headers: list[QLabel] = []
        for col, text in enumerate(HEADERS):
            h = QLabel(text, self)
            h.setObjectName("secondary")
            self.grid.addWidget(h, 0, col)
            self.headers.append(h)
        self.grid.setColumnStretch(SCOL_NOTE, 1)
        self.grid.setColumnMinimumWidth(SCOL_NOTE, self.fontMetrics().horizontalAdvance("x" * 24))
        lay.addLayout(self.grid)
        self.rows: list[_ModelRow] = []
        self.no_models_label = QLabel(NO_MODELS, self)
        self.no_models_label.setObjectName("secondary")
        lay.addWidget(self.no_models_label)
        self.note_label = plain_label(QLabel(self))
        self.note_label.setObjectName("serverUnloadNote")
        self.note_label.setWordWrap(True)
        lay.addWidget(self.note_label)
        lay.addStretch(1)
        self._apply_style()
        self.setVisible(False)

    # -- public -----------------------------------------------------------------------------
    def set_server(self, server: ModelServer | None, snapshot: Snapshot | None,
                   pending: Mapping[str, Any] | None = None,
                   last: Mapping[str, Any] | None = None, can_act: bool = True,
                   host: str = "", why_not: str = "") -> None:
        """Show ``server`` (None: hide) as of ``snapshot``; ``pending`` / ``last``: its
        model actions in flight and the last finished one, by model id; ``host``:
        where it runs ("" this machine); ``why_not``: why actions are off, if known."""
        self.server = server
        self._host, self._why_not = host, why_not
        self.setVisible(server is not None)
        if server is None:
            self._requests = {}
            return
        now = snapshot.timestamp if snapshot is not None else 0.0
        self.title_label.setText(server.display)
        facts = server_facts(server)
        self.facts_label.setText(facts)
        self.facts_label.setToolTip(plain_tip(facts))
        self.activity_label.setText(server_activity(server, now))
        self.activity_label.setToolTip("Generating now" if server.busy else
                                       "Its queue is empty" if server.idle_since is not None
                                       else "The server does not say whether it is busy")
        for label, text in ((self.error_label, error_text(server)),
                            (self.reservation_label, reservation_text(server)),
                            (self.nvml_label, nvml_text(snapshot, server))):
            label.setText(text)
            label.setVisible(bool(text))
        self.nvml_label.setToolTip("GPU memory NVML shows for the server's processes")
        models = server.models
        while len(self.rows) < len(models):
            self.rows.append(_ModelRow(self, len(self.rows) + 1))
        self._requests = {}
        expiring = any(m.expires_at is not None for m in models)  # (Ollama's keep_alive)
        for row, m in zip(self.rows, models):
            row.set_visible(True, server.can_unload, expiring)
            self._set_row(row, server, m, snapshot, now, (pending or {}).get(m.id),
                          (last or {}).get(m.id), can_act)
        for row in self.rows[len(models):]:
            row.model_id = None
            row.set_visible(False)
        for col, h in enumerate(self.headers):
            h.setVisible(bool(models) and (col != SCOL_EXPIRES or expiring))
        self.no_models_label.setVisible(not models)
        self.no_models_label.setText(NO_MODELS if server.reachable else MODELS_UNKNOWN)
        note = unload_note(server)
        self.note_label.setText(note)
        self.note_label.setVisible(bool(note))
        # What it does is an explanation; that there is none is what matters here.
        color = pal.muted(self.palette()) if server.can_unload else pal.foreground(self.palette())
        _style(self.note_label, f"color: {pal.hex_color(color)};")

    def clicked(self, model_id: str | None) -> None:
        """A model's button: its request, as shown (nothing for a row not in use)."""
        req = self._requests.get(model_id or "")
        if req is not None:
            self.request.emit(req)

    def button_of(self, model_id: str) -> QPushButton | None:
        return next((r.button for r in self.rows if r.model_id == model_id), None)

    def note_of(self, model_id: str) -> str | None:
        return next((r.note.text() for r in self.rows if r.model_id == model_id), None)

    def row_texts(self, model_id: str) -> list[str]:
        """The cells of a model's line as shown (for tests and scripting)."""
        row = next((r for r in self.rows if r.model_id == model_id), None)
        return [] if row is None else [label.text() for label in row.labels]

    # -- internals -------------------------------------------------------------------------
    def _set_row(self, row: _ModelRow, server: ModelServer, m: ServerModel,
                 snapshot: Snapshot | None, now: float, pending: Any, last: Any,
                 can_act: bool) -> None:
        row.model_id = m.id
        texts = (m.name, fmt_bytes(m.vram_bytes), gpu_text(snapshot, m), state_text(m),
                 model_activity(server, m, now), expires_in(m, now))
        tips = (m.id if m.id != m.name else "", vram_tooltip(server, m), "", "", "",
                expires_text(m, now) or f"{server.label} does not say")
        for label, text, tip in zip(row.labels, texts, tips):
            label.setText(text)
            label.setToolTip(plain_tip(tip))
        muted = pal.hex_color(pal.muted(self.palette()))
        _style(row.labels[SCOL_VRAM], f"color: {muted};" if m.vram_bytes is None else "")
        reload = m.state in ("on cpu", "sleeping")
        busy = is_busy(server, m) and not reload
        row.button.setText("Reload" if reload else "Unload")
        running = pending is not None
        row.button.setEnabled(server.can_unload and can_act and not running and not busy)
        if not can_act:
            tip = self._why_not or "Actions are not available"
        elif busy:
            tip = BUSY_TEXT[0].upper() + BUSY_TEXT[1:]
        else:
            tip = unload_tooltip(server, m)
        row.button.setToolTip(plain_tip(tip))
        if server.can_unload and not running:
            self._requests[m.id] = model_request(server, m, self._host)
        if running:
            self._set_note(row, outcome_line(pending), "waiting", server_summary(pending))
        elif last is not None and getattr(last, "done", False):
            self._set_note(row, outcome_line(last), outcome_level(last), server_summary(last))
        elif busy and server.can_unload:
            self._set_note(row, BUSY_TEXT, "muted", "")
        else:
            self._set_note(row, "", "muted", "")

    def _set_note(self, row: _ModelRow, text: str, level: str, tooltip: str) -> None:
        row.note.setText(text)
        row.note.setToolTip(plain_tip(tooltip or text))
        color = {"error": pal.LEVEL_COLORS[pal.LEVEL_CRITICAL], "waiting": self._warning(),
                 "ok": pal.hex_color(pal.foreground(self.palette()))}.get(
            level, pal.hex_color(pal.muted(self.palette())))
        _style(row.note, f"color: {color};")

    # -- size: its wrapped lines count in the dialog's minimum height ------------------------
    def minimumSizeHint(self) -> QSize:  # noqa: N802
        hint = super().minimumSizeHint()
        if self.isVisible() and self.hasHeightForWidth():  # (laid out: its width is real)
            hint.setHeight(max(hint.height(), self.heightForWidth(self.width())))
        return hint

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        if event.size().width() != event.oldSize().width():
            self.updateGeometry()  # its lines wrap anew: the dialog's minimum follows

    def changeEvent(self, event) -> None:  # noqa: N802
        from PySide6.QtCore import QEvent

        if event.type() == QEvent.Type.PaletteChange:
            self._apply_style()
        super().changeEvent(event)

    def _warning(self) -> str:
        """The warning level's orange, darker on a light background (legible as text)."""
        color = QColor(pal.LEVEL_COLORS[pal.LEVEL_WARNING])
        return pal.hex_color(color if pal.is_dark(self.palette()) else color.darker(140))

    def _apply_style(self) -> None:
        self.error_label.setStyleSheet(f"color: {self._warning()};")


__all__ = ["HEADERS", "ServerView"]
