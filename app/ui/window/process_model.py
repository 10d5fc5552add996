"""The process table's model: rows of the latest snapshot, sorted and diff-updated.

Rows are keyed by ``(display_id, pid, create_time)`` so a pid reused by a new
process is a new row.  Updates are incremental (``beginRemoveRows`` for
departures, ``dataChanged`` for rows whose figures changed, ``beginInsertRows``
for arrivals), so the selection and the scroll position survive every tick.
The unattributed rows are updated in place like process rows, but are not
selectable.
"""

from __future__ import annotations

import math

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QSortFilterProxyModel, Qt
from PySide6.QtGui import QGuiApplication

from app.core.monitor.samples import ProcessSample, Snapshot
from app.ui.gpu.unattributed import row_shown
from app.ui.style import palette as pal
from app.ui.window.process_rows import (
    AGENT_ROLE,
    COL_AGENT,
    COLUMN_TIPS,
    COLUMNS,
    KEY_ROLE,
    NUMERIC,
    SORT_ROLE,
    ProcessRow,
    RowKey,
    UnattributedRow,
    agent_icon,
    italic,
    unattributed_row,
)


class ProcessTableModel(QAbstractTableModel):
    """Flat list of (GPU, process) rows from the latest snapshot, updated by diffing.

    The model keeps its rows sorted itself: a Python ``lessThan`` in a proxy
    costs ~30 ms per re-sort at 500 rows on every tick, a key sort here 0.5 ms.
    Unknown values sort last in either order; ties fall back to the pid (an
    unattributed row after the processes it ties with).
    """

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._rows: list[ProcessRow | UnattributedRow] = []
        self._index: dict[RowKey, int] = {}
        self._sort_col = -1
        self._sort_order = Qt.SortOrder.AscendingOrder
        #: The font of unattributed rows (the view sets its own font, in italics).
        self.unattributed_font = italic(QGuiApplication.font())

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        self._sort_col = column
        self._sort_order = order
        self._resort()

    def _sorted_rows(self) -> list[ProcessRow | UnattributedRow]:
        col = self._sort_col
        rows = sorted(self._rows, key=lambda r: r.order)
        if col < 0:
            return rows
        known = [r for r in rows if r.raw(col) is not None]
        unknown = [r for r in rows if r.raw(col) is None]
        known.sort(key=lambda r: r.raw(col),
                   reverse=self._sort_order == Qt.SortOrder.DescendingOrder)
        return known + unknown

    def _resort(self) -> None:
        new_rows = self._sorted_rows()
        if [id(r) for r in new_rows] == [id(r) for r in self._rows]:
            return
        self.layoutAboutToBeChanged.emit()
        old_keys = [r.key for r in self._rows]
        self._rows = new_rows
        self._index = {r.key: i for i, r in enumerate(new_rows)}
        # Keep selections and the current index on the same processes.
        old_indexes = self.persistentIndexList()
        new_indexes = [self.index(self._index[old_keys[idx.row()]], idx.column())
                       for idx in old_indexes]
        self.changePersistentIndexList(old_indexes, new_indexes)
        self.layoutChanged.emit()

    # -- Qt model API -------------------------------------------------------------
    def rowCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: N802, B008
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: N802, B008
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):  # noqa: N802
        if orientation == Qt.Orientation.Horizontal:
            if role == Qt.ItemDataRole.DisplayRole:
                return COLUMNS[section]
            if role == Qt.ItemDataRole.TextAlignmentRole:
                return int((Qt.AlignmentFlag.AlignRight if section in NUMERIC
                            else Qt.AlignmentFlag.AlignLeft) | Qt.AlignmentFlag.AlignVCenter)
            if role == Qt.ItemDataRole.ToolTipRole:
                return COLUMN_TIPS.get(section)
        return None

    def flags(self, index: QModelIndex) -> Qt.ItemFlag:
        flags = super().flags(index)
        if index.isValid() and isinstance(self._rows[index.row()], UnattributedRow):
            flags &= ~Qt.ItemFlag.ItemIsSelectable  # not a process: nothing to act on
        return flags

    def data(self, index: QModelIndex, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        row = self._rows[index.row()]
        col = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return row.text(col)
        if role == Qt.ItemDataRole.FontRole and row.proc is None:
            return self.unattributed_font
        if role == Qt.ItemDataRole.ToolTipRole:
            return row.tooltip(col)
        if role == SORT_ROLE:
            return row.raw(col)
        if role == Qt.ItemDataRole.TextAlignmentRole:
            side = Qt.AlignmentFlag.AlignRight if col in NUMERIC else Qt.AlignmentFlag.AlignLeft
            return int(side | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ForegroundRole and row.is_unknown(col):
            return pal.muted(QGuiApplication.palette())
        if role == KEY_ROLE:
            return row.item_key
        if role == Qt.ItemDataRole.DecorationRole and col == COL_AGENT and row.agent is not None:
            return agent_icon()
        if role == AGENT_ROLE:
            return row.agent
        return None

    # -- direct access ----------------------------------------------------------------
    def row_for(self, key: RowKey) -> int | None:
        return self._index.get(key)

    def process(self, row: int) -> ProcessSample | None:
        """The row's process; None for an unattributed row."""
        return self._rows[row].proc

    def keys(self) -> list[RowKey]:
        return [r.key for r in self._rows]

    # -- updating -----------------------------------------------------------------------
    def update_snapshot(self, snapshot: Snapshot) -> None:
        """Bring the rows in line with ``snapshot`` with the smallest set of model signals."""
        now = snapshot.timestamp
        agents = snapshot.agents
        fresh: dict[RowKey, ProcessRow | UnattributedRow] = {}
        for gpu in snapshot.gpus:
            order = (gpu.index, -1 if gpu.mig_index is None else gpu.mig_index)
            if row_shown(gpu, snapshot):
                rest = unattributed_row(gpu, order)
                fresh[rest.key] = rest
            note = gpu.notes.get("processes") or gpu.notes.get("gpu_memory")
            for p in gpu.processes:
                uptime = None
                if p.create_time is not None and math.isfinite(p.create_time):
                    uptime = max(0.0, now - p.create_time)
                row = ProcessRow(gpu.display_id, order, p, gpu.memory_total, uptime, note)
                if agents:
                    report = agents.get(p.pid)
                    if report is not None:
                        row.agent = report
                        row.device = report.device_for_gpu(gpu.index, gpu.uuid)
                fresh[row.key] = row

        # Departures, removed in contiguous blocks from the bottom up.
        gone = [i for i, r in enumerate(self._rows) if r.key not in fresh]
        for first, last in reversed(_blocks(gone)):
            self.beginRemoveRows(QModelIndex(), first, last)
            del self._rows[first:last + 1]
            self.endRemoveRows()
        if gone:
            self._index = {r.key: i for i, r in enumerate(self._rows)}

        # Changes in place: one dataChanged over the span of changed rows.
        lo = hi = -1
        for i, old in enumerate(self._rows):
            new = fresh.pop(old.key)
            if new.signature() != old.signature():
                self._rows[i] = new
                lo = i if lo < 0 else lo
                hi = i
            else:
                self._rows[i] = new  # keep the newest uptime base even when unchanged
        if lo >= 0:
            self.dataChanged.emit(self.index(lo, 0), self.index(hi, len(COLUMNS) - 1))

        # Arrivals, appended.
        if fresh:
            start = len(self._rows)
            self.beginInsertRows(QModelIndex(), start, start + len(fresh) - 1)
            for row in fresh.values():
                self._index[row.key] = len(self._rows)
                self._rows.append(row)
            self.endInsertRows()
        self._resort()


def _blocks(indices: list[int]) -> list[tuple[int, int]]:
    """``[1, 2, 3, 7]`` → ``[(1, 3), (7, 7)]``."""
    out: list[tuple[int, int]] = []
    for i in indices:
        if out and out[-1][1] == i - 1:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
    return out


class ProcessSortProxy(QSortFilterProxyModel):
    """Filters rows by text; sorting is forwarded to the model."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setSortRole(SORT_ROLE)
        self.setDynamicSortFilter(True)
        self.setFilterCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.setFilterKeyColumn(-1)

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        """Sorting happens in the source model (see ProcessTableModel); the proxy
        keeps the source order and only filters."""
        model = self.sourceModel()
        if model is not None:
            model.sort(column, order)


__all__ = ["ProcessSortProxy", "ProcessTableModel"]
