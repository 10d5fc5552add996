"""One GPU: header, memory gauge, live figures and a VRAM-over-time plot.

Two update paths with very different costs:

* :meth:`GpuPanel.update_sample` runs for every snapshot and only sets text
  and the gauge;
* :meth:`GpuPanel.refresh_plot` runs on the window's display timer and pushes
  numpy arrays into a fixed set of reused curves: the device total, the top
  :data:`TOP_N` processes by current VRAM, one aggregated "other processes"
  curve, the highlighted process when it is not among the top ones, and the
  GPU's unattributed memory (used memory no listed process holds; NaN gaps
  where it was unknown, never 0).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, QRectF, QSize, Qt
from PySide6.QtGui import QBrush, QColor, QPainter, QPainterPath
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.core.monitor.history import SeriesView
from app.core.monitor.samples import DeviceState, GpuSample
from app.ui.gpu.torch_memory import AgentSection
from app.ui.gpu.unattributed import LABEL as UNATTRIBUTED_LABEL
from app.ui.gpu.unattributed import UNATTRIBUTED_KEY, explanation, unknown_reason
from app.ui.style import palette as pal
from app.ui.style.format import (
    NA,
    GiB,
    MiB,
    fmt_ago,
    fmt_bytes,
    fmt_gib,
    fmt_memory_usage,
    fmt_percent,
    fmt_temp,
    fmt_watts,
)
from app.ui.style.text import elide_keeping_pid

TOP_N = 8
MIN_HEIGHT = 262  # px without the "PyTorch memory" section
OTHER_KEY = "__other__"
TOTAL_KEY = "__total__"
LIMIT_KEY = "__capacity__"

Labels = Callable[[Hashable], str] | Mapping[Hashable, str]

# Nice tick spacings for a time axis, in seconds.
_TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600,
               43200, 86400)


class TimeAxis(pg.AxisItem):
    """Seconds relative to now (<= 0) shown as ``now``, ``30 s``, ``5 min``, ``2 h``."""

    def tickSpacing(self, minVal: float, maxVal: float, size: float):  # noqa: N802 (Qt naming)
        span = abs(maxVal - minVal)
        if span <= 0 or size <= 0:
            return super().tickSpacing(minVal, maxVal, size)
        wanted = max(2.0, size / 90.0)  # about one label every 90 px
        major = next((s for s in _TIME_STEPS if span / s <= wanted), _TIME_STEPS[-1])
        # One level only: every tick level is also a grid level, and grid lines are
        # what costs most when the plot is painted.
        return [(float(major), 0.0)]

    def tickStrings(self, values, scale, spacing):  # noqa: N802 (Qt naming)
        out = []
        for v in values:
            ago = -v
            if abs(ago) < 1e-6:
                out.append("now")
            elif spacing >= 3600:
                out.append(f"{ago / 3600:g} h")
            elif spacing >= 60:
                out.append(f"{ago / 60:g} min")
            else:
                out.append(f"{ago:g} s")
        return out


class ValueAxis(pg.AxisItem):
    """pyqtgraph's spacing, major level only (fewer grid lines: ~10x cheaper to paint)."""

    def tickSpacing(self, minVal: float, maxVal: float, size: float):  # noqa: N802
        levels = super().tickSpacing(minVal, maxVal, size)
        return levels[:1]


