"""The process table's model: rows of the latest snapshot, sorted and diff-updated.

Rows are keyed by ``(display_id, pid, create_time)`` so a pid reused by a new
process is a new row (a remote GPU's display_id names its host: two hosts'
pid 1234 are two rows).  Rows come from this machine and from every remote
host (:func:`app.core.monitor.hosts.each_host`), a disconnected host's last
rows included: greyed, saying since when, their figures the last known.
Updates are incremental (``beginRemoveRows`` for departures, ``dataChanged``
for rows whose figures changed, ``beginInsertRows`` for arrivals), so the
selection and the scroll position survive every tick.
The unattributed rows are updated in place like process rows, but are not
selectable.

While the rows are *held* (:meth:`ProcessTableModel.hold`: the pointer is over the
table) no row moves: figures update in place, arrivals are appended at the end, and
departures stay where they were, greyed out and unselectable, until the hold ends;
then they go and the rows take their sorted order.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from operator import itemgetter

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QSortFilterProxyModel, Qt
from PySide6.QtGui import QColor, QGuiApplication

from app.core.monitor.hosts import HostView, each_host
from app.core.monitor.samples import ProcessSample, Snapshot
from app.ui.gpu.unattributed import row_shown
from app.ui.style import palette as pal
from app.ui.style.hosts import stale, state_text
from app.ui.style.text import plain_tip
from app.ui.window.agent_rows import agent_only_rows
from app.ui.window.process_rows import (
    AGENT_ROLE,
    COL_AGENT,
    COL_COMMAND,
    COLUMN_TIPS,
    COLUMNS,
    ENDED_TIP,
    HOST_ROLE,
    KEY_ROLE,
    LARGEST_FIRST,
    NUMERIC,
    SERVER_ROLE,
    SORT_ROLE,
    STALE_ROLE,
    ProcessRow,
    RowKey,
    UnattributedRow,
    agent_icon,
    italic,
    stale_tooltip,
    swatch_icon,
    unattributed_row,
)

#: Above this many changed cells in one update, one signal for all of them.
MAX_CELL_SIGNALS = 96
_NO_FLAGS = Qt.ItemFlag.NoItemFlags
#: A table model's cell (QAbstractTableModel's flags), and one that cannot be selected.
_ROW_FLAGS = (Qt.ItemFlag.ItemIsSelectable | Qt.ItemFlag.ItemIsEnabled
              | Qt.ItemFlag.ItemNeverHasChildren)
_SHOWN_FLAGS = Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemNeverHasChildren
#: (section, role) -> what the header shows: its name, alignment, tooltip, first sort order.
_HEADER = {key: value for col, name in enumerate(COLUMNS) for key, value in (
    ((col, Qt.ItemDataRole.DisplayRole), name),
    ((col, Qt.ItemDataRole.TextAlignmentRole), int(
        (Qt.AlignmentFlag.AlignRight if col in NUMERIC else Qt.AlignmentFlag.AlignLeft)
        | Qt.AlignmentFlag.AlignVCenter)),
    ((col, Qt.ItemDataRole.ToolTipRole), COLUMN_TIPS.get(col)),
    ((col, Qt.ItemDataRole.InitialSortOrderRole), (
        Qt.SortOrder.DescendingOrder if col in LARGEST_FIRST
        else Qt.SortOrder.AscendingOrder).value))}


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
        self._held = False
        self._ended: set[RowKey] = set()  # departed while held: shown greyed out
        self._colors: dict[Hashable, QColor] = {}
        #: The font of unattributed rows (the view sets its own font, in italics).
        self.unattributed_font = italic(QGuiApplication.font())
        #: Signal changes of rows never painted too (a filtering proxy reads them).
        self.every_change = False

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        """Sort now, held or not: the user asked for this order."""
        self._sort_col = column
        self._sort_order = order
        self._resort()

    # -- holding the order ----------------------------------------------------------------
    @property
    def held(self) -> bool:
        return self._held

    def hold(self, held: bool) -> None:
        """Hold the rows where they are (True), or let the ended ones go and sort (False)."""
        if held == self._held:
            return
        self._held = held
        if held:
            return
        gone = [i for i, r in enumerate(self._rows) if r.key in self._ended]
        self._ended.clear()
        self._remove(gone)
        self._resort()

    def is_live(self, key: RowKey) -> bool:
        """True when ``key``'s row is in the model and its process has not ended."""
        return key in self._index and key not in self._ended

    # -- colours ----------------------------------------------------------------------------
    def set_colors(self, colors: Mapping[Hashable, QColor]) -> None:
        """The curve colours: keyed by process key ``(pid, create_time)`` (every GPU) or
        by ``(display_id, process key)`` (that GPU only, taking precedence).  Rows of
        keys not in ``colors`` (summed into "other") get no swatch."""
        new = dict(colors)
        if new == self._colors:
            return
        self._colors = new
        if self._rows:
            self.dataChanged.emit(self.index(0, COL_COMMAND),
                                  self.index(len(self._rows) - 1, COL_COMMAND),
                                  [Qt.ItemDataRole.DecorationRole])

    def color_of(self, row: ProcessRow | UnattributedRow) -> QColor | None:
        key = row.item_key
        color = self._colors.get(key)
        return self._colors.get(key[1]) if color is None else color

    def _sorted_rows(self) -> list[ProcessRow | UnattributedRow]:
        col = self._sort_col
        rows = sorted(self._rows, key=lambda r: r.order)
        if col < 0:
            return rows
        values = [(r.raw(col), r) for r in rows]  # each row's value, read once
        known = [v for v in values if v[0] is not None]
        known.sort(key=itemgetter(0), reverse=self._sort_order == Qt.SortOrder.DescendingOrder)
        return [r for _, r in known] + [r for value, r in values if value is None]

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
        # Asked a dozen roles a section at every header paint: the answers are made once.
        if orientation != Qt.Orientation.Horizontal:
            return None
        return _HEADER.get((section, role))

    def flags(self, index: QModelIndex) -> Qt.ItemFlag:
        # Asked for every painted cell: the two answers are made once.
        if not index.isValid():
            return _NO_FLAGS
        row = self._rows[index.row()]
        # Not a process, or one that has ended: nothing to act on.
        if row.proc is None or (self._ended and row.key in self._ended):
            return _SHOWN_FLAGS
        return _ROW_FLAGS

    def data(self, index: QModelIndex, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        row = self._rows[index.row()]
        col = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return row.text(col)
        ended = bool(self._ended) and row.key in self._ended
        if role == Qt.ItemDataRole.FontRole and row.proc is None:
            return self.unattributed_font
        if role == Qt.ItemDataRole.ToolTipRole:  # names, commands: their owners' words
            if ended:
                return ENDED_TIP
            tip = row.tooltip(col)
            return plain_tip(tip) if tip else tip
        if role == SORT_ROLE:
            return row.raw(col)
        if role == Qt.ItemDataRole.TextAlignmentRole:
            side = Qt.AlignmentFlag.AlignRight if col in NUMERIC else Qt.AlignmentFlag.AlignLeft
            return int(side | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ForegroundRole and (ended or row.is_unknown(col)):
            return pal.muted(QGuiApplication.palette())
        if role == KEY_ROLE:
            return row.item_key
        if role == Qt.ItemDataRole.DecorationRole:
            if col == COL_AGENT and row.agent is not None and not ended:
                return agent_icon()
            if col == COL_COMMAND and self._colors:
                return swatch_icon(self.color_of(row))
        if role == AGENT_ROLE:
            return None if ended else row.agent
        if role == SERVER_ROLE:
            return None if ended else row.server
        if role == HOST_ROLE:
            return row.host
        if role == STALE_ROLE:
            return row.stale
        return None

    # -- direct access ----------------------------------------------------------------
    def row_for(self, key: RowKey) -> int | None:
        return self._index.get(key)

    def row_at(self, row: int) -> ProcessRow | UnattributedRow:
        """The row object at model row ``row`` (what the delegate paints)."""
        return self._rows[row]

    def has_ended(self, row: ProcessRow | UnattributedRow) -> bool:
        """Whether ``row``'s process ended while the rows were held."""
        return bool(self._ended) and row.key in self._ended

    @property
    def has_colors(self) -> bool:
        """Whether the commands carry colour swatches (any curve is drawn)."""
        return bool(self._colors)

    def process(self, row: int) -> ProcessSample | None:
        """The row's process; None for an unattributed row."""
        return self._rows[row].proc

    def live_process(self, row: int) -> ProcessSample | None:
        """The row's process while it runs; None for an unattributed or ended row."""
        r = self._rows[row]
        return None if r.key in self._ended else r.proc

    def keys(self) -> list[RowKey]:
        return [r.key for r in self._rows]

    def host_texts(self) -> set[str]:
        """Every Host cell's text (the view sizes the column to them)."""
        return {r.host_text() for r in self._rows}

    # -- updating -----------------------------------------------------------------------
    def update_snapshot(self, snapshot: Snapshot) -> None:
        """Bring the rows in line with ``snapshot`` (this machine's and every
        remote host's) with the smallest set of model signals."""
        fresh: dict[RowKey, ProcessRow | UnattributedRow] = {}
        for rank, (view, snap) in enumerate(each_host(snapshot)):
            _host_rows(fresh, snap, rank, view)

        # Departures: removed in contiguous blocks from the bottom up, or, while held,
        # kept in place as ended.  A held row that comes back is live again.
        gone = [i for i, r in enumerate(self._rows) if r.key not in fresh]
        changed = [i for i in gone if self._rows[i].key not in self._ended]
        back = self._ended.intersection(fresh)
        self._ended -= back
        if self._held:
            self._ended.update(self._rows[i].key for i in changed)
        else:
            self._remove(gone)
            changed = []

        # Changes in place: each changed cell on its own while they are few (the
        # view repaints only those), else one dataChanged over the changed rows.
        cells: list[tuple[int, int, int]] = []  # (row, first column, last column)
        for i, old in enumerate(self._rows):
            new = fresh.pop(old.key, None)
            if new is None:
                continue  # ended, held in place
            if old.key not in back and new.signature() == old.signature():
                new.keep_shown(old)  # the same texts: nothing to format again
            else:
                cols = None if old.key in back else _changed_columns(old, new,
                                                                     self.every_change)
                if cols is None or cols:
                    changed.append(i)
                    if cols is None:  # the whole row: one signal
                        cells.append((i, 0, len(COLUMNS) - 1))
                    else:
                        cells.extend((i, c, c) for c in cols)
            self._rows[i] = new  # keep the newest uptime base even when unchanged
        if changed and len(cells) <= MAX_CELL_SIGNALS and not gone:
            for row, first, last in cells:
                self.dataChanged.emit(self.index(row, first), self.index(row, last))
        elif changed:
            lo, hi = min(changed), max(changed)
            self.dataChanged.emit(self.index(lo, 0), self.index(hi, len(COLUMNS) - 1))

        # Arrivals, appended.
        if fresh:
            start = len(self._rows)
            self.beginInsertRows(QModelIndex(), start, start + len(fresh) - 1)
            for row in fresh.values():
                self._index[row.key] = len(self._rows)
                self._rows.append(row)
            self.endInsertRows()
        if not self._held:
            self._resort()

    def _remove(self, rows: list[int]) -> None:
        """Remove ``rows`` (ascending) in contiguous blocks from the bottom up."""
        for first, last in reversed(_blocks(rows)):
            self.beginRemoveRows(QModelIndex(), first, last)
            del self._rows[first:last + 1]
            self.endRemoveRows()
        if rows:
            self._index = {r.key: i for i, r in enumerate(self._rows)}


def _host_rows(fresh: dict[RowKey, ProcessRow | UnattributedRow], snapshot: Snapshot,
               rank: int, view: HostView | None) -> None:
    """The rows of one host's ``snapshot`` into ``fresh``: its agents and model
    servers are its own (pids are the host's); a disconnected host's rows say so."""
    host = "" if view is None else view.key
    late = state_text(view) if view is not None and stale(view) else None
    late_tip = None if view is None or late is None else stale_tooltip(host, late, view.reason)
    now = snapshot.timestamp
    # The snapshot is stamped on this machine's clock, a process's start time on its
    # host's: the host's clock now is this machine's minus the skew between them.
    host_now = now - (0.0 if view is None else view.clock_skew_s)
    agents = snapshot.agents
    servers = {pid: s for s in snapshot.servers for pid in (s.pid, *s.pids)}
    for gpu in snapshot.gpus:
        order = (rank, gpu.index, -1 if gpu.mig_index is None else gpu.mig_index)
        if row_shown(gpu, snapshot):
            rest = unattributed_row(gpu, order, host, late, late_tip)
            fresh[rest.key] = rest
        note = gpu.notes.get("processes") or gpu.notes.get("gpu_memory")
        for p in gpu.processes:
            uptime = None
            if p.create_time is not None and math.isfinite(p.create_time):
                uptime = max(0.0, host_now - p.create_time)
            row = ProcessRow(gpu.display_id, order, p, gpu.memory_total, uptime, note,
                             server=servers.get(p.pid) if servers else None, now=now,
                             host=host, stale=late, stale_tip=late_tip)
            if agents:
                report = agents.get(p.pid)
                if report is not None:
                    row.agent = report
                    row.device = report.device_for_gpu(gpu.index, gpu.uuid)
            fresh[row.key] = row
    if agents and not snapshot.gpus:  # no driver: the agents still say what they hold
        for row in agent_only_rows(agents, set(), rank, host,
                                   None if view is None else view.user, now, late, late_tip):
            fresh[row.key] = row


def _changed_columns(old: ProcessRow | UnattributedRow, new: ProcessRow | UnattributedRow,
                     every_change: bool = False) -> list[int] | None:
    """The columns whose cell differs between two versions of a row; None when the
    row as a whole changed.  A row painted before compares what it showed (text,
    muted or not): a figure that moved without changing its text (13.1 GiB, 2 MiB
    more) repaints nothing.  A row never painted is on no screen: nothing to
    repaint, unless ``every_change`` (a filter reads every row's texts)."""
    if (old.agent is None) != (new.agent is None):
        return None  # the agent's mark comes or goes
    if old.was_shown():
        a, b = old.shown(), new.shown()
        return [c for c in range(len(COLUMNS)) if a[c] != b[c]]
    if not every_change:
        return []
    if not (isinstance(old, ProcessRow) and isinstance(new, ProcessRow)):
        return None
    a, b = old.cells(), new.cells()
    n = len(COLUMNS)
    if a[n:] != b[n:]:
        return None
    return [c for c in range(n) if a[c] != b[c]]


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
        #: Whether a filter is set: without one, view rows are the model's rows.
        self.filtering = False

    def setFilterFixedString(self, pattern: str) -> None:  # noqa: N802
        self.filtering = bool(pattern)
        model = self.sourceModel()
        if isinstance(model, ProcessTableModel):
            model.every_change = self.filtering  # rows filtered out are never painted
        super().setFilterFixedString(pattern)

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        """Sorting happens in the source model (see ProcessTableModel); the proxy
        keeps the source order and only filters."""
        model = self.sourceModel()
        if model is not None:
            model.sort(column, order)


__all__ = ["ProcessSortProxy", "ProcessTableModel"]
