"""The estimate's breakdown as one stacked bar against the GPU's free memory now.

Left to right: the kinds at the step's peak (weights, gradients, optimizer
state, activations, temporaries, KV cache), the allocator's rounding up to
``reserved_bytes`` and the CUDA context up to ``needs_bytes``; the faint track
is what the GPU has free now, its end a tick.  The needs marker says where the
step ends: past the tick, the part that does not fit is outlined in the
critical colour.  Free memory unknown: no track, "free n/a" (never 0).

Colours are the breakdown palette's (one indigo hue in steps, what is reserved
but unused hatched as the GPU panel hatches a cache) and the context's theme
grey: shape and lightness, not hue, tell the kinds apart.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QBrush, QColor, QPainter, QPalette, QPen
from PySide6.QtWidgets import QGridLayout, QLabel, QSizePolicy, QWidget

from app.core.estimate.types import KINDS
from app.core.units import fmt_bytes
from app.ui.estimate.texts import KIND_NAMES, KIND_TIPS
from app.ui.style import palette as pal
from app.ui.style.layouts import clear

#: Every part of the bar, in the order drawn.
PARTS = (*KINDS, "rounding", "context")
_MID = 0.5  # gradients and optimizer state: halfway between the two indigo steps
BAR_PX = 22


def part_fill(part: str, palette: QPalette) -> tuple[QColor, QColor | None, Qt.BrushStyle]:
    """(fill, hatch colour or None, hatch pattern) of a part of the bar."""
    dark, light = QColor(pal.BREAKDOWN_PARAMS), QColor(pal.BREAKDOWN_TENSORS)
    mid = pal.blend(dark, light, _MID)
    none = Qt.BrushStyle.NoBrush
    return {
        "weights": (dark, None, none),
        "gradients": (mid, None, none),
        "optimizer": (mid, light, Qt.BrushStyle.FDiagPattern),
        "activations": (light, None, none),
        "temporaries": (light, dark, Qt.BrushStyle.Dense6Pattern),
        "kv_cache": (light, dark, Qt.BrushStyle.VerPattern),
        "rounding": (QColor(pal.BREAKDOWN_CACHE), QColor(pal.BREAKDOWN_CACHE_HATCH),
                     Qt.BrushStyle.BDiagPattern),
    }.get(part, (pal.context_color(palette), None, none))


def fill_part(p: QPainter, rect: QRectF, part: str, palette: QPalette) -> None:
    color, hatch, pattern = part_fill(part, palette)
    p.fillRect(rect, color)
    if hatch is not None:
        p.fillRect(rect, QBrush(hatch, pattern))


def bar_parts(breakdown: dict[str, int], reserved: int, needs: int | None
              ) -> list[tuple[str, int]]:
    """(part, bytes) of every part with bytes, in :data:`PARTS` order."""
    parts = [(k, max(0, int(breakdown.get(k, 0)))) for k in KINDS]
    peak = sum(b for _, b in parts)
    parts.append(("rounding", max(0, reserved - peak)))
    if needs is not None:
        parts.append(("context", max(0, needs - max(reserved, peak))))
    return [(k, b) for k, b in parts if b > 0]


class FitBar(QWidget):
    """The bar (see the module's docstring): ``set`` it, it paints."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("fitBar")
        self.parts: list[tuple[str, int]] = []
        self.free: int | None = None
        self.needs = 0
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMinimumWidth(160)
        self.setFixedHeight(BAR_PX + 2 * (self.fontMetrics().height() + 2) + 4)

    def set(self, parts: list[tuple[str, int]], free: int | None) -> None:
        self.parts = parts
        self.free = free
        self.needs = sum(b for _, b in parts)
        self.setToolTip("\n".join(f"{KIND_NAMES.get(k, k)}: {fmt_bytes(b)}" for k, b in parts)
                        + f"\nNeeds free: {fmt_bytes(self.needs)}"
                        + f"\nFree on the GPU now: {fmt_bytes(free)}")
        self.update()

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(480, self.height())

    def scale(self) -> int:
        return max(self.free or 0, self.needs, 1)

    def paintEvent(self, _event: Any) -> None:  # noqa: N802
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        palette = self.palette()
        fm = self.fontMetrics()
        text_h = fm.height() + 2
        r = QRectF(1.5, text_h + 2, self.width() - 3, BAR_PX)
        scale = self.scale()
        if self.free:
            track = QRectF(r.left(), r.top(), r.width() * self.free / scale, r.height())
            p.setPen(Qt.PenStyle.NoPen)
            p.setBrush(pal.faint(palette))
            p.drawRoundedRect(track, 4, 4)
        x = r.left()
        for part, size in self.parts:
            w = r.width() * size / scale
            fill_part(p, QRectF(x, r.top(), max(0.0, w - 1), r.height()), part, palette)
            x += w
        needs_x = r.left() + r.width() * self.needs / scale
        fg = pal.foreground(palette)
        short = self.free is not None and self.needs > self.free
        if short and self.free is not None:
            free_x = r.left() + r.width() * self.free / scale
            pen = QPen(QColor(pal.LEVEL_COLORS[pal.LEVEL_CRITICAL]), 2, Qt.PenStyle.DashLine)
            p.setPen(pen)
            p.setBrush(Qt.BrushStyle.NoBrush)
            p.drawRect(QRectF(free_x, r.top() - 2, needs_x - free_x, r.height() + 4))
        # The needs marker above the bar, the free tick below it.
        p.setPen(QPen(fg, 2))
        p.drawLine(QPointF(needs_x, r.top() - 3), QPointF(needs_x, r.bottom()))
        self._label(p, needs_x, 0, f"needs {fmt_bytes(self.needs)}", fg)
        bottom = r.bottom() + 2
        if self.free is None:
            self._label(p, r.left(), bottom, f"free {fmt_bytes(None)}", pal.muted(palette))
        else:
            free_x = r.left() + r.width() * self.free / scale
            p.setPen(QPen(pal.muted(palette), 2))
            p.drawLine(QPointF(free_x, r.top()), QPointF(free_x, r.bottom() + 3))
            self._label(p, free_x, bottom, f"free now {fmt_bytes(self.free)}",
                        pal.muted(palette))
        p.end()

    def _label(self, p: QPainter, x: float, top: float, text: str, color: QColor) -> None:
        """``text`` ending at ``x`` (starting there when it would leave the left edge)."""
        fm = self.fontMetrics()
        w = fm.horizontalAdvance(text) + 2
        left = min(max(0.0, x - w), self.width() - w)
        if x - w < 0:
            left = max(0.0, min(x, self.width() - w))
        p.setPen(color)
        p.drawText(QRectF(left, top, w, fm.height() + 2),
                   int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter), text)


