"""One slim line over the GPU area when this machine's GPUs cannot be read but
remote hosts' can: "This machine: no NVIDIA driver (…)" with Retry and Show
demo.  It takes its own room in the layout (never covering a row), so the
hosts' GPUs fill the area below it instead of the whole no-driver page."""

from __future__ import annotations

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QSizePolicy, QWidget

from app.ui.style import palette as pal
from app.ui.style.text import plain_label, plain_tip

TITLE = "This machine: no NVIDIA driver"


class LocalProblemBar(QFrame):
    """Hidden until :meth:`show_problem` is given a reason."""

    demo_requested = Signal()
    retry_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("localProblem")
        self.reason = ""
        row = QHBoxLayout(self)
        row.setContentsMargins(10, 3, 6, 3)
        row.setSpacing(8)
        self.icon_label = QLabel("⚠", self)
        self.title_label = QLabel(TITLE, self)
        font = self.title_label.font()
        font.setBold(True)
        self.title_label.setFont(font)
        self.reason_label = plain_label(QLabel("", self))  # the driver's words
        self.reason_label.setObjectName("secondary")
        self.reason_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.retry_button = QPushButton("Retry", self)
        self.retry_button.setObjectName("localRetryButton")
        self.retry_button.setToolTip("Look for the NVIDIA driver again")
        self.demo_button = QPushButton("Show demo", self)
        self.demo_button.setObjectName("localDemoButton")
        self.demo_button.setToolTip("Simulated GPUs and processes on this machine")
        for w in (self.icon_label, self.title_label):
            row.addWidget(w)
        row.addWidget(self.reason_label, 1)
        row.addWidget(self.retry_button)
        row.addWidget(self.demo_button)
        self.retry_button.clicked.connect(self.retry_requested)
        self.demo_button.clicked.connect(self.demo_requested)
        self.hide()
        self._style()

    def show_problem(self, reason: str | None) -> None:
        """Show ``reason`` (why the driver could not be read); None hides the line."""
        if reason is None:
            self.hide()
            return
        if reason != self.reason:
            self.reason = reason
            self.setToolTip(plain_tip(reason))
            self._elide()
        self.show()

    def _elide(self) -> None:
        label = self.reason_label
        text = f"({self.reason})" if self.reason else ""
        width = label.width()
        shown = (label.fontMetrics().elidedText(text, Qt.TextElideMode.ElideRight, width)
                 if width > 0 else text)
        label.setText(shown)

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._elide()

    def changeEvent(self, event) -> None:  # noqa: N802
        if event.type() == QEvent.Type.PaletteChange:
            self._style()
        super().changeEvent(event)

    def _style(self) -> None:
        warn = pal.LEVEL_COLORS[pal.LEVEL_WARNING]
        self.icon_label.setStyleSheet(f"color: {warn};")
        self.setStyleSheet(
            f"QFrame#localProblem {{ border: 1px solid {warn}; border-radius: 6px; }}"
            "QFrame#localProblem QPushButton { padding: 2px 12px; }")
