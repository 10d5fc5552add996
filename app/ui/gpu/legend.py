"""The legend beside a GPU's plot: one row per :class:`LegendEntry`."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QSizePolicy, QVBoxLayout, QWidget

from app.core.monitor.plot_data import LegendEntry, Role
from app.core.units import fmt_bytes
from app.ui.style.text import elide_keeping_pid, plain_label, plain_tip


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
        self.name = plain_label(QLabel(self))  # a process's name: its owner's words
        self.name.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.value = QLabel(self)
        self.value.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        self.value.setMinimumWidth(58)
        lay.addWidget(self.swatch, 0, Qt.AlignmentFlag.AlignVCenter)
        lay.addWidget(self.name, 1)
        lay.addWidget(self.value, 0)
        self._state: tuple = ()
        self.name_px = 128  # the room for a name, set by the legend from its width
        self.color = QColor()
        self.tip: str | None = None
        self.entry: LegendEntry = LegendEntry("", Role.OTHER, "", None)

    def set(self, entry: LegendEntry, color: QColor, tip: str | None = None) -> None:
        """Restyle only when something but the value changed (labels re-elide slowly)."""
        name, style = entry.label, entry.style.value  # a CSS border style
        state = (color.rgba(), name, style, entry.emphasised, entry.dimmed, tip, self.name_px)
        if state != self._state:
            self._state = state
            c = QColor(color)
            if entry.dimmed:
                c.setAlpha(90)
            self.swatch.setStyleSheet(
                f"background: transparent; border-top: 3px {style} rgba({c.red()},{c.green()},"
                f"{c.blue()},{c.alpha()});")
            self.name.setText(elide_keeping_pid(self.name.fontMetrics(), name, self.name_px))
            self.name.setToolTip(plain_tip(tip or name))
            font = self.name.font()
            font.setBold(entry.emphasised)
            self.name.setFont(font)
            self.name.setEnabled(not entry.dimmed)
        self.value.setText(value_text(entry))
        self.entry, self.color, self.tip = entry, color, tip

    def set_value(self, value: float | None) -> None:
        """The latest sample's figure, between plot refreshes."""
        if not self.entry.ended:
            text = fmt_bytes(value)
            if self.value.text() != text:
                self.value.setText(text)


MIN_WIDTH = 236  # px
MAX_WIDTH = 360  # px
_NOT_NAME = 108  # px of a row that are not its name: swatch, value, spacing, margins


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

    def fit_width(self, panel_width: int) -> None:
        """A fifth of the panel, within bounds: long names show in full on wide panels."""
        width = max(MIN_WIDTH, min(MAX_WIDTH, panel_width // 5))
        if width != self.width():
            self.setFixedWidth(width)
            for row in self._rows:
                row.name_px = width - _NOT_NAME
                if row.isVisibleTo(self):
                    row.set(row.entry, row.color, row.tip)

    def set_entries(self, entries: Sequence[LegendEntry],
                    color_of: Callable[[LegendEntry], QColor],
                    tip_of: Callable[[LegendEntry], str | None] = lambda entry: None) -> None:
        """One row per entry, in order; ``color_of``/``tip_of`` give its colour and tooltip."""
        while len(self._rows) < len(entries):
            row = _LegendRow(self)
            self._lay.insertWidget(len(self._rows), row)
            self._rows.append(row)
        for row, entry in zip(self._rows, entries):
            row.name_px = self.width() - _NOT_NAME
            row.set(entry, color_of(entry), tip_of(entry))
            row.setVisible(True)
        for row in self._rows[len(entries):]:
            row.setVisible(False)
        self.entries = [(e.key, e.label) for e in entries]

    def update_values(self, values: Mapping[Hashable, float | None]) -> None:
        """Every shown row whose key is in ``values`` reads its figure now: the
        legend follows the latest sample at every span, not only the redraws."""
        for row in self._rows:
            if row.isVisibleTo(self) and row.entry.key in values:
                row.set_value(values[row.entry.key])
