"""A GPU's VRAM-over-time plot: sets a :class:`PlotData` on a fixed set of curves.

The curves are reused between refreshes: the device total, :data:`TOP_N`
process curves (a process keeps its curve slot while it stays in the top), one
"other processes" curve, the highlighted process when it is not among the top
ones, and the unattributed memory.  Everything about what to draw (ranking,
sums, decimation, legend) comes shaped from :mod:`app.core.monitor.plot_data`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QColor, QPainterPath, QPalette, QPen
from PySide6.QtWidgets import QGraphicsPathItem, QGraphicsView, QSizePolicy, QWidget

from app.core.monitor.plot_data import (
    TOP_N,
    UNATTRIBUTED_LABEL,
    LegendEntry,
    PlotData,
    Role,
    Series,
    Style,
)
from app.core.units import GiB, fmt_ago, fmt_bytes, fmt_percent
from app.ui.gpu.axes import TimeAxis, ValueAxis
from app.ui.gpu.history_marks import HistoryMarks
from app.ui.gpu.markers import MarkerLayer
from app.ui.style import palette as pal

_PEN_STYLES = {Style.SOLID: Qt.PenStyle.SolidLine, Style.DASHED: Qt.PenStyle.DashLine,
               Style.DOTTED: Qt.PenStyle.DotLine}


class _LeaveFilter(QObject):
    def __init__(self, callback: Callable[[], None]) -> None:
        super().__init__()
        self._callback = callback

    def eventFilter(self, obj, event) -> bool:  # noqa: N802
        if event.type() == QEvent.Type.Leave:
            self._callback()
        return False


class _Curve(pg.PlotCurveItem):
    """A curve of :class:`PlotData`: x ascending (seconds before now), y with NaN
    gaps.  Its bounds (asked after every new data, for the scene and the view)
    are its ends and one pass each for the lowest and highest y, not pyqtgraph's
    general search."""

    def dataBounds(self, ax, frac=1.0, orthoRange=None):  # noqa: N802, N803
        x, y = self.xData, self.yData
        pen = self.opts["pen"]
        if (frac < 1.0 or orthoRange is not None or x is None or len(x) == 0
                or (pen is not None and not pen.isCosmetic())):
            return super().dataBounds(ax, frac, orthoRange)
        if ax == 0:
            return float(x[0]), float(x[-1])
        lo, hi = float(np.fmin.reduce(y)), float(np.fmax.reduce(y))
        if not (np.isfinite(lo) and np.isfinite(hi)):  # all gaps, or infinities
            return super().dataBounds(ax, frac, orthoRange)
        return lo, hi


class GpuPlot(pg.PlotWidget):
    """The plot area: curves, grid, capacity line, hover read-out and event markers."""

    def __init__(self, parent: QWidget | None = None, colors: pal.ProcessColors | None = None,
                 owner: Hashable | None = None) -> None:
        """``colors``: the window's process colours, shared by its panels (a new set
        when None); ``owner``: this plot's name in them (its GPU's display id)."""
        self.time_axis = TimeAxis(orientation="bottom")
        self.value_axis = ValueAxis(orientation="left")
        super().__init__(parent, axisItems={"bottom": self.time_axis, "left": self.value_axis})
        self.data: PlotData | None = None
        #: Epoch seconds of the newest sample drawn ("now" of the time axis).
        self.now_epoch: float | None = None
        self.colors = colors if colors is not None else pal.ProcessColors()
        self.color_owner: Hashable = owner if owner is not None else id(self)
        self.destroyed.connect(functools.partial(self.colors.release, self.color_owner))
        self._slot_keys: list[Hashable | None] = []  # process curve slots, as drawn
        self._key_colors: dict[Hashable, QColor] = {}
        self._pens: dict[tuple[int, int, Style], QPen] = {}  # (rgba, width, style) -> pen
        self._palette = self.palette()
        self._hover_x: float | None = None
        self.setMinimumHeight(180)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        # The background is one colour: filled where needed, not kept in a pixmap the
        # size of the plot (pyqtgraph caches it: ~2 MB a panel at 1000 x 500).
        self.setCacheMode(QGraphicsView.CacheModeFlag.CacheNone)
        item = self.getPlotItem()
        item.setMenuEnabled(False)
        item.hideButtons()
        item.setMouseEnabled(x=False, y=False)
        # Grid: one path of lines at the major ticks, painted by Qt without a call
        # into Python.  (The axes' own grid is painted through a scaled QPicture and
        # costs ~10x more per frame; an item per line, a Python paint each.)
        self._grid = QGraphicsPathItem()
        self._grid.setZValue(-10)
        item.addItem(self._grid, ignoreBounds=True)
        item.getViewBox().sigRangeChanged.connect(self.update_grid)
        item.getViewBox().sigResized.connect(self.update_grid)
        item.getViewBox().setDefaultPadding(0.0)
        left = item.getAxis("left")
        left.setLabel("VRAM (GiB)")
        left.enableAutoSIPrefix(False)
        left.setWidth(52)
        self.time_axis.enableAutoSIPrefix(False)
        self.time_axis.setHeight(26)

        self.total_curve = self._curve(z=5)
        self.other_curve = self._curve(z=1)
        self.process_curves = [self._curve(z=2) for _ in range(TOP_N)]
        self.extra_curve = self._curve(z=6)  # the highlighted process when not in the top N
        self.unattributed_curve = self._curve(z=1.5)
        self.limit_line = pg.InfiniteLine(angle=0, movable=False)
        self.limit_line.setZValue(0)
        self.limit_line.hide()
        item.addItem(self.limit_line, ignoreBounds=True)

        self.cursor_line = pg.InfiniteLine(angle=90, movable=False)
        self.cursor_line.setZValue(20)
        self.cursor_line.hide()
        item.addItem(self.cursor_line, ignoreBounds=True)
        self.hover_text = pg.TextItem(anchor=(0, 0))
        self.hover_text.setZValue(21)
        self.hover_text.hide()
        item.addItem(self.hover_text, ignoreBounds=True)
        self.markers = MarkerLayer(item)
        self.history_marks = HistoryMarks(item)

        self._mouse_proxy = pg.SignalProxy(self.scene().sigMouseMoved, rateLimit=30,
                                           slot=self._on_mouse_moved)
        self._leave_filter = _LeaveFilter(self.hide_hover)
        self.installEventFilter(self._leave_filter)

    def _curve(self, z: float) -> pg.PlotCurveItem:
        # PlotCurveItem, not PlotDataItem: the data come decimated to the pixel width
        # and cut to the span already (plot_data), so PlotDataItem's own clipping and
        # downsampling would only redo that work on every frame.
        curve = _Curve()
        curve.setZValue(z)
        curve.base_z = z
        curve.hide()
        self.getPlotItem().addItem(curve)
        return curve

    def width_px(self) -> int:
        """The plot area's width in pixels (0 before it is laid out)."""
        return int(self.getPlotItem().getViewBox().width())

    def set_span(self, span_s: float) -> None:
        self.setXRange(-span_s, 0, padding=0)

    def x_range(self) -> tuple[float, float]:
        (x0, x1), _ = self.getPlotItem().getViewBox().viewRange()
        return x0, x1

    # -- grid and theme -------------------------------------------------------------------
    def update_grid(self, *args) -> None:
        vb = self.getPlotItem().getViewBox()
        (x0, x1), (y0, y1) = vb.viewRange()
        path = QPainterPath()
        for vertical, axis, lo, hi, size in ((True, self.time_axis, x0, x1, vb.width()),
                                             (False, self.value_axis, y0, y1, vb.height())):
            if size <= 0:
                continue
            levels = axis.tickValues(lo, hi, size)
            for v in (levels[0][1] if levels else []):
                if lo < v < hi:
                    path.moveTo(v, y0) if vertical else path.moveTo(x0, v)
                    path.lineTo(v, y1) if vertical else path.lineTo(x1, v)
        pen = QPen(_with_alpha(pal.faint(self.palette()), 255), 1)
        pen.setCosmetic(True)  # one pixel wide whatever the scale
        self._grid.setPen(pen)
        self._grid.setPath(path)

    def apply_theme(self, palette: QPalette) -> None:
        fg = pal.foreground(palette)
        muted = pal.muted(palette)
        self.setBackground(pal.background(palette))
        item = self.getPlotItem()
        for name in ("left", "bottom"):
            axis = item.getAxis(name)
            axis.setPen(pg.mkPen(pal.faint(palette)))
            axis.setTextPen(pg.mkPen(muted))
            axis.setLabel(**({"text": "VRAM (GiB)", "color": pal.hex_color(muted)}
                             if name == "left" else {}))
        self.limit_line.setPen(pg.mkPen(muted, width=1, style=Qt.PenStyle.DashLine))
        self.update_grid()
        self.cursor_line.setPen(pg.mkPen(muted, width=1, style=Qt.PenStyle.DotLine))
        self.hover_text.fill = pg.mkBrush(_with_alpha(pal.background(palette), 235))
        self.hover_text.border = pg.mkPen(pal.faint(palette))
        self.hover_text.setColor(fg)
        self.markers.apply_theme(palette)
        self.history_marks.apply_theme(palette)

    # -- drawing --------------------------------------------------------------------------
    def draw(self, data: PlotData, palette: QPalette) -> None:
        """Set ``data`` on the curves, capacity line and y range, in the colours of
        ``palette`` (the panel's)."""
        self.data = data
        self._palette = palette
        if data.total is None:
            for c in self._all_curves():
                c.hide()
            self._slot_keys = []
            self._key_colors = self.colors.assign(self.color_owner, ())
            return
        top = data.top_keys
        # Keep a process in the same curve slot between refreshes (less churn).
        slots: list[Hashable | None] = [k if k in top else None for k in self._slot_keys]
        slots += [None] * (TOP_N - len(slots))
        for k in top:
            if k not in slots:
                slots[slots.index(None)] = k
        self._slot_keys = slots
        self._key_colors = self.colors.assign(self.color_owner, data.shown_keys)

        x = data.x
        self._set_curve(self.total_curve, x, data.total)
        by_key = {s.key: s for s in data.processes}
        for curve, key in zip(self.process_curves, slots):
            if key is None:
                curve.hide()
            else:
                self._set_curve(curve, x, by_key[key])
        for curve, series in ((self.other_curve, data.other), (self.extra_curve, data.extra),
                              (self.unattributed_curve, data.unattributed)):
            if series is None:
                curve.hide()
            else:
                self._set_curve(curve, x, series)

        item = self.getPlotItem()
        total = data.capacity
        if total:
            top_gib = total / GiB
            self.limit_line.setPos(top_gib)
            self.limit_line.show()
            item.getViewBox().enableAutoRange(y=False)
            item.setYRange(0, top_gib * 1.05, padding=0)
        else:
            self.limit_line.hide()
            item.getViewBox().enableAutoRange(y=True)
        (x0, x1), (_, y_top) = item.getViewBox().viewRange()
        self.history_marks.place(data, y_top, x1 - x0)
        self.markers.place(self.now_epoch)
        if self._hover_x is not None and self.cursor_line.isVisible():
            self._show_hover(self._hover_x)

    def color_of(self, entry: LegendEntry | Series) -> QColor:
        """The colour of a series or legend entry in the palette of the last draw."""
        palette = self._palette
        role = entry.role
        if role is Role.TOTAL:
            return pal.foreground(palette)
        if role is Role.CAPACITY:
            return pal.muted(palette)
        if role is Role.OTHER:
            return pal.other_color(palette)
        if role is Role.UNATTRIBUTED:
            return pal.unattributed_color(palette)
        color = self._key_colors.get(entry.key)
        return QColor(color) if color is not None else pal.other_color(palette)

    def _all_curves(self) -> list[pg.PlotCurveItem]:
        return [self.total_curve, self.other_curve, self.extra_curve, self.unattributed_curve,
                *self.process_curves]

    def _set_curve(self, curve: pg.PlotCurveItem, x: np.ndarray, series: Series) -> None:
        y = np.divide(series.y, GiB, dtype=np.float64)
        finite = bool(np.isfinite(y).all())
        c = QColor(self.color_of(series))
        if series.dimmed:
            c.setAlpha(70)
        look = (c.rgba(), 2 if series.emphasised else 1, series.style)
        pen = self._pens.get(look)
        if pen is None:  # a handful of looks: each pen made once
            pen = self._pens[look] = pg.mkPen(c, width=look[1], style=_PEN_STYLES[look[2]])
        curve.setZValue(10 if series.emphasised else curve.base_z)
        curve.setData(x, y, pen=pen, connect="all" if finite else "finite",
                      skipFiniteCheck=finite)
        curve.show()

    def curve_for(self, key: Hashable) -> pg.PlotCurveItem | None:
        """The visible curve drawing ``key`` (a process or a special series key)."""
        data = self.data
        if data is None:
            return None
        for curve, series in ((self.total_curve, data.total), (self.other_curve, data.other),
                              (self.extra_curve, data.extra),
                              (self.unattributed_curve, data.unattributed)):
            if series is not None and series.key == key and curve.isVisible():
                return curve
        if key in self._slot_keys:
            return self.process_curves[self._slot_keys.index(key)]
        return None

    def shown_keys(self) -> list[Hashable]:
        """Process keys with their own curve now, in curve-slot order, then the extra one."""
        keys = [k for k in self._slot_keys if k is not None]
        if self.data is not None and self.data.extra is not None:
            keys.append(self.data.extra.key)
        return keys

    # -- hover ----------------------------------------------------------------------------
    def _on_mouse_moved(self, args) -> None:
        pos = args[0]
        vb = self.getPlotItem().getViewBox()
        if not vb.sceneBoundingRect().contains(pos):
            self.hide_hover()
            return
        self._show_hover(vb.mapSceneToView(pos).x())

    def hide_hover(self) -> None:
        self._hover_x = None
        self.cursor_line.hide()
        self.hover_text.hide()

    def hover_text_at(self, x: float) -> str:
        """The hover read-out for time ``x`` (seconds before newest, <= 0), plain text."""
        readout = self.data.readout_at(x) if self.data is not None else None
        if readout is None:
            return ""
        lines = [fmt_ago(readout.t), f"Device total: {fmt_bytes(readout.used)}"]
        lines += [f"{label}: {fmt_bytes(v)}" for label, v in readout.processes]
        if readout.has_unattributed:
            lines.append(f"{UNATTRIBUTED_LABEL}: {fmt_bytes(readout.unattributed)}")
        if readout.util is not None:
            lines.append(f"SM: {fmt_percent(readout.util)}")
        vb = self.getPlotItem().getViewBox()
        (x0, x1), _ = vb.viewRange()
        tolerance = 7.0 * (x1 - x0) / max(vb.width(), 1.0)  # about 7 px either side
        events = self.markers.near(x, tolerance, self.now_epoch)
        if events:
            lines.append("")
            lines.extend(("▼ " if t.startswith("Unload") else "▲ ") + t for t in events)
        return "\n".join(lines)

    def _show_hover(self, x: float) -> None:
        text = self.hover_text_at(x)
        if not text:
            return
        self._hover_x = x
        self.cursor_line.setPos(x)
        self.cursor_line.show()
        self.hover_text.setText(text)
        (x0, x1), (_, y1) = self.getPlotItem().getViewBox().viewRange()
        # Keep the read-out inside the plot: to the right of the cursor on the left half.
        right_half = x > (x0 + x1) / 2
        self.hover_text.setAnchor((1, 0) if right_half else (0, 0))
        self.hover_text.setPos(x, y1)
        self.hover_text.show()


def _with_alpha(color: QColor, alpha: int) -> QColor:
    c = QColor(color)
    c.setAlpha(alpha)
    return c