class MemoryGauge(QWidget):
    """A slim bar: used memory filled in its level colour, driver-reserved hatched apart."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.used_fraction: float | None = None
        self.reserved_fraction: float = 0.0
        self.level = pal.LEVEL_UNKNOWN
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

    def fill_color(self) -> QColor:
        return pal.level_color(self.level, self.palette())

    def paintEvent(self, event) -> None:  # noqa: N802
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        rect = QRectF(self.rect()).adjusted(0.5, 0.5, -0.5, -0.5)
        radius = rect.height() / 2
        track = QPainterPath()
        track.addRoundedRect(rect, radius, radius)
        p.fillPath(track, pal.faint(self.palette()))
        p.setClipPath(track)
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


class _LegendRow(QWidget):
    def __init__(self, parent: QWidget) -> None:
        super().__init__(parent)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(6)
        self.swatch = QFrame(self)
        self.swatch.setFixedSize(14, 4)
        self.name = QLabel(self)
        self.name.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.value = QLabel(self)
        self.value.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.value.setMinimumWidth(58)
        lay.addWidget(self.swatch, 0, Qt.AlignmentFlag.AlignVCenter)
        lay.addWidget(self.name, 1)
        lay.addWidget(self.value, 0)
        self._state: tuple = ()
        self.full_name = ""

    def set(self, color: QColor, name: str, value: str, dashed: bool | str, emphasised: bool,
            dimmed: bool, tip: str | None = None) -> None:
        """``dashed``: True (dashed), False (solid) or a CSS border style ("dotted")."""
        state = (color.rgba(), name, dashed, emphasised, dimmed, tip)
        if state != self._state:
            self._state = state
            c = QColor(color)
            if dimmed:
                c.setAlpha(90)
            style = dashed if isinstance(dashed, str) else "dashed" if dashed else "solid"
            self.swatch.setStyleSheet(
                f"background: transparent; border-top: 3px {style} rgba({c.red()},{c.green()},"
                f"{c.blue()},{c.alpha()});")
            self.full_name = name
            self.name.setText(elide_keeping_pid(self.name.fontMetrics(), name, 128))
            self.name.setToolTip(tip or name)
            font = self.name.font()
            font.setBold(emphasised)
            self.name.setFont(font)
            self.name.setEnabled(not dimmed)
        self.value.setText(value)




class LegendPanel(QWidget):
    """Colour → "name (pid)" list beside the plot, so it never covers the data."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFixedWidth(236)
        self._lay = QVBoxLayout(self)
        self._lay.setContentsMargins(4, 6, 4, 6)
        self._lay.setSpacing(3)
        self._rows: list[_LegendRow] = []
        self._lay.addStretch(1)
        self.entries: list[tuple[Hashable, str]] = []  # (key, name) shown, in order

    def set_entries(self, entries: list[tuple]) -> None:
        """``(key, colour, name, value, dashed, emphasised, dimmed[, tooltip])`` per row."""
        while len(self._rows) < len(entries):
            row = _LegendRow(self)
            self._lay.insertWidget(len(self._rows), row)
            self._rows.append(row)
        for row, entry in zip(self._rows, entries):
            _, color, name, value, dashed, emph, dim, *tip = entry
            row.set(color, name, value, dashed, emph, dim, *tip)
            row.setVisible(True)
        for row in self._rows[len(entries):]:
            row.setVisible(False)
        self.entries = [(e[0], e[2]) for e in entries]


class _LeaveFilter(QObject):
    def __init__(self, callback: Callable[[], None]) -> None:
        super().__init__()
        self._callback = callback

    def eventFilter(self, obj, event) -> bool:  # noqa: N802
        if event.type() == QEvent.Type.Leave:
            self._callback()
        return False


def _call_labels(labels: Labels | None, key: Hashable) -> str:
    if labels is None:
        return f"pid {key[0]}" if isinstance(key, tuple) else str(key)
    if callable(labels):
        return labels(key)
    return labels.get(key) or (f"pid {key[0]}" if isinstance(key, tuple) else str(key))


