"""A one-line label that elides its text to the width it is given, not to a guess.

The width is measured when the label is laid out (and again on every resize or
font change), so a name shows in full whenever it fits and loses characters only
when the room is really short; its sizeHint asks for the whole text.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, QSize
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget

from app.ui.style.text import elide_keeping_pid, plain_label

Elide = Callable[[QFontMetrics, str, int], str]


class ElidedLabel(QLabel):
    """Plain text, one line; :meth:`text` is what shows, :meth:`full_text` the whole.

    ``elide``: how to shorten (by default the end of a name, keeping its "(pid)")."""

    def __init__(self, parent: QWidget | None = None, elide: Elide = elide_keeping_pid) -> None:
        super().__init__(parent)
        plain_label(self)  # names are their owners' words, never rich text
        self._elide = elide
        self._full = ""
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)

    def setText(self, text: str) -> None:  # noqa: N802
        self._full = text
        self._fit()

    def full_text(self) -> str:
        return self._full

    def elided(self) -> bool:
        """Whether characters are left out now."""
        return self.text() != self._full

    def full_width(self) -> int:
        """Pixels the whole text takes, margins included."""
        m = self.contentsMargins()
        return self.fontMetrics().horizontalAdvance(self._full) + m.left() + m.right() \
            + 2 * self.margin()

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(self.full_width(), super().sizeHint().height())

    def _fit(self) -> None:
        metrics = self.fontMetrics()
        room = self.contentsRect().width() - 2 * self.margin()
        fits = metrics.horizontalAdvance(self._full) <= room
        shown = self._full if fits else self._elide(metrics, self._full, max(0, room))
        if shown != super().text():
            super().setText(shown)

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._fit()

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802
        super().changeEvent(event)
        if event.type() == QEvent.Type.FontChange:
            self._fit()


__all__ = ["ElidedLabel"]
