"""The legend beside a GPU's plot: one row per :class:`LegendEntry`.

Its width follows its longest name (within a share of the panel), and each name
is elided to the width its row really has: "vllm.entrypoints.openai.api_server
(9121)" shows in full beside a wide plot, and loses characters only on a narrow
panel.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from app.core.monitor.plot_data import LegendEntry, Role
from app.core.units import fmt_bytes
from app.ui.style.elided_label import ElidedLabel
from app.ui.style.text import plain_tip


def value_text(entry: LegendEntry) -> str:
    """The figure a row shows: the value now, ``ended`` for a process that exited."""
    return "ended" if entry.ended else fmt_bytes(entry.value)


class _LegendRow(QWidget):
    def __init__(self, parent: QWidget) -> None:
        super().__init__(parent)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(6)
        self.swatch = QFrame(self)
        self.swatch.setFixedSize(14, 4)
        self.name = ElidedLabel(self)  # a process's name: its owner's words
        self.value = QLabel(self)
        self.value.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        # Room for the widest figure ("ended", "12.3 GiB", "123.4 GiB") before the name.
        self.value.setMinimumWidth(self.value.fontMetrics().horizontalAdvance("000.0 GiB"))
        lay.addWidget(self.swatch, 0, Qt.AlignmentFlag.AlignVCenter)
        lay.addWidget(self.name, 1)
        lay.addWidget(self.value, 0)
        self._state: tuple = ()
        self.needed_px = 0  # the width that shows the whole name (set with the entry)
        self.color = QColor()
        self.tip: str | None = None
        self.entry: LegendEntry = LegendEntry("", Role.OTHER, "", None)

    def set(self, entry: LegendEntry, color: QColor, tip: str | None = None) -> None:
        """Restyle only when something but the value changed (labels re-elide slowly)."""
        name, style = entry.label, entry.style.value  # a CSS border style
        state = (color.rgba(), name, style, entry.emphasised, entry.dimmed, tip)
        if state != self._state:
            self._state = state
            c = QColor(color)
            if entry.dimmed:
                c.setAlpha(90)
            self.swatch.setStyleSheet(
                f"background: transparent; border-top: 3px {style} rgba({c.red()},{c.green()},"
                f"{c.blue()},{c.alpha()});")
            font = self.name.font()
            font.setBold(entry.emphasised)
            self.name.setFont(font)
            self.name.setText(name)
            self.name.setToolTip(plain_tip(tip or name))
            self.name.setEnabled(not entry.dimmed)
            self.needed_px = (self.swatch.width() + 2 * self.layout().spacing()
                              + self.name.full_width() + self.value.minimumWidth())
        self.value.setText(value_text(entry))
        self.entry, self.color, self.tip = entry, color, tip

    def set_value(self, value: float | None) -> None:
        """The latest sample's figure, between plot refreshes."""
        if not self.entry.ended:
            text = fmt_bytes(value)
            if self.value.text() != text:
                self.value.setText(text)


MIN_WIDTH = 236  # px
MAX_WIDTH = 480  # px
#: The most of its panel's width the legend takes for its names (the plot keeps the rest).
PANEL_SHARE = 0.38


class LegendPanel(QWidget):
    """Colour → "name (pid)" list beside the plot, so it never covers the data."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFixedWidth(MIN_WIDTH)
        self._lay = QVBoxLayout(self)
        self._lay.setContentsMargins(4, 6, 4, 6)
        self._lay.setSpacing(3)
        self._rows: list[_LegendRow] = []
        self._lay.addStretch(1)
        self.entries: list[tuple[Hashable, str]] = []  # (key, name) shown, in order
        self._panel_px = 0

    def fit_width(self, panel_width: int) -> None:
        """The panel's width changed: the most the legend may take changed with it."""
        self._panel_px = panel_width
        self._fit()

    def wanted_width(self) -> int:
        """The width that shows every name in full, within :data:`MIN_WIDTH` and the
        share of the panel a legend may take."""
        m = self._lay.contentsMargins()
        need = max((row.needed_px for row in self._rows if row.isVisibleTo(self)),
                   default=0) + m.left() + m.right()
        cap = max(MIN_WIDTH, min(MAX_WIDTH, int(self._panel_px * PANEL_SHARE)))
        return max(MIN_WIDTH, min(cap, need))

    def _fit(self) -> None:
        width = self.wanted_width()
        if width != self.width():
            self.setFixedWidth(width)  # the rows' names re-elide to their new width

    def set_entries(self, entries: Sequence[LegendEntry],
                    color_of: Callable[[LegendEntry], QColor],
                    tip_of: Callable[[LegendEntry], str | None] = lambda entry: None) -> None:
        """One row per entry, in order; ``color_of``/``tip_of`` give its colour and tooltip."""
        while len(self._rows) < len(entries):
            row = _LegendRow(self)
            self._lay.insertWidget(len(self._rows), row)
            self._rows.append(row)
        for row, entry in zip(self._rows, entries):
            row.set(entry, color_of(entry), tip_of(entry))
            row.setVisible(True)
        for row in self._rows[len(entries):]:
            row.setVisible(False)
        self.entries = [(e.key, e.label) for e in entries]
        self._fit()

    def update_values(self, values: Mapping[Hashable, float | None]) -> None:
        """Every shown row whose key is in ``values`` reads its figure now: the
        legend follows the latest sample at every span, not only the redraws."""
        for row in self._rows:
            if row.isVisibleTo(self) and row.entry.key in values:
                row.set_value(values[row.entry.key])
