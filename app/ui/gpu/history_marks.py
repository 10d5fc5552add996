"""Where a GPU's history begins and where it has holes, marked on its plot.

A line that starts mid-plot would otherwise read as "memory was 0 before"; a
straight segment across a stretch with no samples (source down, machine asleep)
would invent values.  The curves break at gaps (:func:`plot_data.break_at_gaps`);
this layer shades each gap and draws a labelled line at the history's start.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPalette

from app.core.monitor.plot_data import PlotData
from app.ui.style import palette as pal

MAX_GAPS = 8  # shaded at most; the widest ones


class HistoryMarks:
    """A start line with its label and a few pooled gap regions on ``item``."""

    def __init__(self, item: pg.PlotItem) -> None:
        self._item = item
        self.start_line = pg.InfiniteLine(angle=90, movable=False)
        self.start_line.setZValue(-5)
        self.start_line.hide()
        item.addItem(self.start_line, ignoreBounds=True)
        self.start_label = pg.TextItem("history starts", anchor=(0, 0))
        self.start_label.setZValue(-5)
        self.start_label.hide()
        item.addItem(self.start_label, ignoreBounds=True)
        self._regions: list[pg.LinearRegionItem] = []
        self._brush = pg.mkBrush(QColor(128, 128, 128, 40))

    def apply_theme(self, palette: QPalette) -> None:
        muted = pal.muted(palette)
        self.start_line.setPen(pg.mkPen(muted, width=1, style=Qt.PenStyle.DashDotLine))
        self.start_label.setColor(muted)
        shade = QColor(pal.faint(palette))
        shade.setAlpha(110)
        self._brush = pg.mkBrush(shade)
        for region in self._regions:
            region.setBrush(self._brush)

    def place(self, data: PlotData, top: float, span_s: float) -> None:
        """Show ``data``'s history start and gaps; ``top``: the y of the label (GiB)."""
        start = data.history_start
        if start is None:
            self.start_line.hide()
            self.start_label.hide()
        else:
            self.start_line.setPos(start)
            self.start_line.show()
            # Right of the line, or left of it near the right edge (a young history).
            self.start_label.setAnchor((1, 0) if start > -0.25 * span_s else (0, 0))
            self.start_label.setPos(start, top)
            self.start_label.show()
        gaps = sorted(data.gaps, key=lambda g: g[1] - g[0], reverse=True)[:MAX_GAPS]
        while len(self._regions) < len(gaps):
            region = pg.LinearRegionItem(movable=False, brush=self._brush,
                                         pen=pg.mkPen(None))
            region.setZValue(-6)
            self._item.addItem(region, ignoreBounds=True)
            self._regions.append(region)
        for region, (x0, x1) in zip(self._regions, gaps):
            region.setRegion((x0, x1))
            region.setToolTip("No samples here: the source was unavailable or the "
                              "app was not sampling")
            region.show()
        for region in self._regions[len(gaps):]:
            region.hide()

    def gaps_shown(self) -> list[tuple[float, float]]:
        return [tuple(r.getRegion()) for r in self._regions if r.isVisible()]
