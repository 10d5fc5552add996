"""The slim memory gauge under a GPU's header."""

from __future__ import annotations

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import QSizePolicy, QWidget

from app.ui.style import palette as pal
from app.ui.style.painting import rounded_track


class MemoryGauge(QWidget):
    """A slim bar: used memory filled in its level colour, driver-reserved hatched apart."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.used_fraction: float | None = None
        self.reserved_fraction: float = 0.0
        self.level = pal.LEVEL_UNKNOWN
        self.stale = False  # the last known figures of a host not connected: grey
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMinimumWidth(120)

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(320, 12)

    def set_values(self, used: int | None, total: int | None, reserved: int | None) -> None:
        if used is None or not total:
            self.used_fraction = None
        else:
            self.used_fraction = max(0.0, min(1.0, used / total))
        self.reserved_fraction = 0.0 if reserved is None or not total else max(
            0.0, min(1.0, reserved / total))
        self.level = pal.level_for(self.used_fraction)
        self.update()

    def set_stale(self, stale: bool) -> None:
        if stale != self.stale:
            self.stale = stale
            self.update()

    def fill_color(self) -> QColor:
        if self.stale:
            return pal.muted(self.palette())
        return pal.level_color(self.level, self.palette())

    def paintEvent(self, event) -> None:  # noqa: N802
        p, rect = rounded_track(self)
        w = rect.width()
        if self.reserved_fraction:
            res_w = w * self.reserved_fraction
            res = QRectF(rect.right() - res_w, rect.top(), res_w, rect.height())
            p.fillRect(res, pal.muted(self.palette()))
            p.fillRect(res, QBrush(pal.faint(self.palette()), Qt.BrushStyle.BDiagPattern))
        if self.used_fraction:
            p.fillRect(QRectF(rect.left(), rect.top(), w * self.used_fraction, rect.height()),
                       self.fill_color())
        p.end()
