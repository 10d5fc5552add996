"""The process detail view: what one process's agent reports (its VRAM
breakdown per GPU, its allocator figures and its models), the model server
holding it (:mod:`app.ui.agents.server_view`), and the actions on them.

Per snapshot these widgets only set text and bar values; rows are pooled and
created only when more are needed than ever before.  The model list lives in
:mod:`app.ui.agents.model_list`, the model actions in
:mod:`app.ui.agents.detail_models`; every action leaves as a typed request
through :attr:`ProcessDetailView.request`.  A model server's process without an
agent (Ollama, llama.cpp) shows its server alone: what only an agent knows is
hidden, not shown as n/a.

A process is (host, pid): a remote host's process is shown from that host's
snapshot, its title names the host, and every request names it too; while the
host is disconnected its last figures stay, with every action off and why.
"""

from __future__ import annotations

from collections.abc import Mapping

from PySide6.QtCore import QSortFilterProxyModel, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.agent.protocol import RELOAD_GRACE_S
from app.core.agents.types import AgentReport
from app.core.control.requests import CollectGarbage, FreeCache, Terminate
from app.core.diagnosis.agentless import install_commands
from app.core.monitor.hosts import split_id
from app.core.monitor.naming import process_label
from app.core.monitor.samples import Snapshot
from app.core.servers.types import holding
from app.core.units import NA, fmt_bytes
from app.ui.agents import detail_models as texts
from app.ui.agents.detail_facts import FACTS, fill_facts, stale_action, stale_notice, sum_known
from app.ui.agents.detail_models import ModelControls
from app.ui.agents.model_list import MODEL_SORT_ROLE, ModelListModel
from app.ui.agents.model_table import ModelTable
from app.ui.agents.record_view import RecordView
from app.ui.agents.server_view import ServerView
from app.ui.gpu.torch_memory import (
    BreakdownLegend,
    BreakdownRow,
    bar_total,
    breakdown_of,
    breakdown_tooltip,
    free_button_text,
)
from app.ui.settings.values import IDLE_TIMER_MAX_MIN, IDLE_TIMER_MIN_MIN
from app.ui.style import palette as pal
from app.ui.style.hosts import gpu_text
from app.ui.style.text import plain_label, plain_tip

GC_TIP = "Run Python's garbage collector in the process (gc.collect())"


def _box(parent: QWidget, outer: QVBoxLayout, stretch: int = 0) -> tuple[QWidget, QVBoxLayout]:
    """A section of the view in ``outer`` that hides as one."""
    box = QWidget(parent)
    lay = QVBoxLayout(box)
    lay.setContentsMargins(0, 0, 0, 0)
    lay.setSpacing(outer.spacing())
    outer.addWidget(box, stretch)
    return box, lay


