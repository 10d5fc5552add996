"""One watched host in the Hosts dialog: its name, whether the settings keep
it, its address, its state, why it is not connected (and what to do), and
its server's pressure policy.  A click selects it."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QMouseEvent
from PySide6.QtWidgets import (
    QApplication,
    QFrame,
    QHBoxLayout,
    QLabel,
    QVBoxLayout,
    QWidget,
)

from app.core.monitor.hosts import CONNECTED, CONNECTING
from app.ui.settings.host_list import HostEntry, policy_line, reason_line, state_line
from app.ui.style import palette as pal
from app.ui.style.text import plain_label


class HostRow(QFrame):
    clicked = Signal(str)  # the host's key

    def __init__(self, entry: HostEntry, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("hostRow")
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(10, 8, 10, 8)
        lay.setSpacing(2)
        head = QHBoxLayout()
        head.setSpacing(8)
        self.name_label = plain_label(QLabel(self))
        self.name_label.setObjectName("hostName")
        font = self.name_label.font()
        font.setBold(True)
        self.name_label.setFont(font)
        self.tag_label = QLabel(self)
        self.tag_label.setObjectName("secondary")
        head.addWidget(self.name_label)
        head.addWidget(self.tag_label)
        head.addStretch(1)
        self.state_label = plain_label(QLabel(self))  # names the user and the host
        self.state_label.setObjectName("hostState")
        head.addWidget(self.state_label)
        lay.addLayout(head)
        self.url_label = plain_label(QLabel(self))
        self.url_label.setObjectName("secondary")
        self.url_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.url_label)
        self.reason_label = plain_label(QLabel(self))  # the host's or the server's words
        self.reason_label.setObjectName("hostReason")
        self.reason_label.setWordWrap(True)
        self.reason_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.reason_label)
        self.policy_label = plain_label(QLabel(self))  # with the server's why_not
        self.policy_label.setObjectName("hostPolicy")
        self.policy_label.setWordWrap(True)
        lay.addWidget(self.policy_label)
        self.entry = entry
        self.selected = False
        self.set_entry(entry)

    def set_entry(self, entry: HostEntry) -> None:
        self.entry = entry
        self.name_label.setText(entry.key)
        self.tag_label.setText(entry.tag)
        self.tag_label.setToolTip("kept in the settings" if entry.saved else
                                  "given with --host for this run: not kept in the settings")
        self.url_label.setText(entry.config.url)
        self.state_label.setText(state_line(entry))
        reason = reason_line(entry)
        self.reason_label.setText(reason)
        self.reason_label.setVisible(bool(reason))
        policy = policy_line(entry)
        self.policy_label.setText(policy)
        self.policy_label.setVisible(bool(policy))
        self._style()

    def set_selected(self, selected: bool) -> None:
        if selected != self.selected:
            self.selected = selected
            self._style()

    def _style(self) -> None:
        # The application's palette: this row's own is changed by its style sheet.
        palette = QApplication.palette()
        view = self.entry.view
        # Calm while connected or connecting; the warning colour once it is lost
        # (as the GPU area's host headers say it).
        lost = view is not None and view.state != CONNECTED \
            and not (view.state == CONNECTING and view.snapshot is None)
        state = pal.level_color(pal.LEVEL_WARNING) if lost else pal.muted(palette)
        edge = palette.highlight().color() if self.selected else pal.faint(palette)
        fill = pal.blend(pal.background(palette), palette.highlight().color(), 0.12) \
            if self.selected else pal.background(palette)
        sheet = (
            f"QFrame#hostRow {{ border: 1px solid {pal.hex_color(edge)}; border-radius: 6px;"
            f" background: {pal.hex_color(fill)}; }}"
            f" QLabel#hostState {{ color: {pal.hex_color(state)}; }}"
            f" QLabel#hostReason {{ color: {pal.hex_color(pal.muted(palette))}; }}")
        if sheet != self.styleSheet():  # restyled on a change only, not every refresh
            self.setStyleSheet(sheet)

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        if event.button() == Qt.MouseButton.LeftButton:
            self.clicked.emit(self.entry.key)
        super().mousePressEvent(event)


__all__ = ["HostRow"]
