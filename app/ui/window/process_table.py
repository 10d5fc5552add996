"""Every GPU process of the latest snapshot, as a sortable, diff-updated table.

Rows are keyed by ``(display_id, pid, create_time)`` so a pid reused by a new
process is a new row.  Updates are incremental (``beginRemoveRows`` for
departures, ``dataChanged`` for rows whose figures changed, ``beginInsertRows``
for arrivals), so the selection and the scroll position survive every tick.

Each GPU may also have one "Unattributed" row (used memory no listed process
holds, :mod:`app.ui.gpu.unattributed`), keyed ``(display_id, UNATTRIBUTED_KEY,
None)``: a string where a pid would be, so it never equals a process's key.  It
is updated in place like a process row, but is not selectable and offers no
actions.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass

from PySide6.QtCore import (
    QAbstractTableModel,
    QEvent,
    QItemSelection,
    QModelIndex,
    QSortFilterProxyModel,
    Qt,
    Signal,
)
from PySide6.QtGui import QFont, QFontMetrics, QGuiApplication
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableView, QWidget

from app.core.agents.types import AgentReport, DeviceMemory
from app.core.monitor.samples import Container, GpuSample, HostStatus, ProcessSample, Snapshot
from app.ui.gpu.unattributed import UNATTRIBUTED_KEY, explanation, row_shown, unknown_reason
from app.ui.style import palette as pal
from app.ui.style.format import NA, fmt_bytes, fmt_duration, fmt_percent

# (gpu display_id, pid, create_time); (display_id, UNATTRIBUTED_KEY, None) for the
# unattributed row.
RowKey = tuple[str, int | str, float | None]

COLUMNS = ("GPU", "PID", "User", "Container", "Command", "PyTorch", "VRAM", "Cache", "% of GPU",
           "SM %", "CPU %", "RSS", "Uptime")
(COL_GPU, COL_PID, COL_USER, COL_CONTAINER, COL_COMMAND, COL_AGENT, COL_VRAM, COL_CACHE, COL_PCT,
 COL_SM, COL_CPU, COL_RSS, COL_UPTIME) = range(len(COLUMNS))
NUMERIC = {COL_PID, COL_VRAM, COL_CACHE, COL_PCT, COL_SM, COL_CPU, COL_RSS, COL_UPTIME}

SORT_ROLE = Qt.ItemDataRole.UserRole + 1  # the raw value (None = unknown)
KEY_ROLE = Qt.ItemDataRole.UserRole + 2  # (display_id, (pid, create_time))
AGENT_ROLE = Qt.ItemDataRole.UserRole + 3  # the process's AgentReport, or None

_COLUMN_TIPS = {
    COL_VRAM: "GPU memory used by this process on this GPU",
    COL_PCT: "This process's share of the GPU's total memory",
    COL_SM: "Share of the GPU's streaming multiprocessors (recent average)",
    COL_CPU: "CPU use in percent of one core",
    COL_RSS: "Host (CPU) resident memory",
    COL_AGENT: "PyTorch version reported by the VRAM Steward agent in the process\n"
               "(blank: no agent in this process)",
    COL_CACHE: "PyTorch's cached, unused GPU memory (reserved − allocated) on this GPU:\n"
               "what Free cache can return. n/a without an agent.",
    COL_CONTAINER: "The container the process runs in: runtime and name (or short id)\n"
                   "(blank: not in a container)",
}

UNATTRIBUTED_TEXT = "Unattributed (held by no listed process)"
COMMAND_ROOM = 200  # px the command column keeps before the container column narrows
COMMAND_MIN = 160  # px the command column keeps however narrow the table (it scrolls)

_NO_AGENT = "No VRAM Steward agent in this process: PyTorch figures unknown"


def container_tooltip(c: Container) -> str:
    """Everything known about a process's container, one fact a line."""
    lines = [f"Runtime: {c.runtime}", f"ID: {c.id}"]
    if c.name:
        lines.append(f"Name: {c.name}")
    if c.pod:
        lines.append(f"Kubernetes pod: {c.pod}")
    return "\n".join(lines)