class ProcessDetailView(ModelControls, QDialog):
    """Everything one agent reports about its process; non-modal, follows snapshots."""

    #: A typed request (app.core.control.requests): FreeCache, CollectGarbage, Unload,
    #: Reload, Pin, SetIdleUnload or Terminate (the window confirms it) of this process.
    request = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("processDetail")
        self.setWindowTitle("Process details")
        self.setModal(False)
        self.resize(1180, 640)
        self.pid: int | None = None
        self.host = ""  # the remote host of the process ("" this machine)
        self.report: AgentReport | None = None
        self._label = ""
        self._why_not = ""  # why every action is off (its host is not connected)

        outer = QVBoxLayout(self)
        outer.setContentsMargins(16, 14, 16, 12)
        outer.setSpacing(10)

        # The process's name, command, facts and errors are its owner's words, and
        # the host's notice its server's: shown as they are, never as HTML.
        self.title_label = plain_label(QLabel(self))
        self.title_label.setObjectName("detailTitle")
        tf = self.title_label.font()
        tf.setBold(True)
        tf.setPointSizeF(tf.pointSizeF() * 1.25)
        self.title_label.setFont(tf)
        self.command_label = plain_label(QLabel(self))
        self.command_label.setObjectName("secondary")
        self.command_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.command_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        outer.addWidget(self.title_label)
        outer.addWidget(self.command_label)
        self.host_notice = plain_label(QLabel(self))  # a disconnected host: since when, why
        self.host_notice.setObjectName("hostNotice")
        self.host_notice.setWordWrap(True)
        self.host_notice.setVisible(False)
        outer.addWidget(self.host_notice)

        # What only an agent knows; hidden for a model server without one.
        self.facts_box, facts_lay = _box(self, outer)
        facts = QGridLayout()
        facts.setHorizontalSpacing(10)
        facts.setVerticalSpacing(3)
        self.facts: dict[str, QLabel] = {}
        for col, names in enumerate(FACTS):
            for row, name in enumerate(names):
                cap = QLabel(name, self)
                cap.setObjectName("secondary")
                value = plain_label(QLabel(NA, self))
                value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
                facts.addWidget(cap, row, col * 2)
                facts.addWidget(value, row, col * 2 + 1)
                self.facts[name] = value
        facts.setColumnMinimumWidth(1, self.fontMetrics().horizontalAdvance("0" * 24))
        facts.setColumnStretch(4, 1)
        facts_lay.addLayout(facts)
        self.errors_label = plain_label(QLabel(self))
        self.errors_label.setWordWrap(True)
        self.errors_label.setVisible(False)
        facts_lay.addWidget(self.errors_label)

        line = QFrame(self)
        line.setFrameShape(QFrame.Shape.HLine)
        line.setObjectName("detailRule")
        outer.addWidget(line)

        self.breakdown_box, breakdown = _box(self, outer)
        bhead = QHBoxLayout()
        bt = QLabel("VRAM by GPU", self)
        btf = bt.font()
        btf.setBold(True)
        bt.setFont(btf)
        bhead.addWidget(bt)
        bhead.addSpacing(12)
        self.legend = BreakdownLegend(self)
        bhead.addWidget(self.legend)
        bhead.addStretch(1)
        breakdown.addLayout(bhead)
        self.gpu_rows_box = QVBoxLayout()
        self.gpu_rows_box.setSpacing(3)
        breakdown.addLayout(self.gpu_rows_box)
        self.gpu_rows: list[BreakdownRow] = []
        self.no_gpu_label = QLabel(texts.NO_GPU, self)
        self.no_gpu_label.setObjectName("secondary")
        breakdown.addWidget(self.no_gpu_label)
        # The model server holding the process (Ollama, ComfyUI, ...): its own models.
        self.server_view = ServerView(self)
        self.server_view.request.connect(self.request)
        outer.addWidget(self.server_view)

        self.models_box, models_lay = _box(self, outer, stretch=1)
        mhead = QHBoxLayout()
        mhead.setSpacing(8)
        mt = QLabel("Models", self)
        mt.setFont(btf)
        self.models_title = mt
        mhead.addWidget(mt)
        mhead.addStretch(1)
        # The process's own idle timer (the agent unloads idle models by itself).
        self.idle_box = QCheckBox("Unload idle models after", self)
        self.idle_box.setObjectName("idleUnloadBox")
        self.idle_spin = QSpinBox(self)
        self.idle_spin.setObjectName("idleUnloadMinutes")
        self.idle_spin.setRange(IDLE_TIMER_MIN_MIN, IDLE_TIMER_MAX_MIN)  # the agent's bounds
        self.idle_spin.setSuffix(" min")
        self.idle_spin.setValue(30)
        self.idle_spin.setKeyboardTracking(False)
        self.idle_state = QLabel("", self)
        self.idle_state.setObjectName("secondary")
        tip = ("The agent inside the process unloads its GPU models to host memory once "
               "they have been idle this long (no forward pass; before the first one, since "
               "the agent first saw them). Pinned models, models with training evidence and "
               "those the agent cannot move are left alone, and so is a model reloaded in the "
               f"last {RELOAD_GRACE_S:g} s. It works even when this app is not running.")
        for w in (self.idle_box, self.idle_spin, self.idle_state):
            w.setToolTip(tip)
        mhead.addWidget(self.idle_box)
        mhead.addWidget(self.idle_spin)
        mhead.addWidget(self.idle_state)
        models_lay.addSpacing(4)
        models_lay.addLayout(mhead)
        self.idle_box.toggled.connect(self._on_idle_toggled)
        self.idle_spin.valueChanged.connect(self._on_idle_minutes)
        self._idle_sent: object = ...  # last value asked for (... = none yet)

        self.model_model = ModelListModel(self)
        self.model_proxy = QSortFilterProxyModel(self)
        self.model_proxy.setSourceModel(self.model_model)
        self.model_proxy.setSortRole(MODEL_SORT_ROLE)
        self.model_proxy.setDynamicSortFilter(True)
        self.models_view = ModelTable(self.model_proxy, self)
        models_lay.addWidget(self.models_view, 1)
        self.models_view.selectionModel().selectionChanged.connect(self._on_model_selected)
        self.no_models_label = QLabel(texts.NO_MODELS, self)
        self.no_models_label.setObjectName("secondary")
        models_lay.addWidget(self.no_models_label)

        # Actions on the selected model.
        self.model_bar = QWidget(self)
        mbar = QHBoxLayout(self.model_bar)
        mbar.setContentsMargins(0, 0, 0, 0)
        mbar.setSpacing(8)
        self.unload_cpu_button = QPushButton("Unload to CPU", self.model_bar)
        self.unload_cpu_button.setObjectName("unloadCpuButton")
        self.unload_disk_button = QPushButton("Unload to disk", self.model_bar)
        self.unload_disk_button.setObjectName("unloadDiskButton")
        self.reload_button = QPushButton("Reload", self.model_bar)
        self.reload_button.setObjectName("reloadButton")
        self.pin_button = QPushButton("Pin", self.model_bar)
        self.pin_button.setObjectName("pinButton")
        self.force_button = QPushButton("Unload anyway…", self.model_bar)
        self.force_button.setObjectName("forceUnloadButton")
        self.force_button.setVisible(False)
        self.model_progress = QProgressBar(self.model_bar)
        self.model_progress.setObjectName("modelProgress")
        self.model_progress.setRange(0, 0)  # indeterminate
        self.model_progress.setTextVisible(False)
        self.model_progress.setFixedWidth(90)
        self.model_progress.setFixedHeight(10)
        self.model_progress.setVisible(False)
        self.model_result = plain_label(QLabel("", self.model_bar))
        self.model_result.setObjectName("modelResult")
        self.model_result.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.model_result.setWordWrap(True)  # a long result wraps, never cut mid-word
        self.model_result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        for b in (self.unload_cpu_button, self.unload_disk_button, self.reload_button,
                  self.pin_button, self.force_button):
            b.setAutoDefault(False)
            b.setEnabled(False)
            mbar.addWidget(b)
        mbar.addWidget(self.model_progress)
        mbar.addWidget(self.model_result, 1)
        models_lay.addWidget(self.model_bar)
        self.record_view = RecordView(self)  # "Record allocations…" and its table
        self.record_view.request.connect(self.request)
        models_lay.addWidget(self.record_view)
        self.unload_cpu_button.clicked.connect(lambda: self._request_unload("cpu"))
        self.unload_disk_button.clicked.connect(lambda: self._request_unload("disk"))
        self.reload_button.clicked.connect(self._request_reload)
        self.pin_button.clicked.connect(self._request_pin)
        self.force_button.clicked.connect(self._request_force)
        #: Model actions in flight / the last finished one, by model id (set by the window).
        self._pending: dict[str, object] = {}
        self._last: dict[str, object] = {}
        self._can_act = True
        self._selected_id: str | None = None
        self._bar_key: tuple | None = None
        self.anim_timer = QTimer(self)
        self.anim_timer.setInterval(80)
        self.anim_timer.timeout.connect(self.model_model.tick)

        foot = QHBoxLayout()
        foot.setSpacing(8)
        self.result_label = plain_label(QLabel("", self))
        self.result_label.setObjectName("actionResult")
        self.result_label.setWordWrap(True)  # on its own row: a long result wraps, never cut
        self.gc_button = QPushButton("Run gc", self)
        self.gc_button.setObjectName("gcButton")
        self.gc_button.setToolTip(GC_TIP)
        self.free_button = QPushButton("Free cache", self)
        self.free_button.setObjectName("freeCacheButton")
        self.terminate_button = QPushButton("Terminate…", self)
        self.terminate_button.setObjectName("terminateButton")
        self.close_button = QPushButton("Close", self)
        self.close_button.clicked.connect(self.close)
        self.free_button.clicked.connect(self._on_free)
        self.gc_button.clicked.connect(self._on_gc)
        self.terminate_button.clicked.connect(self._on_terminate)
        for b in (self.terminate_button, self.gc_button, self.free_button, self.close_button):
            b.setAutoDefault(False)
        outer.addWidget(self.result_label)
        foot.addStretch(1)
        foot.addWidget(self.terminate_button)
        foot.addWidget(self.gc_button)
        foot.addWidget(self.free_button)
        foot.addWidget(self.close_button)
        outer.addLayout(foot)
        self._apply_style()

    # -- public -----------------------------------------------------------------------------
    def set_process(self, pid: int, host: str = "") -> None:
        """Show process ``pid`` of ``host`` ("" this machine)."""
        if pid != self.pid or host != self.host:
            self.pid, self.host = pid, host
            self.report = None
            self._label = f"pid {pid}"
            self.result_label.setText("")
            self.result_label.setToolTip("")
            self._selected_id = None
            self._idle_sent = ...
            self.model_model.set_models((), 0.0)

    @property
    def label(self) -> str:
        return self._label

    def update_snapshot(self, snapshot: Snapshot, busy: bool = False, can_act: bool = True,
                        pending: Mapping[str, object] | None = None,
                        last: Mapping[str, object] | None = None,
                        idle_pending: bool = False,
                        stale: tuple[str, str | None] | None = None) -> None:
        """Follow ``snapshot`` (the process's host's).  ``pending`` / ``last``: this
        process's model actions in flight and the last finished one, by model id;
        ``idle_pending``: an idle-timer change is in flight; ``stale``: (state, reason)
        of a host that is not connected: its last figures, every action off."""
        pid = self.pid
        if pid is None:
            return
        self._why_not = "" if stale is None else stale_action(self.host, stale[0])
        self.host_notice.setVisible(stale is not None)
        if stale is not None:
            self.host_notice.setText(stale_notice(self.host, *stale))
            can_act = False
        report = snapshot.agents.get(pid)
        self.report = report
        procs = [(g, p) for g in snapshot.gpus for p in g.processes if p.pid == pid]
        if procs:
            p = procs[0][1]
            if p.name or p.command:
                self._label = process_label(p)
            command = p.command or p.name or NA
        else:
            command = " ".join(report.argv) if report and report.argv else NA
        title = f"{self._label} on {self.host}" if self.host else self._label
        self.title_label.setText(title)
        self.setWindowTitle(f"{title} — details")
        self.command_label.setText(command)
        self.command_label.setToolTip(plain_tip(command))
        server = holding(snapshot.servers, pid)
        self.server_view.set_server(server, snapshot, pending, last, can_act, self.host,
                                    self._why_not)
        cmd = install_commands(snapshot).get(pid)
        agentless = server is not None and report is None  # the server says what it holds
        for box in (self.facts_box, self.breakdown_box):  # (how to invite an agent stays)
            box.setVisible(not agentless or cmd is not None)
        for w in (self.models_box, self.gc_button, self.free_button):
            w.setVisible(not agentless)

        fill_facts(self.facts, pid, report, cmd)
        if stale is not None and report is not None:
            self.facts["Agent"].setText(f"its last report, from before {self.host} went away")
        errors = report.errors if report else ()
        self.errors_label.setVisible(bool(errors))
        if errors:
            self.errors_label.setText("⚠ " + "\n⚠ ".join(errors))

        rows = []
        if report is not None:
            for g, p in procs:
                rows.append((g, p, breakdown_of(report, g.index, p.gpu_memory, g.uuid)))
        scale = max((bar_total(b) for _, _, b in rows), default=0)
        while len(self.gpu_rows) < len(rows):
            row = BreakdownRow(self, name_width=150)
            self.gpu_rows_box.addWidget(row)
            self.gpu_rows.append(row)
        cache = None
        for row, (g, _p, b) in zip(self.gpu_rows, rows):
            dev = report.device_for_gpu(g.index, g.uuid) if report else None
            tip = breakdown_tooltip(f"{gpu_text(g.display_id)}: {g.name}", b)
            if dev is not None:
                retries = NA if dev.num_alloc_retries is None else dev.num_alloc_retries
                tip += (f"\n\nPeak allocated: {fmt_bytes(dev.peak_allocated)}"
                        f"\nPeak reserved: {fmt_bytes(dev.peak_reserved)}"
                        f"\nInactive split (fragmented): {fmt_bytes(dev.inactive_split)}"
                        f"\nAlloc retries: {retries}"
                        f"\nOOMs: {NA if dev.num_ooms is None else dev.num_ooms}")
            row.set(pid, f"GPU {split_id(g.display_id)[1]}", b, scale, tip)
            row.setVisible(True)
            if b.cache is not None:
                cache = (cache or 0) + b.cache
        for row in self.gpu_rows[len(rows):]:
            row.setVisible(False)
        self.no_gpu_label.setVisible(not rows)  # without an agent: no breakdown to draw
        self.no_gpu_label.setText(texts.NO_GPU if report or not procs else texts.NO_AGENT_GPU)
        if report is not None and not rows:  # the allocator's own figures say what is cached
            cache = sum_known(d.cache for d in report.devices)

        models = report.models if report else ()
        now = (report.received_at if report is not None and report.received_at
               else snapshot.timestamp)
        self._pending = dict(pending or {})
        self._last = dict(last or {})
        self._can_act = can_act
        self.model_model.set_models(models, now, self._pending)
        self._reselect()
        self.models_title.setText(f"Models ({len(models)})" if models else "Models")
        self.models_view.setVisible(bool(models))
        self.model_bar.setVisible(bool(models))
        self.no_models_label.setVisible(not models)
        self.no_models_label.setText(texts.NO_MODELS if report else texts.NO_AGENT_MODELS)
        moving = bool(self.model_model.moving_rows())
        if moving and not self.anim_timer.isActive():
            self.anim_timer.start()
        elif not moving and self.anim_timer.isActive():
            self.anim_timer.stop()
        self._update_model_bar()
        self._update_idle(report, idle_pending)
        self.record_view.set_report(pid, report, can_act, self.host, self._why_not)

        self.free_button.setText(free_button_text(cache, busy, all_=False))
        self.free_button.setEnabled(bool(cache) and report is not None and can_act and not busy)
        if self._why_not:
            self.free_button.setToolTip(plain_tip(self._why_not))
        elif busy:
            self.free_button.setToolTip("Freeing the cache…")
        elif report is None:
            self.free_button.setToolTip("The agent is not reporting")
        elif not can_act:
            self.free_button.setToolTip("Agent actions are not available")
        elif not cache:
            self.free_button.setToolTip("Nothing to free: the allocator holds no unused memory")
        else:
            self.free_button.setToolTip(
                f"gc.collect() + torch.cuda.empty_cache() in the process: returns about "
                f"{fmt_bytes(cache)} of cached memory to the driver")
        self.gc_button.setEnabled(report is not None and can_act and not busy)
        self.gc_button.setToolTip(plain_tip(self._why_not or GC_TIP))
        self.terminate_button.setEnabled(not self._why_not)
        self.terminate_button.setToolTip(plain_tip(self._why_not
                                                   or "Stop the process (asks you first)"))

    def show_result(self, text: str, tooltip: str = "", error: bool = False) -> None:
        self.result_label.setText(text)
        self.result_label.setToolTip(plain_tip(tooltip or text))
        color = pal.LEVEL_COLORS[pal.LEVEL_CRITICAL] if error else pal.hex_color(
            pal.foreground(self.palette()))
        self.result_label.setStyleSheet(f"color: {color};")

    # -- internals -----------------------------------------------------------------------------
    def _on_free(self) -> None:
        if self.pid is not None:
            self.request.emit(FreeCache.of(self.pid, self.host))

    def _on_gc(self) -> None:
        if self.pid is not None:
            self.request.emit(CollectGarbage(self.pid, self.host))

    def _on_terminate(self) -> None:
        if self.pid is not None:
            self.request.emit(Terminate(self.pid, host=self.host))

    def changeEvent(self, event) -> None:  # noqa: N802
        from PySide6.QtCore import QEvent

        if event.type() == QEvent.Type.PaletteChange:
            self._apply_style()
        super().changeEvent(event)

    def _apply_style(self) -> None:
        border = pal.hex_color(pal.faint(self.palette()))
        warn = pal.LEVEL_COLORS[pal.LEVEL_WARNING]
        self.setStyleSheet(
            f"QFrame#detailRule {{ color: {border}; }}"
            "QTableView#modelTable::item { padding: 0px 6px; }"
            + pal.view_rules(self.palette(), "modelTable"))
        self.errors_label.setStyleSheet(f"color: {warn};")
        self.host_notice.setStyleSheet(f"color: {warn};")


__all__ = ["ProcessDetailView"]
