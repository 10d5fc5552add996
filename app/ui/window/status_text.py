"""The status bar's last result, elided to the room the bar leaves it."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QWidget

from app.ui.style.elided_label import ElidedLabel


class StatusText(ElidedLabel):
    """Elided at its end where the bar is short, never running into the labels
    beside it; its tooltip (set by whoever sets the text) and :meth:`text` hold
    the whole of it."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent, lambda metrics, text, width: metrics.elidedText(
            text, Qt.TextElideMode.ElideRight, width))

    def text(self) -> str:
        return self.full_text()


__all__ = ["StatusText"]
