"""Shown instead of the monitor when no GPU can be read (no driver, no NVML)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.ui.style import palette as pal
from app.ui.style.text import plain_label

EXPLANATION = (
    "VRAM Steward reads GPU memory through NVIDIA's management library (NVML), "
    "which ships with the NVIDIA driver. Install the proprietary NVIDIA driver "
    "(it provides <i>libnvidia-ml.so</i> on Linux, <i>nvml.dll</i> on Windows), "
    "make sure <tt style='white-space:nowrap'>nvidia&#8209;smi</tt> works, "
    "then press Retry.<br><br>"
    "Without a GPU you can still try the app with simulated GPUs."
)


class NoDriverView(QWidget):
    """A friendly, centred explanation with "Show demo" and "Retry" buttons."""

    demo_requested = Signal()
    retry_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("noDriverView")
        outer = QVBoxLayout(self)
        outer.addStretch(1)
        row = QHBoxLayout()
        row.addStretch(1)

        card = QFrame(self)
        card.setObjectName("noDriverCard")
        card.setMaximumWidth(560)
        lay = QVBoxLayout(card)
        lay.setContentsMargins(36, 32, 36, 28)
        lay.setSpacing(12)

        self.icon_label = QLabel("⚠", card)
        self.icon_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        f = self.icon_label.font()
        f.setPointSizeF(f.pointSizeF() * 3.2)
        self.icon_label.setFont(f)
        self.icon_label.setStyleSheet(f"color: {pal.LEVEL_COLORS[pal.LEVEL_WARNING]};")

        self.title_label = QLabel("No NVIDIA driver found", card)
        self.title_label.setObjectName("noDriverTitle")
        self.title_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        tf = self.title_label.font()
        tf.setBold(True)
        tf.setPointSizeF(tf.pointSizeF() * 1.6)
        self.title_label.setFont(tf)

        self.reason_label = plain_label(QLabel("", card))  # the driver's words
        self.reason_label.setObjectName("noDriverReason")
        self.reason_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.reason_label.setWordWrap(True)
        self.reason_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        rf = self.reason_label.font()
        rf.setBold(True)
        self.reason_label.setFont(rf)

        self.explanation_label = QLabel(EXPLANATION, card)
        self.explanation_label.setObjectName("secondary")
        self.explanation_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.explanation_label.setWordWrap(True)
        self.explanation_label.setTextFormat(Qt.TextFormat.RichText)

        buttons = QHBoxLayout()
        buttons.setSpacing(12)
        buttons.addStretch(1)
        self.demo_button = QPushButton("Show demo", card)
        self.demo_button.setObjectName("showDemoButton")
        self.demo_button.setDefault(True)
        self.demo_button.setAutoDefault(True)
        self.demo_button.setMinimumHeight(36)
        self.demo_button.setMinimumWidth(140)
        df = self.demo_button.font()
        df.setBold(True)
        self.demo_button.setFont(df)
        self.demo_button.setToolTip("Explore the app with simulated GPUs and processes")
        self.retry_button = QPushButton("Retry", card)
        self.retry_button.setObjectName("retryButton")
        self.retry_button.setMinimumHeight(36)
        self.retry_button.setMinimumWidth(100)
        self.retry_button.setToolTip("Look for the NVIDIA driver again")
        buttons.addWidget(self.demo_button)
        buttons.addWidget(self.retry_button)
        buttons.addStretch(1)

        lay.addWidget(self.icon_label)
        lay.addWidget(self.title_label)
        lay.addWidget(self.reason_label)
        lay.addSpacing(4)
        lay.addWidget(self.explanation_label)
        lay.addSpacing(10)
        lay.addLayout(buttons)

        row.addWidget(card, 10)
        row.addStretch(1)
        outer.addLayout(row)
        outer.addStretch(1)

        self.demo_button.clicked.connect(self.demo_requested)
        self.retry_button.clicked.connect(self.retry_requested)
        self._style()

    def changeEvent(self, event) -> None:  # noqa: N802
        from PySide6.QtCore import QEvent

        if event.type() == QEvent.Type.PaletteChange:
            self._style()
        super().changeEvent(event)

    def _style(self) -> None:
        accent = pal.LEVEL_COLORS[pal.LEVEL_NORMAL]
        self.setStyleSheet(
            "QFrame#noDriverCard { background: palette(base); border: 1px solid palette(mid);"
            " border-radius: 12px; }"
            + pal.view_rules(self.palette()) +
            f"QPushButton#showDemoButton {{ background: {accent}; color: white; border: none;"
            " border-radius: 6px; padding: 6px 18px; }"
            "QPushButton#showDemoButton:hover { background: #2569B0; }"
            "QPushButton#retryButton { border: 1px solid palette(mid); border-radius: 6px;"
            " padding: 6px 18px; background: palette(button); }"
        )

    def set_reason(self, reason: str | None) -> None:
        self.reason_label.setText(reason or "The NVIDIA driver could not be reached.")

    def reason(self) -> str:
        return self.reason_label.text()