def _agent_icon():
    """A small PyTorch-orange dot marking rows with an agent (made once)."""
    global _ICON
    if _ICON is None:
        from PySide6.QtGui import QColor, QIcon, QPainter, QPixmap

        pm = QPixmap(16, 16)
        pm.fill(Qt.GlobalColor.transparent)
        p = QPainter(pm)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        p.setPen(Qt.PenStyle.NoPen)
        p.setBrush(QColor(pal.AGENT_COLOR))
        p.drawEllipse(3, 3, 10, 10)
        p.end()
        _ICON = QIcon(pm)
    return _ICON


_ICON = None


@dataclass(slots=True)
class _Row:
    display_id: str
    gpu_order: tuple[int, int]  # (index, mig index or -1): numeric GPU sort
    proc: ProcessSample
    memory_total: int | None
    uptime: float | None
    gpu_note: str | None
    agent: AgentReport | None = None
    device: DeviceMemory | None = None  # the agent's allocator figures for this GPU

    def signature(self) -> tuple:
        # As shown ("4m 05s", "3h 02m"): an hours-old process repaints once a minute, not every second.
        up = fmt_duration(self.uptime)
        a = self.agent
        agent = None if a is None else (a.torch, a.torch_status, a.python, a.allocator_backend,
                                        a.cuda_initialized, len(a.models), self.device)
        return (self.proc, self.memory_total, up, self.gpu_note, agent)

    @property
    def key(self) -> RowKey:
        return (self.display_id, self.proc.pid, self.proc.create_time)

    @property
    def item_key(self) -> tuple[str, Hashable]:
        """What KEY_ROLE returns: (display_id, process key)."""
        return (self.display_id, self.proc.key)

    @property
    def order(self) -> tuple[int, int]:
        """Tie-break when sorting: processes by pid."""
        return (0, self.proc.pid)

    def raw(self, col: int):
        p = self.proc
        if col == COL_GPU:
            return self.gpu_order
        if col == COL_PID:
            return p.pid
        if col == COL_USER:
            return p.user.lower() if p.user else None
        if col == COL_CONTAINER:
            return p.container.label.lower() if p.container else None
        if col == COL_COMMAND:
            text = p.command or p.name
            return text.lower() if text else None
        if col == COL_VRAM:
            return p.gpu_memory
        if col == COL_AGENT:
            a = self.agent
            return None if a is None else (a.torch or a.torch_status).lower()
        if col == COL_CACHE:
            return None if self.device is None else self.device.cache
        if col == COL_PCT:
            if p.gpu_memory is None or not self.memory_total:
                return None
            return 100.0 * p.gpu_memory / self.memory_total
        if col == COL_SM:
            return p.sm_util
        if col == COL_CPU:
            return p.cpu_percent
        if col == COL_RSS:
            return p.host_rss
        if col == COL_UPTIME:
            return self.uptime
        return None

    def reason(self) -> str:
        """Why a cell of this row may be unknown (for tooltips)."""
        return self.proc.host_status.label

    def text(self, col: int) -> str:
        p = self.proc
        status = p.host_status
        if col == COL_GPU:
            return self.display_id
        if col == COL_PID:
            return str(p.pid)
        if col == COL_USER:
            if p.user:
                return p.user
            return "access denied" if status == HostStatus.ACCESS_DENIED else NA
        if col == COL_CONTAINER:
            return p.container.label if p.container else ""
        if col == COL_COMMAND:
            base = p.command or p.name
            if status == HostStatus.NOT_VISIBLE:
                return base or status.label
            if status == HostStatus.EXITED:
                return f"{base} (exited)" if base else status.label
            return base or NA
        if col == COL_AGENT:
            a = self.agent
            if a is None:
                return ""
            return a.torch or a.torch_status
        value = self.raw(col)
        if value is None:
            return NA
        if col in (COL_VRAM, COL_RSS, COL_CACHE):
            return fmt_bytes(value)
        if col == COL_PCT:
            return fmt_percent(value, 1 if value < 10 else 0)
        if col in (COL_SM, COL_CPU):
            return fmt_percent(value)
        if col == COL_UPTIME:
            return fmt_duration(value)
        return str(value)

    def tooltip(self, col: int) -> str | None:
        p = self.proc
        if col == COL_COMMAND:
            parts = [p.command or p.name or NA]
            if p.host_status.label:
                parts.append(f"({p.host_status.label})")
            parts.append(f"PID {p.pid} on GPU {self.display_id}, {p.kind}")
            return "\n".join(parts)
        if col in (COL_GPU, COL_PID):
            return None
        if col == COL_AGENT:
            return self.agent_tooltip()
        if col == COL_CACHE:
            d = self.device
            if self.agent is None:
                return _NO_AGENT
            if d is None or d.cache is None:
                return "The agent reports no allocator figures for this GPU"
            return (f"Cache {fmt_bytes(d.cache, 2)} = reserved {fmt_bytes(d.reserved, 2)}"
                    f" − allocated {fmt_bytes(d.allocated, 2)}\n"
                    "What Free cache can return to the driver")
        if col == COL_USER and p.user:
            return p.user
        if col == COL_CONTAINER:
            return container_tooltip(p.container) if p.container else _COLUMN_TIPS[col]
        if self.text(col) in (NA, "access denied"):
            if p.host_status.label:
                return p.host_status.label
            if col in (COL_VRAM, COL_PCT, COL_SM) and self.gpu_note:
                return self.gpu_note
            return "not reported"
        return _COLUMN_TIPS.get(col)

    def agent_tooltip(self) -> str:
        a = self.agent
        if a is None:
            return _NO_AGENT
        lines = [f"VRAM Steward agent: {a.torch_status if a.torch is None else 'torch ' + a.torch}",
                 f"Python {a.python or NA}, allocator {a.allocator_backend or NA}",
                 "CUDA " + ("n/a" if a.cuda_initialized is None
                            else "initialised" if a.cuda_initialized else "not initialised"),
                 f"{len(a.models)} model{'s' if len(a.models) != 1 else ''}",
                 "Double-click the row for details"]
        return "\n".join(lines)

    def is_unknown(self, col: int) -> bool:
        if col in (COL_GPU, COL_PID, COL_CONTAINER):
            return False
        if col == COL_AGENT:
            return self.agent is not None and self.agent.torch is None
        if col == COL_USER:
            return not self.proc.user
        if col == COL_COMMAND:
            return not (self.proc.command or self.proc.name) or self.proc.host_status in (
                HostStatus.EXITED, HostStatus.NOT_VISIBLE)
        return self.raw(col) is None


