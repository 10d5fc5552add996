"""A compact GPU tile for the overview strip: name, used/total, SM %, a mini history.

With more GPUs than fit on screen the window shows one tile per GPU beside the
selected GPU's full panel (as Task Manager's sidebar does); a click selects.
One painted widget, no child labels: eight of them cost next to nothing per tick.
A disconnected host's tile keeps its last figures, greyed, and says since when.
Its name is elided to the width the tile is painted at, and its sizeHint asks for
the width that shows it whole (:func:`strip_width` sizes the overview's strip).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from PySide6.QtCore import QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from app.core.monitor.hosts import split_id
from app.core.monitor.samples import DeviceState, GpuSample
from app.core.units import NA, fmt_bytes, fmt_percent
from app.ui.style import palette as pal
from app.ui.style.painting import fill_known_runs
from app.ui.style.text import plain_tip

HEIGHT_PX = 74
MIN_WIDTH_PX = 220
#: Inside the tile's 1 px border: its text's left and right margins.
_INSET_PX = 10
#: Between "GPU 0" and the name, and between the memory and the SM figures.
_GAP_PX = 8


class GpuTile(QWidget):
    """One GPU in the overview; ``clicked`` carries its ``display_id``."""

    clicked = Signal(str)

    def __init__(self, display_id: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.display_id = display_id
        self.setObjectName("gpuTile")
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.setFixedHeight(HEIGHT_PX)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.selected = False
        self.host, local_id = split_id(display_id)
        self.title = f"GPU {local_id}"
        #: "disconnected since 15:04:12" while its host's figures are the last known.
        self.stale_text: str | None = None
        self.name = ""
        self.memory_text = NA
        self.util_text = NA
        self.fraction: float | None = None  # used / total now
        self.state = DeviceState.OK
        self._x = np.empty(0)
        self._fractions = np.empty(0)
        self.span_s = 600.0

    def sizeHint(self) -> QSize:  # noqa: N802
        """As wide as its whole name beside "GPU 0" (and its figures) need."""
        metrics = self.fontMetrics()
        bold = QFont(self.font())
        bold.setBold(True)
        head = (QFontMetrics(bold).horizontalAdvance(self.title) + _GAP_PX
                + metrics.horizontalAdvance(self.name))
        figures = (metrics.horizontalAdvance(self.memory_text) + _GAP_PX
                   + metrics.horizontalAdvance(self.util_text))
        return QSize(max(MIN_WIDTH_PX, max(head, figures) + 2 * (_INSET_PX + 1)), HEIGHT_PX)

    def shown_name(self) -> str:
        """The name as painted at the tile's width now: whole where it fits beside
        "GPU 0", elided where it does not."""
        bold = QFont(self.font())
        bold.setBold(True)
        room = (self.width() - 2 * (_INSET_PX + 1) - QFontMetrics(bold).horizontalAdvance(
            self.title) - _GAP_PX)
        return self.fontMetrics().elidedText(self.name, Qt.TextElideMode.ElideRight,
                                             max(0, room))

    def set_sample(self, gpu: GpuSample) -> None:
        """The latest figures (text only; the mini history waits for a refresh)."""
        name = gpu.name.removeprefix("NVIDIA ")
        if gpu.state is DeviceState.OK:
            memory = f"{fmt_bytes(gpu.memory_used)} / {fmt_bytes(gpu.memory_total)}"
            util = f"SM {fmt_percent(gpu.utilization_gpu)}"
        else:
            memory = "lost" if gpu.state is DeviceState.LOST else "error"
            util = ""
        whole = (name, gpu.state, pal.level_for(gpu.memory_fraction)) != (
            self.name, self.state, pal.level_for(self.fraction))
        texts = (memory, util) != (self.memory_text, self.util_text)
        self.name, self.memory_text, self.util_text = name, memory, util
        self.fraction, self.state = gpu.memory_fraction, gpu.state
        if whole or texts:
            self._tip()
        if whole:
            self.update()
        elif texts:  # the figures' line only: the mini history is as it was
            self.update(self._figures_rect().toAlignedRect())

    def set_stale(self, text: str | None) -> None:
        """Greyed with ``text`` ("disconnected since …") while its host is not
        connected; None: its figures are current."""
        if text != self.stale_text:
            self.stale_text = text
            self._tip()
            self.update()

    def _tip(self) -> None:
        where = f" on {self.host}" if self.host else ""
        tip = f"{self.title}{where}: {self.name}\n{self.memory_text}"
        self.setToolTip(plain_tip(f"{tip}\n{self.stale_text}" if self.stale_text else tip))

    def set_history(self, x: np.ndarray, used: np.ndarray, total: int | None,
                    span_s: float) -> None:
        """Device total over the span (bytes at ``x``), drawn as a share of ``total``."""
        self.span_s = span_s
        self._x = x
        self._fractions = used / total if total else np.full(used.shape, np.nan)
        self.update()

    def set_selected(self, selected: bool) -> None:
        if selected != self.selected:
            self.selected = selected
            self.update()

    def mousePressEvent(self, event) -> None:  # noqa: N802
        if event.button() == Qt.MouseButton.LeftButton:
            self.clicked.emit(self.display_id)
        super().mousePressEvent(event)

    # -- painting ---------------------------------------------------------------------
    def _figures_rect(self) -> QRectF:
        """Where the "18.2 GiB / 24.0 GiB" and "SM 87 %" line is painted."""
        inner = QRectF(self.rect()).adjusted(1 + _INSET_PX, 7, -1 - _INSET_PX, -7)
        bold = QFont(self.font())
        bold.setBold(True)
        line_h = max(QFontMetrics(bold).height(), self.fontMetrics().height())
        return QRectF(inner.left(), inner.top() + line_h + 1, inner.width(), line_h)

    def paintEvent(self, event) -> None:  # noqa: N802
        palette = self.palette()
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        box = QRectF(self.rect()).adjusted(1, 1, -1, -1)
        border = palette.highlight().color() if self.selected else pal.faint(palette)
        painter.setPen(QPen(border, 2 if self.selected else 1))
        painter.setBrush(palette.base())
        painter.drawRoundedRect(box, 8, 8)

        inner = box.adjusted(_INSET_PX, 6, -_INSET_PX, -6)
        fg, muted = pal.foreground(palette), pal.muted(palette)
        if self.stale_text:
            fg = muted
        bold = QFont(self.font())
        bold.setBold(True)
        painter.setFont(bold)
        painter.setPen(fg)
        line_h = painter.fontMetrics().height()
        head = QRectF(inner.left(), inner.top(), inner.width(), line_h)
        painter.drawText(head, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                         self.title)
        title_w = painter.fontMetrics().horizontalAdvance(self.title) + _GAP_PX
        painter.setFont(self.font())
        painter.setPen(muted)
        name = self.shown_name()
        painter.drawText(head.adjusted(title_w, 0, 0, 0),
                         Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, name)

        figures = QRectF(inner.left(), head.bottom() + 1, inner.width(), line_h)
        level = pal.level_for(self.fraction)
        painter.setPen(fg if self.state is DeviceState.OK or self.stale_text
                       else QColor(pal.LEVEL_COLORS[pal.LEVEL_CRITICAL]))
        painter.drawText(figures, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                         self.memory_text)
        painter.setPen(muted)
        painter.drawText(figures, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
                         self.util_text)

        spark = QRectF(inner.left(), figures.bottom() + 4, inner.width(),
                       max(inner.bottom() - figures.bottom() - 4, 6))
        if QRectF(event.rect()).intersects(spark):  # not for a repaint of the figures alone
            color = muted if self.stale_text else pal.level_color(level, palette)
            self._paint_history(painter, spark, color, palette)
            if self.stale_text:
                self._paint_stale(painter, spark, palette)
        painter.end()

    def _paint_stale(self, painter: QPainter, area: QRectF, palette) -> None:
        """"disconnected since …" over the greyed history, on the tile's background."""
        metrics = painter.fontMetrics()
        text = metrics.elidedText(self.stale_text or "", Qt.TextElideMode.ElideRight,
                                  int(area.width() - 8))
        width = metrics.horizontalAdvance(text) + 8
        back = QColor(palette.base().color())
        back.setAlpha(215)
        box = QRectF(area.left(), area.center().y() - metrics.height() / 2, width,
                     metrics.height())
        painter.fillRect(box, back)
        painter.setPen(QColor(pal.LEVEL_COLORS[pal.LEVEL_WARNING]))
        painter.drawText(box.adjusted(4, 0, 0, 0),
                         Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, text)

    def _paint_history(self, painter: QPainter, area: QRectF, color: QColor, palette) -> None:
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(pal.faint(palette))
        painter.drawRect(area)
        x, f = self._x, self._fractions
        if x.size < 2:
            return
        px = area.left() + (1.0 + x / self.span_s) * area.width()
        py = area.bottom() - np.clip(f, 0.0, 1.0) * area.height()
        fill = QColor(color)
        fill.setAlpha(150)
        painter.save()
        painter.setClipRect(area)
        fill_known_runs(painter, px, py, area.bottom(), fill)
        painter.restore()


def strip_width(tiles: Iterable[GpuTile], least_px: int, most_px: int, extra_px: int) -> int:
    """The overview strip's width: its widest tile's whole text (``extra_px``: the
    strip's own margins and scroll bar), between ``least_px`` and ``most_px``."""
    need = max((t.sizeHint().width() for t in tiles), default=0) + extra_px
    return max(least_px, min(most_px, need))
