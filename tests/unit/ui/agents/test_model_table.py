"""The detail view's model table: largest first, one row at a time, never squeezed
below its header and two models."""

from __future__ import annotations

from PySide6.QtCore import QSortFilterProxyModel, Qt
from PySide6.QtWidgets import QAbstractItemView

from app.ui.agents.model_list import MCOL_NAME, MCOL_SIZE, MODEL_SORT_ROLE, ModelListModel
from app.ui.agents.model_table import WIDEST, ModelTable


def test_model_table_setup(qtbot):
    model = ModelListModel()
    proxy = QSortFilterProxyModel()
    proxy.setSourceModel(model)
    proxy.setSortRole(MODEL_SORT_ROLE)
    view = ModelTable(proxy)
    qtbot.addWidget(view)
    assert view.objectName() == "modelTable"
    assert view.horizontalHeader().sortIndicatorSection() == MCOL_SIZE
    assert view.horizontalHeader().sortIndicatorOrder() == Qt.SortOrder.DescendingOrder
    assert view.selectionMode() == QAbstractItemView.SelectionMode.SingleSelection
    row = view.verticalHeader().defaultSectionSize()
    assert view.minimumHeight() >= 3 * row  # the header and two models
    fm = view.fontMetrics()
    for col, sample in WIDEST:
        assert view.columnWidth(col) > fm.horizontalAdvance(sample)
    assert MCOL_NAME not in dict(WIDEST)  # the name takes what is left