@dataclass(slots=True)
class _UnattributedRow:
    """One GPU's used memory that no listed process holds (``GpuSample.unattributed_memory``).

    Not a process: no pid, no host figures (blank, not n/a: they do not apply),
    never selectable, no agent.  Shown in italics and muted."""

    display_id: str
    gpu_order: tuple[int, int]
    memory: int | None  # the core's figure, never recomputed here
    memory_total: int | None
    reason: str | None  # why ``memory`` is unknown
    agent: None = None
    device: None = None
    proc: None = None

    def signature(self) -> tuple:
        return (self.memory, self.memory_total, self.reason)

    @property
    def key(self) -> RowKey:
        return (self.display_id, UNATTRIBUTED_KEY, None)

    @property
    def item_key(self) -> tuple[str, Hashable]:
        return (self.display_id, UNATTRIBUTED_KEY)

    @property
    def order(self) -> tuple[int, int]:
        return (1, 0)  # after the processes it ties with

    def raw(self, col: int):
        if col == COL_GPU:
            return self.gpu_order
        if col == COL_VRAM:
            return self.memory
        if col == COL_PCT:
            if self.memory is None or not self.memory_total:
                return None
            return 100.0 * self.memory / self.memory_total
        return None

    def text(self, col: int) -> str:
        if col == COL_GPU:
            return self.display_id
        if col == COL_COMMAND:
            return UNATTRIBUTED_TEXT
        if col == COL_VRAM:
            return fmt_bytes(self.memory)
        if col == COL_PCT:
            value = self.raw(col)
            return NA if value is None else fmt_percent(value, 1 if value < 10 else 0)
        return ""

    def tooltip(self, col: int) -> str:
        return explanation(self.display_id, self.memory, self.reason)

    def is_unknown(self, col: int) -> bool:
        return True  # the whole row is muted: it is a remainder, not a process