class GpuPanel(QFrame):
    """Everything about one GPU (or MIG device), keyed by ``display_id``."""

    def __init__(self, display_id: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.display_id = display_id
        self.setObjectName("gpuPanel")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.state = DeviceState.OK
        self.memory_total: int | None = None
        self.span_s = 600.0
        self.highlighted_key: Hashable | None = None
        self.plot_dirty = True  # set by the window when data arrived while hidden
        self._view: SeriesView | None = None
        self._labels: Labels | None = None
        self._shown_keys: list[Hashable] = []  # process curves drawn, in slot order
        self._colors = pal.ColorAssigner()
        self._hover_x: float | None = None
        # Latest sample's processes: key -> bytes (None = unknown); absent = ended.
        self._live: dict[Hashable, int | None] = {}
        # Latest sample's unattributed memory (bytes, None = unknown) and why unknown.
        self._unattributed_now: int | None = None
        self._unattributed_reason: str | None = None
        self._available_count: int | None = None  # processes with history in span

        outer = QVBoxLayout(self)
        outer.setContentsMargins(14, 10, 14, 10)
        outer.setSpacing(6)

        # -- header ---------------------------------------------------------------
        header = QHBoxLayout()
        header.setSpacing(10)
        self.title_label = QLabel(self)
        self.title_label.setObjectName("gpuTitle")
        tf = self.title_label.font()
        tf.setBold(True)
        tf.setPointSizeF(tf.pointSizeF() * 1.12)
        self.title_label.setFont(tf)
        self.name_label = QLabel(self)
        self.name_label.setObjectName("gpuName")
        self.name_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.state_label = QLabel(self)
        self.state_label.setObjectName("gpuState")
        self.figures = QWidget(self)
        fig_row = QHBoxLayout(self.figures)
        fig_row.setContentsMargins(0, 0, 0, 0)
        fig_row.setSpacing(6)
        self.util_label = self._figure(self.figures, "Util")
        self.temp_label = self._figure(self.figures, "Temp")
        self.power_label = self._figure(self.figures, "Power")
        for i, (caption, value) in enumerate((self.util_label, self.temp_label, self.power_label)):
            if i:
                fig_row.addSpacing(12)
            fig_row.addWidget(caption)
            fig_row.addWidget(value)
        header.addWidget(self.title_label)
        header.addWidget(self.name_label, 1)
        header.addWidget(self.figures)
        header.addSpacing(8)
        header.addWidget(self.state_label)
        outer.addLayout(header)

        # -- memory gauge, or the problem message -----------------------------------------
        self.status_stack = QStackedWidget(self)
        self.status_stack.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        gauge_row_w = QWidget(self.status_stack)
        gauge_row = QHBoxLayout(gauge_row_w)
        gauge_row.setContentsMargins(0, 0, 0, 0)
        gauge_row.setSpacing(12)
        self.memory_label = QLabel(NA, gauge_row_w)
        self.memory_label.setObjectName("memoryText")
        mf = self.memory_label.font()
        mf.setBold(True)
        self.memory_label.setFont(mf)
        self.memory_label.setMinimumWidth(
            self.memory_label.fontMetrics().horizontalAdvance("000.0 GiB / 000.0 GiB (100 %)"))
        self.reserved_label = QLabel("", gauge_row_w)
        self.reserved_label.setObjectName("secondary")
        self.gauge = MemoryGauge(gauge_row_w)
        gauge_row.addWidget(self.memory_label)
        gauge_row.addWidget(self.gauge, 1)
        gauge_row.addWidget(self.reserved_label)
        self.message_label = QLabel(self.status_stack)
        self.message_label.setObjectName("gpuMessage")
        self.message_label.setWordWrap(True)
        msf = self.message_label.font()
        msf.setBold(True)
        msf.setPointSizeF(msf.pointSizeF() * 1.1)
        self.message_label.setFont(msf)
        self.status_stack.addWidget(gauge_row_w)
        self.status_stack.addWidget(self.message_label)
        outer.addWidget(self.status_stack)

        # -- plot + legend -----------------------------------------------------------
        body = QHBoxLayout()
        body.setSpacing(8)
        self.time_axis = TimeAxis(orientation="bottom")
        self.value_axis = ValueAxis(orientation="left")
        self.plot = pg.PlotWidget(self, axisItems={"bottom": self.time_axis,
                                                   "left": self.value_axis})
        self.plot.setMinimumHeight(180)
        self.plot.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        item = self.plot.getPlotItem()
        item.setMenuEnabled(False)
        item.hideButtons()
        item.setMouseEnabled(x=False, y=False)
        item.setClipToView(True)
        item.setDownsampling(auto=True, mode="peak")
        # Grid: a few InfiniteLines at the major ticks.  (The axes' own grid is painted
        # through a scaled QPicture and costs ~10x more per frame.)
        self._grid_lines: dict[int, list[pg.InfiniteLine]] = {0: [], 90: []}
        item.getViewBox().sigRangeChanged.connect(self._update_grid)
        item.getViewBox().sigResized.connect(self._update_grid)
        item.getViewBox().setDefaultPadding(0.0)
        left = item.getAxis("left")
        left.setLabel("VRAM (GiB)")
        left.enableAutoSIPrefix(False)
        left.setWidth(52)
        self.time_axis.enableAutoSIPrefix(False)
        self.time_axis.setHeight(26)
        self.plot.setXRange(-self.span_s, 0, padding=0)

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
        # Model unload / reload markers: two scatter items whose points are stored at
        # "epoch − reference" and shifted by one setPos per frame (no data rebuild).
        self.unload_markers = pg.ScatterPlotItem(symbol=_UNLOAD_SYMBOL, size=20, pxMode=True)
        self.reload_markers = pg.ScatterPlotItem(symbol=_RELOAD_SYMBOL, size=20, pxMode=True)
        self.failed_markers = pg.ScatterPlotItem(symbol="x", size=8, pxMode=True)
        for m in (self.unload_markers, self.reload_markers, self.failed_markers):
            m.setZValue(15)
            m.hide()
            item.addItem(m, ignoreBounds=True)
        self._markers: list = []  # app.ui.agents.model_events.Marker, as last set
        self._marker_x: np.ndarray = np.empty(0)  # marker times − _marker_ref
        self._marker_ref: float | None = None  # epoch the marker x are relative to
        self._marker_version: int | None = None
        #: Epoch seconds of the newest sample drawn ("now" of the time axis).
        self.now_epoch: float | None = None

        self._mouse_proxy = pg.SignalProxy(self.plot.scene().sigMouseMoved, rateLimit=30,
                                           slot=self._on_mouse_moved)
        self._leave_filter = _LeaveFilter(self.hide_hover)
        self.plot.installEventFilter(self._leave_filter)

        self.legend = LegendPanel(self)
        body.addWidget(self.plot, 1)
        body.addWidget(self.legend, 0)
        outer.addLayout(body, 1)

        # -- PyTorch memory of the processes with an agent (hidden without agents) ------
        self.agent_section = AgentSection(self)
        self.agent_section.setVisible(False)
        outer.addWidget(self.agent_section)

        self._section_shape: tuple[bool, int] = (False, 0)
        self.setMinimumHeight(MIN_HEIGHT)
        self._apply_theme()

    # -- construction helpers -------------------------------------------------------
    def _figure(self, parent: QWidget, caption: str) -> tuple[QLabel, QLabel]:
        cap = QLabel(caption, parent)
        cap.setObjectName("secondary")
        value = QLabel(NA, parent)
        value.setObjectName("figure")
        f = value.font()
        f.setBold(True)
        value.setFont(f)
        sample = "000 W / 000 W" if caption == "Power" else "100 %" if caption == "Util" else "00 °C"
        value.setMinimumWidth(value.fontMetrics().horizontalAdvance(sample))
        value.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        return cap, value

    def _curve(self, z: float) -> pg.PlotDataItem:
        curve = pg.PlotDataItem()
        curve.setClipToView(True)
        curve.setDownsampling(auto=True, method="peak")
        curve.setZValue(z)
        curve.base_z = z
        curve.hide()
        self.plot.getPlotItem().addItem(curve)
        return curve

    def _update_grid(self, *args) -> None:
        vb = self.plot.getPlotItem().getViewBox()
        (x0, x1), (y0, y1) = vb.viewRange()
        pen = pg.mkPen(_with_alpha(pal.faint(self.palette()), 255), width=1)
        for angle, axis, lo, hi, size in ((90, self.time_axis, x0, x1, vb.width()),
                                          (0, self.value_axis, y0, y1, vb.height())):
            if size <= 0:
                continue
            levels = axis.tickValues(lo, hi, size)
            values = [v for v in (levels[0][1] if levels else []) if lo < v < hi]
            pool = self._grid_lines[angle]
            while len(pool) < len(values):
                line = pg.InfiniteLine(angle=angle, movable=False)
                line.setZValue(-10)
                self.plot.getPlotItem().addItem(line, ignoreBounds=True)
                pool.append(line)
            for line, v in zip(pool, values):
                line.setPen(pen)
                line.setPos(v)
                line.show()
            for line in pool[len(values):]:
                line.hide()

    # -- theme ----------------------------------------------------------------------------
    def changeEvent(self, event) -> None:  # noqa: N802
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.StyleChange):
            self._apply_theme()
        super().changeEvent(event)

    def _apply_theme(self) -> None:
        palette = self.palette()
        fg = pal.foreground(palette)
        muted = pal.muted(palette)
        self.plot.setBackground(pal.background(palette))
        item = self.plot.getPlotItem()
        for name in ("left", "bottom"):
            axis = item.getAxis(name)
            axis.setPen(pg.mkPen(pal.faint(palette)))
            axis.setTextPen(pg.mkPen(muted))
            axis.setLabel(**({"text": "VRAM (GiB)", "color": pal.hex_color(muted)}
                             if name == "left" else {}))
        self.limit_line.setPen(pg.mkPen(muted, width=1, style=Qt.PenStyle.DashLine))
        self._update_grid()
        self.cursor_line.setPen(pg.mkPen(muted, width=1, style=Qt.PenStyle.DotLine))
        self.hover_text.fill = pg.mkBrush(_with_alpha(pal.background(palette), 235))
        self.hover_text.border = pg.mkPen(pal.faint(palette))
        self.hover_text.setColor(fg)
        self.name_label.setStyleSheet(f"color: {pal.hex_color(muted)};")
        self._style_state()
        if self._view is not None:
            self._draw()

    def _style_state(self) -> None:
        palette = self.palette()
        if self.state == DeviceState.OK:
            self.state_label.setStyleSheet(f"color: {pal.hex_color(pal.muted(palette))};")
            self.message_label.setStyleSheet("")
        else:
            crit = pal.LEVEL_COLORS[pal.LEVEL_CRITICAL]
            self.state_label.setStyleSheet(f"color: {crit}; font-weight: bold;")
            self.message_label.setStyleSheet(
                f"color: {crit}; border: 1px solid {crit}; border-radius: 6px; padding: 8px;")

    # -- per snapshot: text only ------------------------------------------------------------
    def update_sample(self, gpu: GpuSample) -> None:
        """Cheap per-snapshot update of the header, gauge and figures (no plotting)."""
        ident = f"GPU {gpu.display_id}"
        if self.title_label.text() != ident:
            self.title_label.setText(ident)
        if self.name_label.text() != gpu.name:
            self.name_label.setText(gpu.name)
            self.name_label.setToolTip(f"{gpu.name}\nUUID: {gpu.uuid or NA}")
        self._live = {p.key: p.gpu_memory for p in gpu.processes}
        self._unattributed_now = gpu.unattributed_memory
        self._unattributed_reason = unknown_reason(gpu)
        state_changed = gpu.state != self.state
        self.state = gpu.state
        self.memory_total = gpu.memory_total
        if gpu.state == DeviceState.OK:
            self.state_label.setText("● OK")
            self.status_stack.setCurrentIndex(0)
            self.figures.setVisible(True)
            self.memory_label.setText(fmt_memory_usage(gpu.memory_used, gpu.memory_total))
            if gpu.memory_reserved:
                self.reserved_label.setText(f"+ {fmt_bytes(gpu.memory_reserved)} reserved by driver")
                self.reserved_label.setToolTip(
                    "Memory held by the driver and firmware; not usable by processes.")
            else:
                self.reserved_label.setText("")
            self.gauge.set_values(gpu.memory_used, gpu.memory_total, gpu.memory_reserved)
            self.gauge.setToolTip(
                f"Used {fmt_bytes(gpu.memory_used)}, free {fmt_bytes(gpu.memory_free)}, "
                f"reserved {fmt_bytes(gpu.memory_reserved)}, total {fmt_bytes(gpu.memory_total)}")
            self.util_label[1].setText(fmt_percent(gpu.utilization_gpu))
            self.temp_label[1].setText(fmt_temp(gpu.temperature))
            self.power_label[1].setText(fmt_watts(gpu.power_draw, gpu.power_limit))
            notes = "\n".join(f"{k}: {v}" for k, v in gpu.notes.items())
            self.memory_label.setToolTip(notes)
        else:
            word = "LOST" if gpu.state == DeviceState.LOST else "ERROR"
            self.state_label.setText(f"● {word}")
            default = ("GPU lost: it fell off the bus or stopped answering."
                       if gpu.state == DeviceState.LOST else "GPU error: no data from the device.")
            self.message_label.setText(gpu.message or default)
            self.status_stack.setCurrentIndex(1)
            self.figures.setVisible(False)
            # Stale figures must not survive a lost device.
            self.gauge.set_values(None, None, None)
            for _, value in (self.util_label, self.temp_label, self.power_label):
                value.setText(NA)
            self.memory_label.setText(NA)
        if state_changed:
            self._style_state()

    def update_agents(self, gpu: GpuSample, agents: Mapping, busy: bool = False,
                      can_act: bool = False) -> None:
        """Per-snapshot update of the "PyTorch memory" section: shown while any agent
        reports (``agents``: pid -> AgentReport), hidden otherwise."""
        section = self.agent_section
        if not agents:
            if not section.isHidden():
                section.setVisible(False)
                self._fit_agent_section()
            return
        if section.isHidden():
            section.setVisible(True)
        section.update_gpu(gpu, agents, busy, can_act)
        self._fit_agent_section()

    def _fit_agent_section(self) -> None:
        """Grow the panel's minimum height by the section's, so the plot keeps its room
        (only when the section's row count changes)."""
        section = self.agent_section
        shape = (not section.isHidden(), len(section.visible_rows()))
        if shape == self._section_shape:
            return
        self._section_shape = shape
        extra = section.sizeHint().height() + self.layout().spacing() if shape[0] else 0
        self.setMinimumHeight(MIN_HEIGHT + extra)

    def memory_text(self) -> str:
        return self.memory_label.text()

    def message_text(self) -> str:
        return self.message_label.text() if self.status_stack.currentIndex() == 1 else ""

    def message_visible(self) -> bool:
        return self.status_stack.currentIndex() == 1 and self.message_label.isVisibleTo(self)

    # -- on the display timer -------------------------------------------------------------
    def set_span(self, span_s: float) -> None:
        self.span_s = float(span_s)
        self.plot.setXRange(-self.span_s, 0, padding=0)

    def refresh_plot(self, view: SeriesView, labels: Labels | None = None,
                     span_s: float | None = None, now_epoch: float | None = None) -> None:
        """Redraw the curves from ``view`` (seconds before newest, bytes; its
        ``unattributed`` series is drawn when it holds one value per time).
        ``now_epoch``: wall-clock time of the newest sample (places event markers)."""
        if span_s is not None and span_s != self.span_s:
            self.set_span(span_s)
        if now_epoch is not None:
            self.now_epoch = now_epoch
        self._view = view
        self._labels = labels
        self.plot_dirty = False
        self._draw()

    @property
    def _unattributed(self) -> np.ndarray | None:
        """Unattributed memory at each of the view's times (NaN = unknown), or None."""
        view = self._view
        if view is None or view.unattributed.shape != view.t.shape:
            return None
        return view.unattributed

    def wanted_keys(self, available: dict[Hashable, float]) -> list[Hashable]:
        """Which process series to fetch from history for the next draw.

        ``available`` maps every process with history in the span to when it
        was last seen (seconds, <= 0).  Running processes rank by current VRAM,
        ended ones by how recently they ran; the highlighted one is added.
        Everything else is drawn as one "other" curve from the history's
        per-slot total, so its rows are never copied.
        """
        live = self._live
        running = [k for k in available if k in live]
        running.sort(key=lambda k: -1.0 if live[k] is None else float(live[k]), reverse=True)
        ended = sorted((k for k in available if k not in live), key=lambda k: available[k],
                       reverse=True)
        keys = (running + ended)[:TOP_N]
        hl = self.highlighted_key
        if hl is not None and hl in available and hl not in keys:
            keys.append(hl)
        self._available_count = len(available)
        return keys

    def highlight(self, key: Hashable | None) -> None:
        """Emphasise ``key``'s curve (added even when not in the top N); None clears."""
        if key == self.highlighted_key:
            return
        self.highlighted_key = key
        if self._view is not None:
            self._draw()

    def shown_keys(self) -> list[Hashable]:
        """Process keys with their own curve now (top N, plus the highlighted one)."""
        keys = list(self._shown_keys)
        if self.extra_curve.isVisible() and self.highlighted_key is not None:
            keys.append(self.highlighted_key)
        return keys

    def curve_for(self, key: Hashable) -> pg.PlotDataItem | None:
        if key == TOTAL_KEY:
            return self.total_curve
        if key == OTHER_KEY:
            return self.other_curve if self.other_curve.isVisible() else None
        if key in self._shown_keys:
            return self.process_curves[self._shown_keys.index(key)]
        if key == self.highlighted_key and self.extra_curve.isVisible():
            return self.extra_curve
        if key == UNATTRIBUTED_KEY:
            return self.unattributed_curve if self.unattributed_curve.isVisible() else None
        return None

    def x_range(self) -> tuple[float, float]:
        (x0, x1), _ = self.plot.getPlotItem().getViewBox().viewRange()
        return x0, x1

    def _draw(self) -> None:
        view = self._view
        assert view is not None
        palette = self.palette()
        fg = pal.foreground(palette)
        t = view.t
        item = self.plot.getPlotItem()
        if t.size == 0:
            for c in (self.total_curve, self.other_curve, self.extra_curve,
                      self.unattributed_curve, *self.process_curves):
                c.hide()
            self._shown_keys = []
            self.legend.set_entries([])
            return

        hl = self.highlighted_key
        dim = hl is not None

        # Rank processes: running ones by their current VRAM (from the latest sample,
        # unknown last), then ended ones by their peak over the span.
        keys = list(view.processes)
        live = self._live
        running = [k for k in keys if k in live]
        running.sort(key=lambda k: -1.0 if live[k] is None else float(live[k]), reverse=True)
        ended = [k for k in keys if k not in live]
        if len(running) < TOP_N and ended:
            with np.errstate(all="ignore"):
                peaks = {k: float(np.fmax.reduce(view.processes[k])) for k in ended}
            ended.sort(key=lambda k: -1.0 if peaks[k] != peaks[k] else peaks[k], reverse=True)
        ranked = running + ended
        top: list[Hashable] = ranked[:TOP_N]
        rest_keys = ranked[TOP_N:]

        # Keep a process in the same curve slot between refreshes (less churn).
        slots: list[Hashable | None] = [k if k in top else None for k in self._shown_keys]
        slots += [None] * (TOP_N - len(slots))
        for k in top:
            if k not in slots:
                slots[slots.index(None)] = k
        colors = self._colors.assign(top)
        self._shown_keys = [k for k in slots if k is not None]
        extra = hl if (hl is not None and hl not in top and hl in view.processes) else None

        # Every series to draw, as rows of one matrix, reduced to about two points per
        # pixel in one vectorised pass (peak: max and min of each bucket), so pyqtgraph
        # gets ~2 x width points per curve whatever the span.
        sources: list[np.ndarray | None] = [view.used]
        sources += [view.processes[k] for k in self._shown_keys]
        n_rest = len(rest_keys)
        if self._available_count is not None:
            n_rest = max(n_rest, self._available_count - len(top))
        use_total = view.process_total.size == t.size
        if n_rest:
            sources.append(None)  # "other": filled below
        if extra is not None:
            sources.append(view.processes[extra])
        # Unattributed memory: drawn while anything above 0 is in the span.
        rest = self._unattributed
        with np.errstate(all="ignore"):
            show_rest = rest is not None and bool(np.nanmax(rest, initial=0.0) > 0)
        if show_rest:
            sources.append(rest)
        # float32 throughout (plenty for a picture; halves the memory traffic).
        matrix = np.empty((len(sources), t.size), dtype=np.float32)
        for i, src in enumerate(sources):
            if src is not None:
                matrix[i] = src
        if n_rest and use_total:
            # Everything but the top curves: the per-slot total minus them.
            other = matrix[1 + len(self._shown_keys)]
            top_rows = matrix[1:1 + len(self._shown_keys)]
            shown = np.nansum(top_rows, axis=0) if len(top_rows) else 0.0
            np.subtract(view.process_total, shown, out=other, casting="unsafe")
            other[~(other >= MiB)] = np.nan  # nothing (or rounding noise) left: a gap
        elif n_rest:
            block = np.vstack([view.processes[k] for k in rest_keys])
            absent = np.isnan(block)
            other = matrix[1 + len(self._shown_keys)]
            np.add.reduce(np.where(absent, np.float32(0), block), axis=0, out=other)
            other[absent.all(axis=0)] = np.nan
        width_px = int(item.getViewBox().width()) or 1000
        x, ys = _peak_decimate(t, matrix, max(64, width_px))
        ys = ys.astype(np.float64) / GiB
        other = n_rest or None

        row = iter(ys)
        self._set_curve(self.total_curve, x, next(row), None, fg, emphasised=False, dimmed=False)
        entries = [(TOTAL_KEY, fg, "Device total", fmt_gib(_last(view.used)), False, False,
                    False)]
        if self.memory_total:
            entries.append((LIMIT_KEY, pal.muted(palette), "Capacity", fmt_gib(self.memory_total),
                            True, False, False))
        device_entries = len(entries)  # the device's own figures come first in the legend
        for curve, key in zip(self.process_curves, slots):
            if key is None:
                curve.hide()
                continue
            self._set_curve(curve, x, next(row), None, colors[key], emphasised=key == hl,
                            dimmed=dim and key != hl)
        for key in top:
            entries.append((key, colors[key], _call_labels(self._labels, key),
                            self._current_text(key), False, key == hl, dim and key != hl))

        # Everything else, summed into one curve.
        if other is not None:
            grey = pal.other_color(palette)
            self._set_curve(self.other_curve, x, next(row), None, grey, emphasised=False,
                            dimmed=dim, dashed=True)
            others_now = sum(v or 0 for k, v in live.items() if k not in top)
            entries.append((OTHER_KEY, grey, f"Other processes ({n_rest})",
                            fmt_gib(others_now), True, False, dim))
        else:
            self.other_curve.hide()

        # The highlighted process, when it is not among the top N.
        if extra is not None:
            color = self._colors.color(extra)
            self._set_curve(self.extra_curve, x, next(row), None, color, emphasised=True,
                            dimmed=False)
            entries.append((extra, color, _call_labels(self._labels, extra),
                            self._current_text(extra), False, True, False))
        else:
            self.extra_curve.hide()

        # Memory no listed process holds: a gap where it was unknown, never 0.  Listed
        # with the device's figures, so many processes never push it out of sight.
        if show_rest:
            color = pal.unattributed_color(palette)
            self._set_curve(self.unattributed_curve, x, next(row), None, color,
                            emphasised=False, dimmed=dim, style=Qt.PenStyle.DotLine)
            entries.insert(device_entries, (
                UNATTRIBUTED_KEY, color, UNATTRIBUTED_LABEL, fmt_gib(self._unattributed_now),
                "dotted", False, dim,
                explanation(self.display_id, self._unattributed_now, self._unattributed_reason)))
        else:
            self.unattributed_curve.hide()

        # Capacity line and y range.
        total = self.memory_total
        if total:
            top_gib = total / GiB
            self.limit_line.setPos(top_gib)
            self.limit_line.show()
            item.getViewBox().enableAutoRange(y=False)
            item.setYRange(0, top_gib * 1.05, padding=0)
        else:
            self.limit_line.hide()
            item.getViewBox().enableAutoRange(y=True)
        self.legend.set_entries(entries)
        self._place_markers()
        if self._hover_x is not None and self.cursor_line.isVisible():
            self._show_hover(self._hover_x)

    # -- event markers -------------------------------------------------------------------
    def set_markers(self, markers, version: int | None = None) -> None:
        """Model events on this GPU (``app.ui.agents.model_events.Marker``, bounded by the caller).

        Rebuilds the scatter data only when ``version`` changed; placing them in the
        plot's time frame is one ``setPos`` per frame (:meth:`_place_markers`)."""
        if version is not None and version == self._marker_version:
            return
        self._marker_version = version
        markers = list(markers)
        self._markers = markers
        if not markers:
            self._marker_x = np.empty(0)
            for m in (self.unload_markers, self.reload_markers, self.failed_markers):
                m.clear()
                m.hide()
            return
        ref = max(mk.time for mk in markers)
        self._marker_ref = ref
        self._marker_x = np.array([mk.time - ref for mk in markers], dtype=np.float64)
        palette = self.palette()
        fallback = (self.memory_total or 0) / GiB * 0.5
        groups = {"unload": ([], []), "reload": ([], []), "failed": ([], [])}
        for x, mk in zip(self._marker_x, markers):
            key = "failed" if not mk.ok else ("unload" if mk.action == "unload" else "reload")
            groups[key][0].append(float(x))
            groups[key][1].append(mk.y / GiB if mk.y is not None else fallback)
        styles = {"unload": (self.unload_markers, pal.MARKER_UNLOAD),
                  "reload": (self.reload_markers, pal.MARKER_RELOAD),
                  "failed": (self.failed_markers, pal.LEVEL_COLORS[pal.LEVEL_CRITICAL])}
        edge = pal.background(palette)
        for key, (xs, ys) in groups.items():
            scatter, color = styles[key]
            if not xs:
                scatter.clear()
                scatter.hide()
                continue
            scatter.setData(x=xs, y=ys, brush=pg.mkBrush(color),
                            pen=pg.mkPen(edge, width=1) if key != "failed"
                            else pg.mkPen(color, width=2))
            scatter.show()
        self._place_markers()

    def marker_positions(self) -> list[tuple[float, str, str]]:
        """(x in the plot's time frame, action, text) of every marker (tests, hover)."""
        shift = self._marker_shift()
        return [(float(x) + shift, mk.action, mk.text)
                for x, mk in zip(self._marker_x, self._markers)]

    def _marker_shift(self) -> float:
        if self._marker_ref is None or self.now_epoch is None:
            return 0.0
        return self._marker_ref - self.now_epoch

    def _place_markers(self) -> None:
        if not self._markers:
            return
        shift = self._marker_shift()
        for m in (self.unload_markers, self.reload_markers, self.failed_markers):
            if m.pos().x() != shift:
                m.setPos(shift, 0.0)

    def _markers_near(self, x: float) -> list[str]:
        if not self._markers:
            return []
        vb = self.plot.getPlotItem().getViewBox()
        (x0, x1), _ = vb.viewRange()
        tolerance = 7.0 * (x1 - x0) / max(vb.width(), 1.0)  # about 7 px either side
        xs = self._marker_x + self._marker_shift()
        near = np.nonzero(np.abs(xs - x) <= tolerance)[0]
        return [self._markers[i].text for i in near[-4:]]

    def _current_text(self, key: Hashable) -> str:
        if key not in self._live:
            return "ended"
        return fmt_gib(self._live[key])

    def _set_curve(self, curve: pg.PlotDataItem, t: np.ndarray, y: np.ndarray,
                   finite: bool | None, color: QColor, emphasised: bool, dimmed: bool,
                   dashed: bool = False, style: Qt.PenStyle | None = None) -> None:
        if finite is None:
            finite = bool(np.isfinite(y).all())
        c = QColor(color)
        if dimmed:
            c.setAlpha(70)
        if style is None:
            style = Qt.PenStyle.DashLine if dashed else Qt.PenStyle.SolidLine
        pen = pg.mkPen(c, width=2 if emphasised else 1, style=style)
        curve.setZValue(10 if emphasised else curve.base_z)
        curve.setData(t, y, pen=pen, connect="all" if finite else "finite",
                      skipFiniteCheck=finite)
        curve.show()

    # -- hover --------------------------------------------------------------------------
    def _on_mouse_moved(self, args) -> None:
        pos = args[0]
        vb = self.plot.getPlotItem().getViewBox()
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
        view = self._view
        if view is None or view.t.size == 0:
            return ""
        i = int(np.clip(np.searchsorted(view.t, x), 0, view.t.size - 1))
        if i > 0 and abs(view.t[i - 1] - x) < abs(view.t[i] - x):
            i -= 1
        lines = [fmt_ago(view.t[i]), f"Device total: {fmt_gib(_nan_none(view.used[i]))}"]
        keys = list(self._shown_keys)
        if self.highlighted_key is not None and self.highlighted_key not in keys \
                and self.highlighted_key in view.processes:
            keys.append(self.highlighted_key)
        vals = [(key, _nan_none(view.processes[key][i])) for key in keys if key in view.processes]
        vals.sort(key=lambda kv: -(kv[1] if kv[1] is not None else -1))
        for key, v in vals:
            if v is not None:
                lines.append(f"{_call_labels(self._labels, key)}: {fmt_gib(v)}")
        rest = self._unattributed
        if rest is not None and self.unattributed_curve.isVisible() and i < rest.size:
            lines.append(f"{UNATTRIBUTED_LABEL}: {fmt_gib(_nan_none(rest[i]))}")
        events = self._markers_near(x)
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
        (x0, x1), (_, y1) = self.plot.getPlotItem().getViewBox().viewRange()
        # Keep the read-out inside the plot: to the right of the cursor on the left half.
        right_half = x > (x0 + x1) / 2
        self.hover_text.setAnchor((1, 0) if right_half else (0, 0))
        self.hover_text.setPos(x, y1)
        self.hover_text.show()


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


