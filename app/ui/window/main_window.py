"""The main window: GPU panels above the process table, or the no-driver page.

Data flow: the sampler calls :meth:`MainWindow.on_snapshot` for every tick; it
appends to the history and updates text (cheap).  Plots are redrawn only by
:meth:`MainWindow.refresh` on :attr:`MainWindow.display_timer` (250 ms), and
only when a snapshot arrived since the previous redraw.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections import deque
from collections.abc import Hashable

from PySide6.QtCore import QEvent, QPoint, QRect, QSize, Qt, QTimer, Signal, Slot
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMainWindow,
    QPushButton,
    QScrollArea,
    QSplitter,
    QStackedWidget,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.core.agents.events import DecisionUpdate, MarkerRing, ModelEventRecord
from app.core.monitor.history import History
from app.core.monitor.plot_data import build_plot_data
from app.core.monitor.samples import DeviceState, Snapshot
from app.ui.agents.activity import ActivityEntry, ActivityLog, reason_text
from app.ui.agents.agent_actions import FREE, AgentAction, AgentActionRunner
from app.ui.agents.agent_views import ProcessDetailView
from app.ui.agents.auto_unload import AutoUnloadControl, PolicyDriver
from app.ui.agents.model_actions import (
    IDLE_TTL,
    PIN,
    RELOAD,
    UNLOAD,
    ModelAction,
    ModelActionRunner,
    gpu_of_device,
    target_text,
)
from app.ui.gpu.panel import GpuPanel
from app.ui.settings.values import AutoUnloadSettings, UiSettings
from app.ui.shell.notifier import AlertBanner
from app.ui.style import palette as pal
from app.ui.style.format import fmt_bytes, fmt_fraction, fmt_gib
from app.ui.window.no_driver import NoDriverView
from app.ui.window.process_table import ProcessTable

APP_TITLE = "VRAM Steward"

SPANS: tuple[tuple[str, float], ...] = (
    ("1 min", 60.0),
    ("10 min", 600.0),
    ("1 h", 3600.0),
    ("24 h", 86400.0),
)

TWO_COLUMNS_FROM = 1700  # px of window width


class MainWindow(QMainWindow):
    demo_requested = Signal()
    retry_requested = Signal()
    settings_requested = Signal()

    def __init__(self, history: History, span_s: float = 600.0, parent: QWidget | None = None,
                 settings: UiSettings | None = None) -> None:
        super().__init__(parent)
        self.history = history
        #: Every user-adjustable value (auto-unload policy, limits): one place to persist.
        self.settings = settings or UiSettings()
        self.span_s = float(span_s)
        self._panels: dict[str, GpuPanel] = {}
        self._latest: Snapshot | None = None
        self._dirty = False  # a snapshot arrived since the last plot refresh
        self._selection: tuple[str, Hashable] | None = None
        self._arrivals: deque[float] = deque(maxlen=21)  # snapshot monotonic times
        self._columns = 1
        self._drawn_at: float | None = None  # snapshot monotonic time of the last redraw
        self._drawn_wall = 0.0  # time.monotonic() of the last redraw
        #: Number of plot redraws done by :meth:`refresh` (diagnostics and tests).
        self.plot_refreshes = 0
        #: Runs agent actions off the GUI thread; None: actions unavailable (see
        #: :meth:`set_action_runner`).
        self.runner: AgentActionRunner | None = None
        self.details: ProcessDetailView | None = None  # made on first use
        self._measuring: list[AgentAction] = []  # finished frees awaiting NVML's figures
        #: The last finished or running action's summary (status bar text).
        self.last_action: AgentAction | None = None
        #: Model actions (unload / reload / pin / idle timer), off the GUI thread.
        self.model_runner: ModelActionRunner | None = None
        self._own_model_runner = False
        self._model_last: dict[tuple[int, str | None], ModelAction] = {}
        self._model_measuring: list[ModelAction] = []
        #: Unload / reload events from the agents, deduplicated, with graph markers.
        #: Model events per GPU, for the graphs' markers (they arrive with the snapshots).
        self.markers = MarkerRing(per_gpu=self.settings.markers_per_gpu)
        #: The GUI's handle on the app's memory-pressure policy (set_policy).
        self.policy: PolicyDriver | None = None
        #: Unloads the policy decided that have not finished: (pid, model) -> decision.
        self._policy_pending: dict[tuple[int, str], object] = {}
        self._policy_actions: dict[tuple[int, str, int], ModelAction] = {}

        self.setWindowTitle(APP_TITLE)
        self.resize(1280, 860)

        central = QWidget(self)
        central_lay = QVBoxLayout(central)
        central_lay.setContentsMargins(0, 0, 0, 0)
        central_lay.setSpacing(0)
        # Banners: alerts when no tray or notification server takes them, one-time hints.
        self.alert_banner = AlertBanner(central)
        self.hint_banner = AlertBanner(central)
        central_lay.addWidget(self.alert_banner)
        central_lay.addWidget(self.hint_banner)
        self.stack = QStackedWidget(central)
        central_lay.addWidget(self.stack, 1)
        self.setCentralWidget(central)

        # -- monitor page -------------------------------------------------------------
        self.monitor_page = QWidget(self.stack)
        page = QVBoxLayout(self.monitor_page)
        page.setContentsMargins(16, 12, 16, 8)
        page.setSpacing(10)

        top = QHBoxLayout()
        top.setSpacing(12)
        self.title_label = QLabel(APP_TITLE, self.monitor_page)
        self.title_label.setObjectName("appTitle")
        tf = self.title_label.font()
        tf.setBold(True)
        tf.setPointSizeF(tf.pointSizeF() * 1.35)
        self.title_label.setFont(tf)
        self.summary_label = QLabel("", self.monitor_page)
        self.summary_label.setObjectName("secondary")
        range_label = QLabel("Time range", self.monitor_page)
        range_label.setObjectName("secondary")
        self.span_combo = QComboBox(self.monitor_page)
        self.span_combo.setObjectName("spanCombo")
        for text, seconds in SPANS:
            self.span_combo.addItem(text, seconds)
        self.span_combo.setToolTip("How much history the graphs show")
        range_label.setBuddy(self.span_combo)
        self.auto_unload = AutoUnloadControl(self.settings.auto_unload, self.monitor_page)
        self.auto_unload.settings_changed.connect(self.set_auto_unload)
        self.auto_unload.setVisible(False)  # shown once agents report
        top.addWidget(self.title_label)
        top.addWidget(self.summary_label, 1, Qt.AlignmentFlag.AlignBottom)
        top.addWidget(self.auto_unload)
        top.addSpacing(8)
        top.addWidget(range_label)
        top.addWidget(self.span_combo)
        self.settings_button = QPushButton("Settings…", self.monitor_page)
        self.settings_button.setObjectName("settingsButton")
        self.settings_button.setToolTip("Sampling, alerts, theme, start-up and auto-unload")
        self.settings_button.clicked.connect(self.settings_requested)
        top.addWidget(self.settings_button)
        page.addLayout(top)

        self.splitter = QSplitter(Qt.Orientation.Vertical, self.monitor_page)
        self.splitter.setChildrenCollapsible(False)
        self.splitter.setHandleWidth(10)

        self.scroll = QScrollArea(self.splitter)
        self.scroll.setObjectName("gpuScroll")
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.panels_host = QWidget(self.scroll)
        self.panels_host.setObjectName("panelsHost")
        self.panels_layout = QGridLayout(self.panels_host)
        self.panels_layout.setContentsMargins(0, 0, 4, 0)
        self.panels_layout.setSpacing(12)
        self.empty_label = QLabel("Waiting for the first sample…", self.panels_host)
        self.empty_label.setObjectName("secondary")
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.panels_layout.addWidget(self.empty_label, 0, 0)
        self.scroll.setWidget(self.panels_host)
        self.scroll.verticalScrollBar().valueChanged.connect(self._refresh_newly_visible)

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
        self.details_button.setToolTip("Select a process with a VRAM Steward agent to see its "
                                       "models and PyTorch memory (or double-click its row)")
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
        self.lower_tabs.currentChanged.connect(self._on_tab_changed)
        self._unseen_activity = 0
        table_title.setVisible(False)  # the tab says it
        self.splitter.addWidget(self.scroll)
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
        self.action_label = QLabel("", self)
        self.action_label.setObjectName("actionStatus")
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
        self._select_span_in_combo(self.span_s)

        self.display_timer = QTimer(self)
        self.display_timer.setInterval(250)
        self.display_timer.timeout.connect(self.refresh)
        self.display_timer.start()

        self._apply_style()

    # -- public API --------------------------------------------------------------------
    @property
    def panels(self) -> dict[str, GpuPanel]:
        return dict(self._panels)

    @property
    def latest(self) -> Snapshot | None:
        return self._latest

    @Slot(object)
    def on_snapshot(self, snapshot: Snapshot) -> None:
        """Record a sampler tick and update every text widget (plots wait for :meth:`refresh`)."""
        self.history.add(snapshot)
        self._latest = snapshot
        self._dirty = True
        if snapshot.gpus:
            self._arrivals.append(snapshot.monotonic)
        self._update_status(snapshot)

        if snapshot.error and not snapshot.gpus:
            self.no_driver_view.set_reason(snapshot.error)
            self.stack.setCurrentWidget(self.no_driver_view)
            return
        self.stack.setCurrentWidget(self.monitor_page)

        seen = set()
        added = removed = False
        agents = snapshot.agents
        busy = self.runner.busy_pids() if self.runner is not None else set()
        can_act = self.runner is not None
        for gpu in snapshot.gpus:
            seen.add(gpu.display_id)
            panel = self._panels.get(gpu.display_id)
            if panel is None:
                panel = GpuPanel(gpu.display_id, self.panels_host)
                panel.set_span(self.span_s)
                if self._selection and self._selection[0] == gpu.display_id:
                    panel.highlight(self._selection[1])
                panel.agent_section.free_all_requested.connect(
                    functools.partial(self.free_all_caches, gpu.display_id))
                panel.agent_section.details_requested.connect(self.open_details)
                self._panels[gpu.display_id] = panel
                added = True
            panel.update_sample(gpu)
            if agents or not panel.agent_section.isHidden():
                gpu_busy = bool(busy) and any(p.pid in busy for p in gpu.processes)
                panel.update_agents(gpu, agents, gpu_busy, can_act)
        for did in [d for d in self._panels if d not in seen]:
            panel = self._panels.pop(did)
            self.panels_layout.removeWidget(panel)
            panel.deleteLater()
            removed = True
        if added or removed:
            self._layout_panels()
        self.table.update_snapshot(snapshot)
        self._update_summary(snapshot)
        if agents and self.details_button.isHidden():
            self.details_button.setVisible(True)
            self.auto_unload.setVisible(True)
        self._update_details_button()
        if self._measuring:
            self._measure(snapshot)
        if snapshot.model_events:
            self._on_model_events(snapshot.model_events)
        if self.policy is not None:
            self.policy.feed(snapshot)  # settings follow a new runner
        for update in snapshot.policy_decisions:
            self._on_policy_decision(update)
        if self._model_measuring:
            self._measure_models(snapshot)
        if self.details is not None and self.details.isVisible():
            self._update_details(snapshot, self.details.pid in busy, can_act)

    @Slot()
    def refresh(self, force: bool = False) -> None:
        """Redraw the plots from history, if a snapshot arrived since the last redraw."""
        if not (self._dirty or force):
            return
        if not force and self._redraw_too_soon():
            return  # stays dirty: drawn by a later tick
        self._dirty = False
        self._drawn_wall = time.monotonic()
        if self._latest is not None:
            self._drawn_at = self._latest.monotonic
        self.plot_refreshes += 1
        for did, panel in self._panels.items():
            if self._panel_on_screen(panel):
                self._refresh_panel(did, panel)
            else:
                panel.plot_dirty = True  # drawn when scrolled into view

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

    # -- agent actions -------------------------------------------------------------------
    def set_action_runner(self, runner: AgentActionRunner | None) -> None:
        """Enable agent actions (Free cache, Run gc): they run through ``runner``.

        Without a runner (the default) the agent figures are shown but the action
        buttons stay disabled."""
        if runner is not None and (self.model_runner is None or self._own_model_runner):
            # Model actions go to the same agent directory, on their own pool.
            if self.model_runner is not None:
                self.model_runner.deleteLater()
            self.set_model_runner(ModelActionRunner(runner.directory, self,
                                                    settle_s=runner.settle_s))
            self._own_model_runner = True
        if self.runner is not None:
            for sig, slot in ((self.runner.action_started, self._on_action_update),
                              (self.runner.action_progress, self._on_action_progress),
                              (self.runner.action_finished, self._on_action_finished)):
                sig.disconnect(slot)
        self.runner = runner
        if runner is not None:
            runner.action_started.connect(self._on_action_update)
            runner.action_progress.connect(self._on_action_progress)
            runner.action_finished.connect(self._on_action_finished)
        self._refresh_agent_widgets()

    def free_cache(self, pid: int) -> AgentAction | None:
        """Empty the PyTorch cache of process ``pid`` (off the GUI thread)."""
        return self._free({pid: self._process_label(pid)})

    def free_all_caches(self, display_id: str) -> AgentAction | None:
        """Empty the cache of every agent process on GPU ``display_id``, one after another."""
        panel = self._panels.get(display_id)
        if panel is None:
            return None
        return self._free(dict(panel.agent_section.freeable), display_id)

    def free_every_cache(self) -> AgentAction | None:
        """Empty the cache of every process with an agent, on every GPU ("Free all caches")."""
        agents = self._latest.agents if self._latest is not None else None
        return self._free({p: self._process_label(p) for p in sorted(agents or ())})

    def _free(self, labels: dict[int, str], display_id: str | None = None
              ) -> AgentAction | None:
        """Free the caches of the processes in ``labels`` (pid -> label) that no action
        is busy with already; None when there is nothing to do."""
        if self.runner is None:
            return None
        busy = self.runner.busy_pids()
        pids = [pid for pid in labels if pid not in busy]
        if not pids:
            return None
        action = AgentAction.free(pids, self._latest, {p: labels[p] for p in pids},
                                  display_id=display_id)
        self.runner.submit(action)
        return action

    def unload_idle_models(self) -> list[ModelAction]:
        """Unload, now, every model the auto-unload rules call idle (whatever the GPU's
        level): models idle at least the policy's minimum, not pinned, not training."""
        actions: list[ModelAction] = []
        for pid, model, name, device, size in idle_models(self._latest,
                                                           self.settings.auto_unload):
            action = self.unload_model(pid, model, reason="idle (from the tray)", name=name,
                                       device=device, size=size)
            if action is not None:
                actions.append(action)
        return actions

    def add_activity(self, entry: ActivityEntry) -> None:
        self._add_activity(entry)

    def run_gc(self, pid: int) -> AgentAction | None:
        if self.runner is None or pid in self.runner.busy_pids():
            return None
        action = AgentAction.gc(pid, self._process_label(pid))
        self.runner.submit(action)
        return action

    def open_details(self, pid: int) -> ProcessDetailView:
        """Show the detail view of process ``pid`` (non-modal; follows snapshots)."""
        if self.details is None:
            self.details = ProcessDetailView(self)
            self.details.free_requested.connect(self.free_cache)
            self.details.gc_requested.connect(self.run_gc)
            self.details.model_action_requested.connect(self._on_model_request)
            self.details.idle_unload_requested.connect(self.set_idle_unload)
        view = self.details
        view.set_process(pid)
        if self._latest is not None:
            busy = self.runner is not None and pid in self.runner.busy_pids()
            self._update_details(self._latest, busy, self.runner is not None)
        if self.last_action is not None and pid in self.last_action.pids:
            self._show_in_details(self.last_action)
        view.show()
        view.raise_()
        return view

    def _process_label(self, pid: int) -> str:
        from app.core.monitor.naming import process_label

        if self._latest is not None:
            for gpu in self._latest.gpus:
                for p in gpu.processes:
                    if p.pid == pid and (p.name or p.command):
                        return process_label(p)
        return f"pid {pid}"

    def _on_details_button(self) -> None:
        agent = self.table.selected_agent()
        if agent is not None:
            self.open_details(agent.pid)

    def _update_details_button(self) -> None:
        enabled = self.table.selected_agent() is not None
        if self.details_button.isEnabled() != enabled:
            self.details_button.setEnabled(enabled)

    def _on_action_progress(self, action: AgentAction, result: object) -> None:
        self._on_action_update(action)

    def _on_action_update(self, action: AgentAction) -> None:
        self.last_action = action
        self._show_action(action)
        self._refresh_agent_widgets()

    def _on_action_finished(self, action: AgentAction) -> None:
        if action.kind == FREE and any(r.ok for r in action.results.values()):
            self._measuring.append(action)
        self._on_action_update(action)

    def _measure(self, snapshot: Snapshot) -> None:
        settle = self.runner.settle_s if self.runner is not None else 0.5
        for action in list(self._measuring):
            if action.measure(snapshot, settle_s=settle):
                self._measuring.remove(action)
                self._show_action(action)

    def _show_action(self, action: AgentAction) -> None:
        """Put an action's outcome in the status bar, its GPU panel and the detail view."""
        text = action.summary()
        details = "\n".join(action.details())
        if action.kind == FREE:
            failed = action.done and not any(r.ok for r in action.results.values())
        else:
            failed = action.done and bool(action.errors)
        self.action_label.setText(text)
        self.action_label.setToolTip(details)
        crit = pal.LEVEL_COLORS[pal.LEVEL_CRITICAL]
        self.action_label.setStyleSheet(f"color: {crit};" if failed else "")
        if action.display_id is not None and action.display_id in self._panels:
            self._panels[action.display_id].agent_section.set_result(
                _panel_text(action), f"{text}\n{details}")
        self._show_in_details(action)

    def _show_in_details(self, action: AgentAction) -> None:
        view = self.details
        if view is None or view.pid not in action.pids:
            return
        if len(action.pids) == 1:
            text = action.summary()
        else:
            line = next((l for l in action.details()
                         if l.startswith(action.label(view.pid) + ":")), "")
            text = (f"{line} — part of “Free all caches” on GPU {action.display_id}"
                     if line else action.summary())
        r = action.results.get(view.pid)
        error = (r is not None and not r.ok) or (action.kind != FREE and action.done
                                                and bool(action.errors))
        view.show_result(text, "\n".join(action.details()), error=error)

    def _refresh_agent_widgets(self) -> None:
        """Button states right away (not only at the next snapshot)."""
        snap = self._latest
        if snap is None:
            return
        busy = self.runner.busy_pids() if self.runner is not None else set()
        can_act = self.runner is not None
        for gpu in snap.gpus:
            panel = self._panels.get(gpu.display_id)
            if panel is not None and snap.agents:
                panel.update_agents(gpu, snap.agents,
                                    any(p.pid in busy for p in gpu.processes), can_act)
        if self.details is not None and self.details.isVisible():
            self._update_details(snap, self.details.pid in busy, can_act)

    # -- models: unload / reload / pin, idle timer, pressure policy, events ------------------
    def set_model_runner(self, runner: ModelActionRunner | None) -> None:
        """Run model actions through ``runner`` (made from the action runner by default)."""
        if self.model_runner is not None:
            self.model_runner.action_started.disconnect(self._on_model_started)
            self.model_runner.action_finished.disconnect(self._on_model_finished)
        self.model_runner = runner
        self._own_model_runner = False
        if runner is not None:
            runner.action_started.connect(self._on_model_started)
            runner.action_finished.connect(self._on_model_finished)

    def set_policy(self, driver: PolicyDriver | None) -> None:
        """The app's memory-pressure policy: the Auto-unload control edits its settings,
        its decisions are shown (status bar, Activity log, the models' rows)."""
        self.policy = driver
        if driver is not None:
            driver.apply(self.settings.auto_unload)
        self.auto_unload.set_available(driver is not None and driver.available,
                                       (driver.error or "") if driver is not None else "")

    def set_auto_unload(self, settings: AutoUnloadSettings) -> None:
        """New auto-unload settings (from the control, or restored from storage)."""
        self.settings.auto_unload = settings.normalised()
        if self.auto_unload.settings() != self.settings.auto_unload:
            self.auto_unload.set_settings(self.settings.auto_unload)
        if self.policy is not None:
            self.policy.apply(self.settings.auto_unload)
        self._add_activity(ActivityEntry(
            time.time(), "", "", "Auto-unload " + ("on" if settings.enabled else "off"),
            self.settings.auto_unload.summary().removeprefix("Auto-unload: ")
            if settings.enabled else "", kind="setting",
            detail=self.auto_unload.toolTip().split("\n\nClick")[0]), count=False, coalesce=True)

    def unload_model(self, pid: int, model: str, to: str = "cpu", force: bool = False,
                     reason: str = "manual", name: str | None = None,
                     device: str | None = None, size: int | None = None) -> ModelAction | None:
        """Unload ``model`` of process ``pid`` (off the GUI thread)."""
        return self._submit_model(ModelAction(UNLOAD, pid, model, name or model, to=to,
                                              force=force, reason=reason, size=size), device)

    def reload_model(self, pid: int, model: str, name: str | None = None,
                     device: str | None = None) -> ModelAction | None:
        return self._submit_model(ModelAction(RELOAD, pid, model, name or model), device)

    def pin_model(self, pid: int, model: str, pinned: bool, name: str | None = None
                  ) -> ModelAction | None:
        return self._submit_model(ModelAction(PIN, pid, model, name or model, pinned=pinned))

    def set_idle_unload(self, pid: int, seconds: float | None) -> ModelAction | None:
        """The idle timer of the agent in ``pid`` (None: off), off the GUI thread."""
        return self._submit_model(ModelAction(IDLE_TTL, pid, None, seconds=seconds))

    def _on_model_request(self, req: dict) -> None:
        kind = req.get("kind")
        pid, model = req["pid"], req["model"]
        if kind == UNLOAD:
            self.unload_model(pid, model, req.get("to") or "cpu", bool(req.get("force")),
                              name=req.get("name"), device=req.get("device"),
                              size=req.get("size"))
        elif kind == RELOAD:
            self.reload_model(pid, model, req.get("name"), req.get("device"))
        elif kind == PIN:
            self.pin_model(pid, model, bool(req.get("pinned")), req.get("name"))

    def _submit_model(self, action: ModelAction, device: str | None = None
                      ) -> ModelAction | None:
        runner = self.model_runner
        if runner is None:
            return None
        action.label = action.label or self._process_label(action.pid)
        snap = self._latest
        if action.kind in (UNLOAD, RELOAD) and snap is not None:
            report = snap.agents.get(action.pid)
            if device is None and report is not None:
                m = next((m for m in report.models if m.id == action.model), None)
                if m is not None:
                    device = m.home_device or m.device
                    if action.size is None and m.param_bytes is not None:
                        action.size = (m.param_bytes or 0) + (m.buffer_bytes or 0)
            action.display_id = gpu_of_device(snap, report, device, action.pid)
            from app.ui.agents.agent_actions import gpu_used, nvml_usage

            action.baseline = nvml_usage(snap, action.pid, action.display_id)
            action.gpu_before = gpu_used(snap, action.display_id)
        if not runner.submit(action):
            return None
        return action

    def _on_policy_decision(self, update: DecisionUpdate) -> None:
        """A pressure-policy decision, new or with its results."""
        d = update.decision
        from app.core.policies import pressure as pp

        did = next((g.display_id for g in (self._latest.gpus if self._latest else ())
                    if (d.gpu_uuid and g.uuid == d.gpu_uuid) or
                    (not d.gpu_uuid and g.index == d.gpu)), str(d.gpu))
        gpu = f"GPU {did}"
        for a in d.actions:
            if d.done:
                self._policy_pending.pop((a.pid, a.model), None)
            else:
                self._policy_pending[(a.pid, a.model)] = d
        if d.kind == pp.UNLOAD:
            names = ", ".join(f"{a.name} ({fmt_bytes(a.bytes)})" for a in d.actions)
            if not d.done:
                text = (f"Auto-unload: {gpu} at {fmt_fraction(d.fraction)} ≥ "
                        f"{fmt_fraction(self.settings.auto_unload.threshold)}: unloading {names}")
            else:
                ok = sum(1 for r in d.results if r.ok)
                failed = [r for r in d.results if not r.ok]
                text = (f"Auto-unload: {gpu}: unloaded {ok} of {len(d.actions)} "
                        f"({names}), released {fmt_bytes(d.bytes_released)}")
                if failed:
                    text += f"; {failed[0].model}: {failed[0].error or failed[0].code}"
            self._status(text, d.reason, error=d.done and not any(r.ok for r in d.results))
            for a in (d.actions if update.new else ()):  # (it may arrive already done)
                self._add_activity(ActivityEntry(
                    d.time, self._process_label(a.pid), a.name, "Decided: unload",
                    reason_text("pressure"), detail=f"{gpu}: {d.reason}", kind="decision"))
            if d.done:
                for r in d.results:
                    if not r.ok:
                        a = next((x for x in d.actions if x.model == r.model), None)
                        self._add_activity(ActivityEntry(
                            time.time(), self._process_label(r.pid), a.name if a else r.model,
                            "Refused: unload" if r.code == "refused" else "Unload failed",
                            reason_text("pressure"), detail=f"{r.error or r.code}",
                            error=True, kind="refusal"))
        elif d.kind == pp.NOTHING_ELIGIBLE:
            text = f"Auto-unload: {gpu} at {fmt_fraction(d.fraction)}, nothing eligible to unload"
            self._status(text, d.reason)
            self._add_activity(ActivityEntry(d.time, "", "", f"{gpu}: nothing to unload",
                                             reason_text("pressure"), detail=d.reason,
                                             kind="decision"), count=False, coalesce=True)
        else:  # deferred: the log only
            self._add_activity(ActivityEntry(d.time, "", "", f"{gpu}: deferred",
                                             reason_text("pressure"), detail=d.reason,
                                             kind="decision"), count=False, coalesce=True)
        if d.actions:
            self._refresh_agent_widgets()

    def _policy_action(self, d, pid: int, model: str) -> ModelAction:
        """A policy unload in flight, as the detail view shows a pending action."""
        key = (pid, model, d.seq)
        action = self._policy_actions.get(key)
        if action is None:
            a = next((x for x in d.actions if x.model == model), None)
            runner = self.policy.runner() if self.policy is not None else None
            to = getattr(getattr(runner, "config", None), "target", "cpu")
            action = ModelAction(UNLOAD, pid, model, a.name if a else model, to=to,
                                 reason="pressure", size=a.bytes if a else None,
                                 label=self._process_label(pid))
            if len(self._policy_actions) > 64:
                self._policy_actions.clear()
            self._policy_actions[key] = action
        return action

    def _on_model_started(self, action: ModelAction) -> None:
        if action.reason != "pressure":
            self._status(action.summary())
        self._refresh_agent_widgets()

    def _on_model_finished(self, action: ModelAction) -> None:
        key = action.key
        self._model_last[key] = action
        if len(self._model_last) > 256:
            self._model_last.pop(next(iter(self._model_last)))
        ev = action.event
        if ev is not None:
            # Shown when it arrives with a snapshot, as every model event is.
            directory = self.runner.directory() if self.runner is not None else None
            if directory is not None:
                directory.note_reply(action.pid, ev)
        if action.kind in (UNLOAD, RELOAD) and action.ok:
            self._model_measuring.append(action)
        elif not action.ok and action.kind != IDLE_TTL:
            kind = "refusal" if action.refused else "event"
            event = (f"Refused: {action.kind}" if action.refused
                     else f"{action.kind.capitalize()} failed")
            self._add_activity(ActivityEntry(time.time(), action.label, action.who(), event,
                                             reason_text(action.reason), detail=action.summary(),
                                             error=True, kind=kind))
        elif action.kind == IDLE_TTL:
            self._add_activity(ActivityEntry(time.time(), action.label, "", "Idle timer",
                                             action.summary(with_process=False),
                                             detail=action.summary(), error=not action.ok,
                                             kind="setting"), count=False)
        self._status(action.summary(), error=action.done and not action.ok)
        self._refresh_agent_widgets()

    def _measure_models(self, snapshot: Snapshot) -> None:
        settle = self.model_runner.settle_s if self.model_runner is not None else 0.5
        for action in list(self._model_measuring):
            if action.measure(snapshot, settle_s=settle):
                self._model_measuring.remove(action)
                if self._model_last.get(action.key) is action and action.reason != "pressure":
                    self._status(action.summary())

    def _on_model_events(self, records: tuple[ModelEventRecord, ...]) -> None:
        """New unload / reload events: the Activity log, markers, the status bar."""
        for rec in records:
            self.markers.add(rec)
            ev = rec.event
            label = self._process_label(rec.pid)
            if ev.action == "unload":
                what = f"Unloaded → {target_text(ev.target)}" if ev.ok else "Unload failed"
            else:
                what = "Reloaded" if ev.ok else "Reload failed"
            self._add_activity(ActivityEntry(
                rec.time, label, ev.name, what, reason_text(ev.reason),
                ev.bytes_released if ev.action == "unload" else None, ev.seconds,
                detail=f"{label}: {rec.text}" + (f" on GPU {rec.display_id}"
                                                  if rec.display_id else ""),
                error=not ev.ok))
            if ev.reason != "manual":
                self._status(f"{label}: {rec.text}", error=not ev.ok)
        # Markers: draw the changed panels at the next refresh.
        self._dirty = True

    def _add_activity(self, entry: ActivityEntry, count: bool = True,
                      coalesce: bool = False) -> None:
        self.activity.add(entry, coalesce)
        if count and self.lower_tabs.currentWidget() is not self.activity:
            self._unseen_activity += 1
            self.lower_tabs.setTabText(self.lower_tabs.indexOf(self.activity),
                                       f"Activity ({self._unseen_activity})")

    def _on_tab_changed(self, index: int) -> None:
        if self.lower_tabs.widget(index) is self.activity and self._unseen_activity:
            self._unseen_activity = 0
            self.lower_tabs.setTabText(index, "Activity")

    def _status(self, text: str, tooltip: str = "", error: bool = False) -> None:
        self.action_label.setText(text)
        self.action_label.setToolTip(tooltip or text)
        crit = pal.LEVEL_COLORS[pal.LEVEL_CRITICAL]
        self.action_label.setStyleSheet(f"color: {crit};" if error else "")

    def _update_details(self, snapshot: Snapshot, busy: bool, can_act: bool) -> None:
        view = self.details
        if view is None or view.pid is None:
            return
        pid = view.pid
        pending: dict[str, ModelAction] = {}
        idle_pending = False
        if self.model_runner is not None:
            for a in self.model_runner.running():
                if a.pid == pid:
                    if a.kind == IDLE_TTL:
                        idle_pending = True
                    elif a.model is not None:
                        pending[a.model] = a
        for (p, m), d in self._policy_pending.items():
            if p == pid and m not in pending:
                pending[m] = self._policy_action(d, p, m)
        last = {m: a for (p, m), a in self._model_last.items()
                if p == pid and m is not None}
        view.update_snapshot(snapshot, busy, can_act, pending, last, idle_pending)

    # -- internals -----------------------------------------------------------------------
    def _refresh_panel(self, did: str, panel: GpuPanel) -> None:
        version = self.markers.versions.get(did)
        if version is not None:
            panel.set_markers(self.markers.markers.get(did, ()), version)
        data = build_plot_data(self.history, did, self.span_s, panel.plot_width_px(),
                               panel.plot_inputs())
        panel.set_plot_data(data, self.span_s,
                            self._latest.timestamp if self._latest is not None else None)

    def _panel_on_screen(self, panel: GpuPanel) -> bool:
        """False only for panels scrolled out of sight in a shown window."""
        if not self.isVisible() or not panel.isVisible():
            return True  # not laid out yet (or no window): draw rather than risk a blank plot
        viewport = self.scroll.viewport()
        top_left = panel.mapTo(viewport, QPoint(0, 0))
        return QRect(top_left, panel.size()).intersects(viewport.rect())

    def _refresh_newly_visible(self) -> None:
        for did, panel in self._panels.items():
            if panel.plot_dirty and self._panel_on_screen(panel):
                self._refresh_panel(did, panel)

    def _select_span_in_combo(self, seconds: float) -> None:
        idx = self.span_combo.findData(seconds)
        if idx < 0:
            self.span_combo.addItem(_span_text(seconds), seconds)
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
        if display_id in self._panels and self.isVisible():
            self.scroll.ensureWidgetVisible(self._panels[display_id], 0, 0)

    def _layout_panels(self) -> None:
        lay = self.panels_layout
        while lay.count():
            lay.takeAt(0)
        self.empty_label.setVisible(not self._panels)
        if not self._panels:
            lay.addWidget(self.empty_label, 0, 0)
            return
        cols = 2 if self.width() >= TWO_COLUMNS_FROM and len(self._panels) > 1 else 1
        self._columns = cols
        ordered = sorted(self._panels.items(), key=lambda kv: _display_order(kv[0]))
        for i, (_, panel) in enumerate(ordered):
            lay.addWidget(panel, i // cols, i % cols)
        for c in range(2):
            lay.setColumnStretch(c, 1 if c < cols else 0)
        last_row = (len(ordered) - 1) // cols + 1
        for r in range(lay.rowCount()):
            lay.setRowStretch(r, 0)
        lay.setRowStretch(last_row, 1)  # panels keep their size; spare room goes below
        lay.activate()  # the scroll area must learn the new minimum height now

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        cols = 2 if self.width() >= TWO_COLUMNS_FROM and len(self._panels) > 1 else 1
        if cols != self._columns and self._panels:
            self._layout_panels()
        QTimer.singleShot(0, self._refresh_newly_visible)

    def showEvent(self, event) -> None:  # noqa: N802
        super().showEvent(event)
        QTimer.singleShot(0, self._refresh_newly_visible)

    def _update_status(self, snapshot: Snapshot) -> None:
        demo = snapshot.source == "demo"
        self.setWindowTitle(f"{APP_TITLE} — demo" if demo else APP_TITLE)
        if demo:
            source = "Demo (simulated GPUs)"
        elif snapshot.source == "nvml":
            source = ("NVML" if not snapshot.driver_version
                      else f"NVML, driver {snapshot.driver_version}")
        else:
            source = snapshot.source
        if snapshot.error and not snapshot.gpus:
            self.source_label.setText(f"{source}: unavailable")
            self.period_label.setText("")
            self.cost_label.setText("")
            self.problem_label.setText("")
            return
        self.source_label.setText(source)
        period = self._period_s()
        self.period_label.setText(f"Sampling every {period * 1000:.0f} ms")
        self.cost_label.setText(f"Last sample {snapshot.sample_cost * 1000:.1f} ms")
        if snapshot.error and snapshot.gpus:
            self.problem_label.setText(f"⚠ {snapshot.error}")
        else:
            self.problem_label.setText("")

    def _period_s(self) -> float:
        times = list(self._arrivals)
        gaps = [b - a for a, b in zip(times, times[1:]) if b > a]
        if gaps:
            return statistics.median(gaps)
        return self.history.config.period_s

    def _update_summary(self, snapshot: Snapshot) -> None:
        gpus = snapshot.gpus
        nproc = sum(len(g.processes) for g in gpus)
        ok = [g for g in gpus if g.state == DeviceState.OK]
        used = [g.memory_used for g in ok if g.memory_used is not None]
        total = [g.memory_total for g in ok if g.memory_total is not None]
        parts = [f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''}",
                 f"{nproc} process{'es' if nproc != 1 else ''}"]
        if used and total:
            parts.append(f"{fmt_gib(sum(used))} of {fmt_gib(sum(total))} in use")
        bad = len(gpus) - len(ok)
        if bad:
            parts.append(f"{bad} unavailable")
        self.summary_label.setText("  ·  ".join(parts))
        self.process_count_label.setText(f"{nproc} on {len(gpus)} GPU{'s' if len(gpus) != 1 else ''}")

    def changeEvent(self, event) -> None:  # noqa: N802
        if event.type() == QEvent.Type.PaletteChange:
            self._apply_style()
        super().changeEvent(event)

    def _apply_style(self) -> None:
        border = pal.hex_color(pal.faint(self.palette()))
        self.setStyleSheet(
            f"QFrame#gpuPanel {{ background: palette(base); border: 1px solid {border};"
            " border-radius: 10px; }"
            "QScrollArea#gpuScroll, QWidget#panelsHost { background: transparent; }"
            + pal.view_rules(self.palette(), "processTable"))

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(1280, 860)


