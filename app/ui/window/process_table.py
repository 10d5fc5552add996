"""Every GPU process of the latest snapshot, as a sortable, diff-updated table view.

The rows and their cells are in :mod:`app.ui.window.process_rows`, the model and
its filtering proxy in :mod:`app.ui.window.process_model`; this view keeps the
selection on the same process across ticks and fits the columns to its width.
"""

from __future__ import annotations

from collections.abc import Hashable

from PySide6.QtCore import QEvent, QItemSelection, Qt, Signal
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableView, QWidget

from app.core.agents.types import AgentReport
from app.core.monitor.samples import Snapshot
from app.ui.window.process_model import ProcessSortProxy, ProcessTableModel
from app.ui.window.process_rows import (
    AGENT_ROLE,
    COL_AGENT,
    COL_CACHE,
    COL_COMMAND,
    COL_CONTAINER,
    COL_CPU,
    COL_GPU,
    COL_PCT,
    COL_PID,
    COL_RSS,
    COL_SM,
    COL_UPTIME,
    COL_USER,
    COL_VRAM,
    COLUMNS,
    COMMAND_MIN,
    COMMAND_ROOM,
    KEY_ROLE,
    italic,
)


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
        self.source_model.unattributed_font = italic(self.font())
        self._selected: tuple | None = None
        self._updating = False

    def changeEvent(self, event) -> None:  # noqa: N802
        if event.type() == QEvent.Type.FontChange:
            self.source_model.unattributed_font = italic(self.font())
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


__all__ = ["ProcessTable"]
