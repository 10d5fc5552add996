"""Model unload / reload markers on a GPU's plot.

The scatter points are stored at "event time − reference" and the whole layer is
shifted by one ``setPos`` per frame into the plot's frame (seconds before the
newest sample), so a redraw never rebuilds them.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyqtgraph as pg
from PySide6.QtGui import QPainterPath, QPalette

from app.core.units import GiB
from app.ui.style import palette as pal


def _triangle(down: bool) -> QPainterPath:
    """A triangle whose tip is the data point: pointing down from above it (unload:
    memory goes down) or up from below it (reload).  pyqtgraph renders a symbol into a
    square of ``size`` centred on the point (y grows downwards), so the triangle takes
    one half of it: drawn with size 20 it is 12 px wide and 10 px tall."""
    path = QPainterPath()
    base = -0.5 if down else 0.5
    path.moveTo(-0.3, base)
    path.lineTo(0.3, base)
    path.lineTo(0.0, 0.0)
    path.closeSubpath()
    return path


_UNLOAD_SYMBOL = _triangle(down=True)
_RELOAD_SYMBOL = _triangle(down=False)


class MarkerLayer:
    """Three scatter items (unload, reload, failed) on one plot item."""

    def __init__(self, item: pg.PlotItem) -> None:
        self.unload = pg.ScatterPlotItem(symbol=_UNLOAD_SYMBOL, size=20, pxMode=True)
        self.reload = pg.ScatterPlotItem(symbol=_RELOAD_SYMBOL, size=20, pxMode=True)
        self.failed = pg.ScatterPlotItem(symbol="x", size=8, pxMode=True)
        for m in self.items:
            m.setZValue(15)
            m.hide()
            item.addItem(m, ignoreBounds=True)
        self.markers: list = []  # app.core.agents.events.Marker, as last set
        self.x: np.ndarray = np.empty(0)  # marker times − ref
        self.ref: float | None = None  # epoch the marker x are relative to
        self.version: int | None = None

    @property
    def items(self) -> tuple[pg.ScatterPlotItem, ...]:
        return (self.unload, self.reload, self.failed)

    def set(self, markers: Iterable, version: int | None, palette: QPalette,
            memory_total: int | None) -> bool:
        """Rebuild the scatter data when ``version`` changed; True when rebuilt."""
        if version is not None and version == self.version:
            return False
        self.version = version
        markers = list(markers)
        self.markers = markers
        if not markers:
            self.x = np.empty(0)
            for m in self.items:
                m.clear()
                m.hide()
            return True
        ref = max(mk.time for mk in markers)
        self.ref = ref
        self.x = np.array([mk.time - ref for mk in markers], dtype=np.float64)
        fallback = (memory_total or 0) / GiB * 0.5
        groups: dict[str, tuple[list[float], list[float]]] = {
            "unload": ([], []), "reload": ([], []), "failed": ([], [])}
        for x, mk in zip(self.x, markers):
            key = "failed" if not mk.ok else ("unload" if mk.action == "unload" else "reload")
            groups[key][0].append(float(x))
            groups[key][1].append(mk.y / GiB if mk.y is not None else fallback)
        scatters = {"unload": self.unload, "reload": self.reload, "failed": self.failed}
        for key, (xs, ys) in groups.items():
            scatter = scatters[key]
            if not xs:
                scatter.clear()
                scatter.hide()
                continue
            scatter.setData(x=xs, y=ys)
            scatter.show()
        self.apply_theme(palette)
        return True

    def apply_theme(self, palette: QPalette) -> None:
        """Neutral markers in ``palette``'s colours: the shape tells unload (▼), reload
        (▲) and a failed action (✕) apart, never a level or process colour."""
        color = pal.marker_color(palette)
        edge = pg.mkPen(pal.background(palette), width=1)
        for scatter in (self.unload, self.reload):
            scatter.setBrush(pg.mkBrush(color))
            scatter.setPen(edge)
        self.failed.setBrush(pg.mkBrush(color))
        self.failed.setPen(pg.mkPen(color, width=2))

    def shift(self, now_epoch: float | None) -> float:
        """From the markers' frame to the plot's (seconds before ``now_epoch``)."""
        if self.ref is None or now_epoch is None:
            return 0.0
        return self.ref - now_epoch

    def positions(self, now_epoch: float | None) -> list[tuple[float, str, str]]:
        """(x in the plot's time frame, action, text) of every marker."""
        shift = self.shift(now_epoch)
        return [(float(x) + shift, mk.action, mk.text) for x, mk in zip(self.x, self.markers)]

    def place(self, now_epoch: float | None) -> None:
        if not self.markers:
            return
        shift = self.shift(now_epoch)
        for m in self.items:
            if m.pos().x() != shift:
                m.setPos(shift, 0.0)

    def near(self, x: float, tolerance: float, now_epoch: float | None) -> list[str]:
        """Texts of the (at most four newest) markers within ``tolerance`` of ``x``."""
        if not self.markers:
            return []
        xs = self.x + self.shift(now_epoch)
        hits = np.nonzero(np.abs(xs - x) <= tolerance)[0]
        return [self.markers[i].text for i in hits[-4:]]
