"""A table header whose sort arrow points the way the values run: ▼ largest first."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHeaderView, QStyleOptionHeader


class SortHeader(QHeaderView):
    """A header whose sort arrow points the way the values run: ▼ largest first.

    (QHeaderView hands the style "sort up" for a descending column, which Fusion
    draws as ▲.)"""

    def initStyleOptionForIndex(self, option: QStyleOptionHeader,  # noqa: N802
                                logical_index: int) -> None:
        super().initStyleOptionForIndex(option, logical_index)
        if option.sortIndicator != QStyleOptionHeader.SortIndicator.None_:
            option.sortIndicator = (
                QStyleOptionHeader.SortIndicator.SortDown
                if self.sortIndicatorOrder() == Qt.SortOrder.DescendingOrder
                else QStyleOptionHeader.SortIndicator.SortUp)
