"""The detail view's table of an agent's models: sorted largest first, one row
selected, the State column drawn as a badge, columns sized for their widest
usual text."""

from __future__ import annotations

from PySide6.QtCore import QSortFilterProxyModel, Qt
from PySide6.QtWidgets import QHeaderView, QTableView, QWidget

from app.ui.agents.model_list import (
    MCOL_CLASS,
    MCOL_DEVICE,
    MCOL_DTYPE,
    MCOL_IDLE,
    MCOL_MODE,
    MCOL_NAME,
    MCOL_PARAMS,
    MCOL_PINNED,
    MCOL_SIZE,
    MCOL_STATE,
    MODEL_COLUMNS,
    BadgeDelegate,
)
from app.ui.style.sort_header import SortHeader
from app.ui.style.tables import sorted_rows

#: Per column, the text its width is made for.
WIDEST = ((MCOL_STATE, "Offloaded to disk"), (MCOL_CLASS, "UNet2DConditionModel"),
          (MCOL_PARAMS, "000.0 M"), (MCOL_SIZE, "000.0 MiB"), (MCOL_DEVICE, "cuda:0"),
          (MCOL_DTYPE, "bfloat16"), (MCOL_MODE, "train"), (MCOL_IDLE, "idle 2 h 17 min"),
          (MCOL_PINNED, "pinned"))


class ModelTable(QTableView):
    def __init__(self, proxy: QSortFilterProxyModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("modelTable")
        self.setHorizontalHeader(SortHeader(Qt.Orientation.Horizontal, self))
        self.setModel(proxy)
        self.setItemDelegateForColumn(MCOL_STATE, BadgeDelegate(self))
        row = sorted_rows(self, MCOL_SIZE)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        # The header and two models, however small the window: never squeezed to nothing.
        self.setMinimumHeight(3 * row + 6)
        header = self.horizontalHeader()
        header.setHighlightSections(False)
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setSectionResizeMode(MCOL_NAME, QHeaderView.ResizeMode.Stretch)
        fm = self.fontMetrics()
        for col, sample in WIDEST:
            # the cell's padding (6 px a side) and the sort arrow's room
            extra = 36 if col in (MCOL_STATE, MCOL_SIZE) else 18
            self.setColumnWidth(col, max(fm.horizontalAdvance(sample),
                                         fm.horizontalAdvance(MODEL_COLUMNS[col]) + 12) + extra)


__all__ = ["ModelTable"]
