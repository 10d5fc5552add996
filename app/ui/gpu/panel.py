"""One GPU: header, memory gauge, live figures, the VRAM plot and its legend.

Two update paths with very different costs:

* :meth:`GpuPanel.update_sample` runs for every snapshot and only sets text
  and the gauge;
* :meth:`GpuPanel.set_plot_data` runs on the window's display timer with a
  :class:`~app.core.monitor.plot_data.PlotData` shaped in core, and only sets
  it on the plot's curves and the legend's rows.

A remote GPU's title names its host; while that host is not connected the
panel keeps the last figures, greyed, and says since when (:meth:`set_stale`).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QContextMenuEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QMenu,
    QSizePolicy,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.core.monitor.hosts import split_id
from app.core.monitor.plot_data import (
    UNATTRIBUTED_KEY,
    LegendEntry,
    PlotData,
    PlotInputs,
    values_now,
)
from app.core.monitor.samples import DeviceState, GpuSample
from app.core.units import NA, fmt_bytes, fmt_percent
from app.ui.gpu.gauge import MemoryGauge
from app.ui.gpu.legend import LegendPanel
from app.ui.gpu.plot import GpuPlot
from app.ui.gpu.torch_memory import AgentSection
from app.ui.gpu.unattributed import explanation, unknown_reason
from app.ui.gpu.util_strip import UtilStrip
from app.ui.style import palette as pal
from app.ui.style.format import fmt_memory_usage, fmt_temp, fmt_watts
from app.ui.style.text import plain_label, plain_tip

MIN_HEIGHT = 262  # px without the "PyTorch memory" section


class GpuPanel(QFrame):
    """Everything about one GPU (or MIG device), keyed by ``display_id``."""

    fit_requested = Signal(str)  # display id: "Will it fit on this GPU?…" in its menu

    def __init__(self, display_id: str, parent: QWidget | None = None,
                 colors: pal.ProcessColors | None = None) -> None:
        """``colors``: the process colours shared by the window's panels (one process,
        one colour on every GPU); a set of this panel's own when None."""
        super().__init__(parent)
        self.display_id = display_id
        self.setObjectName("gpuPanel")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.state = DeviceState.OK
        self.memory_total: int | None = None
        self.span_s = 600.0
        self.highlighted_key: Hashable | None = None
        self.plot_dirty = True  # set by the window when data arrived while hidden
        self._gpu: GpuSample | None = None  # the latest sample, for the plot's inputs
        #: The latest figures ("sample", "agents") while hidden by the window.
        self._pending: dict[str, object] = {}
        # Latest sample's unattributed memory (bytes, None = unknown) and why unknown.
        self._unattributed_now: int | None = None
        self._unattributed_reason: str | None = None
        self.host = split_id(display_id)[0]
        #: "disconnected since 15:04:12" while the host's figures are its last known.
        self.stale_text: str | None = None
        self._name = ""  # the GPU's name, shown elided before " — host"

        outer = QVBoxLayout(self)
        outer.setContentsMargins(14, 10, 14, 10)
        outer.setSpacing(6)
        outer.addLayout(self._build_header())
        outer.addWidget(self._build_status())

        # -- plot + legend -----------------------------------------------------------
        body = QHBoxLayout()
        body.setSpacing(8)
        self.plot = GpuPlot(self, colors, owner=display_id)
        self.plot.set_span(self.span_s)
        self.time_axis, self.value_axis = self.plot.time_axis, self.plot.value_axis
        self.total_curve = self.plot.total_curve
        self.cursor_line, self.hover_text = self.plot.cursor_line, self.plot.hover_text
        markers = self.plot.markers
        self.unload_markers, self.reload_markers = markers.unload, markers.reload
        self.legend = LegendPanel(self)
        self.util_strip = UtilStrip(self)
        self.util_strip.follow(self._plot_extent)
        plots = QVBoxLayout()
        plots.setSpacing(2)
        plots.addWidget(self.plot, 1)
        plots.addWidget(self.util_strip, 0)
        body.addLayout(plots, 1)
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
    def _build_header(self) -> QHBoxLayout:
        header = QHBoxLayout()
        header.setSpacing(10)
        # The title, name, state and message carry the host's words (its name, the
        # GPU's, the driver's message, why the host is not connected).
        self.title_label = plain_label(QLabel(self))
        self.title_label.setObjectName("gpuTitle")
        tf = self.title_label.font()
        tf.setBold(True)
        tf.setPointSizeF(tf.pointSizeF() * 1.12)
        self.title_label.setFont(tf)
        self.name_label = plain_label(QLabel(self))
        self.name_label.setObjectName("gpuName")
        self.name_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.name_label.installEventFilter(self)  # elided again when resized
        self.state_label = plain_label(QLabel(self))
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
        return header

    def _build_status(self) -> QStackedWidget:
        """The memory gauge, or the problem message in its place."""
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
        self.message_label = plain_label(QLabel(self.status_stack))
        self.message_label.setObjectName("gpuMessage")
        self.message_label.setWordWrap(True)
        msf = self.message_label.font()
        msf.setBold(True)
        msf.setPointSizeF(msf.pointSizeF() * 1.1)
        self.message_label.setFont(msf)
        self.status_stack.addWidget(gauge_row_w)
        self.status_stack.addWidget(self.message_label)
        return self.status_stack

    def _figure(self, parent: QWidget, caption: str) -> tuple[QLabel, QLabel]:
        cap = QLabel(caption, parent)
        cap.setObjectName("secondary")
        value = QLabel(NA, parent)
        value.setObjectName("figure")
        f = value.font()
        f.setBold(True)
        value.setFont(f)
        sample = {"Power": "000 W / 000 W", "Util": "100 %"}.get(caption, "00 °C")
        value.setMinimumWidth(value.fontMetrics().horizontalAdvance(sample))
        value.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        return cap, value

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:  # noqa: N802
        self.menu().popup(event.globalPos())

    def menu(self) -> QMenu:
        """The panel's menu (right-click anywhere on it)."""
        menu = QMenu(self)
        menu.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        menu.addAction("Will it fit on this GPU?…",
                       lambda: self.fit_requested.emit(self.display_id))
        return menu

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        self.legend.fit_width(self.width())

    def eventFilter(self, watched, event) -> bool:  # noqa: N802
        if watched is self.name_label and event.type() == QEvent.Type.Resize:
            self._show_name()
        return super().eventFilter(watched, event)

    def _show_name(self) -> None:
        """"NVIDIA A100-SXM4-80GB — gpu1": the name elided, the host always shown."""
        label = self.name_label
        tail = f" — {self.host}" if self.host else ""
        metrics = label.fontMetrics()
        room = max(label.width() - metrics.horizontalAdvance(tail), 24)
        text = metrics.elidedText(self._name, Qt.TextElideMode.ElideRight, room) + tail
        if label.text() != text:
            label.setText(text)

    # -- theme ----------------------------------------------------------------------------
    def changeEvent(self, event) -> None:  # noqa: N802
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.StyleChange):
            self._apply_theme()
        super().changeEvent(event)

    def _apply_theme(self) -> None:
        palette = self.palette()
        self.plot.apply_theme(palette)
        self.name_label.setStyleSheet(f"color: {pal.hex_color(pal.muted(palette))};")
        self._style_state()
        if self.plot.data is not None:
            self._draw(self.plot.data)

    def _style_state(self) -> None:
        palette = self.palette()
        muted = pal.hex_color(pal.muted(palette))
        greyed = f"color: {muted};" if self.stale_text else ""
        for label in (self.memory_label, *(v for _, v in self._figure_labels())):
            label.setStyleSheet(greyed)
        self.gauge.set_stale(bool(self.stale_text))
        if self.stale_text:
            warn = pal.LEVEL_COLORS[pal.LEVEL_WARNING]
            self.state_label.setStyleSheet(f"color: {warn}; font-weight: bold;")
            self.message_label.setStyleSheet("")
        elif self.state == DeviceState.OK:
            self.state_label.setStyleSheet(f"color: {muted};")
            self.message_label.setStyleSheet("")
        else:
            crit = pal.LEVEL_COLORS[pal.LEVEL_CRITICAL]
            self.state_label.setStyleSheet(f"color: {crit}; font-weight: bold;")
            self.message_label.setStyleSheet(
                f"color: {crit}; border: 1px solid {crit}; border-radius: 6px; padding: 8px;")

    def _figure_labels(self) -> tuple[tuple[QLabel, QLabel], ...]:
        return (self.util_label, self.temp_label, self.power_label)

    # -- per snapshot: text only ------------------------------------------------------------
    def set_stale(self, text: str | None, reason: str = "") -> None:
        """Greyed with ``text`` ("disconnected since …") in place of "OK" while the
        GPU's host is not connected (its last figures stay: never 0); None: live.
        ``reason``: why, with what to do (the state's tooltip)."""
        self.state_label.setToolTip(plain_tip(reason) if text else "")
        if text == self.stale_text:
            return
        self.stale_text = text
        if self.state == DeviceState.OK:
            self.state_label.setText(f"● {text}" if text else "● OK")
        self._style_state()

    def hidden_by_window(self) -> bool:
        """Hidden inside its window (the overview shows another GPU's panel): its
        figures wait for :meth:`showEvent`, where they are drawn at once."""
        return self.isHidden() and self.parentWidget() is not None

    def showEvent(self, event) -> None:  # noqa: N802
        pending, self._pending = self._pending, {}
        if "sample" in pending:
            self.update_sample(pending["sample"])
        if "agents" in pending:
            self.update_agents(*pending["agents"])
        super().showEvent(event)

    def update_sample(self, gpu: GpuSample) -> None:
        """Cheap per-snapshot update of the header, gauge and figures (no plotting)."""
        self._gpu = gpu  # the plot's inputs, whether shown or not
        if self.hidden_by_window():
            self._pending["sample"] = gpu
            return
        ident = f"GPU {split_id(gpu.display_id)[1]}"
        if self.title_label.text() != ident:
            self.title_label.setText(ident)
        if self._name != gpu.name:
            self._name = gpu.name
            self._show_name()
            where = f"\nHost: {self.host}" if self.host else ""
            self.name_label.setToolTip(plain_tip(f"{gpu.name}\nUUID: {gpu.uuid or NA}{where}"))
        self._unattributed_now = gpu.unattributed_memory
        self._unattributed_reason = unknown_reason(gpu)
        state_changed = gpu.state != self.state
        self.state = gpu.state
        self.memory_total = gpu.memory_total
        if gpu.state == DeviceState.OK:
            self.state_label.setText(f"● {self.stale_text}" if self.stale_text else "● OK")
            self.status_stack.setCurrentIndex(0)
            self.figures.setVisible(True)
            self.memory_label.setText(fmt_memory_usage(gpu.memory_used, gpu.memory_total))
            if gpu.memory_reserved:
                self.reserved_label.setText(
                    f"+ {fmt_bytes(gpu.memory_reserved)} reserved by driver")
                self.reserved_label.setToolTip(
                    "Memory held by the driver and firmware; not usable by processes.")
            else:
                self.reserved_label.setText("")
            self.gauge.set_values(gpu.memory_used, gpu.memory_total, gpu.memory_reserved)
            self.gauge.setToolTip(
                f"Used {fmt_bytes(gpu.memory_used)}, free {fmt_bytes(gpu.memory_free)}, "
                f"reserved {fmt_bytes(gpu.memory_reserved)}, total {fmt_bytes(gpu.memory_total)}")
            self.util_label[1].setText(fmt_percent(gpu.utilization_gpu))
            self.util_strip.set_now(gpu.utilization_gpu)
            top = self.plot.data.top_keys if self.plot.data is not None else ()
            self.legend.update_values(values_now(PlotInputs.from_gpu(gpu), top))
            self.temp_label[1].setText(fmt_temp(gpu.temperature))
            self.power_label[1].setText(fmt_watts(gpu.power_draw, gpu.power_limit))
            notes = "\n".join(f"{k}: {v}" for k, v in gpu.notes.items())
            self.memory_label.setToolTip(plain_tip(notes))
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
        if self.hidden_by_window():
            self._pending["agents"] = (gpu, agents, busy, can_act)
            return
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
        self.plot.set_span(self.span_s)

    def plot_inputs(self) -> PlotInputs:
        """The latest sample's figures the plot data is shaped with."""
        if self._gpu is None:
            return PlotInputs({}, highlighted=self.highlighted_key)
        return PlotInputs.from_gpu(self._gpu, self.highlighted_key)

    def plot_width_px(self) -> int:
        return self.plot.width_px()

    def set_plot_data(self, data: PlotData, span_s: float | None = None,
                      now_epoch: float | None = None) -> None:
        """Draw ``data``.  ``now_epoch``: wall-clock time of the newest sample (places
        event markers)."""
        if span_s is not None and span_s != self.span_s:
            self.set_span(span_s)
        if now_epoch is not None:
            self.plot.now_epoch = now_epoch
        self.plot_dirty = False
        self._draw(data)

    def _draw(self, data: PlotData) -> None:
        self.plot.draw(data, self.palette())
        self.util_strip.set_data(data.x, data.util, self.span_s)
        self.legend.set_entries(data.legend, self.plot.color_of, self._tip)

    def _plot_extent(self) -> tuple[float, float] | None:
        """The plot's view box, horizontally, in the utilisation strip's pixels."""
        rect = self.plot.getPlotItem().getViewBox().sceneBoundingRect()
        if rect.width() <= 0:
            return None
        left = self.plot.mapTo(self, self.plot.rect().topLeft()).x()
        strip = self.util_strip.mapTo(self, self.util_strip.rect().topLeft()).x()
        return left - strip + rect.left(), rect.width()

    def _tip(self, entry: LegendEntry) -> str | None:
        if entry.key == UNATTRIBUTED_KEY:
            return explanation(self.display_id, self._unattributed_now,
                               self._unattributed_reason)
        return None

    def highlight(self, key: Hashable | None) -> None:
        """Emphasise ``key``'s curve (added even when not in the top N); None clears."""
        if key == self.highlighted_key:
            return
        self.highlighted_key = key
        if self.plot.data is not None:
            self._draw(self.plot.data.with_highlight(key))

    def shown_keys(self) -> list[Hashable]:
        """Process keys with a curve now (top N, plus the highlighted one)."""
        return self.plot.shown_keys()

    def curve_for(self, key: Hashable) -> pg.PlotCurveItem | None:
        return self.plot.curve_for(key)

    def x_range(self) -> tuple[float, float]:
        return self.plot.x_range()

    def hover_text_at(self, x: float) -> str:
        """The hover read-out for time ``x`` (seconds before newest, <= 0), plain text."""
        return self.plot.hover_text_at(x)

    def hide_hover(self) -> None:
        self.plot.hide_hover()

    # -- event markers -------------------------------------------------------------------
    @property
    def now_epoch(self) -> float | None:
        """Epoch seconds of the newest sample drawn ("now" of the time axis)."""
        return self.plot.now_epoch

    @property
    def _marker_x(self) -> np.ndarray:
        return self.plot.markers.x

    def set_markers(self, markers: Iterable, version: int | None = None) -> None:
        """Model events on this GPU (``app.core.agents.events.Marker``, bounded by the caller).

        Rebuilds the scatter data only when ``version`` changed; placing them in the
        plot's time frame is one ``setPos`` per frame."""
        layer = self.plot.markers
        if layer.set(markers, version, self.palette(), self.memory_total):
            layer.place(self.plot.now_epoch)

    def marker_positions(self) -> list[tuple[float, str, str]]:
        """(x in the plot's time frame, action, text) of every marker (tests, hover)."""
        return self.plot.markers.positions(self.plot.now_epoch)
