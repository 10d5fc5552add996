"""The sort arrow points the way the values run, in every table that sorts."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import QStyleOptionHeader, QTableView

from app.ui.style.sort_header import SortHeader


def arrow(view: QTableView, column: int) -> QStyleOptionHeader.SortIndicator:
    option = QStyleOptionHeader()
    view.horizontalHeader().initStyleOptionForIndex(option, column)
    return option.sortIndicator


def test_largest_first_points_down_and_smallest_first_up(qtbot):
    view = QTableView()
    qtbot.addWidget(view)
    view.setHorizontalHeader(SortHeader(Qt.Orientation.Horizontal, view))
    view.setModel(QStandardItemModel(3, 2))
    view.setSortingEnabled(True)
    view.sortByColumn(1, Qt.SortOrder.DescendingOrder)
    assert arrow(view, 1) == QStyleOptionHeader.SortIndicator.SortDown
    assert arrow(view, 0) == QStyleOptionHeader.SortIndicator.None_
    view.sortByColumn(1, Qt.SortOrder.AscendingOrder)
    assert arrow(view, 1) == QStyleOptionHeader.SortIndicator.SortUp


def test_the_detail_views_model_table_points_down_for_largest_first(qtbot):
    from app.ui.agents.agent_views import ProcessDetailView
    from app.ui.agents.model_list import MCOL_SIZE

    view = ProcessDetailView()
    qtbot.addWidget(view)
    assert view.models_view.horizontalHeader().sortIndicatorOrder() == \
        Qt.SortOrder.DescendingOrder  # the biggest model first
    assert arrow(view.models_view, MCOL_SIZE) == QStyleOptionHeader.SortIndicator.SortDown
