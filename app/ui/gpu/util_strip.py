"""SM utilisation over time, a short strip under a GPU's VRAM plot.

Painted with QPainter from the same decimated time axis as the VRAM curves
(:attr:`PlotData.x`, :attr:`PlotData.util`) and aligned with the plot's view
box, so a spike in memory and in compute line up by eye.  One path per frame:
far cheaper than a second pyqtgraph plot per GPU.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from app.core.units import fmt_percent
from app.ui.style import palette as pal
from app.ui.style.painting import fill_known_runs

CAPTION = "SM"


class UtilStrip(QWidget):
    """SM % (0–100) over the plot's span; gaps (unknown) are left blank."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("utilStrip")
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setFixedHeight(44)
        self.span_s = 600.0
        self.now_percent: float | None = None  # the latest sample's figure
        self._x = np.empty(0)
        self._y = np.empty(0)
        self._extent_source: weakref.WeakMethod | None = None
        self.setToolTip("SM utilisation: the share of time a kernel ran on the GPU "
                        "(NVML utilization.gpu), over the same time as the VRAM graph")

    def set_data(self, x: np.ndarray, util: np.ndarray | None, span_s: float) -> None:
        """``x``: seconds before the newest sample (<= 0); ``util``: percent at ``x``."""
        self.span_s = span_s
        if util is None:
            self._x, self._y = np.empty(0), np.empty(0)
        else:
            self._x, self._y = x, util
        self.update()

    def set_now(self, percent: float | None) -> None:
        """The latest sample's figure: only the caption beside the strip repaints."""
        if percent != self.now_percent:
            self.now_percent = percent
            self.update(self._caption(self._area()).toAlignedRect())

    def follow(self, source: Callable[[], tuple[float, float] | None]) -> None:
        """Where the plot's view box lies in this widget, horizontally (left px, width
        px), asked at every paint so it follows the layout.  ``source`` is a bound
        method of the panel, held weakly: no cycle keeps a closed panel alive."""
        self._extent_source = weakref.WeakMethod(source)

    def extent(self) -> tuple[float, float]:
        """(left px, width px) of the strip's plotting area: under the plot's view box."""
        source = self._extent_source() if self._extent_source is not None else None
        extent = source() if source is not None else None
        return extent if extent is not None else (52.0, float(self.width() - 52))

    def _area(self) -> QRectF:
        left, width = self.extent()
        return QRectF(left, 3.0, max(width, 1.0), self.height() - 6.0)

    @staticmethod
    def _caption(area: QRectF) -> QRectF:
        return QRectF(0, area.top(), max(area.left() - 6, 0), area.height())

    def paintEvent(self, event) -> None:  # noqa: N802
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        palette = self.palette()
        area = self._area()
        painter.setPen(pal.muted(palette))
        painter.drawText(self._caption(area),
                         Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
                         f"{CAPTION}\n{fmt_percent(self.now_percent)}")
        # A new figure repaints its caption only: the series waits for new data.
        if event.rect().intersects(area.adjusted(-1, -1, 1, 1).toAlignedRect()):
            painter.setPen(QPen(pal.faint(palette), 1))
            painter.drawRect(area)
            self._paint_series(painter, area, pal.util_color(palette))
        painter.end()

    def _paint_series(self, painter: QPainter, area: QRectF, color: QColor) -> None:
        x, y = self._x, self._y
        if x.size < 2:
            return
        px = area.left() + (1.0 + x / self.span_s) * area.width()
        py = area.bottom() - np.clip(y, 0.0, 100.0) / 100.0 * area.height()
        fill = QColor(color)
        fill.setAlpha(70)
        painter.setClipRect(area)
        bottom = area.bottom()
        # One filled run per stretch of known values: unknown stays a visible gap.
        fill_known_runs(painter, px, py, bottom, fill)
        painter.setPen(QPen(color, 1))
        painter.drawPath(pg.arrayToQPath(px, py, connect="finite"))
