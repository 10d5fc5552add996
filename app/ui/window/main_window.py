"""The main window: GPU panels above the process table, or the no-driver page.

Data flow: the sampler calls :meth:`MainWindow.on_snapshot` for every tick; it
appends to the history and updates text (cheap).  Plots are redrawn only by
:meth:`MainWindow.refresh` on :attr:`MainWindow.display_timer` (250 ms), and
only when a snapshot arrived since the previous redraw.
"""

from __future__ import annotations

import functools
import time
from collections import deque
from collections.abc import Hashable

from PySide6.QtCore import QEvent, QSize, Qt, QTimer, Signal, Slot
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMainWindow,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.core.agents.events import MarkerRing
from app.core.control.records import CacheAction, ModelAction
from app.core.monitor.history import History
from app.core.monitor.hosts import each_host, every_gpu, split_id
from app.core.monitor.plot_data import build_plot_data
from app.core.monitor.samples import Snapshot
from app.ui.agents.activity import ActivityLog
from app.ui.agents.agent_views import ProcessDetailView
from app.ui.estimate.fit_windows import FitDialogs
from app.ui.gpu.panel import GpuPanel
from app.ui.settings.values import UiSettings
from app.ui.shell.controller import ControllerAdapter
from app.ui.shell.notifier import AlertBanner
from app.ui.style import palette as pal
from app.ui.style.text import plain_label
from app.ui.window.action_views import ActionViews
from app.ui.window.activity_views import ActivityViews
from app.ui.window.gpu_area import GpuArea
from app.ui.window.gpu_feed import feed_agents, feed_gpu_area
from app.ui.window.local_problem import LocalProblemBar
from app.ui.window.no_driver import NoDriverView
from app.ui.window.process_table import ProcessTable
from app.ui.window.status_text import StatusText
from app.ui.window.texts import (
    folder_notice_title,
    median_period,
    reaches,
    span_text,
    status_texts,
    summary_texts,
)
from app.ui.window.top_bar import APP_TITLE, SPANS, TopBar
from app.ui.window.unseen import UnseenViews