def _peak_decimate(t: np.ndarray, ys: np.ndarray, buckets: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Reduce rows ``ys`` (k x n) over times ``t`` to at most ``buckets`` max/min pairs.

    Buckets are aligned on the newest sample, so the right edge ("now") is exact; the
    few oldest samples that do not fill a bucket are dropped.  NaN (absent) is ignored
    inside a bucket; a bucket with no value at all stays NaN (a gap).
    """
    n = t.size
    ds = n // buckets
    if ds < 2:
        return t, ys
    m = (n // ds) * ds
    start = n - m
    k = ys.shape[0]
    grouped = ys[:, start:].reshape(k, m // ds, ds)
    out = np.empty((k, m // ds, 2), dtype=ys.dtype)
    hi, lo = out[:, :, 0], out[:, :, 1]
    hi[...] = grouped[:, :, 0]
    lo[...] = grouped[:, :, 0]
    # ds element-wise passes: several times faster than ufunc.reduce over a short last axis.
    for j in range(1, ds):
        col = grouped[:, :, j]
        np.fmax(hi, col, out=hi)
        np.fmin(lo, col, out=lo)
    x = np.repeat(t[start + ds - 1::ds], 2)
    return x, out.reshape(k, -1)


def _last(a: np.ndarray) -> float | None:
    return _nan_none(a[-1]) if a.size else None


def _nan_none(v) -> float | None:
    v = float(v)
    return None if v != v else v


def _with_alpha(color: QColor, alpha: int) -> QColor:
    c = QColor(color)
    c.setAlpha(alpha)
    return c
