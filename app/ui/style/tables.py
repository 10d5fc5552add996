"""The app's flat lists of rows (the Activity log, call sites, OOM holders, past
reports): one setup, so they look and select alike."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtWidgets import QAbstractItemView, QTreeWidget, QWidget

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
