"""Every GPU process of the latest snapshot, as a sortable, diff-updated table view.

The rows and their cells are in :mod:`app.ui.window.process_rows`, the model and
its filtering proxy in :mod:`app.ui.window.process_model`; this view keeps the
selection on the same process across ticks and fits the columns to its width (the
command stretches; a table too narrow for every column scrolls sideways).

Rows do not move under the pointer: while it is over the rows (or a row's menu is
open) the model holds its order (:meth:`ProcessTableModel.hold`), and the rows take
their sorted order :data:`RESUME_MS` after it left.  Selection, double-click and the
context menu act on the process of the row, never on a row number.  A model
server's row offers its models' Unload (or Reload) in its menu, through
:attr:`ProcessTable.request`.

Rows come from every host (a "Host" column appears with the first remote
host; the filter matches it too).  A process is (host, pid): every signal
and request from a row names its host, and a disconnected host's rows offer
no action (they say why).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

from PySide6.QtCore import QEvent, QItemSelection, QModelIndex, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QContextMenuEvent, QFontMetrics, QGuiApplication, QPainter
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QMenu,
    QStyle,
    QTableView,
    QWidget,
)

from app.core.agents.types import AgentReport
from app.core.diagnosis.agentless import install_commands
from app.core.monitor.hosts import each_host
from app.core.monitor.samples import HostStatus, Snapshot
from app.ui.agents.detail_facts import stale_action
from app.ui.agents.server_texts import menu_entries
from app.ui.style.sort_header import SortHeader
from app.ui.style.tables import sorted_rows
from app.ui.style.text import plain_tip
from app.ui.window.process_delegate import ProcessRowDelegate
from app.ui.window.process_model import ProcessSortProxy, ProcessTableModel
from app.ui.window.process_rows import (
    AGENT_ROLE,
    COL_AGENT,
    COL_CACHE,
    COL_COMMAND,
    COL_CONTAINER,
    COL_CPU,
    COL_GPU,
    COL_HOST,
    COL_PCT,
    COL_PID,
    COL_RSS,
    COL_SM,
    COL_UPTIME,
    COL_USER,
    COL_VRAM,
    COLUMNS,
    COMMAND_CHARS,
    COMMAND_ROOM,
    HOST_ROLE,
    KEY_ROLE,
    SERVER_ROLE,
    STALE_ROLE,
    italic,
)

#: How long after the pointer left the rows they take their sorted order again.
RESUME_MS = 1000


class ProcessTable(QTableView):
    """The process list.  Emits :attr:`process_selected` ``(display_id, key)`` on selection
    (``display_id`` names the host: ``"0@gpu1"``), ``(None, None)`` when the selection
    is cleared."""

    process_selected = Signal(object, object)
    #: Double-click on a row whose process has an agent (or its menu's Details…):
    #: ``(pid, host)`` (host "" for this machine).
    details_requested = Signal(int, str)
    #: "Terminate…" in a process row's menu: ``(pid, host)``.
    terminate_requested = Signal(int, str)
    #: A model server's Unload / Reload from a row's menu (app.core.control.requests).
    request = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("processTable")
        header = SortHeader(Qt.Orientation.Horizontal, self)
        header.setSectionsClickable(True)
        self.setHorizontalHeader(header)
        self.source_model = ProcessTableModel(self)
        self.proxy = ProcessSortProxy(self)
        self.proxy.setSourceModel(self.source_model)
        self.setModel(self.proxy)
        self.delegate = ProcessRowDelegate(self, self.source_model, self.proxy)
        self.setItemDelegate(self.delegate)
        sorted_rows(self, COL_VRAM)
        self.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        # A table narrower than its columns scrolls sideways, smoothly.
        self.setHorizontalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        header.setHighlightSections(False)
        header.setStretchLastSection(False)
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setSectionResizeMode(COL_COMMAND, QHeaderView.ResizeMode.Stretch)
        fm = self.fontMetrics()
        bold = self.font()
        bold.setBold(True)
        hm = QFontMetrics(bold)
        widths = {COL_HOST: "this machine", COL_GPU: "0/mig0", COL_PID: "0000000",
                  COL_USER: "svc-llm-user", COL_CONTAINER: "podman 3f4e2a1b9c0d",
                  COL_VRAM: "000.0 GiB", COL_PCT: "100 %",
                  COL_SM: "100 %", COL_CPU: "1000 %", COL_RSS: "000.0 GiB", COL_UPTIME: "00d 00h",
                  COL_CACHE: "000.0 GiB", COL_AGENT: "WW 2.4.1+cu121"}
        #: Each column's width when shown (the user's, once they size it).
        self._widths: dict[int, int] = {}
        for col, sample in widths.items():
            # Room for the bold header text, its padding and the sort arrow.
            self._widths[col] = max(fm.horizontalAdvance(sample) + 16,
                                    hm.horizontalAdvance(COLUMNS[col]) + 40)
            self.setColumnWidth(col, self._widths[col])
        # The container column gives way to the command in a narrow window, down to
        # "podman 3f4e…" (elided; the tooltip has it all), until the user sizes it.
        self._container_least = max(fm.horizontalAdvance("podman 3f4e…") + 16,
                                    hm.horizontalAdvance(COLUMNS[COL_CONTAINER]) + 24)
        self._container_sized_by_user = False
        self._fitting = False
        self._holds: set[str] = set()
        self._resume = QTimer(self)
        self._resume.setSingleShot(True)
        self._resume.setInterval(RESUME_MS)
        self._resume.timeout.connect(self._release)
        header.sectionResized.connect(self._on_section_resized)
        self.selectionModel().selectionChanged.connect(self._on_selection_changed)
        self.doubleClicked.connect(self._on_double_clicked)
        # The agent columns appear with the first snapshot that has agents, the
        # container column with the first process seen in a container.
        self.agent_columns_shown = False
        # (host, pid) -> `agent install` command, for PyTorch processes without an agent
        # (the Doctor's of that host)
        self._install_commands: dict[tuple[str, int], str] = {}
        for col in (COL_AGENT, COL_CACHE):
            self.setColumnHidden(col, True)
        # The host column appears with the first remote host (sized to its names).
        self.host_column_shown = False
        self._host_sized_by_user = False
        self._host_texts: frozenset[str] = frozenset()
        self.setColumnHidden(COL_HOST, True)
        self.container_column_shown = False
        self.setColumnHidden(COL_CONTAINER, True)
        self.source_model.unattributed_font = italic(self.font())
        self._selected: tuple | None = None
        self._updating = False

    def changeEvent(self, event) -> None:  # noqa: N802
        kind = event.type()
        if kind == QEvent.Type.FontChange:
            self.source_model.unattributed_font = italic(self.font())
        if kind in (QEvent.Type.FontChange, QEvent.Type.StyleChange, QEvent.Type.PaletteChange):
            self.delegate.fonts_changed()
        super().changeEvent(event)

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._fit_columns()

    def _on_section_resized(self, col: int, old: int, new: int) -> None:
        if self._fitting or new <= 0 or old <= 0 or col == COL_COMMAND:
            return
        self._widths[col] = new  # the user's width, kept when the column comes back
        if col == COL_CONTAINER:
            self._container_sized_by_user = True
        if col == COL_HOST:
            self._host_sized_by_user = True

    def _wanted(self, col: int) -> bool:
        """Whether ``col`` belongs in the table, room permitting."""
        if col in (COL_AGENT, COL_CACHE):
            return self.agent_columns_shown
        if col == COL_CONTAINER:
            return self.container_column_shown
        if col == COL_HOST:
            return self.host_column_shown
        return True

    def _command_width(self, chars: int) -> int:
        """Pixels for ``chars`` characters of the command, its swatch and padding."""
        swatch = self.style().pixelMetric(QStyle.PixelMetric.PM_SmallIconSize) + 6
        return self.fontMetrics().horizontalAdvance("x" * chars) + swatch + 16

    def _fit_columns(self) -> None:
        """Every column the table has is shown, however narrow it is: the
        container column narrows first (not below "podman 3f4e…") while the
        command would get less than COMMAND_ROOM characters; the command takes
        the room left, down to COMMAND_CHARS; below that it keeps COMMAND_CHARS
        and the table scrolls sideways, so every column stays reachable."""
        header = self.horizontalHeader()
        least, comfort = self._command_width(COMMAND_CHARS), self._command_width(COMMAND_ROOM)
        room = self.viewport().width()
        width = {c: self._widths.get(c, header.sectionSize(c))
                 for c in range(len(COLUMNS)) if c != COL_COMMAND and self._wanted(c)}
        fit_container = COL_CONTAINER in width and not self._container_sized_by_user
        if fit_container:
            spare = room - sum(width.values()) - comfort
            width[COL_CONTAINER] = max(self._container_least,
                                       min(width[COL_CONTAINER], width[COL_CONTAINER] + spare))
        left = room - sum(width.values())
        self._fitting = True
        try:
            for col in range(len(COLUMNS)):
                hidden = col != COL_COMMAND and col not in width
                if self.isColumnHidden(col) != hidden:
                    self.setColumnHidden(col, hidden)
            if fit_container and header.sectionSize(COL_CONTAINER) != width[COL_CONTAINER]:
                self.setColumnWidth(COL_CONTAINER, width[COL_CONTAINER])
            stretch = left >= least
            mode = QHeaderView.ResizeMode.Stretch if stretch else QHeaderView.ResizeMode.Interactive
            if header.sectionResizeMode(COL_COMMAND) != mode:
                header.setSectionResizeMode(COL_COMMAND, mode)
            if not stretch and header.sectionSize(COL_COMMAND) != least:
                self.setColumnWidth(COL_COMMAND, least)
            if stretch and self.horizontalScrollBar().isVisible():
                self.updateGeometries()  # it fits now: the sideways scroll bar goes at once
        finally:
            self._fitting = False

    # -- holding the rows in place ------------------------------------------------------
    @property
    def rows_held(self) -> bool:
        """True while no row moves (the pointer is over the rows, or a menu is open)."""
        return self.source_model.held

    def hold_rows(self, why: str) -> None:
        """Keep every row where it is until :meth:`release_rows` of every ``why``."""
        self._holds.add(why)
        self._resume.stop()
        self.source_model.hold(True)

    def release_rows(self, why: str) -> None:
        """The rows take their order :data:`RESUME_MS` after the last hold ended."""
        self._holds.discard(why)
        if not self._holds and self.source_model.held:
            self._resume.start()

    def _release(self) -> None:
        if not self._holds:
            self._resume.stop()
            self.source_model.hold(False)

    def paintEvent(self, event) -> None:  # noqa: N802
        """Each row the event touches, painted from its row object in one call."""
        painter = QPainter(self.viewport())
        try:
            self.delegate.paint_rows(self, painter, event.region())
        finally:
            painter.end()

    def viewportEvent(self, event: QEvent) -> bool:  # noqa: N802
        kind = event.type()
        if kind == QEvent.Type.Enter:
            self.hold_rows("pointer")
        elif kind == QEvent.Type.Leave:
            self.release_rows("pointer")
        return super().viewportEvent(event)

    def hideEvent(self, event) -> None:  # noqa: N802
        super().hideEvent(event)
        self._holds.clear()  # no pointer over a hidden table
        self._release()

    # -- colours and the context menu -----------------------------------------------------
    def set_colors(self, colors: Mapping[Hashable, QColor]) -> None:
        """Show each process's curve colour as a square before its command.

        ``colors`` is keyed by process key ``(pid, create_time)`` (that process on
        every GPU) or by ``(display_id, process key)`` (on that GPU only; it wins);
        processes not in it (summed into "other") get no swatch."""
        self.source_model.set_colors(colors)

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:  # noqa: N802
        if event.reason() == QContextMenuEvent.Reason.Keyboard:
            index = self.currentIndex()
            where = self.viewport().mapToGlobal(self.visualRect(index).center())
        else:
            index = self.indexAt(event.pos())
            where = event.globalPos()
        menu = self.menu_for(index)
        if menu is None:
            return
        self.hold_rows("menu")
        try:
            menu.exec(where)
        finally:
            self.release_rows("menu")
            menu.deleteLater()

    def menu_for(self, index: QModelIndex) -> QMenu | None:
        """The menu of the row at view ``index``: Details… and Terminate… of its
        process; None for an unattributed or ended row."""
        if not index.isValid():
            return None
        proc = self.source_model.live_process(self.proxy.mapToSource(index).row())
        if proc is None:
            return None
        pid = proc.pid
        host = index.data(HOST_ROLE) or ""
        stale = index.data(STALE_ROLE)
        menu = QMenu(self)
        menu.setToolTipsVisible(True)
        details = menu.addAction("Details…")
        command = self._install_commands.get((host, pid))
        server = index.data(SERVER_ROLE)
        if index.data(AGENT_ROLE) is None and server is None:
            # A PyTorch process without an agent has details: how to invite the agent.
            details.setEnabled(command is not None)
            details.setToolTip("No VRAM Steward agent in this process")
            if command is not None:  # a PyTorch process: its environment can have the agent
                copy = menu.addAction("Copy the agent's install command")
                copy.setToolTip(plain_tip(f"{command}\nEvery PyTorch process of its "
                                          "environment has the agent from its next start"))
                copy.triggered.connect(lambda: QGuiApplication.clipboard().setText(command))
        details.triggered.connect(lambda: self.details_requested.emit(pid, host))
        no_action = None if stale is None else stale_action(host, stale)
        if server is not None:  # its models' unloads, or why there is none
            menu.addSeparator()
            for text, tip, req in menu_entries(server, host):
                entry = menu.addAction(text)
                entry.setToolTip(plain_tip(no_action or tip))  # names the server's models
                entry.setEnabled(req is not None and no_action is None)
                if req is not None:
                    entry.triggered.connect(lambda _=False, r=req: self.request.emit(r))
        menu.addSeparator()
        terminate = menu.addAction("Terminate…")
        why_not = no_action or {
            HostStatus.EXITED: "The process has exited",
            HostStatus.NOT_VISIBLE: "This pid is not visible here"}.get(proc.host_status)
        if why_not is not None:
            terminate.setEnabled(False)
            terminate.setToolTip(why_not)
        terminate.triggered.connect(lambda: self.terminate_requested.emit(pid, host))
        return menu

    def update_snapshot(self, snapshot: Snapshot) -> None:
        before = self._selected
        hosts = each_host(snapshot)
        self._install_commands = {
            ("" if view is None else view.key, pid): command
            for view, snap in hosts for pid, command in install_commands(snap).items()}
        if not self.agent_columns_shown and any(snap.agents for _, snap in hosts):
            self.agent_columns_shown = True
            for col in (COL_AGENT, COL_CACHE):
                self.setColumnHidden(col, False)
            self._fit_columns()
        if not self.container_column_shown and any(
                p.container is not None for _, snap in hosts
                for g in snap.gpus for p in g.processes):
            self.container_column_shown = True
            self.setColumnHidden(COL_CONTAINER, False)
            self._fit_columns()
        if snapshot.hosts and not self.host_column_shown:
            self.host_column_shown = True
            self.setColumnHidden(COL_HOST, False)
            self._fit_columns()
        self._updating = True
        try:
            self.source_model.update_snapshot(snapshot)
            if before is not None:
                did, key = before
                if not self.source_model.is_live((did, key[0], key[1])):
                    # The selected process left: clear rather than let the selection
                    # slide onto a neighbour (which would highlight another curve).
                    self.clearSelection()
                elif self.selected_key() != before:
                    self.select_key(did, key)
        finally:
            self._updating = False
        if self.host_column_shown:
            self._size_host_column()
        self._emit_if_changed()

    def _size_host_column(self) -> None:
        """The host column as wide as its longest text ("gpu1 · disconnected since
        15:04:12"), within reason, until the user sizes it."""
        texts = frozenset(self.source_model.host_texts())
        if texts == self._host_texts or self._host_sized_by_user:
            return
        self._host_texts = texts
        fm = self.fontMetrics()
        longest = max((fm.horizontalAdvance(t) for t in texts), default=0) + 16
        cap = fm.horizontalAdvance("x" * 52)  # "127.0.0.3:42965 · disconnected since 15:31:13"
        bold = self.font()
        bold.setBold(True)
        least = QFontMetrics(bold).horizontalAdvance(COLUMNS[COL_HOST]) + 40
        width = max(least, min(cap, longest))
        if width != self._widths.get(COL_HOST):
            self._widths[COL_HOST] = width
            self._fitting = True
            try:
                self.setColumnWidth(COL_HOST, width)
            finally:
                self._fitting = False
            self._fit_columns()

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

    def selected_details(self) -> tuple[int, str] | None:
        """(pid, host) of the selected process when it has details (an agent, or a
        model server)."""
        rows = self.selectionModel().selectedRows()
        if not rows or (rows[0].data(AGENT_ROLE) is None and rows[0].data(SERVER_ROLE) is None):
            return None
        return rows[0].data(KEY_ROLE)[1][0], rows[0].data(HOST_ROLE) or ""

    def _on_double_clicked(self, index) -> None:
        key = index.data(KEY_ROLE)
        if not key or not isinstance(key[1], tuple):
            return  # an unattributed row
        pid, host = key[1][0], index.data(HOST_ROLE) or ""
        if index.data(AGENT_ROLE) is not None or index.data(SERVER_ROLE) is not None \
                or (host, pid) in self._install_commands:
            self.details_requested.emit(pid, host)

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