class Swatch(QWidget):
    """A part's fill, legend-sized."""

    def __init__(self, part: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.part = part
        self.setFixedSize(12, 12)

    def paintEvent(self, _event: Any) -> None:  # noqa: N802
        p = QPainter(self)
        fill_part(p, QRectF(0, 0, 12, 12), self.part, self.palette())
        p.end()


class FitLegend(QWidget):
    """The bar's parts with their bytes, two to a row; "× batch" marks what grows
    with the batch."""

    COLUMNS = 2

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("fitLegend")
        self.grid = QGridLayout(self)
        self.grid.setContentsMargins(0, 0, 0, 0)
        self.grid.setHorizontalSpacing(6)
        self.grid.setVerticalSpacing(2)
        self.rows: dict[str, tuple[str, str]] = {}  # part -> (name, bytes) shown

    def set(self, parts: list[tuple[str, int]], scales: tuple[str, ...]) -> None:
        clear(self.grid)
        self.rows = {}
        right = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
        for i, (part, size) in enumerate(parts):
            row, col = divmod(i, self.COLUMNS)
            col *= 4
            name = KIND_NAMES.get(part, part) + (" × batch" if part in scales else "")
            tip = KIND_TIPS.get(part, "") + (
                "\nGrows with the batch" if part in scales else "")
            swatch = Swatch(part, self)
            label = QLabel(name, self)
            value = QLabel(fmt_bytes(size), self)
            value.setObjectName("fitLegendBytes")
            for w in (swatch, label, value):
                w.setToolTip(tip)
            self.grid.addWidget(swatch, row, col)
            self.grid.addWidget(label, row, col + 1)
            self.grid.addWidget(value, row, col + 2, right)
            self.rows[part] = (name, value.text())
        for c in range(self.COLUMNS):
            self.grid.setColumnMinimumWidth(c * 4 + 3, 18)  # between the two columns
            self.grid.setColumnStretch(c * 4 + 1, 1)


__all__ = ["PARTS", "FitBar", "FitLegend", "Swatch", "bar_parts", "fill_part", "part_fill"]
