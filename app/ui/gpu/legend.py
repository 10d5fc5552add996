"""The legend beside a GPU's plot: one row per :class:`LegendEntry`."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QSizePolicy, QVBoxLayout, QWidget

from app.core.monitor.plot_data import LegendEntry
from app.core.units import fmt_gib
from app.ui.style.text import elide_keeping_pid


def value_text(entry: LegendEntry) -> str:
    """The figure a row shows: the value now, ``ended`` for a process that exited."""
    return "ended" if entry.ended else fmt_gib(entry.value)


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
            self.name.setText(elide_keeping_pid(self.name.fontMetrics(), name, 128))
            self.name.setToolTip(tip or name)
            font = self.name.font()
            font.setBold(entry.emphasised)
            self.name.setFont(font)
            self.name.setEnabled(not entry.dimmed)
        self.value.setText(value_text(entry))


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