def idle_models(snapshot: Snapshot | None, settings: AutoUnloadSettings
                ) -> list[tuple[int, str, str, str, int]]:
    """(pid, model id, name, device, bytes) of every model the auto-unload rules would
    unload now from any GPU, whatever the GPU's level."""
    if snapshot is None or not snapshot.agents:
        return []
    from app.core.policies.pressure import PressurePolicy, PressurePolicyConfig

    policy = PressurePolicy(PressurePolicyConfig(min_idle_s=settings.min_idle_s))
    out: list[tuple[int, str, str, str, int]] = []
    seen: set[tuple[int, str]] = set()
    for gpu in snapshot.gpus:
        eligible, _skipped = policy.candidates(snapshot, gpu)
        for a in eligible:
            if (a.pid, a.model) not in seen:
                seen.add((a.pid, a.model))
                out.append((a.pid, a.model, a.name, a.device, a.bytes))
    return out


def _panel_text(action: AgentAction) -> str:
    """The short result beside a panel's "Free all caches" button."""
    if not action.done:
        return "Freeing…"
    if not any(r.ok for r in action.results.values()):
        return "Free cache failed"
    text = f"Freed {fmt_bytes(action.freed)}"
    if not action.measured:
        return text + " · measuring…"
    if action.gpu_released is None:
        return text + " · NVML n/a"
    return text + f" · NVML shows {fmt_bytes(max(0, action.gpu_released))} released"


def _span_text(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def _display_order(display_id: str) -> tuple[int, str]:
    head, _, rest = display_id.partition("/")
    try:
        return (int(head), rest)
    except ValueError:
        return (1 << 30, display_id)


__all__ = ["MainWindow", "SPANS", "APP_TITLE"]
