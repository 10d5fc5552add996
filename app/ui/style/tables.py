"""The app's flat lists of rows (the Activity log, call sites, OOM holders, past
reports) and its sortable tables (processes, an agent's models): one setup
each, so they look and select alike."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractItemView, QTableView, QTreeWidget, QWidget

Selection = QAbstractItemView.SelectionMode


def flat_list(parent: QWidget, name: str, columns: Sequence[str],
              selection: Selection = Selection.SingleSelection) -> QTreeWidget:
    """A header and rows, no tree decoration, uniform rows, alternating colours."""
    tree = QTreeWidget(parent)
    tree.setObjectName(name)
    tree.setColumnCount(len(columns))
    tree.setHeaderLabels(list(columns))
    tree.setRootIsDecorated(False)
    tree.setUniformRowHeights(True)
    tree.setAlternatingRowColors(True)
    tree.setSelectionMode(selection)
    return tree


def sorted_rows(view: QTableView, sort_column: int) -> int:
    """A table of whole rows, one selectable, not editable, sorted by
    ``sort_column`` largest first, no grid, alternating colours, one line a
    row; the row height it set."""
    view.setSortingEnabled(True)
    view.sortByColumn(sort_column, Qt.SortOrder.DescendingOrder)
    view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    view.setSelectionMode(Selection.SingleSelection)
    view.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    view.setAlternatingRowColors(True)
    view.setShowGrid(False)
    view.setWordWrap(False)
    view.verticalHeader().setVisible(False)
    row = view.fontMetrics().height() + 10
    view.verticalHeader().setDefaultSectionSize(row)
    return row