class MainWindow(ActionViews, ActivityViews, FitDialogs, UnseenViews, QMainWindow):
    demo_requested = Signal()
    retry_requested = Signal()
    settings_requested = Signal()
    #: The "Hosts…" button: the dialog that adds and removes remote hosts.
    hosts_requested = Signal()
    #: The hosts given with ``--host`` (set by the application; shown, not saved).
    cli_hosts: tuple = ()

    def __init__(self, history: History, span_s: float = 600.0, parent: QWidget | None = None,
                 settings: UiSettings | None = None,
                 controller: ControllerAdapter | None = None) -> None:
        super().__init__(parent)
        self.history = history
        #: Every user-adjustable value (auto-unload policy, limits): one place to persist.
        self.settings = settings or UiSettings()
        self.span_s = float(span_s)
        self._latest: Snapshot | None = None
        self._dirty = False  # a snapshot arrived since the last plot refresh
        self._selection: tuple[str, Hashable] | None = None
        self._arrivals: deque[float] = deque(maxlen=21)  # snapshot monotonic times
        self._drawn_at: float | None = None  # snapshot monotonic time of the last redraw
        self._drawn_wall = 0.0  # time.monotonic() of the last redraw
        #: Number of plot redraws done by :meth:`refresh` (diagnostics and tests).
        self.plot_refreshes = 0
        self.details: ProcessDetailView | None = None  # made on first use
        #: The last finished or running free / gc (its summary is the status bar's text).
        self.last_action: CacheAction | None = None
        #: Model events per GPU, for the graphs' markers (they arrive with the snapshots).
        self.markers = MarkerRing(per_gpu=self.settings.markers_per_gpu)
        #: Unloads the policy decided that have not finished: (pid, model) -> decision.
        self._policy_pending: dict[tuple[int, str], object] = {}
        self._policy_actions: dict[tuple[int, str, int], ModelAction] = {}
        self._decisions_of: object = None  # the PolicyRunner they came from
        self.policy: object = None  # set_policy: where the controller finds the runner
        #: One colour per process, window-wide: its curve, legend swatch and table row.
        self.process_colors = pal.ProcessColors()

        self.setWindowTitle(APP_TITLE)
        self.resize(1280, 860)

        central = QWidget(self)
        central_lay = QVBoxLayout(central)
        central_lay.setContentsMargins(0, 0, 0, 0)
        central_lay.setSpacing(0)
        # Banners above the content, each taking the room its text needs (never
        # covering a row): alerts no tray or notification server takes, one-time
        # hints, folders refused as not private.
        banners = QVBoxLayout()
        banners.setContentsMargins(16, 0, 16, 0)
        banners.setSpacing(0)
        self.alert_banner = AlertBanner(central)
        self.hint_banner = AlertBanner(central)
        self.folder_banner = AlertBanner(central)
        self.folder_banner.free_button.hide()
        for banner in (self.folder_banner, self.alert_banner, self.hint_banner):
            banners.addWidget(banner)
        central_lay.addLayout(banners)
        self.stack = QStackedWidget(central)
        central_lay.addWidget(self.stack, 1)
        self.setCentralWidget(central)

        # -- monitor page -------------------------------------------------------------
        self.monitor_page = QWidget(self.stack)
        page = QVBoxLayout(self.monitor_page)
        page.setContentsMargins(16, 12, 16, 8)
        page.setSpacing(10)

        self.top_bar = top = TopBar(self.settings.auto_unload, self.monitor_page)
        self.title_label, self.summary_label = top.title_label, top.summary_label
        self.span_combo, self.auto_unload = top.span_combo, top.auto_unload
        self.settings_button, self.hosts_button = top.settings_button, top.hosts_button
        self.auto_unload.settings_changed.connect(self.set_auto_unload)
        self.settings_button.clicked.connect(self.settings_requested)
        self.hosts_button.clicked.connect(self.hosts_requested)
        page.addWidget(top)
        # This machine's problem in one line while remote hosts' GPUs fill the area.
        self.local_problem = LocalProblemBar(self.monitor_page)
        self.local_problem.demo_requested.connect(self.demo_requested)
        self.local_problem.retry_requested.connect(self.retry_requested)
        page.addWidget(self.local_problem)

        self.splitter = QSplitter(Qt.Orientation.Vertical, self.monitor_page)
        self.splitter.setChildrenCollapsible(False)
        self.splitter.setHandleWidth(10)

        self.gpu_area = GpuArea(self._make_panel, self.splitter)
        self.gpu_area.scroll.verticalScrollBar().valueChanged.connect(self._refresh_newly_visible)
        self.gpu_area.gpu_selected.connect(lambda _did: self._refresh_newly_visible())
        self.gpu_area.arrangement_changed.connect(
            lambda _a: QTimer.singleShot(0, self._refresh_newly_visible))

        table_box = QWidget(self.splitter)
        tlay = QVBoxLayout(table_box)
        tlay.setContentsMargins(0, 0, 0, 0)
        tlay.setSpacing(6)
        thead = QHBoxLayout()
        table_title = QLabel("Processes", table_box)
        table_title.setObjectName("sectionTitle")
        hf = table_title.font()
        hf.setBold(True)
        hf.setPointSizeF(hf.pointSizeF() * 1.1)
        table_title.setFont(hf)
        self.process_count_label = QLabel("", table_box)
        self.process_count_label.setObjectName("secondary")
        self.filter_edit = QLineEdit(table_box)
        self.filter_edit.setObjectName("processFilter")
        self.filter_edit.setPlaceholderText("Filter processes…")
        self.filter_edit.setClearButtonEnabled(True)
        self.filter_edit.setMaximumWidth(260)
        self.details_button = QPushButton("Details…", table_box)
        self.details_button.setObjectName("detailsButton")
        self.details_button.setEnabled(False)
        self.details_button.setToolTip("Select a process with a VRAM Steward agent or of a "
                                       "model server to see its models (or double-click its "
                                       "row)")
        self.details_button.clicked.connect(self._on_details_button)
        self.details_button.setVisible(False)  # shown once agents report
        thead.addWidget(table_title)
        thead.addWidget(self.process_count_label, 1)
        thead.addWidget(self.details_button)
        thead.addWidget(self.filter_edit)
        tlay.addLayout(thead)
        self.table = ProcessTable(table_box)
        tlay.addWidget(self.table, 1)
        self.filter_edit.textChanged.connect(self.table.proxy.setFilterFixedString)

        # Processes | Activity (model events and auto-unload decisions).
        self.lower_tabs = QTabWidget(self.splitter)
        self.lower_tabs.setObjectName("lowerTabs")
        self.lower_tabs.setDocumentMode(True)
        self.activity = ActivityLog(self.lower_tabs, limit=self.settings.activity_rows)
        self.lower_tabs.addTab(table_box, "Processes")
        self.lower_tabs.addTab(self.activity, "Activity")
        self._make_doctor()  # the third tab: diagnoses, fixes and OOM reports
        self.doctor.fit_requested.connect(lambda: self.open_fit_dialog())
        self.lower_tabs.currentChanged.connect(self._on_tab_changed)
        self.lower_tabs.currentChanged.connect(lambda _i: self._catch_up())
        self._unseen_activity = 0
        table_title.setVisible(False)  # the tab says it
        self.splitter.addWidget(self.gpu_area)
        self.splitter.addWidget(self.lower_tabs)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 2)
        self.splitter.setSizes([600, 260])
        page.addWidget(self.splitter, 1)

        # -- no-driver page -----------------------------------------------------------
        self.no_driver_view = NoDriverView(self.stack)
        self.no_driver_view.demo_requested.connect(self.demo_requested)
        self.no_driver_view.retry_requested.connect(self.retry_requested)

        self.stack.addWidget(self.monitor_page)
        self.stack.addWidget(self.no_driver_view)

        # -- status bar -------------------------------------------------------------------
        bar = self.statusBar()
        bar.setSizeGripEnabled(True)
        self.source_label = QLabel("No source yet", self)
        self.period_label = QLabel("", self)
        self.cost_label = QLabel("", self)
        self.problem_label = QLabel("", self)
        self.action_label = StatusText(self)
        self.action_label.setObjectName("actionStatus")
        for w in (self.source_label, self.problem_label, self.action_label):
            plain_label(w)  # they name hosts, processes and models, and quote errors
        for w in (self.period_label, self.cost_label):
            w.setObjectName("secondary")
        bar.addWidget(self.source_label)
        bar.addWidget(self.problem_label, 0)
        bar.addWidget(self.action_label, 1)
        bar.addPermanentWidget(self.period_label)
        bar.addPermanentWidget(self.cost_label)

        self.span_combo.currentIndexChanged.connect(self._on_span_combo)
        self.table.process_selected.connect(self._on_process_selected)
        self.table.details_requested.connect(self.open_details)
        self.table.request.connect(self.submit)  # a model server's Unload, from a row's menu
        self._select_span_in_combo(self.span_s)

        self.display_timer = QTimer(self)
        self.display_timer.setInterval(250)
        self.display_timer.timeout.connect(self.refresh)
        self.display_timer.start()

        self._apply_style()
        #: Where requests go (made by the GUI entry point; without one, agent actions
        #: are unavailable: figures are shown, action buttons stay disabled).
        self.set_controller(controller or ControllerAdapter(parent=self))

    # -- public API --------------------------------------------------------------------
    @property
    def panels(self) -> dict[str, GpuPanel]:
        return dict(self._panels)

    @property
    def _panels(self) -> dict[str, GpuPanel]:
        return self.gpu_area.panels

    @property
    def latest(self) -> Snapshot | None:
        return self._latest

    def show_notice(self, text: str) -> None:
        """A one-line notice of start-up (settings read with defaults, the history
        store's one message) in the status bar, until the next action's result:
        beside the status bar's own labels, never painted over them."""
        self._status(text)

    def show_folder_notices(self, lines: list[str]) -> None:
        """The folders refused as not private, one line each (another user's
        runtime dir, an unsafe state dir): a banner that stays until dismissed,
        or until none is refused any more."""
        if not lines:
            self.folder_banner.retract()
            return
        self.folder_banner.show_message(folder_notice_title(len(lines)), "\n".join(lines),
                                        kind="warning")

    @Slot(object)
    def on_snapshot(self, snapshot: Snapshot) -> None:
        """Record a sampler tick and update every text widget (plots wait for :meth:`refresh`).
        While nobody sees the window (:meth:`unseen`) only what arrives once is taken:
        the views catch up when it is shown (app.ui.window.unseen)."""
        self.history.add(snapshot)
        self._latest = snapshot
        self._dirty = True
        if reaches(snapshot):
            self._arrivals.append(snapshot.monotonic)
        self._behind = self.unseen()
        if not self._behind:
            self._show_views(snapshot)
        if snapshot.error and not reaches(snapshot):
            self._take_events(snapshot)  # the last ones the agents or the policy sent
            return
        self._measure(snapshot)  # the controller measures finished actions
        self._take_events(snapshot)
        self._show_measured_models()
        self._on_diagnoses(snapshot)
        if self.details is not None and self.details.isVisible():  # a window of its own
            self._update_details(snapshot)  # with its host's busy set

    def _show_views(self, snapshot: Snapshot) -> None:
        """The snapshot's state in the status bar, the page, the GPUs and the table."""
        self._update_status(snapshot)
        if snapshot.error and not reaches(snapshot):
            self.no_driver_view.set_reason(snapshot.error)
            self.stack.setCurrentWidget(self.no_driver_view)
            return
        # Remote hosts' GPUs and this machine's agents fill the page; the driver's
        # problem is one line above them.
        self.local_problem.show_problem(None if snapshot.gpus else snapshot.error)
        self.stack.setCurrentWidget(self.monitor_page)
        # Only agents (no driver, no hosts): no GPU to draw, the table takes the room.
        self.gpu_area.setVisible(bool(snapshot.gpus or snapshot.hosts))

        agents = snapshot.agents
        feed_gpu_area(self.gpu_area, snapshot, self.controller)
        self._table_behind = self.table_unseen()  # behind another tab: taken when chosen
        if not self._table_behind:
            self.table.update_snapshot(snapshot)
        self._update_summary(snapshot)
        if (agents or snapshot.servers) and self.auto_unload.isHidden():
            self.auto_unload.setVisible(True)  # this machine's policy: its agents only
        if self.details_button.isHidden() and any(
                s.agents or s.servers for _, s in each_host(snapshot)):
            self.details_button.setVisible(True)
        self._update_details_button()

    def _take_events(self, snapshot: Snapshot) -> None:
        """Model events and policy decisions, each handed out once: shown and logged."""
        if snapshot.model_events:
            self._on_model_events(snapshot.model_events)
        for update in snapshot.policy_decisions:
            self._on_policy_decision(update)

    @Slot()
    def refresh(self, force: bool = False) -> None:
        """Redraw the plots from history, if a snapshot arrived since the last redraw."""
        if not (self._dirty or force) or self.unseen():
            return  # an unseen window stays dirty: drawn when shown
        if not force and self._redraw_too_soon():
            return  # stays dirty: drawn by a later tick
        self._dirty = False
        self._drawn_wall = time.monotonic()
        if self._latest is not None:
            self._drawn_at = self._latest.monotonic
        self.plot_refreshes += 1
        for did, panel in self._panels.items():
            if self.gpu_area.on_screen(panel):
                self._refresh_panel(did, panel)
            else:
                panel.plot_dirty = True  # drawn when scrolled or selected into view
        self.gpu_area.refresh_tiles(self.history, self.span_s)

    def _redraw_too_soon(self) -> bool:
        """At long spans one pixel holds many samples: redraw about once per pixel of time."""
        if self._latest is None or self._drawn_at is None or not self._panels:
            return False
        width = next(iter(self._panels.values())).plot.getPlotItem().getViewBox().width()
        per_pixel = self.span_s / max(width, 200.0)
        return (self._latest.monotonic - self._drawn_at < per_pixel
                and time.monotonic() - self._drawn_wall < per_pixel)

    def set_span(self, seconds: float) -> None:
        """Show the last ``seconds`` of history in every plot."""
        seconds = float(seconds)
        self.span_s = seconds
        self._select_span_in_combo(seconds)
        for panel in self._panels.values():
            panel.set_span(seconds)
        self.refresh(force=True)

    # -- internals -----------------------------------------------------------------------
    def _refresh_panel(self, did: str, panel: GpuPanel) -> None:
        version = self.markers.versions.get(did)
        if version is not None:
            panel.set_markers(self.markers.markers.get(did, ()), version)
        data = build_plot_data(self.history, did, self.span_s, panel.plot_width_px(),
                               panel.plot_inputs())
        panel.set_plot_data(data, self.span_s,
                            self._latest.timestamp if self._latest is not None else None)
        self.table.set_colors(self.process_colors.drawn_colors())

    def _refresh_newly_visible(self) -> None:
        for did, panel in self._panels.items():
            if panel.plot_dirty and self.gpu_area.on_screen(panel):
                self._refresh_panel(did, panel)

    def _select_span_in_combo(self, seconds: float) -> None:
        idx = self.span_combo.findData(seconds)
        if idx < 0:
            self.span_combo.addItem(span_text(seconds), seconds)
            idx = self.span_combo.count() - 1
        if idx != self.span_combo.currentIndex():
            self.span_combo.blockSignals(True)
            self.span_combo.setCurrentIndex(idx)
            self.span_combo.blockSignals(False)

    def _on_span_combo(self, index: int) -> None:
        seconds = self.span_combo.itemData(index)
        if seconds is not None:
            self.set_span(float(seconds))

    def _on_process_selected(self, display_id: str | None, key: Hashable | None) -> None:
        self._selection = None if display_id is None else (display_id, key)
        self._update_details_button()
        for did, panel in self._panels.items():
            wanted = key if did == display_id else None
            if panel.highlighted_key != wanted:
                panel.highlighted_key = wanted
                # Fetch again: the view held only the curves shown until now.
                self._refresh_panel(did, panel)
        if display_id is not None:
            self.gpu_area.select_gpu(display_id)

    def open_details(self, pid: int, host: str = "") -> ProcessDetailView:
        view = super().open_details(pid, host)
        view.record_view.set_controller(self.controller)  # its recordings' updates
        return view

    def _open_panel_details(self, host: str, pid: int) -> None:
        self.open_details(pid, host)

    def _make_panel(self, did: str) -> GpuPanel:
        panel = GpuPanel(did, self.gpu_area.panels_host, colors=self.process_colors)
        panel.set_span(self.span_s)
        if self._selection and self._selection[0] == did:
            panel.highlight(self._selection[1])
        panel.agent_section.free_all_requested.connect(functools.partial(self.free_all_caches, did))
        panel.fit_requested.connect(self.open_fit_dialog)  # "Will it fit on this GPU?…"
        # A panel's processes are its GPU's host's: their pids mean nothing elsewhere.
        panel.agent_section.details_requested.connect(
            functools.partial(self._open_panel_details, split_id(did)[0]))
        gpu = next((g for g in every_gpu(self._latest) if g.display_id == did), None)
        if gpu is not None:
            feed_agents(panel, gpu, self._latest, self.controller)
        return panel

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        QTimer.singleShot(0, self._refresh_newly_visible)

    def showEvent(self, event) -> None:  # noqa: N802
        super().showEvent(event)
        QTimer.singleShot(0, self._catch_up)
        QTimer.singleShot(0, self._refresh_newly_visible)

    def _update_status(self, snapshot: Snapshot) -> None:
        demo = snapshot.source == "demo"
        self.setWindowTitle(f"{APP_TITLE} — demo" if demo else APP_TITLE)
        period = median_period(self._arrivals, self.history.config.period_s)
        texts = status_texts(snapshot, period)
        for label, text in zip((self.source_label, self.period_label, self.cost_label,
                                self.problem_label), texts, strict=True):
            label.setText(text)

    def _update_summary(self, snapshot: Snapshot) -> None:
        summary, count = summary_texts(snapshot)
        self.top_bar.set_summary(summary)
        self.process_count_label.setText(count)

    def changeEvent(self, event) -> None:  # noqa: N802
        if event.type() == QEvent.Type.PaletteChange:
            self._apply_style()
        elif event.type() == QEvent.Type.WindowStateChange:
            QTimer.singleShot(0, self._catch_up)  # no longer minimised: the views catch up
        super().changeEvent(event)

    def _apply_style(self) -> None:
        border = pal.hex_color(pal.faint(self.palette()))
        self.setStyleSheet(
            f"QFrame#gpuPanel {{ background: palette(base); border: 1px solid {border};"
            " border-radius: 10px; }"
            "QScrollArea#gpuScroll, QWidget#panelsHost, QScrollArea#tileScroll,"
            " QWidget#tilesHost { background: transparent; }"
            + pal.view_rules(self.palette(), "processTable"))

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(1280, 860)


__all__ = ["MainWindow", "SPANS", "APP_TITLE"]
