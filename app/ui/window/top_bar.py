"""The main window's top bar: the title, the summary of what is watched, the
auto-unload control, the time range, and the Settings… and Hosts… buttons."""

from __future__ import annotations

from PySide6.QtCore import QEvent, Qt
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QPushButton, QSizePolicy, QWidget

from app.ui.agents.auto_unload import AutoUnloadControl
from app.ui.settings.values import AutoUnloadSettings
from app.ui.style.text import plain_label, plain_tip

APP_TITLE = "VRAM Steward"

SPANS: tuple[tuple[str, float], ...] = (
    ("1 min", 60.0),
    ("10 min", 600.0),
    ("1 h", 3600.0),
    ("24 h", 86400.0),
)


class TopBar(QWidget):
    """Widgets only: the window connects their signals."""

    def __init__(self, auto_unload: AutoUnloadSettings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        top = QHBoxLayout(self)
        top.setContentsMargins(0, 0, 0, 0)
        top.setSpacing(12)
        self.title_label = QLabel(APP_TITLE, self)
        self.title_label.setObjectName("appTitle")
        tf = self.title_label.font()
        tf.setBold(True)
        tf.setPointSizeF(tf.pointSizeF() * 1.35)
        self.title_label.setFont(tf)
        self.summary_label = plain_label(QLabel("", self))  # names hosts and GPUs
        self.summary_label.setObjectName("secondary")
        # Never widens the window: shortened with "…" (whole in its tooltip).
        self.summary_label.setSizePolicy(QSizePolicy.Policy.Ignored,
                                         QSizePolicy.Policy.Preferred)
        self.summary_label.installEventFilter(self)
        self._summary = ""
        range_label = QLabel("Time range", self)
        range_label.setObjectName("secondary")
        self.span_combo = QComboBox(self)
        self.span_combo.setObjectName("spanCombo")
        for text, seconds in SPANS:
            self.span_combo.addItem(text, seconds)
        self.span_combo.setToolTip("How much history the graphs show")
        range_label.setBuddy(self.span_combo)
        self.auto_unload = AutoUnloadControl(auto_unload, self)
        self.auto_unload.setVisible(False)  # shown once agents report
        self.settings_button = QPushButton("Settings…", self)
        self.settings_button.setObjectName("settingsButton")
        self.settings_button.setToolTip("Sampling, alerts, theme, start-up and auto-unload")
        self.hosts_button = QPushButton("Hosts…", self)
        self.hosts_button.setObjectName("hostsButton")
        self.hosts_button.setToolTip("Other machines whose GPUs this window shows: add "
                                     "(ssh:// or https://), remove, see why one is not "
                                     "connected")
        top.addWidget(self.title_label)
        top.addWidget(self.summary_label, 1, Qt.AlignmentFlag.AlignBottom)
        top.addWidget(self.auto_unload)
        top.addSpacing(8)
        top.addWidget(range_label)
        top.addWidget(self.span_combo)
        top.addWidget(self.hosts_button)
        top.addWidget(self.settings_button)

    def set_summary(self, text: str) -> None:
        """"3 hosts · 7 GPUs · …", shortened to the room it has."""
        if text != self._summary:
            self._summary = text
            self.summary_label.setToolTip(plain_tip(text))
            self._elide()

    def summary(self) -> str:
        return self._summary

    def eventFilter(self, watched, event) -> bool:  # noqa: N802
        if watched is self.summary_label and event.type() == QEvent.Type.Resize:
            self._elide()
        return super().eventFilter(watched, event)

    def _elide(self) -> None:
        label = self.summary_label
        width = label.width()
        text = (label.fontMetrics().elidedText(self._summary, Qt.TextElideMode.ElideRight, width)
                if width > 0 and label.isVisible() else self._summary)
        label.setText(text)