class ProcessTableModel(QAbstractTableModel):
    """Flat list of (GPU, process) rows from the latest snapshot, updated by diffing.

    The model keeps its rows sorted itself: a Python ``lessThan`` in a proxy
    costs ~30 ms per re-sort at 500 rows on every tick, a key sort here 0.5 ms.
    Unknown values sort last in either order; ties fall back to the pid (an
    unattributed row after the processes it ties with).
    """

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._rows: list[_Row | _UnattributedRow] = []
        self._index: dict[RowKey, int] = {}
        self._sort_col = -1
        self._sort_order = Qt.SortOrder.AscendingOrder
        #: The font of unattributed rows (the view sets its own font, in italics).
        self.unattributed_font = _italic(QGuiApplication.font())

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        self._sort_col = column
        self._sort_order = order
        self._resort()

    def _sorted_rows(self) -> list[_Row | _UnattributedRow]:
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
                return _COLUMN_TIPS.get(section)
        return None

    def flags(self, index: QModelIndex) -> Qt.ItemFlag:
        flags = super().flags(index)
        if index.isValid() and isinstance(self._rows[index.row()], _UnattributedRow):
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
            return int((Qt.AlignmentFlag.AlignRight if col in NUMERIC else Qt.AlignmentFlag.AlignLeft)
                       | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ForegroundRole and row.is_unknown(col):
            return pal.muted(QGuiApplication.palette())
        if role == KEY_ROLE:
            return row.item_key
        if role == Qt.ItemDataRole.DecorationRole and col == COL_AGENT and row.agent is not None:
            return _agent_icon()
        if role == AGENT_ROLE:
            return row.agent
        return None

    # -- direct access ----------------------------------------------------------------
    def row_key(self, row: int) -> RowKey:
        return self._rows[row].key

    def row_for(self, key: RowKey) -> int | None:
        return self._index.get(key)

    def raw_value(self, row: int, col: int):
        return self._rows[row].raw(col)

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
        fresh: dict[RowKey, _Row | _UnattributedRow] = {}
        for gpu in snapshot.gpus:
            order = (gpu.index, -1 if gpu.mig_index is None else gpu.mig_index)
            if row_shown(gpu, snapshot):
                rest = _unattributed_row(gpu, order)
                fresh[rest.key] = rest
            note = gpu.notes.get("processes") or gpu.notes.get("gpu_memory")
            for p in gpu.processes:
                uptime = None
                if p.create_time is not None and math.isfinite(p.create_time):
                    uptime = max(0.0, now - p.create_time)
                row = _Row(gpu.display_id, order, p, gpu.memory_total, uptime, note)
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


def _unattributed_row(gpu: GpuSample, order: tuple[int, int]) -> _UnattributedRow:
    return _UnattributedRow(gpu.display_id, order, gpu.unattributed_memory, gpu.memory_total,
                            unknown_reason(gpu))


def _italic(font: QFont) -> QFont:
    font = QFont(font)
    font.setItalic(True)
    return font


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


class ProcessTable(QTableView):
    """The process list.  Emits :attr:`process_selected` ``(display_id, key)`` on selection,
    ``(None, None)`` when the selection is cleared."""

    process_selected = Signal(object, object)
    #: Double-click on a row whose process has an agent: ``pid``.
    details_requested = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("processTable")
        self.source_model = ProcessTableModel(self)
        self.proxy = ProcessSortProxy(self)
        self.proxy.setSourceModel(self.source_model)
        self.setModel(self.proxy)
        self.setSortingEnabled(True)
        self.sortByColumn(COL_VRAM, Qt.SortOrder.DescendingOrder)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setAlternatingRowColors(True)
        self.setShowGrid(False)
        self.setWordWrap(False)
        self.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.verticalHeader().setVisible(False)
        self.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 10)
        self.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        header = self.horizontalHeader()
        header.setHighlightSections(False)
        header.setStretchLastSection(False)
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setSectionResizeMode(COL_COMMAND, QHeaderView.ResizeMode.Stretch)
        fm = self.fontMetrics()
        bold = self.font()
        bold.setBold(True)
        hm = QFontMetrics(bold)
        widths = {COL_GPU: "0/mig0", COL_PID: "0000000", COL_USER: "svc-llm-user",
                  COL_CONTAINER: "podman 3f4e2a1b9c0d", COL_VRAM: "000.0 GiB", COL_PCT: "100 %",
                  COL_SM: "100 %", COL_CPU: "1000 %", COL_RSS: "000.0 GiB", COL_UPTIME: "00d 00h",
                  COL_CACHE: "000.0 GiB", COL_AGENT: "WW 2.4.1+cu121"}
        for col, sample in widths.items():
            # Room for the bold header text, its padding and the sort arrow.
            self.setColumnWidth(col, max(fm.horizontalAdvance(sample) + 16,
                                         hm.horizontalAdvance(COLUMNS[col]) + 40))
        # The container column gives way to the command in a narrow window, down to
        # "podman 3f4e…" (elided; the tooltip has it all), until the user sizes it.
        self._container_widths = (max(fm.horizontalAdvance("podman 3f4e…") + 16,
                                      hm.horizontalAdvance(COLUMNS[COL_CONTAINER]) + 24),
                                  self.columnWidth(COL_CONTAINER))
        self._container_sized_by_user = False
        self._fitting = False
        header.sectionResized.connect(self._on_section_resized)
        self.selectionModel().selectionChanged.connect(self._on_selection_changed)
        self.doubleClicked.connect(self._on_double_clicked)
        # The agent columns appear with the first snapshot that has agents, the
        # container column with the first process seen in a container.
        self.agent_columns_shown = False
        for col in (COL_AGENT, COL_CACHE):
            self.setColumnHidden(col, True)
        self.container_column_shown = False
        self._set_hidden(COL_CONTAINER, True)
        self.source_model.unattributed_font = _italic(self.font())
        self._selected: tuple | None = None
        self._updating = False

    def changeEvent(self, event) -> None:  # noqa: N802
        if event.type() == QEvent.Type.FontChange:
            self.source_model.unattributed_font = _italic(self.font())
        super().changeEvent(event)

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._fit_columns()

    def _set_hidden(self, col: int, hidden: bool) -> None:
        self._fitting = True
        try:
            self.setColumnHidden(col, hidden)
        finally:
            self._fitting = False

    def _on_section_resized(self, col: int, old: int, new: int) -> None:
        if col == COL_CONTAINER and not self._fitting and new > 0 and old > 0:
            self._container_sized_by_user = True

    def _fit_columns(self) -> None:
        """In a narrow table, the container column narrows first (not below
        "podman 3f4e…") while the command would get less than COMMAND_ROOM px; the
        command then keeps COMMAND_MIN px and the table scrolls sideways rather
        than squeeze it to nothing."""
        header = self.horizontalHeader()
        room = self.viewport().width() - sum(
            header.sectionSize(c) for c in range(len(COLUMNS))
            if c not in (COL_CONTAINER, COL_COMMAND) and not self.isColumnHidden(c))
        self._fitting = True
        try:
            if self.container_column_shown and not self._container_sized_by_user:
                least, natural = self._container_widths
                width = max(least, min(natural, room - COMMAND_ROOM))
                if header.sectionSize(COL_CONTAINER) != width:
                    self.setColumnWidth(COL_CONTAINER, width)
            if self.container_column_shown:
                room -= header.sectionSize(COL_CONTAINER)
            stretch = room >= COMMAND_MIN
            mode = QHeaderView.ResizeMode.Stretch if stretch else QHeaderView.ResizeMode.Interactive
            if header.sectionResizeMode(COL_COMMAND) != mode:
                header.setSectionResizeMode(COL_COMMAND, mode)
            if not stretch and header.sectionSize(COL_COMMAND) != COMMAND_MIN:
                self.setColumnWidth(COL_COMMAND, COMMAND_MIN)
        finally:
            self._fitting = False

    def update_snapshot(self, snapshot: Snapshot) -> None:
        before = self._selected
        if snapshot.agents and not self.agent_columns_shown:
            self.agent_columns_shown = True
            for col in (COL_AGENT, COL_CACHE):
                self.setColumnHidden(col, False)
            self._fit_columns()
        if not self.container_column_shown and any(
                p.container is not None for g in snapshot.gpus for p in g.processes):
            self.container_column_shown = True
            self._set_hidden(COL_CONTAINER, False)
            self._fit_columns()
        self._updating = True
        try:
            self.source_model.update_snapshot(snapshot)
            if before is not None:
                did, key = before
                if self.source_model.row_for((did, key[0], key[1])) is None:
                    # The selected process left: clear rather than let the selection
                    # slide onto a neighbour (which would highlight another curve).
                    self.clearSelection()
                elif self.selected_key() != before:
                    self.select_key(did, key)
        finally:
            self._updating = False
        self._emit_if_changed()

    def selected_key(self) -> tuple[str, Hashable] | None:
        rows = self.selectionModel().selectedRows()
        if not rows:
            return None
        return rows[0].data(KEY_ROLE)

    def select_key(self, display_id: str, key: Hashable) -> bool:
        """Select the row of ``key`` (pid, create_time) on GPU ``display_id``."""
        row = self.source_model.row_for((display_id, key[0], key[1]))
        if row is None:
            return False
        index = self.proxy.mapFromSource(self.source_model.index(row, 0))
        self.selectRow(index.row())
        if not self._updating:
            self.scrollTo(index)
        return True

    def visible_row_of(self, display_id: str, pid: int) -> int | None:
        """The view row showing ``pid`` on ``display_id`` (for tests and scripting)."""
        for r in range(self.proxy.rowCount()):
            did, key = self.proxy.index(r, 0).data(KEY_ROLE)
            if did == display_id and key[0] == pid:
                return r
        return None

    def selected_agent(self) -> AgentReport | None:
        """The agent report of the selected row's process, or None."""
        rows = self.selectionModel().selectedRows()
        return rows[0].data(AGENT_ROLE) if rows else None

    def _on_double_clicked(self, index) -> None:
        agent = index.data(AGENT_ROLE)
        if agent is not None:
            self.details_requested.emit(index.data(KEY_ROLE)[1][0])

    def _on_selection_changed(self, selected: QItemSelection, deselected: QItemSelection) -> None:
        if not self._updating:
            self._emit_if_changed()

    def _emit_if_changed(self) -> None:
        current = self.selected_key()
        if current == self._selected:
            return
        self._selected = current
        if current is None:
            self.process_selected.emit(None, None)
        else:
            self.process_selected.emit(current[0], current[1])


__all__ = ["ProcessTable", "ProcessTableModel", "ProcessSortProxy", "COLUMNS", "SORT_ROLE",
           "KEY_ROLE", "AGENT_ROLE", "UNATTRIBUTED_KEY", "UNATTRIBUTED_TEXT"]
