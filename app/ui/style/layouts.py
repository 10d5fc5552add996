"""Widgets laid out one way wherever they recur: a figure's caption over its bold
value, a bold heading, a grid emptied before it is filled again."""

from __future__ import annotations

from typing import TypeVar

from PySide6.QtWidgets import QGridLayout, QLabel, QLayout, QWidget

_Label = TypeVar("_Label", bound=QLabel)

#: A figure's value is this much larger than the text around it.
FIGURE_SCALE = 1.1


def bold(label: _Label, scale: float = 1.0) -> _Label:
    """``label`` in bold, its font ``scale`` times the size."""
    font = label.font()
    font.setBold(True)
    if scale != 1.0:
        font.setPointSizeF(font.pointSizeF() * scale)
    label.setFont(font)
    return label


def add_figure(grid: QGridLayout, col: int, caption: str, value: str, tip: str,
               parent: QWidget) -> QLabel:
    """A caption (row 0) over its bold value (row 1) in column ``col``, both with
    ``tip``; the value's label, to set later."""
    cap = QLabel(caption, parent)
    cap.setObjectName("secondary")
    val = bold(QLabel(value, parent), FIGURE_SCALE)
    for w in (cap, val):
        w.setToolTip(tip)
    grid.addWidget(cap, 0, col)
    grid.addWidget(val, 1, col)
    return val


def clear(layout: QLayout) -> None:
    """Take every widget out of ``layout`` and delete it (hidden at once, so the
    layout's next fill never shows the old ones beside the new)."""
    while layout.count():
        item = layout.takeAt(0)
        w = item.widget() if item is not None else None
        if w is not None:
            w.hide()
            w.deleteLater()
